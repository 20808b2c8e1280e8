import java.io.FileInputStream;
import java.io.IOException;

// CPU per context (e2e `cpu`): `CpuSplit MODE SECONDS THREADS`.
// - split: each thread runs a() and b() in turn; a() does twice the iterations of b() on
//   the same loop (work), so CPU(a) / CPU(b) is 2 up to sampling noise; readZero() reads
//   /dev/zero, so the kernel's read_zero runs under it.
// - alloc: each thread allocates short-lived arrays, so that the GC threads work.
// - bursts: THREADS short-lived threads, one after another, each spinning in burst() for
//   SECONDS * 100 ms of its own CPU time; prints "cpu NS", the CPU time they used in all.
// Prints "started" once main runs, "done" when the work is over, then waits for a line on
// stdin (so that jpd can be asked while the JVM is still alive) and exits.
public class CpuSplit {
    static volatile long sink;

    static long work(long n) {
        long s = 0;
        for (long i = 0; i < n; i++) {
            s += i * 31 ^ (s >>> 3);
            if ((i & 1023) == 0) {
                s += tick(i);
            }
        }
        return s;
    }

    // A leaf that work() calls now and then: its return must give the thread's context
    // back to work(), whose loop is where the CPU goes.
    static long tick(long i) {
        return i >>> 7;
    }

    static void a() {
        sink += work(400_000);
    }

    static void b() {
        sink += work(200_000);
    }

    static void readZero(FileInputStream in, byte[] buf) throws IOException {
        for (int i = 0; i < 4; i++) {
            sink += in.read(buf);
        }
    }

    static void split(long end) {
        byte[] buf = new byte[1 << 16];
        try (FileInputStream in = new FileInputStream("/dev/zero")) {
            while (System.nanoTime() < end) {
                a();
                b();
                readZero(in, buf);
            }
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    static Object[] keep = new Object[64];

    static void allocate(long end) {
        int i = 0;
        while (System.nanoTime() < end) {
            keep[i++ & 63] = new long[1024 + (i & 255)];
        }
    }

    static void burst(long cpuNanos) {
        java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory.getThreadMXBean();
        long end = mx.getCurrentThreadCpuTime() + cpuNanos;
        while (mx.getCurrentThreadCpuTime() < end) {
            sink += work(20_000);
        }
    }

    /** Short-lived threads one after another; returns the CPU time they used (ns). */
    static long bursts(int threads, long cpuNanos) throws InterruptedException {
        long[] used = new long[1];
        for (int t = 0; t < threads; t++) {
            Thread th = new Thread(() -> {
                burst(cpuNanos);
                long mine = java.lang.management.ManagementFactory.getThreadMXBean().getCurrentThreadCpuTime();
                synchronized (used) {
                    used[0] += mine;
                }
            }, "burst-" + t);
            th.start();
            th.join();
        }
        return used[0];
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        if (mode.equals("bursts")) {
            System.out.println("started");
            System.out.flush();
            long used = bursts(Integer.parseInt(args[2]), Long.parseLong(args[1]) * 100_000_000L);
            System.out.println("cpu " + used);
            System.out.println("done");
            System.out.flush();
            System.in.read();
            return;
        }
        long end = System.nanoTime() + Long.parseLong(args[1]) * 1_000_000_000L;
        int threads = Integer.parseInt(args[2]);
        System.out.println("started");
        System.out.flush();
        Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            ts[t] = new Thread(() -> {
                if (mode.equals("split")) {
                    split(end);
                } else {
                    allocate(end);
                }
            }, "worker-" + t);
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
