//! pprof profiles (`profile.proto`, gzipped), from Stoke or any pprof tool,
//! as stacks of function names. Stoke's own say where a sample ran in
//! labels, not frames: the context frames its folded output has are built
//! again from them, so that `stoke diff` lines a Stoke pprof up with a Stoke
//! folded file.

use std::{
    collections::HashMap,
    io::{self, BufRead, Read},
    path::Path,
    sync::Arc,
};

use anyhow::{bail, Context, Result};
use flate2::bufread::GzDecoder;
use prost::Message;

use super::stacks::{Stacks, MAX_FRAMES};
use crate::{
    model::{clean_frame, FoldedStack, Labels, Profile},
    write::pprof::proto,
};

/// The labels Stoke writes ([`Labels`]), kept with the stacks read, so that
/// a profile converted again keeps them.
const STOKE_LABELS: &[&str] = &[
    "pid",
    "comm",
    "exe",
    "service",
    "hostname",
    "container_runtime",
    "container_id",
    "container_name",
    "container_image",
    "pod",
    "namespace",
    "pod_container",
    "systemd_unit",
    "tid",
    "thread",
];

/// The most a profile may take unzipped, and zipped.
pub const MAX_UNZIPPED: u64 = 256 << 20;

/// The stacks of the pprof profile `input` (named `path` in errors), counted
/// by its default sample type's values (else `samples`, else the last), under
/// the context frames its labels name ([`context_frames`]), and what to warn
/// about.
pub(super) fn read(input: impl BufRead, path: &Path) -> Result<(Profile, Vec<String>)> {
    let bytes = gunzip(input, path)?;
    let profile = proto::Profile::decode(&bytes[..])
        .with_context(|| format!("{} is not a pprof profile", path.display()))?;
    drop(bytes);
    stacks(&profile, path)
}

