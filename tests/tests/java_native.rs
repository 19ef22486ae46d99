//! Java code that calls into native code shows, in one stack, its Java
//! frames, then the native method's C function (JNI), the libraries below
//! it, then the kernel: `JavaNative.main_[0];...;
//! java.io.FileOutputStream.writeBytes_[j];Java_java_io_FileOutputStream_writeBytes;
//! writeBytes;__GI___libc_write;...;vfs_write_[k];...`.
//!
//! The zip path depends on the JDK's zlib: Temurin bundles its own, built
//! with frame pointers, so stoke unwinds from zlib through the JNI function;
//! Debian's OpenJDK uses the system libz, built without frame pointers and
//! stripped, so today only its leaf shows (`libz.so.1.2.13+0x4a26`) right
//! under the Java native method, until DWARF unwinding.

use std::path::Path;

use stoke_tests::{
    args, assert_share, describe, is_java_frame, is_kernel_frame, java_method, prepare_java,
    record_process, samples_where, Jdk, Stack, JDK_17, TEMURIN_25,
};

const MAIN: &str = "JavaNative.main";

/// libc's write(2) wrapper, as glibc's symbols name it.
const LIBC_WRITE: &[&str] = &["__GI___libc_write", "__libc_write", "write", "__write"];
/// libc's fsync(2) wrapper.
const LIBC_FSYNC: &[&str] = &["__GI_fsync", "fsync", "__libc_fsync", "__fsync"];

/// Whether a frame is zlib code: a named zlib function (Temurin's bundled
/// zlib has its symbols; Debian's libz exports only its API) or an unnamed
/// address in libz.
fn is_zlib_frame(frame: &str) -> bool {
    const ZLIB: &[&str] = &[
        "deflate",
        "deflate_fast",
        "deflate_slow",
        "deflate_stored",
        "deflate_rle",
        "deflate_huff",
        "longest_match",
        "fill_window",
        "slide_hash",
        "read_buf",
        "flush_pending",
        "_tr_flush_block",
        "_tr_stored_block",
        "_tr_flush_bits",
        "_tr_align",
        "_tr_tally",
        "compress_block",
        "build_tree",
        "send_tree",
        "scan_tree",
        "pqdownheap",
        "gen_bitlen",
        "gen_codes",
        "bi_flush",
        "bi_windup",
        "adler32",
        "adler32_z",
        "crc32",
        "crc32_z",
    ];
    frame.starts_with("libz.so") || ZLIB.contains(&frame)
}

/// The index of the innermost Java frame, if the stack's Java frames are
/// all together right after the process frame, starting in the workload's
/// own code.
///
/// Not necessarily at `JavaNative.main`: AsyncGetCallTrace cuts some of
/// these stacks short, at `JavaNative.write_[j]` (see `rooted` below).
fn innermost_java(stack: &Stack) -> Option<usize> {
    if !java_method(stack.frames.get(1)?).is_some_and(|m| m.starts_with("JavaNative.")) {
        return None;
    }
    let last = stack.frames.iter().rposition(|f| is_java_frame(f))?;
    stack.frames[1..=last]
        .iter()
        .all(|f| is_java_frame(f))
        .then_some(last)
}

/// Whether `stack` is `process;JavaNative.<method>_[..];...;<native_method>_[..]`
/// then user frames in which each of `natives` matches a frame, in this
/// order, the first one directly under the Java frame, then kernel frames
/// only, among them one of `kernel`.
fn native_chain(
    stack: &Stack,
    native_methods: &[&str],
    natives: &[&[&str]],
    kernel: &[&str],
) -> bool {
    let Some(java) = innermost_java(stack) else {
        return false;
    };
    if !java_method(&stack.frames[java]).is_some_and(|m| native_methods.contains(&m)) {
        return false;
    }
    let first_kernel = stack
        .frames
        .iter()
        .position(|f| is_kernel_frame(f))
        .unwrap_or(stack.frames.len());
    let Some(user) = stack.frames.get(java + 1..first_kernel) else {
        return false;
    };
    let mut next = 0;
    for (n, names) in natives.iter().enumerate() {
        let Some(found) = user[next..]
            .iter()
            .position(|f| names.contains(&f.as_str()))
        else {
            return false;
        };
        if n == 0 && found != 0 {
            return false;
        }
        next += found + 1;
    }
    let kernel_frames = &stack.frames[first_kernel..];
    kernel_frames.iter().all(|f| is_kernel_frame(f))
        && kernel_frames.iter().any(|f| kernel.contains(&f.as_str()))
}

