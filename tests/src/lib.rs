//! Shared harness for Stoke's end-to-end tests.
//!
//! The tests in `tests/tests/` run the real `stoke` binary (as root, with
//! real BPF) against small C programs from `tests/workloads/`, which are
//! compiled at test time with `cc`, and assert on the profiles it writes.
//! The Java tests (`java_*.rs`) run Java programs from
//! `tests/workloads/java/`, compiled at test time with the `javac` of each
//! JDK under test ([`JDK_11`], [`JDK_17`], [`TEMURIN_25`]) and started with no JVM
//! option, so that stoke has to attach to them as they run.
//!
//! The binary is taken from the `STOKE_BIN` environment variable, or else
//! from `<workspace root>/target/release/stoke` (run `cargo build --release`
//! first). Run the suite serially:
//!
//! ```text
//! cargo build --release
//! cargo test -p stoke-tests -- --test-threads=1
//! ```
//!
//! The bench (`cargo xtask bench`) uses this crate too, for what both must
//! read alike: the JDKs, stoke's JSON profile ([`json`]) and `perf script`'s
//! output ([`perf_script`]). Those modules return errors instead of
//! panicking.

mod go_pprof;
mod host;
mod java;
pub mod json;
mod paths;
pub mod perf_script;
mod pipes;
mod receiver;
mod running;
mod source_lines;
mod stacks;
mod stoke;
mod synthetic;
mod temp_dir;
mod workload;

pub use go_pprof::{go_pprof, pprof_tags};
pub use host::{cpu_time, free_port, pid_max, require_root, run_delay, run_tool};
pub use java::{
    agent_paths, is_java_frame, java_method, java_workloads_dir, prepare_java, prepare_java_host,
    JavaWorkload, Jdk, JDKS, JDK_11, JDK_17, TEMURIN_25,
};
pub use json::{read_json, JavaReport, JsonProfile};
pub use paths::{
    crate_dir, stoke_bin, tool_path, workloads_dir, workspace_root, PYTHON_3_13_ROOT, PYTHON_PATH,
};
pub use receiver::{Receiver, Request};
pub use running::{Line, Running};
pub use source_lines::{count_in_bodies, frame_location, function_lines, line_of, Located};
pub use stacks::{
    assert_all_of_process, assert_run_share, assert_share, describe, is_kernel_frame, parse_folded,
    parse_process_frame, parse_thread_frame, process_stacks, read_folded, samples_where,
    samples_with_frame, stacks_of, stacks_of_thread, total_samples, Stack,
};
pub use stoke::{
    contains_word, record, record_args, record_process, record_to, Stoke, StokeOutput,
};
pub use synthetic::synthetic_profile;
pub use temp_dir::TempDir;
pub use workload::{prepare, Workload, FRAME_POINTER_FLAGS};

/// Builds an array of `String` command-line arguments from anything that
/// implements `Display`: `args!["record", "-p", pid, "-o", path.display()]`.
#[macro_export]
macro_rules! args {
    ($($arg:expr),* $(,)?) => {
        [$(($arg).to_string()),*]
    };
}

pub mod docker;
