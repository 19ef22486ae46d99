//! The Java side: the JDKs under test, the Java workloads of
//! `tests/workloads/java/` compiled with each, and how Stoke names Java
//! frames and loads its agent.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{require_root, workloads_dir, Running, TempDir, Workload, FRAME_POINTER_FLAGS};

/// A JDK the Java tests (and the bench) run their workloads on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Jdk {
    /// A short name for messages and directory names.
    pub label: &'static str,
    /// The name a reader knows it by, for reports (`JDK 17`).
    pub name: &'static str,
    /// The JDK's home directory (holding `bin/java` and `bin/javac`).
    pub home: &'static str,
}

/// Debian's OpenJDK 17.
pub const JDK_17: Jdk = Jdk {
    label: "jdk17",
    name: "JDK 17",
    home: "/usr/lib/jvm/java-17-openjdk-amd64",
};

/// Debian bullseye's OpenJDK 11, extracted by `cargo xtask setup` (bookworm
/// has no JDK 11).
pub const JDK_11: Jdk = Jdk {
    label: "jdk11",
    name: "JDK 11",
    home: "/opt/stoke-jdk11/usr/lib/jvm/java-11-openjdk-amd64",
};

/// Eclipse Temurin 25.
pub const TEMURIN_25: Jdk = Jdk {
    label: "temurin25",
    name: "Temurin 25",
    home: "/usr/lib/jvm/temurin-25-jdk-amd64",
};

/// Every JDK under test.
pub const JDKS: [Jdk; 3] = [JDK_11, JDK_17, TEMURIN_25];

impl Jdk {
    /// The path of `bin/<tool>` in this JDK.
    ///
    /// # Panics
    ///
    /// If it does not exist: a missing JDK fails the test, it is never
    /// silently skipped.
    pub fn tool(&self, tool: &str) -> PathBuf {
        let path = Path::new(self.home).join("bin").join(tool);
        assert!(
            path.is_file(),
            "{} is missing: the Java tests need the JDK {} at {}",
            path.display(),
            self.label,
            self.home
        );
        path
    }

    /// HotSpot's `libjvm.so` in this JDK.
    pub fn libjvm(&self) -> PathBuf {
        let path = Path::new(self.home).join("lib/server/libjvm.so");
        assert!(path.is_file(), "{} is missing", path.display());
        path
    }
}

/// The directory holding the Java workloads.
pub fn java_workloads_dir() -> PathBuf {
    workloads_dir().join("java")
}

/// A Java program from `tests/workloads/java/`, compiled with one JDK.
#[derive(Debug, Clone)]
pub struct JavaWorkload {
    class: String,
    classes: PathBuf,
    jdk: Jdk,
}

impl JavaWorkload {
    /// Compiles `tests/workloads/java/<source>.java`, with the `Support`
    /// class every workload uses, with `jdk`'s javac into
    /// `dir/<jdk label>-<class>/`, the class being the source's file name.
    /// Sources that need JDK 21 or later are in `jdk21/`
    /// (`jdk21/JavaVirtual`), out of the way of `JavaCompile`, which
    /// compiles the directory's own with JDK 17.
    ///
    /// # Panics
    ///
    /// If javac fails; the panic message carries its output.
    pub fn build(source: &str, jdk: Jdk, dir: &Path) -> Self {
        let class = source.rsplit('/').next().unwrap_or(source);
        let classes = dir.join(format!("{}-{class}", jdk.label));
        fs::create_dir_all(&classes)
            .unwrap_or_else(|e| panic!("creating {}: {e}", classes.display()));
        let sources =
            [source, "Support"].map(|name| java_workloads_dir().join(format!("{name}.java")));
        let output = Command::new(jdk.tool("javac"))
            .arg("-d")
            .arg(&classes)
            .args(&sources)
            .output()
            .unwrap_or_else(|e| panic!("running javac for {class}: {e}"));
        assert!(
            output.status.success(),
            "javac ({}) failed to build {class}:\n{}",
            jdk.label,
            String::from_utf8_lossy(&output.stderr)
        );
        JavaWorkload {
            class: class.to_owned(),
            classes,
            jdk,
        }
    }

