package jp.rt;

import java.util.Iterator;
import java.util.function.Function;
import java.util.stream.Stream;

/**
 * Seeded contexts of an exact window (docs/agent-design.md, "Exact windows"). A frame that
 * was running when the window opened keeps its old, uninstrumented code until it returns:
 * it never entered, and it will pop without an exit. Its calls reach instrumented code,
 * which must find the frame's context. So a thread's first instrumented entry in a window
 * walks its stack and makes the path of such frames (of methods the window instrumented),
 * outermost first, as nodes with 0 calls and 0 bytecodes, wids 1..k; the innermost becomes
 * current. Later, whenever the current context is a seeded one ({@link
 * ThreadState#seededTop}), the entry walks the stack again: the seeded frames still running
 * are a prefix f0..fj of the seeded path (frames only pop), and fj is the caller.
 *
 * <p>Runs with the thread busy: JDK code of the walk that a window with jdk=true
 * instruments counts into the sink and never comes back here.
 */
final class Seeding {
    private Seeding() {}

    /** Class references retained: JDK 25's frames give a descriptor only then. */
    private static final StackWalker WALKER =
            StackWalker.getInstance(StackWalker.Option.RETAIN_CLASS_REFERENCE);

    /** Methods of frames, outermost first. */
    static final class Frames {
        String[] cls = new String[16];
        String[] name = new String[16];
        String[] desc = new String[16];
        int n;

        void add(String c, String m, String d) {
            if (n == cls.length) {
                cls = grow(cls);
                name = grow(name);
                desc = grow(desc);
            }
            cls[n] = c;
            name[n] = m;
            desc[n] = d;
            n++;
        }

        private static String[] grow(String[] a) {
            String[] b = new String[a.length * 2];
            System.arraycopy(a, 0, b, 0, a.length);
            return b;
        }

        boolean same(int i, Frames o, int j) {
            return cls[i].equals(o.cls[j]) && name[i].equals(o.name[j]) && desc[i].equals(o.desc[j]);
        }
    }

    /**
     * The frames below the entering method (the runtime's own frames and the callee are
     * skipped), outermost first, native ones left out. Not a lambda: the walk must not
     * bootstrap an invokedynamic on the hot path's slow side.
     */
    private static final class Below implements Function<Stream<StackWalker.StackFrame>, Frames> {
        @Override
        public Frames apply(Stream<StackWalker.StackFrame> s) {
            Frames top = new Frames();
            Iterator<StackWalker.StackFrame> it = s.iterator();
            boolean calleeSkipped = false;
            while (it.hasNext()) {
                StackWalker.StackFrame f = it.next();
                String c = f.getClassName();
                if (!calleeSkipped) {
                    if (!c.startsWith("jp.rt.")) {
                        calleeSkipped = true;
                    }
                    continue;
                }
                if (!f.isNativeMethod()) {
                    top.add(c, f.getMethodName(), f.getDescriptor());
                }
            }
            Frames out = new Frames();
            for (int i = top.n - 1; i >= 0; i--) {
                out.add(top.cls[i], top.name[i], top.desc[i]);
            }
            return out;
        }
    }

    private static final Below BELOW = new Below();

    /**
     * The entry found a seeded context current (or the thread not yet seeded): the current
     * context for the entering method's caller. Sets {@code current} and {@code seededTop}.
     */
    static int reseat(ThreadState s) {
        s.busy = true;
        try {
            Frames below = WALKER.walk(BELOW);
            if (s.seeds == null) {
                seed(s, below);
            } else {
                int alive = stillRunning(s.seeds, below, s.seededTop);
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

    /** The first walk: the seeded path, made first so that its wids are 1..k. */
    private static void seed(ThreadState s, Frames below) {
        Frames seeds = new Frames();
        Node n = s.root;
        for (int i = 0; i < below.n; i++) {
            int mid = Rt.seedMethod(below.cls[i], below.name[i], below.desc[i]);
            if (mid >= 0) {
                seeds.add(below.cls[i], below.name[i], below.desc[i]);
                n = n.child(mid);
            }
        }
        s.seeds = seeds;
        s.current = n.wid;
        s.seededTop = seeds.n > 0 && n.wid == seeds.n ? seeds.n : -1;
        if (seeds.n > 0) {
            Rt.countSeeded(seeds.n);
        }
    }

    /**
     * How many seeded frames still run: the longest prefix of the seeded path found, in
     * order, among the frames below the entering method (frames between them are the JDK's
     * or other uninstrumented code), at most {@code top}: frames that popped never come back.
     */
    static int stillRunning(Frames seeds, Frames below, int top) {
        int j = 0;
        int most = top < seeds.n ? top : seeds.n;
        for (int i = 0; i < below.n && j < most; i++) {
            if (below.same(i, seeds, j)) {
                j++;
            }
        }
        return j;
    }
}
