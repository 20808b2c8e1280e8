// Recursion: deep calling contexts (one node per depth of fib).
public class Fib {
    static int fib(int n) {
        return n < 2 ? n : fib(n - 1) + fib(n - 2);
    }

    static long fact(long n) {
        if (n <= 1) return 1;
        return n * fact(n - 1);
    }

    public static void main(String[] args) {
        System.out.println(fib(16));
        System.out.println(fact(20));
    }
}
