package jp.rt;

/** Per-thread profiling state: the MCT root, the current context and the activation counter. */
final class ThreadState {
    final Thread thread;
    final Node root;
    /**
     * The wire id ({@link Node#wid}) of the context of the innermost active instrumented
     * method (0, the root, when none); {@link #nodes} gives the node. An int and not the
     * node: a reference stored into this long-lived object at every call and return paid
     * G1's post-write barrier, whose StoreLoad fence cost real programs up to a third of
     * their time under the agent (docs/journal/current-context-as-id.md).
     */
    int current;
    /**
     * Odd, random: the sampler reads its low half beside {@link #current} and takes the
     * context only if it matches, so that a read of memory the collector has since given to
     * something else is never taken for a context. A long declared before the other longs,
     * so that HotSpot lays it out right after {@code current} (which fills the header's gap:
     * offsets 12 and 16 on JDK 17 and 25) and the sampler reads both at once; the sampler
     * reads them apart wherever a JVM lays them out otherwise.
     */
    final long cookie;
    /**
     * This tree's nodes by wire id, so that {@link #current} finds its node with one load
     * (a thread's tree and the sink's; null in merged trees, which have no current context).
     */
    Node[] nodes;
    /**
     * Activation counter when reports are paced by bytecodes ({@link Rt#paced} false): runs
     * down from the granularity; at <= 0 the profiler is called.
     */
    int counter;
    /**
     * Set by {@link Rt}'s pacer when reports are paced by time: the thread reports at its
     * next entry or loop head. Volatile, so that a loop that C2 compiled reads it again on
     * every iteration.
     */
    volatile boolean due;
    /**
     * True while the thread runs profiler or runtime code (and forever once it has ended):
     * instrumented code then profiles into the sink, so the runtime never profiles itself and
     * never recurses.
     */
    boolean busy;
    /**
     * The wire id of the innermost seeded context that may still run, or -1 when none can
     * (always, outside windows). A thread's first instrumented entry in a window seeds its
     * context path with the frames of instrumented methods that were running when the window
     * opened (wids 1..k, made first; {@link Seeding}); such old frames run their old code,
     * so they pop without telling. While the current context is one of them ({@code current
     * <= seededTop}) an entry walks the stack to find which still run ({@link
     * Seeding#reseat}); otherwise the entry costs a load and a compare more.
     */
    int seededTop = -1;
    /** {@link #seededTop} of a thread that has not walked its stack yet in this window. */
    static final int UNSEEDED = Integer.MAX_VALUE;
    /** The seeded frames' JVMTI method ids, outermost first (null until seeded). */
    long[] seeds;
    /** The window this state attached in ({@link Rt#windowEpoch}). */
    int window;
    /** Its window closed: the state never reports or attaches again. */
    boolean dead;
    /** The thread's USDT stream when the usdt profiler runs (created at register). */
    UsdtProfiler.Stream usdt;
    /** Slot in {@link Rt}'s registry of live threads, -1 when not registered. */
    int slot = -1;
    /** Times the profiler was called for this thread (for the agent's statistics). */
    long reports;

    /**
     * Native address of this thread's context slot (0: none, until its first record to a
     * tracer): {@link #current}, written at every context change, read by jpd's sampler
     * (see {@link ContextSlot}).
     */
    long ctxSlot;
    /** The kernel's id of this thread, sent with the slot's address. */
    int osTid;

    /**
     * A virtual thread off its carriers: why it left (a {@code wire::unmounted} code, 0 while
     * mounted or not timed), its context then and when ({@link System#nanoTime}); and its
     * time off carriers not sent yet (null until its first). See {@link Unmounted}.
     */
    int offWhy;
    int offContext;
    long offSince;
    Unmounted unmounted;

    /**
     * True once the thread publishes its current context on the heap (see {@link
     * ContextSlot#heapCell}): jpd's sampler then reads {@link #current} itself, through the
     * cell of a JNI global reference to this object that the collector keeps up to date, so
     * the entries and exits that store {@code current} anyway publish it without a store of
     * their own. Only the entries of second bodies, which otherwise leave {@code current}
     * alone, store it while this is set.
     */
    boolean heapContext;
    /** The cell announced for {@link #heapContext} (0: none). */
    long heapCell;
    /**
     * The wire id of this tree's next node: ids are given when a node is made (not when it is
     * first sent), so the slot can name a context jpd has not received yet.
     */
    int nextWid = 1;

    /** Contexts this tree has created (its root and overflow nodes not counted). */
    int contexts;
    /** Contexts of the JVM's budget this tree holds: it grows without asking up to here. */
    long granted;
    /** {@link Rt#budgetEpoch} when the budget last refused this tree (-1: never). */
    long refusedAt = -1;
    /**
     * Calls whose new context was folded into an overflow node because a limit was reached
     * (the agent's statistics: {@code calls_folded}).
     */
    long folded;

    ThreadState(Thread thread, int granularity) {
        this(thread, granularity, false);
    }

    private ThreadState(Thread thread, int granularity, boolean sink) {
        this.thread = thread;
        this.root = sink ? new Node(this) : new Node(-1, null, this);
        this.counter = granularity;
        this.cookie = (System.nanoTime() ^ System.identityHashCode(this)) * 0x9E3779B97F4A7C15L | 1;
        if (thread != null || sink) {
            nodes = new Node[sink ? 1 : 64];
            nodes[0] = root;
        }
    }

    /** The state of {@link Rt#SINK}: its tree is the sink alone, its own parent. */
    static ThreadState sink() {
        return new ThreadState(null, Integer.MAX_VALUE, true);
    }

    /** The context of the innermost active instrumented method. */
    Node currentNode() {
        return nodes[current];
    }

    /**
     * A node of this tree was made (its wire id is the next one): from now on {@link
     * #nodes} finds it. Outside the hot path, like making the node.
     */
    void made(Node n) {
        Node[] a = nodes;
        if (a == null) {
            return; // a merged tree's node
        }
        int w = n.wid;
        if (w >= a.length) {
            Node[] b = new Node[a.length * 2];
            System.arraycopy(a, 0, b, 0, a.length);
            nodes = a = b;
        }
        a[w] = n;
    }

    /**
     * Whether this tree may create one more context (then it is counted). Outside the hot
     * path: called only where a context is new.
     */
    boolean mayAdd() {
        if (contexts < granted) {
            contexts++;
            return true;
        }
        return Rt.grant(this);
    }

    /** The counter ran out: let the profiler look at this thread's tree. */
    void activate(Node at) {
        due = false;
        if (busy || dead || this == Rt.SINK_STATE) {
            counter = Integer.MAX_VALUE;
            return;
        }
        Profiler p = Rt.profiler;
        int next = Rt.granularity;
        if (p != null) {
            busy = true;
            reports++;
            try {
                next = p.report(root, at);
            } catch (Throwable e) {
                next = Rt.granularity;
            } finally {
                busy = dead;
            }
        }
        counter = next > 0 ? next : Rt.granularity;
    }
}
