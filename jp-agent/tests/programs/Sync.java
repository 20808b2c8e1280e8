// synchronized methods and blocks, including exceptions leaving them.
public class Sync {
    private int count;
    private static int scount;
    private final Object lock = new Object();

    synchronized void inc() { count++; }

    static synchronized int sinc(int k) { scount += k; return scount; }

    synchronized int mayThrow(int k) {
        if (k % 3 == 0) throw new IllegalArgumentException();
        return k;
    }

    int block(int k) {
        synchronized (lock) {
            count += k;
            if (k == 4) throw new IllegalStateException();
            return count;
        }
    }

    public static void main(String[] args) {
        Sync s = new Sync();
        long t = 0;
        for (int k = 0; k < 8; k++) {
            s.inc();
            t += sinc(k);
            try { t += s.mayThrow(k); } catch (IllegalArgumentException e) { t += 100; }
            try { t += s.block(k); } catch (IllegalStateException e) { t += 1000; }
        }
        System.out.println(t + " " + s.count);
    }
}
