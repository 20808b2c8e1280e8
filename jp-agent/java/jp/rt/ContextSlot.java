package jp.rt;

import jdk.internal.misc.Unsafe;

/**
 * A thread's context slot: 64 bytes of native memory whose first int is the wire id of the
 * thread's current context. jpd's eBPF sampler reads it with {@code bpf_probe_read_user}
 * when a sample interrupts the thread, and so counts CPU per exact context. The agent
 * announces the slot's address and the thread's kernel id in a {@code KIND_THREAD} record.
 * Where the collector allows it, a thread publishes on the heap instead ({@link
 * #publishOnHeap}): no store of its own per context change.
 *
 * <p>Only loaded once {@link Rt#contextSlots} made {@code jdk.internal.misc} visible: the hot
 * path reaches this class only for threads that have a slot. 64 bytes per slot, so that two
 * threads' slots rarely share a cache line.
 */
final class ContextSlot {
    private static final Unsafe U = Unsafe.getUnsafe();
    static final int BYTES = 64;
    /** Where the sampler reads a thread's state on the heap (see ThreadState#heapContext). */
    static final int CURRENT_OFFSET = (int) U.objectFieldOffset(ThreadState.class, "current");
    static final int COOKIE_OFFSET = (int) U.objectFieldOffset(ThreadState.class, "cookie");

    private ContextSlot() {}

    static void set(long address, int id) {
        U.putInt(address, id);
    }

    /**
     * A carrier's slot, whole: the context id in the low half, the stream it belongs to in the
     * high half (0: the announcing thread's own). One store, so that the sampler, which
     * interrupts the thread that writes it, never reads an id with another stream.
     */
    static void setWord(long address, long word) {
        U.putLong(address, word);
    }

    /**
     * Lets the sampler read {@code st.current} on the heap (the thread's own state, on the
     * thread itself), holding {@code current}; false where it cannot (see {@link
     * Rt#heapCell}), and the thread takes a slot instead.
     */
    static boolean publishOnHeap(ThreadState st, int current) {
        long cell = Rt.heapCell(st, COOKIE_OFFSET, (int) st.cookie);
        if (cell == 0) {
            return false;
        }
        st.current = current;
        st.heapCell = cell;
        st.heapContext = true;
        return true;
    }

    /** Slots of ended threads, for new threads (never freed: see {@link #release}). */
    private static long[] free = new long[16];

    private static int nFree;

    /** A zeroed slot (current context: the root). */
    static synchronized long allocate() {
        if (nFree > 0) {
            long a = free[--nFree];
            U.putLongVolatile(null, a, 0L); // a carrier's slot also named a stream
            return a;
        }
        long a = U.allocateMemory(BYTES);
        U.setMemory(a, BYTES, (byte) 0);
        return a;
    }

    /**
     * The thread owning the slot has ended its tree. It reads "root" from now on, and the slot
     * goes to the next new thread. Never freed: the sampler may still read it for the ending
     * thread (which runs JVM code for a while, and jpd forgets it a pass later), and freed
     * memory would hand it garbage.
     */
    static synchronized void release(long address) {
        U.putLongVolatile(null, address, 0L);
        if (nFree == free.length) {
            long[] f = new long[free.length * 2];
            System.arraycopy(free, 0, f, 0, nFree);
            free = f;
        }
        free[nFree++] = address;
    }
}
