//! The two profilers under test, driven alike: `stoke record -a` and
//! `perf record -a -g`, started and known to be sampling before a workload
//! starts, stopped with SIGINT as a user stops them, and checked so that a
//! broken profiler fails the bench instead of producing numbers.

use std::{
    fmt,
    fs::{self, File, OpenOptions},
    io::{Read, Write},
    os::{fd::AsRawFd, unix::fs::OpenOptionsExt},
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};
use stoke_tests::json::{JsonProfile, Summary};

use super::{
    bpf_stats::total_run_time,
    process::{Exit, Process},
    stacks::{self, Stack},
    Bench,
};

/// How long a profiler may take to start sampling, and to write its output
/// once stopped, before the bench calls it broken.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(180);

/// Which profiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    Stoke,
    Perf,
}

impl fmt::Display for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tool::Stoke => "stoke",
            Tool::Perf => "perf",
        })
    }
}

/// What to record.
pub struct Options {
    pub tool: Tool,
    pub frequency_hz: u64,
    /// Stoke: `--bpf-stats` (ignored for perf).
    pub bpf_stats: bool,
    /// Stoke: `-t`, a frame per thread under the process's.
    pub threads: bool,
    /// Stoke: `--frame-pointers`, no unwind tables.
    pub frame_pointers: bool,
    /// `-p` these processes instead of `-a`.
    pub pids: Vec<u32>,
    /// Perf: starts with its events disabled, until [`Recording::resume`].
    pub paused: bool,
    /// Stoke: more arguments, e.g. `-e offcpu`.
    pub stoke_args: Vec<String>,
    /// Stoke: more environment, e.g. `STOKE_OFFCPU_AT_SYSCALL_EXIT`.
    pub stoke_env: Vec<(&'static str, &'static str)>,
    /// Perf: record every occurrence of this event (a tracepoint such as
    /// `sched:sched_switch`) instead of sampling at the frequency.
    pub perf_event: Option<&'static str>,
    /// Perf: `-g`, each sample's call stack (the default).
    pub call_graph: bool,
    /// An empty recording is no failure: what it records may not happen
    /// (a JVM's allocations, when it ends before stoke's agent is in).
    pub may_be_empty: bool,
    /// Stoke: the output's extension picks the format (`json`, `folded`).
    /// Perf always writes `perf.data` to a file next to this name.
    pub stoke_format: &'static str,
}

impl Options {
    /// A whole-host recording at `frequency_hz`, stoke writing `format`.
    pub fn new(tool: Tool, frequency_hz: u64, stoke_format: &'static str) -> Self {
        Self {
            tool,
            frequency_hz,
            bpf_stats: false,
            threads: false,
            frame_pointers: false,
            pids: Vec::new(),
            paused: false,
            stoke_args: Vec::new(),
            stoke_env: Vec::new(),
            perf_event: None,
            call_graph: true,
            may_be_empty: false,
            stoke_format,
        }
    }
}

/// A profiler that is sampling the whole host.
pub struct Recording {
    tool: Tool,
    process: Process,
    output: PathBuf,
    started: Instant,
    /// The profiler's CPU time when sampling began (its startup's cost).
    cpu_started: Duration,
    /// perf's control and ack FIFOs, kept open until perf ends.
    perf_control: Option<(File, File)>,
    may_be_empty: bool,
}

/// A recording that has ended and written its output.
pub struct Stopped {
    pub tool: Tool,
    pub output: PathBuf,
    /// From the moment sampling started to SIGINT.
    pub recorded: Duration,
    /// CPU (user+sys) the profiler used from the start of sampling to
    /// SIGINT: its cost while recording, without startup, symbolizing and
    /// writing.
    pub cpu_recording: Duration,
    /// Peak RSS until SIGINT, in bytes.
    pub rss_recording: u64,
    /// CPU (user+sys) the profiler used before it sampled: startup.
    pub cpu_startup: Duration,
    /// CPU and peak RSS over the whole run, output included.
    pub exit: Exit,
    /// From SIGINT to the output written and the process gone.
    pub stop_latency: Duration,
    pub samples: u64,
    /// Samples the profiler knows it lost.
    pub lost: u64,
    /// Processes stoke saw (perf does not say).
    pub processes: Option<u64>,
    /// What the profiler printed on stderr.
    pub stderr: Vec<String>,
}

