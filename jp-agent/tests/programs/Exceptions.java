// Exceptions thrown and caught at several depths, by athrow, by the JVM
// (arithmetic, null, array bounds, class cast), and by JDK code; finally blocks,
// rethrows, try-with-resources, exceptions leaving constructors.
public class Exceptions {
    static class MyEx extends RuntimeException {
        final int depth;
        MyEx(int depth) { super(null, null, false, false); this.depth = depth; }
    }

    static class Res implements AutoCloseable {
        int closed;
        public void close() { closed++; if (closed > 100) throw new IllegalStateException(); }
    }

    static class BadCtor {
        int x;
        BadCtor(int d) {
            x = 10 / d;            // throws after super() when d == 0
        }
    }

    static int deep(int d, int throwAt) {
        int a = d * 2;
        if (d == throwAt) throw new MyEx(d);
        int r = deep(d + 1, throwAt);
        return r + a;
    }

    static int catchAt(int catchDepth, int d, int throwAt) {
        if (d == catchDepth) {
            try {
                return deep(d, throwAt);
            } catch (MyEx e) {
                return -e.depth;
            }
        }
        int x = catchAt(catchDepth, d + 1, throwAt);
        return x + 1;
    }

    static int jvmThrows(int k) {
        int[] arr = new int[3];
        Object o = (k % 2 == 0) ? "s" : Integer.valueOf(k);
        int sum = 0;
        try { sum += 10 / (k % 3); } catch (ArithmeticException e) { sum += 1; }
        try { sum += arr[k % 5]; } catch (ArrayIndexOutOfBoundsException e) { sum += 2; }
        try { String s = (String) o; sum += s.length(); } catch (ClassCastException e) { sum += 3; }
        try { String n = (k % 4 == 0) ? null : "abc"; sum += n.length(); } catch (NullPointerException e) { sum += 4; }
        return sum;
    }

    static int fromJdk(String s) {
        try {
            return Integer.parseInt(s);
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    static int withFinally(int k) {
        int r = 0;
        try {
            try {
                if (k % 2 == 0) throw new MyEx(k);
                r += k;
            } finally {
                r += 100;
            }
        } catch (MyEx e) {
            r += 1000;
        }
        return r;
    }

    static int rethrow(int k) {
        try {
            return deep(0, k);
        } catch (MyEx e) {
            throw new MyEx(e.depth + 1);
        }
    }

    static int twr(Res res, int k) {
        try (Res r = res) {
            if (k % 3 == 0) throw new MyEx(k);
            return k;
        } catch (MyEx e) {
            return -k;
        }
    }

    static int ctor(int d) {
        try {
            return new BadCtor(d).x;
        } catch (ArithmeticException e) {
            return -1;
        }
    }

    public static void main(String[] args) {
        long total = 0;
        for (int c = 0; c < 4; c++)
            for (int t = c; t < 6; t++)
                total += catchAt(c, 0, t);
        for (int k = 0; k < 12; k++) total += jvmThrows(k);
        total += fromJdk("123") + fromJdk("x1") + fromJdk("");
        for (int k = 0; k < 5; k++) total += withFinally(k);
        for (int k = 0; k < 3; k++) {
            try { total += rethrow(k); } catch (MyEx e) { total += e.depth; }
        }
        Res res = new Res();
        for (int k = 0; k < 6; k++) total += twr(res, k);
        total += ctor(0) + ctor(5);
        System.out.println(total + " " + res.closed);
    }
}
