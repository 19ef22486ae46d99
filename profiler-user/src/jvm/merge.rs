//! Pairs each BPF sample that signalled a JVM thread with the Java stack
//! the agent's handler took in answer.
//!
//! The BPF record is committed before the signal is even delivered, and the
//! handler runs when the thread next returns to user mode: the answer to a
//! sample is the first Java stack of the same thread at or after it. Two
//! samples taken before the thread returns share one pending signal, so the
//! earlier keeps its native stack only.

use std::collections::VecDeque;

use super::agent_memory::JavaSample;
use crate::model::Sample;
use foldhash::HashMap;

/// How long a signalled sample waits for its Java stack.
const PAIRING_WINDOW_NS: u64 = 1_000_000_000;

/// How far past stoke's clock a Java stack's time may lie: the agent reads
/// the same clock before stoke takes the stack, so only a slack for the
/// reads themselves.
const FUTURE_SLACK_NS: u64 = 10_000_000;

/// Most Java stacks held for one thread: a thread's answers wait for
/// samples of the BPF ring read at the latest a poll later, so a few
/// hundred at most at the highest rates.
const MAX_JAVA_PER_THREAD: usize = 1024;

/// Most Java stacks held per JVM, counted in frames (16 bytes each) plus
/// [`SAMPLE_COST`] per stack (about 8 MB): one JVM, or a process posing as
/// one, cannot crowd out the others' answers.
const MAX_HELD_COST_PER_JVM: usize = 1 << 19;

/// Most Java stacks held, all JVMs together (about 32 MB): the bound of
/// what agents, or processes posing as one, can make stoke hold.
const MAX_HELD_COST: usize = 1 << 21;

/// What one held Java stack costs besides its frames, in frames.
const SAMPLE_COST: usize = 6;

/// Emptied queues kept for reuse, and the largest capacity kept: a busy
/// thread's queue fills again by the next drain (hundreds of samples at
/// 999 Hz), and growing it anew every time took a tenth of stoke's CPU.
const SPARE_QUEUES: usize = 64;
const SPARE_CAPACITY: usize = 4096;

/// What became of a signalled sample.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Paired with the Java stack taken for it.
    Paired(Sample, JavaSample),
    /// No Java stack answered it.
    Unpaired(Sample, Unpaired),
}

/// Why a signalled sample has no Java stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unpaired {
    /// A later sample of the thread took the one pending signal.
    Coalesced,
    /// The agent sent nothing in time (its ring was full, or the JVM ended).
    NoAnswer,
}

impl Unpaired {
    /// A few words for the summary.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Coalesced => "signal coalesced with a later sample",
            Self::NoAnswer => "no answer from the agent",
        }
    }
}

/// Why a Java stack was dropped on arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Its time lies in the future: no agent sends that.
    Future,
    /// Its time lies before the pairing window: no sample waits for it
    /// (left in the ring by an earlier stoke, or answered too late).
    Stale,
    /// Its thread is none of the JVM's.
    UnknownThread,
    /// Its thread, or all threads together, already hold as many as
    /// allowed.
    Full,
}

/// Signalled samples and Java stacks waiting for each other, by process
/// and thread: a Java stack answers only a sample of the JVM whose agent
/// sent it, whatever thread id it names.
#[derive(Debug, Default)]
pub struct Merger {
    native: HashMap<(u32, u32), VecDeque<Sample>>,
    java: HashMap<(u32, u32), VecDeque<JavaSample>>,
    /// What the Java stacks in `java` cost, by JVM ([`MAX_HELD_COST_PER_JVM`]).
    held_cost: HashMap<u32, usize>,
    /// The same, all JVMs together ([`MAX_HELD_COST`]).
    held_total: usize,
    spare_native: Vec<VecDeque<Sample>>,
    spare_java: Vec<VecDeque<JavaSample>>,
}

impl Merger {
    /// A signalled sample from the BPF ring.
    pub fn add_native(&mut self, sample: Sample) {
        let spare = &mut self.spare_native;
        self.native
            .entry((sample.tgid, sample.tid))
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push_back(sample);
    }

    /// A Java stack the agent of JVM `pid` sent for thread `tid` (the
    /// host's id of the thread, `None` if it is no thread of the JVM), taken
    /// in at `now_ns`; dropped unless it could answer a sample.
    pub fn add_java(
        &mut self,
        pid: u32,
        tid: Option<u32>,
        sample: JavaSample,
        now_ns: u64,
    ) -> Result<(), Rejected> {
        if sample.time_ns > now_ns + FUTURE_SLACK_NS {
            return Err(Rejected::Future);
        }
        if sample.time_ns < now_ns.saturating_sub(PAIRING_WINDOW_NS) {
            return Err(Rejected::Stale);
        }
        let tid = tid.ok_or(Rejected::UnknownThread)?;
        let cost = cost(&sample);
        let held_here = self.held_cost.get(&pid).copied().unwrap_or(0);
        if held_here + cost > MAX_HELD_COST_PER_JVM || self.held_total + cost > MAX_HELD_COST {
            return Err(Rejected::Full);
        }
        let spare = &mut self.spare_java;
        let javas = self
            .java
            .entry((pid, tid))
            .or_insert_with(|| spare.pop().unwrap_or_default());
        if javas.len() >= MAX_JAVA_PER_THREAD {
            return Err(Rejected::Full);
        }
        *self.held_cost.entry(pid).or_default() += cost;
        self.held_total += cost;
        javas.push_back(sample);
        Ok(())
    }

