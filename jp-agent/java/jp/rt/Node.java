package jp.rt;

import jdk.internal.vm.annotation.ForceInline;

/**
 * One calling context of a Method Call Tree: the method {@link #mid} reached through the chain of
 * {@link #parent}s. Counters are written only by the owning thread (no locking); other threads read
 * them only at thread end and VM death. The children are the last child made (the only one while
 * there is one) and, from the second on, a small open-addressing table keyed by mid, so the hot
 * path touches no java.util class (those may be instrumented with jdk=true).
 */
public final class Node {
    /** Method id from the agent's method table ({@link Rt#methodName(int)}); -1 for a root. */
    public final int mid;
    /** Invocations in this context. */
    public long calls;
    /** Bytecodes the unmodified program executed in this context, callees excluded. */
    public long bytecodes;
    /** The caller's context; null for a root. */
    public final Node parent;
    /** The owning thread's state (null in merged trees, which belong to no thread). */
    final ThreadState state;

    /**
     * The node's id on the USDT wire ({@link UsdtProfiler}) and in its thread's context slot:
     * in thread trees given at creation, in merged trees 0 until first sent. An int fits
     * in the object's alignment padding, so Node stays 56 bytes (compressed oops); the counts
     * last sent live in the sender's per-thread arrays, indexed by this id.
     */
    int wid;

    /**
     * Power-of-two table of children, null slots empty, linear probing on mid; null while the
     * node has at most one child (then {@link #hot} holds it: most contexts have no child or
     * one, and such a node saves the 32 bytes of a table).
     */
    private Node[] kids;
    /**
     * The child made before {@link #hot} (null until the second child): the entry checks it
     * after {@code hot}, so that a caller alternating between the last two callees it made
     * (always, for a node with two children) finds both without the table. It took the place
     * of a child count (Node stays 56 bytes); a table's fill is counted when a child is added
     * ({@link #mustGrow}).
     */
    private Node hot2;

    /** The sink's root ({@link Rt#SINK}): its own parent, so that leaving it needs no test. */
    Node(ThreadState sink) {
        this.mid = -1;
        this.parent = this;
        this.state = sink;
    }

    Node(int mid, Node parent, ThreadState state) {
        this.mid = mid;
        this.parent = parent;
        this.state = state;
        // Thread trees number their nodes as they grow (the root is 0); merged trees, which
        // belong to no thread, get their ids when first sent.
        if (state != null && parent != null) {
            this.wid = state.nextWid++;
            state.made(this);
        }
    }

    /**
     * The child made last, checked before the table (one dependent load less when a loop
     * calls the same method again), and the only child while there is no table. Not moved on
     * a table hit: that store (with G1's barrier) on every call that alternates between
     * children cost more than the table probes it saved
     * (docs/journal/last-child-made-not-found.md).
     */
    private Node hot;

    /** The child for {@code m}, created on first use. Kept tiny so that the JIT inlines it. */
    Node child(int m) {
        Node h = hot;
        if (h != null && h.mid == m) {
            return h;
        }
        return lookup(m);
    }

    /**
     * {@link #child} for the usual entry ({@link Rt#enter}): the last two children made, then
     * the table probed here. Forced inline into the entry: compiled on its own first it would
     * be too big for C2 to inline (InlineSmallCode), and every miss of the last child would be
     * a call (docs/journal/two-children-checked.md).
     */
    @ForceInline
    Node childOnEntry(int m) {
        Node h = hot;
        if (h != null && h.mid == m) {
            return h;
        }
        Node h2 = hot2;
        if (h2 != null && h2.mid == m) {
            return h2;
        }
        Node[] t = kids;
        if (t != null) {
            Node c = probe(t, m);
            if (c != null) {
                return c;
            }
        }
        return addChild(m);
    }

    private Node lookup(int m) {
        Node c = find(m);
        if (c != null) {
            return c;
        }
        return addChild(m);
    }

    /** The child for {@code m}, or null. */
    private Node find(int m) {
        Node[] t = kids;
        if (t == null) {
            Node h = hot;
            return h != null && h.mid == m ? h : null;
        }
        return probe(t, m);
    }

    /**
     * The child for {@code m} in table {@code t}, or null. Forced inline so that the entry's
     * lookup ({@link #childOnEntry}) keeps the probe in place, as {@link #find} does.
     */
    @ForceInline
    private static Node probe(Node[] t, int m) {
        int mask = t.length - 1;
        int i = m & mask;
        Node c;
        while ((c = t[i]) != null) {
            if (c.mid == m) {
                return c;
            }
            i = (i + 1) & mask;
        }
        return null;
    }

