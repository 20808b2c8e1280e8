import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

// Exceptions leaving a constructor before its super(...) call (while `this` is
// uninitialized, where no catch-all handler may cover the code), caught by an
// instrumented caller, by JDK code (a thread pool's FutureTask) that then calls
// more application code on the same thread, and by nobody (the thread's uncaught
// exception handler, application code, runs next).
public class CtorThrow {
    static class Base {
        final int v;
        Base(int v) { this.v = v; }
    }

    static class Bad extends Base {
        Bad(int d) { super(check(d)); }
        static int check(int d) {
            if (d == 0) throw new IllegalArgumentException("d == 0");
            return 100 / d;
        }
    }

    static int work(int n) {
        int s = 0;
        for (int i = 0; i < n; i++) s += i;
        return s;
    }

    static int make(int d) {
        try {
            return new Bad(d).v;
        } catch (IllegalArgumentException e) {
            return -1;
        }
    }

    public static void main(String[] args) throws Exception {
        int t = make(0) + make(5) + work(3);
        ExecutorService pool = Executors.newSingleThreadExecutor();
        Future<Integer> f1 = pool.submit(() -> new Bad(0).v);
        Future<Integer> f2 = pool.submit(() -> work(10));
        try { f1.get(); } catch (java.util.concurrent.ExecutionException e) { t += 1000; }
        t += f2.get();
        pool.shutdown();
        Thread th = new Thread(() -> new Bad(0));
        th.setUncaughtExceptionHandler((x, e) -> System.out.println("uncaught " + e.getMessage() + " " + work(4)));
        th.start();
        th.join();
        System.out.println(t);
    }
}