    /// Pairs what can be paired, and gives up on what waited past the
    /// window before `now_ns` (or on everything, with `flush`).
    pub fn settle(&mut self, now_ns: u64, flush: bool, mut emit: impl FnMut(Outcome)) {
        let deadline = now_ns.saturating_sub(PAIRING_WINDOW_NS);
        for (thread, natives) in &mut self.native {
            let Some(javas) = self.java.get_mut(thread) else {
                continue;
            };
            pair(natives, javas, &mut emit);
        }
        for natives in self.native.values_mut() {
            while let Some(sample) = natives.front() {
                if !flush && sample.time_ns >= deadline {
                    break;
                }
                let sample = natives.pop_front().expect("front exists");
                emit(Outcome::Unpaired(sample, Unpaired::NoAnswer));
            }
        }
        for javas in self.java.values_mut() {
            // An answer older than every waiting sample answers nothing.
            javas.retain(|java| !flush && java.time_ns >= deadline);
        }
        keep_spare(&mut self.native, &mut self.spare_native);
        keep_spare(&mut self.java, &mut self.spare_java);
        self.held_cost.clear();
        for (&(pid, _), javas) in &self.java {
            *self.held_cost.entry(pid).or_default() += javas.iter().map(cost).sum::<usize>();
        }
        self.held_total = self.held_cost.values().sum();
    }
}

/// Takes the emptied queues out of `queues`, keeping some in `spare`.
fn keep_spare<T>(queues: &mut HashMap<(u32, u32), VecDeque<T>>, spare: &mut Vec<VecDeque<T>>) {
    for (_, queue) in queues.extract_if(|_, queue| queue.is_empty()) {
        if spare.len() < SPARE_QUEUES && queue.capacity() <= SPARE_CAPACITY {
            spare.push(queue);
        }
    }
}

fn cost(java: &JavaSample) -> usize {
    SAMPLE_COST + java.frames.len()
}

