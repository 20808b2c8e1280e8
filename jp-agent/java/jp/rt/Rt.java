package jp.rt;

import java.nio.ByteBuffer;

/**
 * The helpers that instrumented code calls (docs/agent-design.md, "The runtime's helpers":
 * where the rewriter emits each one, and why it exists). They must stay tiny so
 * that the JIT inlines them, and they must never call anything that could be instrumented:
 * only this package, {@link ThreadLocal} and {@link Thread} (which the agent never instruments)
 * and natives.
 *
 * <p>Before {@link #init} (code running during VM start-up with jdk=true), while a thread is
 * attaching, while it runs profiler code, after it ended and after VM death, {@link #enter}
 * returns the shared {@link #SINK} node: its counts are garbage and never reported.
 */
public final class Rt {
    static final ThreadState SINK_STATE = ThreadState.sink();
    static final Node SINK = SINK_STATE.root;

    /** Null until {@link #init}: then every thread finds its state here. */
    private static ThreadLocal<ThreadState> states;

    /**
     * A cache in front of {@link #states}, indexed by the thread's identity hash: the hit path
     * is a few loads instead of ThreadLocal's map walk. A slot holds any thread's state; the
     * {@code thread} check makes a stale or colliding entry a miss (then the ThreadLocal
     * decides). Two running threads that collide just take turns in the slot.
     */
    private static final ThreadState[] BY_THREAD = new ThreadState[256];

    static Profiler profiler;
    static int granularity = 10_000_000;
    /**
     * True when threads report paced by time ({@code report_interval_ms}, the default): a
     * timer ({@link Pacer}) marks them {@link ThreadState#due} and each reports at its next
     * entry or loop head, a read of one flag. False when they report every {@link
     * #granularity} bytecodes, as JP does ({@code granularity=} alone): every entry and loop
     * head then counts down {@link ThreadState#counter}, a load and a store on every call that
     * cost real programs 7-14 % (docs/journal/activation-counter-and-pacing.md). Stable: once set
     * true at init, C2 folds it (a stable field's default value, false, is not folded, so
     * pacing by bytecodes pays a load of it too).
     */
    @jdk.internal.vm.annotation.Stable
    static boolean paced;
    /** {@code report_budget}: the share of a thread's time, in %, the live view may send. */
    static int reportBudget = 2;

    /**
     * The method id of overflow nodes (the agent's table names it), where new contexts fold
     * once a limit is reached. Not a valid JVM method name, so never a real method's.
     */
    static int overflowMid = -2;
    /** Contexts the live threads' trees may hold together, and each merged tree; see grant. */
    private static long jvmBudget = Long.MAX_VALUE;
    /** Contexts one thread's tree may hold (Long.MAX_VALUE: only the JVM's budget). */
    private static long threadBudget = Long.MAX_VALUE;
    /** Contexts granted to trees that still exist. Under LOCK. */
    private static long jvmGranted;
    /** Bumped when budget comes back (a tree was dropped): refused trees may ask again. */
    static volatile long budgetEpoch;
    /** A tree asks the JVM's budget for this many contexts at a time (one lock per chunk). */
    private static final int GRANT = 1024;
    /** Calls folded by trees that were dropped (under LOCK); see ThreadState.folded. */
    private static long foldedOfDropped;

    private static final Object LOCK = new Object();
    /** Threads inside {@link #attach} (guards against recursion through ThreadLocal.set). */
    private static Thread[] attaching = new Thread[8];
    private static int nAttaching;
    /** Live registered threads (ended threads are removed), for VM death. */
    private static ThreadState[] live = new ThreadState[16];
    private static int nLive;
    private static boolean closed;

    private Rt() {}

    /** Method entry: the context for {@code mid} under the thread's current one. */
    public static Node enter(int mid, int k) {
        ThreadLocal<ThreadState> tl = states;
        if (tl == null) {
            return SINK;
        }
        Thread t = Thread.currentThread();
        int slot = System.identityHashCode(t) & (BY_THREAD.length - 1);
        ThreadState s = BY_THREAD[slot];
        if (s == null || s.thread != t) {
            s = tl.get();
            if (s == null && (s = attach()) == null) {
                return SINK;
            }
            BY_THREAD[slot] = s;
        }
        if (s.busy) {
            return SINK;
        }
        int cur = s.current;
        if (cur <= s.seededTop) {
            cur = Seeding.reseat(s);
        }
        Node n = s.nodes[cur].childOnEntry(mid);
        n.calls++;
        s.current = n.wid;
        long cs = s.ctxSlot;
        if (cs != 0) {
            ContextSlot.set(cs, n.wid);
        }
        if (paced ? s.due : (s.counter -= k) <= 0) {
            s.activate(n);
        }
        return n;
    }

