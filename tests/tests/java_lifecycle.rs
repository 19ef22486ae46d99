//! JVMs that come and go during a recording, and a stoke that dies: a JVM
//! that exits mid-recording keeps its Java names, one started mid-recording
//! gets Java frames, a stoke killed with SIGKILL leaves its JVMs running
//! with an agent that the next recording reuses, and a JVM whose agent an
//! earlier recording loaded has its Java stack taken from the next one's
//! first sample; `stoke continuous` releases the memory it shares with JVMs
//! that exited.

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use stoke_tests::{
    agent_paths, args, assert_share, describe, prepare_java, process_stacks, read_folded,
    read_json, record_args, record_to, require_root, samples_where, stacks_of, total_samples,
    JavaReport, JavaWorkload, Jdk, Running, Stack, Stoke, TempDir, JDK_17, TEMURIN_25,
};

/// Panics unless more than `min` samples of `root` are JavaBusy's, with
/// its Java methods named from the root on (`JavaBusy.main_[..];...`, or
/// `JavaBusy.crunch_[..]` where AsyncGetCallTrace cut the stack short: see
/// java_split.rs), and none names a method by its number only
/// (`[unknown Java method 0x...]`).
fn assert_busy_java_frames(stacks: &[Stack], root: &str, min: u64) {
    let (mine, total) = process_stacks(stacks, root, min);
    let named = samples_where(mine.iter().copied(), |s| {
        s.java_at(1).is_some_and(|m| m.starts_with("JavaBusy.")) && s.has_java("JavaBusy.crunch")
    });
    println!("{root}: {total} samples, {named} in JavaBusy.*;...;JavaBusy.crunch");
    assert!(
        named > min,
        "only {named} samples of {root} in `JavaBusy.*_[..];...;JavaBusy.crunch_[..]` \
         (more than {min} expected)\n{}",
        describe(mine.iter().copied(), 10)
    );
    // The bar: Java frames named in at least 99% of the samples. A
    // method the agent never saw prepared (a class hidden from JVMTI, or
    // one it raced with while attaching to a starting JVM) stays unnamed.
    let unknown = samples_where(mine.iter().copied(), |s| {
        s.frames.iter().any(|f| f.contains("unknown Java method"))
    });
    assert!(
        unknown * 100 <= total,
        "{unknown} of {total} samples of {root} have unnamed Java methods (at most 1% allowed)\n{}",
        describe(mine.iter().copied(), 10)
    );
}

#[test]
fn jvm_exiting_mid_recording_keeps_its_java_names() {
    let (dir, workload) = prepare_java("java-exit", "JavaBusy", TEMURIN_25);
    // Runs until stoke's agent shows up in it, then 1.5 s more.
    let mut running = workload.spawn(&["1.5", "after-attach"]);
    let root = running.root_frame();
    let out = dir.join("exit.folded");

    let stoke = Stoke::spawn(&record_args(&args!["-a"], 499, 4.0, &out));
    let started = Instant::now();
    running.wait_for_line("attached", Duration::from_secs(10));
    running.wait_success(Duration::from_secs(10));
    let exited_after = started.elapsed();
    println!("the JVM exited {exited_after:?} after stoke started");
    assert!(
        exited_after < Duration::from_secs_f64(3.5),
        "the JVM exited {exited_after:?} after stoke started, not during the 4 s recording"
    );

    let output = stoke.wait_recording(4.0);
    println!("{}", output.stderr);
    let stacks = read_folded(&out);
    // 1.5 s of one busy thread at 499 Hz is about 750 samples.
    assert_busy_java_frames(&stacks, &root, 300);
}

