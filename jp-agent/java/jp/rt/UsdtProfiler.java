package jp.rt;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;

/**
 * The built-in live view ({@code profiler=usdt}): at each report, the thread's tree changes since
 * its last record are serialized in the wire format of {@code jp-common/src/wire/mod.rs} and handed
 * to the USDT probe {@code jp:record} in libjpagent.so, which jpd traces.
 *
 * <p>With no tracer attached the probe's semaphore is 0 and a report costs one load and a compare:
 * the semaphore and jpd's control block are read through direct ByteBuffers over the library's
 * own memory, with no JNI call. A changed control generation (jpd attached, restarted or lost
 * records) makes each thread re-send its whole tree with absolute counts.
 *
 * <p>Optionally also the {@link FileProfiler} ({@code out=FILE}): both see the same trees.
 *
 * <p>Like the rest of the runtime it uses no java.util (those classes may be instrumented).
 */
final class UsdtProfiler implements Profiler {
    // ---- the wire format (jp_common::wire) ----
    static final int MAX_RECORD = 16384;
    static final int MAX_STRING = 4096;
    static final int HEADER_LEN = 40;
    /** "JPW1" read as a little-endian u32. */
    static final int MAGIC = 0x3157504a;
    static final int VERSION = 1;
    static final int KIND_TREE = 3;
    static final int KIND_THREAD = 5;
    static final int KIND_UNMOUNTED = 6;
    static final int FLAG_RESYNC = 1;
    static final int FLAG_ABSOLUTE = 2;
    static final int FLAG_END = 4;
    /** wire::STREAM_ENDED (u64::MAX): the merged tree of the threads that ended. */
    static final long STREAM_ENDED = -1L;
    /** Largest tree entry: tag, parent and mid (5 bytes each as varints), two u64 varints. */
    static final int MAX_ENTRY = 5 + 5 + 5 + 10 + 10;

    /** The probe's semaphore (u16): non-zero while a tracer (or usdt_tap) listens. */
    private static final ByteBuffer SEMAPHORE = Rt.usdtSemaphore().order(ByteOrder.nativeOrder());
    /** jp_usdt_control (wire::Control): generation at offset 8, written by jpd. */
    private static final ByteBuffer CONTROL = Rt.usdtControl().order(ByteOrder.nativeOrder());

    private static final int GENERATION_OFFSET = 8;
    /** getpid() from the agent (ProcessHandle would bootstrap lambdas: ~140 classes at start). */
    private static final int PID = Rt.usdtPid();

    /** Also write the file at exit (null: live view only). */
    private final FileProfiler file;

    /**
     * Every ended thread's tree, merged (64-bit counters). A thread that ended while nobody
     * listened, or before jpd restarted, cannot re-send its own tree: this snapshot goes out as
     * stream {@link #STREAM_ENDED} with every new generation, after the hello and the methods.
     * Guarded by this profiler's monitor, which also makes a thread's END and its fold into
     * this tree one step (see jp-common/src/wire/mod.rs, "Ended threads").
     */
    private final Node ended;
    private final Stream endedStream = new Stream(STREAM_ENDED, "(ended threads)");
    /** The generation the JVM stream last answered (valid once {@link #jvmSynced}). */
    private volatile long jvmAnswered;
    private volatile boolean jvmSynced;

    UsdtProfiler(FileProfiler file) {
        this.file = file;
        // With a file too, the file's merged tree is this one: the same threads merge
        // into it the same way, so one copy serves both (half the memory).
        this.ended = file != null ? file.tree() : Rt.mergedTreeRoot();
    }

    /** Whether anyone listens: the whole cost of a report point without a tracer. */
    static boolean listening() {
        return SEMAPHORE.getShort(0) != 0;
    }

    /** Reports send only while a tracer listens (the file part merges at thread end). */
    @Override
    public boolean wantsReports() {
        return listening();
    }

