import java.io.File;
import java.util.ArrayList;
import java.util.List;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;

/**
 * A JVM whose JIT never settles: it runs javac (javax.tools), over and over,
 * on the Java sources in args[1], writing classes to args[2], for args[0]
 * seconds. Thousands of methods get compiled and recompiled while it runs,
 * so samples often land in code whose frame is just being set up, and the
 * JIT compiler threads are busy. One run comes before "ready": on a fresh
 * host the first run mostly waits for the JDK's module image to be read
 * from disk, not running Java.
 */
public final class JavaCompile {
    public static void main(String[] args) {
        double seconds = Support.seconds(args, 10);
        File[] sources = new File(args[1]).listFiles((dir, name) -> name.endsWith(".java"));
        List<String> javacArgs = new ArrayList<>(List.of("-d", args[2]));
        for (File source : sources) {
            javacArgs.add(source.getPath());
        }
        String[] argv = javacArgs.toArray(new String[0]);
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        compile(javac, argv);
        Support.ready();
        long end = Support.deadline(seconds);
        int runs = 1;
        while (System.nanoTime() - end < 0) {
            compile(javac, argv);
            runs++;
        }
        System.err.println("JavaCompile: " + runs + " runs");
    }

    private static void compile(JavaCompiler javac, String[] argv) {
        if (javac.run(null, null, null, argv) != 0) {
            throw new IllegalStateException("javac failed");
        }
    }
}
