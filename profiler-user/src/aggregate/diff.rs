//! How a profile changed from BEFORE to AFTER: both profiles' stacks side
//! by side, BEFORE to be scaled to AFTER's total (`stoke diff`, and the
//! incident report's baseline).

use std::{collections::HashMap, sync::Arc};

use crate::model::Profile;

/// One stack of either profile: its samples in AFTER and in BEFORE, the
/// latter not yet scaled.
#[derive(Debug, PartialEq)]
pub struct DiffStack {
    /// Frame names, root first, pids taken out of the context frames.
    pub frames: Vec<Arc<str>>,
    /// How many leading frames name where the code ran.
    pub context_frames: usize,
    /// Samples in BEFORE.
    pub before: u64,
    /// Samples in AFTER.
    pub after: u64,
}

/// Two profiles' stacks side by side.
#[derive(Debug)]
pub struct Diff {
    /// Every stack of either profile once.
    pub stacks: Vec<DiffStack>,
    /// Samples in BEFORE.
    pub before_samples: u64,
    /// Samples in AFTER.
    pub after_samples: u64,
    /// The files, as given.
    pub before_name: String,
    /// The files, as given.
    pub after_name: String,
}

impl Diff {
    /// What a BEFORE sample counts as, so that both profiles have AFTER's
    /// total.
    pub fn scale(&self) -> f64 {
        if self.before_samples == 0 {
            0.0
        } else {
            self.after_samples as f64 / self.before_samples as f64
        }
    }
}

/// The stacks of `before` and `after` side by side. Pids and tids differ
/// from one recording to the next: `comm [pid]` becomes `comm [*]` and
/// `name [tid N]` `name [tid *]`, so that the same program lines up.
pub fn diff(before: &Profile, after: &Profile, before_name: String, after_name: String) -> Diff {
    let mut stacks: HashMap<Vec<Arc<str>>, DiffStack> = HashMap::new();
    for (profile, is_after) in [(before, false), (after, true)] {
        for stack in &profile.stacks {
            let frames: Vec<Arc<str>> = stack
                .frames
                .iter()
                .enumerate()
                .map(|(index, frame)| {
                    if index < stack.context_frames {
                        without_id(frame)
                    } else {
                        frame.clone()
                    }
                })
                .collect();
            let entry = stacks.entry(frames.clone()).or_insert(DiffStack {
                frames,
                context_frames: stack.context_frames,
                before: 0,
                after: 0,
            });
            let count = if is_after {
                &mut entry.after
            } else {
                &mut entry.before
            };
            *count = count.saturating_add(stack.samples);
        }
    }
    Diff {
        stacks: stacks.into_values().collect(),
        before_samples: total(before),
        after_samples: total(after),
        before_name,
        after_name,
    }
}

/// The samples of `profile`, held at `u64::MAX`.
fn total(profile: &Profile) -> u64 {
    profile
        .stacks
        .iter()
        .fold(0, |total, stack| total.saturating_add(stack.samples))
}

/// A context frame without its pid or tid.
fn without_id(frame: &Arc<str>) -> Arc<str> {
    for open in [" [tid ", " ["] {
        if let Some(rest) = frame.strip_suffix(']') {
            if let Some(at) = rest.rfind(open) {
                let id = &rest[at + open.len()..];
                if !id.is_empty() && id.bytes().all(|byte| byte.is_ascii_digit()) {
                    return format!("{}{open}*]", &rest[..at]).into();
                }
            }
        }
    }
    frame.clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::tests::profile;

    #[test]
    fn stacks_line_up_without_pids() {
        let before = profile(&[("app [1];main;a", 7), ("app [1];main;b", 3)]);
        let after = profile(&[("app [2];main;a", 2), ("app [2];main;c", 18)]);
        let diff = diff(&before, &after, "b".into(), "a".into());
        assert_eq!(diff.scale(), 2.0);
        let mut stacks: Vec<_> = diff
            .stacks
            .iter()
            .map(|stack| (stack.frames.join(";"), stack.before, stack.after))
            .collect();
        stacks.sort();
        assert_eq!(
            stacks,
            [
                ("app [*];main;a".into(), 7, 2),
                ("app [*];main;b".into(), 3, 0),
                ("app [*];main;c".into(), 0, 18),
            ]
        );
    }

    #[test]
    fn ids_come_out_of_process_and_thread_frames_only() {
        for (frame, expected) in [
            ("java [42]", "java [*]"),
            ("main [tid 43]", "main [tid *]"),
            ("web [container ab12]", "web [container ab12]"),
            ("svc [service]", "svc [service]"),
        ] {
            assert_eq!(&*without_id(&frame.into()), expected);
        }
    }

    #[test]
    fn counts_saturate() {
        let before = profile(&[("main;a", u64::MAX), ("main;b", 1)]);
        let after = profile(&[("main;a", u64::MAX)]);
        let diff = diff(&before, &before, "b".into(), "a".into());
        assert_eq!(diff.before_samples, u64::MAX);
        let diff = super::diff(&before, &after, "b".into(), "a".into());
        let a = diff
            .stacks
            .iter()
            .find(|stack| stack.frames.join(";") == "main;a");
        assert_eq!(
            a.map(|stack| (stack.before, stack.after)),
            Some((u64::MAX, u64::MAX))
        );
    }
}
