//! `stoke continuous` end to end: a real recording of a busy workload,
//! pushed every interval to a local HTTP receiver standing in for
//! Pyroscope's `/ingest` (the server itself cannot be installed here); each
//! body is read back with Debian's `go tool pprof`.

use std::{
    collections::HashMap,
    fs,
    path::Path,
    sync::atomic::Ordering,
    thread,
    time::{Duration, Instant},
};

use stoke_tests::{
    args, cpu_time, free_port, pprof_tags, prepare, run_tool, Receiver, Running, Stoke,
    StokeOutput, TempDir,
};

/// Samples per second.
const HZ: u32 = 99;

/// The samples of a gzipped pprof body and of the functions in it, by
/// `go tool pprof -raw` (Debian's golang-go).
fn pprof_samples(dir: &Path, name: &str, body: &[u8]) -> (u64, HashMap<String, u64>) {
    let path = dir.join(name);
    fs::write(&path, body).unwrap();
    let raw = run_tool(
        "go",
        &[
            "tool".as_ref(),
            "pprof".as_ref(),
            "-raw".as_ref(),
            path.as_os_str(),
        ],
    );
    let mut locations: HashMap<String, String> = HashMap::new();
    let mut samples: Vec<(u64, Vec<String>)> = Vec::new();
    let mut section = "";
    for line in raw.lines() {
        match line.trim_end() {
            "Samples:" | "Locations" | "Mappings" => {
                section = line.trim_end();
                continue;
            }
            _ => {}
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match section {
            "Samples:" => {
                if let Some((count, rest)) = line.split_once(':') {
                    if let Ok(count) = count.split_whitespace().next().unwrap_or("").parse() {
                        let ids = rest.split_whitespace().map(str::to_owned).collect();
                        samples.push((count, ids));
                    }
                }
            }
            "Locations" if fields.len() >= 3 && fields[0].ends_with(':') => {
                // `ID: 0xADDR M=N FUNCTION FILE:LINE s=0`
                let id = fields[0].trim_end_matches(':').to_owned();
                let function = fields
                    .iter()
                    .skip(1)
                    .find(|f| !f.starts_with("0x") && !f.starts_with("M="))
                    .unwrap_or(&"?");
                locations.insert(id, (*function).to_owned());
            }
            _ => {}
        }
    }
    let total = samples.iter().map(|(count, _)| count).sum();
    let mut functions: HashMap<String, u64> = HashMap::new();
    for (count, ids) in &samples {
        let mut seen = std::collections::HashSet::new();
        for id in ids {
            if let Some(function) = locations.get(id) {
                if seen.insert(function) {
                    *functions.entry(function.clone()).or_default() += count;
                }
            }
        }
    }
    (total, functions)
}

/// A busy workload, and stoke continuous on it with `extra` arguments.
fn start(label: &str, extra: &[String]) -> (TempDir, Running, Stoke) {
    let (dir, workload) = prepare(label, "busy_other");
    let running = workload.spawn(&["60"]);
    let mut command = args!["continuous", "-p", running.pid(), "-F", HZ].to_vec();
    command.extend_from_slice(extra);
    let mut stoke = Stoke::spawn(&command);
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(60));
    (dir, running, stoke)
}

/// SIGTERM, then stoke must flush and exit 0 within the exporter's
/// deadline and some.
fn stop(stoke: Stoke) -> StokeOutput {
    stoke.signal(libc::SIGTERM);
    let output = stoke.wait(Duration::from_secs(120));
    output.assert_success();
    output
}

