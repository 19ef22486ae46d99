//! pprof profiles (`profile.proto`, gzipped), from Stoke or any pprof tool,
//! as stacks of function names.

use std::{
    collections::HashMap,
    io::{BufRead, Read},
    path::Path,
    sync::Arc,
};

use anyhow::{bail, Context, Result};
use flate2::bufread::GzDecoder;
use prost::Message;

use crate::{
    profile::{clean_frame, FoldedStack, Profile},
    write::pprof::proto,
};

/// The most a profile may take unzipped: a gzip bomb stops there.
const MAX_UNZIPPED: u64 = 1 << 30;

/// The stacks of the pprof profile `input` (named `path` in errors), counted
/// by its default sample type's values (else `samples`, else the last). A
/// sample's `comm` label, which Stoke writes, becomes its root frame.
pub(super) fn read(input: impl BufRead, path: &Path) -> Result<Profile> {
    let mut bytes = Vec::new();
    GzDecoder::new(input)
        .take(MAX_UNZIPPED + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("{} is not a gzipped pprof profile", path.display()))?;
    if bytes.len() as u64 > MAX_UNZIPPED {
        bail!("{} unzips to more than 1 GiB", path.display());
    }
    let profile = proto::Profile::decode(&bytes[..])
        .with_context(|| format!("{} is not a pprof profile", path.display()))?;
    Ok(stacks(&profile))
}

/// The string at `index` in the profile's string table ("" if none).
fn text(pprof: &proto::Profile, index: i64) -> &str {
    usize::try_from(index)
        .ok()
        .and_then(|index| pprof.string_table.get(index))
        .map_or("", String::as_str)
}

/// Which of a sample's values stacks are counted by: the profile's default
/// sample type (a string, named by its index in the string table), else
/// Stoke's `samples`, else the last, as profile.proto says.
fn value_index(pprof: &proto::Profile) -> usize {
    let position = |name: &str| {
        pprof
            .sample_type
            .iter()
            .position(|kind| text(pprof, kind.r#type) == name)
    };
    (pprof.default_sample_type != 0)
        .then(|| position(text(pprof, pprof.default_sample_type)))
        .flatten()
        .or_else(|| position("samples"))
        .unwrap_or(pprof.sample_type.len().saturating_sub(1))
}

fn stacks(pprof: &proto::Profile) -> Profile {
    let text = |index: i64| text(pprof, index);
    let value = value_index(pprof);
    let functions: HashMap<u64, Arc<str>> = pprof
        .function
        .iter()
        .map(|function| (function.id, clean_frame(text(function.name).into())))
        .collect();
    // Per location, its frames root first: pprof lists inlined lines
    // innermost first.
    let locations: HashMap<u64, Vec<Arc<str>>> = pprof
        .location
        .iter()
        .map(|location| {
            let frames = location
                .line
                .iter()
                .rev()
                .map(|line| {
                    functions
                        .get(&line.function_id)
                        .cloned()
                        .unwrap_or_else(|| "[unknown]".into())
                })
                .collect();
            (location.id, frames)
        })
        .collect();
    let comm = pprof.string_table.iter().position(|key| key == "comm");
    let mut counts: HashMap<Vec<Arc<str>>, u64> = HashMap::new();
    for sample in &pprof.sample {
        let samples = sample.value.get(value).copied().unwrap_or(0);
        let Ok(samples) = u64::try_from(samples) else {
            continue;
        };
        let mut frames: Vec<Arc<str>> = sample
            .label
            .iter()
            .filter(|label| comm.is_some_and(|comm| label.key == comm as i64))
            .map(|label| clean_frame(text(label.str).into()))
            .take(1)
            .collect();
        for id in sample.location_id.iter().rev() {
            match locations.get(id) {
                Some(location) => frames.extend(location.iter().cloned()),
                None => frames.push("[unknown]".into()),
            }
        }
        *counts.entry(frames).or_default() += samples;
    }
    let mut profile = Profile::default();
    profile.summary.samples = counts.values().sum();
    profile.stacks = counts
        .into_iter()
        .map(|(frames, samples)| FoldedStack {
            context_frames: 0,
            frames,
            samples,
            labels: Arc::new([]),
            modules: Box::new([]),
        })
        .collect();
    profile
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::{tests::profile, write_profile, Format};

    #[test]
    fn stokes_own_pprof_reads_back_as_its_stacks() {
        let original = profile(&[("app [7];main;f_[k]", 3), ("app [7];main", 2)]);
        let mut bytes = Vec::new();
        write_profile(&original, Format::Pprof, &mut bytes).unwrap();
        let read = read(&bytes[..], Path::new("p.pb.gz")).unwrap();
        let mut stacks: Vec<_> = read
            .stacks
            .iter()
            .map(|stack| (stack.frames.join(";"), stack.samples))
            .collect();
        stacks.sort();
        // The test profile has no labels, so no comm frame.
        assert_eq!(stacks, [("main".into(), 2), ("main;f_[k]".into(), 3)]);
        assert_eq!(read.summary.samples, 5);
    }

    /// A Go heap profile's shape: four sample types, one stack whose
    /// values tell which type was counted.
    fn heap_profile(default_sample_type: &str) -> proto::Profile {
        let strings = [
            "",
            "alloc_objects",
            "count",
            "alloc_space",
            "bytes",
            "inuse_objects",
            "inuse_space",
            "main",
        ];
        let index = |name: &str| strings.iter().position(|s| *s == name).unwrap() as i64;
        let kind = |kind: &str, unit: &str| proto::ValueType {
            r#type: index(kind),
            unit: index(unit),
        };
        proto::Profile {
            sample_type: vec![
                kind("alloc_objects", "count"),
                kind("alloc_space", "bytes"),
                kind("inuse_objects", "count"),
                kind("inuse_space", "bytes"),
            ],
            sample: vec![proto::Sample {
                location_id: vec![1],
                value: vec![1, 20, 300, 4000],
                label: Vec::new(),
            }],
            location: vec![proto::Location {
                id: 1,
                line: vec![proto::Line {
                    function_id: 1,
                    ..proto::Line::default()
                }],
                ..proto::Location::default()
            }],
            function: vec![proto::Function {
                id: 1,
                name: index("main"),
                ..proto::Function::default()
            }],
            string_table: strings.map(String::from).to_vec(),
            default_sample_type: index(default_sample_type),
            ..proto::Profile::default()
        }
    }

    #[test]
    fn the_default_sample_type_is_found_by_name_and_is_else_the_last() {
        for (default, counted) in [("alloc_space", 20), ("inuse_space", 4000), ("", 4000)] {
            let read = stacks(&heap_profile(default));
            assert_eq!(read.summary.samples, counted, "default {default:?}");
        }
    }

    #[test]
    fn garbage_is_an_error_naming_the_file() {
        let error = read(&[0x1f, 0x8b, 1, 2][..], Path::new("x.pb.gz"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("x.pb.gz"), "{error}");
    }
}
