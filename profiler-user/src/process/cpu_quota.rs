//! How often a cgroup's CPU quota throttled it: the `nr_periods` and
//! `nr_throttled` of the `cpu.stat` of a process's CPU cgroup (v1's cpu
//! hierarchy, else v2's), read under /sys/fs/cgroup, for `stoke report`.
//! The cgroup path comes from `/proc/PID/cgroup` (the host's view, as
//! stoke reads it): a path with a `..` component is refused.

use std::{
    collections::{hash_map::Entry, HashMap},
    fs,
    path::{Component, Path, PathBuf},
};

use super::cgroup::{self, MAX_CGROUP_FILE};
use crate::procfs;

/// Where cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Most bytes of a `cpu.stat` read: a dozen short lines.
const MAX_CPU_STAT: u64 = 4096;

/// A CPU cgroup's enforcement periods, and those it was throttled in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Throttling {
    /// Quota periods that elapsed with its threads runnable.
    pub periods: u64,
    /// Of those, the periods whose quota ran out.
    pub throttled: u64,
}

impl Throttling {
    /// What happened after `earlier`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            periods: self.periods.saturating_sub(earlier.periods),
            throttled: self.throttled.saturating_sub(earlier.throttled),
        }
    }

    /// The share of its periods it was throttled in; `None` with no period
    /// (no quota, or nothing ran).
    pub fn share(self) -> Option<f64> {
        (self.periods > 0).then(|| self.throttled.min(self.periods) as f64 / self.periods as f64)
    }

    /// The counts of a `cpu.stat` text; `None` without a quota's counts.
    fn parse(text: &str) -> Option<Self> {
        let value = |key: &str| {
            text.lines().find_map(|line| {
                let (name, value) = line.split_once(' ')?;
                (name == key).then(|| value.trim().parse().ok())?
            })
        };
        Some(Self {
            periods: value("nr_periods")?,
            throttled: value("nr_throttled")?,
        })
    }
}

/// The `cpu.stat` file of process `pid`'s CPU cgroup, if it has one.
pub fn cpu_stat_path(pid: u32) -> Option<PathBuf> {
    let (text, _) = procfs::read_bounded(format!("/proc/{pid}/cgroup"), MAX_CGROUP_FILE).ok()?;
    let file = stat_path(&String::from_utf8(text).ok()?)?;
    fs::symlink_metadata(&file)
        .is_ok_and(|metadata| metadata.is_file())
        .then_some(file)
}

/// Where the `cpu.stat` of the CPU cgroup in a `/proc/PID/cgroup` text
/// would be: under v1's hierarchy with the cpu controller, else v2's.
fn stat_path(text: &str) -> Option<PathBuf> {
    let mut v1 = None;
    let mut v2 = None;
    for (id, controllers, path) in cgroup::entries(text) {
        if controllers.split(',').any(|controller| controller == "cpu") {
            v1 = Some((controllers, path));
        } else if id == "0" && controllers.is_empty() {
            v2 = Some(("", path));
        }
    }
    let (hierarchy, path) = v1.or(v2)?;
    let relative = Path::new(path.trim_start_matches('/'));
    if relative
        .components()
        .any(|component| !matches!(component, Component::Normal(_)))
    {
        return None;
    }
    Some(
        Path::new(CGROUP_ROOT)
            .join(hierarchy)
            .join(relative)
            .join("cpu.stat"),
    )
}

/// The throttling counts in the `cpu.stat` file at `path`.
pub fn read(path: &Path) -> Option<Throttling> {
    let (text, _) = procfs::read_bounded(path, MAX_CPU_STAT).ok()?;
    Throttling::parse(&String::from_utf8_lossy(&text))
}

/// Every CPU cgroup's counts now, by its `cpu.stat` path, found through
/// the processes of `pids`.
pub fn snapshot(pids: impl IntoIterator<Item = u32>) -> HashMap<PathBuf, Throttling> {
    let mut counts = HashMap::new();
    for path in pids.into_iter().filter_map(cpu_stat_path) {
        if let Entry::Vacant(entry) = counts.entry(path) {
            if let Some(throttling) = read(entry.key()) {
                entry.insert(throttling);
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_stat_gives_periods_and_throttled_ones() {
        let v1 = "nr_periods 40\nnr_throttled 38\nthrottled_time 1900000000\n";
        let v2 = "usage_usec 100\nnr_periods 40\nnr_throttled 10\nthrottled_usec 5\n";
        let read = Throttling::parse(v1).unwrap();
        assert_eq!(
            read,
            Throttling {
                periods: 40,
                throttled: 38
            }
        );
        assert_eq!(Throttling::parse(v2).unwrap().share(), Some(0.25));
        assert_eq!(Throttling::parse("usage_usec 100\n"), None);
        let earlier = Throttling {
            periods: 30,
            throttled: 28,
        };
        assert_eq!(read.since(earlier).share(), Some(1.0));
        assert_eq!(Throttling::default().share(), None);
    }

    #[test]
    fn the_cpu_hierarchy_is_found_and_never_left() {
        let hybrid = "12:cpu,cpuacct:/docker/abc\n0::/system.slice/docker-abc.scope\n";
        assert_eq!(
            stat_path(hybrid).unwrap(),
            Path::new("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.stat")
        );
        assert_eq!(
            stat_path("0::/kubepods/pod1/c2\n").unwrap(),
            Path::new("/sys/fs/cgroup/kubepods/pod1/c2/cpu.stat")
        );
        assert_eq!(stat_path("0::/a/../../etc\n"), None);
        assert_eq!(stat_path("3:memory:/a\n"), None);
    }
}
