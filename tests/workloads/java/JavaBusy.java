/**
 * A Java CPU burner with a heartbeat: main() -> work() -> crunch() until
 * args[0] seconds have passed, printing "beat N" on stdout every 100 ms from
 * the working thread itself (so a beat proves the work goes on).
 *
 * With args[1] "after-attach", the run time counts from the moment Stoke's
 * agent appears in this JVM (it then prints "attached"): the JVM that exits
 * a known time after stoke attached it.
 */
public final class JavaBusy {
    private static final long BEAT_NANOS = 100_000_000L;

    /** Written after every chunk so that the JIT cannot drop the work. */
    static volatile long sink;

    public static void main(String[] args) {
        double seconds = Support.seconds(args, 10);
        boolean afterAttach = args.length > 1 && args[1].equals("after-attach");
        Support.ready();
        if (afterAttach) {
            // Work (with beats) until the agent shows up, for at most 60 s.
            work(Support.deadline(60), true);
            System.out.println("attached");
            System.out.flush();
        }
        work(Support.deadline(seconds), false);
    }

    /** Crunches until the deadline (or, with untilAttached, until the agent
     * is loaded), with a beat every 100 ms. */
    static void work(long end, boolean untilAttached) {
        long nextBeat = System.nanoTime() + BEAT_NANOS;
        long beats = 0;
        while (true) {
            crunch(20_000);
            long now = System.nanoTime();
            if (now - end >= 0) {
                return;
            }
            if (now - nextBeat >= 0) {
                System.out.println("beat " + ++beats);
                System.out.flush();
                nextBeat = now + BEAT_NANOS;
                if (untilAttached && Support.agentLoaded()) {
                    return;
                }
            }
        }
    }

    static void crunch(int iterations) {
        long acc = sink;
        for (int i = 0; i < iterations; i++) {
            acc = (acc ^ i) * 2862933555777941757L + 3037000493L;
        }
        sink = acc;
    }
}
