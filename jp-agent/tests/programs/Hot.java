// Hot code: enough iterations that the JIT compiles the instrumented methods
// (C1 and C2, with on-stack replacement of the long loops). Counts must stay exact
// in compiled code; the oracle runs interpreted.
public class Hot {
    private int state = 1;

    int step(int x) {
        state = state * 1103515245 + 12345;
        return (state >>> 16) % 7 + x;
    }

    static long mix(long a, int b) {
        return (a << 5) - a + b;
    }

    static int branchy(int k) {
        if ((k & 3) == 0) return k / 3;
        if ((k & 3) == 1) return k * 5;
        return k % 11 == 0 ? -k : k + 1;
    }

    public static void main(String[] args) {
        Hot h = new Hot();
        long acc = 0;
        for (int i = 0; i < 60000; i++) {
            acc = mix(acc, h.step(i));
            acc += branchy(i);
        }
        int[] data = new int[5000];
        for (int r = 0; r < 20; r++)
            for (int i = 0; i < data.length; i++)
                data[i] += (i * r) ^ (data[(i + 1) % data.length]);
        long s = 0;
        for (int v : data) s += v;
        System.out.println(acc + " " + s);
    }
}
