//! The Java stacks an agent sent that stoke dropped, counted by why, and
//! said when a real agent would not have sent them.

use crate::model::JavaSummary;

/// Java stacks an agent sent that stoke dropped, by why.
#[derive(Debug, Default)]
pub(super) struct Dropped {
    pub(super) future: u64,
    pub(super) stale: u64,
    pub(super) unknown_thread: u64,
    pub(super) full: u64,
    /// Overwritten in the agent's ring before stoke read them, or never
    /// written: no sign of trouble, the ring serves every stoke at its own
    /// pace.
    pub(super) lost: u64,
}

impl Dropped {
    /// Adds the counts to the recording's summary, all JVMs together.
    pub(super) fn count_in(&self, summary: &mut JavaSummary, events: u64) {
        for (reason, count) in [
            ("timed in the future", self.future),
            ("before the pairing window", self.stale),
            ("of unknown threads", self.unknown_thread),
            ("beyond the bound of held stacks", self.full),
            ("lost in the agent's ring", self.lost),
        ] {
            if count > 0 {
                *summary.dropped_stacks.entry(reason).or_default() += count;
            }
        }
        summary.dropped_code_events += events;
    }

    /// Says what was dropped, with the `events` of the agent's log left
    /// out, if a real agent would not have sent it: stacks timed in the
    /// future, more stacks than the bounds hold, more code than the code
    /// map holds. Stale stacks (left by an earlier stoke) and stacks of
    /// threads gone meanwhile are no sign of trouble, and only counted
    /// then.
    pub(super) fn warn(&self, pid: u32, events: u64) {
        if self.future + self.full + events == 0 {
            return;
        }
        let total = self.future + self.stale + self.unknown_thread + self.full;
        eprintln!(
            "stoke: warning: JVM {pid}: dropped {total} Java stacks its agent sent ({} timed in the future, {} before the pairing window, {} of unknown threads, {} beyond the bound of held stacks) and {events} code events beyond the code map's bounds",
            self.future, self.stale, self.unknown_thread, self.full
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_stacks_add_up_by_reason_over_jvms() {
        let mut summary = JavaSummary::default();
        let one = Dropped {
            stale: 3,
            lost: 2,
            ..Dropped::default()
        };
        let other = Dropped {
            stale: 1,
            future: 4,
            ..Dropped::default()
        };
        one.count_in(&mut summary, 5);
        other.count_in(&mut summary, 0);
        let counted: Vec<(&str, u64)> = summary
            .dropped_stacks
            .iter()
            .map(|(&reason, &count)| (reason, count))
            .collect();
        assert_eq!(counted.len(), 3, "no reason counted without a stack");
        for (reason, count) in [
            ("before the pairing window", 4),
            ("lost in the agent's ring", 2),
            ("timed in the future", 4),
        ] {
            assert!(counted.contains(&(reason, count)), "{reason}: {counted:?}");
        }
        assert_eq!(summary.dropped_code_events, 5);
    }
}