impl Recording {
    /// Starts a whole-host recording into a file named `name` (plus the
    /// format's extension) in the bench's scratch directory, and returns
    /// once it samples.
    pub fn start(bench: &Bench, options: &Options, name: &str) -> Result<Self> {
        match options.tool {
            Tool::Stoke => Self::start_stoke(bench, options, name),
            Tool::Perf => Self::start_perf(bench, options, name),
        }
    }

    fn start_stoke(bench: &Bench, options: &Options, name: &str) -> Result<Self> {
        let output = bench.scratch(&format!("{name}.{}", options.stoke_format));
        let mut command = Command::new(&bench.stoke);
        command
            .arg("record")
            .args(target(&options.pids))
            .arg("-F")
            .arg(options.frequency_hz.to_string())
            .arg("-o")
            .arg(&output);
        for (on, flag) in [
            (options.bpf_stats, "--bpf-stats"),
            (options.threads, "--threads"),
            (options.frame_pointers, "--frame-pointers"),
        ] {
            if on {
                command.arg(flag);
            }
        }
        command
            .args(&options.stoke_args)
            .envs(options.stoke_env.iter().copied());
        let mut process = Process::spawn("stoke", &mut command)?;
        let announced = process
            .stderr()
            .wait_for(|line| line.starts_with("stoke: sampling"), START_TIMEOUT)?;
        if announced.is_none() {
            let mut process = process;
            let exit = process.wait(Duration::from_secs(5))?;
            bail!(
                "stoke ended ({}) before sampling: {}",
                exit.describe(),
                process.stderr().all().join(" / ")
            );
        }
        Ok(Self {
            tool: Tool::Stoke,
            cpu_started: process.cpu_now()?,
            process,
            output,
            started: Instant::now(),
            perf_control: None,
            may_be_empty: options.may_be_empty,
        })
    }

    /// perf says nothing when it starts sampling, so it starts with its
    /// events disabled (`-D -1`) and the bench enables them through its
    /// control FIFO, waiting for the acknowledgement: from then on it samples.
    fn start_perf(bench: &Bench, options: &Options, name: &str) -> Result<Self> {
        let output = bench.scratch(&format!("{name}.data"));
        let control = bench.scratch(&format!("{name}.ctl"));
        let ack = bench.scratch(&format!("{name}.ack"));
        for fifo in [&control, &ack] {
            make_fifo(fifo)?;
        }
        // Opened read-write so that neither open blocks waiting for perf.
        let open = |path: &Path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))
        };
        let (control_fifo, ack_fifo) = (open(&control)?, open(&ack)?);
        let mut process = Process::spawn(
            "perf record",
            Command::new("perf")
                .arg("record")
                .args(target(&options.pids))
                .args(options.call_graph.then_some("-g"))
                .args(match options.perf_event {
                    Some(event) => ["-e".to_owned(), event.to_owned()],
                    None => ["-F".to_owned(), options.frequency_hz.to_string()],
                })
                .args(["-D", "-1", "--control"])
                .arg(format!("fifo:{},{}", control.display(), ack.display()))
                .arg("-o")
                .arg(&output),
        )?;
        // perf prints this once its events exist (disabled).
        let ready = process
            .stderr()
            .wait_for(|line| line.contains("Events disabled"), START_TIMEOUT)?;
        if ready.is_none() {
            let exit = process.wait(Duration::from_secs(5))?;
            bail!(
                "perf record ended ({}) before sampling: {}",
                exit.describe(),
                process.stderr().all().join(" / ")
            );
        }
        let mut recording = Self {
            tool: Tool::Perf,
            cpu_started: process.cpu_now()?,
            process,
            output,
            started: Instant::now(),
            perf_control: Some((control_fifo, ack_fifo)),
            may_be_empty: options.may_be_empty,
        };
        if !options.paused {
            recording.resume()?;
        }
        Ok(recording)
    }

    /// Enables a paused perf recording's events, and returns once they are.
    pub fn resume(&mut self) -> Result<()> {
        let (control, ack) = self
            .perf_control
            .as_mut()
            .context("only perf recordings pause")?;
        control.write_all(b"enable\n")?;
        read_ack(ack, START_TIMEOUT)
    }

    /// The profiler's process id.
    pub fn pid(&self) -> libc::pid_t {
        self.process.pid()
    }

    /// CPU the profiler has used so far.
    pub fn cpu_now(&self) -> Result<Duration> {
        self.process.cpu_now()
    }

    /// CPU the profiler has used so far, its process's and its BPF
    /// programs' run time (counted with `--bpf-stats`), in seconds.
    pub fn own_cpu_now(&self) -> Result<f64> {
        Ok(self.cpu_now()?.as_secs_f64() + total_run_time(self.pid())?)
    }

    /// Ends the recording as Ctrl-C does, waits for the output, and checks
    /// that the profiler succeeded and recorded samples.
    pub fn stop(mut self) -> Result<Stopped> {
        let cpu_recording = self.process.cpu_now()?.saturating_sub(self.cpu_started);
        let rss_recording = self.process.peak_rss_now()?;
        let recorded = self.started.elapsed();
        let interrupted = Instant::now();
        self.process.signal(libc::SIGINT);
        let exit = self.process.wait(STOP_TIMEOUT)?;
        let stop_latency = interrupted.elapsed();
        let stderr = self.process.stderr().all().to_vec();
        let ok = match self.tool {
            Tool::Stoke => exit.success(),
            Tool::Perf => exit.ended_by_interrupt(),
        };
        ensure!(
            ok,
            "{} failed ({}): {}",
            self.tool,
            exit.describe(),
            stderr.join(" / ")
        );
        let (samples, lost, processes) = match self.tool {
            Tool::Stoke => {
                let line = StokeLine::find(&stderr)?;
                (line.samples, line.lost, Some(line.processes))
            }
            Tool::Perf => (perf_samples(&stderr)?, perf_lost(&self.output)?, None),
        };
        ensure!(
            samples > 0 || self.may_be_empty,
            "{} recorded no samples: {}",
            self.tool,
            stderr.join(" / ")
        );
        Ok(Stopped {
            tool: self.tool,
            output: self.output.clone(),
            recorded,
            cpu_recording,
            rss_recording,
            cpu_startup: self.cpu_started,
            exit,
            stop_latency,
            samples,
            lost,
            processes,
            stderr,
        })
    }
}

