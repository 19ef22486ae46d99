//! Folded files: `root;...;leaf COUNT` lines, from Stoke or any other tool
//! that writes collapsed stacks.

use std::{collections::HashMap, io::BufRead, path::Path, sync::Arc};

use anyhow::{bail, Context, Result};

use crate::{
    profile::{clean_frame, FoldedStack, Profile},
    write::count_context_frames,
};

/// The profile in folded `input` (`root;...;leaf count` lines), named
/// `path` in errors. Repeated stacks add up; blank lines are skipped.
pub(super) fn read(input: impl BufRead, path: &Path) -> Result<Profile> {
    let mut names: HashMap<String, Arc<str>> = HashMap::new();
    let mut stacks: HashMap<Vec<Arc<str>>, u64> = HashMap::new();
    let mut samples = 0u64;
    for (number, line) in input.lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let Some((frames, count)) = line
            .rsplit_once(' ')
            .and_then(|(frames, count)| Some((frames, count.parse::<u64>().ok()?)))
        else {
            bail!(
                "line {} of {} is not `frame;...;frame COUNT`: is it a folded file?",
                number + 1,
                path.display()
            );
        };
        let frames: Vec<Arc<str>> = frames
            .split(';')
            .map(|frame| {
                names
                    .entry(frame.to_owned())
                    .or_insert_with(|| clean_frame(frame.into()))
                    .clone()
            })
            .collect();
        *stacks.entry(frames).or_default() += count;
        samples = samples.saturating_add(count);
    }
    let mut profile = Profile::default();
    profile.summary.samples = samples;
    profile.stacks = stacks
        .into_iter()
        .map(|(frames, samples)| FoldedStack {
            context_frames: count_context_frames(&frames),
            frames,
            samples,
            labels: Arc::new([]),
            modules: Box::new([]),
        })
        .collect();
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Profile> {
        super::read(text.as_bytes(), Path::new("in.folded"))
    }

    #[test]
    fn stacks_add_up_and_keep_their_context_frames() {
        let profile = read("app [1];main;f 3\n\napp [1];main;f 2\nother;g 1\n").unwrap();
        assert_eq!(profile.summary.samples, 6);
        let mut stacks: Vec<_> = profile
            .stacks
            .iter()
            .map(|stack| (stack.frames.join(";"), stack.context_frames, stack.samples))
            .collect();
        stacks.sort();
        assert_eq!(
            stacks,
            [("app [1];main;f".into(), 1, 5), ("other;g".into(), 0, 1)]
        );
    }

    #[test]
    fn a_line_without_a_count_is_an_error_naming_it() {
        for bad in ["a;b\n", "a;b 1\na;b x\n", "a;b -1\n"] {
            let error = read(bad).unwrap_err().to_string();
            assert!(
                error.contains("in.folded") && error.contains("line "),
                "{error}"
            );
        }
    }
}
