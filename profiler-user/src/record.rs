//! `stoke record`: runs the stages in order. While recording, samples come
//! in, their processes are registered (and their files' unwind tables
//! loaded), JVM samples get their Java frames, and the raw stacks are
//! counted; after it, every distinct address is named once, and the named
//! stacks are folded and written.

use std::{
    path::Path,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant, SystemTime},
};

use anyhow::Result;
use profiler_common::Counter;
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::{
    aggregate::{AggregateOptions, Aggregator},
    cli::RecordArgs,
    jvm::{
        profiler::{JavaProfiler, JavaResults},
        MergedSample,
    },
    preflight,
    process::ProcessRegistry,
    profile::{Profile, RecordingSummary},
    progress::Progress,
    sample::{
        ring_record::Record,
        sampler::{Sampler, SamplerConfig},
    },
    symbolize::{names::AddressNames, Symbolizer},
    unwind::loader::UnwindLoader,
    write::OutputPlan,
};

/// Longest wait between two drains of the ring buffer when nothing wakes
/// the reader: it bounds the memory the ring needs and the progress lag.
const DRAIN_INTERVAL: Duration = Duration::from_millis(250);

/// Rows of compiled unwind tables the BPF map holds (16 bytes each): room
/// for libc, libjvm and a few hundred other libraries.
const UNWIND_ROWS: u32 = 1 << 20;

/// The wait while a JVM is being attached, so that its agent is put to use
/// as soon as it is ready.
const ATTACH_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Records as `args` says and writes the profile.
pub fn run(args: &RecordArgs) -> Result<()> {
    let outputs = OutputPlan::new(&args.outputs, args.format)?;
    preflight::check_frequency(args.frequency)?;
    preflight::check_privileges()?;
    preflight::check_btf()?;
    preflight::check_pids(&args.pids)?;
    // Opened now, so that a bad path fails before the recording, not after;
    // named only once written whole.
    let outputs = outputs.create()?;
    raise_open_file_limit();
    let stop = stop_on_signals()?;

    let mut recording = Recording::start(args)?;
    announce(args, recording.sampler.cpus().len());
    recording.sample_until(&stop, args)?;
    let profile = recording.finish(args)?;

    let written = outputs.names();
    outputs.write(&profile)?;
    eprintln!(
        "stoke: {} samples from {} processes in {:.1} s ({} lost), written to {}",
        profile.summary.samples,
        profile.summary.processes,
        profile.summary.duration.as_secs_f64(),
        profile.summary.lost(),
        written
    );
    Ok(())
}

/// The flag SIGINT and SIGTERM raise; a second one ends stoke at once,
/// without output.
fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, stop.clone())?;
        signal_hook::flag::register(signal, stop.clone())?;
    }
    Ok(stop)
}

/// The stages of a recording while samples come in.
struct Recording {
    sampler: Sampler,
    /// Every sampled process's mappings, lent to the other stages.
    processes: ProcessRegistry,
    /// `None` with `--frame-pointers`.
    unwinder: Option<UnwindLoader>,
    /// Process images handed to the unwinder so far.
    images_loaded: usize,
    aggregator: Aggregator,
    java: JavaProfiler,
    /// Ring records that did not parse (a bug of ours, never the ring
    /// being full).
    malformed: u64,
    started: Instant,
}

impl Recording {
    fn start(args: &RecordArgs) -> Result<Self> {
        let mut sampler = Sampler::start(&SamplerConfig {
            frequency_hz: args.frequency,
            pids: (!args.pids.is_empty()).then(|| args.pids.clone()),
            include_idle: args.idle,
            bpf_stats: args.bpf_stats,
            unwind_rows: if args.frame_pointers { 0 } else { UNWIND_ROWS },
        })?;
        let unwinder = if args.frame_pointers {
            None
        } else {
            let (rows, processes) = sampler.take_unwind_maps()?;
            Some(UnwindLoader::start(rows, processes)?)
        };
        Ok(Self {
            sampler,
            processes: ProcessRegistry::default(),
            unwinder,
            images_loaded: 0,
            aggregator: Aggregator::new(AggregateOptions {
                threads: args.threads,
                lines: args.lines,
                group_by: args.group_by,
            }),
            java: JavaProfiler::new(!args.no_jvm, args.java_retransform),
            malformed: 0,
            started: Instant::now(),
        })
    }

