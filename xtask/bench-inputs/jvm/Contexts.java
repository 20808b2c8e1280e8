import java.lang.management.ManagementFactory;
import java.lang.management.MemoryMXBean;
import java.util.concurrent.CountDownLatch;

// bench jvm, contexts: branching recursion whose calling contexts a depth controls. Ten
// methods each call all ten until the depth is reached, so one traversal from m0 makes
// (10^(DEPTH+1) - 1) / 9 calls, each in a context of its own. Usage:
//   Contexts DEPTH TRAVERSALS WARMUP_ROUNDS WARMUP_MS MEASURED
// A worker thread traverses TRAVERSALS times a round (timed as Rounds does); then the main
// thread measures the heap after GC while the worker is alive (its tree) and after it ended
// (the merged tree), each against the heap before the worker started:
// `heap thread_bytes N merged_bytes N contexts N`.
public class Contexts {
    static long leaves;

    public static void main(String[] a) throws Exception {
        int depth = Integer.parseInt(a[0]);
        int traversals = Integer.parseInt(a[1]);
        long contexts = 0;
        for (int d = 0, level = 1; d <= depth; d++, level *= 10) contexts += level;
        long before = usedAfterGc();
        CountDownLatch measured = new CountDownLatch(1);
        CountDownLatch measuredHeap = new CountDownLatch(1);
        Throwable[] failed = {null};
        Thread worker = new Thread(() -> {
            try {
                Rounds.run(() -> {
                    for (int i = 0; i < traversals; i++) m0(depth);
                    return leaves;
                }, Integer.parseInt(a[2]), Long.parseLong(a[3]), Integer.parseInt(a[4]));
                measured.countDown();
                measuredHeap.await();
            } catch (Throwable t) {
                failed[0] = t;
                measured.countDown();
            }
        }, "contexts");
        worker.start();
        measured.await();
        if (failed[0] != null) throw new RuntimeException(failed[0]);
        long live = usedAfterGc();
        measuredHeap.countDown();
        worker.join();
        long ended = usedAfterGc();
        System.out.println("heap thread_bytes " + (live - before) + " merged_bytes " + (ended - before)
            + " contexts " + contexts + " calls_per_round " + contexts * traversals);
    }

    static long usedAfterGc() {
        MemoryMXBean m = ManagementFactory.getMemoryMXBean();
        for (int i = 0; i < 3; i++) System.gc();
        return m.getHeapMemoryUsage().getUsed();
    }

    static void m0(int d) { if (d == 0) { leaves++; return; } m0(d - 1); m1(d - 1); m2(d - 1); m3(d - 1); m4(d - 1); m5(d - 1); m6(d - 1); m7(d - 1); m8(d - 1); m9(d - 1); }
    static void m1(int d) { if (d == 0) { leaves++; return; } m0(d - 1); m1(d - 1); m2(d - 1); m3(d - 1); m4(d - 1); m5(d - 1); m6(d - 1); m7(d - 1); m8(d - 1); m9(d - 1); }
    static void m2(int d) { if (d == 0) { leaves++; return; } m0(d - 1); m1(d - 1); m2(d - 1); m3(d - 1); m4(d - 1); m5(d - 1); m6(d - 1); m7(d - 1); m8(d - 1); m9(d - 1); }
    static void m3(int d) { if (d == 0) { leaves++; return; } m0(d - 1); m1(d - 1); m2(d - 1); m3(d - 1); m4(d - 1); m5(d - 1); m6(d - 1); m7(d - 1); m8(d - 1); m9(d - 1); }
    static void m4(int d) { if (d == 0) { leaves++; return; } m0(d - 1); m1(d - 1); m2(d - 1); m3(d - 1); m4(d - 1); m5(d - 1); m6(d - 1); m7(d - 1); m8(d - 1); m9(d - 1); }
    static void m5(int d) { if (d == 0) { leaves++; return; } m0(d - 1); m1(d - 1); m2(d - 1); m3(d - 1); m4(d - 1); m5(d - 1); m6(d - 1); m7(d - 1); m8(d - 1); m9(d - 1); }
    static void m6(int d) { if (d == 0) { leaves++; return; } m0(d - 1); m1(d - 1); m2(d - 1); m3(d - 1); m4(d - 1); m5(d - 1); m6(d - 1); m7(d - 1); m8(d - 1); m9(d - 1); }
    static void m7(int d) { if (d == 0) { leaves++; return; } m0(d - 1); m1(d - 1); m2(d - 1); m3(d - 1); m4(d - 1); m5(d - 1); m6(d - 1); m7(d - 1); m8(d - 1); m9(d - 1); }
    static void m8(int d) { if (d == 0) { leaves++; return; } m0(d - 1); m1(d - 1); m2(d - 1); m3(d - 1); m4(d - 1); m5(d - 1); m6(d - 1); m7(d - 1); m8(d - 1); m9(d - 1); }
    static void m9(int d) { if (d == 0) { leaves++; return; } m0(d - 1); m1(d - 1); m2(d - 1); m3(d - 1); m4(d - 1); m5(d - 1); m6(d - 1); m7(d - 1); m8(d - 1); m9(d - 1); }
}
