//! The counters as Prometheus's text exposition format (version 0.0.4):
//! per metric a `# HELP` and a `# TYPE` line, then its samples; names
//! start with `stoke_`, counters end in `_total`.

use std::fmt::Write;

use super::State;

/// A metric family's type.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

/// The text a scrape gets.
pub(super) fn render(state: &State) -> String {
    let mut text = Text(String::new());
    let totals = &state.totals;
    text.one(
        "intervals_total",
        Kind::Counter,
        "Profiles cut (intervals ended).",
        state.intervals,
    );
    text.one(
        "samples_total",
        Kind::Counter,
        "Samples in the profiles.",
        totals.samples,
    );
    text.family(
        "samples_lost_total",
        Kind::Counter,
        "Samples taken but missing from the profiles, by reason.",
        "reason",
        [
            ("ring_full", totals.lost_ring_full),
            ("malformed", totals.malformed_records),
            ("offcpu_over_budget", totals.over_budget),
        ],
    );
    text.one(
        "lifecycle_records_lost_total",
        Kind::Counter,
        "Exec and exit notices lost; samples after one may be misattributed.",
        totals.lost_lifecycle_records,
    );
    text.family(
        "partial_stacks_total",
        Kind::Counter,
        "Samples kept without their kernel or user stack, which could not be read.",
        "stack",
        [
            ("kernel", totals.partial_kernel_stacks),
            ("user", totals.partial_user_stacks),
        ],
    );
    text.one(
        "idle_samples_skipped_total",
        Kind::Counter,
        "Samples of idle CPUs, left out without --idle.",
        totals.idle_skipped,
    );
    let quality = &totals.stack_quality;
    text.family(
        "user_stacks_total",
        Kind::Counter,
        "Native user stacks by how unwinding ended: at the process or thread start (root), or why it stopped.",
        "outcome",
        std::iter::once(("root", quality.reached_root))
            .chain(quality.truncated.iter().map(|(&reason, &count)| (reason, count))),
    );
    text.one(
        "processes",
        Kind::Gauge,
        "Processes stoke holds at the last interval's end.",
        totals.processes as u64,
    );
    let java = &state.java;
    text.family(
        "jvms_total",
        Kind::Counter,
        "JVMs by attach result: attached (their agent answered), or native_only (refused, or their stacks kept native for another reason).",
        "result",
        [
            ("attached", java.jvms as u64),
            ("native_only", state.jvms_native_only),
        ],
    );
    text.family(
        "jvm_samples_total",
        Kind::Counter,
        "Samples of JVM threads: with Java frames, of threads running no Java, or kept native-only.",
        "kind",
        [
            ("java", java.java_samples),
            ("non_java", java.non_java_samples),
            ("native_only", java.native_only.values().sum()),
        ],
    );
    text.family(
        "jvm_native_only_samples_total",
        Kind::Counter,
        "Samples of JVM threads that kept their native stack only, by reason.",
        "reason",
        java.native_only
            .iter()
            .map(|(&reason, &count)| (reason, count)),
    );
    if let Some(export) = &state.export {
        let destinations = export.destinations();
        let each = |pick: fn(&crate::export::DeliveryStats) -> u64| {
            destinations
                .iter()
                .map(move |(name, stats, _)| (*name, pick(stats)))
        };
        text.family(
            "export_delivered_total",
            Kind::Counter,
            "Profiles delivered (pushed, or written), by destination.",
            "destination",
            each(|stats| stats.delivered),
        );
        text.family(
            "export_refused_total",
            Kind::Counter,
            "Profiles refused for good, not retried, by destination.",
            "destination",
            each(|stats| stats.refused),
        );
        text.family(
            "export_failed_attempts_total",
            Kind::Counter,
            "Delivery attempts that failed and were retried, by destination.",
            "destination",
            each(|stats| stats.failed_attempts),
        );
        text.family(
            "export_batches_dropped_total",
            Kind::Counter,
            "Batches (intervals) dropped from a full queue, by destination.",
            "destination",
            each(|stats| stats.dropped),
        );
        text.family(
            "export_queue_batches",
            Kind::Gauge,
            "Batches waiting to be delivered, by destination.",
            "destination",
            destinations
                .iter()
                .map(|(name, _, queued)| (*name, *queued as u64)),
        );
    }
    text.one_f64(
        "process_cpu_seconds_total",
        Kind::Counter,
        "CPU time stoke's own process used, user and system.",
        cpu_seconds(),
    );
    text.one(
        "process_resident_memory_bytes",
        Kind::Gauge,
        "Resident memory of stoke's own process.",
        resident_bytes(),
    );
    text.0
}

/// The exposition being written.
struct Text(String);

impl Text {
    fn header(&mut self, name: &str, kind: Kind, help: &str) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(
            self.0,
            "# HELP stoke_{name} {help}\n# TYPE stoke_{name} {kind}"
        );
    }

    /// A metric of one sample.
    fn one(&mut self, name: &str, kind: Kind, help: &str, value: u64) {
        self.header(name, kind, help);
        let _ = writeln!(self.0, "stoke_{name} {value}");
    }

    fn one_f64(&mut self, name: &str, kind: Kind, help: &str, value: f64) {
        self.header(name, kind, help);
        let _ = writeln!(self.0, "stoke_{name} {value}");
    }

    /// A metric of a sample per value of `label`.
    fn family<'a>(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        label: &str,
        samples: impl IntoIterator<Item = (&'a str, u64)>,
    ) {
        self.header(name, kind, help);
        for (value, count) in samples {
            let _ = writeln!(
                self.0,
                "stoke_{name}{{{label}=\"{}\"}} {count}",
                escape(value)
            );
        }
    }
}

/// A label value as the format quotes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// User and system CPU time of this process, all its threads.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// This process's resident memory, from `/proc/self/statm` (0 if it cannot
/// be read).
fn resident_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page_size.max(0) as u64
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn every_metric_has_help_and_type_and_counters_end_in_total() {
        let mut state = State::default();
        state.totals.samples = 1234;
        state.totals.lost_ring_full = 5;
        state.totals.stack_quality.truncated = BTreeMap::from([("no \"table\"", 3)]);
        state.java.jvms = 2;
        let text = render(&state);
        assert!(text.contains("\nstoke_samples_total 1234\n"), "{text}");
        assert!(
            text.contains("\nstoke_samples_lost_total{reason=\"ring_full\"} 5\n"),
            "{text}"
        );
        assert!(
            text.contains("stoke_user_stacks_total{outcome=\"no \\\"table\\\"\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("stoke_jvms_total{result=\"attached\"} 2\n"),
            "{text}"
        );
        let mut declared = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert_eq!(name.ends_with("_total"), kind == "counter", "{line}");
                declared.insert(name.to_owned(), kind.to_owned());
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                assert!(rest.starts_with("stoke_") && rest.contains(' '), "{line}");
            } else {
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(
                    declared.contains_key(name),
                    "{name} has no TYPE line before it"
                );
                let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
                assert!(value >= 0.0, "{line}");
            }
        }
        assert!(cpu_seconds() > 0.0);
        assert!(resident_bytes() > 1 << 20);
    }
}
