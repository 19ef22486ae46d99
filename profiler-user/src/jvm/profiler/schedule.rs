//! When to look at a sampled process for a JVM, and at a JVM for its
//! agent: JVMs among the targets before sampling, each process at its
//! first samples, a starting JVM (a java launcher, or a JVM too early for
//! an attach) again on a schedule of its own; and what an attach's result
//! makes of the JVM.

use std::time::{Duration, Instant};

use anyhow::Result;
use foldhash::{HashMap, HashMapExt};
use profiler_common::jvm::{AgentState, SIGNAL};

use super::{dropped::Dropped, Attached, JavaProfiler, Jvm};
use crate::{
    jvm::{
        agent_memory::AgentMemory,
        attach,
        coverage::MAX_JVMS_TIMED,
        java_events::{ClassNames, EventStacks},
        symbols::JavaSymbols,
        thread_ids::ThreadIds,
    },
    process::ProcessImage,
    sample::{
        monotonic_ns,
        sampler::{Sampler, SignalsRefused},
    },
};

/// How often a process that is no JVM (yet) is looked at again.
const MAX_RECHECKS: u32 = 6;

/// Processes older than this at a later look without libjvm.so are not
/// looked at again: the java launcher maps it within a fraction of a
/// second of its start.
const STARTING_AGE: Duration = Duration::from_secs(5);

/// How often an attach is retried while the JVM is still starting, and a
/// java launcher looked at for its libjvm.so: over 6.3 s
/// ([`Recheck::soon`]).
const MAX_SOON_LOOKS: u32 = 30;

/// The first steps between looks at a starting JVM: HotSpot sets its
/// attach mechanism up some tens of milliseconds after its start and
/// takes agents soon after.
const SOON_STEP: Duration = Duration::from_millis(20);

/// Looks at a starting JVM before the step between them doubles.
const SOON_LOOKS_PER_STEP: u32 = 5;

/// When to look at a process again.
#[derive(Clone, Copy, Debug)]
pub(super) enum Recheck {
    /// A JVM already handled, or a process that stayed no JVM.
    Never,
    /// Not before `when`; `attempts` looks so far; `soon` for a JVM
    /// starting, which the recording wakes for ([`JavaProfiler::next_look`]).
    At {
        when: Instant,
        attempts: u32,
        soon: bool,
    },
}

impl Recheck {
    /// After `attempts` looks: again in 0.2, 0.4, 0.8... seconds, then never.
    pub(super) fn after(attempts: u32) -> Self {
        if attempts >= MAX_RECHECKS {
            return Self::Never;
        }
        Self::At {
            when: Instant::now() + Duration::from_millis(200 << attempts),
            attempts: attempts + 1,
            soon: false,
        }
    }

    /// After `attempts` looks at a JVM starting (a java launcher that has
    /// not mapped libjvm.so yet, or a JVM too early for an attach): again
    /// in 20 ms five times, then 40 ms five times, and so on, doubling;
    /// never after [`MAX_SOON_LOOKS`]. A loaded host slows a JVM's start
    /// by seconds; each step waited is time its samples keep no Java
    /// frames.
    pub(super) fn soon(attempts: u32) -> Self {
        if attempts >= MAX_SOON_LOOKS {
            return Self::Never;
        }
        Self::At {
            when: Instant::now() + SOON_STEP * (1 << (attempts / SOON_LOOKS_PER_STEP)),
            attempts: attempts + 1,
            soon: true,
        }
    }
}

impl JavaProfiler {
    /// Before sampling starts: adopts the agents already loaded into the
    /// JVMs among `pids` (by an earlier stoke), so that their first samples
    /// get Java stacks too, and starts loading one into the other JVMs
    /// among them. Processes not listed are found through their samples.
    pub fn adopt_before_sampling(&mut self, pids: &[u32], sampler: &mut Sampler) -> Result<()> {
        if self.to_attach.is_none() {
            return Ok(());
        }
        for &pid in pids {
            if self.considered.contains_key(&pid) || maps_libjvm(pid) != Some(true) {
                continue;
            }
            self.considered.insert(pid, Recheck::Never);
            let started = Instant::now();
            let began_ns = monotonic_ns();
            match AgentMemory::find(pid) {
                Ok(Some(memory)) if memory.state() == AgentState::Ready => {
                    let attached = Attached {
                        pid,
                        result: Ok(memory),
                        took: started.elapsed(),
                        began_ns,
                    };
                    self.profile_attached(attached, sampler)?;
                }
                // No agent yet, or one to wait for or to report on: the
                // attach thread's work.
                _ => self.ask_attach(pid),
            }
        }
        Ok(())
    }