    /**
     * {@link #enter} for JVMs whose C2 should never inline it (JDK 17, chosen by the agent):
     * there C2 compiles {@code enter} either with its child lookup inlined (about 8 KB of
     * code, too big to inline anywhere) or, in about one rhino JVM in ten, as the profile at
     * that moment had it, without (2.5 KB), which every caller then inlines. Such a JVM runs
     * no faster and spends 2-4 times as long in C2 (rhino: 4.7-6.2 s against 1.2-1.9 s). Only
     * a program with one calling pattern (the cost model's loops) always got the small form,
     * and its unpassed calls cost 0.5-2.3 ns more out of line. On
     * JDK 25 C2 always compiles it small and inlining it makes rhino 6 % faster, so that JDK
     * calls {@code enter} (docs/journal/c2-inlining-of-the-entry.md).
     *
     * <p>The body is {@code enter}'s, copied on purpose: one that called {@code enter} made
     * two calls per entry (C2 compiled {@code enter} on its own, then would not inline code
     * "already compiled into a big method"), 3-6 % slower. The two must stay the same (a unit
     * test compares their bytecode); the exactness tests run this one on JDK 17 and
     * {@code enter} on JDK 25.
     */
    @jdk.internal.vm.annotation.DontInline
    public static Node enterOutOfLine(int mid, int k) {
        ThreadLocal<ThreadState> tl = states;
        if (tl == null) {
            return SINK;
        }
        Thread t = Thread.currentThread();
        int slot = System.identityHashCode(t) & (BY_THREAD.length - 1);
        ThreadState s = BY_THREAD[slot];
        if (s == null || s.thread != t) {
            s = tl.get();
            if (s == null && (s = attach()) == null) {
                return SINK;
            }
            BY_THREAD[slot] = s;
        }
        if (s.busy) {
            return SINK;
        }
        int cur = s.current;
        if (cur <= s.seededTop) {
            cur = Seeding.reseat(s);
        }
        Node n = s.nodes[cur].childOnEntry(mid);
        n.calls++;
        s.current = n.wid;
        long cs = s.ctxSlot;
        if (cs != 0) {
            ContextSlot.set(cs, n.wid);
        }
        if (paced ? s.due : (s.counter -= k) <= 0) {
            s.activate(n);
        }
        return n;
    }

    /**
     * Entry of a method's second body (docs/agent-design.md, "Second bodies: passed contexts"): its
     * caller, an instrumented method of the same class, passed its own context, so there is
     * no thread lookup and no current context to load. The thread's current context is not
     * set either: the body stores it ({@link #at}) before anything that could enter a method
     * the usual way.
     */
    public static Node enterFrom(Node caller, int mid, int k) {
        if (caller == SINK) {
            return SINK;
        }
        Node n = caller.child(mid);
        n.calls++;
        ThreadState s = n.state;
        if (s.heapContext) {
            s.current = n.wid;
        }
        long cs = s.ctxSlot;
        if (cs != 0) {
            ContextSlot.set(cs, n.wid);
        }
        if (paced ? s.due : (s.counter -= k) <= 0) {
            s.activate(n);
        }
        return n;
    }

    /**
     * A second body returns: its caller still holds its own context, so jpd's context slot
     * goes back to the caller's, and the thread's current context becomes the caller's (it
     * was the body's own if the body stored it with {@link #at}, else the caller's or, if the
     * caller had not stored its own, an older one: the caller's is right in every case, and
     * the caller need not store it again afterwards).
     */
    public static void exitFrom(Node ctx) {
        // At most 35 bytes of bytecode (MaxInlineSize), so that C2 inlines it also where a
        // return is not hot: hence an int stored always rather than compared first (which
        // measured the same, rhino and Lucene on both JDKs). The slot's update stays a helper
        // of its own rather than a call of thrownFrom: with that call the tiny static call
        // measured 0.3-0.7 ns more on JDK 25 (3 JVMs each).
        ThreadState s = ctx.state;
        s.current = ctx.parent.wid;
        if (s.ctxSlot != 0) {
            slotBack(ctx);
        }
    }

    /** jpd's context slot back to the caller's context. */
    private static void slotBack(Node ctx) {
        ContextSlot.set(ctx.state.ctxSlot, ctx.parent.wid);
    }

