//! The encoder's output, decoded with prost.

use std::{
    collections::HashSet,
    io::Read,
    sync::Arc,
    time::{Duration, UNIX_EPOCH},
};

use flate2::read::GzDecoder;
use prost::Message;

use super::{encode, proto};
use crate::model::{FoldedStack, Labels, Module, Profile, RecordingSummary};

fn stack(
    frames: &str,
    context_frames: usize,
    samples: u64,
    modules: &[Option<u32>],
) -> FoldedStack {
    let labels: Labels = Arc::new([
        ("pid", "42".into()),
        ("comm", "app".into()),
        ("container_name", "web".into()),
    ]);
    FoldedStack {
        frames: frames.split(';').map(Arc::from).collect(),
        context_frames,
        samples,
        labels,
        modules: modules.into(),
    }
}

fn profile() -> Profile {
    Profile {
        event: crate::event::Event::Cpu,
        stacks: vec![
            stack(
                "web [container 0123];app [42];main;work;spin",
                2,
                7,
                &[Some(1), Some(1), Some(0)],
            ),
            stack(
                "web [container 0123];app [42];main;Foo.bar_[j];read_[k]",
                2,
                3,
                &[Some(1)],
            ),
        ],
        modules: vec![
            Module {
                path: "/lib/libc.so.6".into(),
                build_id: Some("abcd".into()),
            },
            Module {
                path: "/usr/bin/app".into(),
                build_id: None,
            },
            Module {
                path: "/unused.so".into(),
                build_id: None,
            },
        ],
        summary: RecordingSummary {
            duration: Duration::from_secs(2),
            started: Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            frequency_hz: 100,
            ..RecordingSummary::default()
        },
    }
}

fn decode(bytes: &[u8]) -> proto::Profile {
    let mut raw = Vec::new();
    GzDecoder::new(bytes).read_to_end(&mut raw).unwrap();
    proto::Profile::decode(raw.as_slice()).unwrap()
}

fn string(profile: &proto::Profile, index: i64) -> &str {
    &profile.string_table[usize::try_from(index).unwrap()]
}

/// A sample's frames by name, innermost first.
fn frames(profile: &proto::Profile, sample: &proto::Sample) -> Vec<String> {
    sample
        .location_id
        .iter()
        .map(|&id| {
            let location = &profile.location[usize::try_from(id).unwrap() - 1];
            assert_eq!(location.id, id);
            let function =
                &profile.function[usize::try_from(location.line[0].function_id).unwrap() - 1];
            string(profile, function.name).to_owned()
        })
        .collect()
}