/// The unzipped bytes of `input`, at most [`MAX_UNZIPPED`] of them. They
/// are counted before they are kept, so that a gzip bomb is refused without
/// holding what it unzips to.
fn gunzip(input: impl BufRead, path: &Path) -> Result<Vec<u8>> {
    let not_gzip = || format!("{} is not a gzipped pprof profile", path.display());
    let too_big = || {
        format!(
            "{} unzips to more than {} MiB, the most a profile may have",
            path.display(),
            MAX_UNZIPPED >> 20
        )
    };
    let mut zipped = Vec::new();
    input
        .take(MAX_UNZIPPED + 1)
        .read_to_end(&mut zipped)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if zipped.len() as u64 > MAX_UNZIPPED {
        bail!(too_big());
    }
    let size = io::copy(
        &mut GzDecoder::new(&zipped[..]).take(MAX_UNZIPPED + 1),
        &mut io::sink(),
    )
    .with_context(not_gzip)?;
    if size > MAX_UNZIPPED {
        bail!(too_big());
    }
    let mut bytes = Vec::with_capacity(size as usize);
    GzDecoder::new(&zipped[..])
        .take(size)
        .read_to_end(&mut bytes)
        .with_context(not_gzip)?;
    Ok(bytes)
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

fn stacks(pprof: &proto::Profile, path: &Path) -> Result<(Profile, Vec<String>)> {
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
    let mut stacks: Stacks<(usize, Labels)> = Stacks::default();
    for (number, sample) in pprof.sample.iter().enumerate() {
        let samples = sample.value.get(value).copied().unwrap_or(0);
        let Ok(samples) = u64::try_from(samples) else {
            continue;
        };
        let labels = stoke_labels(pprof, sample);
        let mut frames = context_frames(&labels);
        let context = frames.len();
        // Root first, and no further than the stack is cut anyway.
        for id in sample.location_id.iter().rev() {
            if frames.len() > MAX_FRAMES {
                break;
            }
            match locations.get(id) {
                Some(location) => frames.extend(location.iter().cloned()),
                None => frames.push("[unknown]".into()),
            }
        }
        stacks
            .add(frames, samples, || (context, labels.into()))
            .with_context(|| format!("sample {} of {}", number + 1, path.display()))?;
    }
    let warnings = stacks.warnings(path);
    let profile = stacks.into_profile(|frames, samples, (context_frames, labels)| FoldedStack {
        context_frames,
        frames,
        samples,
        labels,
        modules: Box::new([]),
    });
    Ok((profile, warnings))
}

/// The labels of `sample` that Stoke writes, in its order; `pid` and `tid`
/// are numbers.
fn stoke_labels(pprof: &proto::Profile, sample: &proto::Sample) -> Vec<(&'static str, Arc<str>)> {
    sample
        .label
        .iter()
        .filter_map(|label| {
            let key = *STOKE_LABELS
                .iter()
                .find(|&&key| key == text(pprof, label.key))?;
            let value: Arc<str> = match key {
                "pid" | "tid" if label.str == 0 => label.num.to_string().into(),
                _ => text(pprof, label.str).into(),
            };
            Some((key, value))
        })
        .collect()
}

/// The context frames Stoke's folded output has above the code of a sample
/// with `labels`, as its default `--group-by container` names them: the
/// container's, the process's (`comm [*]` without a pid, as `stoke diff`
/// shows it anyway), the thread's with `-t`. None without a `comm`: the
/// samples are not Stoke's.
fn context_frames(labels: &[(&str, Arc<str>)]) -> Vec<Arc<str>> {
    let label = |key: &str| {
        labels
            .iter()
            .find(|&&(name, _)| name == key)
            .map(|(_, value)| &**value)
    };
    let Some(comm) = label("comm") else {
        return Vec::new();
    };
    let mut frames = Vec::new();
    if let Some(id) = label("container_id") {
        // The short id, as `docker ps` shows it and the folded frame has it.
        let id = id.get(..12).unwrap_or(id);
        frames.push(match label("container_name") {
            Some(name) => format!("{name} [container {id}]"),
            None => format!("[container {id}]"),
        });
    }
    frames.push(format!("{comm} [{}]", label("pid").unwrap_or("*")));
    if let (Some(tid), Some(thread)) = (label("tid"), label("thread")) {
        frames.push(format!("{thread} [tid {tid}]"));
    }
    frames
        .into_iter()
        .map(|frame| clean_frame(frame.into()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::{tests::profile, write_profile, Format};

    #[test]
    fn stokes_own_pprof_reads_back_as_its_stacks() {
        let original = profile(&[("app [7];main;f_[k]", 3), ("app [7];main", 2)]);
        let mut bytes = Vec::new();
        write_profile(&original, Format::Pprof, &Default::default(), &mut bytes).unwrap();
        let (read, _) = read(&bytes[..], Path::new("p.pb.gz")).unwrap();
        let mut stacks: Vec<_> = read
            .stacks
            .iter()
            .map(|stack| (stack.frames.join(";"), stack.samples))
            .collect();
        stacks.sort();
        // The test profile has no labels, so no process frame.
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
            let (read, _) = stacks(&heap_profile(default), Path::new("p")).unwrap();
            assert_eq!(read.summary.samples, counted, "default {default:?}");
        }
    }

    #[test]
    fn stokes_labels_read_back_as_the_context_frames_of_its_folded_output() {
        let labels = |pairs: &[(&'static str, &str)]| -> Labels {
            pairs
                .iter()
                .map(|&(key, value)| (key, Arc::from(value)))
                .collect()
        };
        let mut original = profile(&[
            (
                "web [container 0123456789ab];nginx [7];worker [tid 8];main;serve",
                3,
            ),
            ("bash [9];main", 2),
            ("main;orphan", 1),
        ]);
        original.stacks[0].context_frames = 3;
        original.stacks[0].labels = labels(&[
            ("pid", "7"),
            ("comm", "nginx"),
            ("service", "web"),
            ("container_runtime", "docker"),
            ("container_id", "0123456789abcdef0123"),
            ("container_name", "web"),
            ("tid", "8"),
            ("thread", "worker"),
        ]);
        original.stacks[1].labels = labels(&[("pid", "9"), ("comm", "bash")]);
        original.stacks[2].context_frames = 0;
        let mut bytes = Vec::new();
        write_profile(&original, Format::Pprof, &Default::default(), &mut bytes).unwrap();
        let (read, _) = read(&bytes[..], Path::new("p.pb.gz")).unwrap();
        for stack in &original.stacks {
            let again = read
                .stacks
                .iter()
                .find(|again| again.frames == stack.frames)
                .unwrap_or_else(|| panic!("{:?} not read back: {read:?}", stack.frames));
            assert_eq!(
                (again.context_frames, again.samples, &again.labels),
                (stack.context_frames, stack.samples, &stack.labels)
            );
        }
        assert_eq!(read.stacks.len(), 3);
    }

    #[test]
    fn garbage_is_an_error_naming_the_file() {
        let error = read(&[0x1f, 0x8b, 1, 2][..], Path::new("x.pb.gz"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("x.pb.gz"), "{error}");
    }

    #[test]
    fn counts_saturate_at_the_edge() {
        let mut pprof = heap_profile("inuse_space");
        let sample = pprof.sample[0].clone();
        pprof.sample = vec![sample; 3];
        for sample in &mut pprof.sample {
            sample.value[3] = i64::MAX;
        }
        let (read, warnings) = stacks(&pprof, Path::new("p")).unwrap();
        assert_eq!(read.summary.samples, u64::MAX);
        assert_eq!(read.stacks[0].samples, u64::MAX);
        assert_eq!(
            warnings,
            ["p: its counts add up past 18446744073709551615: held there"]
        );
        pprof.sample.truncate(2);
        let (read, warnings) = stacks(&pprof, Path::new("p")).unwrap();
        assert_eq!(read.summary.samples, u64::MAX - 1);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn deep_stacks_are_cut_to_their_root_side() {
        let mut pprof = heap_profile("");
        pprof.sample[0].location_id = vec![1; 3 * MAX_FRAMES];
        let (read, warnings) = stacks(&pprof, Path::new("p")).unwrap();
        assert_eq!(read.stacks[0].frames.len(), MAX_FRAMES);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn a_gzip_bomb_is_refused_while_it_unzips() {
        use flate2::{write::GzEncoder, Compression};
        use std::io::Write;
        let mut zipped = GzEncoder::new(Vec::new(), Compression::fast());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..=(MAX_UNZIPPED >> 20) {
            zipped.write_all(&zeros).unwrap();
        }
        let zipped = zipped.finish().unwrap();
        let (error, heap) =
            crate::fuzz::alloc::measure(|| read(&zipped[..], Path::new("bomb.pb.gz")));
        let error = error.unwrap_err().to_string();
        assert!(
            error.contains("bomb.pb.gz unzips to more than 256 MiB"),
            "{error}"
        );
        assert!(heap < 2 * zipped.len() + (1 << 20), "held {heap} bytes");
    }
}