    /**
     * A second body is left by an exception (its catch-all): only what jpd reads goes back to
     * the caller's context. The current context is otherwise left as it is: the exception
     * reaches an instrumented frame, the second body's caller, and the first frame up that
     * catches it stores its own ({@link #caught}) or is a body entered the usual way, whose
     * exit stores its caller's.
     */
    public static void thrownFrom(Node ctx) {
        ThreadState s = ctx.state;
        if (s.heapContext) {
            s.current = ctx.parent.wid;
        }
        long slot = s.ctxSlot;
        if (slot != 0) {
            ContextSlot.set(slot, ctx.parent.wid);
        }
    }

    /** {@link #thrownFrom} of a second body that keeps a pending count {@code n}. */
    public static void thrownFromPending(Node ctx, int n) {
        ctx.bytecodes += n;
        thrownFrom(ctx);
    }

    /** {@link #exitFrom} of a second body that keeps a pending count {@code n}. */
    public static void exitFromPending(Node ctx, int n) {
        ctx.bytecodes += n;
        exitFrom(ctx);
    }

    /**
     * Before a call that does not pass the context, or an instruction that may run Java code
     * (class loading or initialization), in a method whose thread's current context may be
     * stale (a second body, or after a call that passed the context): it is {@code ctx}
     * again, so a method entered the usual way finds its caller.
     */
    public static void at(Node ctx) {
        ctx.state.current = ctx.wid;
    }

    /** Start of a basic block of {@code n} original bytecodes. */
    public static void count(Node ctx, int n) {
        ctx.bytecodes += n;
    }

    /** Loop head or handler: {@code k} bytecodes at most until the next check. */
    public static void tick(Node ctx, int k) {
        ThreadState s = ctx.state;
        if (paced ? s.due : (s.counter -= k) <= 0) {
            s.activate(ctx);
        }
    }

    /**
     * The method owning {@code ctx} is about to call: its pending count {@code n} (the
     * bytecodes its blocks ran since the last flush, kept in a local) goes into the node.
     * Returns the new pending count, 0.
     */
    public static int flush(Node ctx, int n) {
        ctx.bytecodes += n;
        return 0;
    }

    /**
     * Loop head or handler of a method that keeps a pending count {@code n}: {@code k}
     * bytecodes at most until the next check. The count goes into the node only when the
     * thread reports (so the profiler sees it) or when it grows large (so the int never
     * overflows); otherwise it stays in the caller's local. Returns the new pending count.
     */
    public static int tickPending(Node ctx, int n, int k) {
        ThreadState s = ctx.state;
        boolean due = paced ? s.due : (s.counter -= k) <= 0;
        if (due || n >= PENDING_LIMIT) {
            ctx.bytecodes += n;
            if (due) {
                s.activate(ctx);
            }
            return 0;
        }
        return n;
    }

    /** A pending count at least this large is flushed at the next loop head (no overflow). */
    private static final int PENDING_LIMIT = 1 << 30;

    /** The method owning {@code ctx} returns or throws with pending count {@code n}. */
    public static void exitPending(Node ctx, int n) {
        ctx.bytecodes += n;
        exit(ctx);
    }

    /** An exception handler of the method owning {@code ctx} starts. */
    public static void caught(Node ctx) {
        ThreadState s = ctx.state;
        s.current = ctx.wid;
        long slot = s.ctxSlot;
        if (slot != 0) {
            ContextSlot.set(slot, ctx.wid);
        }
    }

    /** The method owning {@code ctx} returns or throws. */
    public static void exit(Node ctx) {
        ThreadState s = ctx.state;
        int w = ctx.parent.wid;
        s.current = w;
        // Only threads with a slot (never the sink's) publish.
        long slot = s.ctxSlot;
        if (slot != 0) {
            ContextSlot.set(slot, w);
        }
    }

    // ---- slow paths ----

