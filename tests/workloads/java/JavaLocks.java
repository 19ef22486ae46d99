import java.util.concurrent.locks.ReentrantLock;

/**
 * Contention on a Java monitor and on a ReentrantLock, for lock
 * profiling: two threads take turns holding a monitor (synchronized on a
 * MonitorLock) for 2 ms at a time, so that the other waits; two more do
 * the same with a ReentrantLock (which parks the waiting thread). Each
 * thread measures how long it waited to get its lock.
 *
 * Runs args[0] seconds after a second of warm-up, then prints "ready".
 * Every 100 ms it prints "rate N": the lock rounds done since the last
 * line. At exit it prints on stderr the total wait each kind of lock
 * caused, in nanoseconds, as "JavaLocks: monitor N ns, reentrant N ns".
 */
public final class JavaLocks {
    /** A class of its own, to come out on top of the monitor's stacks. */
    static final class MonitorLock {}

    static final MonitorLock MONITOR = new MonitorLock();
    static final ReentrantLock REENTRANT = new ReentrantLock();
    static final long HOLD_NANOS = 2_000_000L;

    static volatile boolean stop;
    static volatile boolean measuring;
    static final java.util.concurrent.atomic.AtomicLong MONITOR_WAIT = new java.util.concurrent.atomic.AtomicLong();
    static final java.util.concurrent.atomic.AtomicLong REENTRANT_WAIT = new java.util.concurrent.atomic.AtomicLong();
    static final java.util.concurrent.atomic.AtomicLong ROUNDS = new java.util.concurrent.atomic.AtomicLong();

    public static void main(String[] args) throws Exception {
        double seconds = Support.seconds(args, 10);
        Thread[] threads = new Thread[4];
        for (int i = 0; i < 2; i++) {
            threads[i] = new Thread(JavaLocks::monitorLoop, "monitor-" + i);
            threads[2 + i] = new Thread(JavaLocks::reentrantLoop, "reentrant-" + i);
        }
        for (Thread thread : threads) {
            thread.start();
        }
        Thread.sleep(1000);
        measuring = true;
        Support.ready();
        long end = Support.deadline(seconds);
        long last = ROUNDS.get();
        while (System.nanoTime() - end < 0) {
            Thread.sleep(100);
            long now = ROUNDS.get();
            System.out.println("rate " + (now - last));
            last = now;
        }
        measuring = false;
        stop = true;
        for (Thread thread : threads) {
            thread.join();
        }
        System.err.printf("JavaLocks: monitor %d ns, reentrant %d ns%n",
                MONITOR_WAIT.get(), REENTRANT_WAIT.get());
    }

    static void monitorLoop() {
        while (!stop) {
            long asked = System.nanoTime();
            synchronized (MONITOR) {
                long got = System.nanoTime();
                if (measuring) {
                    MONITOR_WAIT.addAndGet(got - asked);
                }
                hold();
            }
            ROUNDS.incrementAndGet();
        }
    }

    static void reentrantLoop() {
        while (!stop) {
            long asked = System.nanoTime();
            REENTRANT.lock();
            try {
                long got = System.nanoTime();
                if (measuring) {
                    REENTRANT_WAIT.addAndGet(got - asked);
                }
                hold();
            } finally {
                REENTRANT.unlock();
            }
            ROUNDS.incrementAndGet();
        }
    }

    /** Holds the lock, working, for HOLD_NANOS. */
    static void hold() {
        long until = System.nanoTime() + HOLD_NANOS;
        long acc = 0;
        while (System.nanoTime() - until < 0) {
            acc += acc * 31 + 7;
        }
        if (acc == 42) {
            System.out.print("");
        }
    }
}