    @Override
    public void register(Thread thread, Node root) {
        ThreadState st = root.state;
        if (st != null) {
            stream(st);
            // register runs on the thread itself (its first instrumented call), so the
            // kernel id is the thread's. Virtual threads get none: they move between
            // carriers, and the sampler sees the carrier. The slot itself comes with the
            // thread's first record (see publish): until a tracer listens, nobody reads
            // it, and the hot path then stores nothing.
            if (Rt.contextSlots && thread == Thread.currentThread() && !isVirtual(thread)) {
                st.osTid = Rt.osThreadId();
            }
        }
        if (file != null) {
            file.register(thread, root);
        }
    }

    @Override
    public int report(Node root, Node current) {
        if (SEMAPHORE.getShort(0) != 0) {
            publish(root.state, current);
            send(root, false, current);
        }
        return Rt.granularity;
    }

    /**
     * Gives the calling thread its context slot, holding {@code current}'s id, before its
     * first record to a tracer (which announces the slot). Only on the thread itself: from
     * here on its entries and exits keep the slot up to date, so it must start right.
     * Threads that never report while a tracer listens never get one, and their calls and
     * returns never store into one (CPU per context costs nothing beyond that without a
     * tracer).
     */
    private static void publish(ThreadState st, Node current) {
        if (st != null
                && st.osTid != 0
                && st.ctxSlot == 0
                && !st.heapContext
                && st.thread == Thread.currentThread()) {
            if (Rt.heapContexts && ContextSlot.publishOnHeap(st, current.wid)) {
                return;
            }
            long slot = ContextSlot.allocate();
            ContextSlot.set(slot, current.wid);
            st.ctxSlot = slot;
        }
    }

    @Override
    public void threadEnded(Thread thread, Node root) {
        ThreadState st = root.state;
        synchronized (this) {
            if (SEMAPHORE.getShort(0) != 0) {
                if (st != null) {
                    publish(st, st.currentNode());
                }
                send(root, true, null);
            }
            if (st != null) {
                Stream s = stream(st);
                synchronized (s) {
                    s.ended = true;
                    s.release();
                }
                // Only the thread itself may give its slot back: at VM death a daemon
                // that is ended here may still be running and writing it.
                long slot = st.ctxSlot;
                if (slot != 0 && thread == Thread.currentThread()) {
                    st.ctxSlot = 0;
                    ContextSlot.release(slot);
                }
            }
            FileProfiler.merge(ended, root);
        }
    }

    @Override
    public void shutdown() {
        // Rt.vmDeath has handed every remaining thread to threadEnded: their last records are out.
        if (SEMAPHORE.getShort(0) != 0) {
            syncJvm(CONTROL.getLong(GENERATION_OFFSET));
        }
        Rt.usdtEnd(Rt.liveThreads());
        if (file != null) {
            synchronized (this) { // the tree's merges hold this monitor
                file.shutdown();
            }
        }
    }

    /**
     * Answers generation {@code gen} on the JVM stream if not done yet: the hello and the whole
     * method table (by the agent), then the ended threads' snapshot — before this thread's
     * record, and before any other thread's record of {@code gen} (they wait here).
     */
    private void syncJvm(long gen) {
        if (jvmSynced && jvmAnswered == gen) {
            return;
        }
        synchronized (this) {
            if (jvmSynced && jvmAnswered == gen) {
                return;
            }
            Rt.usdtHello(gen, Rt.liveThreads());
            synchronized (endedStream) {
                endedStream.resend(ended, gen);
            }
            jvmAnswered = gen;
            jvmSynced = true;
        }
    }

    /** Thread.isVirtual (JDK 21+), without naming it so that the class loads on 17. */
    private static boolean isVirtual(Thread t) {
        return VIRTUAL != null && VIRTUAL.isInstance(t);
    }

    private static final Class<?> VIRTUAL = virtualThreadClass();

    private static Class<?> virtualThreadClass() {
        try {
            return Class.forName("java.lang.BaseVirtualThread", false, null);
        } catch (Throwable e) {
            return null;
        }
    }

    private static long syntheticIds = 1L << 62;

    private static synchronized long nextSyntheticId() {
        return syntheticIds++;
    }

    private static Stream stream(ThreadState st) {
        Stream s = st.usdt;
        if (s == null) {
            synchronized (UsdtProfiler.class) {
                s = st.usdt;
                if (s == null) {
                    s = new Stream(st.thread);
                    st.usdt = s;
                }
            }
        }
        return s;
    }