#[test]
fn every_interval_is_pushed_with_its_labels_and_samples() {
    let receiver = Receiver::start(0, 200);
    let (dir, running, stoke) = start(
        "continuous-push",
        &args![
            "--interval",
            5,
            "--pyroscope",
            receiver.url(),
            "--label",
            "cluster=test",
            "--tenant",
            "team-a"
        ],
    );
    let cpu_before = cpu_time(running.pid());
    let started = Instant::now();
    thread::sleep(Duration::from_secs(27));
    let cpu = cpu_time(running.pid()) - cpu_before;
    let sampled = started.elapsed();
    let output = stop(stoke);
    let requests = receiver.accepted();
    println!("{} requests; stderr:\n{}", requests.len(), output.stderr);
    // 27 s at 5 s per interval: 5 whole intervals, then the flushed rest.
    assert!(
        (6..=7).contains(&requests.len()),
        "{} pushes for 27 s at a 5 s interval",
        requests.len()
    );
    let mut total = 0;
    let mut previous_until = 0;
    for (index, request) in requests.iter().enumerate() {
        assert_eq!(request.path, "/ingest");
        let name = &request.query["name"];
        assert!(
            name.starts_with("busy_other{") && name.contains("cluster=test"),
            "{name}"
        );
        assert_eq!(request.query["format"], "pprof");
        assert_eq!(request.query["sampleRate"], HZ.to_string());
        assert_eq!(request.query["spyName"], "stoke");
        assert_eq!(request.headers["x-scope-orgid"], "team-a");
        let (from, until) = (request.seconds("from"), request.seconds("until"));
        assert!(
            from <= until && from + 1 >= previous_until,
            "{from}..{until} after {previous_until}"
        );
        if index + 1 < requests.len() {
            assert!(
                (4..=6).contains(&(until - from)),
                "a 5 s interval took {from}..{until}"
            );
        }
        previous_until = until;
        let (samples, functions) =
            pprof_samples(dir.path(), &format!("{index}.pb.gz"), &request.body);
        assert!(
            functions.get("other_spin").copied().unwrap_or(0) * 10 >= samples * 8,
            "interval {index}: other_spin in {functions:?} of {samples}"
        );
        // Each sample says whose it is.
        let tags = pprof_tags(&dir.path().join(format!("{index}.pb.gz")));
        for (key, value) in [
            ("pid", running.pid().to_string()),
            ("comm", "busy_other".to_owned()),
        ] {
            assert_eq!(
                tags.get(key).and_then(|values| values.get(&value)),
                Some(&samples),
                "interval {index}: {key} tags {:?}",
                tags.get(key)
            );
        }
        total += samples;
    }
    // Every sample of the recording is in one interval or another: the
    // workload's CPU time at HZ, from stoke's start to SIGTERM (the
    // intervals reach a little past the measured span on both ends).
    let expected = cpu.as_secs_f64() * f64::from(HZ);
    println!("{total} samples pushed; {expected:.0} expected from {cpu:?} of CPU in {sampled:?}");
    assert!(
        (expected * 0.8..=expected * 1.25 + 20.0).contains(&(total as f64)),
        "{total} samples pushed, {expected:.0} expected"
    );
}

#[test]
fn a_failing_then_recovering_backend_loses_nothing_within_the_queue() {
    let receiver = Receiver::start(0, 500);
    let (_dir, _running, stoke) = start(
        "continuous-retry",
        &args!["--interval", 1, "--pyroscope", receiver.url()],
    );
    thread::sleep(Duration::from_secs(4));
    receiver.status.store(200, Ordering::SeqCst);
    thread::sleep(Duration::from_secs(3));
    let output = stop(stoke);
    let requests = receiver.requests();
    let refused = requests.iter().filter(|r| r.status == 500).count();
    let accepted = receiver.accepted();
    let froms: Vec<u64> = accepted.iter().map(|r| r.seconds("from")).collect();
    println!(
        "{refused} refused, {} accepted: {froms:?}\n{}",
        accepted.len(),
        output.stderr
    );
    assert!(refused >= 2, "the backend refused only {refused} pushes");
    // 7 s at 1 s per interval, the default queue (10) holds the 4 s outage:
    // every interval delivered, each once.
    assert!(
        accepted.len() >= 6,
        "only {} intervals delivered",
        accepted.len()
    );
    let mut distinct = froms.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), froms.len(), "an interval delivered twice");
    assert!(
        froms.windows(2).all(|pair| pair[0] <= pair[1]),
        "out of order: {froms:?}"
    );
}