/// Whether `dir` is on a tmpfs, where fsync has nothing to write.
fn on_tmpfs(dir: &Path) -> bool {
    const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string and an out-pointer to a zeroed statfs.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(path.as_ptr(), &mut fs) };
    assert_eq!(rc, 0, "statfs {}", dir.display());
    fs.f_type as libc::c_long == TMPFS_MAGIC
}

fn native_frames_on(jdk: Jdk, zlib_bundled: bool) {
    let label = jdk.label;
    let (dir, workload) = prepare_java("java-native", "JavaNative", jdk);
    let data = dir.join("data.bin");
    let running = workload.spawn(&args![30, data.display()]);
    let out = dir.join("native.folded");

    let stacks = record_process(&running, 499, 4.0, &out);

    // The write path: Java -> JNI -> libc -> kernel, in one stack.
    let writes = samples_where(&stacks, |s| {
        s.has_java("java.io.FileOutputStream.writeBytes")
    });
    let write_chains = samples_where(&stacks, |s| {
        native_chain(
            s,
            &["java.io.FileOutputStream.writeBytes"],
            &[&["Java_java_io_FileOutputStream_writeBytes"], LIBC_WRITE],
            &["vfs_write_[k]"],
        )
    });
    let rooted = samples_where(&stacks, |s| {
        s.has_java("java.io.FileOutputStream.writeBytes") && s.java_at(1) == Some(MAIN)
    });
    println!("{label}: {writes} samples in FileOutputStream.writeBytes, {write_chains} with Java -> JNI -> libc -> vfs_write_[k], {rooted} rooted at {MAIN}");
    let write_stacks: Vec<&Stack> = stacks
        .iter()
        .filter(|s| s.has_java("java.io.FileOutputStream.writeBytes"))
        .collect();
    // The workload spends about a third of its CPU writing.
    assert!(
        writes > 100,
        "only {writes} samples in java.io.FileOutputStream.writeBytes ({label})\n{}",
        describe(&stacks, 15)
    );
    assert_share(
        write_chains,
        writes,
        0.6,
        format_args!(
            "in FileOutputStream.writeBytes ({label}) have the stack \
             `java [PID];JavaNative.*_[..];...;java.io.FileOutputStream.writeBytes_[..];\
             Java_java_io_FileOutputStream_writeBytes;...;<libc write>;...;vfs_write_[k];...`\n{}",
            describe(write_stacks.iter().copied(), 10)
        ),
    );

    // The fsync path: Java -> JNI -> libc -> kernel. glibc's fsync sets up
    // no frame pointer: the JNI function shows only because the unwinder
    // reads libc's unwind tables. Only samples that got their Java stack
    // count: a sample whose signal merged with a later one's while the
    // thread ran user code between them starts with native frames.
    let sync_methods = [
        "java.io.FileDescriptor.sync",
        "java.io.FileDescriptor.sync0",
    ];
    let in_sync = |s: &Stack| sync_methods.iter().any(|m| s.has_java(m));
    let sync_native_only = samples_where(&stacks, |s| in_sync(s) && s.java_at(1).is_none());
    let syncs = samples_where(&stacks, |s| in_sync(s) && s.java_at(1).is_some());
    let sync_chains = samples_where(&stacks, |s| {
        native_chain(
            s,
            &sync_methods,
            &[
                &[
                    "Java_java_io_FileDescriptor_sync",
                    "Java_java_io_FileDescriptor_sync0",
                ],
                LIBC_FSYNC,
            ],
            &["do_fsync_[k]", "vfs_fsync_range_[k]"],
        )
    });
    let sync_jni = samples_where(&stacks, |s| {
        s.frames
            .iter()
            .any(|f| f.starts_with("Java_java_io_FileDescriptor_sync"))
    });
    println!("{label}: {syncs} samples in FileDescriptor.sync with a Java stack ({sync_native_only} more without), {sync_chains} with Java -> JNI -> libc -> do_fsync_[k], {sync_jni} with its JNI function");
    if on_tmpfs(dir.path()) {
        println!(
            "{} is on a tmpfs, where fsync costs no CPU: the fsync path is not checked",
            dir.path().display()
        );
    } else {
        let sync_stacks: Vec<&Stack> = stacks.iter().filter(|s| in_sync(s)).collect();
        assert!(
            syncs >= 10,
            "only {syncs} samples in java.io.FileDescriptor.sync ({label})\n{}",
            describe(&stacks, 15)
        );
        assert_share(
            sync_chains,
            syncs,
            0.8,
            format_args!(
                "in FileDescriptor.sync ({label}) have the stack \
                 `java [PID];JavaNative.*_[..];...;java.io.FileDescriptor.sync[0]_[..];\
                 Java_java_io_FileDescriptor_sync[0];<libc fsync>;...;do_fsync_[k];...`\n{}",
                describe(sync_stacks.iter().copied(), 10)
            ),
        );
    }

    // The zip path: Java -> the native method -> zlib.
    let deflate = "java.util.zip.Deflater.deflateBytesBytes";
    let zip_stacks: Vec<&Stack> = stacks.iter().filter(|s| s.has_java(deflate)).collect();
    let zips = samples_where(zip_stacks.iter().copied(), |_| true);
    let jni = "Java_java_util_zip_Deflater_deflateBytesBytes";
    let zip_jni = samples_where(zip_stacks.iter().copied(), |s| {
        innermost_java(s).is_some_and(|i| s.frames.get(i + 1).is_some_and(|f| f == jni))
    });
    // Into zlib, in this order: Java -> [JNI ->] zlib.
    let zip_chains = samples_where(zip_stacks.iter().copied(), |s| {
        let Some(java) = innermost_java(s) else {
            return false;
        };
        let below = &s.frames[java + 1..];
        java_method(&s.frames[java]) == Some(deflate)
            && match below.first().map(String::as_str) {
                Some(f) if f == jni => below.get(1).is_some_and(|f| is_zlib_frame(f)),
                Some(f) => is_zlib_frame(f),
                None => false,
            }
    });
    let zip_named = samples_where(zip_stacks.iter().copied(), |s| {
        s.frames
            .iter()
            .any(|f| is_zlib_frame(f) && !f.starts_with("libz.so"))
    });
    println!("{label}: {zips} samples in Deflater.deflateBytesBytes: {zip_chains} go on into zlib, {zip_jni} through {jni}, {zip_named} with a named zlib function");
    println!(
        "{label}: zip stacks: {}",
        describe(zip_stacks.iter().copied(), 8)
    );
    // The workload spends about half of its CPU compressing.
    assert!(
        zips > 100,
        "only {zips} samples in {deflate} ({label})\n{}",
        describe(&stacks, 15)
    );
    assert_share(
        zip_chains,
        zips,
        0.8,
        format_args!(
            "in {deflate} ({label}) have the stack \
             `java [PID];JavaNative.*_[..];...;{deflate}_[..];[{jni};]<zlib>...`\n{}",
            describe(zip_stacks.iter().copied(), 10)
        ),
    );
    // Through the JNI function: the unwinder walks zlib by its unwind
    // tables, with or without frame pointers (Debian's libz has none).
    assert_share(
        zip_jni,
        zips,
        0.8,
        format_args!(
            "in {deflate} ({label}) go through {jni}\n{}",
            describe(zip_stacks.iter().copied(), 10)
        ),
    );
    if zlib_bundled {
        // A JDK's own zlib keeps its symbols: its functions are named.
        assert_share(
            zip_named,
            zips,
            0.8,
            format_args!(
                "in {deflate} ({label}) name a zlib function\n{}",
                describe(zip_stacks.iter().copied(), 10)
            ),
        );
    }
}

#[test]
fn java_native_frames_on_jdk_17() {
    // Debian's OpenJDK uses the system libz (no frame pointers, stripped).
    native_frames_on(JDK_17, false);
}

#[test]
fn java_native_frames_on_temurin_25() {
    // Temurin bundles zlib in libzip.so, with frame pointers and symbols.
    native_frames_on(TEMURIN_25, true);
}