    /** {@code at}: the context the thread is in (null at its end). */
    private void send(Node root, boolean end, Node at) {
        ThreadState st = root.state;
        if (st == null || st.thread == null) {
            return;
        }
        long gen = CONTROL.getLong(GENERATION_OFFSET);
        Stream s = stream(st);
        // The owner reports; at VM death another thread may end a thread that still runs.
        synchronized (s) {
            if (s.ended || !(end || s.due())) {
                return;
            }
        }
        // A new generation's hello and method table go out only with a send that is due, and
        // their time counts as this send's: a tracer writing generations without pause costs
        // the thread no more than its report budget. Lock order: this profiler, then a stream
        // (threadEnded holds both), so the JVM stream is answered outside the stream's lock.
        long t0 = System.nanoTime();
        syncJvm(gen);
        synchronized (s) {
            if (!s.ended) {
                s.send(root, gen, end, at);
                s.sent(t0, System.nanoTime());
            }
        }
    }

    /** One thread's stream: its record buffer, sequence number and what was sent of its tree. */
    static final class Stream {
        /** Null for {@link #STREAM_ENDED}. */
        final Thread thread;
        final long id;
        /** The name of a stream without a thread. */
        private final String fixedName;

        /** Off-heap record buffer handed to the probe (allocated at the first record). */
        private ByteBuffer direct;
        private long address;
        /** The record is built here, then copied into {@link #direct} in one bulk put. */
        private byte[] b;
        private int pos;
        private int countAt;
        private int count;

        private int seq;
        /** The control generation last answered with a full tree ({@link #synced}). */
        private long generation;
        private boolean synced;
        boolean ended;
        /** {@link System#nanoTime} at the end of the last send, and what that send took. */
        private long lastSendEnd;
        private long lastSendNs;

        /** Wire ids: node 0 is the root; a node's id is {@link Node#wid}. */
        private int nextWid = 1;
        /** Counts last sent, indexed by wire id (kept here so that Node stays small). */
        private long[] sentCalls;
        private long[] sentBytecodes;
        /**
         * Wire ids defined since the last full send, one bit each. Thread trees number their
         * nodes at creation, so a node's id says nothing about whether jpd has it.
         */
        private long[] defined;
        /** The thread's slot last announced ({@link #KIND_THREAD}), 0: none. */
        private long sentSlot;
        /** The thread name last sent (compared by reference: getName returns the same string). */
        private String sentName;

        private Node[] stack;

        /**
         * The context the thread was in at the last send (null: none, or not a thread's tree),
         * and its chain of callers marked in {@link #onChain} while a send walks the tree.
         */
        private Node lastAt;
        private long[] onChain;

        Stream(Thread thread) {
            this.thread = thread;
            long tid = thread.getId();
            // Stream 0 is the JVM's. JDK 17's DestroyJavaVM thread (which runs the shutdown
            // hooks, instrumented with jdk=true) reports id 0: give such threads ids far above
            // any real thread id.
            this.id = tid > 0 ? tid : nextSyntheticId();
            this.fixedName = null;
        }

        Stream(long id, String name) {
            this.thread = null;
            this.id = id;
            this.fixedName = name;
        }

        /**
         * Whether a report should send now: always when nothing was sent yet; else only once
         * the time since the last send ended (wall time) is at least (100 - P) / P times what
         * that send took, with P = {@link Rt#reportBudget}. A new generation (jpd asks for the
         * whole tree) waits for the budget too: whoever writes generations into the control
         * block (a jpd answering records lost to another process's flood) must not make the
         * thread walk and serialize its whole tree at every report; the send that answers it
         * comes at the first report the budget allows, and is a full one. This keeps the live view within P % of a thread's time
         * however large its tree and however much of it a send visits: when every report
         * (each 10 M bytecodes) walked all of jython's ~157 k contexts, jython under jpd ran
         * 43 % slower than without; 9-13 % with P = 5 and 0-5 % with P = 2, the default (a
         * send also leaves the caches colder than its own time says). Delta sends now visit
         * only what may have changed (see send), but a resync still walks it all
         * (docs/journal/report-budget.md). A report that does not send
         * loses nothing: the next send carries the counts since the last one, and a thread's
         * end always sends.
         */
        boolean due() {
            if (!synced) {
                return true;
            }
            int p = Rt.reportBudget;
            return (System.nanoTime() - lastSendEnd) * p >= lastSendNs * (100 - p);
        }

