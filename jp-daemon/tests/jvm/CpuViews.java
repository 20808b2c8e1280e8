// CPU in jpctl's views (e2e `cpu_views`): `CpuViews SECONDS THREADS`. Each thread runs
// a() and b() in turn until SECONDS are over; each spins in its own body (no callee, so
// the CPU is in the method's own context), a() for twice the iterations of b() on the
// same loop: CPU(a) / CPU(b) is 2 up to sampling noise, and both are children of spin().
// Prints "started" once main runs, "done" when the work is over, then waits for a line on
// stdin (so that jpd can be asked while the JVM is still alive) and exits.
public class CpuViews {
    static volatile long sink;

    static long a() {
        long s = 0;
        for (long i = 0; i < 400_000; i++) {
            s += i * 31 ^ (s >>> 3);
        }
        return s;
    }

    static long b() {
        long s = 0;
        for (long i = 0; i < 200_000; i++) {
            s += i * 31 ^ (s >>> 3);
        }
        return s;
    }

    static void spin(long end) {
        while (System.nanoTime() < end) {
            sink += a();
            sink += b();
        }
    }

    public static void main(String[] args) throws Exception {
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        int threads = Integer.parseInt(args[1]);
        System.out.println("started");
        System.out.flush();
        Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            ts[t] = new Thread(() -> spin(end), "worker-" + t);
            ts[t].start();
        }
        for (Thread t : ts) {
            t.join();
        }
        System.out.println("done");
        System.out.flush();
        System.in.read();
    }
}