impl Stopped {
    /// CPU the profiler used after SIGINT: naming frames, writing output.
    pub fn cpu_output(&self) -> Duration {
        self.exit
            .cpu
            .saturating_sub(self.cpu_startup + self.cpu_recording)
    }

    /// The recorded stacks: stoke's folded output, or `perf script`'s.
    pub fn stacks(&self) -> Result<Vec<Stack>> {
        match self.tool {
            Tool::Stoke => {
                let text = fs::read_to_string(&self.output)
                    .with_context(|| format!("reading {}", self.output.display()))?;
                stacks::parse_folded(&text)
                    .with_context(|| format!("parsing {}", self.output.display()))
            }
            Tool::Perf => {
                let script = perf_script(&self.output)?;
                stacks::parse_perf_script(&script.text)
            }
        }
    }

    /// The summary of stoke's JSON output.
    pub fn summary(&self) -> Result<Summary> {
        JsonProfile::read(&self.output)
            .map(|profile| profile.summary)
            .map_err(anyhow::Error::msg)
    }

    /// Deletes the output file (perf.data files are large).
    pub fn remove_output(&self) {
        let _ = fs::remove_file(&self.output);
    }
}

/// Where a profiler's CPU went over recordings: medians of the share of one
/// CPU while sampling, and of the seconds of startup and of output.
pub struct CpuSplit {
    pub sampling_share: f64,
    pub startup_seconds: f64,
    pub output_seconds: f64,
}

impl CpuSplit {
    /// The medians over `runs`; `None` without runs.
    pub fn of(runs: &[&Stopped]) -> Option<Self> {
        let median = |f: &dyn Fn(&Stopped) -> f64| {
            super::stats::Spread::of(&runs.iter().map(|r| f(r)).collect::<Vec<_>>())
                .map(|s| s.median)
        };
        Some(Self {
            sampling_share: median(&|r| r.cpu_recording.as_secs_f64() / r.recorded.as_secs_f64())?,
            startup_seconds: median(&|r| r.cpu_startup.as_secs_f64())?,
            output_seconds: median(&|r| r.cpu_output().as_secs_f64())?,
        })
    }