        /** A send ran from {@code start} to {@code end} (nanoTime). */
        void sent(long start, long end) {
            lastSendEnd = end;
            lastSendNs = end - start;
        }

        /** The whole tree again, as answer to {@code gen}, whatever was sent before. */
        void resend(Node root, long gen) {
            synced = false;
            send(root, gen, false, null);
        }

        private boolean allocate() {
            if (direct != null) {
                return true;
            }
            ByteBuffer d = ByteBuffer.allocateDirect(MAX_RECORD);
            long a = Rt.bufferAddress(d);
            if (a == 0) {
                return false;
            }
            direct = d;
            address = a;
            b = new byte[MAX_RECORD];
            sentCalls = new long[64];
            sentBytecodes = new long[64];
            defined = new long[1];
            onChain = new long[1];
            stack = new Node[64];
            return true;
        }

        /** The thread is gone: drop the buffers (the wire ids in its nodes stay, unused). */
        void release() {
            direct = null;
            b = null;
            sentCalls = null;
            sentBytecodes = null;
            defined = null;
            onChain = null;
            stack = null;
            lastAt = null;
        }

        /**
         * Sends the tree: all of it (absolute) if {@code gen} was not answered yet, else the
         * nodes whose counts changed and the new ones (deltas). {@code end}: the stream's last.
         * {@code at}: the context the tree's thread is in now, when the thread itself reports
         * (null at its end and for a merged tree).
         *
         * <p>A delta send visits only what may have changed, not the whole tree: a node's
         * counts change only while the node is on the thread's stack, and it gets there only
         * by a call (its calls change) or by having been there since before the last send
         * (then it is on the chain from the last send's {@code at} to the root). So below a
         * node whose calls did not change and that is not on that chain nothing changed, and
         * the walk does not descend there (jython's tree has ~157 k contexts, of which one
         * report interval enters few). usdt.rs checks it: with every report sending, the tap's
         * counts at the end must be the file's.
         */
        void send(Node root, long gen, boolean end, Node at) {
            if (!allocate()) {
                return;
            }
            boolean full = !synced || gen != generation;
            if (full) {
                synced = true;
                generation = gen;
                seq = 0;
                long[] d = defined;
                for (int i = 0; i < d.length; i++) {
                    d[i] = 0;
                }
            }
            ThreadState owner = root.state;
            long slot = owner == null ? 0 : owner.heapContext ? owner.heapCell : owner.ctxSlot;
            // A mounted virtual thread writes its carrier's slot but has no kernel thread
            // of its own: the carrier announces the slot.
            if (slot != 0 && owner.osTid != 0 && (full || slot != sentSlot)) {
                threadRecord(owner, slot);
            }
            String name = thread != null ? thread.getName() : fixedName;
            boolean sendName = full || name != sentName;
            int flags = full ? FLAG_RESYNC | FLAG_ABSOLUTE : 0;
            begin(sendName ? name : null);
            sentName = name;
            boolean mustSend = full || sendName || end;
            // After a resync, and when the last send left no stack (the first one, a merged
            // tree's, one that threw), the whole tree is walked. The end prunes too: the
            // thread's stack is gone, so what changed was entered or on the last send's stack.
            // That also makes the end's counts, which the tests compare with the file's,
            // depend on every pruned walk before it: a change one of them missed is missed
            // for good, unless its node is entered again.
            Node last = lastAt;
            lastAt = null; // until this send is done: one that throws leaves the next a full walk
            boolean prune = !full && last != null && markChain(last, true);

            Node[] st = stack;
            int sp = 0;
            st[sp++] = root;
            while (sp > 0) {
                Node x = st[--sp];
                st[sp] = null;
                if (x != root) {
                    if (pos + MAX_ENTRY > MAX_RECORD) {
                        finish(flags);
                        flags &= ~FLAG_RESYNC;
                        begin(null);
                        mustSend = false;
                    }
                    if (!entry(x, full) && prune && !onChain(x.wid)) {
                        continue; // not entered since the last send, nor on its stack then
                    }
                }
                // The walk runs on the tree's own thread (or on a merged tree): no race
                // between the two reads.
                Node only = x.onlyChild();
                Node[] kids = x.table();
                if (kids != null) {
                    for (Node c : kids) {
                        if (c != null) {
                            st = push(st, sp++, c);
                        }
                    }
                } else if (only != null) {
                    st = push(st, sp++, only);
                }
            }
            if (prune) {
                markChain(last, false);
            }
            lastAt = end ? null : at;
            Unmounted off = owner == null ? null : owner.unmounted;
            if (off != null && off.size > 0) {
                // After the records that define its contexts, before the stream's end.
                if (count > 0 || mustSend) {
                    finish(flags);
                    flags &= ~FLAG_RESYNC;
                }
                unmountedRecord(off);
                if (end) {
                    begin(null);
                    finish(flags | FLAG_END);
                }
            } else if (count > 0 || mustSend || end) {
                finish(flags | (end ? FLAG_END : 0));
            }
        }