    /**
     * A tree wants a new context and has used what it was granted: grant it the next chunk if
     * the thread's and the JVM's limits allow, else refuse (its new contexts then fold into
     * overflow nodes, counted). A refused tree asks again only after budget came back.
     */
    static boolean grant(ThreadState s) {
        long refused = s.refusedAt;
        if (refused == budgetEpoch || refused == DROPPED) {
            return false;
        }
        synchronized (LOCK) {
            // A merged tree is a copy of ended threads' contexts: it has a budget of its own
            // (as large as the live trees' together) rather than competing with them, or a
            // second copy (file+usdt keeps two) would starve the first.
            boolean merged = s.thread == null;
            // Not Math.min: with jdk=true, Math is instrumented and would come back here.
            long chunk = merged
                    ? least(GRANT, jvmBudget - s.granted)
                    : least(least(GRANT, jvmBudget - jvmGranted), threadBudget - s.granted);
            if (chunk <= 0) {
                s.refusedAt = budgetEpoch;
                return false;
            }
            if (!merged) {
                jvmGranted += chunk;
            }
            s.granted += chunk;
            s.contexts++;
            return true;
        }
    }

    private static long least(long a, long b) {
        return a < b ? a : b;
    }

    /** ThreadState.refusedAt of a dropped tree: it never grows again. */
    private static final long DROPPED = Long.MAX_VALUE;

    /** Merged trees' states, for their fold counts at VM death. Under LOCK. */
    private static ThreadState[] merged = new ThreadState[0];

    /** A tree is dropped (its thread ended and the profiler has it): its budget comes back. */
    private static void dropTree(ThreadState s) {
        synchronized (LOCK) {
            jvmGranted -= s.granted;
            s.granted = 0;
            s.refusedAt = DROPPED;
            foldedOfDropped += s.folded;
            budgetEpoch++;
        }
    }

    /**
     * The root of a merged tree (a profiler's tree of ended threads): it counts against the
     * JVM's budget like a thread's, folding new contexts once the budget is spent.
     */
    static Node mergedTreeRoot() {
        ThreadState s = new ThreadState(null, Integer.MAX_VALUE);
        synchronized (LOCK) {
            ThreadState[] a = new ThreadState[merged.length + 1];
            System.arraycopy(merged, 0, a, 0, merged.length);
            a[merged.length] = s;
            merged = a;
        }
        return s.root;
    }

    private static ThreadState attach() {
        Thread t = Thread.currentThread();
        synchronized (LOCK) {
            if (closed || !holdOff(t)) {
                return null;
            }
        }
        if (contextSlots) {
            // A carrier of virtual threads that got its state at a mount (from a virtual
            // thread, which cannot set the carrier's thread-local) keeps that one.
            ThreadState adopted = Carriers.find(t);
            if (adopted != null) {
                try {
                    states.set(adopted);
                    return adopted;
                } finally {
                    release(t);
                }
            }
        }
        ThreadState s;
        try {
            s = new ThreadState(t, granularity);
            s.busy = true;
            if (windowOpen) {
                // Its first instrumented entry in the window walks its stack (Seeding).
                s.seededTop = ThreadState.UNSEEDED;
                s.window = windowEpoch;
            }
            states.set(s);
        } catch (Throwable e) {
            return null;
        } finally {
            release(t);
        }
        try {
            synchronized (LOCK) {
                if (windowOpen) {
                    windowThreads++;
                }
                addLive(s);
            }
            bind(s);
            Profiler p = profiler;
            if (p != null) {
                p.register(t, s.root);
            }
            sweepIfDue();
        } catch (Throwable e) {
            // A failing profiler must not break the application; the thread is still profiled.
        } finally {
            s.busy = false;
        }
        return s;
    }

    /** Registers {@code s} among the live threads (caller holds LOCK). */
    private static void addLive(ThreadState s) {
        if (nLive == live.length) {
            ThreadState[] a = new ThreadState[nLive * 2];
            System.arraycopy(live, 0, a, 0, nLive);
            live = a;
        }
        s.slot = nLive;
        live[nLive++] = s;
    }

    /**
     * Puts {@code t} on the list of threads that must not attach (caller holds LOCK); false if it
     * already is there.
     */
    private static boolean holdOff(Thread t) {
        for (int i = 0; i < nAttaching; i++) {
            if (attaching[i] == t) {
                return false;
            }
        }
        if (nAttaching == attaching.length) {
            Thread[] a = new Thread[nAttaching * 2];
            System.arraycopy(attaching, 0, a, 0, nAttaching);
            attaching = a;
        }
        attaching[nAttaching++] = t;
        return true;
    }

    /** Undoes {@link #holdOff}. */
    private static void release(Thread t) {
        synchronized (LOCK) {
            for (int i = 0; i < nAttaching; i++) {
                if (attaching[i] == t) {
                    attaching[i] = attaching[--nAttaching];
                    attaching[nAttaching] = null;
                    break;
                }
            }
        }
    }