    /// The directory of its classes: its class path.
    pub fn classes(&self) -> &Path {
        &self.classes
    }

    /// The workload's main class.
    pub fn class(&self) -> &str {
        &self.class
    }

    /// The JDK it runs on.
    pub fn jdk(&self) -> Jdk {
        self.jdk
    }

    /// Starts `java -cp <classes> <class> <args>` with no JVM option at all
    /// (stoke must attach to JVMs as they are) and waits, at most 20 s,
    /// until it prints `ready`. The JVM is killed when the returned handle
    /// is dropped.
    pub fn spawn<S: AsRef<OsStr>>(&self, args: &[S]) -> Running {
        self.spawn_with_options::<&str, S>(&[], args)
    }

    /// [`JavaWorkload::spawn`] with JVM options before the class: for the
    /// controls of a test, whose JVM must behave otherwise.
    pub fn spawn_with_options<O: AsRef<OsStr>, S: AsRef<OsStr>>(
        &self,
        options: &[O],
        args: &[S],
    ) -> Running {
        let mut command = Command::new(self.jdk.tool("java"));
        command
            .args(options)
            .arg("-cp")
            .arg(&self.classes)
            .arg(&self.class)
            .args(args)
            // The JVM's own settings must not come from the environment.
            .env_remove("JAVA_TOOL_OPTIONS")
            .env_remove("JDK_JAVA_OPTIONS")
            .env_remove("_JAVA_OPTIONS");
        let name = format!("{} ({})", self.class, self.jdk.label);
        Running::start(command, &name, "java")
    }
}

/// The method of a Java frame (`pkg.Class.method_[j]` JIT-compiled,
/// `_[i]` inlined or `_[0]` interpreted): the name without its suffix, or
/// `None` for any other frame.
pub fn java_method(frame: &str) -> Option<&str> {
    frame
        .strip_suffix("_[j]")
        .or_else(|| frame.strip_suffix("_[i]"))
        .or_else(|| frame.strip_suffix("_[0]"))
        .filter(|method| !method.is_empty())
}

/// Whether a frame is a Java frame ([`java_method`]).
pub fn is_java_frame(frame: &str) -> bool {
    java_method(frame).is_some()
}

/// The common start of a Java test: [`require_root`], then a fresh
/// [`TempDir`] named after `label` and `jdk` with
/// `tests/workloads/java/<source>.java` built in it by `jdk`
/// ([`JavaWorkload::build`]).
pub fn prepare_java(label: &str, source: &str, jdk: Jdk) -> (TempDir, JavaWorkload) {
    require_root();
    let dir = TempDir::new(&format!("{label}-{}", jdk.label));
    let workload = JavaWorkload::build(source, jdk, dir.path());
    (dir, workload)
}

/// A C workload that creates a JVM itself (`tests/workloads/java_host.h`),
/// built in a fresh [`TempDir`] named `label` with `jdk`'s JNI headers, and
/// the `JavaBusy` classes it runs.
pub fn prepare_java_host(
    label: &str,
    workload: &str,
    jdk: Jdk,
) -> (TempDir, Workload, JavaWorkload) {
    require_root();
    let dir = TempDir::new(label);
    let include = format!("-I{}/include", jdk.home);
    let include_linux = format!("{include}/linux");
    let mut flags = FRAME_POINTER_FLAGS.to_vec();
    flags.extend([include.as_str(), include_linux.as_str()]);
    let host = Workload::build_with(workload, dir.path(), &flags);
    let java = JavaWorkload::build("JavaBusy", jdk, dir.path());
    (dir, host, java)
}

/// The distinct paths of Stoke's agent (`.../libstoke_agent*.so`) that
/// process `pid` maps: empty before any attach, one path once attached.
pub fn agent_paths(pid: u32) -> Vec<String> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/maps: {e}"));
    let mut paths: Vec<String> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|path| path.contains("/libstoke_agent"))
        .map(str::to_owned)
        .collect();
    paths.sort();
    paths.dedup();
    paths
}