        /**
         * A virtual thread's time off its carriers since the last one ({@link #KIND_UNMOUNTED},
         * outside the stream's numbering: seq 0, no flags): u32 count, then per (context, why)
         * varint context, varint why, varint ns, varint periods. At most {@link
         * Unmounted#MAX} + {@link Unmounted#WHYS} entries of at most 4 + 1 + 10 + 10 bytes:
         * one record.
         */
        private void unmountedRecord(Unmounted off) {
            pos = HEADER_LEN;
            int n = off.size;
            putInt(pos, n);
            pos += 4;
            for (int i = 0; i < n; i++) {
                long key = off.keys[i];
                varint(key >>> 8);
                varint(key & 0xff);
                varint(off.ns[i]);
                varint(off.periods[i]);
            }
            off.clear();
            int len = pos;
            header(KIND_UNMOUNTED, len, 0, 0);
            direct.put(0, b, 0, len);
            Rt.fire(address, len, Rt.liveThreads());
        }

        /**
         * Sets (or clears) the bits of {@code n} and its callers in {@link #onChain}. False
         * (nothing set) if one of them has an id beyond what was sent, which cannot happen for
         * the last send's stack (every node on it was visited); then the walk does not prune.
         */
        private boolean markChain(Node n, boolean set) {
            long[] c = onChain;
            for (Node x = n; x != null; x = x.parent == x ? null : x.parent) {
                int w = x.wid;
                if ((w >>> 6) >= c.length) {
                    if (set) {
                        markChain(n, false);
                    }
                    return false;
                }
                if (set) {
                    c[w >>> 6] |= 1L << (w & 63);
                } else {
                    c[w >>> 6] &= ~(1L << (w & 63));
                }
            }
            return true;
        }

        private boolean onChain(int w) {
            return (w >>> 6) < onChain.length && (onChain[w >>> 6] & (1L << (w & 63))) != 0;
        }

        /** Puts {@code c} at {@code sp} of the walk's stack, grown (and kept) when full. */
        private Node[] push(Node[] st, int sp, Node c) {
            if (sp == st.length) {
                Node[] a = new Node[sp * 2];
                System.arraycopy(st, 0, a, 0, sp);
                st = a;
                stack = a;
            }
            st[sp] = c;
            return st;
        }

        /** Writes {@code x}'s entry if it is new or its counts changed; false if it wrote none. */
        private boolean entry(Node x, boolean full) {
            long calls = x.calls;
            long bytecodes = x.bytecodes;
            int w = x.wid;
            boolean def;
            long dc;
            long db;
            if (w == 0) {
                w = nextWid++; // a merged tree's node, numbered when first sent
                x.wid = w;
            }
            if (w >= sentCalls.length) {
                grow(w);
            }
            long bit = 1L << (w & 63);
            boolean known = (defined[w >>> 6] & bit) != 0;
            defined[w >>> 6] |= bit;
            if (!known || full) {
                def = true;
                dc = calls;
                db = bytecodes;
            } else {
                dc = calls - sentCalls[w];
                db = bytecodes - sentBytecodes[w];
                if (dc == 0 && db == 0) {
                    return false;
                }
                def = false;
            }
            varint(((long) w << 1) | (def ? 1 : 0));
            if (def) {
                Node p = x.parent;
                varint(p == null ? 0 : p.wid);
                varint(x.mid);
            }
            varint(dc);
            varint(db);
            sentCalls[w] = calls;
            sentBytecodes[w] = bytecodes;
            count++;
            return true;
        }

