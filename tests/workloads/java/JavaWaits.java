import java.util.concurrent.locks.LockSupport;

/**
 * A Java thread that waits 70:30 in two methods, for off-CPU profiling:
 * each round, sleepSeventy() sleeps 7 ms (Thread.sleep) and parkThirty()
 * parks 3 ms (LockSupport.parkNanos). Each measures how long it waited.
 *
 * Runs args[0] seconds after a second of warm-up, then prints "ready".
 * Every 100 ms it prints "round seventy_share=S": the share of the waits so
 * far spent in sleepSeventy(), in percent, as the thread measured them.
 */
public final class JavaWaits {
    static long seventy;
    static long thirty;

    public static void main(String[] args) throws InterruptedException {
        double seconds = Support.seconds(args, 10);
        long warm = Support.deadline(1);
        while (System.nanoTime() - warm < 0) {
            round();
        }
        seventy = 0;
        thirty = 0;
        Support.ready();
        long end = Support.deadline(seconds);
        long tick = System.nanoTime();
        while (System.nanoTime() - end < 0) {
            round();
            if (System.nanoTime() - tick >= 100_000_000L) {
                tick = System.nanoTime();
                System.out.printf("round seventy_share=%.2f%n",
                        100.0 * seventy / Math.max(1, seventy + thirty));
            }
        }
    }

    static void round() throws InterruptedException {
        seventy += sleepSeventy();
        thirty += parkThirty();
    }

    static long sleepSeventy() throws InterruptedException {
        long start = System.nanoTime();
        Thread.sleep(7);
        return System.nanoTime() - start;
    }

    static long parkThirty() {
        long start = System.nanoTime();
        long until = start + 3_000_000L;
        // parkNanos may return early (spuriously): park again until 3 ms.
        for (long left = until - start; left > 0; left = until - System.nanoTime()) {
            LockSupport.parkNanos(left);
        }
        return System.nanoTime() - start;
    }
}
