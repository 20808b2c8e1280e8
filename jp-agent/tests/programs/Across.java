// Static calls between classes, which enter the usual way (passing them the context through a
// stub of the calling class was built and reverted: docs/journal/passing-across-classes.md);
// kept for what it covers: a method a superclass declares, one a subclass declares again,
// exceptions thrown through such calls, a static initializer that fails.
public class Across {
    static class Super {
        static int inherited(int x) { return x + 1; }
        static int hidden(int x) { return x + 2; }
    }

    static class Sub extends Super {
        // Declared again, without a second body (its first instruction is a loop head): the
        // call must reach it, not the second body of the method it hides.
        static int hidden(int x) {
            do {
                x -= 3;
            } while (x > 0);
            return x;
        }
    }

    static class Thrower {
        static int fail(int x) {
            if (x > 2) {
                throw new IllegalStateException("x=" + x);
            }
            return x;
        }
    }

    static class BadInit {
        static int v = 10 / Integer.parseInt("0");
        static int get() { return v; }
    }

    static class Box {
        final int v;
        Box(int v) { this.v = v; }
        static Box of(int v) { return new Box(v); }
        static Box none() { return null; }
        static Box[] many(int n) {
            Box[] b = new Box[n];
            for (int i = 0; i < n; i++) {
                b[i] = of(i);
            }
            return b;
        }
        static int sum(Box[] b, Box extra) {
            int s = extra == null ? 0 : extra.v;
            for (Box x : b) {
                s += x.v;
            }
            return s;
        }
    }

    static class Lazy {
        static { System.out.println("Lazy initialized"); }
        static long wide(long a, double b, int c, String d, int[] e) {
            return a + (long) b + c + d.length() + e.length;
        }
    }

    public static void main(String[] args) {
        int s = 0;
        for (int i = 0; i < 5; i++) {
            s += Sub.inherited(i) + Sub.hidden(i) + Super.hidden(i);
        }
        for (int i = 0; i < 5; i++) {
            try {
                s += Thrower.fail(i);
            } catch (IllegalStateException e) {
                s += 100;
            }
        }
        for (int i = 0; i < 2; i++) {
            try {
                s += BadInit.get();
            } catch (ExceptionInInitializerError e) {
                System.out.println("initializer failed: " + e.getCause());
            } catch (NoClassDefFoundError e) {
                System.out.println("class unusable");
            }
        }
        // Results and arguments of the program's own types (erased in the stub's signature).
        Box[] boxes = Box.many(4);
        s += Box.sum(boxes, Box.of(5)) + Box.sum(boxes, Box.none());
        System.out.println("before Lazy");
        s += (int) Lazy.wide(1L, 2.5, 3, "four", new int[5]);
        System.out.println(s);
    }
}
