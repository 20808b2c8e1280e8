package jp.rt;

/**
 * The built-in profiler (JP's sample profiling agent): merges the trees of all threads into one
 * global tree with 64-bit counters as the threads end, and has the agent write it at VM death.
 */
final class FileProfiler implements Profiler {
    private final Node global = Rt.mergedTreeRoot();

    @Override
    public void register(Thread thread, Node root) {}

    @Override
    public int report(Node root, Node current) {
        return Rt.granularity;
    }

    /** Its reports do nothing: the trees are merged when their threads end. */
    @Override
    public boolean wantsReports() {
        return false;
    }

    @Override
    public synchronized void threadEnded(Thread thread, Node root) {
        merge(global, root);
    }

    /**
     * The merged tree, for a profiler that merges the ended threads itself (the usdt
     * profiler keeps the same tree for jpd): one copy instead of two.
     */
    Node tree() {
        return global;
    }

    @Override
    public synchronized void shutdown() {
        Flat f = new Flat();
        f.flatten(global);
        Rt.writeProfile(f.parent, f.mid, f.calls, f.bytecodes);
    }

    /** Adds {@code src}'s subtree into {@code dst}'s (iteratively: trees can be very deep). */
    static void merge(Node dst, Node src) {
        Node[] ds = new Node[64];
        Node[] ss = new Node[64];
        int sp = 0;
        ds[sp] = dst;
        ss[sp] = src;
        sp++;
        while (sp > 0) {
            sp--;
            Node d = ds[sp];
            Node s = ss[sp];
            ds[sp] = null;
            ss[sp] = null;
            for (Node sc : s.children()) {
                Node dc = d.child(sc.mid);
                dc.calls += sc.calls;
                dc.bytecodes += sc.bytecodes;
                if (sp == ds.length) {
                    Node[] a = new Node[sp * 2];
                    Node[] b = new Node[sp * 2];
                    System.arraycopy(ds, 0, a, 0, sp);
                    System.arraycopy(ss, 0, b, 0, sp);
                    ds = a;
                    ss = b;
                }
                ds[sp] = dc;
                ss[sp] = sc;
                sp++;
            }
        }
    }

    /** Pre-order flattening into parallel arrays; node 0 is the root. */
    static final class Flat {
        int[] parent = new int[256];
        int[] mid = new int[256];
        long[] calls = new long[256];
        long[] bytecodes = new long[256];
        int n;

        void flatten(Node root) {
            Node[] stack = new Node[64];
            int[] pstack = new int[64];
            int sp = 0;
            stack[sp] = root;
            pstack[sp] = -1;
            sp++;
            while (sp > 0) {
                sp--;
                Node x = stack[sp];
                int p = pstack[sp];
                stack[sp] = null;
                int me = add(p, x);
                for (Node c : x.children()) {
                    if (sp == stack.length) {
                        Node[] a = new Node[sp * 2];
                        int[] b = new int[sp * 2];
                        System.arraycopy(stack, 0, a, 0, sp);
                        System.arraycopy(pstack, 0, b, 0, sp);
                        stack = a;
                        pstack = b;
                    }
                    stack[sp] = c;
                    pstack[sp] = me;
                    sp++;
                }
            }
            parent = trim(parent, n);
            mid = trim(mid, n);
            calls = trim(calls, n);
            bytecodes = trim(bytecodes, n);
        }

        private int add(int p, Node x) {
            if (n == parent.length) {
                int cap = n * 2;
                parent = copy(parent, cap);
                mid = copy(mid, cap);
                calls = copy(calls, cap);
                bytecodes = copy(bytecodes, cap);
            }
            parent[n] = p;
            mid[n] = x.mid;
            calls[n] = x.calls;
            bytecodes[n] = x.bytecodes;
            return n++;
        }

        private static int[] copy(int[] a, int cap) {
            int[] r = new int[cap];
            System.arraycopy(a, 0, r, 0, Math.min(a.length, cap));
            return r;
        }

        private static long[] copy(long[] a, int cap) {
            long[] r = new long[cap];
            System.arraycopy(a, 0, r, 0, Math.min(a.length, cap));
            return r;
        }

        private static int[] trim(int[] a, int n) {
            return a.length == n ? a : copy(a, n);
        }

        private static long[] trim(long[] a, int n) {
            return a.length == n ? a : copy(a, n);
        }
    }
}
