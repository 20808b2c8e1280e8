import java.io.BufferedReader;
import java.io.InputStreamReader;

/**
 * The JP paper's example, run on demand: every "run" line on stdin runs f() once in a
 * new thread (its tree reaches jpd when the thread ends) and answers "done"; "quit"
 * exits. f() calls h() and g(i) for i = 1..10; g(i) calls h() i times.
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
        @Override
        public void run() {
            f();
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        System.out.flush();
        String line;
        while ((line = in.readLine()) != null && !line.equals("quit")) {
            Worker w = new Worker();
            w.start();
            w.join();
            System.out.println("done");
            System.out.flush();
        }
    }
}
