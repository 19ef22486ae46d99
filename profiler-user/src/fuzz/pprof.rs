//! Target `pprof`: gzipped pprof profiles as a user may give `stoke
//! convert`, `stoke diff` or `--baseline`: built from fuzzed samples,
//! locations, functions, labels and string indices (in range or not),
//! values up to `i64::MAX`, or raw bytes behind a gzip header. The reader
//! must end as for folded files ([`super::folded::check`]).

use std::{io::Write, path::Path};

use bolero::TypeGenerator;
use flate2::{write::GzEncoder, Compression};
use prost::Message;

use super::{
    folded::{check, NAME},
    harness::{self, Run},
};
use crate::{read::read_input, write::pprof::proto};

#[derive(Debug, TypeGenerator)]
enum Input {
    Profile(Shape),
    /// Bytes behind gzip's magic number.
    Raw(Vec<u8>),
    /// Bytes gzipped: anything but a profile, mostly.
    Gzipped(Vec<u8>),
}

#[derive(Debug, TypeGenerator)]
struct Shape {
    strings: Vec<u8>,
    sample_types: Vec<(i8, i8)>,
    default_sample_type: i8,
    samples: Vec<SampleShape>,
    locations: Vec<(u8, Vec<u8>)>,
    functions: Vec<(u8, i8)>,
}

#[derive(Debug, TypeGenerator)]
struct SampleShape {
    locations: Vec<u8>,
    /// Repeat the locations this many times (deep stacks).
    repeat: u16,
    values: Vec<Value>,
    labels: Vec<(i8, i8, i64)>,
}

#[derive(Debug, TypeGenerator)]
enum Value {
    Small(i8),
    Max,
    Any(i64),
}

/// Strings a profile names things by, Stoke's label keys among them.
const STRINGS: [&str; 10] = [
    "",
    "samples",
    "count",
    "cpu",
    "pid",
    "comm",
    "tid",
    "thread",
    "container_id",
    "main",
];

fn profile_bytes(shape: &Shape) -> Vec<u8> {
    let profile = proto::Profile {
        string_table: shape
            .strings
            .iter()
            .map(|&index| STRINGS[usize::from(index) % STRINGS.len()].to_owned())
            .collect(),
        sample_type: shape
            .sample_types
            .iter()
            .map(|&(kind, unit)| proto::ValueType {
                r#type: kind.into(),
                unit: unit.into(),
            })
            .collect(),
        default_sample_type: shape.default_sample_type.into(),
        sample: shape
            .samples
            .iter()
            .map(|sample| proto::Sample {
                location_id: (0..=sample.repeat % 3000)
                    .flat_map(|_| sample.locations.iter().map(|&id| u64::from(id)))
                    .collect(),
                value: sample
                    .values
                    .iter()
                    .map(|value| match value {
                        Value::Small(value) => (*value).into(),
                        Value::Max => i64::MAX,
                        Value::Any(value) => *value,
                    })
                    .collect(),
                label: sample
                    .labels
                    .iter()
                    .map(|&(key, str, num)| proto::Label {
                        key: key.into(),
                        str: str.into(),
                        num,
                        ..proto::Label::default()
                    })
                    .collect(),
            })
            .collect(),
        location: shape
            .locations
            .iter()
            .map(|(id, functions)| proto::Location {
                id: u64::from(*id),
                line: functions
                    .iter()
                    .map(|&function_id| proto::Line {
                        function_id: function_id.into(),
                        ..proto::Line::default()
                    })
                    .collect(),
                ..proto::Location::default()
            })
            .collect(),
        function: shape
            .functions
            .iter()
            .map(|&(id, name)| proto::Function {
                id: id.into(),
                name: name.into(),
                ..proto::Function::default()
            })
            .collect(),
        ..proto::Profile::default()
    };
    gzip(&profile.encode_to_vec())
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut zipped = GzEncoder::new(Vec::new(), Compression::fast());
    zipped.write_all(bytes).expect("gzip into memory");
    zipped.finish().expect("gzip into memory")
}

#[test]
fn pprof() {
    let run = Run::start("pprof");
    bolero::check!()
        .with_type::<Input>()
        .with_test_time(harness::budget())
        .with_shrink_time(harness::SHRINK_TIME)
        .for_each(|input| {
            let bytes = match input {
                Input::Profile(shape) => profile_bytes(shape),
                Input::Raw(raw) => [&[0x1f, 0x8b][..], raw].concat(),
                Input::Gzipped(bytes) => gzip(bytes),
            };
            run.input(|| {
                check(read_input(&bytes[..], Path::new(NAME)).map(|(profile, _)| profile));
            })
        });
}
