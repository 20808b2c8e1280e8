// bench jvm, cost model: one kind of operation repeated N times a round, so that the time
// per operation with and without the agent shows what each costs. Usage:
//   CostModel OP N WARMUP_ROUNDS WARMUP_MS MEASURED
// OP: static | across | bimorphic | megamorphic | recursion | blocks | throw | vyield.
public class CostModel {
    public static void main(String[] a) throws Exception {
        String op = a[0];
        int n = Integer.parseInt(a[1]);
        Rounds.Work w;
        switch (op) {
            case "static": w = () -> staticCalls(n); break;
            case "across": w = () -> acrossCalls(n); break;
            case "bimorphic": w = () -> virtualCalls(BIMORPHIC, n); break;
            case "megamorphic": w = () -> virtualCalls(MEGAMORPHIC, n); break;
            case "recursion": w = () -> recursion(n); break;
            case "blocks": w = () -> blocks(n); break;
            case "throw": w = () -> throwsCaught(n); break;
            case "vyield": w = () -> virtualYields(n); break;
            default: throw new IllegalArgumentException("unknown op " + op);
        }
        Rounds.run(w, Integer.parseInt(a[2]), Long.parseLong(a[3]), Integer.parseInt(a[4]));
    }

    // A tiny static call: C2 inlines it without the agent.
    static int tiny(int x) { return x ^ (x >>> 3); }

    static long staticCalls(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) s += tiny(i);
        return s;
    }

    // The same call to a method of another class (the nested class is a class of its own).
    static final class Other { static int tiny(int x) { return x ^ (x >>> 3); } }

    static long acrossCalls(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) s += Other.tiny(i);
        return s;
    }

    abstract static class Shape { abstract int f(int x); }
    static final class A extends Shape { int f(int x) { return x + 1; } }
    static final class B extends Shape { int f(int x) { return x ^ 5; } }
    static final class C extends Shape { int f(int x) { return x * 3; } }
    static final class D extends Shape { int f(int x) { return x - 7; } }

    // 64 receivers in a fixed rotation: two classes (C2 inlines both behind a type check)
    // or four (a real virtual call).
    static final Shape[] BIMORPHIC = receivers(new Shape[] {new A(), new B()});
    static final Shape[] MEGAMORPHIC = receivers(new Shape[] {new A(), new B(), new C(), new D()});

    static Shape[] receivers(Shape[] kinds) {
        Shape[] r = new Shape[64];
        for (int i = 0; i < r.length; i++) r[i] = kinds[i % kinds.length];
        return r;
    }

    static long virtualCalls(Shape[] r, int n) {
        long s = 0;
        for (int i = 0; i < n; i++) s += r[i & 63].f(i);
        return s;
    }

    // Deep recursion: n calls in chains of 1000 frames.
    static int down(int d) { return d == 0 ? 0 : 1 + down(d - 1); }

    static long recursion(int n) {
        long s = 0;
        for (int i = 0; i < n / 1000; i++) s += down(999);
        return s;
    }

    // A loop whose body is several basic blocks (branches taken both ways).
    static long blocks(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) {
            if ((i & 1) == 0) s += i; else s -= 3;
            if ((i & 2) != 0) s ^= i; else s += 7;
            if ((i & 4) == 0) s += s >>> 7; else s -= i >> 2;
            s += (i & 8) == 0 ? 1 : 2;
        }
        return s;
    }

    // A throw caught three frames up (no stack trace: that cost is the JVM's, not ours).
    static final class Stop extends RuntimeException {
        Stop() { super(null, null, false, false); }
    }

    static int one(int x) { try { return two(x); } catch (Stop e) { return -1; } }
    static int two(int x) { return three(x) + 1; }
    static int three(int x) { return four(x) + 1; }
    static int four(int x) { if (x >= 0) throw new Stop(); return x; }

    static long throwsCaught(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) s += one(i);
        return s;
    }

    // One virtual thread yielding n times: n unmounts and mounts, each an event of the
    // agent's virtual-thread support (JDK 21 and later). Its work runs on a carrier, not on
    // the measuring thread: run with -Drounds.allThreadsCpu=true. Reached by reflection, so
    // that the file still compiles on JDK 17 (which has no virtual threads).
    static long virtualYields(int n) throws Exception {
        Object builder = Thread.class.getMethod("ofVirtual").invoke(null);
        Runnable yields = () -> { for (int i = 0; i < n; i++) Thread.yield(); };
        Thread t = (Thread) Class.forName("java.lang.Thread$Builder")
                .getMethod("start", Runnable.class).invoke(builder, yields);
        t.join();
        return t.getName().length();
    }
}
