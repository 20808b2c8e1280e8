// Virtual calls of a class's own methods (passing them the context behind a guard was built
// and reverted: docs/journal/passing-virtual-calls.md): receivers of
// exactly the class and of subclasses that override the method or inherit it, final methods
// and a final class, exceptions thrown through them, arguments of every kind, a synchronized
// method and a synchronized final one, `super` calls and recursion through a virtual call.
public class Virtual {
    static class Base {
        int n;

        int helper(int x) {
            return x + 1;
        }

        int twice(int x) {
            return helper(helper(x));
        }

        final int fin(int x) {
            return helper(x) * 2;
        }

        int other(Base b, int x) {
            // A receiver other than `this`, of this class or a subclass.
            return b.helper(x) + b.fin(x);
        }

        long wide(long a, double d, float f, int[] arr, String s, boolean z, char c) {
            return a + (long) d + (long) f + arr.length + s.length() + (z ? 1 : 0) + c;
        }

        double dbl(double d) {
            return d / 2;
        }

        int[] arr(int k) {
            return new int[k];
        }

        void touch() {
            n++;
        }

        int fails(int x) {
            if (x > 2) {
                throw new IllegalArgumentException("x=" + x);
            }
            return x;
        }

        int catches(int x) {
            try {
                return fails(x);
            } catch (IllegalArgumentException e) {
                return -1;
            }
        }

        int recurse(int depth) {
            return depth == 0 ? 0 : 1 + recurse(depth - 1);
        }

        synchronized int locked(int x) {
            return helper(x) + 3;
        }

        final synchronized int lockedFinal(int x) {
            return helper(x) + 4;
        }

        int loopFirst(int x) {
            // The first instruction is a loop head (a method the reverted guard left alone).
            do {
                x -= 3;
            } while (x > 0);
            return x;
        }

        int all(int x) {
            touch();
            long w = wide(x, 2.5, 1.5f, arr(x), "ab", x % 2 == 0, 'c');
            return twice(x) + fin(x) + (int) w + (int) dbl(x) + catches(x) + recurse(x)
                    + locked(x) + lockedFinal(x) + loopFirst(x);
        }
    }

    static class Overrides extends Base {
        @Override
        int helper(int x) {
            return x + 10;
        }

        @Override
        int fails(int x) {
            if (x > 1) {
                throw new IllegalArgumentException("overridden x=" + x);
            }
            return super.fails(x);
        }

        @Override
        int recurse(int depth) {
            return depth == 0 ? 0 : 2 + super.recurse(depth - 1);
        }
    }

    static class Inherits extends Base {
        int more(int x) {
            return twice(x) + helper(x);
        }
    }

    static final class Leaf {
        int a(int x) {
            return b(x) + b(x + 1);
        }

        int b(int x) {
            return x % 3 == 0 ? c(x) : x;
        }

        int c(int x) {
            if (x > 5) {
                throw new IllegalStateException("c " + x);
            }
            return x * 7;
        }

        int safe(int x) {
            try {
                return a(x);
            } catch (IllegalStateException e) {
                return -x;
            }
        }
    }

    public static void main(String[] args) {
        Base[] rs = {new Base(), new Overrides(), new Inherits()};
        long sum = 0;
        for (int i = 0; i < 5; i++) {
            for (Base r : rs) {
                sum += r.all(i);
                sum += r.other(rs[i % 3], i);
                try {
                    sum += r.fails(i);
                } catch (IllegalArgumentException e) {
                    sum += 1000;
                }
            }
            sum += ((Inherits) rs[2]).more(i);
        }
        Leaf leaf = new Leaf();
        for (int i = 0; i < 8; i++) {
            sum += leaf.safe(i);
        }
        for (Base r : rs) {
            sum += r.n;
        }
        System.out.println("sum " + sum);
    }
}
