package jp.rt;

/**
 * A virtual thread's time off its carriers (JDK 21+), which the scheduler cannot see: no
 * kernel thread blocks while a virtual thread is parked. At its unmount the virtual thread
 * notes when, its current context and why it leaves ({@code wire::unmounted}, from its state
 * at that moment, see the agent's vthreads.rs); at its next mount the period (unmount to
 * mount, the wait for a free carrier after its wake-up included) is added under (that
 * context, why). Summed here per (context, why) and sent in the thread's own stream with its
 * next record ({@link UsdtProfiler}, {@code KIND_UNMOUNTED}): no record per park, a few
 * stores and two {@link System#nanoTime} per park, no allocation but the first and the
 * table's growth.
 *
 * <p>Periods are timed only while a tracer listens, as jpd's own off-CPU measurement starts
 * when jpd does. Runs on the virtual thread itself (its mount, unmount and end events); the
 * sends read and clear the table on the same thread, or after its end.
 */
final class Unmounted {
    /** {@code why} at a mount and at a virtual thread's end; an unmount's is above 0. */
    static final int MOUNTED = 0;
    static final int ENDED = -1;
    /**
     * (context, why) pairs kept between two sends; beyond, time goes to the thread's root
     * context with its why (at most one more entry per why, see {@link #WHYS}).
     */
    static final int MAX = 64;
    /** {@code wire::unmounted::END}: whys are below it. */
    static final int WHYS = 7;

    /** (context wire id << 8 | why), and what each has gathered since the last send. */
    long[] keys = new long[8];
    long[] ns = new long[8];
    long[] periods = new long[8];
    int size;
    /** The index of the last entry added to (a thread waits at few places, often the same). */
    private int last;

    private Unmounted() {}

    /** A mount, an unmount ({@code why > 0}) or the end of virtual thread {@code v}. */
    static void at(ThreadState v, int why) {
        if (why > 0) {
            if (UsdtProfiler.listening()) {
                v.offWhy = why;
                v.offContext = v.current;
                v.offSince = System.nanoTime();
            } else {
                v.offWhy = 0;
            }
            return;
        }
        int left = v.offWhy;
        if (left == 0) {
            return;
        }
        v.offWhy = 0;
        if (why == MOUNTED) {
            long d = System.nanoTime() - v.offSince;
            if (d > 0) {
                Unmounted u = v.unmounted;
                if (u == null) {
                    v.unmounted = u = new Unmounted();
                }
                u.add(v.offContext, left, d);
            }
        }
    }

    private void add(int context, int why, long d) {
        long key = ((long) context << 8) | why;
        int i = last;
        if (i >= size || keys[i] != key) {
            i = index(key);
            if (i < 0) {
                i = index(why); // full: the root's
            }
            last = i;
        }
        ns[i] += d;
        periods[i]++;
    }

    /** The entry of {@code key}, made if new and room is left; -1 when full. */
    private int index(long key) {
        int n = size;
        for (int i = 0; i < n; i++) {
            if (keys[i] == key) {
                return i;
            }
        }
        if (n >= MAX && (key >>> 8) != 0) {
            return -1;
        }
        if (n == keys.length) {
            int cap = Math.min(n * 2, MAX + WHYS);
            keys = grow(keys, cap);
            ns = grow(ns, cap);
            periods = grow(periods, cap);
        }
        keys[n] = key;
        ns[n] = 0;
        periods[n] = 0;
        size = n + 1;
        return n;
    }

    private static long[] grow(long[] a, int cap) {
        long[] b = new long[cap];
        System.arraycopy(a, 0, b, 0, a.length);
        return b;
    }

    /** After a send: the table starts over (its arrays kept). */
    void clear() {
        size = 0;
        last = 0;
    }
}