#[test]
fn jvm_started_mid_recording_gets_java_frames() {
    let (dir, workload) = prepare_java("java-late", "JavaBusy", JDK_17);
    let out = dir.join("late.json");

    let mut stoke = Stoke::spawn(&record_args(&args!["-a"], 499, 4.0, &out));
    let started = Instant::now();
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(10));
    thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
    let running = workload.spawn(&["30"]);
    let root = running.root_frame();
    println!(
        "the JVM was ready {:?} after stoke started",
        started.elapsed()
    );

    let output = stoke.wait_recording(4.0);
    println!("{}", output.stderr);
    assert!(
        !output
            .stderr
            .contains(&format!("stoke: warning: JVM {}:", running.pid())),
        "stoke could not attach to the JVM started mid-recording:\n{}",
        output.stderr
    );
    let profile = read_json(&out);
    // It ran for the last ~2.5 s of the recording, less its start and the
    // attach: at 499 Hz, well over 300 samples with Java frames.
    assert_busy_java_frames(&profile.stacks, &root, 300);
    // How soon: the JVM's start, its attach listener's, then the agent's.
    let after_start = &profile.summary.java.java_after_start_ms;
    println!("Java frames after the JVM's start, ms: {after_start:?}");
    let ms = after_start
        .iter()
        .find(|&&(pid, _)| pid == running.pid())
        .map(|&(_, ms)| ms)
        .unwrap_or_else(|| {
            panic!(
                "no time to Java frames for JVM {}: {after_start:?}",
                running.pid()
            )
        });
    // HotSpot takes agents ~50 ms after its start here; stoke looks at a
    // starting JVM every 20 ms. 300-1250 ms when it looked at the next
    // drain (every 250 ms) or signalled before HotSpot set its attach
    // mechanism up.
    assert!(
        (20..400).contains(&ms),
        "Java frames {ms} ms after the JVM's start (20-400 ms expected)"
    );
    let java = JavaReport::of(&profile);
    assert!(
        java.missing
            .iter()
            .any(|(reason, _)| reason == "before its agent answered"),
        "the samples before the agent answered are not counted: {:?}",
        java.missing
    );
}

/// Waits at most `timeout` until `running` maps stoke's agent, and returns
/// its path(s).
fn wait_for_agent(running: &Running, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let paths = agent_paths(running.pid());
        if !paths.is_empty() {
            return paths;
        }
        assert!(
            Instant::now() < deadline,
            "no agent loaded into JVM {} within {timeout:?}",
            running.pid()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn jvms_survive_a_killed_stoke_and_the_next_recording_reuses_the_agent() {
    require_root();
    let dir = TempDir::new("java-sigkill");
    let mut jvms: Vec<Running> = [JDK_17, TEMURIN_25]
        .into_iter()
        .map(|jdk| JavaWorkload::build("JavaBusy", jdk, dir.path()).spawn(&["60"]))
        .collect();

    // A recording without -d, killed once both JVMs are attached and have
    // been answering signals for a while.
    let mut stoke = Stoke::spawn(&args![
        "record",
        "-a",
        "-F",
        499,
        "-o",
        dir.join("killed.txt").display()
    ]);
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(10));
    let agents: Vec<Vec<String>> = jvms
        .iter()
        .map(|jvm| wait_for_agent(jvm, Duration::from_secs(10)))
        .collect();
    println!("agents loaded: {agents:?}");
    thread::sleep(Duration::from_secs(2));
    stoke.signal(libc::SIGKILL);
    let killed_at = Instant::now();
    let output = stoke.wait(Duration::from_secs(120));
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&output.status),
        Some(libc::SIGKILL),
        "stoke was not killed by SIGKILL: {}",
        output.status
    );

    // Every JVM keeps running and working: a beat every 100 ms.
    thread::sleep(Duration::from_millis(2200));
    for jvm in &mut jvms {
        let beats = jvm.lines_since("beat", killed_at);
        println!("JVM {}: {beats} beats in 2.2 s after SIGKILL", jvm.pid());
        assert!(
            jvm.is_alive(),
            "JVM {} died after stoke was killed; stderr:\n{}",
            jvm.pid(),
            jvm.stderr()
        );
        assert!(
            beats >= 18,
            "JVM {} printed {beats} heartbeats in the 2.2 s after stoke was killed (22 expected); stderr:\n{}",
            jvm.pid(),
            jvm.stderr()
        );
    }

    // The next recording of the same JVMs reuses their agents.
    let out = dir.join("again.json");
    let pids = format!("{},{}", jvms[0].pid(), jvms[1].pid());
    let output = record_to(&args!["-p", pids], 499, 2.0, &out);
    let profile = read_json(&out);
    let report = profile.describe();
    println!("{}\n{report}", output.stderr);
    assert!(
        !output.stderr.contains("stoke: warning: JVM"),
        "the second recording could not use a JVM:\n{}",
        output.stderr
    );
    let java = JavaReport::of(&profile);
    assert_eq!(java.jvms, 2, "JVMs profiled:\n{report}");
    let total = java.java_samples + java.non_java_samples + java.missing_total();
    // Two busy threads on two CPUs for 2 s at 499 Hz: about 2000 samples,
    // fewer on a loaded host.
    assert!(
        java.java_samples > 300,
        "only {} samples with Java frames in the second recording:\n{report}",
        java.java_samples
    );
    assert_share(
        java.java_samples,
        total,
        0.9,
        format_args!("of the JVMs have Java frames in the second recording:\n{report}"),
    );
    assert!(
        profile.names("JavaBusy.crunch"),
        "JavaBusy's methods are not named in the second recording:\n{report}"
    );
    for (jvm, before) in jvms.iter().zip(&agents) {
        assert_eq!(
            &agent_paths(jvm.pid()),
            before,
            "JVM {} loaded another agent instead of reusing its own",
            jvm.pid()
        );
    }
}

