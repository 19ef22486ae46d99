import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

/**
 * Shared helpers for Stoke's Java end-to-end test workloads, the Java
 * counterpart of common.h.
 *
 * Every workload takes its run time in seconds as args[0], stops on its own,
 * and prints on stdout (flushed line by line): "tid N" (the host thread id
 * of the thread running the hot loop, so a test can pick that thread's
 * samples), then "ready" once it has entered its hot loop.
 */
final class Support {
    private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

    private Support() {}

    /** args[0] as seconds, or dflt. */
    static double seconds(String[] args, double dflt) {
        if (args.length > 0) {
            double s = Double.parseDouble(args[0]);
            if (s > 0) {
                return s;
            }
        }
        return dflt;
    }

    /** The monotonic clock plus seconds, in nanoseconds. */
    static long deadline(double seconds) {
        return System.nanoTime() + (long) (seconds * 1e9);
    }

    /** The calling thread's CPU time in nanoseconds. */
    static long cpuNanos() {
        return THREADS.getCurrentThreadCpuTime();
    }

    /** The calling thread's id as the kernel knows it: /proc/thread-self
     * links to "PID/task/TID". */
    static long hostTid() {
        try {
            Path link = Files.readSymbolicLink(Paths.get("/proc/thread-self"));
            return Long.parseLong(link.getFileName().toString());
        } catch (Exception e) {
            throw new IllegalStateException("reading /proc/thread-self", e);
        }
    }

    /** Prints "tid N" for the calling thread, then "ready". */
    static void ready() {
        System.out.println("tid " + hostTid());
        System.out.println("ready");
        System.out.flush();
    }

    /** Whether Stoke's agent is loaded into this JVM (maps a
     * libstoke_agent-*.so). */
    static boolean agentLoaded() {
        try {
            return Files.readString(Paths.get("/proc/self/maps")).contains("/libstoke_agent");
        } catch (Exception e) {
            throw new IllegalStateException("reading /proc/self/maps", e);
        }
    }
}
