//! Part 7's Python cost to the process: what stoke at 99 Hz costs a Python
//! process, by where its CPU goes, as `jvm_share` measures a JVM. One
//! python3.11 burns at the bottom of a 20-frame recursion; perf samples it
//! (`perf record -p`) through three windows, unprofiled, profiled by
//! `stoke record -p` with its Python frames, unprofiled; the share of its
//! samples outside the interpreter's own code (libc, the kernel) is
//! compared. Stoke adds nothing to a Python process's user code: what it
//! costs is in the kernel, the per-thread event's switching (in the share)
//! and the sampling timer's interrupt, where perf cannot sample: there
//! stoke's BPF run time (the kernel's count) is added, and the timer's
//! callbacks on the process are traced in a fourth window
//! (`timer_interrupt`), the whole of each callback beside the sampler's
//! part of it.

use std::{path::Path, process::Command, time::Duration};

use anyhow::{Context, Result};

use super::{
    jvm_share::{dso_share, PERF_HZ},
    process::Process,
    profiler::{perf_report, Options, Recording, Tool},
    report::{Table, Target},
    stats::{self, percent, percent_signed, Spread},
    timer_interrupt::{traced, TimerCost},
    Bench,
};

/// The target: a Python process profiled at 99 Hz slowed ≤ 1%.
const TARGET: f64 = 0.01;

const HZ: u64 = 99;

/// The interpreter, as perf's `--sort dso` names it.
const INTERPRETER: &str = "python3.11";

/// One process through its windows.
struct Share {
    /// Its share outside the interpreter, unprofiled before and after.
    unprofiled: [f64; 2],
    /// The same while stoke recorded it.
    profiled: f64,
    /// Stoke's process and BPF programs, as a share of the process's CPU.
    own: f64,
    timer: TimerCost,
}

impl Share {
    fn cost(&self) -> f64 {
        self.profiled - (self.unprofiled[0] + self.unprofiled[1]) / 2.0 + self.own
    }

    fn noise(&self) -> f64 {
        (self.unprofiled[0] - self.unprofiled[1]).abs()
    }

    /// The timer callbacks on the process, as traced, as a share of its
    /// CPU: the sampling interrupt's whole cost to it, and the tracing's.
    fn interrupt(&self) -> f64 {
        self.timer.share(0.0)
    }
}

/// The section's text and target, from a process per round.
pub fn run(bench: &Bench, python: &str, script: &Path, depth: u32) -> Result<(String, Target)> {
    let mut shares = Vec::new();
    for round in 0..bench.settings.rounds {
        let what = format!("python cost round {}", round + 1);
        let share = bench
            .measure(&what, || one_process(bench, python, script, depth))?
            .value;
        bench.log(&format!(
            "{what}: outside the interpreter {:.2}%, {:.2}% profiled, {:.2}%; own {:.3}%; \
             timer callbacks {:.0} per CPU second, {:.2} µs traced",
            share.unprofiled[0] * 100.0,
            share.profiled * 100.0,
            share.unprofiled[1] * 100.0,
            share.own * 100.0,
            share.timer.per_cpu_second,
            share.timer.traced_ns / 1e3,
        ));
        shares.push(share);
    }
    Ok(section(&shares))
}

fn one_process(bench: &Bench, python: &str, script: &Path, depth: u32) -> Result<Share> {
    let seconds = bench.settings.unwind_seconds;
    let mut process = Process::spawn(
        "python_depth.py",
        Command::new(python)
            .arg(script)
            .arg(depth.to_string())
            .arg((seconds * 5.0 + 60.0).to_string()),
    )?;
    let pid = u32::try_from(process.pid()).context("pid out of range")?;
    std::thread::sleep(Duration::from_secs(1));
    let before = outside(bench, &process, None)?.0;
    let options = Options {
        bpf_stats: true,
        pids: vec![pid],
        ..Options::new(Tool::Stoke, HZ, "folded")
    };
    let recording = Recording::start(bench, &options, "python-cost")?;
    // The interpreter's tables and names are loaded first.
    std::thread::sleep(Duration::from_secs(1));
    let (profiled, own) = outside(bench, &process, Some(&recording))?;
    let timer = traced(bench, pid, Some(&recording), |started| {
        started()?;
        let cpu = process.cpu_now()?;
        std::thread::sleep(Duration::from_secs_f64(seconds));
        Ok((process.cpu_now()? - cpu).as_secs_f64())
    })?;
    recording.stop()?.remove_output();
    let after = outside(bench, &process, None)?.0;
    process.signal(libc::SIGKILL);
    process.wait(Duration::from_secs(30))?;
    Ok(Share {
        unprofiled: [before, after],
        profiled,
        own,
        timer,
    })
}