    /// Why stoke's CPU over a whole recording of `seconds` is what it is,
    /// against a `target` share of one CPU.
    pub fn explain(&self, target: f64, seconds: f64) -> String {
        let sampling = if self.sampling_share <= target {
            "met while sampling"
        } else {
            "missed while sampling too"
        };
        let once = self.startup_seconds + self.output_seconds;
        format!(
            "{sampling} ({:.2}%); startup (loading and verifying the BPF programs, unwind \
             tables of the running processes) takes {:.2} s of CPU and output {:.2} s, once \
             per recording: {:.2}% of a {seconds:.0} s one",
            self.sampling_share * 100.0,
            self.startup_seconds,
            self.output_seconds,
            once / seconds * 100.0
        )
    }
}

/// When a profiler reached its peak RSS: while recording, or after SIGINT.
pub fn explain_peak_rss(runs: &[&Stopped]) -> String {
    let while_recording = runs
        .iter()
        .filter(|r| r.rss_recording as f64 >= 0.95 * r.exit.max_rss as f64)
        .count();
    if while_recording * 2 >= runs.len() {
        "the peak is reached while recording: the sampled processes' memory maps and \
         the unwind tables built for their files"
            .into()
    } else {
        "the peak is reached after SIGINT, while naming frames and writing".into()
    }
}

/// stoke's last line: `stoke: N samples from P processes in T s (L lost),
/// written to FILE`, or for another event than cpu `stoke: EVENT: N UNIT
/// from ...`.
#[derive(Debug, PartialEq)]
pub struct StokeLine {
    /// Samples, or the profile's total in its event's unit.
    pub samples: u64,
    pub processes: u64,
    pub lost: u64,
}

impl StokeLine {
    /// Finds and parses the line among stoke's stderr lines.
    pub fn find(stderr: &[String]) -> Result<Self> {
        stderr
            .iter()
            .rev()
            .find_map(|line| Self::parse(line))
            .with_context(|| {
                format!(
                    "stoke printed no `N samples from P processes` line: {}",
                    stderr.join(" / ")
                )
            })
    }

    fn parse(line: &str) -> Option<Self> {
        let rest = line.strip_prefix("stoke: ")?;
        let (total, rest) = rest.split_once(" from ")?;
        let samples = match total.split_once(": ") {
            Some((_event, value)) => value.split_whitespace().next()?,
            None => total.strip_suffix(" samples")?,
        };
        let (processes, rest) = rest.split_once(" processes in ")?;
        let (_, rest) = rest.split_once(" s (")?;
        let (lost, _) = rest.split_once(" lost)")?;
        Some(Self {
            samples: samples.parse().ok()?,
            processes: processes.parse().ok()?,
            lost: lost.parse().ok()?,
        })
    }
}

/// How long stoke took to attach to (or find its agent in) the JVM `pid`,
/// in milliseconds, if it did.
pub fn jvm_attach_ms(summary: &Summary, pid: u32) -> Option<f64> {
    ms_of_jvm(&summary.java.attach_ms, pid)
}

/// The milliseconds a summary list of (JVM, milliseconds) gives JVM `pid`.
pub fn ms_of_jvm(list: &[(u32, u64)], pid: u32) -> Option<f64> {
    list.iter()
        .find(|&&(jvm, _)| jvm == pid)
        .map(|&(_, ms)| ms as f64)
}

/// perf record's `[ perf record: Captured and wrote 0.041 MB d.data (101 samples) ]`.
fn perf_samples(stderr: &[String]) -> Result<u64> {
    stderr
        .iter()
        .filter(|line| line.contains("Captured and wrote"))
        .find_map(|line| {
            let (_, tail) = line.rsplit_once('(')?;
            tail.split_whitespace().next()?.parse().ok()
        })
        .with_context(|| {
            format!(
                "perf record did not say how many samples it wrote: {}",
                stderr.join(" / ")
            )
        })
}

/// `-a`, or `-p` and `pids`: what stoke and perf record.
fn target(pids: &[u32]) -> Vec<String> {
    if pids.is_empty() {
        return vec!["-a".into()];
    }
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    vec!["-p".into(), pids.join(",")]
}

