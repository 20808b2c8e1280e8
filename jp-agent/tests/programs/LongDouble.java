// long and double locals (two slots each), their arithmetic, comparisons and conversions.
public class LongDouble {
    static long mix(long a, double b, int c, long d) {
        long r = a;
        double x = b;
        for (int i = 0; i < c; i++) {
            r = r * 31 + d;
            x = x * 1.5 - i;
            if (x > 1e6) x /= 3;
            r ^= (long) x;
            r = r % 1000003L + r / 7L;
        }
        float f = (float) x;
        return r + (long) f + (d > r ? 1 : 0);
    }

    static double avg(double[] xs) {
        double s = 0;
        long n = 0;
        for (double v : xs) { s += v; n++; }
        return n == 0 ? Double.NaN : s / n;
    }

    public static void main(String[] args) {
        System.out.println(mix(3L, 2.5, 12, 77L));
        System.out.println(avg(new double[] { 1.0, 2.5, -3.25, 8 }));
        long big = Long.MAX_VALUE;
        double d = big;
        System.out.println((long) (d / 2) + " " + Long.compare(big, 0L));
    }
}