    /// Hands JVM `pid` to the attach thread; its samples wait for the agent.
    pub(super) fn ask_attach(&mut self, pid: u32) {
        // One attach at a time per JVM, and none of a JVM profiled already:
        // a second would read the agent again, in a consumer slot of its
        // own. An attach in flight when the process exec'd is answered
        // first: if it began before the exec, the new image is looked at
        // again then
        // ([`Self::profile_attached`]): the maps of a sample taken before an
        // exec (a fork about to exec java) may be read after it.
        let profiled = self.jvms.contains_key(&pid) && !self.ended.contains(&pid);
        if profiled || self.attaching.contains(&pid) {
            return;
        }
        if let Some(to_attach) = &self.to_attach {
            if to_attach.send(pid).is_ok() {
                self.attaching.insert(pid);
                self.coverage.awaiting_agent(pid);
            }
        }
    }

    /// A process was sampled: if it is a JVM not attached yet, load the
    /// agent into it. `image` is the process's memory map as the registry
    /// holds it: a starting JVM maps libjvm.so after its first sample, and
    /// its image is read again once it runs code it mapped since (see
    /// `ProcessRegistry::image_of`), so later looks read nothing either.
    pub fn look_for_jvm(&mut self, pid: u32, image: &ProcessImage) {
        if self.to_attach.is_none() {
            return;
        }
        let attempts = match self.considered.get(&pid) {
            None => 0,
            // A JVM starting is looked at on time ([`Self::look_at_starting`]).
            Some(Recheck::Never | Recheck::At { soon: true, .. }) => return,
            Some(Recheck::At { when, .. }) if Instant::now() < *when => return,
            Some(Recheck::At { attempts, .. }) => *attempts,
        };
        // Older than a starting JVM at a later look and still none: no
        // JVM to be.
        let too_old = attempts > 0
            && image
                .started
                .is_some_and(|started| started.elapsed() > STARTING_AGE);
        let is_jvm = (!too_old).then(|| {
            image
                .mapped_names()
                .any(|name| attach::is_libjvm(name.as_bytes()))
        });
        match is_jvm {
            Some(true) => {
                self.considered.insert(pid, Recheck::Never);
                self.ask_attach(pid);
            }
            Some(false) => {
                let launcher = image
                    .mapped_names()
                    .any(|name| attach::is_java_launcher(name.as_bytes()));
                let recheck = if launcher {
                    Recheck::soon(attempts)
                } else {
                    Recheck::after(attempts)
                };
                self.considered.insert(pid, recheck);
            }
            // No JVM to be.
            None => {
                self.considered.insert(pid, Recheck::Never);
            }
        }
    }

    /// The JVMs starting whose next look has come ([`Recheck::soon`]),
    /// looked at on time, not at their next sample: at the moment it is
    /// due, none may have come since the last drain. A JVM an attach found
    /// too early is attached again; a launcher, once `/proc` shows it maps
    /// libjvm.so.
    pub(super) fn look_at_starting(&mut self) {
        let now = Instant::now();
        let due: Vec<(u32, u32)> = self
            .considered
            .iter()
            .filter_map(|(&pid, recheck)| match *recheck {
                Recheck::At {
                    when,
                    attempts,
                    soon: true,
                } if when <= now => Some((pid, attempts)),
                _ => None,
            })
            .collect();
        for (pid, attempts) in due {
            // The attach checks the maps itself.
            let is_jvm = if self.attach_retries.contains_key(&pid) {
                Some(true)
            } else {
                maps_libjvm(pid)
            };
            match is_jvm {
                Some(true) => {
                    self.considered.insert(pid, Recheck::Never);
                    self.ask_attach(pid);
                }
                Some(false) => {
                    self.considered.insert(pid, Recheck::soon(attempts));
                }
                // Gone: its exit record is on its way.
                None => {
                    self.considered.insert(pid, Recheck::Never);
                }
            }
        }
    }

    /// When a JVM starting is next looked at, if one is: the caller should
    /// take in what came then rather than at its next drain (a quarter of
    /// a second of Java frames lost for each look).
    pub fn next_look(&self) -> Option<Instant> {
        let now = Instant::now();
        self.considered
            .values()
            .filter_map(|recheck| match *recheck {
                Recheck::At {
                    when, soon: true, ..
                } if when > now => Some(when),
                _ => None,
            })
            .min()
    }

