/**
 * Two Java methods allocating bytes at a known 70:30 split, for allocation
 * profiling: seventy() allocates byte[] arrays, thirty() long[] arrays,
 * each round 7 and 3 units of pseudo-random sizes (1-64 KiB, so that
 * sizes never line up with the sampling interval). The arrays are kept in a
 * small ring the JIT cannot see through, so that none is optimized away.
 *
 * It works at a fixed pace: at most ROUNDS rounds (about 30 MB) per
 * 100 ms, then it sleeps until the next 100 ms begin, so that a profiler
 * that slows it shows as fewer rounds, and a busy host does not.
 *
 * Runs args[0] seconds after a second of warm-up, then prints "ready".
 * Every 100 ms it prints "rate N B": the rounds done in those 100 ms (its
 * work rate, for a test to compare before, while and after a recording)
 * and the bytes they allocated. At exit it prints the bytes each method
 * allocated on stderr.
 */
public final class JavaAlloc {
    /** Bytes of one unit of work. */
    private static final int UNIT = 64 << 10;

    /** Rounds per 100 ms at most. */
    private static final int ROUNDS = 100;

    /** The last arrays allocated: they escape, so they are allocated. */
    static final Object[] KEPT = new Object[64];
    static int next;

    public static void main(String[] args) throws InterruptedException {
        double seconds = Support.seconds(args, 10);
        long end = Support.deadline(1);
        boolean warm = false;
        long seventy = 0;
        long thirty = 0;
        long rng = 88172645463325252L;
        long tick = System.nanoTime();
        while (true) {
            if (System.nanoTime() - end >= 0) {
                if (warm) {
                    break;
                }
                warm = true;
                end = Support.deadline(seconds);
                Support.ready();
            }
            tick += 100_000_000L;
            int rounds = 0;
            long bytes = 0;
            while (rounds < ROUNDS && System.nanoTime() - tick < 0) {
                rng ^= rng << 13;
                rng ^= rng >>> 7;
                rng ^= rng << 17;
                int size = 1024 + (int) Long.remainderUnsigned(rng, UNIT - 1024);
                long inSeventy = seventy(size);
                long inThirty = thirty(size);
                seventy += inSeventy;
                thirty += inThirty;
                bytes += inSeventy + inThirty;
                rounds++;
            }
            if (warm) {
                System.out.println("rate " + rounds + " " + bytes);
            }
            long left = tick - System.nanoTime();
            if (left > 0) {
                Thread.sleep(left / 1_000_000L, (int) (left % 1_000_000L));
            } else {
                tick = System.nanoTime();
            }
        }
        System.err.printf("JavaAlloc: seventy %d bytes, thirty %d bytes, share %.2f%%%n",
                seventy, thirty, 100.0 * seventy / (seventy + thirty));
    }

    /** Allocates 7 byte arrays of size bytes; returns the bytes. */
    static long seventy(int size) {
        for (int i = 0; i < 7; i++) {
            keep(new byte[size]);
        }
        return 7L * (16 + size);
    }

    /** Allocates 3 long arrays of size bytes; returns the bytes. */
    static long thirty(int size) {
        for (int i = 0; i < 3; i++) {
            keep(new long[size / 8]);
        }
        return 3L * (16 + size / 8 * 8);
    }

    static void keep(Object array) {
        KEPT[next] = array;
        next = (next + 1) & (KEPT.length - 1);
    }
}
