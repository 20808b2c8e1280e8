// jpctl diff's deterministic program: the base version.
public class Loop {
    static final int N = 1000;

    static int work(int i) {
        return i * 3 + 1;
    }

    static void tick() {}

    public static void main(String[] args) {
        int s = 0;
        for (int i = 0; i < N; i++) {
            s += work(i);
        }
        tick();
        System.out.println(s);
    }
}