    /**
     * JVMTI's virtual-thread mount, unmount and end (JDK 21+), on the virtual thread: see
     * {@link Carriers}. Never throws into the agent.
     */
    static void carried(Thread carrier, int why) {
        try {
            if (contextSlots && !closed) {
                Carriers.carried(carrier, why);
            }
        } catch (Throwable e) {
            // The application's mount must not fail; the carrier keeps what it published.
        }
    }

    /** The calling thread's state if it has one (never attaches). */
    static ThreadState existingState() {
        ThreadLocal<ThreadState> tl = states;
        if (tl == null) {
            return null;
        }
        Thread t = Thread.currentThread();
        ThreadState s = BY_THREAD[System.identityHashCode(t) & (BY_THREAD.length - 1)];
        return s != null && s.thread == t ? s : tl.get();
    }

    /**
     * The state of {@code carrier}, a platform thread that a virtual thread is mounted on
     * (the calling OS thread is the carrier's, the current Java thread the virtual one): the
     * carrier's own if it attached, else a new one registered for it (the carrier's later
     * attach takes it, see {@link #attach}). Null once the runtime is closed.
     */
    static ThreadState carrierState(Thread carrier) {
        ThreadState s = null;
        boolean made = false;
        synchronized (LOCK) {
            if (closed) {
                return null;
            }
            for (int i = 0; i < nLive && s == null; i++) {
                if (live[i].thread == carrier) {
                    s = live[i];
                }
            }
            if (s == null) {
                s = new ThreadState(carrier, granularity);
                made = true;
                addLive(s);
            }
        }
        Profiler p = profiler;
        if (made && p != null) {
            s.busy = true;
            try {
                p.register(carrier, s.root);
            } finally {
                s.busy = false;
            }
        }
        return s;
    }

    /** A carrier's report (it may run no instrumented code of its own to make one). */
    static void reportCarrier(ThreadState c, ThreadState mounted) {
        Profiler p = profiler;
        if (p == null || c.busy || (mounted != null && mounted.busy)) {
            return;
        }
        c.due = false;
        c.busy = true;
        if (mounted != null) {
            mounted.busy = true; // what the report runs profiles into nobody's tree
        }
        try {
            c.reports++;
            p.report(c.root, c.currentNode());
        } finally {
            c.busy = false;
            if (mounted != null) {
                mounted.busy = false;
            }
        }
    }

    /** Live-list size at which the next sweep runs (doubles, so sweeping is amortized O(1)). */
    private static int sweepAt = 64;

    /**
     * Hands the trees of threads that died without a JVMTI ThreadEnd (virtual threads, which
     * get none) to the profiler, so that they do not pile up until VM death. Runs on an
     * attaching thread, which is busy (its own instrumented callees go to the sink).
     */
    private static void sweepIfDue() {
        ThreadState[] dead;
        int n = 0;
        synchronized (LOCK) {
            if (nLive < sweepAt) {
                return;
            }
            dead = new ThreadState[nLive];
            for (int i = 0; i < nLive; i++) {
                Thread t = live[i].thread;
                if (t != null && !t.isAlive()) {
                    dead[n++] = live[i];
                }
            }
            for (int i = 0; i < n; i++) {
                unregister(dead[i]); // re-entrant LOCK
            }
            sweepAt = Math.max(64, nLive * 2);
        }
        Profiler p = profiler;
        for (int i = 0; i < n; i++) {
            dead[i].busy = true;
            if (p != null) {
                try {
                    p.threadEnded(dead[i].thread, dead[i].root);
                } catch (Throwable e) {
                    // ignore: see attach
                }
            }
        }
    }

    /**
     * Drops an ended thread's state from {@link #BY_THREAD} so that the cache does not keep its
     * tree alive. Racy on purpose: clearing another thread's fresh entry only costs it a miss.
     */
    private static void forget(ThreadState s) {
        Thread t = s.thread;
        if (t != null) {
            int slot = System.identityHashCode(t) & (BY_THREAD.length - 1);
            if (BY_THREAD[slot] == s) {
                BY_THREAD[slot] = null;
            }
        }
    }

    /** Profiler calls of every thread that has ended (under {@link #LOCK}). */
    private static long reportsOfEnded;

    private static boolean unregister(ThreadState s) {
        synchronized (LOCK) {
            int i = s.slot;
            if (i < 0 || i >= nLive || live[i] != s) {
                return false;
            }
            ThreadState last = live[--nLive];
            live[i] = last;
            last.slot = i;
            live[nLive] = null;
            s.slot = -1;
            forget(s);
            reportsOfEnded += s.reports;
            dropTree(s);
            return true;
        }
    }

