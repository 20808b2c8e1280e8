package jp.rt;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

// bench jvm, entry: what a call costs with today's method entry against an entry that is
// handed the caller's context (CCCP's idea: Moret, Binder, Villazon, PEPM 2009), measured
// side by side in one JVM so that the difference is not lost in the spread between JVMs.
// The methods are instrumented by hand the way the rewriter instruments them with
// bba=default (docs/agent-design.md); jp.rt is never instrumented by the agent, so
// nothing is added twice. Usage (the class on the boot class path, beside the runtime):
//   java -Xbootclasspath/a:DIR -agentpath:libjpagent.so=profiler=jp.rt.EntryCost$Quiet \
//        jp.rt.EntryCost OP ROUNDS
// OP is `static` (a tiny static call in a loop) or `recursion` (fib(20), 21891 calls).
// Prints `entry OP ARM NS` per measured round, ARM one of none, today, passed, kept: CPU
// time of this thread per call; the arms run in rotating order, ROUNDS warm-up rounds first.
public final class EntryCost {
    /** Profiles nothing: this harness times the entry, not a profiler. */
    public static final class Quiet implements Profiler {
        public void register(Thread t, Node root) {}

        public int report(Node root, Node current) {
            return Rt.granularity();
        }
    }

    // Method ids far above any real method's, so that these contexts stand apart.
    private static final int MIX = 1 << 29, LOOP = MIX + 1, FIB = MIX + 2, TOP = MIX + 3;

    // ---- none: the program as written ----
    static int mixN(int i) { return i * 31 + 7; }

