//! The profile as JSON, for programs: the recording's summary (every count
//! of the txt report, durations in seconds) and every distinct stack.

use std::io::{self, Write};

use serde::Serialize;

use crate::model::{FoldedStack, Profile, RecordingSummary};

/// What a reader checks before reading further.
const FORMAT: &str = "stoke-profile";
/// Bumped when a field changes meaning or goes away (adding one does not).
const VERSION: u32 = 2;

#[derive(Serialize)]
struct Document<'a> {
    format: &'static str,
    version: u32,
    /// What the stacks count (`cpu`, `offcpu`...), and the unit of their
    /// `samples` field.
    event: &'static str,
    unit: &'static str,
    summary: &'a RecordingSummary,
    stacks: &'a [FoldedStack],
}

pub(super) fn write(profile: &Profile, out: &mut dyn Write) -> io::Result<()> {
    let document = Document {
        format: FORMAT,
        version: VERSION,
        event: profile.event.name(),
        unit: profile.event.unit(),
        summary: &profile.summary,
        stacks: &profile.stacks,
    };
    serde_json::to_writer(&mut *out, &document)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::tests::profile;

    #[test]
    fn the_summary_and_every_stack_are_there() {
        let mut profile = profile(&[("app;main;work", 3), ("app;main", 1)]);
        profile.summary.duration = std::time::Duration::from_millis(1500);
        let mut out = Vec::new();
        write(&profile, &mut out).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(json["format"], "stoke-profile");
        assert_eq!(
            (&json["event"], &json["unit"]),
            (&"cpu".into(), &"samples".into())
        );
        assert_eq!(json["summary"]["samples"], 4);
        assert_eq!(json["summary"]["duration"], 1.5);
        assert_eq!(
            json["summary"]["bpf_time_per_sample"],
            serde_json::Value::Null
        );
        let stacks = json["stacks"].as_array().unwrap();
        assert_eq!(stacks.len(), 2);
        assert_eq!(stacks[0]["frames"][2], "work");
        assert_eq!(stacks[0]["samples"], 3);
        assert_eq!(stacks[0]["context_frames"], 1);
    }
}
