package jp.rt;

/**
 * Test stub with the contract's signatures. It counts calls so that a test can check
 * the injected code really runs; it never calls into anything that could be instrumented.
 */
public final class Rt {
    public static long enters, exits, counts, ticks, caughts, bytecodes;
    private Rt() {
    }

    public static Node enter(int mid, int k) {
        enters++;
        // No allocation: this stub also runs inside rewritten JDK classes during VM start-up.
        return null;
    }

    /** A second body's entry (its caller passed its context). */
    public static Node enterFrom(Node caller, int mid, int k) {
        enters++;
        return null;
    }

    public static void exitFrom(Node n) {
        exits++;
    }

    public static void exitFromPending(Node n, int pending) {
        exits++;
        bytecodes += pending;
    }

    public static void thrownFrom(Node n) {
        exits++;
    }

    public static void thrownFromPending(Node n, int pending) {
        exits++;
        bytecodes += pending;
    }

    public static void at(Node n) {
    }

    public static void count(Node n, int k) {
        counts++;
        bytecodes += k;
    }

    public static void tick(Node n, int k) {
        ticks++;
    }

    /** With a pending count (bba=precise): its bytecodes are counted where it is flushed. */
    public static int flush(Node n, int pending) {
        bytecodes += pending;
        return 0;
    }

    public static int tickPending(Node n, int pending, int k) {
        ticks++;
        return pending;
    }

    public static void exitPending(Node n, int pending) {
        exits++;
        bytecodes += pending;
    }

    public static void caught(Node n) {
        caughts++;
    }

    public static void exit(Node n) {
        exits++;
    }
}
