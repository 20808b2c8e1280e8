// Ten methods that each call all ten until a depth, so that every call is a calling
// context of its own: 11 110 contexts per traversal. The main thread traverses, then two
// worker threads at once. For the context limits (max_contexts, max_thread_contexts).
public class Branching {
    static final int DEPTH = 4;
    static volatile long sink;

    static void m0(int d) {
        if (d < DEPTH) {
            m0(d + 1); m1(d + 1); m2(d + 1); m3(d + 1); m4(d + 1);
            m5(d + 1); m6(d + 1); m7(d + 1); m8(d + 1); m9(d + 1);
        }
        sink += d;
    }

    static void m1(int d) {
        if (d < DEPTH) {
            m0(d + 1); m1(d + 1); m2(d + 1); m3(d + 1); m4(d + 1);
            m5(d + 1); m6(d + 1); m7(d + 1); m8(d + 1); m9(d + 1);
        }
        sink += d;
    }

    static void m2(int d) {
        if (d < DEPTH) {
            m0(d + 1); m1(d + 1); m2(d + 1); m3(d + 1); m4(d + 1);
            m5(d + 1); m6(d + 1); m7(d + 1); m8(d + 1); m9(d + 1);
        }
        sink += d;
    }

    static void m3(int d) {
        if (d < DEPTH) {
            m0(d + 1); m1(d + 1); m2(d + 1); m3(d + 1); m4(d + 1);
            m5(d + 1); m6(d + 1); m7(d + 1); m8(d + 1); m9(d + 1);
        }
        sink += d;
    }

    static void m4(int d) {
        if (d < DEPTH) {
            m0(d + 1); m1(d + 1); m2(d + 1); m3(d + 1); m4(d + 1);
            m5(d + 1); m6(d + 1); m7(d + 1); m8(d + 1); m9(d + 1);
        }
        sink += d;
    }

    static void m5(int d) {
        if (d < DEPTH) {
            m0(d + 1); m1(d + 1); m2(d + 1); m3(d + 1); m4(d + 1);
            m5(d + 1); m6(d + 1); m7(d + 1); m8(d + 1); m9(d + 1);
        }
        sink += d;
    }

    static void m6(int d) {
        if (d < DEPTH) {
            m0(d + 1); m1(d + 1); m2(d + 1); m3(d + 1); m4(d + 1);
            m5(d + 1); m6(d + 1); m7(d + 1); m8(d + 1); m9(d + 1);
        }
        sink += d;
    }

    static void m7(int d) {
        if (d < DEPTH) {
            m0(d + 1); m1(d + 1); m2(d + 1); m3(d + 1); m4(d + 1);
            m5(d + 1); m6(d + 1); m7(d + 1); m8(d + 1); m9(d + 1);
        }
        sink += d;
    }

    static void m8(int d) {
        if (d < DEPTH) {
            m0(d + 1); m1(d + 1); m2(d + 1); m3(d + 1); m4(d + 1);
            m5(d + 1); m6(d + 1); m7(d + 1); m8(d + 1); m9(d + 1);
        }
        sink += d;
    }

    static void m9(int d) {
        if (d < DEPTH) {
            m0(d + 1); m1(d + 1); m2(d + 1); m3(d + 1); m4(d + 1);
            m5(d + 1); m6(d + 1); m7(d + 1); m8(d + 1); m9(d + 1);
        }
        sink += d;
    }

    static void traverse() {
        m0(1); m1(1); m2(1); m3(1); m4(1); m5(1); m6(1); m7(1); m8(1); m9(1);
    }

    static class Worker extends Thread {
        @Override public void run() { traverse(); }
    }

    public static void main(String[] args) throws Exception {
        traverse();
        Worker a = new Worker();
        Worker b = new Worker();
        a.start();
        b.start();
        a.join();
        b.join();
        System.out.println("sink " + sink);
    }
}