    /// Starts taking Java stacks from a JVM whose agent is ready, or says
    /// why it keeps native stacks (or retries one still starting).
    pub(super) fn profile_attached(
        &mut self,
        attached: Attached,
        sampler: &mut Sampler,
    ) -> Result<()> {
        let pid = attached.pid;
        match attached.result {
            Ok(mut memory) => {
                self.attach_retries.remove(&pid);
                if let Err(refused) = sampler.allow_signals(
                    pid,
                    SIGNAL as u32,
                    memory.code_cache(),
                    attached.began_ns,
                ) {
                    self.coverage.agent_answered(pid, false);
                    if matches!(refused, SignalsRefused::Ended) {
                        // The agent found was the image's before an exec
                        // (or the process is gone): the next sample of a
                        // new image looks at it anew.
                        self.considered.remove(&pid);
                    } else {
                        self.warn_native_only(pid, &refused.to_string());
                    }
                    return Ok(());
                }
                self.coverage.agent_answered(pid, true);
                // A JVM of a pid whose earlier process ended: not to release.
                self.ended.retain(|&ended| ended != pid);
                let settings = self.event_settings;
                if settings.wanted != 0 {
                    memory.want_java_events(
                        settings.wanted,
                        settings.alloc_interval,
                        settings.lock_threshold_ns,
                    );
                }
                let java_events_dropped = memory.java_events_dropped();
                self.summary.jvms += 1;
                if self.summary.attach_ms.len() < MAX_JVMS_TIMED {
                    self.summary
                        .attach_ms
                        .push((pid, attached.took.as_millis() as u64));
                }
                self.jvms.insert(
                    pid,
                    Jvm {
                        memory,
                        symbols: JavaSymbols::default(),
                        threads: ThreadIds::of(pid),
                        dropped: Dropped::default(),
                        signalled: true,
                        cut_short: HashMap::new(),
                        java_events_dropped,
                        classes: ClassNames::default(),
                        event_stacks: EventStacks::default(),
                    },
                );
            }
            Err(error) => {
                let starting = error
                    .downcast_ref::<attach::AttachError>()
                    .is_some_and(attach::AttachError::jvm_starting);
                // Attach errors name the JVM themselves: name it once.
                let message = format!("{error:#}");
                let own_name = format!("JVM {pid}");
                let reason = message
                    .strip_prefix(&own_name)
                    .map_or(message.as_str(), |rest| rest.trim_start_matches([':', ' ']));
                let (attempts, last) = self.attach_retries.entry(pid).or_default();
                if starting && *attempts < MAX_SOON_LOOKS {
                    // A JVM still starting has no SIGQUIT handler, no
                    // attach mechanism or no JVMTI yet.
                    self.considered.insert(pid, Recheck::soon(*attempts));
                    *attempts += 1;
                    *last = reason.to_owned();
                    return Ok(());
                }
                self.attach_retries.remove(&pid);
                self.coverage.agent_answered(pid, false);
                self.warn_native_only(pid, reason);
            }
        }
        Ok(())
    }
}

/// Whether process `pid` maps libjvm.so (as code); `None` if it is gone.
/// Any JVM, OpenJ9's too: the attach then tells the user it is not
/// HotSpot (`attach`'s own check), rather than its samples staying
/// native without a word.
pub(crate) fn maps_libjvm(pid: u32) -> Option<bool> {
    let maps = crate::process::maps::executable(pid).ok()?;
    Some(
        maps.iter()
            .any(|map| attach::is_libjvm(map.path.as_bytes())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long from now a recheck waits, its looks so far and whether it
    /// is soon; `None` for never.
    fn wait(recheck: Recheck) -> Option<(Duration, u32, bool)> {
        match recheck {
            Recheck::Never => None,
            Recheck::At {
                when,
                attempts,
                soon,
            } => Some((
                when.saturating_duration_since(Instant::now()),
                attempts,
                soon,
            )),
        }
    }

    /// Whether `waited` is `expected`, less the moments since it was set.
    fn about(waited: Duration, expected: Duration) -> bool {
        waited <= expected && waited + Duration::from_millis(50) > expected
    }

    #[test]
    fn a_process_that_is_no_jvm_is_looked_at_again_less_and_less_often() {
        for attempts in 0..MAX_RECHECKS {
            let (waited, looks, soon) = wait(Recheck::after(attempts)).unwrap();
            assert!(about(waited, Duration::from_millis(200 << attempts)));
            assert_eq!((looks, soon), (attempts + 1, false));
        }
        assert!(wait(Recheck::after(MAX_RECHECKS)).is_none());
    }

    #[test]
    fn a_starting_jvm_is_looked_at_every_20_ms_then_ever_less_often_for_6_3_s() {
        let mut total = Duration::ZERO;
        for attempts in 0..MAX_SOON_LOOKS {
            let (waited, looks, soon) = wait(Recheck::soon(attempts)).unwrap();
            let step = SOON_STEP * (1 << (attempts / SOON_LOOKS_PER_STEP));
            assert!(
                about(waited, step),
                "look {attempts}: {waited:?}, {step:?} wanted"
            );
            assert_eq!((looks, soon), (attempts + 1, true));
            total += step;
        }
        assert_eq!(total, Duration::from_millis(6300));
        assert!(wait(Recheck::soon(MAX_SOON_LOOKS)).is_none());
    }
}
