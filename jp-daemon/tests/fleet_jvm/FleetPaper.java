import java.io.BufferedReader;
import java.io.InputStreamReader;

/**
 * The JP paper's example, run on demand: every "run" line on stdin runs f() once in a
 * new thread (its tree reaches jpd when the thread ends) and answers "done"; "spin MS"
 * runs f() over and over for MS milliseconds in a new thread (CPU for jpd's sampler to
 * join to its contexts), then answers "done"; "quit" exits. f() calls h() and g(i) for i = 1..10; g(i) calls h() i times.
 */
public class FleetPaper {
    static int sink;

    static void h() {
        sink++;
    }

    static void g(int n) {
        for (int i = 0; i < n; i++) {
            h();
        }
    }

    static void f() {
        h();
        for (int i = 1; i <= 10; i++) {
            g(i);
        }
    }

    static class Worker extends Thread {
        final long spinMillis;

        Worker(long spinMillis) {
            this.spinMillis = spinMillis;
        }

        @Override
        public void run() {
            long end = System.nanoTime() + spinMillis * 1_000_000L;
            do {
                f();
            } while (System.nanoTime() < end);
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        System.out.flush();
        String line;
        while ((line = in.readLine()) != null && !line.equals("quit")) {
            long spin = line.startsWith("spin ") ? Long.parseLong(line.substring(5).trim()) : 0;
            Worker w = new Worker(spin);
            w.start();
            w.join();
            System.out.println("done");
            System.out.flush();
        }
    }
}
