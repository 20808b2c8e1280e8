import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.util.List;

// Odds and ends: method handles, exceptions thrown by a lambda through JDK frames
// (forEach) and caught by application code, a <clinit> that throws
// (ExceptionInInitializerError, then NoClassDefFoundError), an interface's
// <clinit>, records, enum valueOf.
public class Misc {
    static int target(int x) { return x + 40; }

    static class Broken {
        static int v = fail();
        static int fail() { throw new IllegalStateException("no"); }
    }

    interface WithInit {
        int K = Misc.target(2);     // not a constant: the interface has a <clinit>
        static int k() { return K; }
    }

    record Point(int x, int y) {
        int sum() { return x + y; }
    }

    enum Mode { FAST, SLOW }

    static int throughForEach() {
        int[] seen = new int[1];
        try {
            List.of(1, 2, 3, 4).forEach(i -> {
                seen[0] += i;
                if (i == 3) throw new IllegalArgumentException("stop");
            });
        } catch (IllegalArgumentException e) {
            seen[0] += 100;
        }
        return seen[0];
    }

    public static void main(String[] args) throws Throwable {
        MethodHandle mh = MethodHandles.lookup().findStatic(Misc.class, "target", MethodType.methodType(int.class, int.class));
        int s = (int) mh.invokeExact(2);
        s += (int) mh.invoke(3);
        s += throughForEach();
        for (int i = 0; i < 2; i++) {
            try {
                s += Broken.v;
            } catch (ExceptionInInitializerError e) {
                s += 1;
            } catch (NoClassDefFoundError e) {
                s += 2;
            }
        }
        s += WithInit.k();
        Point p = new Point(3, 4);
        s += p.sum() + p.x();
        System.out.println(p + " " + p.equals(new Point(3, 4)) + " " + Mode.valueOf("SLOW").ordinal());
        System.out.println(s);
    }
}
