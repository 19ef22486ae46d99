/**
 * A thread that spends most of its time in the JVM runtime, called from
 * compiled code: main() allocates arrays of pseudo-random sizes (1-64 KiB)
 * in allocate(), without pause. Run with -XX:-UseTLAB, every allocation
 * takes the runtime's slow path (C2's runtime stubs, then
 * OptoRuntime::new_array_C, which zeroes the array).
 *
 * Runs args[0] seconds after a second of warm-up, then prints "ready".
 */
public final class JavaRuntimeCalls {
    /** The last arrays allocated: they escape, so they are allocated. */
    static final Object[] KEPT = new Object[64];
    static int next;

    public static void main(String[] args) {
        double seconds = Support.seconds(args, 10);
        long end = Support.deadline(1);
        boolean warm = false;
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
            for (int i = 0; i < 100; i++) {
                rng ^= rng << 13;
                rng ^= rng >>> 7;
                rng ^= rng << 17;
                allocate(1024 + (int) Long.remainderUnsigned(rng, 63 << 10));
            }
        }
    }

    static void allocate(int bytes) {
        KEPT[next] = new long[bytes / 8];
        next = (next + 1) & (KEPT.length - 1);
    }
}
