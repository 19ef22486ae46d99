//! Collapsed stacks, the input format of most flame graph tools.

use std::io::{self, Write};

use crate::{aggregate::diff::Diff, model::Profile};

/// Writes one `root;...;leaf count` line per stack.
pub(super) fn write(profile: &Profile, out: &mut dyn Write) -> io::Result<()> {
    for line in lines(profile) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// The collapsed lines of `profile`, sorted by stack so that the same
/// profile always gives the same bytes.
pub(super) fn lines(profile: &Profile) -> Vec<String> {
    let mut stacks: Vec<(String, u64)> = profile
        .stacks
        .iter()
        .map(|stack| (stack.frames.join(";"), stack.samples))
        .collect();
    stacks.sort_unstable();
    stacks
        .into_iter()
        .map(|(frames, samples)| format!("{frames} {samples}"))
        .collect()
}

/// Writes `diff` as one `root;...;leaf BEFORE AFTER` line per stack, sorted
/// by stack, BEFORE scaled to AFTER's total and rounded: the differential
/// folded format of `difffolded.pl -n` that inferno and flamegraph.pl read.
pub fn write_diff(diff: &Diff, out: &mut dyn Write) -> io::Result<()> {
    let scale = diff.scale();
    let mut lines: Vec<(String, u64, u64)> = diff
        .stacks
        .iter()
        .map(|stack| {
            let before = (stack.before as f64 * scale).round() as u64;
            (stack.frames.join(";"), before, stack.after)
        })
        .collect();
    lines.sort_unstable();
    for (frames, before, after) in lines {
        writeln!(out, "{frames} {before} {after}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::tests::profile;

    #[test]
    fn one_sorted_line_per_stack() {
        let profile = profile(&[
            ("b;main;work", 3),
            ("a;main", 1),
            ("a;main;run_[k]", 7),
            ("a;main;run", 2),
        ]);
        let mut out = Vec::new();
        write(&profile, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "a;main 1\na;main;run 2\na;main;run_[k] 7\nb;main;work 3\n"
        );
    }

    #[test]
    fn diff_lines_carry_both_counts_before_scaled() {
        let before = profile(&[("a [1];x", 3), ("a [1];y", 1)]);
        let after = profile(&[("a [2];x", 2), ("a [2];y", 6)]);
        let diff = crate::aggregate::diff::diff(&before, &after, "b".into(), "a".into());
        let mut out = Vec::new();
        write_diff(&diff, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "a [*];x 6 2\na [*];y 2 6\n"
        );
    }

    #[test]
    fn empty_profile_writes_nothing() {
        let mut out = Vec::new();
        write(&profile(&[]), &mut out).unwrap();
        assert!(out.is_empty());
    }
}
