//! Inlined Java frames are marked `_[i]`: JavaSplit's spin() is small
//! enough that HotSpot's C2 inlines it into seventy() and thirty(), so once
//! they run C2 code, spin() shows as `JavaSplit.spin_[i]` under
//! `JavaSplit.seventy_[j]`; in a control JVM told never to inline spin(),
//! spin() stays a frame of its own, `_[j]`. On both JDKs, attached while
//! running.

use std::time::{Duration, Instant};

use stoke_tests::{
    args, describe, is_java_frame, prepare_java, read_folded, record_to, Jdk, Stack, JDK_17,
    TEMURIN_25,
};

const SPIN: &str = "JavaSplit.spin";
const CALLERS: [&str; 2] = ["JavaSplit.seventy", "JavaSplit.thirty"];

/// How the samples under spin() showed it.
#[derive(Debug, Default)]
struct SpinKinds {
    /// `spin_[i]` right under a caller `_[j]`.
    inlined: u64,
    /// `spin_[j]` right under a caller.
    compiled: u64,
    /// Any other spin() frame under a caller (interpreted, or the caller
    /// itself inlined).
    other: u64,
}

impl SpinKinds {
    fn of(stacks: &[Stack]) -> Self {
        let mut kinds = Self::default();
        for stack in stacks {
            let frames = &stack.frames;
            for (caller, spin) in frames.iter().zip(frames.iter().skip(1)) {
                let called_by_hot = CALLERS
                    .iter()
                    .any(|method| caller.starts_with(method) && is_java_frame(caller));
                if !called_by_hot || !spin.starts_with(SPIN) {
                    continue;
                }
                if *spin == format!("{SPIN}_[i]") && caller.ends_with("_[j]") {
                    kinds.inlined += stack.count;
                } else if *spin == format!("{SPIN}_[j]") {
                    kinds.compiled += stack.count;
                } else {
                    kinds.other += stack.count;
                }
            }
        }
        kinds
    }

    fn total(&self) -> u64 {
        self.inlined + self.compiled + self.other
    }
}

/// An inlined frame runs inside its caller's compiled code: the frame
/// rootward of every `_[i]` frame is a JIT-compiled or inlined Java frame.
fn assert_inlined_frames_have_compiled_callers(stacks: &[Stack], label: &str) {
    for stack in stacks {
        for (caller, frame) in stack.frames.iter().zip(stack.frames.iter().skip(1)) {
            assert!(
                !frame.ends_with("_[i]") || caller.ends_with("_[j]") || caller.ends_with("_[i]"),
                "{label}: inlined frame `{frame}` under `{caller}`, which is no compiled code:\n{}",
                stack.frames.join(";")
            );
        }
    }
}

/// Records `jvm_options`' JVM every 2 s until `settled` accepts spin()'s
/// kinds or 20 s have passed (the first recording attaches; the inlining
/// shows once C2 compiles spin()'s callers, a few seconds into the JVM's
/// life); returns the last kinds.
fn record_until(
    jdk: Jdk,
    jvm_options: &[&str],
    label: &str,
    settled: impl Fn(&SpinKinds) -> bool,
) -> SpinKinds {
    let (dir, workload) = prepare_java(label, "JavaSplit", jdk);
    let running = workload.spawn_with_options(jvm_options, &["30"]);
    let out = dir.join("inlining.folded");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        record_to(&args!["-p", running.pid()], 499, 2.0, &out);
        let stacks = read_folded(&out);
        assert_inlined_frames_have_compiled_callers(&stacks, label);
        let kinds = SpinKinds::of(&stacks);
        println!("{label} {jvm_options:?}: {kinds:?}");
        if settled(&kinds) || Instant::now() > deadline {
            println!("{}", describe(&stacks, 10));
            return kinds;
        }
    }
}

fn inlined_frames_on(jdk: Jdk) {
    let label = jdk.label;
    let enough = |kinds: &SpinKinds| kinds.total() > 500;
    let kinds = record_until(jdk, &[], label, |kinds| {
        enough(kinds) && kinds.inlined as f64 >= 0.9 * kinds.total() as f64
    });
    assert!(
        enough(&kinds) && kinds.inlined as f64 >= 0.9 * kinds.total() as f64,
        "{label}: {SPIN} should show as `_[i]` under its callers' compiled code in 90% of \
         its samples once C2 compiled them (HotSpot inlines methods under 35 bytecodes); \
         20 s after attach: {kinds:?}"
    );

    // The control: the same workload, spin() never inlined.
    let control = record_until(
        jdk,
        &[
            "-XX:CompileCommand=quiet",
            "-XX:CompileCommand=dontinline,JavaSplit::spin",
        ],
        label,
        |kinds| enough(kinds) && kinds.compiled as f64 >= 0.9 * kinds.total() as f64,
    );
    assert!(
        enough(&control) && control.inlined == 0,
        "{label}: with spin() never inlined, stoke still marked it `_[i]`: {control:?}"
    );
    assert!(
        control.compiled as f64 >= 0.9 * control.total() as f64,
        "{label}: with spin() never inlined, it should be compiled on its own (`_[j]`): {control:?}"
    );
}

#[test]
fn java_inlined_frames_on_jdk_17() {
    inlined_frames_on(JDK_17);
}

#[test]
fn java_inlined_frames_on_temurin_25() {
    inlined_frames_on(TEMURIN_25);
}
