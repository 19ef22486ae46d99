import java.util.ArrayList;
import java.util.List;

/**
 * Virtual threads at work (JDK 21+): four virtual threads on the default
 * scheduler's carriers (a ForkJoinPool, one carrier per CPU), each
 * spinning in virtualWork() in chunks of about 0.2 ms and yielding between
 * them, so that they unmount and mount again all along, on whichever
 * carrier is free.
 *
 * main() warms up for one second, prints "ready", and lets the virtual
 * threads run args[0] more seconds.
 */
public final class JavaVirtual {
    /** Written after every chunk so that the JIT cannot drop the work. */
    static volatile long sink;

    public static void main(String[] args) throws Exception {
        double seconds = Support.seconds(args, 10);
        long warm = Support.deadline(1);
        long[] end = {Long.MAX_VALUE};
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            threads.add(Thread.ofVirtual().name("virtual-" + i).start(() -> {
                while (System.nanoTime() - end[0] < 0) {
                    virtualWork(200_000);
                    Thread.yield();
                }
            }));
        }
        while (System.nanoTime() - warm < 0) {
            Thread.sleep(10);
        }
        end[0] = Support.deadline(seconds);
        Support.ready();
        for (Thread thread : threads) {
            thread.join();
        }
    }

    static void virtualWork(int rounds) {
        long x = sink;
        for (int i = 0; i < rounds; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
        }
        sink = x;
    }
}
