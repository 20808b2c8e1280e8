// jpctl diff's deterministic program: the base version with one extra call of tick() per
// loop iteration (one invokestatic in main, one return in tick, N times).
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
            tick();
        }
        tick();
        System.out.println(s);
    }
}
