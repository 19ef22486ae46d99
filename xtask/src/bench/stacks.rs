//! Stacks from both profilers in one shape: stoke's folded output and
//! `perf script`'s, so that accuracy and symbolization are judged alike.

use anyhow::{Context, Result};

/// One distinct stack of one process and how many samples had it.
#[derive(Debug, Clone, PartialEq)]
pub struct Stack {
    pub comm: String,
    pub pid: u32,
    /// Frames root first, without the frame naming the process. Kernel
    /// frames end in `_[k]`, as stoke names them.
    pub frames: Vec<String>,
    pub samples: u64,
}

impl Stack {
    /// Whether a frame named exactly `function` is on the stack.
    pub fn contains(&self, function: &str) -> bool {
        self.frames.iter().any(|frame| frame == function)
    }

    /// The user-space (non-kernel) frames.
    pub fn user_frames(&self) -> impl Iterator<Item = &String> {
        self.frames.iter().filter(|frame| !is_kernel(frame))
    }
}

/// A kernel frame, in stoke's naming (perf's is converted to it).
pub fn is_kernel(frame: &str) -> bool {
    frame.ends_with("_[k]")
}

/// A frame that names no function: `module+0x...` and `[anon]+0x...`, as
/// stoke names them and perf's are read, or a bare `[unknown]`.
pub fn is_unnamed(frame: &str) -> bool {
    frame.contains("+0x") || frame.starts_with("[unknown]")
}

/// Parses stoke's folded output: `comm [pid];frame;...;leaf COUNT` lines.
pub fn parse_folded(text: &str) -> Result<Vec<Stack>> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| parse_folded_line(line).with_context(|| format!("folded line {line:?}")))
        .collect()
}

fn parse_folded_line(line: &str) -> Result<Stack> {
    let (stack, count) = line.rsplit_once(' ').context("no sample count")?;
    let samples = count.parse().context("the sample count is not a number")?;
    let mut frames = stack.split(';');
    let process = frames.next().context("no process frame")?;
    let (comm, pid) = process
        .rsplit_once(" [")
        .and_then(|(comm, rest)| Some((comm, rest.strip_suffix(']')?.parse().ok()?)))
        .context("the first frame is not `comm [pid]`")?;
    Ok(Stack {
        comm: comm.to_owned(),
        pid,
        frames: frames.map(str::to_owned).collect(),
        samples,
    })
}

/// Parses `perf script -F comm,pid,ip,sym,dso` output of a `-g` recording
/// ([`stoke_tests::perf_script`], which the unwind tests read perf with
/// too). Every sample is a stack of its own (count 1).
pub fn parse_perf_script(text: &str) -> Result<Vec<Stack>> {
    let samples = stoke_tests::perf_script::parse(text).map_err(anyhow::Error::msg)?;
    Ok(samples
        .into_iter()
        .map(|sample| Stack {
            comm: sample.comm,
            pid: sample.pid,
            frames: sample.frames,
            samples: 1,
        })
        .collect())
}

/// Sums samples over stacks that `keep` accepts.
pub fn samples_where(stacks: &[Stack], keep: impl Fn(&Stack) -> bool) -> u64 {
    stacks
        .iter()
        .filter(|stack| keep(stack))
        .map(|stack| stack.samples)
        .sum()
}

/// Mean frames per sample (kernel and user) over the stacks `keep` accepts.
pub fn mean_frames(stacks: &[Stack], keep: impl Fn(&Stack) -> bool) -> Option<f64> {
    let (frames, samples) =
        stacks
            .iter()
            .filter(|stack| keep(stack))
            .fold((0u64, 0u64), |(frames, samples), stack| {
                (
                    frames + stack.frames.len() as u64 * stack.samples,
                    samples + stack.samples,
                )
            });
    (samples > 0).then(|| frames as f64 / samples as f64)
}

/// A Java frame in stoke's naming: JIT-compiled, interpreted or inlined.
pub fn is_java(frame: &str) -> bool {
    frame.ends_with("_[j]") || frame.ends_with("_[0]") || frame.ends_with("_[i]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_folded_lines() {
        let stacks =
            parse_folded("fp split [42];main;hot_seventy;spin 7\nsh [7];do_idle_[k] 1\n").unwrap();
        assert_eq!(stacks.len(), 2);
        assert_eq!(stacks[0].comm, "fp split");
        assert_eq!(stacks[0].pid, 42);
        assert_eq!(stacks[0].frames, ["main", "hot_seventy", "spin"]);
        assert_eq!(stacks[0].samples, 7);
        assert!(stacks[0].contains("hot_seventy"));
        assert_eq!(stacks[1].user_frames().count(), 0);
        assert!(parse_folded("no count here\n").is_err());
        assert!(parse_folded("nopid;main 3\n").is_err());
    }

    #[test]
    fn parses_perf_script() {
        let text = "fp_split 1234\n\
                    \tffffffff81 asm_sysvec_apic_timer_interrupt ([kernel.kallsyms])\n\
                    \t    55d0 spin (/tmp/fp_split)\n\
                    \t    55d1 hot_thirty (/tmp/fp_split)\n\
                    \n\
                    swapper     0\n\
                    \t ffffffff82 do_idle ([kernel.kallsyms])\n\
                    \t 7f00 [unknown] ([unknown])\n";
        let stacks = parse_perf_script(text).unwrap();
        assert_eq!(stacks.len(), 2);
        assert_eq!(stacks[0].pid, 1234);
        assert_eq!(
            stacks[0].frames,
            ["hot_thirty", "spin", "asm_sysvec_apic_timer_interrupt_[k]"]
        );
        assert_eq!(stacks[1].comm, "swapper");
        assert_eq!(stacks[1].frames, ["[unknown]+0x7f00", "do_idle_[k]"]);
        assert!(is_unnamed(&stacks[1].frames[0]));
        assert!(is_kernel(&stacks[1].frames[1]));
        assert!(!is_unnamed("short_lived_work"));
        assert!(is_unnamed("libc.so.6+0x27d8a"));
    }

    #[test]
    fn mean_frames_weights_by_samples() {
        let stack = |pid, frames: usize, samples| Stack {
            comm: "w".into(),
            pid,
            frames: vec!["f".into(); frames],
            samples,
        };
        let stacks = [stack(1, 10, 1), stack(1, 20, 3), stack(2, 100, 5)];
        assert_eq!(mean_frames(&stacks, |s| s.pid == 1), Some(17.5));
        assert_eq!(mean_frames(&stacks, |s| s.pid == 3), None);
    }
}