    /**
     * Makes the child for {@code m}, which the caller did not find. Not kept out of line:
     * that makes the entry small enough to be inlined into instrumented methods, which pays
     * in small programs and costs Xalan 8-10 % (docs/journal/two-children-checked.md).
     */
    private Node addChild(int m) {
        int o = Rt.overflowMid;
        if (m == o || mid == o || (state != null && !state.mayAdd())) {
            return overflowChild(m != o);
        }
        return insertChild(new Node(m, this, state));
    }

    /**
     * Where a call goes whose context would be new once the tree's budget is spent ({@code
     * refused}), or where a merge puts an overflow node's counts. A real node has one overflow
     * child; that child has one of its own, which takes every call below it. Two levels, so
     * that a frame in the first returns the thread to the real parent and a frame in the
     * second returns it to the first: the real contexts keep exact counts, and every call and
     * bytecode below the limit is still counted, in the overflow nodes.
     */
    private Node overflowChild(boolean refused) {
        int o = Rt.overflowMid;
        if (refused && state != null) {
            state.folded++; // a call whose context is one of the overflow nodes
        }
        if (mid == o && parent != null && parent.mid == o) {
            return this;
        }
        Node c = find(o);
        return c != null ? c : insertChild(new Node(o, this, state));
    }

    /** Adds {@code c}, which becomes the child made last. */
    private Node insertChild(Node c) {
        Node[] t = kids;
        if (t == null) {
            Node only = hot;
            if (only == null) {
                hot = c;
                return c;
            }
            t = new Node[4]; // the second child: the first moves into a table
            insert(t, only);
        } else if (mustGrow(t, c.mid)) {
            t = grow(t);
        }
        insert(t, c);
        hot2 = hot;
        // Publish the table after filling it, and only then the new last child: a reader on
        // another thread (VM death), which reads hot before the table, sees either the old
        // children or all of the new ones.
        kids = t;
        hot = c;
        return c;
    }

    /**
     * Whether adding a child for {@code m} would fill {@code t} beyond three quarters. Tables
     * of up to 64 slots are counted on every add (at most 64 loads, when a context is made). A
     * bigger table is counted only when the new child's probe is long, so that a node with
     * very many children does not cost a count of its whole table per child: such a table
     * may fill further between two long probes, and the first long probe grows it. A full
     * table always gives a long probe, so every add finds a free slot.
     */
    private static boolean mustGrow(Node[] t, int m) {
        int mask = t.length - 1;
        if (t.length > 64) {
            int i = m & mask;
            int probe = 0;
            while (t[i] != null && probe <= LONG_PROBE) {
                i = (i + 1) & mask;
                probe++;
            }
            if (probe <= LONG_PROBE) {
                return false;
            }
        }
        return (occupied(t) + 1) * 4 > t.length * 3;
    }

    /** A probe longer than this makes a big table count its fill (see mustGrow). */
    private static final int LONG_PROBE = 8;

    private static int occupied(Node[] t) {
        int n = 0;
        for (Node c : t) {
            if (c != null) {
                n++;
            }
        }
        return n;
    }

    private static Node[] grow(Node[] old) {
        Node[] t = new Node[old.length * 2];
        for (Node c : old) {
            if (c != null) {
                insert(t, c);
            }
        }
        return t;
    }

    private static void insert(Node[] t, Node c) {
        int mask = t.length - 1;
        int i = c.mid & mask;
        while (t[i] != null) {
            i = (i + 1) & mask;
        }
        t[i] = c;
    }

    /**
     * Drops every child (a closed window's thread tree, once merged): the tree is garbage
     * even while the thread lives on. Frames still running keep the nodes they hold.
     */
    void forgetChildren() {
        hot = null;
        hot2 = null;
        kids = null;
    }

    /** A snapshot of the children (for profilers; not on the hot path). */
    public Node[] children() {
        Node only = onlyChild();
        Node[] t = kids;
        if (t == null) {
            return only == null ? new Node[0] : new Node[] {only};
        }
        int n = 0;
        for (Node c : t) {
            if (c != null) {
                n++;
            }
        }
        Node[] r = new Node[n];
        int j = 0;
        for (Node c : t) {
            if (c != null && j < n) {
                r[j++] = c;
            }
        }
        // Slots are only ever filled, never emptied, so the second pass finds at least n.
        return r;
    }

    /**
     * The raw child table (null slots empty), or null when the node has at most one child:
     * then {@link #onlyChild} is it. For the runtime's walks, which must not allocate per
     * node. A reader on another thread calls {@code onlyChild} first.
     */
    Node[] table() {
        return kids;
    }

    /** The child made last: while {@link #table} is null, the node's only child (or null). */
    Node onlyChild() {
        return hot;
    }

    /** Number of children (racy when read by another thread). */
    public int childCount() {
        Node[] t = kids;
        return t == null ? (hot == null ? 0 : 1) : occupied(t);
    }
}