        private void grow(int w) {
            int cap = Math.max(sentCalls.length * 2, w + 1);
            long[] a = new long[cap];
            long[] c = new long[cap];
            long[] d = new long[(cap + 63) >>> 6];
            System.arraycopy(sentCalls, 0, a, 0, sentCalls.length);
            System.arraycopy(sentBytecodes, 0, c, 0, sentBytecodes.length);
            System.arraycopy(defined, 0, d, 0, defined.length);
            sentCalls = a;
            sentBytecodes = c;
            defined = d;
            long[] o = new long[d.length]; // a walk may grow it: keep its marks
            System.arraycopy(onChain, 0, o, 0, onChain.length);
            onChain = o;
        }

        /**
         * Announces where the thread publishes its context: {@link #KIND_THREAD}, outside the
         * stream's numbering (seq 0, no flags), body varint kernel thread id, varint slot
         * address; on the heap, the slot is its cell, and varint offset of {@code current},
         * varint offset of the cookie and varint cookie follow.
         */
        private void threadRecord(ThreadState owner, long slot) {
            pos = HEADER_LEN;
            varint(owner.osTid & 0xffffffffL);
            varint(slot);
            if (owner.heapContext) {
                varint(ContextSlot.CURRENT_OFFSET);
                varint(ContextSlot.COOKIE_OFFSET);
                // The low half, where the sampler reads it (little-endian).
                varint(owner.cookie & 0xffffffffL);
            }
            int len = pos;
            header(KIND_THREAD, len, 0, 0);
            direct.put(0, b, 0, len);
            Rt.fire(address, len, Rt.liveThreads());
            sentSlot = slot;
        }

        /** Starts a record: header space, the thread name (null: unchanged), the entry count. */
        private void begin(String name) {
            pos = HEADER_LEN;
            if (name == null) {
                b[pos++] = 0;
            } else {
                byte[] s = name.getBytes(StandardCharsets.UTF_8);
                int n = Math.min(s.length, MAX_STRING);
                varint(n);
                System.arraycopy(s, 0, b, pos, n);
                pos += n;
            }
            countAt = pos;
            pos += 4;
            count = 0;
        }

        /** Fills in the header and the count, and fires the record. */
        private void finish(int flags) {
            int len = pos;
            header(KIND_TREE, len, seq, flags);
            putInt(countAt, count);
            seq++;
            direct.put(0, b, 0, len);
            Rt.fire(address, len, Rt.liveThreads());
        }

        private void header(int kind, int len, int sequence, int flags) {
            putInt(0, MAGIC);
            putShort(4, VERSION);
            putShort(6, kind);
            putInt(8, len);
            putInt(12, PID);
            putLong(16, generation);
            putLong(24, id);
            putInt(32, sequence);
            putInt(36, flags);
        }

        private void varint(long v) {
            byte[] a = b;
            int p = pos;
            while ((v & ~0x7fL) != 0) {
                a[p++] = (byte) ((v & 0x7f) | 0x80);
                v >>>= 7;
            }
            a[p++] = (byte) v;
            pos = p;
        }

        private void putShort(int at, int v) {
            b[at] = (byte) v;
            b[at + 1] = (byte) (v >>> 8);
        }

        private void putInt(int at, int v) {
            b[at] = (byte) v;
            b[at + 1] = (byte) (v >>> 8);
            b[at + 2] = (byte) (v >>> 16);
            b[at + 3] = (byte) (v >>> 24);
        }

        private void putLong(int at, long v) {
            putInt(at, (int) v);
            putInt(at + 4, (int) (v >>> 32));
        }
    }
}
