import java.io.File;

/**
 * `cargo xtask bench fleet`: THREADS threads calling small methods until the file STOP
 * exists (checked every few thousand iterations), then a normal exit. Each thread pauses
 * PAUSE_MS (third argument, 1 by default) between rounds of calls.
 */
public final class FleetWork {
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

    public static void main(String[] args) throws Exception {
        int threads = Integer.parseInt(args[0]);
        final File stop = new File(args[1]);
        final long pauseMs = args.length > 2 ? Long.parseLong(args[2]) : 1;
        Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final int seed = t;
            ts[t] = new Thread(() -> {
                int s = seed;
                while (true) {
                    for (int i = 0; i < 5000; i++) {
                        s += mid(s + i);
                    }
                    if (stop.exists()) {
                        break;
                    }
                    try {
                        Thread.sleep(pauseMs); // 50 threads on 2 cores: leave some air
                    } catch (InterruptedException e) {
                        break;
                    }
                }
                if (s == 42) {
                    System.out.println(s);
                }
            }, "fleet-" + t);
            ts[t].start();
        }
        for (Thread t : ts) {
            t.join();
        }
    }
}
