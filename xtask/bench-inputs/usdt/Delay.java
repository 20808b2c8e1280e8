import java.io.BufferedReader;
import java.io.InputStreamReader;

/**
 * `cargo xtask bench usdt`: for each line on stdin, one short thread runs burst() and ends
 * (its last record fires at thread end); the JVM then prints System.nanoTime() (CLOCK_MONOTONIC)
 * taken as the thread's last instruction, so that the bench can time how long it takes until
 * `jpctl jvm top` shows the new call.
 */
public final class Delay {
    static volatile long lastNanos;

    static long burst(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) {
            s += i;
        }
        return s;
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        while (in.readLine() != null) {
            Thread t = new Thread(() -> {
                burst(1000);
                lastNanos = System.nanoTime();
            });
            t.start();
            t.join();
            System.out.println(lastNanos);
            System.out.flush();
        }
    }
}
