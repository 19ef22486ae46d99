//! Collapsed stacks, the input format of most flame graph tools.

use std::io::{self, Write};

use crate::profile::Profile;

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
    fn empty_profile_writes_nothing() {
        let mut out = Vec::new();
        write(&profile(&[]), &mut out).unwrap();
        assert!(out.is_empty());
    }
}
