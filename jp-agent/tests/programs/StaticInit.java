// Static initializers: <clinit> runs in the context that triggered the class's
// initialization (new, getstatic, putstatic, invokestatic, a subclass, reflection).
public class StaticInit {
    static class A {
        static int v = compute(3);
        static int compute(int n) { int s = 0; for (int i = 0; i < n; i++) s += i; return s; }
    }

    static class B {
        static final int[] TABLE = new int[5];
        static { for (int i = 0; i < TABLE.length; i++) TABLE[i] = i * i; }
        int get(int i) { return TABLE[i]; }
    }

    static class Base {
        static int baseInit = A.compute(4);
    }

    static class Derived extends Base {
        static int derivedInit = helper();
        static int helper() { return 7; }
        static void touch() { }
    }

    static class ByPut {
        static int w;
        static { w = 1; }
    }

    static class ByReflection {
        static int r;
        static { r = A.compute(2) + 1; }
    }

    static int trigger() {
        return new B().get(3);
    }

    public static void main(String[] args) throws Exception {
        int x = A.v;               // getstatic → A.<clinit>
        x += trigger();            // new inside trigger → B.<clinit> under trigger
        Derived.touch();           // invokestatic → Base.<clinit>, Derived.<clinit>
        ByPut.w = 5;               // putstatic
        Class.forName("StaticInit$ByReflection"); // reflection → <clinit> under main
        x += ByReflection.r + ByPut.w + Derived.derivedInit + Base.baseInit;
        System.out.println(x);
    }
}
