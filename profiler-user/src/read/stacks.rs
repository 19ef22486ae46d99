//! The stacks a reader collects, within bounds that a hostile file cannot
//! push past: frames per stack (longer stacks are cut, their root side
//! kept), distinct stacks, frames held in all, and counts whose total
//! stays within a `u64` (so that every sum of them made later does too).

use std::{
    collections::{hash_map::Entry, HashMap},
    path::Path,
    sync::Arc,
};

use crate::model::{FoldedStack, Profile};

/// The most frames a stack keeps: the outermost ones.
pub const MAX_FRAMES: usize = 4096;
/// The most distinct stacks a profile may have.
pub const MAX_STACKS: usize = 1 << 20;
/// The most frames all stacks may hold together.
pub const MAX_FRAMES_HELD: usize = 64 << 20;

/// Why a stack could not be taken in.
#[derive(Debug, thiserror::Error)]
pub enum Full {
    #[error("more than {MAX_STACKS} distinct stacks, the most a profile may have")]
    Stacks,
    #[error("more than {MAX_FRAMES_HELD} frames in all its stacks, the most a profile may have")]
    Frames,
}

/// Stacks with their samples and what else a reader keeps of them (`V`).
pub struct Stacks<V> {
    counts: HashMap<Vec<Arc<str>>, (u64, V)>,
    frames_held: usize,
    total: u64,
    /// Stacks (as added, not distinct) cut to [`MAX_FRAMES`].
    cut: u64,
    /// Whether counts were held back to keep the total within a `u64`.
    saturated: bool,
}

impl<V> Default for Stacks<V> {
    fn default() -> Self {
        Self {
            counts: HashMap::new(),
            frames_held: 0,
            total: 0,
            cut: 0,
            saturated: false,
        }
    }
}

impl<V> Stacks<V> {
    /// Adds `samples` to the stack `frames` (root first), with `value`
    /// made for it if it is new.
    pub fn add(
        &mut self,
        mut frames: Vec<Arc<str>>,
        samples: u64,
        value: impl FnOnce() -> V,
    ) -> Result<(), Full> {
        if frames.len() > MAX_FRAMES {
            frames.truncate(MAX_FRAMES);
            self.cut += 1;
        }
        let room = u64::MAX - self.total;
        if samples > room {
            self.saturated = true;
        }
        let samples = samples.min(room);
        let distinct = self.counts.len();
        match self.counts.entry(frames) {
            Entry::Occupied(mut entry) => entry.get_mut().0 += samples,
            Entry::Vacant(entry) => {
                if distinct >= MAX_STACKS {
                    return Err(Full::Stacks);
                }
                self.frames_held += entry.key().len();
                if self.frames_held > MAX_FRAMES_HELD {
                    return Err(Full::Frames);
                }
                entry.insert((samples, value()));
            }
        }
        self.total += samples;
        Ok(())
    }

    /// What the reader of `path` warns about: cut stacks, held counts.
    pub fn warnings(&self, path: &Path) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.cut > 0 {
            warnings.push(format!(
                "{}: {} stacks had more than {MAX_FRAMES} frames: cut to their {MAX_FRAMES} outermost",
                path.display(),
                self.cut
            ));
        }
        if self.saturated {
            warnings.push(format!(
                "{}: its counts add up past {}: held there",
                path.display(),
                u64::MAX
            ));
        }
        warnings
    }

    /// The profile of these stacks, each made by `stack` from its frames,
    /// samples and value.
    pub fn into_profile(self, stack: impl Fn(Vec<Arc<str>>, u64, V) -> FoldedStack) -> Profile {
        let mut profile = Profile::default();
        profile.summary.samples = self.total;
        profile.stacks = self
            .counts
            .into_iter()
            .map(|(frames, (samples, value))| stack(frames, samples, value))
            .collect();
        profile
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|&name| Arc::from(name)).collect()
    }

    #[test]
    fn long_stacks_keep_their_root_side_and_are_counted() {
        let mut stacks = Stacks::<()>::default();
        let long: Vec<String> = (0..MAX_FRAMES + 5).map(|i| i.to_string()).collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        stacks.add(frames(&long), 1, || ()).unwrap();
        stacks.add(frames(&long), 1, || ()).unwrap();
        assert_eq!(stacks.cut, 2);
        let warnings = stacks.warnings(Path::new("f"));
        let profile = stacks.into_profile(|frames, samples, ()| FoldedStack {
            context_frames: 0,
            frames,
            samples,
            labels: Arc::new([]),
            modules: Box::new([]),
        });
        assert_eq!(profile.stacks.len(), 1);
        let stack = &profile.stacks[0];
        assert_eq!((stack.frames.len(), stack.samples), (MAX_FRAMES, 2));
        assert_eq!(
            (&*stack.frames[0], &*stack.frames[MAX_FRAMES - 1]),
            ("0", "4095")
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn the_total_saturates_at_the_edge() {
        let mut stacks = Stacks::<()>::default();
        stacks.add(frames(&["a"]), u64::MAX - 1, || ()).unwrap();
        stacks.add(frames(&["b"]), 1, || ()).unwrap();
        assert!(!stacks.saturated, "exactly u64::MAX fits");
        stacks.add(frames(&["a"]), 1, || ()).unwrap();
        assert!(stacks.saturated);
        assert_eq!(stacks.total, u64::MAX);
        assert_eq!(stacks.counts[&frames(&["a"])].0, u64::MAX - 1);
    }

    #[test]
    fn distinct_stacks_are_bounded() {
        let mut stacks = Stacks::<()>::default();
        for count in 0..MAX_STACKS {
            let frames = vec![Arc::from(count.to_string())];
            if let Err(full) = stacks.add(frames, 1, || ()) {
                panic!("stack {count}: {full}");
            }
        }
        let error = stacks.add(frames(&["one more"]), 1, || ()).unwrap_err();
        assert!(matches!(error, Full::Stacks), "{error}");
    }
}