/// `perf report --stdio` of `data` with `args`.
pub fn perf_report(data: &Path, args: &[&str]) -> Result<String> {
    let output = Command::new("perf")
        .args(["report", "--stdio"])
        .args(args)
        .arg("-i")
        .arg(data)
        .output()
        .context("running perf report")?;
    ensure!(
        output.status.success(),
        "perf report failed: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Lost samples of a perf.data file, from `perf report`'s header line
/// `# Total Lost Samples: N`.
fn perf_lost(data: &Path) -> Result<u64> {
    perf_report(data, &["-g", "none", "--sort", "comm"])?
        .lines()
        .find_map(|line| line.strip_prefix("# Total Lost Samples:"))
        .and_then(|count| count.trim().parse().ok())
        .context("perf report printed no `Total Lost Samples` line")
}

/// The symbolized stacks of a perf.data file and what producing them cost:
/// `perf script` is where perf names frames, as stoke does before writing.
pub struct PerfScript {
    pub text: String,
    pub wall: Duration,
    pub exit: Exit,
}

impl PerfScript {
    /// The frames perf named.
    pub fn frames(&self) -> Result<usize> {
        let samples = stoke_tests::perf_script::parse(&self.text).map_err(anyhow::Error::msg)?;
        Ok(samples.iter().map(|sample| sample.frames.len()).sum())
    }
}

/// Runs `perf script` on `data` for the stacks, timing it.
pub fn perf_script(data: &Path) -> Result<PerfScript> {
    perf_script_with(data, &["-F", "comm,pid,ip,sym,dso"])
}

/// Runs `perf script` on `data` with `options` (fields, formats), timing
/// it.
pub fn perf_script_with(data: &Path, options: &[&str]) -> Result<PerfScript> {
    let text_path = data.with_extension("script");
    let file =
        File::create(&text_path).with_context(|| format!("creating {}", text_path.display()))?;
    let started = Instant::now();
    let mut process = Process::spawn_to_file(
        "perf script",
        Command::new("perf")
            .arg("script")
            .args(options)
            .arg("-i")
            .arg(data),
        file,
    )?;
    let exit = process.wait(STOP_TIMEOUT)?;
    let wall = started.elapsed();
    ensure!(
        exit.success(),
        "perf script failed ({}): {}",
        exit.describe(),
        process.stderr().all().join(" / ")
    );
    let text = fs::read_to_string(&text_path)?;
    let _ = fs::remove_file(&text_path);
    Ok(PerfScript { text, wall, exit })
}

fn make_fifo(path: &Path) -> Result<()> {
    let _ = fs::remove_file(path);
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::mkfifo(name.as_ptr(), 0o600) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("mkfifo {}", path.display()));
    }
    Ok(())
}

/// Reads perf's `ack\n` from its ack FIFO, waiting at most `timeout`.
fn read_ack(fifo: &mut File, timeout: Duration) -> Result<()> {
    let mut poll = libc::pollfd {
        fd: fifo.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut poll, 1, millis) };
    ensure!(
        ready == 1,
        "perf did not acknowledge `enable` within {timeout:?}"
    );
    let mut reply = [0u8; 4];
    fifo.read_exact(&mut reply)?;
    ensure!(&reply == b"ack\n", "perf answered {reply:?} to `enable`");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stokes_last_line() {
        let lines = vec![
            "stoke: sampling every process on 2 CPUs at 99 Hz until Ctrl-C".to_owned(),
            "stoke: 396 samples from 13 processes in 2.0 s (1 lost), written to x.txt".to_owned(),
        ];
        assert_eq!(
            StokeLine::find(&lines).unwrap(),
            StokeLine {
                samples: 396,
                processes: 13,
                lost: 1
            }
        );
        assert!(StokeLine::find(&lines[..1]).is_err());
        let offcpu = "stoke: offcpu: 9100 nanoseconds from 3 processes in 1.0 s (7 lost), \
                      written to x.json";
        assert_eq!(
            StokeLine::find(&[offcpu.to_owned()]).unwrap(),
            StokeLine {
                samples: 9100,
                processes: 3,
                lost: 7
            }
        );
    }

    #[test]
    fn parses_perfs_sample_count() {
        let lines = vec![
            "[ perf record: Woken up 2 times to write data ]".to_owned(),
            "[ perf record: Captured and wrote 0.039 MB d2.data (99 samples) ]".to_owned(),
        ];
        assert_eq!(perf_samples(&lines).unwrap(), 99);
        assert!(perf_samples(&lines[..1]).is_err());
    }
}
