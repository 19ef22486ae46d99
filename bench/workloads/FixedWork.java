import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CyclicBarrier;

/**
 * The Java counterpart of fixed_work.c for the overhead part of
 * `cargo xtask bench`: a fixed amount of CPU work on several threads, timed
 * by itself.
 *
 * <pre>
 *   java FixedWork UNITS [THREADS [WARMUP]]       every thread does UNITS work
 *                                                 units, then prints "elapsed_s=S"
 *   java FixedWork -s SECONDS [THREADS [WARMUP]]  every thread works until
 *                                                 SECONDS pass
 *   java FixedWork -p UNITS [THREADS [WARMUP]]    phases: for every line read
 *                                                 (a number of seconds, LEAD),
 *                                                 every thread works LEAD
 *                                                 seconds untimed, then UNITS
 *                                                 units ("timing" printed as
 *                                                 they start), and "elapsed_s=S"
 *                                                 is printed; ends at end of
 *                                                 input
 * </pre>
 *
 * THREADS defaults to 2 (one per CPU of the bench machine), WARMUP to 1.5
 * seconds. A work unit
 * builds a batch of orders (objects and strings), aggregates them in a
 * HashMap, sorts the totals and scores them: allocation, hashing, sorting
 * and arithmetic, through a few layers of calls, as a Java service does.
 * Before the clock starts every thread warms up for WARMUP seconds so that
 * the JIT has compiled the hot methods: the timed part measures steady state.
 * "ready" is printed when the timed part (the first phase's line, with -p)
 * can start.
 *
 * Phases time several profilers in one JVM, whose compiled code then is the
 * same for all of them: from one JVM to the next the JIT's choices alone
 * change the speed of this work by several percent. The untimed lead-in
 * lets a profiler started between phases attach before the clock starts.
 */
public final class FixedWork {
    private static final int ORDERS = 64;

    /** Written after every unit so that the JIT cannot drop the work. */
    static volatile long sink;

    /** With -p, when the current phase's lead-in ends (System.nanoTime). */
    static volatile long leadInEnd;

    record Order(String customer, long cents, int quantity) {}

