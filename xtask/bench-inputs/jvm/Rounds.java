import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

// bench jvm: runs one unit of work in rounds inside this JVM and prints each round's
// CPU time of the calling thread (the work runs on it; JIT compiler and GC threads do not
// count) and wall time, one line per round: `round I cpu_ns N wall_ns N`. Warm-up rounds
// are printed too (the bench checks that the last rounds have settled); the bench keeps
// only the last `measured` rounds.
final class Rounds {
    interface Work {
        /** One round; returns something derived from the work so that it cannot be elided. */
        long round() throws Exception;
    }

    static long sink;

    /** At least `warmupRounds` and `warmupMs` of warm-up, then `measured` rounds. */
    static void run(Work w, int warmupRounds, long warmupMs, int measured) throws Exception {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        long start = System.nanoTime();
        int warm = 0;
        while (warm < warmupRounds || (System.nanoTime() - start) / 1_000_000 < warmupMs) {
            time(w, mx, warm++);
        }
        for (int i = 0; i < measured; i++) time(w, mx, warm + i);
        System.out.println("rounds warmup " + warm + " measured " + measured + " sink " + (sink & 1));
    }

    private static void time(Work w, ThreadMXBean mx, int i) throws Exception {
        long c0 = mx.getCurrentThreadCpuTime();
        long t0 = System.nanoTime();
        sink += w.round();
        long t1 = System.nanoTime();
        long c1 = mx.getCurrentThreadCpuTime();
        System.out.println("round " + i + " cpu_ns " + (c1 - c0) + " wall_ns " + (t1 - t0));
    }
}
