//! Target `merge`: the pairing of signalled samples with Java stacks, over
//! any order of arrivals, times (the agent's are the JVM's to forge) and
//! settles. Every sample must come out exactly once, paired with a stack
//! of its thread taken no earlier, and nothing may stay behind a flush.

use bolero::TypeGenerator;

use super::harness::{self, Run};
use crate::{
    jvm::{
        agent_memory::JavaSample,
        merge::{Merger, Outcome},
    },
    model::Sample,
};

#[derive(Debug, TypeGenerator)]
enum Op {
    /// A signalled sample `step` ns after the clock (or at a raw time).
    Native {
        tid: u8,
        step: u16,
        raw_time: Option<u64>,
        user: Vec<u8>,
    },
    /// A Java stack of thread `tid`.
    Java {
        tid: u8,
        step: u16,
        raw_time: Option<u64>,
    },
    /// Settle at the clock plus `ahead` ns.
    Settle { ahead: u64, flush: bool },
    /// Move the clock.
    Advance(u32),
}

/// Checks one outcome and returns the sample's number.
pub(super) fn check_outcome(outcome: &Outcome) -> u64 {
    match outcome {
        Outcome::Paired(sample, java) => {
            assert!(
                java.time_ns >= sample.time_ns,
                "paired with an earlier stack"
            );
            sample.cpu.into()
        }
        Outcome::Unpaired(sample, _) => sample.cpu.into(),
    }
}

#[test]
fn merge() {
    let run = Run::start("merge");
    bolero::check!()
        .with_type::<Vec<Op>>()
        .with_test_time(harness::budget())
        .with_shrink_time(harness::SHRINK_TIME)
        .for_each(|ops| {
            run.input(|| {
                let mut merger = Merger::default();
                let mut clock = 0u64;
                // Each sample numbered (in its cpu field) to see it come out once.
                let mut added = 0u32;
                let mut seen = vec![0u8; ops.len()];
                let mut emit = |outcome: Outcome| {
                    let number = check_outcome(&outcome) as usize;
                    seen[number] += 1;
                };
                for op in ops {
                    match op {
                        Op::Native {
                            tid,
                            step,
                            raw_time,
                            user,
                        } => {
                            let time = raw_time.unwrap_or(clock + u64::from(*step));
                            let mut sample =
                                Sample::for_test(1, u32::from(*tid), time, user_stack(user));
                            sample.cpu = added;
                            added += 1;
                            merger.add_native(sample);
                        }
                        Op::Java {
                            tid,
                            step,
                            raw_time,
                        } => {
                            let time = raw_time.unwrap_or(clock + u64::from(*step));
                            // Taken in at the clock: stacks too far from it
                            // are refused, as from an agent.
                            let _ = merger.add_java(
                                1,
                                Some(u32::from(*tid)),
                                JavaSample {
                                    tid: u32::from(*tid),
                                    time_ns: time,
                                    pc: 0,
                                    result: 1,
                                    top_popped: false,
                                    frames: Vec::new(),
                                },
                                clock,
                            );
                        }
                        Op::Settle { ahead, flush } => {
                            merger.settle(clock.saturating_add(*ahead), *flush, &mut emit)
                        }
                        Op::Advance(step) => clock = clock.saturating_add(u64::from(*step)),
                    }
                }
                merger.settle(u64::MAX, true, &mut emit);
                assert!(
                    seen[..added as usize].iter().all(|&count| count == 1),
                    "a sample came out other than once: {seen:?}"
                );
                // Nothing is left: a second flush emits nothing.
                merger.settle(u64::MAX, true, |outcome| panic!("left behind: {outcome:?}"));
            })
        });
}

/// A few distinct user stacks, so that samples of one stay in the kernel
/// (equal stacks) happen.
fn user_stack(bytes: &[u8]) -> Vec<u64> {
    bytes
        .iter()
        .take(4)
        .map(|&byte| u64::from(byte % 3))
        .collect()
}