    public static void main(String[] args) throws Exception {
        boolean timed = args.length > 0 && args[0].equals("-s");
        boolean phases = args.length > 0 && args[0].equals("-p");
        int first = timed || phases ? 1 : 0;
        if (args.length <= first) {
            System.err.println("usage: FixedWork UNITS [THREADS] | FixedWork -s SECONDS [THREADS]"
                    + " | FixedWork -p UNITS [THREADS]");
            System.exit(2);
        }
        double amount = Double.parseDouble(args[first]);
        int threads = args.length > first + 1 ? Integer.parseInt(args[first + 1]) : 2;
        double warmup = args.length > first + 2 ? Double.parseDouble(args[first + 2]) : 1.5;
        CyclicBarrier warmedUp = new CyclicBarrier(threads + 1);
        long warmupEnd = System.nanoTime() + (long) (warmup * 1e9);
        if (phases) {
            runPhases((long) amount, threads, warmedUp, warmupEnd);
            return;
        }
        long end = warmupEnd + (long) (amount * 1e9);
        Thread[] workers = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            long seed = 0x9e3779b97f4a7c15L + i;
            long units = timed ? 0 : (long) amount;
            workers[i] = new Thread(() -> worker(seed, warmedUp, warmupEnd, units, end),
                    "fixed-work-" + i);
            workers[i].start();
        }
        warmedUp.await();
        long started = System.nanoTime();
        System.out.println("ready");
        System.out.flush();
        for (Thread worker : workers) {
            worker.join();
        }
        System.out.printf("elapsed_s=%.6f%n", (System.nanoTime() - started) / 1e9);
    }

    static void worker(long seed, CyclicBarrier warmedUp, long warmupEnd, long units, long end) {
        Batch batch = warmUp(seed, warmupEnd, warmedUp);
        if (units > 0) {
            serveRequests(batch, units);
        } else {
            while (System.nanoTime() - end < 0) {
                serveRequests(batch, 10);
            }
        }
        sink += batch.digest;
    }

    /** A worker's state, after it worked until warmupEnd and every worker did. */
    static Batch warmUp(long seed, long warmupEnd, CyclicBarrier warmedUp) {
        Batch batch = new Batch(seed);
        while (System.nanoTime() - warmupEnd < 0) {
            serveRequests(batch, 10);
        }
        await(warmedUp);
        return batch;
    }

    /** -p: a phase per line of input, the workers waiting between phases. */
    static void runPhases(long units, int threads, CyclicBarrier warmedUp, long warmupEnd)
            throws Exception {
        CyclicBarrier go = new CyclicBarrier(threads + 1);
        CyclicBarrier clockStarts = new CyclicBarrier(threads + 1);
        CyclicBarrier done = new CyclicBarrier(threads + 1);
        for (int i = 0; i < threads; i++) {
            long seed = 0x9e3779b97f4a7c15L + i;
            Thread worker = new Thread(() -> {
                Batch batch = warmUp(seed, warmupEnd, warmedUp);
                while (true) {
                    await(go);
                    while (System.nanoTime() - leadInEnd < 0) {
                        serveRequests(batch, 10);
                    }
                    await(clockStarts);
                    serveRequests(batch, units);
                    sink += batch.digest;
                    await(done);
                }
            }, "fixed-work-" + i);
            worker.setDaemon(true);
            worker.start();
        }
        warmedUp.await();
        System.out.println("ready");
        System.out.flush();
        BufferedReader input = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = input.readLine()) != null; ) {
            leadInEnd = System.nanoTime() + (long) (Double.parseDouble(line.trim()) * 1e9);
            go.await();
            clockStarts.await();
            long started = System.nanoTime();
            System.out.println("timing");
            System.out.flush();
            done.await();
            System.out.printf("elapsed_s=%.6f%n", (System.nanoTime() - started) / 1e9);
            System.out.flush();
        }
    }

    static void await(CyclicBarrier barrier) {
        try {
            barrier.await();
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    static void serveRequests(Batch batch, long count) {
        for (long i = 0; i < count; i++) {
            handleRequest(batch);
        }
    }

    static void handleRequest(Batch batch) {
        batch.process();
        sink += batch.digest & 1;
    }

    /** One thread's state: a pseudo-random generator and a running digest. */
    static final class Batch {
        long random;
        long digest;

        Batch(long seed) {
            random = seed;
        }

        long next() {
            long x = random;
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            return random = x;
        }

        void process() {
            Order[] orders = ingest();
            long[] totals = aggregate(orders);
            Arrays.sort(totals);
            digest = mix(digest ^ score(totals));
        }

        Order[] ingest() {
            Order[] orders = new Order[ORDERS];
            for (int i = 0; i < ORDERS; i++) {
                long value = next();
                orders[i] = new Order("customer-" + (value & 31), value >>> 40, (int) (value & 7) + 1);
            }
            return orders;
        }

        static long[] aggregate(Order[] orders) {
            Map<String, Long> byCustomer = new HashMap<>();
            for (Order order : orders) {
                byCustomer.merge(order.customer(), order.cents() * order.quantity(), Long::sum);
            }
            return byCustomer.values().stream().mapToLong(Long::longValue).toArray();
        }

        static long score(long[] totals) {
            long score = 0;
            for (int i = 0; i < totals.length; i++) {
                score += mix(totals[i]) * (i + 1);
            }
            return score;
        }

        static long mix(long x) {
            x ^= x >>> 33;
            x *= 0xff51afd7ed558ccdL;
            x ^= x >>> 33;
            x *= 0xc4ceb9fe1a85ec53L;
            return x ^ (x >>> 33);
        }
    }
}
