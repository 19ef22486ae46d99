//! SIGQUIT is how an attach asks a JVM to start its attach listener, and
//! HotSpot answers every SIGQUIT that arrives once the listener runs with a
//! thread dump on the JVM's output: harm a profiled application can see.
//! JVMs started one after another while two whole-host stokes race to
//! attach them, on a host whose CPUs are both busy, must never print one,
//! and must all run to their end.

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use stoke_tests::{prepare_java, record_args, Stoke, JDK_17};

/// How many JVMs start, and how far apart.
const JVMS: usize = 12;
const APART: Duration = Duration::from_secs(2);
/// How long each JVM works (`JavaBusy`'s argument, seconds).
const JVM_SECONDS: &str = "3";

/// A shell loop that keeps one CPU busy until dropped.
struct Burner(Child);

impl Burner {
    fn start() -> Self {
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()
            .expect("starting a CPU burner");
        Self(child)
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn jvms_starting_under_two_stokes_never_print_a_thread_dump() {
    let (dir, workload) = prepare_java("sigquit-race", "JavaBusy", JDK_17);
    let _burners = [Burner::start(), Burner::start()];
    let seconds = (JVMS as u64 * APART.as_secs() + 8) as f64;
    let mut stokes: Vec<Stoke> = ["a", "b"]
        .iter()
        .map(|name| {
            let out = dir.join(format!("{name}.folded"));
            Stoke::spawn(&record_args(&["-a".to_owned()], 99, seconds, &out))
        })
        .collect();
    for stoke in &mut stokes {
        stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(30));
    }

    let started = Instant::now();
    let mut jvms = Vec::with_capacity(JVMS);
    for index in 0..JVMS {
        thread::sleep((APART * index as u32).saturating_sub(started.elapsed()));
        jvms.push(workload.spawn(&[JVM_SECONDS]));
    }
    let mut dumps = Vec::new();
    for jvm in &mut jvms {
        jvm.wait_success(Duration::from_secs(60));
        if jvm.stdout_text().contains("Full thread dump") {
            dumps.push(jvm.pid());
        }
    }
    for stoke in stokes {
        let output = stoke.wait_recording(seconds);
        println!("{}", output.stderr);
    }
    assert!(
        dumps.is_empty(),
        "JVMs {dumps:?} of {JVMS} printed a thread dump: a SIGQUIT reached them once their attach listener ran"
    );
}
