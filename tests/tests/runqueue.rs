//! `-e runqueue`: the time threads were runnable but not running, by the
//! stack they were in, against the scheduler's own account of it (each
//! thread's `schedstat` run delay, over the same seconds): two threads
//! pinned to one CPU queue half the time each; a burner in a container
//! limited to half a CPU (`--cpus 0.5`) is throttled half the time, under
//! its container's frame.

use std::{
    path::Path,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use stoke_tests::docker::{Container, Engine, Image, Rootfs};
use stoke_tests::{
    args, describe, parse_thread_frame, prepare, read_folded, record_args, run_delay,
    samples_where, stacks_of, total_samples, Stack, Stoke,
};

const SECONDS: f64 = 4.0;

/// 999 Hz: a 1 ms period, below which run-queue times are sampled; most
/// are longer, so counted exactly.
const HZ: u32 = 999;

/// Records `select` with `-e runqueue` into `out`, checks that the run
/// delay per second stoke found in the stacks `mine` picks is within 10%
/// of the kernel's for process `pid` over the same seconds, and returns
/// the stacks and the kernel's.
fn queued_per_second(
    pid: u32,
    select: &[String],
    out: &Path,
    mine: impl Fn(&[Stack]) -> Vec<&Stack>,
) -> (Vec<Stack>, f64) {
    let mut args = record_args(select, HZ, SECONDS, out);
    args.extend(args!["-e", "runqueue"]);
    let mut stoke = Stoke::spawn(&args);
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(60));
    let (since, before) = (Instant::now(), run_delay(pid));
    thread::sleep(Duration::from_secs_f64(SECONDS - 0.5));
    let kernel = (run_delay(pid) - before).as_secs_f64() / since.elapsed().as_secs_f64();
    stoke.wait_recording(SECONDS);
    let stacks = read_folded(out);
    let found = total_samples(mine(&stacks)) as f64 / 1e9 / SECONDS;
    println!("{}", describe(mine(&stacks), 10));
    println!("run delay per second: {found:.3} s by stoke, {kernel:.3} s by the kernel");
    assert!(
        (found / kernel - 1.0).abs() <= 0.1,
        "stoke found {found:.3} s of run-queue time per second, the kernel {kernel:.3} s \
         (within 10% wanted)"
    );
    (stacks, kernel)
}

#[test]
fn two_threads_pinned_to_one_cpu_queue_half_the_time_each() {
    let (dir, workload) = prepare("runqueue-pinned", "two_threads");
    let running = workload.spawn(&args![60]);
    let pinned = Command::new("taskset")
        .args(args!["-a", "-p", "-c", 0, running.pid()])
        .output()
        .expect("taskset runs");
    assert!(pinned.status.success(), "taskset failed: {pinned:?}");
    let (stacks, kernel) = queued_per_second(
        running.pid(),
        &args!["-p", running.pid(), "-t"],
        &dir.join("pinned.folded"),
        |stacks| stacks.iter().collect(),
    );
    assert!(
        (0.8..=1.2).contains(&kernel),
        "two threads on one CPU should wait about a second each second, the kernel says {kernel:.3}"
    );
    for (thread, work) in [("worker_a", "thread_a_work"), ("worker_b", "thread_b_work")] {
        let of_thread: Vec<&Stack> = stacks
            .iter()
            .filter(|stack| {
                stack
                    .frames
                    .get(1)
                    .and_then(|frame| parse_thread_frame(frame))
                    .is_some_and(|(name, _)| name == thread)
            })
            .collect();
        let total = total_samples(of_thread.iter().copied());
        let share = total as f64 / 1e9 / SECONDS;
        assert!(
            (0.35..=0.65).contains(&share),
            "{thread} was queued {share:.2} of the time (half wanted)"
        );
        let in_work = samples_where(of_thread.iter().copied(), |stack| {
            stack.contains_run(&[work, "worker_spin"])
        });
        assert!(
            in_work as f64 >= 0.9 * total as f64,
            "only {in_work} of {thread}'s {total} ns in {work};worker_spin"
        );
    }
}

#[test]
fn a_container_limited_to_half_a_cpu_is_throttled_half_the_time_under_its_frame() {
    let (dir, workload) = prepare("runqueue-throttled", "busy_other");
    let mut rootfs = Rootfs::new(&dir.join("rootfs"));
    rootfs.add_program(workload.exe(), "/app/busy_other");
    let image = Image::import(Engine::Docker, workload.name(), &rootfs);
    let container = Container::run_with(
        workload.name(),
        &image,
        &["--cpus", "0.5"],
        &["/app/busy_other", "60"],
    );
    let frame = container.container_frame();
    let (stacks, kernel) = queued_per_second(
        container.pid(),
        &args!["-a"],
        &dir.join("throttled.folded"),
        |stacks| stacks_of(stacks, &frame),
    );
    assert!(
        (0.35..=0.65).contains(&kernel),
        "a burner limited to half a CPU should wait about half the time, the kernel says {kernel:.3}"
    );
    let mine = stacks_of(&stacks, &frame);
    let total = total_samples(mine.iter().copied());
    let burning = samples_where(mine.iter().copied(), |stack| {
        stack.contains_run(&["main", "other_work", "other_spin"])
    });
    assert!(
        burning as f64 >= 0.9 * total as f64,
        "only {burning} of {total} ns under `{frame}` in main;other_work;other_spin"
    );
}
