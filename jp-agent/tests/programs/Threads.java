import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

// Several threads: per-thread trees merged into one; threads that end early
// (normally and by an uncaught exception) while others still run; work run by
// a JDK thread pool (application code called from JDK worker frames).
public class Threads {
    static int work(int n) {
        int s = 0;
        for (int i = 0; i < n; i++) s += step(i);
        return s;
    }

    static int step(int i) { return i % 7; }

    static class Worker extends Thread {
        final int n;
        volatile int result;
        Worker(int n) { this.n = n; }
        @Override public void run() { result = work(n); }
    }

    static void failing() {
        work(3);
        throw new IllegalStateException("thread ends early by an exception (expected)");
    }

    public static void main(String[] args) throws Exception {
        Worker[] ws = new Worker[4];
        for (int i = 0; i < ws.length; i++) {
            ws[i] = new Worker(100 * (i + 1));
            ws[i].start();
        }
        Thread early = new Thread(() -> work(5));
        early.start();
        early.join();
        Thread dies = new Thread(Threads::failing);
        dies.setUncaughtExceptionHandler((t, e) -> System.out.println("uncaught: " + e.getMessage()));
        dies.start();
        dies.join();
        long total = 0;
        for (Worker w : ws) { w.join(); total += w.result; }
        ExecutorService pool = Executors.newFixedThreadPool(2);
        Future<Integer> a = pool.submit(() -> work(50));
        Future<Integer> b = pool.submit(() -> work(60));
        total += a.get() + b.get();
        pool.shutdown();
        System.out.println(total);
    }
}
