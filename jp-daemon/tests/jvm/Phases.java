/**
 * A deterministic workload for jpd's end-to-end JVM tests: PHASES rounds of work on the main
 * thread and on three short-lived worker threads. It prints "started" and waits for a line on
 * stdin before the first round, and after each round but the last prints "phase N done" and
 * waits again, so that a test can start, stop or restart jpd between rounds. Every count in its
 * Method Call Tree is fixed by the arguments.
 */
public final class Phases {
    static int fib(int n) {
        return n < 2 ? n : fib(n - 1) + fib(n - 2);
    }

    static long work(int rounds) {
        long sum = 0;
        for (int i = 0; i < rounds; i++) {
            sum += fib(12) + square(i);
            if (i % 7 == 0) {
                sum += thrower(i);
            }
        }
        return sum;
    }

    static int square(int x) {
        return x * x;
    }

    static int thrower(int i) {
        try {
            if (i % 2 == 0) {
                throw new IllegalStateException("even");
            }
            return 1;
        } catch (IllegalStateException e) {
            return 2;
        }
    }

    public static void main(String[] args) throws Exception {
        int phases = Integer.parseInt(args[0]);
        int size = Integer.parseInt(args[1]);
        long total = 0;
        System.out.println("started");
        System.out.flush();
        awaitLine();
        for (int p = 0; p < phases; p++) {
            Thread[] workers = new Thread[3];
            for (int t = 0; t < workers.length; t++) {
                final int k = t;
                workers[t] = new Thread(() -> work(size + 10 * k), "worker-" + p + "-" + t);
                workers[t].start();
            }
            for (Thread t : workers) {
                t.join();
            }
            total += work(size);
            System.out.println("phase " + p + " done " + total);
            System.out.flush();
            if (p + 1 < phases) {
                awaitLine();
            }
        }
    }

    static void awaitLine() throws java.io.IOException {
        int c;
        while ((c = System.in.read()) != '\n' && c != -1) {
            // one line from the test: go on
        }
    }
}
