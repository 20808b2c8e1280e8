// The thread's current context around calls that pass it (docs/agent-design.md, "Second
// bodies"): a second body stores its context before what may run Java code on one path only
// (paths merge after), a class initialized on a path that made no call before, and a method
// entered the usual way whose callee the passed call returned from stored its own context.
public class Stale {
    interface Op {
        int apply(int x);
    }

    static final class Inc implements Op {
        public int apply(int x) {
            return x + 1;
        }
    }

    static class Late {
        static int v = init();

        static int init() {
            return 41;
        }
    }

    static final Op OP = new Inc();

    private static int maybeVirtual(int x) {
        if (x % 2 == 0) {
            x = OP.apply(x);
        }
        return x * 2;
    }

    private static int late(int x) {
        if (x > 3) {
            return x + Late.v;
        }
        return x;
    }

    int instance(int x) {
        int y = maybeVirtual(x);
        return OP.apply(y);
    }

    public static void main(String[] args) {
        Stale s = new Stale();
        int sum = 0;
        for (int i = 0; i < 6; i++) {
            sum += s.instance(i) + late(i);
        }
        System.out.println(sum);
    }
}
