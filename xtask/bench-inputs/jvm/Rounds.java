import java.lang.management.CompilationMXBean;
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

    /** Most milliseconds of JIT compilation in a round that still count as a quiet JIT. */
    static final long QUIET_JIT_MS = 2;
    /** The warm-up stops waiting for a quiet JIT after this long. */
    static final long MAX_WARMUP_MS = 60_000;

    /**
     * At least `warmupRounds` and `warmupMs` of warm-up, then `measured` rounds. With
     * -Drounds.jitQuiet=N the warm-up also lasts until N rounds in a row ran while the JIT
     * compilers spent at most QUIET_JIT_MS (instrumented code takes C2 two to three times
     * as long to compile: a fixed warm-up measured it still compiling), at most
     * MAX_WARMUP_MS; the summary line says whether the JIT went quiet.
     */
    static void run(Work w, int warmupRounds, long warmupMs, int measured) throws Exception {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
        int wantQuiet = Integer.getInteger("rounds.jitQuiet", 0);
        long start = System.nanoTime();
        int warm = 0;
        int quiet = 0;
        long jitBefore = jit.getTotalCompilationTime();
        while (true) {
            long ms = (System.nanoTime() - start) / 1_000_000;
            boolean fixedDone = warm >= warmupRounds && ms >= warmupMs;
            if (fixedDone && (quiet >= wantQuiet || ms >= MAX_WARMUP_MS)) break;
            time(w, mx, warm++);
            long jitNow = jit.getTotalCompilationTime();
            quiet = jitNow - jitBefore <= QUIET_JIT_MS ? quiet + 1 : 0;
            jitBefore = jitNow;
        }
        // For benches that keep the JVM running and act on it once it is warm.
        System.out.println("warmed up " + warm + " jit_quiet " + (quiet >= wantQuiet));
        for (int i = 0; i < measured; i++) time(w, mx, warm + i);
        System.out.println("rounds warmup " + warm + " measured " + measured + " sink " + (sink & 1)
                + " jit_quiet " + (quiet >= wantQuiet));
    }

    /**
     * With -Drounds.allThreadsCpu=true a round's CPU is that of all the JVM's Java threads
     * (not its JIT and GC threads, as for the calling thread alone): for work that runs on
     * other threads than the caller (a virtual thread's runs on its carrier). The process's
     * CPU time would do too, but the JVM reads it at the clock tick's resolution.
     */
    static final boolean ALL_THREADS_CPU = Boolean.getBoolean("rounds.allThreadsCpu");

    private static long cpuNow(ThreadMXBean mx) {
        if (!ALL_THREADS_CPU) {
            return mx.getCurrentThreadCpuTime();
        }
        long sum = 0;
        for (long t : mx.getAllThreadIds()) {
            long ns = mx.getThreadCpuTime(t);
            if (ns > 0) sum += ns;
        }
        return sum;
    }

    private static void time(Work w, ThreadMXBean mx, int i) throws Exception {
        long c0 = cpuNow(mx);
        long t0 = System.nanoTime();
        sink += w.round();
        long t1 = System.nanoTime();
        long c1 = cpuNow(mx);
        System.out.println("round " + i + " cpu_ns " + (c1 - c0) + " wall_ns " + (t1 - t0));
    }
}
