//! The report's comparison with a baseline: a profile (folded stacks from
//! Stoke or any tool, or pprof) taken when the host was healthy. Each side
//! is normalized by its own total, so recordings of different lengths or
//! rates compare; the table ranks functions by how much their share of the
//! samples (as the sampled function, "self") grew or shrank.

use std::{collections::HashMap, path::Path, sync::Arc};

use anyhow::{bail, Context, Result};

use crate::{aggregate::diff::diff, model::Profile, read::read_profile, write::write_diff_html};

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

/// A baseline: its profile, and its self samples by function.
#[derive(Debug, Default)]
pub struct Baseline {
    /// The file's name, as the differential flame graph calls it.
    name: String,
    profile: Profile,
    leaves: HashMap<Arc<str>, u64>,
    total: u64,
}

/// Self samples by function of `profile`, and their total.
fn leaves(profile: &Profile) -> (HashMap<Arc<str>, u64>, u64) {
    let mut leaves: HashMap<Arc<str>, u64> = HashMap::new();
    let mut total = 0u64;
    for stack in &profile.stacks {
        if let Some(leaf) = stack.frames.last() {
            let leaf = leaves.entry(leaf.clone()).or_default();
            *leaf = leaf.saturating_add(stack.samples);
            total = total.saturating_add(stack.samples);
        }
    }
    (leaves, total)
}

impl Baseline {
    /// Reads the folded or pprof file at `path`.
    pub fn read(path: &Path) -> Result<Self> {
        let profile = read_profile(path).context("--baseline")?;
        let (leaves, total) = leaves(&profile);
        if total == 0 {
            bail!(
                "--baseline {}: no samples in it: give a folded or pprof profile",
                path.display()
            );
        }
        Ok(Self {
            name: path.display().to_string(),
            profile,
            leaves,
            total,
        })
    }

    /// The differential flame graph page of `profile` against the
    /// baseline (`stoke diff`'s): the stacks of now, coloured by how their
    /// share changed.
    pub fn flame_graph(&self, profile: &Profile) -> Result<String> {
        let diff = diff(&self.profile, profile, self.name.clone(), "now".to_owned());
        let mut html = Vec::new();
        write_diff_html(&diff, &mut html)?;
        Ok(String::from_utf8_lossy(&html).into_owned())
    }

    /// The functions whose self share changed most between the baseline and
    /// `profile`, biggest change first.
    pub fn changes(&self, profile: &Profile) -> Vec<Change> {
        let (now, total) = leaves(profile);
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
    use crate::model::FoldedStack;

    #[test]
    fn changes_are_normalized_by_totals_and_ranked() {
        let stack = |leaf: &str, samples| FoldedStack {
            frames: vec![Arc::from("p"), Arc::from(leaf)],
            context_frames: 1,
            samples,
            labels: Arc::new([]),
            modules: Box::new([]),
        };
        let profile = |stacks| Profile {
            stacks,
            ..Profile::default()
        };
        let (leaves, total) = leaves(&profile(vec![stack("a", 90), stack("b", 10)]));
        let baseline = Baseline {
            leaves,
            total,
            ..Baseline::default()
        };
        let changes = baseline.changes(&profile(vec![stack("a", 5), stack("b", 15)]));
        assert_eq!(changes.len(), 2);
        assert_eq!(&*changes[0].name, "a");
        assert!((changes[0].before - 0.9).abs() < 1e-9 && (changes[0].after - 0.25).abs() < 1e-9);
        assert!((changes[1].after - 0.75).abs() < 1e-9);
    }
}
