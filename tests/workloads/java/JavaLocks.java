import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Contention on a Java monitor and on a ReentrantLock, for lock
 * profiling: two threads take turns holding a monitor (synchronized on a
 * MonitorLock) for 2 ms at a time, asleep, so that the other waits; two more do
 * the same with a ReentrantLock (which parks the waiting thread). Each
 * thread measures how long it waited to get its lock.
 *
 * Runs args[0] seconds after a second of warm-up, then prints "ready".
 * Every 100 ms it prints "rate N M R": the lock rounds done since the last
 * line, and the nanoseconds threads waited meanwhile for the monitor (M)
 * and for the ReentrantLock (R). At exit it prints on stderr the total
 * waits, as "JavaLocks: monitor N ns, reentrant N ns".
 */
public final class JavaLocks {
    /** A class of its own, to come out on top of the monitor's stacks. */
    static final class MonitorLock {}

    static final MonitorLock MONITOR = new MonitorLock();
    static final ReentrantLock REENTRANT = new ReentrantLock();
    static final long HOLD_MILLIS = 2;

    static volatile boolean stop;
    static volatile boolean measuring;
    static final AtomicLong MONITOR_WAIT = new AtomicLong();
    static final AtomicLong REENTRANT_WAIT = new AtomicLong();
    static final AtomicLong ROUNDS = new AtomicLong();

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
        long lastMonitor = MONITOR_WAIT.get();
        long lastReentrant = REENTRANT_WAIT.get();
        while (System.nanoTime() - end < 0) {
            Thread.sleep(100);
            long now = ROUNDS.get();
            long monitor = MONITOR_WAIT.get();
            long reentrant = REENTRANT_WAIT.get();
            System.out.println("rate " + (now - last) + " " + (monitor - lastMonitor)
                    + " " + (reentrant - lastReentrant));
            last = now;
            lastMonitor = monitor;
            lastReentrant = reentrant;
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

    /** Holds the lock for HOLD_MILLIS, asleep: the pace of the rounds
     * does not depend on how busy the host's CPUs are. */
    static void hold() {
        try {
            Thread.sleep(HOLD_MILLIS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