    // ---- called by the native agent ----

    /** Called once by the agent when the VM is initialized (or from premain). */
    static void init(
            String profilerName,
            int gran,
            int overflow,
            long maxContexts,
            long maxThreadContexts,
            int reportBudgetPercent,
            int publish,
            int paceMs)
            throws Throwable {
        granularity = gran;
        reportBudget = reportBudgetPercent;
        overflowMid = overflow;
        jvmBudget = contextBudget(maxContexts);
        threadBudget = maxThreadContexts > 0 ? maxThreadContexts : Long.MAX_VALUE;
        if ("window".equals(profilerName)) {
            // Exact windows: no profiler until one opens, no reports, so no pacer either;
            // paced (a flag nobody sets) keeps the entry free of the bytecode countdown.
            paced = true;
            return;
        }
        Profiler p;
        if ("file".equals(profilerName)) {
            p = new FileProfiler();
        } else if ("usdt".equals(profilerName)) {
            p = new UsdtProfiler(null);
        } else if ("file+usdt".equals(profilerName)) {
            p = new UsdtProfiler(new FileProfiler());
        } else {
            Class<?> c = Class.forName(profilerName, true, ClassLoader.getSystemClassLoader());
            p = (Profiler) c.getDeclaredConstructor().newInstance();
        }
        if (p instanceof UsdtProfiler && publish != PUBLISH_NONE) {
            // The context slots (CPU per context, see ContextSlot) write native memory
            // through jdk.internal.misc.Unsafe, which java.base exports to nobody; the
            // heap's way needs its field offsets. publish=false: no thread publishes, so
            // contexts change without a store.
            contextSlots =
                    exportInternal(Object.class.getModule(), "jdk.internal.misc", Rt.class.getModule());
            heapContexts = contextSlots && publish == PUBLISH_HEAP;
        }
        profiler = p;
        states = new ThreadLocal<ThreadState>();
        if (paceMs > 0) {
            paced = true;
            Thread pacer = new Thread(new Pacer(paceMs), "jp-report-pacer");
            pacer.setDaemon(true);
            pacer.start();
        }
    }

    /**
     * Marks every live thread due to report, every {@code ms} while the profiler wants
     * reports, and looks ten times less often while it does not (no tracer listening, or the
     * file profiler, which reports nothing until threads end): a JVM without jpd pays ten
     * wake-ups a second. Runs only this package's code, so it never profiles itself.
     */
    private static final class Pacer implements Runnable {
        private final long ms;

        Pacer(long ms) {
            this.ms = ms;
        }

        @Override
        public void run() {
            // Never attached: JDK code this thread runs (with jdk=true, Thread.sleep's
            // event classes) profiles into the sink.
            synchronized (LOCK) {
                holdOff(Thread.currentThread());
            }
            for (;;) {
                Profiler p = profiler;
                boolean wanted = p != null && p.wantsReports();
                try {
                    Thread.sleep(wanted ? ms : ms * 10);
                } catch (InterruptedException e) {
                    return;
                }
                if (!wanted) {
                    continue;
                }
                synchronized (LOCK) {
                    if (closed) {
                        return;
                    }
                    for (int i = 0; i < nLive; i++) {
                        live[i].due = true;
                    }
                }
            }
        }
    }

    /** Whether threads publish their current context for jpd's sampler (usdt profiler). */
    static boolean contextSlots;
    /**
     * Whether they publish it on the heap where they can (ContextSlot.heapCell), else in a
     * context slot.
     */
    static boolean heapContexts;

    /** {@code publish=}: false, slot, or true (the heap where it can, else a slot). */
    static final int PUBLISH_NONE = 0;
    static final int PUBLISH_SLOT = 1;
    static final int PUBLISH_HEAP = 2;

    /** Bytes a context costs at most in a tree (node and its share of a child table). */
    private static final long CONTEXT_BYTES = 64;

    /**
     * {@code max_contexts}: -1 (not given) is a sixteenth of the heap's limit (live trees and
     * each merged tree: with file+usdt at most 3/16 of the heap), 0 means no limit.
     */
    private static long contextBudget(long max) {
        if (max > 0) {
            return max;
        }
        if (max == 0) {
            return Long.MAX_VALUE;
        }
        return Math.max(GRANT, Runtime.getRuntime().maxMemory() / 16 / CONTEXT_BYTES);
    }

