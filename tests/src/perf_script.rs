//! `perf script` output of a `perf record -g` recording, read as stoke's
//! stacks are, so that the two profilers are compared alike (by the unwind
//! tests and by the bench).
//!
//! Run with `-F` fields ending in `ip,sym,dso` and starting with any of
//! `comm`, `pid`, `tid`, perf prints each sample as a header line
//! (`xz 1234`, `1234/1235`, `Web Content 7/9`, the ids right-aligned), its
//! frames leaf first, one a line, indented with a tab (`55d0 spin
//! (/tmp/fp_split)`), and a blank line.

/// One sample: whose it was and its frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The command name, if the header has one (`-F comm`).
    pub comm: String,
    /// The process id.
    pub pid: u32,
    /// The thread id, if the header has one (`-F pid,tid`).
    pub tid: Option<u32>,
    /// The frames, root first, named as stoke names them ([`frame_name`]).
    pub frames: Vec<String>,
}

/// Parses `perf script` output into its samples, in order.
///
/// # Errors
///
/// If a header line has no pid, or a sample starts with a frame.
pub fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    let mut current: Option<Sample> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            samples.extend(current.take().map(finish));
        } else if let Some(sample) = current.as_mut() {
            sample.frames.push(frame_name(line));
        } else if line.starts_with('\t') {
            return Err(format!("perf script: a frame before any sample: {line:?}"));
        } else {
            current = Some(header(line)?);
        }
    }
    samples.extend(current.map(finish));
    Ok(samples)
}

/// `[comm] pid[/tid]`: the ids are the last word; the comm, which may hold
/// spaces, is what comes before.
fn header(line: &str) -> Result<Sample, String> {
    let line = line.trim();
    let (comm, ids) = line.rsplit_once(char::is_whitespace).unwrap_or(("", line));
    let (pid, tid) = match ids.split_once('/') {
        Some((pid, tid)) => (pid, Some(tid)),
        None => (ids, None),
    };
    let bad = || format!("perf script: not a `[comm] pid[/tid]` line: {line:?}");
    Ok(Sample {
        comm: comm.trim().to_owned(),
        pid: pid.parse().map_err(|_| bad())?,
        tid: tid.map(str::parse).transpose().map_err(|_| bad())?,
        frames: Vec::new(),
    })
}

fn finish(mut sample: Sample) -> Sample {
    sample.frames.reverse(); // perf prints the leaf first
    sample
}

/// One frame line (`27249 __libc_start_call_main+0x79
/// (/usr/lib/x86_64-linux-gnu/libc.so.6)`, `3ac0 [unknown] (/usr/bin/xz)`)
/// named as stoke names frames: the function without its offset, kernel
/// functions with `_[k]`; a frame perf could not name is
/// `<file name>+0x<address>`, or `0x<address>_[k]` in the kernel.
pub fn frame_name(line: &str) -> String {
    let line = line.trim();
    let (address, rest) = line.split_once(' ').unwrap_or((line, ""));
    let (symbol, file) = rest.rsplit_once(" (").map_or((rest, ""), |(symbol, file)| {
        (symbol, file.strip_suffix(')').unwrap_or(file))
    });
    let kernel = file.starts_with("[kernel") || file.ends_with(".ko");
    if symbol == "[unknown]" || symbol.is_empty() {
        let address = u64::from_str_radix(address, 16).unwrap_or(0);
        if kernel {
            return format!("{address:#x}_[k]");
        }
        let file = file.rsplit('/').next().unwrap_or(file);
        return format!("{file}+{address:#x}");
    }
    let symbol = match symbol.rsplit_once("+0x") {
        Some((name, offset)) if u64::from_str_radix(offset, 16).is_ok() => name,
        _ => symbol,
    };
    if kernel {
        format!("{symbol}_[k]")
    } else {
        symbol.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_samples_root_first() {
        let text = "fp_split 1234\n\
                    \tffffffff81 asm_sysvec_apic_timer_interrupt ([kernel.kallsyms])\n\
                    \t    55d0 spin (/tmp/fp_split)\n\
                    \t    55d1 hot_thirty+0x1f (/tmp/fp_split)\n\
                    \n\
                    Web Content     7/9\n\
                    \t ffffffff82 [unknown] ([kernel.kallsyms])\n\
                    \t 7f00 [unknown] (/usr/lib/libxul.so)\n";
        let samples = parse(text).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(
            (samples[0].comm.as_str(), samples[0].pid),
            ("fp_split", 1234)
        );
        assert_eq!(
            samples[0].frames,
            ["hot_thirty", "spin", "asm_sysvec_apic_timer_interrupt_[k]"]
        );
        assert_eq!(samples[1].comm, "Web Content");
        assert_eq!((samples[1].pid, samples[1].tid), (7, Some(9)));
        assert_eq!(samples[1].frames, ["libxul.so+0x7f00", "0xffffffff82_[k]"]);
    }

    #[test]
    fn reads_headers_without_comm() {
        let samples = parse("  41/42\n\t3ac0 [unknown] (/usr/bin/xz)\n").unwrap();
        assert_eq!((samples[0].pid, samples[0].tid), (41, Some(42)));
        assert_eq!(samples[0].comm, "");
        assert_eq!(samples[0].frames, ["xz+0x3ac0"]);
    }

    #[test]
    fn refuses_what_is_not_perf_script() {
        assert!(parse("\tspin (/x)\n").is_err());
        assert!(parse("no pid here\n").is_err());
    }
}
