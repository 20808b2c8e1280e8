package jp.rt;

/**
 * Virtual threads' carriers (JDK 21+): a carrier's context slot follows the virtual thread
 * mounted on it, so that jpd's sampler, which sees only the carrier's kernel thread, counts
 * the carrier's CPU under the mounted virtual thread's current context, in that thread's tree.
 *
 * <p>A carrier gets a state and a native slot of its own at the first mount the runtime sees
 * on it, and announces the slot (with its kernel id) in its own stream. The slot is one word:
 * the low half the context id, the high half the stream it is a context of, 0 for the
 * carrier's own (its tree's root when it runs no instrumented code). At a mount the virtual
 * thread's stream and current context are stored, and the virtual thread's {@code ctxSlot}
 * points at the slot, so that its entries and exits keep the low half up to date as a
 * platform thread's keep its own slot; at the unmount (or its end) the carrier's own context
 * is stored back and the virtual thread stops writing. Only the carrier's OS thread writes
 * its slot, and the sampler interrupts that thread: the word is never read half-written.
 *
 * <p>Mounts and unmounts also time the virtual thread off its carriers ({@link Unmounted}).
 *
 * <p>Called from JVMTI's mount, unmount and end events on the virtual thread ({@link
 * Rt#carried}); the current Java thread is the virtual thread, the OS thread the carrier's.
 */
final class Carriers {
    private Carriers() {}

    /** Carriers' states by identity (open addressing; a pool's carriers are few). */
    private static volatile ThreadState[] table = new ThreadState[64];

    private static int count;

    /** {@code why}: {@link Unmounted#MOUNTED}, {@link Unmounted#ENDED}, else an unmount's. */
    static void carried(Thread carrier, int why) {
        if (carrier == null) {
            return;
        }
        boolean mounted = why == Unmounted.MOUNTED;
        ThreadState c = find(carrier);
        if (c == null && (c = adopt(carrier)) == null) {
            return;
        }
        ThreadState v = Rt.existingState();
        long slot = c.ctxSlot;
        long word = c.current & 0xffffffffL;
        if (v == c) {
            v = null; // the carrier itself (no virtual thread to follow)
        }
        if (v != null) {
            Unmounted.at(v, why);
        }
        if (mounted && v != null) {
            UsdtProfiler.Stream s = v.usdt;
            long stream = s == null ? 0 : s.id;
            // A stream id that does not fit the high half keeps the carrier's own context.
            if (stream > 0 && stream <= 0xffffffffL) {
                v.ctxSlot = slot;
                word = (stream << 32) | (v.current & 0xffffffffL);
            }
        } else if (v != null && v.ctxSlot == slot) {
            v.ctxSlot = 0;
        }
        ContextSlot.setWord(slot, word);
        // A carrier runs no instrumented code of its own to report at: it reports at mounts,
        // when the pacer says so, or (reports paced by bytecodes) at every 64th.
        if (Rt.paced ? c.due : (++c.counter & 63) == 0) {
            Rt.reportCarrier(c, v);
        }
    }

    /** The state the runtime keeps for {@code carrier}, null if none yet. */
    static ThreadState find(Thread carrier) {
        ThreadState[] t = table;
        int mask = t.length - 1;
        for (int i = System.identityHashCode(carrier) & mask, k = 0; k < t.length; k++) {
            ThreadState s = t[i];
            if (s == null) {
                return null;
            }
            if (s.thread == carrier) {
                return s;
            }
            i = (i + 1) & mask;
        }
        return null;
    }

    /** Gives {@code carrier} its state and slot (on the carrier's OS thread). */
    private static synchronized ThreadState adopt(Thread carrier) {
        ThreadState c = find(carrier);
        if (c != null) {
            return c;
        }
        c = Rt.carrierState(carrier);
        if (c == null) {
            return null;
        }
        // The carrier's own context, published where the virtual threads can repoint it.
        c.osTid = Rt.osThreadId();
        c.heapContext = false;
        if (c.ctxSlot == 0) {
            long slot = ContextSlot.allocate();
            ContextSlot.set(slot, c.current);
            c.ctxSlot = slot;
        }
        c.due = true;
        c.counter = 63; // unpaced: the first mount reports
        put(c);
        return c;
    }

    private static void put(ThreadState c) {
        ThreadState[] t = table;
        if ((count + 1) * 2 > t.length) {
            ThreadState[] g = new ThreadState[t.length * 2];
            for (ThreadState s : t) {
                if (s != null) {
                    insert(g, s);
                }
            }
            t = g;
        }
        insert(t, c);
        count++;
        table = t;
    }

    private static void insert(ThreadState[] t, ThreadState s) {
        int mask = t.length - 1;
        int i = System.identityHashCode(s.thread) & mask;
        while (t[i] != null) {
            i = (i + 1) & mask;
        }
        t[i] = s;
    }
}
