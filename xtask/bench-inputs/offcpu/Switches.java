import java.util.concurrent.locks.LockSupport;

/**
 * `cargo xtask bench offcpu`: PAIRS pairs of threads (`ping-N`, `pong-N`) handing a turn
 * back and forth with park/unpark (a futex wait and wake each way: no spinning, so every
 * hand-over blocks one thread and wakes the other), ROUND_TRIPS round trips per second
 * per pair in all, paced by the ping thread in 1 ms ticks. Every switch of these threads
 * goes through jpd's off-CPU program's tracked path: switch-out with the context read
 * and the kernel stack walked, switch-in timed and logged. Prints `ready` once every
 * thread runs; runs until killed.
 *
 * Usage: Switches PAIRS ROUND_TRIPS
 */
public final class Switches {
    static final class Pair {
        volatile boolean pongsTurn;
        Thread ping;
        Thread pong;
    }

    static void pingOnce(Pair p) {
        p.pongsTurn = true;
        LockSupport.unpark(p.pong);
        while (p.pongsTurn) {
            LockSupport.park(p);
        }
    }

    static void ping(Pair p, long roundTrips) {
        long start = System.nanoTime();
        long done = 0;
        for (long tick = 1; ; tick++) {
            long due = roundTrips * tick / 1000;
            for (; done < due; done++) {
                pingOnce(p);
            }
            long wait = start + tick * 1_000_000L - System.nanoTime();
            if (wait > 0) {
                LockSupport.parkNanos(wait);
            }
        }
    }

    static void pong(Pair p) {
        while (true) {
            while (!p.pongsTurn) {
                LockSupport.park(p);
            }
            p.pongsTurn = false;
            LockSupport.unpark(p.ping);
        }
    }

    public static void main(String[] args) throws Exception {
        int pairs = Integer.parseInt(args[0]);
        long roundTrips = Long.parseLong(args[1]) / pairs;
        java.util.concurrent.CountDownLatch started = new java.util.concurrent.CountDownLatch(2 * pairs);
        for (int i = 0; i < pairs; i++) {
            Pair p = new Pair();
            p.pong = new Thread(() -> {
                started.countDown();
                pong(p);
            }, "pong-" + i);
            p.ping = new Thread(() -> {
                started.countDown();
                ping(p, roundTrips);
            }, "ping-" + i);
            p.pong.setDaemon(true);
            p.pong.start();
            p.ping.start();
        }
        started.await();
        System.out.println("ready");
        System.out.flush();
    }
}