/// An outage longer than the queue holds: the oldest intervals are
/// dropped (the one being retried too) and counted, the newest delivered.
#[test]
fn an_outage_longer_than_the_queue_drops_the_oldest_and_counts_them() {
    let receiver = Receiver::start(0, 500);
    let (_dir, _running, stoke) = start(
        "continuous-drops",
        &args!["--interval", 1, "--queue", 2, "--pyroscope", receiver.url()],
    );
    thread::sleep(Duration::from_secs(6));
    receiver.status.store(200, Ordering::SeqCst);
    thread::sleep(Duration::from_secs(3));
    let output = stop(stoke);
    let requests = receiver.requests();
    let refused: Vec<u64> = requests
        .iter()
        .filter(|r| r.status == 500)
        .map(|r| r.seconds("from"))
        .collect();
    let accepted: Vec<u64> = receiver
        .accepted()
        .iter()
        .map(|r| r.seconds("from"))
        .collect();
    println!(
        "refused {refused:?}, accepted {accepted:?}\n{}",
        output.stderr
    );
    let dropped = output
        .stderr
        .lines()
        .find_map(|line| {
            let (_, counts) = line.split_once("stopped: pyroscope: ")?;
            let (before, _) = counts.split_once(" batches dropped")?;
            before.rsplit(' ').next()?.parse::<u64>().ok()
        })
        .expect("a stopped line with the batches dropped");
    // Six intervals during the outage, room for two: at least three gone.
    assert!(dropped >= 3, "{dropped} batches dropped");
    let first_refused = *refused.first().expect("a refused push");
    assert!(
        !accepted.contains(&first_refused),
        "the oldest interval of the outage was delivered, not dropped: {accepted:?}"
    );
    assert!(
        accepted.len() >= 4,
        "the newest intervals were not delivered: {accepted:?}"
    );
    let mut distinct = accepted.clone();
    distinct.dedup();
    assert_eq!(distinct, accepted, "an interval delivered twice");
}

#[test]
fn a_backend_down_at_start_gets_the_profiles_when_it_comes_up() {
    let port = free_port();
    let (_dir, _running, stoke) = start(
        "continuous-late",
        &args![
            "--interval",
            1,
            "--pyroscope",
            format!("http://127.0.0.1:{port}")
        ],
    );
    thread::sleep(Duration::from_secs(3));
    let receiver = Receiver::start(port, 200);
    thread::sleep(Duration::from_secs(3));
    let output = stop(stoke);
    let accepted = receiver.accepted();
    println!("{} accepted\n{}", accepted.len(), output.stderr);
    assert!(
        accepted.len() >= 5,
        "only {} of about 6 intervals delivered once the backend came up",
        accepted.len()
    );
}

/// Writes a profile named as stoke names them in `dir`, last written two
/// days ago.
fn two_days_old(dir: &Path, names: &[&str]) {
    fs::create_dir_all(dir).unwrap();
    for name in names {
        let path = dir.join(name);
        fs::write(&path, "old").unwrap();
        let file = fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(std::time::SystemTime::now() - Duration::from_secs(2 * 86400))
            .unwrap();
    }
}