/// A JVM whose agent an earlier recording loaded has its Java stack taken
/// from the first sample of the next recordings, whole-host or by pid:
/// stoke adopts the agent before sampling starts. (Found through its first
/// samples instead, the JVM was not signalled until its agent was adopted:
/// 1.7% of these short recordings' samples.) Every sample of the JVM is in
/// the Java summary: with Java frames, of a thread running no Java, or
/// missing for a reason.
fn an_agent_loaded_before_gives_java_frames_from_the_first_sample(jdk: Jdk) {
    require_root();
    let (dir, workload) = prepare_java("java-first-sample", "JavaSplit", jdk);
    let jvm = workload.spawn(&["60"]);
    record_to(&args!["-p", jvm.pid()], 99, 1.0, &dir.join("load.folded"));
    let root = format!("java [{}]", jvm.pid());
    let (mut total, mut accounted, mut with_java, mut before_agent) = (0, 0, 0, 0);
    let mut non_java = 0;
    for round in 0..6 {
        let select = if round % 2 == 0 {
            args!["-a"].to_vec()
        } else {
            args!["-p", jvm.pid()].to_vec()
        };
        let out = dir.join(format!("short-{round}.json"));
        record_to(&select, 999, 0.3, &out);
        let profile = read_json(&out);
        let java = JavaReport::of(&profile);
        total += total_samples(stacks_of(&profile.stacks, &root));
        accounted += java.java_samples + java.non_java_samples + java.missing_total();
        with_java += java.java_samples;
        non_java += java.non_java_samples;
        before_agent += java
            .missing
            .iter()
            .filter(|(reason, _)| reason == "before its agent answered")
            .map(|(_, samples)| samples)
            .sum::<u64>();
    }
    println!(
        "{}: {total} samples of the JVM, {accounted} in the Java summary, {with_java} with Java frames, {non_java} of threads running no Java",
        jdk.label
    );
    // Six recordings of 0.3 s at 999 Hz: about 1800 samples.
    assert!(total > 600, "only {total} samples of the JVM");
    assert_eq!(
        accounted,
        total,
        "{} samples of the JVM are not in the Java summary",
        total.abs_diff(accounted)
    );
    assert_eq!(
        before_agent, 0,
        "samples of the JVM taken before its agent answered"
    );
    // Its GC and JIT compiler threads run no Java (a compile in one of
    // the short windows takes a percent of its samples): of the others,
    // all but a few of AsyncGetCallTrace's misses have Java frames.
    assert_share(
        with_java,
        total - non_java,
        0.99,
        "of the samples of the JVM's Java threads have Java frames",
    );
}

#[test]
fn an_agent_loaded_before_gives_java_frames_from_the_first_sample_on_jdk_17() {
    an_agent_loaded_before_gives_java_frames_from_the_first_sample(JDK_17);
}

#[test]
fn an_agent_loaded_before_gives_java_frames_from_the_first_sample_on_temurin_25() {
    an_agent_loaded_before_gives_java_frames_from_the_first_sample(TEMURIN_25);
}

