//! Stoke's folded profiles, read and asserted on: the stacks, their counts,
//! and the shares of samples the tests check.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use serde::Deserialize;

use crate::java_method;

/// One line of a folded profile (or one stack of a JSON one): the frames,
/// root first, and the number of samples with exactly that stack.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Stack {
    /// The frames, root (the process frame) first, leaf last.
    pub frames: Vec<String>,
    /// The number of samples.
    #[serde(rename = "samples")]
    pub count: u64,
}

impl Stack {
    /// The root frame (`<comm> [<pid>]`).
    pub fn root(&self) -> &str {
        &self.frames[0]
    }

    /// Whether some frame is exactly `frame`.
    pub fn contains(&self, frame: &str) -> bool {
        self.frames.iter().any(|f| f == frame)
    }

    /// The index of the first frame that is exactly `frame`.
    pub fn position(&self, frame: &str) -> Option<usize> {
        self.frames.iter().position(|f| f == frame)
    }

    /// The index of the first Java frame of `method` (`pkg.Class.method`,
    /// JIT-compiled or interpreted: see [`java_method`]).
    pub fn java_position(&self, method: &str) -> Option<usize> {
        self.frames
            .iter()
            .position(|frame| java_method(frame) == Some(method))
    }

    /// The Java method of frame `index` ([`java_method`]), if that frame
    /// exists and is a Java frame.
    pub fn java_at(&self, index: usize) -> Option<&str> {
        self.frames.get(index).and_then(|frame| java_method(frame))
    }

    /// Whether some frame is a Java frame of `method` ([`java_method`]).
    pub fn has_java(&self, method: &str) -> bool {
        self.java_position(method).is_some()
    }

    /// The leaf (last) frame.
    pub fn leaf(&self) -> &str {
        self.frames.last().expect("stacks are never empty")
    }

    /// Whether `frames` occur in this stack as a contiguous run, in order.
    pub fn contains_run(&self, frames: &[&str]) -> bool {
        self.frames
            .windows(frames.len())
            .any(|w| w.iter().zip(frames).all(|(a, b)| a == b))
    }

    /// The frames joined as in the folded format.
    pub fn joined(&self) -> String {
        self.frames.join(";")
    }
}

/// Whether a frame is a kernel frame (its name ends in `_[k]`).
pub fn is_kernel_frame(frame: &str) -> bool {
    frame.ends_with("_[k]")
}

/// Parses Stoke's folded output, asserting that every line is well formed:
/// `frame;frame;... count`, with a positive integer count, no empty frame,
/// and no stack listed twice.
///
/// # Panics
///
/// On the first malformed line, quoting it.
pub fn parse_folded(text: &str) -> Vec<Stack> {
    let mut stacks = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        assert!(!line.is_empty(), "folded line {n} is empty");
        let (stack, count) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("folded line {n} has no sample count: {line:?}"));
        let count: u64 = count
            .parse()
            .unwrap_or_else(|e| panic!("folded line {n} has a bad sample count ({e}): {line:?}"));
        assert!(count > 0, "folded line {n} has a zero count: {line:?}");
        let frames: Vec<String> = stack.split(';').map(str::to_owned).collect();
        for frame in &frames {
            assert!(
                !frame.trim().is_empty(),
                "folded line {n} has an empty frame: {line:?}"
            );
        }
        assert!(
            seen.insert(stack.to_owned()),
            "folded line {n} repeats a stack already listed: {line:?}"
        );
        stacks.push(Stack { frames, count });
    }
    stacks
}

/// Reads and parses ([`parse_folded`]) a folded profile file.
pub fn read_folded(path: &Path) -> Vec<Stack> {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading the folded profile {}: {e}", path.display()));
    parse_folded(&text)
}

/// Splits a root frame `<comm> [<pid>]` into its parts.
pub fn parse_process_frame(frame: &str) -> Option<(&str, u32)> {
    let (comm, rest) = frame.rsplit_once(" [")?;
    let pid = rest.strip_suffix(']')?.parse().ok()?;
    (!comm.is_empty()).then_some((comm, pid))
}

/// Splits a thread frame `<thread comm> [tid <tid>]` into its parts.
pub fn parse_thread_frame(frame: &str) -> Option<(&str, u32)> {
    let (comm, rest) = frame.rsplit_once(" [tid ")?;
    let tid = rest.strip_suffix(']')?.parse().ok()?;
    (!comm.is_empty()).then_some((comm, tid))
}

/// The total number of samples in `stacks`.
pub fn total_samples<'a>(stacks: impl IntoIterator<Item = &'a Stack>) -> u64 {
    stacks.into_iter().map(|s| s.count).sum()
}

/// The number of samples in the stacks for which `pred` holds.
pub fn samples_where<'a>(
    stacks: impl IntoIterator<Item = &'a Stack>,
    mut pred: impl FnMut(&Stack) -> bool,
) -> u64 {
    stacks
        .into_iter()
        .filter(|s| pred(s))
        .map(|s| s.count)
        .sum()
}

