// Non-ASCII class and method names: the profile must carry them intact (JSON is UTF-8).
public class Unicode {
    static class Grüße {
        int zähle(int n) {
            int s = 0;
            for (int i = 0; i < n; i++) s += naïve(i);
            return s;
        }

        static int naïve(int x) {
            return x * 3;
        }
    }

    static int 計算(int a) {
        return a + 1;
    }

    public static void main(String[] args) {
        System.out.println(new Grüße().zähle(4) + 計算(1));
    }
}
