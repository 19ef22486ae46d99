//! Virtual threads (JDK 21+, here Temurin 25): four of them spin in
//! `JavaVirtual.virtualWork`, yielding every ~0.2 ms, so that they mount
//! and unmount on the carriers all along. Their CPU time comes out in the
//! carriers' stacks, whole: the carrier's own frames from
//! `ForkJoinWorkerThread.run` down to `Continuation.enterSpecial`, then
//! the virtual thread's from its lambda to `virtualWork`, on every carrier
//! the virtual threads ran on.

use std::collections::HashMap;

use stoke_tests::{
    args, assert_all_of_process, assert_share, describe, parse_thread_frame, prepare_java,
    read_folded, record_to, samples_where, total_samples, Stack, TEMURIN_25,
};

const WORK: &str = "JavaVirtual.virtualWork";
/// The carrier's outermost Java frame, every carrier thread's start.
const CARRIER_ROOT: &str = "java.util.concurrent.ForkJoinWorkerThread.run";
/// Where a carrier enters a virtual thread's frames.
const ENTRY: &str = "jdk.internal.vm.Continuation.enterSpecial";
const BODY: &str = "JavaVirtual.lambda$main$0";

/// A carrier thread's name (the default scheduler's pool's workers), as a
/// thread frame shows it (a comm is cut at 15 bytes).
fn carrier(stack: &Stack) -> Option<u32> {
    let (comm, tid) = parse_thread_frame(stack.frames.get(1)?)?;
    comm.starts_with("ForkJoinPool").then_some(tid)
}

/// Whether `stack` runs from the carrier's start, through the
/// continuation's entry, into the virtual thread's body, in that order.
fn whole(stack: &Stack) -> bool {
    let at = |method| stack.java_position(method);
    stack.java_at(2) == Some(CARRIER_ROOT)
        && matches!((at(ENTRY), at(BODY), at(WORK)),
            (Some(entry), Some(body), Some(work)) if entry < body && body < work)
}

#[test]
fn virtual_threads_get_whole_stacks_through_their_carriers() {
    let (dir, workload) = prepare_java("java-virtual", "jdk21/JavaVirtual", TEMURIN_25);
    let running = workload.spawn(&["9"]);
    let root = running.root_frame();
    let out = dir.join("virtual.folded");
    record_to(&args!["-p", running.pid(), "-t"], 499, 4.0, &out);
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 12));
    assert_all_of_process(&stacks, &root);

    let carriers: Vec<&Stack> = stacks.iter().filter(|s| carrier(s).is_some()).collect();
    let total = total_samples(carriers.iter().copied());
    let working = samples_where(carriers.iter().copied(), |s| s.has_java(WORK));
    let whole_stacks = samples_where(carriers.iter().copied(), whole);
    println!("carriers: {total} samples, {working} in {WORK}, {whole_stacks} whole");
    // Two CPUs busy for 4 s at 499 Hz: about 4,000 samples.
    assert!(total >= 2000, "only {total} samples of the carrier threads");
    // Measured 93.5% and 95.1%: the rest is the yields, and the freezing
    // and thawing of the virtual threads' stacks.
    assert_share(working, total, 0.85, format!("carrier samples in {WORK}"));
    // Measured 99.3% and 100%.
    assert_share(
        whole_stacks,
        working,
        0.97,
        "work samples with whole stacks",
    );

    // Four virtual threads on two carriers: both carry the work.
    let mut by_carrier: HashMap<u32, u64> = HashMap::new();
    for stack in carriers.iter().filter(|s| s.has_java(WORK)) {
        *by_carrier.entry(carrier(stack).unwrap()).or_default() += stack.count;
    }
    let busy = by_carrier
        .values()
        .filter(|&&samples| samples * 5 >= working)
        .count();
    assert!(
        busy >= 2,
        "the work ran on fewer than two carriers (each at least a fifth): {by_carrier:?}"
    );
}