/// Each service keeps its newest `--keep` files; a service whose newest is
/// older than the retention (a day by default) has its directory removed,
/// unless something other than stoke's profiles is in it.
#[test]
fn an_output_directory_keeps_the_last_files_of_each_service() {
    let out = TempDir::new("continuous-dir");
    two_days_old(
        &out.path().join("stopped"),
        &["1700000000.pb.gz", "1700000010.pb.gz"],
    );
    two_days_old(
        &out.path().join("not-stokes"),
        &["1700000000.pb.gz", "notes.txt"],
    );
    let (dir, _running, stoke) = start(
        "continuous-files",
        &args![
            "--interval",
            1,
            "--output-dir",
            out.path().display(),
            "--keep",
            2
        ],
    );
    thread::sleep(Duration::from_secs(5));
    stop(stoke);
    let mut services: Vec<_> = fs::read_dir(out.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    services.sort();
    assert_eq!(services, ["busy_other", "not-stokes"]);
    assert_eq!(
        fs::read_dir(out.path().join("not-stokes")).unwrap().count(),
        2
    );
    let service = out.path().join("busy_other");
    let files: Vec<_> = fs::read_dir(&service)
        .unwrap_or_else(|e| panic!("{}: {e}", service.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for file in files {
        let (samples, _) = pprof_samples(dir.path(), "read.pb.gz", &fs::read(&file).unwrap());
        assert!(samples > 0, "{} has no samples", file.display());
    }
}

/// Off-CPU time in `stoke continuous`: a thread blocked for the whole run
/// counts in every interval, up to each cut, and once only: its time over
/// all the files is the run's.
#[test]
fn a_thread_blocked_all_along_counts_in_every_interval_once() {
    let (dir, workload) = prepare("continuous-offcpu", "blocked_threads");
    let running = workload.spawn(&args![60, 0.5]);
    let out = TempDir::new("continuous-offcpu-files");
    let mut stoke = Stoke::spawn(&args![
        "continuous",
        "-p",
        running.pid(),
        "-e",
        "offcpu",
        "--interval",
        2,
        "--output-dir",
        out.path().display(),
        "--keep",
        100
    ]);
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(60));
    let started = Instant::now();
    thread::sleep(Duration::from_secs_f64(7.5));
    let ran = started.elapsed().as_secs_f64();
    stop(stoke);
    let service = out.path().join("blocked_threads");
    let mut files: Vec<_> = fs::read_dir(&service)
        .unwrap_or_else(|e| panic!("{}: {e}", service.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let stuck: Vec<f64> = files
        .iter()
        .map(|file| {
            let (_, functions) =
                pprof_samples(dir.path(), "offcpu.pb.gz", &fs::read(file).unwrap());
            functions.get("stuck_from_start").copied().unwrap_or(0) as f64 / 1e9
        })
        .collect();
    let total: f64 = stuck.iter().sum();
    println!("stuck_from_start per interval: {stuck:?} s; {total:.3} s in all of a {ran:.3} s run");
    assert!(stuck.len() >= 4, "{} files: {files:?}", stuck.len());
    // Every interval but the last (cut short by SIGTERM) is 2 s long.
    for (index, seconds) in stuck[..stuck.len() - 1].iter().enumerate() {
        assert!(
            (1.8..=2.3).contains(seconds),
            "interval {index}: the blocked thread has {seconds:.3} s, not ~2 s"
        );
    }
    assert!(
        (0.97 * ran..=ran + 0.3).contains(&total),
        "the blocked thread has {total:.3} s over all intervals of a {ran:.3} s run"
    );
}

/// The keys of the `unwind_processes` map of the stoke with pid `stoke`:
/// the processes whose unwind tables its BPF unwinder holds.
fn unwind_processes(stoke: u32) -> Vec<u32> {
    let ids: Vec<String> = fs::read_dir(format!("/proc/{stoke}/fdinfo"))
        .unwrap()
        .filter_map(|entry| fs::read_to_string(entry.unwrap().path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("map_id:"))
                .map(|id| id.trim().to_owned())
        })
        .collect();
    let bpftool = |args: &[&str]| -> serde_json::Value {
        let output = std::process::Command::new("bpftool")
            .args(args)
            .output()
            .expect("bpftool (cargo xtask setup installs it)");
        assert!(output.status.success(), "bpftool {args:?}: {output:?}");
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let id = ids
        .iter()
        .find(|id| bpftool(&["map", "show", "id", id, "-j"])["name"] == "unwind_processe")
        .expect("stoke holds an unwind_processes map");
    bpftool(&["map", "dump", "id", id, "-j"])
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let bytes: Vec<u8> = entry["key"]
                .as_array()
                .unwrap()
                .iter()
                .map(|byte| {
                    u8::from_str_radix(byte.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
                })
                .collect();
            u32::from_le_bytes(bytes.try_into().unwrap())
        })
        .collect()
}

#[test]
fn processes_that_come_and_go_leave_no_unwind_tables_behind() {
    let (_dir, workload) = prepare("continuous-churn", "short_burn");
    let out = TempDir::new("continuous-churn-files");
    let mut stoke = Stoke::spawn(&args![
        "continuous",
        "-F",
        999,
        "--interval",
        5,
        "--output-dir",
        out.path().display()
    ]);
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(60));
    // Processes that burn 3 ms and end, one after another, for 8 s: most
    // are sampled, and many end within the moment stoke takes to load
    // their tables.
    let started = Instant::now();
    let mut spawned = 0;
    while started.elapsed() < Duration::from_secs(8) {
        let status = std::process::Command::new(workload.exe())
            .arg("0.003")
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        spawned += 1;
    }
    // Time for the last ends to reach stoke.
    thread::sleep(Duration::from_secs(1));
    let held = unwind_processes(stoke.pid());
    let dead: Vec<u32> = held
        .iter()
        .copied()
        .filter(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        .collect();
    stop(stoke);
    println!(
        "{spawned} processes spawned; the unwinder holds {} processes, {} of them ended: {dead:?}",
        held.len(),
        dead.len()
    );
    assert!(
        out.path().join("short_burn").is_dir(),
        "no profile of short_burn: the churn was not sampled"
    );
    assert!(spawned >= 500, "only {spawned} processes in 8 s");
    assert!(
        dead.len() <= 2,
        "ended processes keep their tables: {dead:?}"
    );
}