    /** JVMTI ThreadEnd, on the ending thread, with the state {@link #bind} stored. */
    static void threadEnded(Object o) {
        if (!(o instanceof ThreadState)) {
            return;
        }
        ThreadState s = (ThreadState) o;
        s.busy = true; // for good: the thread is leaving
        // Thread.exit() has already cleared the thread's ThreadLocals (it runs before JVMTI
        // ThreadEnd), so instrumented code the profiler calls here (JDK classes with jdk=true)
        // would not find this state and would attach the thread again with a fresh tree. Hold
        // the thread off attaching while it ends: such code then counts into the sink.
        Thread t = Thread.currentThread();
        boolean held;
        synchronized (LOCK) {
            held = holdOff(t);
        }
        try {
            if (unregister(s)) {
                Profiler p = profiler;
                if (p != null) {
                    try {
                        p.threadEnded(s.thread, s.root);
                    } catch (Throwable e) {
                        // ignore: see attach
                    }
                }
            }
        } finally {
            if (held) {
                release(t);
            }
        }
    }

    // ---- exact windows (called by the agent, one window at a time) ----

    /** A window is open: attaching threads get fresh trees and seed their context path. */
    static boolean windowOpen;
    /** Counts windows; a thread's state remembers the window it attached in. */
    static int windowEpoch;
    /** Threads attached in the open window, and seeded contexts made (under LOCK). */
    static int windowThreads;
    static int windowSeeded;

    /**
     * Opens a window: every thread that enters an instrumented method from now on attaches
     * with a fresh tree (a new ThreadLocal, an empty cache), whose ended trees the file
     * profiler merges.
     */
    static void openWindow() {
        synchronized (LOCK) {
            windowEpoch++;
            windowThreads = 0;
            windowSeeded = 0;
            windowOpen = true;
        }
        profiler = new FileProfiler();
        states = new ThreadLocal<ThreadState>();
    }

    /**
     * Closes the window: no thread attaches or enters any more (frames still running
     * instrumented code count into trees nobody reads), every thread's tree is merged as it
     * is, and the merged tree goes to the agent ({@link #windowTree}).
     */
    static void closeWindow() {
        states = null;
        ThreadState[] rest;
        int epoch;
        synchronized (LOCK) {
            windowOpen = false;
            epoch = windowEpoch;
            rest = new ThreadState[nLive];
            System.arraycopy(live, 0, rest, 0, nLive);
        }
        for (int i = 0; i < BY_THREAD.length; i++) {
            BY_THREAD[i] = null;
        }
        Profiler p = profiler;
        for (ThreadState s : rest) {
            s.dead = true;
            s.busy = true;
            if (unregister(s) && p != null && s.window == epoch) {
                try {
                    p.threadEnded(s.thread, s.root);
                } catch (Throwable e) {
                    // ignore: see attach
                }
            }
            // Its nodes become garbage; a racing entry that still reads the array finds
            // the (empty) root, never a null.
            Node[] nodes = s.nodes;
            if (nodes != null) {
                for (int i = 1; i < nodes.length; i++) {
                    nodes[i] = s.root;
                }
            }
            s.root.forgetChildren();
        }
        profiler = null;
        int threads;
        int seeded;
        synchronized (LOCK) {
            threads = windowThreads;
            seeded = windowSeeded;
        }
        if (p instanceof FileProfiler) {
            FileProfiler f = (FileProfiler) p;
            FileProfiler.Flat flat = new FileProfiler.Flat();
            flat.flatten(f.tree());
            forgetMerged(f.tree());
            windowTree(flat.parent, flat.mid, flat.calls, flat.bytecodes, new int[] {threads, seeded});
        }
    }

    /** A merged tree nobody needs any more (a window's, once written). */
    private static void forgetMerged(Node root) {
        synchronized (LOCK) {
            int n = 0;
            ThreadState[] a = new ThreadState[merged.length];
            for (ThreadState m : merged) {
                if (m != root.state) {
                    a[n++] = m;
                } else {
                    foldedOfDropped += m.folded;
                }
            }
            ThreadState[] b = new ThreadState[n];
            System.arraycopy(a, 0, b, 0, n);
            merged = b;
        }
    }

    /** Seeded contexts made by a thread (for the window's result). */
    static void countSeeded(int n) {
        synchronized (LOCK) {
            windowSeeded += n;
        }
    }

