//! What CPU sampling costs a JVM inside the timer interrupt, for stoke and
//! async-profiler alike. Both sample with perf's cpu-clock events, whose
//! timer callback (`perf_swevent_hrtimer`) runs stoke's BPF program, or
//! writes async-profiler's sample and queues its signal; interrupts are
//! off there, so perf's own clock (`jvm_share`) cannot sample it. Here the
//! kernel's `timer:hrtimer_expire_entry` and `timer:hrtimer_expire_exit`
//! tracepoints, recorded by perf on every CPU through a phase of the work,
//! time each of those callbacks on the JVM's threads.
//!
//! The tracing lengthens every callback by the writing of its entry
//! record. That length is taken to be what stoke's callbacks last beyond
//! its sampler's run time (the kernel's count, `--bpf-stats`) in the same
//! round, and taken off async-profiler's: so perf's own handling of an
//! overflow, common to both, is counted for neither, and stoke's part is
//! its BPF program's run time exactly.

use anyhow::{ensure, Context, Result};

use super::{
    bpf_stats::{sampler_stats, ProgramStats},
    host::mount_tracefs,
    jvm_phases::timed_from,
    process::Process,
    profiler::{perf_script_with, Options, Recording, Tool},
    Bench,
};

const EVENTS: &str = "timer:hrtimer_expire_entry,timer:hrtimer_expire_exit";

/// The timer callback of perf's software clock events.
const PERF_TIMER: &str = "perf_swevent_hrtimer";

/// The sampling timer's callbacks on a JVM's threads through one phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimerCost {
    /// Callbacks per second of the JVM's CPU time.
    pub per_cpu_second: f64,
    /// Their mean length as traced, in nanoseconds.
    pub traced_ns: f64,
    /// Stoke's sampler's mean run time meanwhile, in nanoseconds.
    pub bpf_ns: Option<f64>,
}

impl TimerCost {
    /// What the tracing adds to each callback, from stoke's: its length
    /// beyond the sampler's run time.
    pub fn tracing_ns(&self) -> Option<f64> {
        self.bpf_ns.map(|bpf| (self.traced_ns - bpf).max(0.0))
    }

    /// The profiler's time in the interrupt as a share of the JVM's CPU,
    /// its callbacks' traced length less `tracing_ns`.
    pub fn share(&self, tracing_ns: f64) -> f64 {
        (self.traced_ns - tracing_ns).max(0.0) * self.per_cpu_second / 1e9
    }
}

/// Runs a phase of the JVM with its profiler sampling (stoke's
/// `recording`, with `--bpf-stats`, or async-profiler's, already
/// started) and the timer tracepoints recorded.
pub fn traced_phase(
    bench: &Bench,
    jvm: &mut Process,
    recording: Option<&Recording>,
) -> Result<TimerCost> {
    let pid = u32::try_from(jvm.pid()).context("pid out of range")?;
    traced(bench, pid, recording, |started| {
        Ok(timed_from(bench, jvm, started, || Ok(0.0))?.0.cpu)
    })
}

/// Traces the sampling timer's callbacks on process `pid` through a
/// window `window` runs: it calls its argument as the window's clock
/// starts and returns the process's CPU seconds in the window.
pub fn traced(
    bench: &Bench,
    pid: u32,
    recording: Option<&Recording>,
    window: impl FnOnce(&mut dyn FnMut() -> Result<()>) -> Result<f64>,
) -> Result<TimerCost> {
    let _tracefs = mount_tracefs(EVENTS)?;
    let options = Options {
        paused: true,
        perf_event: Some(EVENTS),
        call_graph: false,
        ..Options::new(Tool::Perf, 0, "")
    };
    let mut perf = Recording::start(bench, &options, "timer-interrupt")?;
    let sampler = || recording.map_or(Ok(ProgramStats::default()), |r| sampler_stats(r.pid()));
    let mut before = ProgramStats::default();
    let cpu = window(&mut || {
        perf.resume()?;
        before = sampler()?;
        Ok(())
    })?;
    let bpf = sampler()?.since(before);
    let stopped = perf.stop()?;
    let script = perf_script_with(&stopped.output, &["-F", "pid,cpu,time,event,trace", "--ns"]);
    stopped.remove_output();
    let (count, total_ns) = callbacks(&script?.text, pid);
    ensure!(
        count > 0 && cpu > 0.0,
        "perf traced no sampling timer on process {pid}'s threads"
    );
    Ok(TimerCost {
        per_cpu_second: count as f64 / cpu,
        traced_ns: total_ns / count as f64,
        bpf_ns: bpf.per_run_ns(),
    })
}