#[test]
fn a_stoke_killed_mid_drain_leaves_the_agent_ring_usable() {
    let (dir, workload) = prepare_java("java-kill-mid-drain", "JavaBusy", JDK_17);
    let mut jvm = workload.spawn(&["60"]);
    // The test hook kills stoke right after it took its 300th Java sample,
    // in the middle of a drain of the agent's ring.
    let mut command = std::process::Command::new(stoke_tests::stoke_bin());
    command
        .args(record_args(
            &args!["-p", jvm.pid()],
            499,
            10.0,
            &dir.join("killed.txt"),
        ))
        .env("STOKE_TEST_KILL_AFTER_DRAINED", "300");
    let output = Stoke::spawn_command(command).wait(Duration::from_secs(30));
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&output.status),
        Some(libc::SIGKILL),
        "stoke did not kill itself mid-drain ({}): {}",
        output.status,
        output.stderr
    );
    assert!(
        output.elapsed < Duration::from_secs(8),
        "stoke took {:?} to drain 300 Java samples",
        output.elapsed
    );

    // The next recording takes the Java stacks from the same ring, twice
    // around it at least (2 s at 499 Hz is about 1,000 samples).
    let out = dir.join("again.json");
    let output = record_to(&args!["-p", jvm.pid()], 499, 2.0, &out);
    let profile = read_json(&out);
    let report = profile.describe();
    println!("{}\n{report}", output.stderr);
    let java = JavaReport::of(&profile);
    let total = java.java_samples + java.non_java_samples + java.missing_total();
    assert!(
        java.java_samples > 300,
        "only {} samples with Java frames after a stoke was killed mid-drain:\n{report}",
        java.java_samples
    );
    assert_share(
        java.java_samples,
        total,
        0.95,
        format_args!("of the JVM have Java frames after a stoke was killed mid-drain:\n{report}"),
    );
    assert!(jvm.is_alive(), "the JVM died: {}", jvm.stderr());
}

#[test]
fn a_second_stoke_gets_java_frames_beside_the_first() {
    let (dir, workload) = prepare_java("java-two-stokes", "JavaBusy", JDK_17);
    let mut jvm = workload.spawn(&["30"]);
    let first_out = dir.join("first.json");
    let first = Stoke::spawn(&record_args(&args!["-p", jvm.pid()], 499, 6.0, &first_out));
    wait_for_agent(&jvm, Duration::from_secs(10));
    thread::sleep(Duration::from_secs(1));

    // The second recording of the same JVM, while the first goes on: it
    // reads the same agent, and gets Java frames too, with no warning.
    let second_out = dir.join("second.json");
    let second = record_to(&args!["-p", jvm.pid()], 499, 2.0, &second_out);
    println!("second stoke:\n{}", second.stderr);
    assert!(
        !second.stderr.contains("stoke: warning:"),
        "the second stoke warned:\n{}",
        second.stderr
    );
    let second_profile = read_json(&second_out);
    assert_eq!(
        second_profile.summary.java.jvms,
        1,
        "the second stoke did not profile the JVM's Java stacks:\n{}",
        second_profile.describe()
    );
    let java = JavaReport::of(&second_profile);
    let total = java.java_samples + java.non_java_samples + java.missing_total();
    assert_share(
        java.java_samples,
        total,
        0.95,
        format_args!(
            "of the JVM have Java frames in the second recording, beside the first:\n{}",
            second_profile.describe()
        ),
    );

    let first = first.wait_recording(6.0);
    first.assert_success();
    let profile = read_json(&first_out);
    let report = profile.describe();
    let java = JavaReport::of(&profile);
    let total = java.java_samples + java.non_java_samples + java.missing_total();
    assert_share(
        java.java_samples,
        total,
        0.97,
        format_args!("of the JVM have Java frames in the first recording, which a second stoke overlapped:\n{report}"),
    );
    assert!(jvm.is_alive(), "the JVM died: {}", jvm.stderr());
}

/// Bytes of memory process `pid`'s agent memfd holds (its allocated blocks).
fn agent_memory_bytes(pid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    agent_memfd(pid).blocks() * 512
}

