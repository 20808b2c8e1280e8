/**
 * `cargo xtask bench cpu`: THREADS threads named `load-N` calling small methods until the
 * JVM is killed. SLEEP_MS 0: each thread spins (the sampler bench: every sample lands in a
 * JVM thread); SLEEP_MS > 0: each thread makes about 19 × WORK calls, then sleeps SLEEP_MS
 * (jpd's bench: light periodic work, the context changes with every call, the machine is
 * not saturated). Prints `ready` once every thread runs.
 *
 * Usage: CpuLoad THREADS SLEEP_MS WORK
 */
public final class CpuLoad {
    static int leaf(int x) {
        return (x * 31) ^ (x >>> 3);
    }

    static int mid(int x) {
        int s = 0;
        for (int i = 0; i < 8; i++) {
            s += leaf(x + i);
        }
        return s;
    }

    static int top(int x) {
        return mid(x) + mid(x + 1);
    }

    public static void main(String[] args) throws Exception {
        int threads = Integer.parseInt(args[0]);
        final long sleepMs = Long.parseLong(args[1]);
        final int work = Integer.parseInt(args[2]);
        final java.util.concurrent.CountDownLatch started =
                new java.util.concurrent.CountDownLatch(threads);
        for (int t = 0; t < threads; t++) {
            final int seed = t;
            Thread th = new Thread(() -> {
                started.countDown();
                int s = seed;
                while (true) {
                    for (int i = 0; i < work; i++) {
                        s += top(s + i);
                    }
                    if (sleepMs > 0) {
                        try {
                            Thread.sleep(sleepMs);
                        } catch (InterruptedException e) {
                            break;
                        }
                    }
                    // Keeps the loop's result alive (never true in practice).
                    if (s == 42 && seed < 0) {
                        System.out.println(s);
                    }
                }
            }, "load-" + t);
            th.start();
        }
        started.await();
        System.out.println("ready");
        System.out.flush();
    }
}
