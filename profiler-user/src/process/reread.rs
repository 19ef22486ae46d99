//! When a live process's mappings are read again: a sample of it ran code
//! outside the image stoke holds (a library it loaded since it was first
//! sampled, a Python extension, JIT code in new memory). Reads back off per
//! process, so that one whose stacks keep leading outside its mappings (a
//! stack walked into garbage) costs little.

use std::time::{Duration, Instant};

use foldhash::HashMap;

use super::image::{Mapping, ProcessImage};
use crate::model::Sample;

/// The first wait between two reads of a process's mappings: each read
/// doubles it, up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(100);

/// The longest wait between two reads of a process's mappings: a read of
/// its maps a minute at most.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// When each live process whose samples ran outside its image may have
/// its mappings read again.
#[derive(Debug, Default)]
pub struct Rereads {
    by_pid: HashMap<u32, Reread>,
}

#[derive(Clone, Copy, Debug)]
struct Reread {
    not_before: Instant,
    wait: Duration,
}

impl Rereads {
    /// Whether `sample` of the process of `image` calls for its mappings
    /// to be read now: it ran code outside them (not in a JVM's code
    /// cache, which holds none), and the process's last read is long
    /// enough ago. Saying yes counts as a read.
    pub fn due(&mut self, image: &ProcessImage, sample: &Sample) -> bool {
        if sample.in_code_cache {
            return false;
        }
        // Any frame: the unwinder steps through code it has no mapping of
        // by frame pointers, or stops there.
        let ran_outside = sample.user.iter().any(|pc| image.locate(*pc).is_none());
        if !ran_outside || image.kernel_thread {
            return false;
        }
        let now = Instant::now();
        let reread = self.by_pid.entry(sample.tgid).or_insert(Reread {
            not_before: now,
            wait: FIRST_WAIT,
        });
        if now < reread.not_before {
            return false;
        }
        reread.not_before = now + reread.wait;
        reread.wait = (reread.wait * 2).min(MAX_WAIT);
        true
    }

    /// Process `pid` ended (exited or exec'd).
    pub fn forget(&mut self, pid: u32) {
        self.by_pid.remove(&pid);
    }
}

/// Whether two lists of mappings are the same ranges of the same offsets.
pub fn same_mappings(a: &[Mapping], b: &[Mapping]) -> bool {
    let key = |mapping: &Mapping| (mapping.start, mapping.end, mapping.file_offset);
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| key(a) == key(b))
}