/// The number of samples whose stack contains `frame`.
pub fn samples_with_frame<'a>(stacks: impl IntoIterator<Item = &'a Stack>, frame: &str) -> u64 {
    samples_where(stacks, |s| s.contains(frame))
}

/// The stacks whose root frame is exactly `root`.
pub fn stacks_of<'a>(stacks: &'a [Stack], root: &str) -> Vec<&'a Stack> {
    stacks.iter().filter(|s| s.root() == root).collect()
}

/// The stacks of thread `tid`, in a profile recorded with `-t` (whose
/// second frame is `<thread comm> [tid N]`).
pub fn stacks_of_thread(stacks: &[Stack], tid: u32) -> Vec<&Stack> {
    stacks
        .iter()
        .filter(|s| {
            s.frames
                .get(1)
                .and_then(|frame| parse_thread_frame(frame))
                .is_some_and(|(_, t)| t == tid)
        })
        .collect()
}

/// Panics unless every stack's root frame is `root`: a recording with
/// `-p <pid>` holds that process's stacks and nothing else.
pub fn assert_all_of_process(stacks: &[Stack], root: &str) {
    for stack in stacks {
        assert_eq!(
            stack.root(),
            root,
            "with -p, a stack of another process: {}\n{}",
            stack.joined(),
            describe(stacks, 10)
        );
    }
}

/// Panics unless `part` samples are at least `fraction` of `whole`, with
/// the message `only <part> of <whole> samples <what>`.
pub fn assert_share(part: u64, whole: u64, fraction: f64, what: impl std::fmt::Display) {
    assert!(
        part as f64 >= fraction * whole as f64,
        "only {part} of {whole} samples {what}"
    );
}

/// Panics unless at least `fraction` of the samples in `stacks` (those of
/// the process frame `root`) have the frames `run` in a row, e.g.
/// `["main", "other_work", "other_spin"]`.
pub fn assert_run_share(stacks: &[&Stack], root: &str, run: &[&str], fraction: f64) {
    let total = total_samples(stacks.iter().copied());
    let in_run = samples_where(stacks.iter().copied(), |s| s.contains_run(run));
    assert_share(
        in_run,
        total,
        fraction,
        format_args!(
            "of {root} are in {}\n{}",
            run.join(";"),
            describe(stacks.iter().copied(), 10)
        ),
    );
}

/// The stacks under the process frame `root` and their total number of
/// samples, printed; asserts that there are more than `min` samples.
pub fn process_stacks<'a>(stacks: &'a [Stack], root: &str, min: u64) -> (Vec<&'a Stack>, u64) {
    let mine = stacks_of(stacks, root);
    let total = total_samples(mine.iter().copied());
    println!("{root}: {}", describe(mine.iter().copied(), 10));
    assert!(
        total > min,
        "only {total} samples under `{root}` (more than {min} expected)\n{}",
        describe(stacks, 20)
    );
    (mine, total)
}

/// A readable summary of the `n` heaviest stacks, for assertion messages.
pub fn describe<'a>(stacks: impl IntoIterator<Item = &'a Stack>, n: usize) -> String {
    let mut sorted: Vec<&Stack> = stacks.into_iter().collect();
    let total = total_samples(sorted.iter().copied());
    sorted.sort_by_key(|s| std::cmp::Reverse(s.count));
    let mut text = format!(
        "{total} samples in {} distinct stacks; heaviest:\n",
        sorted.len()
    );
    for stack in sorted.iter().take(n) {
        let _ = writeln!(text, "  {:>6} {}", stack.count, stack.joined());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_folded_lines() {
        let stacks = parse_folded(
            "fp_split [12];main;hot_seventy;spin 7\nfp_split [12];main;vfs_read_[k] 3\n",
        );
        assert_eq!(stacks.len(), 2);
        assert_eq!(
            stacks[0].frames,
            ["fp_split [12]", "main", "hot_seventy", "spin"]
        );
        assert_eq!(stacks[0].count, 7);
        assert!(stacks[0].contains_run(&["main", "hot_seventy", "spin"]));
        assert!(!stacks[0].contains_run(&["main", "spin"]));
        assert_eq!(samples_with_frame(&stacks, "main"), 10);
        assert!(is_kernel_frame(stacks[1].leaf()));
        assert_eq!(
            parse_process_frame(stacks[0].root()),
            Some(("fp_split", 12))
        );
        assert_eq!(
            parse_thread_frame("worker_a [tid 99]"),
            Some(("worker_a", 99))
        );
        assert_eq!(
            parse_process_frame("Web Content [7]"),
            Some(("Web Content", 7))
        );
    }

    #[test]
    #[should_panic(expected = "empty frame")]
    fn rejects_empty_frames() {
        parse_folded("a [1];;b 3\n");
    }

    #[test]
    #[should_panic(expected = "bad sample count")]
    fn rejects_bad_counts() {
        parse_folded("a [1];b x\n");
    }

    #[test]
    #[should_panic(expected = "repeats a stack")]
    fn rejects_repeated_stacks() {
        parse_folded("a [1];b 1\na [1];b 2\n");
    }
}
