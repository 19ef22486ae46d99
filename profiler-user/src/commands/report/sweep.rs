//! What an incident sweep shows, computed from one recording: CPU by
//! container and by process (JVMs marked), the hottest functions, and how
//! complete the stacks were.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

use crate::{
    model::{FoldedStack, Profile},
    process::cpu_quota::Throttling,
};

/// Most rows of the process and function tables: a whole host has
/// thousands of processes, and the tail says nothing in an incident.
pub const MAX_ROWS: usize = 200;

/// The group a process runs in, as the containers table shows it.
pub const HOST_GROUP: &str = "(host)";

/// One container (or the host's own processes) and its CPU.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerRow {
    /// Its name (or short id when unnamed); [`HOST_GROUP`] for the host.
    pub name: String,
    /// Its full id, empty for the host.
    pub id: String,
    /// A Kubernetes pod as `namespace/name`, if it is in one.
    pub pod: String,
    pub samples: u64,
    pub processes: usize,
    /// One of its processes (the first sampled), whose cgroup is its.
    pub pid: u32,
    /// Its CPU quota's periods and throttled ones during the recording,
    /// if it has a quota ([`crate::process::cpu_quota`]).
    pub throttling: Option<Throttling>,
}

/// One process and its CPU.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessRow {
    pub pid: u32,
    pub comm: String,
    pub exe: String,
    /// Its container's name, or [`HOST_GROUP`].
    pub container: String,
    pub samples: u64,
    /// For a JVM: whether stoke's agent answered, and how fast.
    pub jvm: Option<String>,
}

/// One function and the samples it was on (`total`) and at the top of
/// (`self_samples`).
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionRow {
    pub name: Arc<str>,
    pub self_samples: u64,
    pub total: u64,
}

/// Everything the report's tables show.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub samples: u64,
    pub containers: Vec<ContainerRow>,
    pub processes: Vec<ProcessRow>,
    pub functions: Vec<FunctionRow>,
    /// Share of native user stacks that reached their root.
    pub reached_root: Option<f64>,
    /// Share of JVM samples with Java frames.
    pub java_coverage: Option<f64>,
}

fn label<'a>(stack: &'a FoldedStack, key: &str) -> Option<&'a str> {
    stack
        .labels
        .iter()
        .find(|(name, _)| *name == key)
        .map(|(_, value)| &**value)
}

/// A container's name for the tables: its name, else its short id.
fn container_of(stack: &FoldedStack) -> (String, String) {
    let id = label(stack, "container_id").unwrap_or_default().to_owned();
    let name = match (label(stack, "container_name"), id.is_empty()) {
        (Some(name), _) => name.to_owned(),
        (None, false) => id.chars().take(12).collect(),
        (None, true) => HOST_GROUP.to_owned(),
    };
    (name, id)
}

impl Sweep {
    /// The tables of `profile`.
    pub fn of(profile: &Profile) -> Self {
        let summary = &profile.summary;
        let attached: HashMap<u32, u64> = summary.java.attach_ms.iter().copied().collect();
        let not_attached: HashMap<u32, &str> = summary
            .java
            .not_attached
            .iter()
            .map(|(pid, why)| (*pid, why.as_str()))
            .collect();
        let mut containers: BTreeMap<String, (ContainerRow, HashSet<u32>)> = BTreeMap::new();
        let mut processes: HashMap<u32, ProcessRow> = HashMap::new();
        let mut java_pids: HashSet<u32> = HashSet::new();
        let mut functions: HashMap<Arc<str>, FunctionRow> = HashMap::new();
        for stack in &profile.stacks {
            let pid = label(stack, "pid")
                .and_then(|pid| pid.parse().ok())
                .unwrap_or(0);
            let (name, id) = container_of(stack);
            let pod = match (label(stack, "namespace"), label(stack, "pod")) {
                (Some(namespace), Some(pod)) => format!("{namespace}/{pod}"),
                _ => String::new(),
            };
            let (row, pids) = containers.entry(name.clone()).or_insert_with(|| {
                (
                    ContainerRow {
                        name: name.clone(),
                        id,
                        pod,
                        samples: 0,
                        processes: 0,
                        pid,
                        throttling: None,
                    },
                    HashSet::new(),
                )
            });
            row.samples += stack.samples;
            pids.insert(pid);
            let process = processes.entry(pid).or_insert_with(|| ProcessRow {
                pid,
                comm: label(stack, "comm").unwrap_or("?").to_owned(),
                exe: label(stack, "exe").unwrap_or_default().to_owned(),
                container: name,
                samples: 0,
                jvm: None,
            });
            process.samples += stack.samples;
            let code = &stack.frames[stack.context_frames.min(stack.frames.len())..];
            if code.iter().any(|frame| is_java(frame)) {
                java_pids.insert(pid);
            }
            if let Some(leaf) = code.last() {
                function(&mut functions, leaf).self_samples += stack.samples;
            }
            let mut seen = HashSet::new();
            for frame in code {
                if seen.insert(frame) {
                    function(&mut functions, frame).total += stack.samples;
                }
            }
        }
        for process in processes.values_mut() {
            process.jvm = match attached.get(&process.pid) {
                Some(ms) => Some(format!("agent attached in {ms} ms")),
                None if java_pids.contains(&process.pid) => Some("agent attached".into()),
                // Stoke tried its agent and said why not.
                None => match not_attached.get(&process.pid) {
                    Some(why) => Some(format!("native frames only: {why}")),
                    None if is_jvm(process) && summary.java.disabled => {
                        Some("native frames only: --no-jvm".into())
                    }
                    None if is_jvm(process) => Some("native frames only".into()),
                    None => None,
                },
            };
        }
        let mut containers: Vec<ContainerRow> = containers
            .into_values()
            .map(|(mut row, pids)| {
                row.processes = pids.len();
                row
            })
            .collect();
        containers.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.name.cmp(&b.name)));
        let mut processes: Vec<ProcessRow> = processes.into_values().collect();
        processes.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.pid.cmp(&b.pid)));
        processes.truncate(MAX_ROWS);
        let mut functions: Vec<FunctionRow> = functions.into_values().collect();
        functions.sort_by(|a, b| {
            (b.self_samples, b.total)
                .cmp(&(a.self_samples, a.total))
                .then(a.name.cmp(&b.name))
        });
        functions.truncate(MAX_ROWS);
        let quality = &summary.stack_quality;
        let java = &summary.java;
        let jvm_samples = java.java_samples + java.non_java_samples;
        Self {
            samples: profile.stacks.iter().map(|stack| stack.samples).sum(),
            containers,
            processes,
            functions,
            reached_root: (quality.samples > 0)
                .then(|| quality.reached_root as f64 / quality.samples as f64),
            java_coverage: (jvm_samples > 0).then(|| java.java_samples as f64 / jvm_samples as f64),
        }
    }

    /// `part` as a share of all samples.
    pub fn share(&self, part: u64) -> f64 {
        part as f64 / self.samples.max(1) as f64
    }
}