    static long loopN(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) s += mixN(i);
        return s;
    }

    static int fibN(int n) { return n < 2 ? n : fibN(n - 1) + fibN(n - 2); }

    // ---- today: each method finds its caller's context through the thread's state ----
    static int mixT(int i) {
        Node ctx = Rt.enter(MIX, 4);
        Rt.count(ctx, 4);
        int r = i * 31 + 7;
        Rt.exit(ctx);
        return r;
    }

    static long loopT(int n) {
        Node ctx = Rt.enter(LOOP, 10);
        Rt.count(ctx, 3);
        long s = 0;
        for (int i = 0; i < n; i++) {
            Rt.tick(ctx, 10);
            Rt.count(ctx, 8);
            s += mixT(i);
        }
        Rt.count(ctx, 2);
        Rt.exit(ctx);
        return s;
    }

    static int fibT(int n) {
        Node ctx = Rt.enter(FIB, 12);
        Rt.count(ctx, 3);
        if (n < 2) {
            Rt.count(ctx, 2);
            Rt.exit(ctx);
            return n;
        }
        Rt.count(ctx, 4);
        int r = fibT(n - 1);
        Rt.count(ctx, 4);
        r += fibT(n - 2);
        Rt.count(ctx, 1);
        Rt.exit(ctx);
        return r;
    }

    // ---- passed: the caller hands its context to the callee (an extra argument) ----
    /** The entry of a method whose caller passed its context {@code p}: no thread lookup. */
    static Node enterFrom(Node p, int mid, int k) {
        Node n = p.child(mid);
        n.calls++;
        ThreadState s = n.state;
        if ((s.counter -= k) <= 0) {
            s.activate(n);
        }
        return n;
    }

    static int mixP(int i, Node p) {
        Node ctx = enterFrom(p, MIX, 4);
        Rt.count(ctx, 4);
        return i * 31 + 7;
    }

    static long loopP(int n) {
        Node ctx = Rt.enter(LOOP, 10);
        Rt.count(ctx, 3);
        long s = 0;
        for (int i = 0; i < n; i++) {
            Rt.tick(ctx, 10);
            Rt.count(ctx, 8);
            s += mixP(i, ctx);
        }
        Rt.count(ctx, 2);
        Rt.exit(ctx);
        return s;
    }

    static int fibP(int n, Node p) {
        Node ctx = enterFrom(p, FIB, 12);
        Rt.count(ctx, 3);
        if (n < 2) {
            Rt.count(ctx, 2);
            return n;
        }
        Rt.count(ctx, 4);
        int r = fibP(n - 1, ctx);
        Rt.count(ctx, 4);
        r += fibP(n - 2, ctx);
        Rt.count(ctx, 1);
        return r;
    }

    // ---- kept: passed as above, but the thread's current context is still set at entry and
    // restored at exit, so that callees entered the usual way (virtual calls, calls from
    // code the agent did not rewrite) find it: the design that mixes with today's entry ----
    /** enterFrom, and the callee's context becomes the thread's current one. */
    static Node enterKept(Node p, int mid, int k) {
        Node n = p.child(mid);
        n.calls++;
        ThreadState s = n.state;
        s.current = n.wid;
        if ((s.counter -= k) <= 0) {
            s.activate(n);
        }
        return n;
    }

    static int mixK(int i, Node p) {
        Node ctx = enterKept(p, MIX, 4);
        Rt.count(ctx, 4);
        int r = i * 31 + 7;
        Rt.exit(ctx);
        return r;
    }

    static long loopK(int n) {
        Node ctx = Rt.enter(LOOP, 10);
        Rt.count(ctx, 3);
        long s = 0;
        for (int i = 0; i < n; i++) {
            Rt.tick(ctx, 10);
            Rt.count(ctx, 8);
            s += mixK(i, ctx);
        }
        Rt.count(ctx, 2);
        Rt.exit(ctx);
        return s;
    }

    static int fibK(int n, Node p) {
        Node ctx = enterKept(p, FIB, 12);
        Rt.count(ctx, 3);
        if (n < 2) {
            Rt.count(ctx, 2);
            Rt.exit(ctx);
            return n;
        }
        Rt.count(ctx, 4);
        int r = fibK(n - 1, ctx);
        Rt.count(ctx, 4);
        r += fibK(n - 2, ctx);
        Rt.count(ctx, 1);
        Rt.exit(ctx);
        return r;
    }

    static int fibTopK(int n) {
        Node ctx = Rt.enter(TOP, 2);
        int r = fibK(n, ctx);
        Rt.exit(ctx);
        return r;
    }

    static int fibTopP(int n) {
        Node ctx = Rt.enter(TOP, 2);
        int r = fibP(n, ctx);
        Rt.exit(ctx);
        return r;
    }

    static final String[] ARMS = {"none", "today", "passed", "kept"};
    static final int CALLS = 2_000_000, FIB_N = 20, FIB_CALLS = 21891, FIB_REPS = 90;
    static long sink;

    /** One round of {@code op} in {@code arm}; returns the calls it made. */
    static long round(String op, int arm) {
        if (op.equals("static")) {
            sink += arm == 0 ? loopN(CALLS) : arm == 1 ? loopT(CALLS) : arm == 2 ? loopP(CALLS) : loopK(CALLS);
            return CALLS;
        }
        for (int k = 0; k < FIB_REPS; k++) {
            sink += arm == 0 ? fibN(FIB_N) : arm == 1 ? fibT(FIB_N) : arm == 2 ? fibTopP(FIB_N) : fibTopK(FIB_N);
        }
        return (long) FIB_CALLS * FIB_REPS;
    }

    public static void main(String[] a) {
        String op = a[0];
        if (!op.equals("static") && !op.equals("recursion")) {
            throw new IllegalArgumentException("unknown operation " + op);
        }
        int rounds = Integer.parseInt(a[1]);
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        for (int r = -rounds; r < rounds; r++) {
            for (int i = 0; i < ARMS.length; i++) {
                int arm = (i + Math.floorMod(r, ARMS.length)) % ARMS.length;
                long c0 = mx.getCurrentThreadCpuTime();
                long calls = round(op, arm);
                long c1 = mx.getCurrentThreadCpuTime();
                if (r >= 0) {
                    System.out.println("entry " + op + " " + ARMS[arm] + " " + (c1 - c0) / (double) calls);
                }
            }
        }
        System.out.println("sink " + (sink & 1));
    }
}