fn pair(
    natives: &mut VecDeque<Sample>,
    javas: &mut VecDeque<JavaSample>,
    emit: &mut impl FnMut(Outcome),
) {
    while let (Some(native), Some(java)) = (natives.front(), javas.front()) {
        if java.time_ns < native.time_ns {
            javas.pop_front();
            continue;
        }
        let coalesced = natives
            .get(1)
            .is_some_and(|next| next.time_ns <= java.time_ns);
        let native = natives.pop_front().expect("front exists");
        let still_in_kernel = natives.front().is_some_and(|next| next.user == native.user);
        if coalesced && still_in_kernel {
            // Both samples caught the thread in one stay in the kernel: it
            // ran no Java in between, so the one Java stack is both's.
            emit(Outcome::Paired(native, java.clone()));
        } else if coalesced {
            emit(Outcome::Unpaired(native, Unpaired::Coalesced));
        } else {
            let java = javas.pop_front().expect("front exists");
            emit(Outcome::Paired(native, java));
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn native(tid: u32, time_ns: u64) -> Sample {
        Sample::for_test(1, tid, time_ns, Vec::new())
    }

    fn java(tid: u32, time_ns: u64) -> JavaSample {
        JavaSample {
            tid,
            time_ns,
            pc: 0,
            result: 0,
            top_popped: false,
            frames: vec![],
        }
    }

    fn settle(merger: &mut Merger, now: u64, flush: bool) -> Vec<String> {
        let mut seen = Vec::new();
        merger.settle(now, flush, |outcome| {
            seen.push(match outcome {
                Outcome::Paired(n, j) => format!("{}@{}={}", n.tid, n.time_ns, j.time_ns),
                Outcome::Unpaired(n, why) => format!("{}@{}:{why:?}", n.tid, n.time_ns),
            })
        });
        seen.sort();
        seen
    }

    #[test]
    fn each_sample_pairs_with_the_next_stack_of_its_thread() {
        let mut merger = Merger::default();
        merger.add_native(native(1, 100));
        merger.add_native(native(2, 105));
        merger.add_java(1, Some(2), java(2, 110), 110).unwrap();
        merger.add_java(1, Some(1), java(1, 120), 120).unwrap();
        assert_eq!(settle(&mut merger, 200, false), ["1@100=120", "2@105=110"]);
    }

    #[test]
    fn a_sample_whose_signal_merged_with_the_next_keeps_its_native_stack() {
        let mut merger = Merger::default();
        let mut earlier = native(1, 100);
        earlier.user = vec![0x10];
        merger.add_native(earlier);
        merger.add_native(native(1, 150));
        merger.add_java(1, Some(1), java(1, 160), 160).unwrap();
        assert_eq!(
            settle(&mut merger, 200, false),
            ["1@100:Coalesced", "1@150=160"]
        );
    }

    #[test]
    fn samples_of_one_stay_in_the_kernel_share_the_java_stack() {
        let mut merger = Merger::default();
        let mut first = native(1, 100);
        first.user = vec![0x10, 0x20];
        let mut second = native(1, 150);
        second.user = vec![0x10, 0x20];
        merger.add_native(first);
        merger.add_native(second);
        merger.add_java(1, Some(1), java(1, 160), 160).unwrap();
        assert_eq!(settle(&mut merger, 200, false), ["1@100=160", "1@150=160"]);
    }

    #[test]
    fn unanswered_samples_wait_for_the_window_then_go_native() {
        let mut merger = Merger::default();
        merger.add_native(native(1, 100));
        merger.add_java(1, Some(1), java(1, 50), 50).unwrap();
        assert!(settle(&mut merger, 200, false).is_empty());
        let later = 100 + PAIRING_WINDOW_NS + 1;
        assert_eq!(settle(&mut merger, later, false), ["1@100:NoAnswer"]);
        merger.add_native(native(3, later));
        assert_eq!(
            settle(&mut merger, later, true),
            [format!("3@{later}:NoAnswer")]
        );
        assert!(merger.native.is_empty() && merger.java.is_empty());
    }

    #[test]
    fn an_answer_that_arrives_before_its_sample_is_drained_still_pairs() {
        let mut merger = Merger::default();
        merger.add_java(1, Some(1), java(1, 120), 120).unwrap();
        assert!(settle(&mut merger, 130, false).is_empty());
        merger.add_native(native(1, 100));
        assert_eq!(settle(&mut merger, 140, false), ["1@100=120"]);
    }

    #[test]
    fn stacks_from_the_future_or_the_past_are_dropped() {
        let mut merger = Merger::default();
        let now = 10 * PAIRING_WINDOW_NS;
        let future = java(1, now + FUTURE_SLACK_NS + 1);
        assert_eq!(
            merger.add_java(1, Some(1), future, now),
            Err(Rejected::Future)
        );
        let ancient = java(1, now - PAIRING_WINDOW_NS - 1);
        assert_eq!(
            merger.add_java(1, Some(1), ancient, now),
            Err(Rejected::Stale)
        );
        assert_eq!(
            merger.add_java(1, None, java(1, now), now),
            Err(Rejected::UnknownThread)
        );
        assert_eq!(merger.add_java(1, Some(1), java(1, now), now), Ok(()));
        assert_eq!(merger.add_java(1, Some(1), java(1, now + 5), now), Ok(()));
    }

    #[test]
    fn held_stacks_are_bounded_per_thread_and_in_all() {
        let mut merger = Merger::default();
        for _ in 0..MAX_JAVA_PER_THREAD {
            assert_eq!(merger.add_java(1, Some(1), java(1, 100), 100), Ok(()));
        }
        assert_eq!(
            merger.add_java(1, Some(1), java(1, 100), 100),
            Err(Rejected::Full)
        );
        let mut accepted = MAX_JAVA_PER_THREAD;
        for tid in 2.. {
            if merger.add_java(1, Some(tid), java(tid, 100), 100).is_err() {
                break;
            }
            accepted += 1;
        }
        assert_eq!(accepted, MAX_HELD_COST_PER_JVM / SAMPLE_COST);
        // Another JVM still has room of its own.
        assert_eq!(merger.add_java(2, Some(1), java(1, 100), 100), Ok(()));
        // Settled, the stacks that answer nothing go, and room is made.
        assert!(settle(&mut merger, 100 + PAIRING_WINDOW_NS + 1, false).is_empty());
        assert!(merger.held_cost.is_empty() && merger.held_total == 0);
        assert_eq!(merger.add_java(1, Some(1), java(1, 100), 100), Ok(()));
    }

    #[test]
    fn emptied_queues_are_kept_for_the_next_samples_a_bounded_few() {
        let mut merger = Merger::default();
        for tid in 0..SPARE_QUEUES as u32 + 10 {
            merger.add_native(native(tid, 100));
            merger.add_java(1, Some(tid), java(tid, 110), 110).unwrap();
        }
        assert_eq!(settle(&mut merger, 200, false).len(), SPARE_QUEUES + 10);
        assert!(merger.native.is_empty() && merger.java.is_empty());
        assert_eq!(merger.spare_native.len(), SPARE_QUEUES);
        assert_eq!(merger.spare_java.len(), SPARE_QUEUES);
        merger.add_native(native(1, 300));
        assert_eq!(merger.spare_native.len(), SPARE_QUEUES - 1);
        assert!(merger.native[&(1, 1)].capacity() > 0);
    }

    #[test]
    fn a_stack_answers_only_samples_of_the_jvm_that_sent_it() {
        let mut merger = Merger::default();
        // JVM 1's thread 7 is sampled; another process's agent (pid 2)
        // names thread 7 too.
        merger.add_native(native(7, 100));
        merger.add_java(2, Some(7), java(7, 110), 110).unwrap();
        assert!(settle(&mut merger, 120, false).is_empty());
        merger.add_java(1, Some(7), java(7, 115), 115).unwrap();
        assert_eq!(settle(&mut merger, 130, false), ["7@100=115"]);
    }
}
