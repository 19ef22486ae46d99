//! `-e offcpu` on a JVM: its threads' waits come with their Java frames.
//! A Java thread that sleeps 7 ms (Thread.sleep) then parks 3 ms
//! (LockSupport.parkNanos) per round comes out 70:30 between its two Java
//! methods, the scheduler's frame on top, on JDK 17 and Temurin 25, about
//! as the thread measured its waits itself; the JVM runs on and exits 0.
//! `-e wall` gives the same split and frames, at 199 Hz (the 3 ms parks
//! shorter than its period, so recorded by chance).

use std::time::Duration;

use stoke_tests::{
    args, describe, prepare_java, read_folded, record_to, samples_where, Jdk, JDK_17, TEMURIN_25,
};

const SEVENTY: &str = "JavaWaits.sleepSeventy";
const THIRTY: &str = "JavaWaits.parkThirty";
const SECONDS: f64 = 5.0;

/// The last `seventy_share=` the workload printed.
fn measured_share(lines: &[stoke_tests::Line]) -> f64 {
    lines
        .iter()
        .rev()
        .find_map(|line| line.text.strip_prefix("round seventy_share="))
        .and_then(|share| share.parse().ok())
        .expect("the workload printed its share")
}

/// How close to 70% the split must be, and to what the thread measured:
/// wall-clock time samples the parks by chance.
const fn tolerances(event: &str) -> (f64, f64) {
    match event.as_bytes() {
        b"wall" => (4.0, 3.0),
        _ => (3.0, 2.0),
    }
}

fn waits_on(jdk: Jdk, event: &str) {
    let label = jdk.label;
    let (dir, workload) = prepare_java("java-offcpu", "JavaWaits", jdk);
    let mut running = workload.spawn(&["12"]);
    let out = dir.join("offcpu.folded");
    record_to(&args!["-p", running.pid(), "-e", event], 199, SECONDS, &out);
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 12));
    let seventy = samples_where(&stacks, |stack| stack.has_java(SEVENTY));
    let thirty = samples_where(&stacks, |stack| stack.has_java(THIRTY));
    let share = 100.0 * seventy as f64 / (seventy + thirty).max(1) as f64;
    let measured = measured_share(&running.stdout_lines());
    println!(
        "{label}: {seventy} ns in {SEVENTY}, {thirty} ns in {THIRTY}: {share:.1}% \
         ({measured:.1}% as the thread measured)"
    );
    // The thread waits all the time but for microseconds: most of the
    // recording, less the agent's attach.
    let with_java = seventy + thirty;
    assert!(
        with_java as f64 >= 0.75e9 * SECONDS,
        "{label}: only {with_java} ns of waits with the workload's Java frames in {SECONDS} s"
    );
    let (to_seventy, to_measured) = tolerances(event);
    assert!(
        (share - 70.0).abs() <= to_seventy && (share - measured).abs() <= to_measured,
        "{label}: {share:.1}% of the thread's waits in {SEVENTY} \
         (70 ± {to_seventy} wanted, within {to_measured} of the {measured:.1}% \
         the thread measured)"
    );
    let on_top: u64 = stacks
        .iter()
        .filter(|stack| stack.leaf() == "__schedule_[k]")
        .filter(|stack| stack.has_java(SEVENTY) || stack.has_java(THIRTY))
        .map(|stack| stack.count)
        .sum();
    assert!(
        on_top as f64 >= 0.95 * with_java as f64,
        "{label}: only {on_top} of {with_java} ns have __schedule_[k] on top"
    );
    running.wait_success(Duration::from_secs(30));
}

#[test]
fn java_waits_split_70_30_with_their_java_frames_on_jdk_17() {
    waits_on(JDK_17, "offcpu");
}

#[test]
fn java_wall_time_splits_70_30_with_its_java_frames_on_jdk_17() {
    waits_on(JDK_17, "wall");
}

#[test]
fn java_waits_split_70_30_with_their_java_frames_on_temurin_25() {
    waits_on(TEMURIN_25, "offcpu");
}
