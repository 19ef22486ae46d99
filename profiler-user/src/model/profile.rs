//! The finished profile: what aggregation produces and the writers consume.

use std::{collections::HashMap, sync::Arc};

use serde::{Serialize, Serializer};

use super::summary::RecordingSummary;
use crate::event::Event;

/// One distinct symbolized stack and the samples that hit it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FoldedStack {
    /// Frame names, root first: the context frames (the container or
    /// service frame with `--group-by`, the process frame, the thread frame
    /// with `-t`), then code from the outermost caller to the sampled
    /// function. Names never contain `;` or a line break; kernel frames end
    /// in `_[k]`.
    pub frames: Vec<Arc<str>>,
    /// How many leading frames name where the code ran rather than code.
    pub context_frames: usize,
    /// The stack's value in its profile's event's unit ([`Event::unit`]):
    /// samples for CPU, nanoseconds for off-CPU and locks, bytes for
    /// allocations.
    pub samples: u64,
    /// Who the samples belong to, for writers that keep labels.
    #[serde(serialize_with = "label_map")]
    pub labels: Labels,
    /// For each code frame (`frames[context_frames..]`), the index in
    /// [`Profile::modules`] of the file it is code of; `None` for kernel,
    /// Java and unknown code. Frames past its end have none.
    #[serde(skip)]
    pub modules: FrameModules,
}

/// Per code frame, the index of its file in [`Profile::modules`], if any.
pub type FrameModules = Box<[Option<u32>]>;

/// Labels of a stack's samples, as (key, value), keys in a fixed order:
/// `pid`, `comm`, `exe`, `service`, `hostname`, then where the process runs
/// (`container_*`, `pod`, `namespace`, `pod_container`, `systemd_unit`),
/// then `tid` and `thread` with `-t`.
pub type Labels = Arc<[(&'static str, Arc<str>)]>;

fn label_map<S: Serializer>(labels: &Labels, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(labels.iter().map(|(key, value)| (key, value)))
}

/// `name` as a frame every writer can take: no `;` (the folded format's
/// separator) and no line break or other control character. Processes name
/// themselves, their threads, their files and their Java classes as they
/// like, so every frame passes through here.
pub fn clean_frame(name: Arc<str>) -> Arc<str> {
    if name.chars().any(|c| c == ';' || c.is_control()) {
        name.chars()
            .map(|c| match c {
                ';' => ':',
                c if c.is_control() => ' ',
                c => c,
            })
            .collect::<String>()
            .into()
    } else {
        name
    }
}

/// A recording, symbolized and counted.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// What its stacks count, and so the unit of their
    /// [`FoldedStack::samples`].
    pub event: Event,
    /// Every distinct stack once, in no particular order.
    pub stacks: Vec<FoldedStack>,
    /// The files native frames are code of, each once.
    pub modules: Vec<Module>,
    /// How the recording went.
    pub summary: RecordingSummary,
}

/// A file native code was sampled in, for writers that name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Its path, as the first process seen mapping it named it (its base
    /// name if that is unknown).
    pub path: Arc<str>,
    /// Its GNU build ID in lowercase hex, if it has one.
    pub build_id: Option<Arc<str>>,
}

/// Which code frames `--all-user` or `--all-kernel` keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameFilter {
    /// User frames only: a sample in the kernel counts in the user
    /// function that entered it.
    User,
    /// Kernel frames only: a sample in user code counts in its context
    /// frames (the process, the thread) alone.
    Kernel,
}

impl Profile {
    /// Leaves out the code frames `filter` does not keep, and merges the
    /// stacks that become the same.
    pub fn filter_frames(&mut self, filter: FrameFilter) {
        let mut merged: HashMap<Vec<Arc<str>>, usize> = HashMap::new();
        let mut stacks: Vec<FoldedStack> = Vec::with_capacity(self.stacks.len());
        for mut stack in std::mem::take(&mut self.stacks) {
            let context = stack.context_frames.min(stack.frames.len());
            let mut modules = Vec::with_capacity(stack.frames.len() - context);
            let mut frames = stack.frames[..context].to_vec();
            for (index, frame) in stack.frames[context..].iter().enumerate() {
                if frame.ends_with("_[k]") == (filter == FrameFilter::Kernel) {
                    frames.push(frame.clone());
                    modules.push(stack.modules.get(index).copied().flatten());
                }
            }
            match merged.get(&frames) {
                Some(&at) => stacks[at].samples = stacks[at].samples.saturating_add(stack.samples),
                None => {
                    merged.insert(frames.clone(), stacks.len());
                    stack.frames = frames;
                    stack.modules = modules.into();
                    stacks.push(stack);
                }
            }
        }
        self.stacks = stacks;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_never_carry_separators_or_control_characters() {
        assert_eq!(
            &*clean_frame("ev;il\nx\r\t\u{1b}[31m".into()),
            "ev:il x   [31m"
        );
        let clean: Arc<str> = "main (a.c:3)".into();
        assert!(
            Arc::ptr_eq(&clean_frame(clean.clone()), &clean),
            "clean names are kept as they are"
        );
    }

    fn lines(profile: &Profile) -> Vec<String> {
        let mut lines: Vec<String> = profile
            .stacks
            .iter()
            .map(|stack| format!("{} {}", stack.frames.join(";"), stack.samples))
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn frame_filters_keep_user_or_kernel_frames_and_merge_stacks() {
        let profile = crate::write::tests::profile(&[
            ("app [1];main;read;sys_read_[k];vfs_read_[k]", 5),
            ("app [1];main;read;sys_read_[k]", 2),
            ("app [1];main;read", 3),
            ("app [1];main;work", 4),
        ]);
        let mut user = profile.clone();
        user.filter_frames(FrameFilter::User);
        assert_eq!(
            lines(&user),
            ["app [1];main;read 10", "app [1];main;work 4"]
        );
        let mut kernel = profile;
        kernel.filter_frames(FrameFilter::Kernel);
        assert_eq!(
            lines(&kernel),
            [
                "app [1] 7",
                "app [1];sys_read_[k] 2",
                "app [1];sys_read_[k];vfs_read_[k] 5"
            ]
        );
    }
}