#[test]
fn settings_and_sample_types() {
    let source = profile();
    let profile = decode(&encode(&source, &source.stacks));
    let types: Vec<(&str, &str)> = profile
        .sample_type
        .iter()
        .map(|t| (string(&profile, t.r#type), string(&profile, t.unit)))
        .collect();
    assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
    let period_type = profile.period_type.as_ref().unwrap();
    assert_eq!(string(&profile, period_type.r#type), "cpu");
    assert_eq!(profile.period, 10_000_000);
    assert_eq!(profile.time_nanos, 1_700_000_000_000_000_000);
    assert_eq!(profile.duration_nanos, 2_000_000_000);
}

#[test]
fn code_frames_become_locations_innermost_first_and_context_frames_do_not() {
    let source = profile();
    let profile = decode(&encode(&source, &source.stacks));
    let samples: Vec<(Vec<String>, Vec<i64>)> = profile
        .sample
        .iter()
        .map(|sample| (frames(&profile, sample), sample.value.clone()))
        .collect();
    assert_eq!(
        samples,
        [
            (
                vec!["spin".into(), "work".into(), "main".into()],
                vec![7, 70_000_000]
            ),
            (
                vec!["read_[k]".into(), "Foo.bar_[j]".into(), "main".into()],
                vec![3, 30_000_000]
            ),
        ]
    );
    // `main` once, as one function and one location, although in two stacks.
    assert_eq!(profile.function.len(), 5);
    assert_eq!(profile.location.len(), 5);
    let strings: HashSet<&String> = profile.string_table.iter().collect();
    assert_eq!(strings.len(), profile.string_table.len(), "a string twice");
    assert_eq!(profile.string_table[0], "");
}

#[test]
fn locations_map_to_their_files_and_only_used_files_are_listed() {
    let source = profile();
    let profile = decode(&encode(&source, &source.stacks));
    let files: Vec<(&str, &str, bool)> = profile
        .mapping
        .iter()
        .map(|m| {
            (
                string(&profile, m.filename),
                string(&profile, m.build_id),
                m.has_functions,
            )
        })
        .collect();
    assert_eq!(
        files,
        [("/usr/bin/app", "", true), ("/lib/libc.so.6", "abcd", true)]
    );
    let mapping_of = |name: &str| {
        let function = profile
            .function
            .iter()
            .find(|f| string(&profile, f.name) == name)
            .unwrap();
        let location = profile
            .location
            .iter()
            .find(|l| l.line[0].function_id == function.id)
            .unwrap();
        location.mapping_id
    };
    assert_eq!(mapping_of("main"), 1);
    assert_eq!(mapping_of("spin"), 2);
    assert_eq!(
        mapping_of("Foo.bar_[j]"),
        0,
        "frames past the stack's modules have none"
    );
    assert_eq!(mapping_of("read_[k]"), 0);
}

#[test]
fn every_sample_carries_the_stacks_labels_pid_as_a_number() {
    let source = profile();
    let profile = decode(&encode(&source, &source.stacks));
    for sample in &profile.sample {
        let labels: Vec<(&str, &str, i64)> = sample
            .label
            .iter()
            .map(|l| (string(&profile, l.key), string(&profile, l.str), l.num))
            .collect();
        assert_eq!(
            labels,
            [
                ("pid", "", 42),
                ("comm", "app", 0),
                ("container_name", "web", 0)
            ]
        );
    }
}

#[test]
fn a_subset_of_stacks_encodes_alone() {
    let source = profile();
    let profile = decode(&encode(&source, &source.stacks[1..]));
    assert_eq!(profile.sample.len(), 1);
    assert_eq!(profile.sample[0].value, [3, 30_000_000]);
    assert_eq!(profile.function.len(), 3);
    assert_eq!(profile.mapping.len(), 1);
    assert_eq!(
        string(&profile, profile.mapping[0].filename),
        "/usr/bin/app"
    );
}

#[test]
fn frames_with_source_lines_are_lines_of_one_function() {
    let mut profile = profile();
    profile.stacks = vec![
        stack("app [42];main (app.c:30);spin (app.c:12)", 1, 5, &[]),
        stack("app [42];main (app.c:30);spin (app.c:14)", 1, 2, &[]),
        stack(
            "app [42];Foo.bar (Foo.java:7)_[j];odd (x);f (a:b:0)",
            1,
            1,
            &[],
        ),
    ];
    let decoded = decode(&encode(&profile, &profile.stacks));
    let function = |name: &str| {
        decoded
            .function
            .iter()
            .filter(|function| string(&decoded, function.name) == name)
            .map(|function| string(&decoded, function.filename))
            .collect::<Vec<_>>()
    };
    assert_eq!(function("spin"), ["app.c"], "one function for both lines");
    assert_eq!(function("main"), ["app.c"]);
    assert_eq!(function("Foo.bar_[j]"), ["Foo.java"]);
    // No line in them: names as they are.
    assert_eq!(function("odd (x)"), [""]);
    assert_eq!(function("f (a:b:0)"), [""]);
    let lines: HashSet<(String, i64)> = decoded
        .location
        .iter()
        .flat_map(|location| &location.line)
        .map(|line| {
            let function = &decoded.function[line.function_id as usize - 1];
            (string(&decoded, function.name).to_owned(), line.line)
        })
        .collect();
    for expected in [("spin", 12), ("spin", 14), ("main", 30), ("Foo.bar_[j]", 7)] {
        assert!(
            lines.contains(&(expected.0.to_owned(), expected.1)),
            "{expected:?} not among {lines:?}"
        );
    }
    assert_eq!(decoded.location.len(), 6, "a location per distinct frame");
}
