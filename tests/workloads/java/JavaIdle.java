/**
 * A JVM that waits: sleeps until args[0] seconds have passed, using no CPU,
 * for the tests that attach to it (java_attach.rs) and must see it
 * undisturbed (alive, and no thread dump printed by a stray SIGQUIT).
 */
public final class JavaIdle {
    public static void main(String[] args) throws InterruptedException {
        long end = Support.deadline(Support.seconds(args, 120));
        Support.ready();
        while (System.nanoTime() < end) {
            Thread.sleep(20);
        }
    }
}