/// The metadata of the agent's memfd in process `pid`.
fn agent_memfd(pid: u32) -> fs::Metadata {
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).expect("listing the JVM's fds");
    fds.flatten()
        .find(|fd| {
            fs::read_link(fd.path())
                .is_ok_and(|target| target.to_string_lossy() == "/memfd:stoke-agent (deleted)")
        })
        .map(|fd| fs::metadata(fd.path()).expect("stat of the memfd"))
        .expect("the JVM has no agent memfd")
}

/// A field of `/proc/PID/task/TID/status` or `/proc/PID/status`.
fn status_field(path: &str, field: &str) -> String {
    let status = fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .unwrap_or_else(|| panic!("no {field} in {path}"))
        .trim()
        .to_owned()
}

/// Records `jvm` for 2 s and asserts that most of its samples have Java
/// frames, with JavaBusy's methods named.
fn assert_java_recording(jvm: &Running, dir: &TempDir, label: &str) {
    let out = dir.join(format!("{label}.json"));
    let output = record_to(&args!["-p", jvm.pid()], 499, 2.0, &out);
    let profile = read_json(&out);
    let report = profile.describe();
    println!("{label}:\n{}\n{report}", output.stderr);
    let java = JavaReport::of(&profile);
    let total = java.java_samples + java.non_java_samples + java.missing_total();
    assert!(
        java.java_samples > 300,
        "{label}: too few Java samples:\n{report}"
    );
    assert_share(
        java.java_samples,
        total,
        0.95,
        format_args!("of the JVM have Java frames in the {label} recording:\n{report}"),
    );
    assert!(
        profile.names("JavaBusy.crunch"),
        "{label}: JavaBusy unnamed:\n{report}"
    );
}

#[test]
fn an_agent_no_stoke_reads_goes_idle_and_the_next_stoke_wakes_it() {
    let (dir, workload) = prepare_java("java-idle", "JavaBusy", JDK_17);
    let agent = dir.join("libstoke_agent.so");
    Stoke::spawn(&args!["agent", "-o", agent.display()])
        .wait(Duration::from_secs(30))
        .assert_success();
    // Idle after 2 s without a stoke (60 s by default).
    let option = format!("-agentpath:{}=idle=2", agent.display());
    let mut jvm = workload.spawn_with_options(&[option], &["60"]);
    let pid = jvm.pid();
    let handlers_before = status_field(&format!("/proc/{pid}/status"), "SigCgt:");
    let deadline = Instant::now() + Duration::from_secs(10);
    let worker = loop {
        let found = jvm
            .threads()
            .into_iter()
            .find(|(_, name)| name == "stoke-agent");
        if let Some((tid, _)) = found {
            break tid;
        }
        assert!(Instant::now() < deadline, "no agent worker thread");
        thread::sleep(Duration::from_millis(50));
    };
    let switches = || {
        status_field(
            &format!("/proc/{pid}/task/{worker}/status"),
            "voluntary_ctxt_switches:",
        )
        .parse::<u64>()
        .expect("a count")
    };

    // Active, the worker answers stoke's doorbell and otherwise looks
    // around every 0.1 s: about 10 wake-ups a second, not a hundred (each
    // takes a CPU from the JVM's threads).
    let (woken, started) = (switches(), Instant::now());
    assert_java_recording(&jvm, &dir, "first");
    let stopped = Instant::now();
    let wakeups =
        |since: u64, from: Instant| (switches() - since) as f64 / from.elapsed().as_secs_f64();
    let recording_rate = wakeups(woken, started);
    let active_bytes = agent_memory_bytes(pid);
    let (woken, after) = (switches(), Instant::now());
    thread::sleep(Duration::from_secs(1));
    let active_rate = wakeups(woken, after);
    println!(
        "agent worker: {recording_rate:.1} wake-ups/s while recording, {active_rate:.1}/s after"
    );
    assert!(
        recording_rate <= 30.0 && active_rate <= 20.0,
        "the active agent's worker woke {recording_rate:.1} times a second while stoke recorded, {active_rate:.1} after"
    );

    // Idle: the event log's memory goes back, within the idle time and the
    // worker's 0.1 s look, plus slack for a loaded host.
    let idle_bytes = loop {
        let bytes = agent_memory_bytes(pid);
        if bytes < active_bytes {
            break bytes;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(6),
            "the agent still holds {bytes} bytes 6 s after the last stoke (idle after 2 s)"
        );
        thread::sleep(Duration::from_millis(50));
    };
    let went_idle = stopped.elapsed();
    // The hole is punched a page range at a time: the first smaller size
    // may be read halfway; read until it holds still.
    let mut idle_bytes = idle_bytes;
    for _ in 0..20 {
        thread::sleep(Duration::from_millis(50));
        let now = agent_memory_bytes(pid);
        if now == idle_bytes {
            break;
        }
        idle_bytes = now;
    }
    println!(
        "went idle {went_idle:?} after the recording: {active_bytes} -> {idle_bytes} bytes of agent memory"
    );
    assert!(
        went_idle >= Duration::from_millis(1500),
        "idle after {went_idle:?}, before 2 s"
    );
    // Only the header's page stays: the rings (4.3 MB) and the event log
    // are given back.
    assert!(
        idle_bytes <= 4096,
        "the idle agent still holds {idle_bytes} bytes"
    );
    // The worker waits, taking no CPU: no wake-ups while idle.
    let parked = switches();
    thread::sleep(Duration::from_secs(1));
    assert_eq!(switches(), parked, "the idle agent's worker still wakes up");
    // The JVM noticed nothing: its work goes on, its handlers unchanged.
    let beats = jvm.lines_since("beat", stopped);
    assert!(
        beats as f64 >= went_idle.as_secs_f64() * 10.0 * 0.8,
        "{beats} beats in {went_idle:?}"
    );
    assert!(jvm.is_alive(), "the JVM died: {}", jvm.stderr());

    // The next stoke wakes it: Java frames as usual, methods named.
    assert_java_recording(&jvm, &dir, "after idle");
    assert_ne!(switches(), parked, "the worker did not wake");
    assert_eq!(
        status_field(&format!("/proc/{pid}/status"), "SigCgt:"),
        handlers_before,
        "the JVM's signal handlers changed"
    );
}

