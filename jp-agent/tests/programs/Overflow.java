// StackOverflowError: recursion until the stack is exhausted (the depth differs
// between JVM modes and runs, so only what follows is compared), caught in main,
// then more calls: they must be children of main again, with exact counts.
public class Overflow {
    static void down(int n) {
        down(n + 1);
    }

    static int after(int x) {
        return x * 2 + 1;
    }

    public static void main(String[] args) {
        int s = 0;
        for (int r = 0; r < 3; r++) {
            try {
                down(0);
            } catch (StackOverflowError e) {
                s += 1;
            }
            s += after(r);
        }
        System.out.println(s);
    }
}
