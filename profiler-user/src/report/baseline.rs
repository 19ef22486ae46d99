//! The report's comparison with a baseline: a folded profile (from Stoke or
//! any tool writing collapsed stacks) taken when the host was healthy. Each
//! side is normalized by its own total, so recordings of different lengths
//! or rates compare; the table ranks functions by how much their share of
//! the CPU (as the sampled function, "self") grew or shrank.

use std::{collections::HashMap, fs::File, io::Read, path::Path, sync::Arc};

use anyhow::{bail, Context, Result};

use crate::profile::Profile;

/// The largest baseline read: a folded file of a busy host for minutes is
/// tens of MB.
const MAX_BASELINE_BYTES: u64 = 512 << 20;

/// Rows of the changes table.
pub const MAX_CHANGES: usize = 30;

/// One function whose share of the samples changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub name: Arc<str>,
    /// Its self share in the baseline, 0 to 1.
    pub before: f64,
    /// Its self share now.
    pub after: f64,
}

/// Self samples by function of a baseline.
#[derive(Debug, Default)]
pub struct Baseline {
    leaves: HashMap<Arc<str>, u64>,
    total: u64,
}

impl Baseline {
    /// Reads the folded file at `path`.
    pub fn read(path: &Path) -> Result<Self> {
        let what = || format!("--baseline {}", path.display());
        let file = File::open(path).with_context(what)?;
        let size = file.metadata().with_context(what)?.len();
        if size > MAX_BASELINE_BYTES {
            bail!(
                "--baseline {}: {} MB, more than the {} MB read; give a shorter profile",
                path.display(),
                size >> 20,
                MAX_BASELINE_BYTES >> 20
            );
        }
        let mut text = String::new();
        file.take(MAX_BASELINE_BYTES)
            .read_to_string(&mut text)
            .with_context(|| format!("{}: not a folded profile (not UTF-8 text)", what()))?;
        Self::parse(&text).with_context(what)
    }

    /// Parses collapsed stacks, `frame;frame;... COUNT` per line.
    pub fn parse(text: &str) -> Result<Self> {
        let mut baseline = Self::default();
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let parsed = line.rsplit_once(' ').and_then(|(stack, count)| {
                Some((stack.rsplit(';').next()?, count.trim().parse::<u64>().ok()?))
            });
            let Some((leaf, count)) = parsed else {
                bail!(
                    "line {} is not `frame;frame;... COUNT`: is it a folded profile?",
                    number + 1
                );
            };
            *baseline.leaves.entry(Arc::from(leaf)).or_default() += count;
            baseline.total += count;
        }
        if baseline.total == 0 {
            bail!("no samples in it");
        }
        Ok(baseline)
    }

    /// The functions whose self share changed most between the baseline and
    /// `profile`, biggest change first.
    pub fn changes(&self, profile: &Profile) -> Vec<Change> {
        let mut now: HashMap<Arc<str>, u64> = HashMap::new();
        let mut total = 0;
        for stack in &profile.stacks {
            if let Some(leaf) = stack.frames.last() {
                *now.entry(leaf.clone()).or_default() += stack.samples;
                total += stack.samples;
            }
        }
        let share = |count: u64, total: u64| count as f64 / total.max(1) as f64;
        let mut changes: Vec<Change> = self
            .leaves
            .keys()
            .chain(now.keys())
            .collect::<std::collections::HashSet<_>>()
            .into_iter()
            .map(|name| Change {
                name: name.clone(),
                before: share(self.leaves.get(name).copied().unwrap_or(0), self.total),
                after: share(now.get(name).copied().unwrap_or(0), total),
            })
            .collect();
        changes.sort_by(|a, b| {
            let size = |change: &Change| (change.after - change.before).abs();
            size(b).total_cmp(&size(a)).then(a.name.cmp(&b.name))
        });
        changes.truncate(MAX_CHANGES);
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::FoldedStack;

    #[test]
    fn changes_are_normalized_by_totals_and_ranked() {
        let baseline = Baseline::parse("p;main;a 90\np;main;b 10\n\n").unwrap();
        let stack = |leaf: &str, samples| FoldedStack {
            frames: vec![Arc::from("p"), Arc::from(leaf)],
            context_frames: 1,
            samples,
            events: samples,
            labels: Arc::new([]),
            modules: Box::new([]),
        };
        let profile = Profile {
            stacks: vec![stack("a", 5), stack("b", 15)],
            ..Profile::default()
        };
        let changes = baseline.changes(&profile);
        assert_eq!(changes.len(), 2);
        assert_eq!(&*changes[0].name, "a");
        assert!((changes[0].before - 0.9).abs() < 1e-9 && (changes[0].after - 0.25).abs() < 1e-9);
        assert!((changes[1].after - 0.75).abs() < 1e-9);
    }

    #[test]
    fn what_is_not_folded_is_refused_with_its_line() {
        let error = Baseline::parse("a;b 1\n<html>\n").unwrap_err().to_string();
        assert!(error.contains("line 2"), "{error}");
        assert!(Baseline::parse("").is_err());
    }
}
