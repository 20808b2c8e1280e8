// A wide, deep tree for the USDT tests: step(depth, x) picks one of eight methods by the low
// three bits of x, so depth 5 gives 8^5 leaf contexts (about 75 000 nodes): a thread's full
// tree spans many records. args[0] = rounds of main (each a few million bytecodes), args[1] =
// threads, which run twice as many rounds (so they outlive main's); two more threads run one
// round each and end before main starts its rounds; main prints "round N" after each of its
// rounds (the resync test writes new generations at given rounds).
public class Bushy {
    static long sink;

    static void m0(int d, int x) { step(d, x); }
    static void m1(int d, int x) { step(d, x); }
    static void m2(int d, int x) { step(d, x); }
    static void m3(int d, int x) { step(d, x); }
    static void m4(int d, int x) { step(d, x); }
    static void m5(int d, int x) { step(d, x); }
    static void m6(int d, int x) { step(d, x); }
    static void m7(int d, int x) { step(d, x); }

    static void step(int d, int x) {
        if (d == 0) {
            sink += x;
            return;
        }
        int y = x >>> 3;
        switch (x & 7) {
            case 0: m0(d - 1, y); break;
            case 1: m1(d - 1, y); break;
            case 2: m2(d - 1, y); break;
            case 3: m3(d - 1, y); break;
            case 4: m4(d - 1, y); break;
            case 5: m5(d - 1, y); break;
            case 6: m6(d - 1, y); break;
            default: m7(d - 1, y); break;
        }
    }

    static void rounds(int n, boolean print) {
        for (int r = 0; r < n; r++) {
            for (int x = 0; x < 1 << 15; x++) {
                step(5, x);
            }
            if (print) {
                System.out.println("round " + r);
                System.out.flush();
            }
        }
    }

    public static void main(String[] args) throws Exception {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 2;
        int threads = args.length > 1 ? Integer.parseInt(args[1]) : 1;
        Thread[] ts = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            ts[i] = new Thread(() -> rounds(2 * n, false), "bushy-" + i);
            ts[i].start();
        }
        Thread[] early = new Thread[2];
        for (int i = 0; i < early.length; i++) {
            early[i] = new Thread(() -> rounds(1, false), "early-" + i);
            early[i].start();
        }
        for (Thread t : early) {
            t.join();
        }
        rounds(n, true);
        for (Thread t : ts) {
            t.join();
        }
        System.out.println(sink);
    }
}