/// `stoke continuous` runs for days while JVMs come and go: the memory it
/// shares with each JVM's agent is released once the JVM has exited (at
/// the end of the interval that may still name its frames).
#[test]
fn continuous_releases_the_agent_memory_of_jvms_that_exit() {
    let (dir, workload) = prepare_java("java-continuous-release", "JavaBusy", JDK_17);
    let mut stoke = Stoke::spawn(&args![
        "continuous",
        "-a",
        "-F",
        99,
        "--interval",
        1,
        "--output-dir",
        dir.join("profiles").display()
    ]);
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(60));
    for round in 0..2 {
        // Runs until stoke's agent shows up in it, then 1.5 s more.
        let mut running = workload.spawn(&["1.5", "after-attach"]);
        running.wait_for_line("attached", Duration::from_secs(10));
        // This JVM's memory (other JVMs of the host are none of the test's).
        let memory = agent_memfd_inode(running.pid());
        let deadline = Instant::now() + Duration::from_secs(5);
        while mappings_of(stoke.pid(), memory) == 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        let attached = mappings_of(stoke.pid(), memory);
        running.wait_success(Duration::from_secs(10));
        // The interval the JVM ended in, and the next: its memory is gone.
        let deadline = Instant::now() + Duration::from_secs(5);
        while mappings_of(stoke.pid(), memory) > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(100));
        }
        let after = mappings_of(stoke.pid(), memory);
        println!("round {round}: stoke maps JVM's agent memory {attached} times attached, {after} after it exited");
        assert!(attached > 0, "stoke never mapped the JVM's agent memory");
        assert_eq!(
            after, 0,
            "the agent memory of an exited JVM is still mapped"
        );
    }
    stoke.signal(libc::SIGTERM);
    stoke.wait(Duration::from_secs(60)).assert_success();
}

/// The inode of the agent's memfd in JVM `pid`.
fn agent_memfd_inode(pid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    agent_memfd(pid).ino()
}

/// How many mappings of the file with inode `inode` process `pid` has.
fn mappings_of(pid: u32, inode: u64) -> usize {
    fs::read_to_string(format!("/proc/{pid}/maps"))
        .expect("reading stoke's maps")
        .lines()
        .filter(|line| line.split_whitespace().nth(4) == Some(&*inode.to_string()))
        .count()
}
