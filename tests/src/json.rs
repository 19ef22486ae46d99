//! Stoke's JSON profile (`stoke record -o FILE.json`), read: its stacks and
//! the summary counts the tests and the bench check. The types mirror only
//! the fields read here; stoke's `write/json.rs` writes the rest too.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::Deserialize;

use crate::{describe, Stack};

/// The `format` every stoke JSON profile starts with.
const FORMAT: &str = "stoke-profile";
/// The version read here: stoke bumps it when a field changes meaning.
const VERSION: u32 = 2;

/// A profile stoke wrote as JSON.
#[derive(Debug, Clone, Deserialize)]
pub struct JsonProfile {
    format: String,
    version: u32,
    /// How the recording went.
    pub summary: Summary,
    /// Every distinct stack once, root (the process frame) first.
    pub stacks: Vec<Stack>,
}

/// The counts of a recording, as the txt report's header gives them.
#[derive(Debug, Clone, Deserialize)]
pub struct Summary {
    /// Samples in the profile (for off-CPU, the waits recorded).
    pub samples: u64,
    /// Off-CPU waits left out past the per-CPU budget.
    #[serde(default)]
    pub over_budget: u64,
    /// Distinct addresses named after the recording.
    pub symbolized_addresses: u64,
    /// How long naming them took, in seconds.
    pub symbolize_time: f64,
    /// Most JVM threads sampled at once by perf events of their own.
    pub timed_threads: u64,
    /// How Java profiling went.
    pub java: JavaSummary,
    /// What loading unwind tables cost.
    pub unwind: UnwindSummary,
    /// How far native user stacks got.
    pub stack_quality: StackQuality,
}

/// How Java profiling went.
#[derive(Debug, Clone, Deserialize)]
pub struct JavaSummary {
    /// JVMs whose agent answered.
    pub jvms: u64,
    /// How long each attach took, in milliseconds, by JVM pid.
    pub attach_ms: Vec<(u32, u64)>,
    /// For each JVM started during the recording, the milliseconds from
    /// its start to its first sample with Java frames, by JVM pid.
    pub java_after_start_ms: Vec<(u32, u64)>,
    /// Samples of JVM threads with Java frames.
    pub java_samples: u64,
    /// Samples of JVM threads that run no Java (GC, compiler, native).
    pub non_java_samples: u64,
    /// Samples of JVM threads that kept only their native stack, by reason.
    pub native_only: BTreeMap<String, u64>,
    /// Java stacks the agents sent that were dropped on arrival, by reason.
    pub dropped_stacks: BTreeMap<String, u64>,
}

/// What loading unwind tables cost.
#[derive(Debug, Clone, Deserialize)]
pub struct UnwindSummary {
    /// Files whose tables were compiled and loaded.
    pub files: u64,
    /// Files that shared the table of another copy of the same build.
    pub shared_files: u64,
    /// Rows loaded, all files together.
    pub rows: u64,
    /// Bytes the loaded rows take in the map.
    pub bytes: u64,
    /// Time spent compiling tables, in seconds.
    pub compile_time: f64,
    /// Processes whose tables were loaded.
    pub processes: u64,
    /// Processes with more executable mappings than the unwinder holds.
    pub processes_over_mapping_cap: u64,
    /// Their mappings past the cap, left out.
    pub mappings_left_out: u64,
}

/// How far native user stacks got.
#[derive(Debug, Clone, Deserialize)]
pub struct StackQuality {
    /// Samples with a native user stack (samples with Java frames left out).
    pub samples: u64,
    /// Of those, the ones whose outermost frame is a process or thread
    /// start.
    pub reached_root: u64,
    /// The others, by why their stack ended.
    pub truncated: BTreeMap<String, u64>,
}

impl JsonProfile {
    /// Parses a JSON profile, checking that it is one, of the version read
    /// here.
    ///
    /// # Errors
    ///
    /// If `text` is not such a profile, saying why.
    pub fn parse(text: &str) -> Result<Self, String> {
        let profile: JsonProfile =
            serde_json::from_str(text).map_err(|e| format!("not a stoke JSON profile: {e}"))?;
        if profile.format != FORMAT || profile.version != VERSION {
            return Err(format!(
                "a {:?} version {} file, not a {FORMAT:?} version {VERSION} one",
                profile.format, profile.version
            ));
        }
        Ok(profile)
    }

