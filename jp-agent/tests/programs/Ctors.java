// Constructors: super constructors, this(...) chaining, field initializers,
// arguments computed before super(), instance initializer blocks.
public class Ctors {
    static class Base {
        int a;
        Base(int a) { this.a = a; }
        Base() { this(42); }
    }

    static class Mid extends Base {
        int b = 3;
        { b += 1; }
        Mid(int x) { super(twice(x)); b += x; }
        Mid() { this(1); }
        static int twice(int x) { return 2 * x; }
    }

    static class Leaf extends Mid {
        final long c;
        Leaf(long c) { super(); this.c = c; }
        Leaf() { this(9L); }
    }

    static class Plain extends Base {
    }

    public static void main(String[] args) {
        long s = 0;
        for (int i = 0; i < 3; i++) {
            s += new Leaf().c;
            s += new Mid(i).b;
            s += new Base().a;
            s += new Plain().a;
        }
        System.out.println(s);
    }
}