    /**
     * The window's merged tree, pre-order arrays as {@link #writeProfile}, and {@code counts}:
     * the threads that attached in the window and the seeded contexts they made.
     */
    private static native void windowTree(
            int[] parent, int[] mid, long[] calls, long[] bytecodes, int[] counts);

    /** JVMTI VMDeath: hand every remaining tree to the profiler, then shut it down. */
    static void vmDeath() {
        ThreadState me = states == null ? null : states.get();
        if (me != null) {
            me.busy = true;
        }
        ThreadState[] rest;
        synchronized (LOCK) {
            closed = true;
            rest = new ThreadState[nLive];
            System.arraycopy(live, 0, rest, 0, nLive);
        }
        Profiler p = profiler;
        for (ThreadState s : rest) {
            if (unregister(s) && p != null) {
                try {
                    p.threadEnded(s.thread, s.root);
                } catch (Throwable e) {
                    // ignore
                }
            }
        }
        if (p != null) {
            try {
                p.shutdown();
            } catch (Throwable e) {
                System.err.println("jp-agent: profiler shutdown failed: " + e);
            }
        }
        long mergedFolded = 0;
        synchronized (LOCK) {
            countReports(reportsOfEnded);
            for (ThreadState m : merged) {
                mergedFolded += m.folded;
            }
            countContexts(foldedOfDropped, mergedFolded, jvmBudget == Long.MAX_VALUE ? 0 : jvmBudget);
        }
    }

    // ---- natives (registered by the agent with RegisterNatives) ----

    /** Remember {@code s} for the current thread (JVMTI thread-local storage), for ThreadEnd. */
    private static native void bind(ThreadState s);

    /**
     * Write a merged tree in the agent's configured format to its configured file. Node i has
     * parent {@code parent[i]} (-1 for the root, which is node 0).
     */
    public static native void writeProfile(int[] parent, int[] mid, long[] calls, long[] bytecodes);

    /** {@code pkg.Class.name(DESC)} of a method id, or null if unknown. */
    public static native String methodName(int mid);

    /** The agent's class-rewriting statistics as {@code key=value} pairs separated by spaces. */
    public static native String agentStats();

    /** A direct buffer over the USDT probe's semaphore (2 bytes, native order). */
    static native ByteBuffer usdtSemaphore();

    /** A direct buffer over the control block jpd writes (64 bytes, native order). */
    static native ByteBuffer usdtControl();

    /** The address of a direct buffer's memory (0 if it is not one). */
    static native long bufferAddress(ByteBuffer b);

    /**
     * Answers control generation {@code generation} on the JVM stream: HELLO and the whole method
     * table (the caller then sends the ended threads' snapshot).
     */
    static native void usdtHello(long generation, int liveThreads);

    /**
     * Fires the probe with the record at {@code addr} ({@code len} bytes) of the calling thread's
     * stream, after the agent has sent any methods the tracer does not have yet.
     */
    static native void fire(long addr, int len, int liveThreads);

    /** The process id as this JVM sees it (the records' informational pid). */
    static native int usdtPid();

    /** The kernel's id of the calling thread (what the eBPF sampler sees as its pid). */
    static native int osThreadId();

    /**
     * The address of the cell of this thread's JNI global reference to {@code s} (its own
     * state, bound at attach), after checking that the object at the address the cell holds
     * reads {@code cookie} at {@code cookieOffset}; 0 if it does not. Called only where
     * {@link #heapContexts} (the agent did not find a collector that moves objects while
     * threads run, under which a cell may name a stale copy).
     */
    static native long heapCell(ThreadState s, int cookieOffset, int cookie);

    /** JVMTI AddModuleExports: {@code from} exports {@code pkg} to {@code to}; false on failure. */
    private static native boolean exportInternal(Module from, String pkg, Module to);

    /** VM death: the JVM stream's last record (when a tracer listens); flushes usdt_tap. */
    static native void usdtEnd(int liveThreads);

    /** Profiler calls of all threads, for the statistics line ({@code reports=}). */
    static native void countReports(long reports);

    /**
     * Calls whose new context was folded into an overflow node (thread trees), contexts folded
     * while merging ended threads' trees, and the JVM's context budget (0: none), for the
     * statistics and the exit warning.
     */
    static native void countContexts(long foldedCalls, long foldedMerged, long budget);

    /** Threads registered and not ended (racy: for the hello record). */
    static int liveThreads() {
        return nLive;
    }

    /** The configured granularity. */
    public static int granularity() {
        return granularity;
    }
}