    /// Reads and parses ([`JsonProfile::parse`]) the JSON profile at `path`.
    ///
    /// # Errors
    ///
    /// If it cannot be read or is not such a profile, naming it.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text =
            fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Whether some frame's name contains `text` (a method, a class).
    pub fn names(&self, text: &str) -> bool {
        self.stacks
            .iter()
            .any(|stack| stack.frames.iter().any(|frame| frame.contains(text)))
    }

    /// The summary and the heaviest stacks, for assertion messages.
    pub fn describe(&self) -> String {
        format!("{:?}\n{}", self.summary, describe(&self.stacks, 10))
    }
}

/// Reads the JSON profile a test's recording wrote ([`JsonProfile::read`]).
///
/// # Panics
///
/// If it cannot be read or is not a stoke JSON profile.
pub fn read_json(path: &Path) -> JsonProfile {
    JsonProfile::read(path).unwrap_or_else(|e| panic!("{e}"))
}

/// The Java counts of a recording's summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JavaReport {
    /// JVMs profiled.
    pub jvms: u64,
    /// Samples with Java frames.
    pub java_samples: u64,
    /// Samples of non-Java JVM threads.
    pub non_java_samples: u64,
    /// Samples whose Java stack is missing, by reason.
    pub missing: Vec<(String, u64)>,
}

impl JavaReport {
    /// The Java counts of `profile`.
    ///
    /// # Panics
    ///
    /// If it profiled no JVM: every test that reads these counts recorded
    /// one.
    pub fn of(profile: &JsonProfile) -> Self {
        let java = &profile.summary.java;
        assert!(
            java.jvms > 0,
            "the recording profiled no JVM:\n{}",
            profile.describe()
        );
        JavaReport {
            jvms: java.jvms,
            java_samples: java.java_samples,
            non_java_samples: java.non_java_samples,
            missing: java
                .native_only
                .iter()
                .map(|(reason, &samples)| (reason.clone(), samples))
                .collect(),
        }
    }

    /// The samples of JVM threads whose Java stack is missing, all reasons
    /// together.
    pub fn missing_total(&self) -> u64 {
        self.missing.iter().map(|(_, n)| n).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = r#"{"format":"stoke-profile","version":2,
        "summary":{"duration":2.0,"samples":4,"symbolized_addresses":7,"symbolize_time":0.01,"timed_threads":2,
        "java":{"jvms":1,"attach_ms":[[42,130]],"java_after_start_ms":[[42,310]],"java_samples":3,"non_java_samples":1,
        "native_only":{"no agent":2},"dropped_stacks":{"timed in the future":1},"dropped_code_events":0},
        "unwind":{"files":2,"shared_files":0,"rows":10,"bytes":160,"compile_time":0.002,"processes":1,
        "processes_over_mapping_cap":0,"mappings_left_out":0},
        "stack_quality":{"samples":1,"reached_root":1,"truncated":{}}},
        "stacks":[{"frames":["java [42]","Busy.crunch_[j]"],"context_frames":1,"samples":3,"labels":{"pid":"42"}},
        {"frames":["java [42]","GC Thread"],"context_frames":1,"samples":1,"labels":{"pid":"42"}}]}"#;

    #[test]
    fn reads_the_summary_and_the_stacks() {
        let profile = JsonProfile::parse(PROFILE).unwrap();
        assert_eq!(profile.summary.java.attach_ms, [(42, 130)]);
        assert_eq!(profile.summary.java.java_after_start_ms, [(42, 310)]);
        assert_eq!(profile.summary.unwind.rows, 10);
        assert_eq!(profile.summary.timed_threads, 2);
        assert_eq!(profile.stacks[0].count, 3);
        assert!(profile.names("Busy.crunch"));
        let java = JavaReport::of(&profile);
        assert_eq!(java.missing, [("no agent".to_owned(), 2)]);
        assert_eq!(java.missing_total(), 2);
    }

    #[test]
    fn refuses_other_files() {
        assert!(JsonProfile::parse("a;b 3\n").is_err());
        let other = PROFILE.replace("\"version\":2", "\"version\":1");
        assert!(JsonProfile::parse(&other)
            .unwrap_err()
            .contains("version 1"));
    }
}