fn function<'a>(
    functions: &'a mut HashMap<Arc<str>, FunctionRow>,
    name: &Arc<str>,
) -> &'a mut FunctionRow {
    functions
        .entry(name.clone())
        .or_insert_with(|| FunctionRow {
            name: name.clone(),
            self_samples: 0,
            total: 0,
        })
}

/// A Java frame as stoke names it: JIT-compiled, inlined or interpreted.
pub fn is_java(frame: &str) -> bool {
    frame.ends_with("_[j]") || frame.ends_with("_[i]") || frame.ends_with("_[0]")
}

/// A process that looks like a JVM without Java frames: the agent did not
/// answer (too early, refused, `--no-jvm`).
fn is_jvm(process: &ProcessRow) -> bool {
    process.comm == "java" || process.exe.ends_with("/bin/java")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(labels: &[(&'static str, &str)], frames: &[&str], samples: u64) -> FoldedStack {
        FoldedStack {
            frames: frames.iter().map(|frame| Arc::from(*frame)).collect(),
            context_frames: 1,
            samples,
            labels: labels
                .iter()
                .map(|(key, value)| (*key, Arc::from(*value)))
                .collect(),
            modules: Box::new([]),
        }
    }

    #[test]
    fn tables_group_by_container_and_process_and_rank_functions() {
        let web = [
            ("pid", "10"),
            ("comm", "java"),
            ("container_id", "abcdef0123456789"),
            ("container_name", "web"),
        ];
        let mut profile = Profile {
            stacks: vec![
                stack(&web, &["java [10]", "Main.run_[j]", "Main.work_[j]"], 6),
                stack(&web, &["java [10]", "Main.run_[j]", "Main.run_[j]"], 1),
                stack(
                    &[("pid", "20"), ("comm", "gzip")],
                    &["gzip [20]", "main", "deflate"],
                    3,
                ),
                stack(
                    &[("pid", "30"), ("comm", "java"), ("exe", "/usr/bin/java")],
                    &["java [30]", "start_thread"],
                    1,
                ),
            ],
            ..Profile::default()
        };
        let sweep = Sweep::of(&profile);
        assert_eq!(sweep.samples, 11);
        let names: Vec<(&str, u64, usize)> = sweep
            .containers
            .iter()
            .map(|row| (row.name.as_str(), row.samples, row.processes))
            .collect();
        assert_eq!(names, [("web", 7, 1), (HOST_GROUP, 4, 2)]);
        assert_eq!(sweep.processes[0].pid, 10);
        assert_eq!(sweep.processes[0].jvm.as_deref(), Some("agent attached"));
        assert_eq!(
            sweep.processes[2].jvm.as_deref(),
            Some("native frames only")
        );
        assert_eq!(sweep.processes[1].jvm, None);
        // Why, when stoke knows.
        profile.summary.java.disabled = true;
        let jvm_30 = |profile: &Profile| Sweep::of(profile).processes[2].jvm.clone();
        assert_eq!(
            jvm_30(&profile).as_deref(),
            Some("native frames only: --no-jvm")
        );
        profile.summary.java.disabled = false;
        profile.summary.java.not_attached = vec![(30, "attach refused".into())];
        assert_eq!(
            jvm_30(&profile).as_deref(),
            Some("native frames only: attach refused")
        );
        let top = &sweep.functions[0];
        assert_eq!(
            (&*top.name, top.self_samples, top.total),
            ("Main.work_[j]", 6, 6)
        );
        let run = sweep
            .functions
            .iter()
            .find(|row| &*row.name == "Main.run_[j]")
            .unwrap();
        // Recursion counts once per stack in the total.
        assert_eq!((run.self_samples, run.total), (1, 7));
    }
}