    /// Takes samples in until `stop` is raised, the duration is over, or
    /// every `-p` target has exited.
    fn sample_until(&mut self, stop: &AtomicBool, args: &RecordArgs) -> Result<()> {
        let progress = Progress::start(args.duration);
        loop {
            self.take_in()?;
            let elapsed = self.started.elapsed();
            let remaining = args
                .duration
                .map(|duration| duration.saturating_sub(elapsed));
            if stop.load(Ordering::Relaxed)
                || remaining.is_some_and(|left| left.is_zero())
                || all_exited(&args.pids)
            {
                break;
            }
            if progress.is_shown() {
                let counters = self.sampler.counters()?;
                progress.update(
                    elapsed,
                    self.aggregator.samples(),
                    self.processes.len(),
                    counters[Counter::LostRingFull as usize],
                );
            }
            let interval = if self.java.attaching() {
                ATTACH_POLL_INTERVAL
            } else {
                DRAIN_INTERVAL
            };
            self.sampler
                .wait(remaining.map_or(interval, |left| left.min(interval)));
        }
        progress.finish();
        Ok(())
    }

    /// Drains the ring into the stages: each sample's process to the
    /// registry (new ones to the unwinder), samples to aggregation (or to
    /// the Java side, to wait for their Java stacks), exec and exit to the
    /// registry and the unwinder.
    fn take_in(&mut self) -> Result<()> {
        let Self {
            sampler,
            processes,
            unwinder,
            aggregator,
            java,
            malformed,
            ..
        } = self;
        sampler.drain(|bytes| match Record::parse(bytes) {
            Ok(Record::Sample(sample)) => {
                let pid = sample.tgid;
                let image = processes.image_for(pid, &sample.comm);
                java.look_for_jvm(pid, processes.image(image));
                if sample.signalled {
                    java.await_java_stack(sample);
                } else {
                    aggregator.add(MergedSample::native(image, sample));
                }
            }
            Ok(Record::Exec { tgid } | Record::Exit { tgid }) => {
                processes.forget(tgid);
                if let Some(unwinder) = unwinder.as_ref() {
                    unwinder.forget(tgid);
                }
            }
            Err(_) => *malformed += 1,
        });
        for merged in java.collect(sampler, processes)? {
            aggregator.add(merged);
        }
        self.load_new_images();
        Ok(())
    }

    /// Hands the processes registered since the last call to the unwinder.
    fn load_new_images(&mut self) {
        if let Some(unwinder) = &self.unwinder {
            for image in self.images_loaded..self.processes.len() {
                unwinder.load(self.processes.image(image));
            }
        }
        self.images_loaded = self.processes.len();
    }

    /// Stops sampling, waits for the Java side's last answers, and names
    /// and folds the stacks.
    fn finish(self, args: &RecordArgs) -> Result<Profile> {
        let Self {
            sampler,
            mut processes,
            unwinder,
            mut aggregator,
            java,
            malformed,
            started,
            ..
        } = self;
        let duration = started.elapsed();
        let cpus = sampler.cpus().len();
        let counters = sampler.counters()?;
        let bpf_time_per_sample = sampler.time_per_sample();
        drop(sampler);
        let JavaResults {
            merged,
            symbols: java_symbols,
            summary: java_summary,
        } = java.finish(&mut processes);
        for merged in merged {
            aggregator.add(merged);
        }
        let mut summary = RecordingSummary {
            duration,
            started: SystemTime::now().checked_sub(duration),
            frequency_hz: args.frequency,
            cpus,
            lost_ring_full: counters[Counter::LostRingFull as usize],
            malformed_records: malformed,
            partial_kernel_stacks: counters[Counter::KernelStackFailed as usize],
            partial_user_stacks: counters[Counter::UserStackFailed as usize],
            lost_lifecycle_records: counters[Counter::LostLifecycle as usize],
            idle_skipped: counters[Counter::IdleSkipped as usize],
            bpf_time_per_sample,
            processes: processes.len(),
            java: java_summary,
            unwind: unwinder.map(UnwindLoader::finish).unwrap_or_default(),
            ..RecordingSummary::default()
        };
        let started = Instant::now();
        let names = AddressNames::resolve(
            aggregator.addresses(&processes),
            &Symbolizer::new(args.lines),
            &java_symbols,
        );
        summary.symbolize_time = started.elapsed();
        summary.symbolized_addresses = names.len();
        Ok(aggregator.fold(&processes, &names, summary))
    }
}

/// Says on stderr that sampling has begun, and what it covers.
fn announce(args: &RecordArgs, cpus: usize) {
    let scope = match args.pids.as_slice() {
        [] => "every process".to_owned(),
        pids => {
            let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
            format!("pids {}", pids.join(","))
        }
    };
    let until = match args.duration {
        Some(duration) => format!("for {:.1} s", duration.as_secs_f64()),
        None => "until Ctrl-C".to_owned(),
    };
    eprintln!(
        "stoke: sampling {scope} on {cpus} CPUs at {} Hz {until}",
        args.frequency
    );
}

/// With `-p`, once every target has exited there is nothing left to sample.
fn all_exited(pids: &[u32]) -> bool {
    !pids.is_empty()
        && pids
            .iter()
            .all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}

/// Every mapped file of every sampled process is held open until the end:
/// a busy host needs more descriptors than the usual soft limit.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