/// The count and total length, in nanoseconds, of the perf timer callbacks
/// that interrupted process `pid`, from `perf script -F
/// pid,cpu,time,event,trace --ns`: each CPU's entry paired with its next
/// exit (a timer callback runs to its end on its CPU).
fn callbacks(script: &str, pid: u32) -> (u64, f64) {
    let mut open: Vec<(u32, f64)> = Vec::new(); // (cpu, entry time in s)
    let (mut count, mut total_ns) = (0, 0.0);
    let perf_timer = format!("function={PERF_TIMER}");
    for line in script.lines() {
        let Some((pid_field, rest)) = line.trim_start().split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let Some((cpu, rest)) = rest.strip_prefix('[').and_then(|rest| rest.split_once(']')) else {
            continue;
        };
        let Some((time, rest)) = rest.trim_start().split_once(": ") else {
            continue;
        };
        let (Ok(cpu), Ok(time)) = (cpu.parse::<u32>(), time.parse::<f64>()) else {
            continue;
        };
        let rest = rest.trim_start();
        if rest.starts_with("timer:hrtimer_expire_entry:") {
            open.retain(|&(open_cpu, _)| open_cpu != cpu);
            let ours =
                pid_field.parse() == Ok(pid) && rest.split_whitespace().any(|f| f == perf_timer);
            if ours {
                open.push((cpu, time));
            }
        } else if rest.starts_with("timer:hrtimer_expire_exit:") {
            if let Some(at) = open.iter().position(|&(open_cpu, _)| open_cpu == cpu) {
                let (_, entered) = open.swap_remove(at);
                count += 1;
                total_ns += (time - entered) * 1e9;
            }
        }
    }
    (count, total_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callbacks_pair_each_cpus_entry_and_exit() {
        let script = "\
   812 [000] 100.000001000: timer:hrtimer_expire_entry: hrtimer=0xa function=perf_swevent_hrtimer now=1
   812 [001] 100.000001500: timer:hrtimer_expire_entry: hrtimer=0xb function=tick_nohz_handler now=1
   812 [000] 100.000005000:  timer:hrtimer_expire_exit: hrtimer=0xa
   812 [001] 100.000009500:  timer:hrtimer_expire_exit: hrtimer=0xb
     0 [001] 100.000020000: timer:hrtimer_expire_entry: hrtimer=0xc function=perf_swevent_hrtimer now=2
     0 [001] 100.000021000:  timer:hrtimer_expire_exit: hrtimer=0xc
   812 [001] 100.000030000: timer:hrtimer_expire_entry: hrtimer=0xd function=perf_swevent_hrtimer now=3
   812 [001] 100.000036000:  timer:hrtimer_expire_exit: hrtimer=0xd
";
        let (count, total) = callbacks(script, 812);
        assert_eq!(count, 2);
        assert!((total - 10_000.0).abs() < 1.0, "{total}");
    }

    #[test]
    fn the_tracing_is_what_stoke_lasts_beyond_its_sampler() {
        let stoke = TimerCost {
            per_cpu_second: 1000.0,
            traced_ns: 9000.0,
            bpf_ns: Some(6000.0),
        };
        let other = TimerCost {
            per_cpu_second: 1000.0,
            traced_ns: 7000.0,
            bpf_ns: None,
        };
        let tracing = stoke.tracing_ns().unwrap();
        assert!((stoke.share(tracing) - 0.006).abs() < 1e-12);
        assert!((other.share(tracing) - 0.004).abs() < 1e-12);
    }
}
