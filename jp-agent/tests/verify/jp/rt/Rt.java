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

    public static void count(Node n, int k) {
        counts++;
        bytecodes += k;
    }

    public static void tick(Node n, int k) {
        ticks++;
    }

    public static void caught(Node n) {
        caughts++;
    }

    public static void exit(Node n) {
        exits++;
    }
}
