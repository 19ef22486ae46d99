/**
 * Two Java methods at a known 70:30 split of CPU time, the Java twin of
 * fp_split.c.
 *
 * main() loops until args[0] seconds have passed. Each round it picks a
 * pseudo-random round length between 4 and 16 ms of thread CPU time (so the
 * round period never lines up with a sampling period) and spends 70% of it
 * in seventy() and 30% in thirty(). Both call spin() in short chunks and
 * check the thread CPU clock between chunks. At exit it prints the split it
 * measured on stderr.
 *
 * It runs one second before it prints "ready" (and the run time counts from
 * then): a profiler attaching afterwards finds its hot code JIT-compiled
 * already, as in any JVM that has been running for a while.
 */
public final class JavaSplit {
    /** About 20-40 us of work: short next to a round, long next to reading
     * the CPU clock. */
    private static final int CHUNK = 50_000;

    /** Written after every chunk so that the JIT cannot drop the work. */
    static volatile long sink;

    public static void main(String[] args) {
        double seconds = Support.seconds(args, 10);
        long end = Support.deadline(1);
        boolean warm = false;
        long seventy = 0;
        long thirty = 0;
        long rng = 88172645463325252L;
        while (true) {
            if (System.nanoTime() - end >= 0) {
                if (warm) {
                    break;
                }
                warm = true;
                end = Support.deadline(seconds);
                Support.ready();
            }
            rng ^= rng << 13;
            rng ^= rng >>> 7;
            rng ^= rng << 17;
            long round = 4_000_000L + Long.remainderUnsigned(rng, 12_000_000L);
            seventy += seventy(round * 7 / 10);
            thirty += thirty(round * 3 / 10);
        }
        System.err.printf("JavaSplit: seventy %.3f s, thirty %.3f s, share %.2f%%%n",
                seventy / 1e9, thirty / 1e9, 100.0 * seventy / (seventy + thirty));
    }

    /** Spins for cpuNanos of thread CPU time; returns the time it took. */
    static long seventy(long cpuNanos) {
        long start = Support.cpuNanos();
        long now;
        do {
            spin(CHUNK);
            now = Support.cpuNanos();
        } while (now - start < cpuNanos);
        return now - start;
    }

    /** The same as seventy(), under another name; not through a shared
     * helper, so that each hot method calls spin() itself, as in
     * fp_split.c. */
    static long thirty(long cpuNanos) {
        long start = Support.cpuNanos();
        long now;
        do {
            spin(CHUNK);
            now = Support.cpuNanos();
        } while (now - start < cpuNanos);
        return now - start;
    }

    static void spin(int iterations) {
        long acc = sink;
        for (int i = 0; i < iterations; i++) {
            acc = acc * 6364136223846793005L + i;
        }
        sink = acc;
    }
}
