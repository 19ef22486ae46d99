//! The kernel's statistics of stoke's BPF programs (`--bpf-stats`):
//! `run_time_ns` and `run_cnt` of each program, read from
//! `/proc/<stoke>/fdinfo` of its program descriptors, named through bpftool.

use std::{collections::BTreeMap, fs, process::Command};

use anyhow::{ensure, Context, Result};

/// The counters of one BPF program over one recording.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProgramStats {
    pub run_time_ns: u64,
    pub run_count: u64,
}

impl ProgramStats {
    /// The counts between an earlier reading and this one.
    pub fn since(self, earlier: ProgramStats) -> ProgramStats {
        ProgramStats {
            run_time_ns: self.run_time_ns.saturating_sub(earlier.run_time_ns),
            run_count: self.run_count.saturating_sub(earlier.run_count),
        }
    }

    /// Nanoseconds per run, if the program ran.
    pub fn per_run_ns(self) -> Option<f64> {
        (self.run_count > 0).then(|| self.run_time_ns as f64 / self.run_count as f64)
    }
}

impl std::ops::AddAssign for ProgramStats {
    fn add_assign(&mut self, other: ProgramStats) {
        self.run_time_ns += other.run_time_ns;
        self.run_count += other.run_count;
    }
}

/// The counters of every BPF program a process holds, by program name.
pub fn program_stats(pid: libc::pid_t) -> Result<BTreeMap<String, ProgramStats>> {
    let mut programs = BTreeMap::new();
    for (id, _, stats) in programs_held(pid)? {
        let entry = programs
            .entry(program_name(id)?)
            .or_insert_with(ProgramStats::default);
        *entry += stats;
    }
    Ok(programs)
}

/// The run time of every BPF program a process holds, together, in
/// seconds: a reading cheap enough to take as a timed phase starts and
/// ends (no bpftool).
pub fn total_run_time(pid: libc::pid_t) -> Result<f64> {
    let ns: u64 = programs_held(pid)?
        .iter()
        .map(|(_, _, stats)| stats.run_time_ns)
        .sum();
    Ok(ns as f64 / 1e9)
}

/// The counters of a process's perf_event programs together: stoke's CPU
/// sampler (no bpftool).
pub fn sampler_stats(pid: libc::pid_t) -> Result<ProgramStats> {
    let mut sum = ProgramStats::default();
    for (_, kind, stats) in programs_held(pid)? {
        if kind == BPF_PROG_TYPE_PERF_EVENT {
            sum += stats;
        }
    }
    Ok(sum)
}

/// `prog_type` of perf_event programs in fdinfo (the kernel's enum).
const BPF_PROG_TYPE_PERF_EVENT: u64 = 7;

/// The id, type and counters of each BPF program descriptor a process
/// holds, from its `/proc/<pid>/fdinfo`.
fn programs_held(pid: libc::pid_t) -> Result<Vec<(u64, u64, ProgramStats)>> {
    let mut programs = Vec::new();
    let fd_dir = format!("/proc/{pid}/fd");
    for entry in fs::read_dir(&fd_dir).with_context(|| format!("reading {fd_dir}"))? {
        let entry = entry?;
        let is_program = fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy() == "anon_inode:bpf-prog");
        if !is_program {
            continue;
        }
        let fdinfo = format!("/proc/{pid}/fdinfo/{}", entry.file_name().to_string_lossy());
        let Ok(text) = fs::read_to_string(&fdinfo) else {
            continue; // closed meanwhile
        };
        let field = |name: &str| -> Option<u64> {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|value| value.trim().parse().ok())
        };
        let id = field("prog_id").with_context(|| format!("no prog_id in {fdinfo}"))?;
        let stats = ProgramStats {
            run_time_ns: field("run_time_ns").unwrap_or(0),
            run_count: field("run_cnt").unwrap_or(0),
        };
        programs.push((id, field("prog_type").unwrap_or(0), stats));
    }
    ensure!(
        !programs.is_empty(),
        "stoke (pid {pid}) holds no BPF programs"
    );
    Ok(programs)
}

/// A BPF program's name, from `bpftool prog show id ID --json`.
fn program_name(id: u64) -> Result<String> {
    let output = Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string(), "--json"])
        .output()
        .context("running bpftool (cargo xtask setup installs it)")?;
    ensure!(
        output.status.success(),
        "bpftool prog show id {id} failed: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    json_string(&String::from_utf8_lossy(&output.stdout), "name")
        .with_context(|| format!("no name in bpftool's description of program {id}"))
}

/// The string value of `"key":"value"` in flat JSON (bpftool's), without a
/// JSON dependency for one field.
fn json_string(json: &str, key: &str) -> Option<String> {
    let start = json.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = json[start..].trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_owned())
}

/// Microseconds per run, if the program ran.
pub fn per_run_us(stats: ProgramStats) -> Option<f64> {
    stats.per_run_ns().map(|ns| ns / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_json_string_field() {
        let json = r#"{"id":42,"type":"perf_event","name":"sample_cpu","tag":"ab"}"#;
        assert_eq!(json_string(json, "name").as_deref(), Some("sample_cpu"));
        assert_eq!(json_string(json, "missing"), None);
    }
}