/// A window of perf sampling the process: the share of its samples
/// outside the interpreter and, given stoke's `recording`, stoke's CPU
/// meanwhile (its process's and its BPF programs') as a share of the
/// process's.
fn outside(bench: &Bench, process: &Process, recording: Option<&Recording>) -> Result<(f64, f64)> {
    let options = Options {
        pids: vec![u32::try_from(process.pid()).context("pid out of range")?],
        ..Options::new(Tool::Perf, PERF_HZ, "")
    };
    let stoke_cpu = || recording.map_or(Ok(0.0), Recording::own_cpu_now);
    let perf = Recording::start(bench, &options, "python-cost")?;
    let (cpu, stoke) = (process.cpu_now()?, stoke_cpu()?);
    std::thread::sleep(Duration::from_secs_f64(bench.settings.unwind_seconds));
    let (cpu, stoke) = (
        (process.cpu_now()? - cpu).as_secs_f64(),
        stoke_cpu()? - stoke,
    );
    let stopped = perf.stop()?;
    let report = perf_report(&stopped.output, &["--no-children", "--sort", "dso", "-q"]);
    stopped.remove_output();
    let inside = dso_share(&report?, INTERPRETER)
        .with_context(|| format!("perf report named no {INTERPRETER}: was it running?"))?;
    Ok((1.0 - inside, if cpu > 0.0 { stoke / cpu } else { 0.0 }))
}

fn section(shares: &[Share]) -> (String, Target) {
    let column = |value: fn(&Share) -> f64| {
        let values: Vec<f64> = shares.iter().map(|s| value(s) * 100.0).collect();
        stats::show(&values, 2, "%")
    };
    let mut table = Table::new(&[
        "python3.11, 20 Python frames",
        "outside the interpreter, unprofiled",
        "profiled",
        "own: stoke's process and BPF, % of the process's CPU",
        "cost: added share + own",
        "timer callbacks, as traced, % of its CPU",
    ]);
    table.row(vec![
        format!("stoke record -p, {HZ} Hz"),
        column(|s| (s.unprofiled[0] + s.unprofiled[1]) / 2.0),
        column(|s| s.profiled),
        column(|s| s.own),
        column(Share::cost),
        column(Share::interrupt),
    ]);
    let costs: Vec<f64> = shares.iter().map(Share::cost).collect();
    let noises: Vec<f64> = shares.iter().map(Share::noise).collect();
    let cost = Spread::of(&costs).map_or(0.0, |s| s.median);
    let noise = Spread::of(&noises).map_or(0.0, |s| s.median);
    let traced: Vec<f64> = shares.iter().map(|s| s.timer.traced_ns / 1e3).collect();
    let sampler: Vec<f64> = shares
        .iter()
        .filter_map(|s| s.timer.bpf_ns)
        .map(|ns| ns / 1e3)
        .collect();
    let target = Target::at_most(
        format!(
            "Python process at {HZ} Hz slowed ≤ {} (by where its CPU goes)",
            percent(TARGET)
        ),
        format!("{} (noise {})", percent_signed(cost), percent(noise)),
        (cost, TARGET, noise),
        percent,
    );
    let body = format!(
        "\nWhat stoke costs the Python process at {HZ} Hz, by where its CPU goes (as part 1's \
         JVM, by perf): `perf record -F {PERF_HZ} -p` samples it through three windows, \
         unprofiled, profiled (`stoke record -p -F {HZ} --bpf-stats`, its Python frames \
         walked), unprofiled; the share of its samples outside {INTERPRETER}'s own code (libc, \
         the kernel) is compared, and stoke's own CPU (its process, and its BPF programs, which \
         run in the timer interrupt where perf cannot sample) is added. A fourth window traces \
         the sampling timer's callbacks on the process (`timer:hrtimer_expire_*`): \
         {} each, its sampler's run time {}; their share of the process's CPU is the \
         interrupt's whole cost to it (the tracing's own included). Medians over the rounds \
         (min to max); noise, how far apart a round's unprofiled shares were (median): {}.\n\n{}",
        stats::show(&traced, 2, " µs"),
        stats::show(&sampler, 2, " µs"),
        percent(noise),
        table.markdown()
    );
    (body, target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_is_the_share_added_and_stokes_own() {
        let share = Share {
            unprofiled: [0.002, 0.004],
            profiled: 0.005,
            own: 0.001,
            timer: TimerCost {
                per_cpu_second: 100.0,
                traced_ns: 7000.0,
                bpf_ns: Some(5000.0),
            },
        };
        assert!((share.cost() - 0.003).abs() < 1e-12, "{}", share.cost());
        assert!((share.noise() - 0.002).abs() < 1e-12);
        assert!((share.interrupt() - 0.0007).abs() < 1e-12);
    }
}
