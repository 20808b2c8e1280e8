package jp.rt;

/**
 * Cost of one report point, measured on the runtime's own path: Rt.tick with the activation
 * counter run out calls ThreadState.activate, which calls the configured profiler's report.
 * Loaded from -Xbootclasspath/a so that it shares the package (and the loader) of jp.rt.
 *
 * <p>args: nodes changed per report (0: none), reports per batch, batches. Prints the fastest and
 * the median batch in ns per report (the fastest filters out a shared machine's noise). With the
 * usdt profiler, only batches during which the probe's semaphore did not change count (a jpd on
 * the host may attach to this JVM); "batches=" says how many.
 */
public class UsdtBench {
    public static void main(String[] args) {
        int changed = Integer.parseInt(args[0]);
        int perBatch = Integer.parseInt(args[1]);
        int batches = Integer.parseInt(args[2]);
        ThreadState st = new ThreadState(Thread.currentThread(), Rt.granularity);
        Rt.profiler.register(st.thread, st.root);
        Node[] nodes = new Node[Math.max(changed, 1)];
        for (int i = 0; i < nodes.length; i++) {
            nodes[i] = st.root.child(i);
        }
        Node at = nodes[0];
        boolean usdt = Rt.profiler instanceof UsdtProfiler;
        boolean tracer = usdt && UsdtProfiler.listening();
        double[] ns = new double[batches];
        int kept = 0;
        for (int b = 0; b < batches; b++) {
            boolean before = usdt && UsdtProfiler.listening();
            long t0 = System.nanoTime();
            for (int i = 0; i < perBatch; i++) {
                for (int j = 0; j < changed; j++) {
                    Node n = nodes[j];
                    n.calls++;
                    n.bytecodes += 7;
                }
                st.counter = 1;
                Rt.tick(at, 1);
            }
            double t = (System.nanoTime() - t0) / (double) perBatch;
            if ((usdt && UsdtProfiler.listening()) == before && before == tracer) {
                ns[kept++] = t;
            }
        }
        if (kept == 0) {
            System.out.println("batches=0");
            return;
        }
        double[] k = java.util.Arrays.copyOf(ns, kept);
        java.util.Arrays.sort(k);
        System.out.printf("batches=%d listening=%b min_ns_per_report=%.1f median_ns_per_report=%.1f reports=%d%n",
                kept, tracer, k[0], k[kept / 2], (long) perBatch * batches);
    }
}
