import java.io.FileOutputStream;
import java.io.IOException;
import java.util.zip.Deflater;

/**
 * Java code that spends its time in native code below JNI: main() loops
 * until args[0] seconds have passed, each round compressing 256 KiB with
 * java.util.zip.Deflater at its fastest level (zlib, in compress()), then
 * writing the input and its compressed form to the file args[1] in 8 KiB
 * writes and fsync()ing it (in writeAndSync()). The input is written
 * REPEAT times so that writes take about as much CPU as compression. The
 * file is truncated every 16 rounds so that it stays small.
 */
public final class JavaNative {
    private static final int INPUT = 256 * 1024;
    private static final int WRITE = 8 * 1024;
    private static final int REPEAT = 4;

    public static void main(String[] args) throws IOException {
        long end = Support.deadline(Support.seconds(args, 10));
        String path = args[1];
        byte[] input = text(INPUT);
        byte[] output = new byte[INPUT + 1024];
        Deflater deflater = new Deflater(Deflater.BEST_SPEED);
        FileOutputStream file = new FileOutputStream(path);
        long rounds = 0;
        long compressed = 0;
        Support.ready();
        while (System.nanoTime() < end) {
            int length = compress(deflater, input, output);
            compressed += length;
            writeAndSync(file, input, output, length);
            if (++rounds % 16 == 0) {
                file.close();
                file = new FileOutputStream(path);
            }
        }
        file.close();
        System.err.printf("JavaNative: %d rounds, %d bytes compressed%n", rounds, compressed);
    }

    /** Deflates input into output; returns the compressed length. */
    static int compress(Deflater deflater, byte[] input, byte[] output) {
        deflater.reset();
        deflater.setInput(input);
        deflater.finish();
        int length = 0;
        while (!deflater.finished()) {
            length += deflater.deflate(output, length, output.length - length);
        }
        return length;
    }

    /** Writes input REPEAT times and compressed[0..length) once, in WRITE-byte
     * pieces, then syncs the file. */
    static void writeAndSync(FileOutputStream file, byte[] input, byte[] compressed, int length)
            throws IOException {
        for (int i = 0; i < REPEAT; i++) {
            write(file, input, input.length);
        }
        write(file, compressed, length);
        file.getFD().sync();
    }

    static void write(FileOutputStream file, byte[] data, int length) throws IOException {
        for (int off = 0; off < length; off += WRITE) {
            file.write(data, off, Math.min(WRITE, length - off));
        }
    }

    /** Pseudo-random words: compressible, but not trivially. */
    static byte[] text(int size) {
        String[] words = {"stoke ", "profiler ", "java ", "frame ", "kernel ", "sample ",
            "deflate ", "write ", "sync ", "stack ", "thread ", "native "};
        byte[] text = new byte[size];
        long rng = 88172645463325252L;
        int at = 0;
        while (at < size) {
            rng ^= rng << 13;
            rng ^= rng >>> 7;
            rng ^= rng << 17;
            String word = words[(int) Long.remainderUnsigned(rng, words.length)];
            for (int i = 0; i < word.length() && at < size; i++) {
                text[at++] = (byte) word.charAt(i);
            }
        }
        return text;
    }
}
