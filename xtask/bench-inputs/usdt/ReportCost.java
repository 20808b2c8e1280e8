/**
 * `cargo xtask bench usdt`: a loop of tiny calls, so that with a small granularity the
 * agent's report point runs very often. N iterations from the first argument.
 */
public final class ReportCost {
    static int leaf(int x) {
        return x + 1;
    }

    public static void main(String[] args) {
        long n = Long.parseLong(args[0]);
        int s = 0;
        for (long i = 0; i < n; i++) {
            s = leaf(s);
        }
        System.out.println(s);
    }
}
