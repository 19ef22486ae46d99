//! Folded files: `root;...;leaf COUNT` lines, from Stoke or any other tool
//! that writes collapsed stacks.

use std::{
    borrow::Cow,
    collections::HashMap,
    io::{BufRead, Read},
    path::Path,
    sync::Arc,
};

use anyhow::{bail, Context, Result};

use super::stacks::{Stacks, MAX_FRAMES};
use crate::{
    model::{clean_frame, FoldedStack, Profile},
    write::count_context_frames,
};

/// The longest line, its newline included.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// The most bytes the distinct frame names may take together.
const MAX_NAME_BYTES: usize = 1 << 30;

/// The profile in folded `input` (`root;...;leaf count` lines), named
/// `path` in errors, and what to warn about. Repeated stacks add up; blank
/// lines are skipped; a line that is not UTF-8 is read lossily.
pub(super) fn read(mut input: impl BufRead, path: &Path) -> Result<(Profile, Vec<String>)> {
    let mut names: HashMap<String, Arc<str>> = HashMap::new();
    let mut name_bytes = 0usize;
    let mut stacks = Stacks::default();
    let mut not_utf8 = 0u64;
    let mut bytes = Vec::new();
    for number in 1.. {
        bytes.clear();
        (&mut input)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut bytes)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if bytes.is_empty() {
            break;
        }
        if bytes.len() > MAX_LINE_BYTES {
            bail!(
                "line {number} of {} is longer than {} MiB, the most a line may have: is it a folded file?",
                path.display(),
                MAX_LINE_BYTES >> 20
            );
        }
        let line = String::from_utf8_lossy(&bytes);
        if let Cow::Owned(_) = line {
            not_utf8 += 1;
        }
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let Some((frames_text, count)) = line
            .rsplit_once(' ')
            .and_then(|(frames, count)| Some((frames, count.parse::<u64>().ok()?)))
        else {
            bail!(
                "line {number} of {} is not `frame;...;frame COUNT`: is it a folded file?",
                path.display()
            );
        };
        let mut frames: Vec<Arc<str>> = Vec::new();
        for frame in frames_text.split(';').take(MAX_FRAMES + 1) {
            if let Some(name) = names.get(frame) {
                frames.push(name.clone());
                continue;
            }
            name_bytes += frame.len();
            if name_bytes > MAX_NAME_BYTES {
                bail!(
                    "line {number} of {}: its frame names take more than {} MiB, the most a profile may have",
                    path.display(),
                    MAX_NAME_BYTES >> 20
                );
            }
            let name = clean_frame(frame.into());
            names.insert(frame.to_owned(), name.clone());
            frames.push(name);
        }
        stacks
            .add(frames, count, || ())
            .with_context(|| format!("line {number} of {}", path.display()))?;
    }
    let mut warnings = stacks.warnings(path);
    if not_utf8 > 0 {
        warnings.push(format!(
            "{}: {not_utf8} lines had invalid UTF-8, read lossily",
            path.display()
        ));
    }
    let profile = stacks.into_profile(|frames, samples, ()| FoldedStack {
        context_frames: count_context_frames(&frames),
        frames,
        samples,
        labels: Arc::new([]),
        modules: Box::new([]),
    });
    Ok((profile, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Profile> {
        Ok(read_bytes(text.as_bytes())?.0)
    }

    fn read_bytes(bytes: &[u8]) -> Result<(Profile, Vec<String>)> {
        super::read(bytes, Path::new("in.folded"))
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

    #[test]
    fn invalid_utf8_is_read_lossily_and_counted() {
        let (profile, warnings) = read_bytes(b"a;\xffb 2\nc 1\n").unwrap();
        assert_eq!(profile.summary.samples, 3);
        assert!(profile
            .stacks
            .iter()
            .any(|stack| stack.frames.join(";") == "a;\u{fffd}b"));
        assert_eq!(
            warnings,
            ["in.folded: 1 lines had invalid UTF-8, read lossily"]
        );
    }

    #[test]
    fn a_line_past_the_bound_is_an_error_naming_it() {
        let mut text = b"a 1\n".to_vec();
        text.resize(text.len() + MAX_LINE_BYTES + 1, b'x');
        let error = read_bytes(&text).unwrap_err().to_string();
        assert!(
            error.contains("line 2 of in.folded is longer than 1 MiB"),
            "{error}"
        );
        // One byte fewer, its newline included, is a line.
        let mut text = vec![b'x'; MAX_LINE_BYTES - 3];
        text.extend(b" 1\n");
        assert_eq!(read_bytes(&text).unwrap().0.summary.samples, 1);
    }

    #[test]
    fn counts_saturate_at_the_edge() {
        let max = u64::MAX;
        let (profile, warnings) = read_bytes(format!("a;b {max}\na;b {max}\n").as_bytes()).unwrap();
        assert_eq!(profile.summary.samples, max);
        assert_eq!(profile.stacks[0].samples, max);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let (profile, warnings) = read_bytes(format!("a {}\nb 1\n", max - 1).as_bytes()).unwrap();
        assert_eq!(profile.summary.samples, max);
        assert!(warnings.is_empty(), "{warnings:?}");
        let error = read_bytes(format!("a {max}0\n").as_bytes()).unwrap_err();
        assert!(error.to_string().contains("line 1"), "{error}");
    }

    #[test]
    fn deep_stacks_are_cut_to_their_root_side() {
        let line = format!("root;{} 1\n", ["f"; 2 * MAX_FRAMES].join(";"));
        let (profile, warnings) = read_bytes(line.as_bytes()).unwrap();
        assert_eq!(profile.stacks[0].frames.len(), MAX_FRAMES);
        assert_eq!(&*profile.stacks[0].frames[0], "root");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }
}
