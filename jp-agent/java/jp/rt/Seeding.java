package jp.rt;

/**
 * Seeded contexts of an exact window (docs/agent-design.md, "Exact windows"). A frame that
 * was running when the window opened keeps its old, uninstrumented code until it returns:
 * it never entered, and it will pop without an exit. Its calls reach instrumented code,
 * which must find the frame's context. So a thread's first instrumented entry in a window
 * walks its stack and makes the path of such frames (of methods the window instrumented),
 * outermost first, as nodes with 0 calls and 0 bytecodes, wids 1..k; the innermost becomes
 * current. Later, whenever the current context is a seeded one ({@link
 * ThreadState#seededTop}), the entry walks the stack again: the seeded frames still running
 * are a prefix f0..fj of the seeded path (frames only pop), and fj, the first frame below
 * the entering method that runs a seeded method, is the caller.
 *
 * <p>The walks are JVMTI stack traces of the calling thread, compared by method id (the
 * agent's natives): no Java code runs, so nothing here can recurse into the runtime.
 */
final class Seeding {
    private Seeding() {}

    /**
     * The entry found a seeded context current (or the thread not yet seeded): the current
     * context for the entering method's caller. Sets {@code current} and {@code seededTop}.
     * Called by {@link Rt#enter} only (the natives count the frames above the caller).
     */
    static int reseat(ThreadState s) {
        s.busy = true;
        try {
            long[] ids = s.seeds;
            if (ids == null) {
                seed(s, seedStack());
            } else {
                int alive = seededCaller(ids, s.seededTop);
                s.current = alive;
                s.seededTop = alive > 0 ? alive : -1;
            }
        } catch (Throwable e) {
            // No walk, no seeding: calls go under the context current now.
            s.seededTop = -1;
        } finally {
            s.busy = s.dead;
        }
        return s.current;
    }

    /**
     * The first walk: the seeded path, made first so that its wids are 1..k. {@code pairs}:
     * method id and JVMTI method id of each seeded frame, outermost first.
     */
    private static void seed(ThreadState s, long[] pairs) {
        int k = pairs == null ? 0 : pairs.length / 2;
        long[] ids = new long[k];
        Node n = s.root;
        for (int i = 0; i < k; i++) {
            n = n.child((int) pairs[2 * i]);
            ids[i] = pairs[2 * i + 1];
        }
        s.seeds = ids;
        s.current = n.wid;
        s.seededTop = k > 0 && n.wid == k ? k : -1;
        if (k > 0) {
            Rt.countSeeded(k);
        }
    }

    /**
     * The frames below the entering method that run a method the open window instrumented,
     * outermost first: [agent method id, JVMTI method id] pairs.
     */
    private static native long[] seedStack();

    /** How many of the seeded frames {@code ids}, the first {@code top} of them, still run. */
    private static native int seededCaller(long[] ids, int top);
}
