//! The pprof format: `profile.proto`, gzipped, as `go tool pprof`, Grafana
//! Pyroscope and other tools read it.
//!
//! Frames are named as in every other output: Java frames keep their `_[j]`
//! (compiled), `_[i]` (inlined) and `_[0]` (interpreted) suffix and kernel
//! frames their `_[k]`, so that a profile's functions are the same in every
//! format. Each distinct code frame is one function and one location (with
//! the mapping of the file it is code of, if known); locations have no
//! addresses, since stoke folds stacks by name. Context frames (container
//! or service, process, thread) are not locations: the labels every sample
//! carries say the same (`pid`, `comm`, `service`, `container_*`, `thread`
//! with `-t`...). `pid` and `tid` are numeric labels: pprof's tag reports
//! would count a sample twice under a key with both a string and a number.
//!
//! With `--lines`, a frame named `name (file:LINE)` (a Java frame's kind
//! suffix after it) is the function `name` (with the suffix) in `file`, at
//! line LINE of its location: `go tool pprof -top` sums a function's lines,
//! `-lines` and `-list` tell them apart.

pub(crate) mod proto;

use std::{
    borrow::Cow,
    cell::RefCell,
    collections::HashMap,
    io::{self, Write},
    time::UNIX_EPOCH,
};

use flate2::{Compress, Compression, FlushCompress, Status};
use prost::Message;

use crate::{
    event::Event,
    model::{FoldedStack, Module, Profile},
};

/// Labels that go in as numbers, for `-tagfocus=pid=1000:2000` and the like.
const NUMERIC_LABELS: &[&str] = &["pid", "tid"];

/// `stacks` (some or all of `profile`'s) as a gzipped pprof profile, with
/// `profile`'s settings (period, time, duration) and files.
pub fn encode<'a>(
    profile: &'a Profile,
    stacks: impl IntoIterator<Item = &'a FoldedStack>,
) -> Vec<u8> {
    gzip(&build(profile, stacks).encode_to_vec())
}

/// `stacks` (some or all of `profile`'s) as a pprof profile message.
pub fn build<'a>(
    profile: &'a Profile,
    stacks: impl IntoIterator<Item = &'a FoldedStack>,
) -> proto::Profile {
    Builder::new(&profile.modules).build(profile, stacks)
}

thread_local! {
    /// One gzip stream per thread, reset for each profile: a new one
    /// allocates and clears some 300 KB of state, which for the many small
    /// profiles of a `stoke continuous` interval costs more than their
    /// compression.
    static GZIP: RefCell<Compress> = RefCell::new(Compress::new_gzip(Compression::default(), 15));
}

/// `bytes` gzipped.
fn gzip(bytes: &[u8]) -> Vec<u8> {
    GZIP.with_borrow_mut(|gzip| {
        gzip.reset();
        let mut out = Vec::with_capacity(bytes.len() / 2 + 64);
        loop {
            let taken = usize::try_from(gzip.total_in()).unwrap_or(usize::MAX);
            let rest = bytes.get(taken..).unwrap_or_default();
            match gzip
                .compress_vec(rest, &mut out, FlushCompress::Finish)
                .expect("compressing in memory cannot fail")
            {
                Status::StreamEnd => return out,
                // Out of room in `out`.
                Status::Ok | Status::BufError => out.reserve(out.capacity()),
            }
        }
    })
}

/// Writes all of `profile` as a gzipped pprof profile.
pub fn write(profile: &Profile, out: &mut dyn Write) -> io::Result<()> {
    out.write_all(&encode(profile, &profile.stacks))
}

/// The tables a profile's messages refer to by index or id, each entry
/// added once.
struct Builder<'p> {
    modules: &'p [Module],
    strings: Vec<String>,
    string_indexes: HashMap<String, i64>,
    functions: Vec<proto::Function>,
    /// Function ids by name and source file.
    function_ids: HashMap<(Cow<'p, str>, &'p str), u64>,
    locations: Vec<proto::Location>,
    /// Location ids by function name and module.
    location_ids: HashMap<(&'p str, Option<u32>), u64>,
    mappings: Vec<proto::Mapping>,
    /// Mapping ids by module.
    mapping_ids: HashMap<u32, u64>,
}

impl<'p> Builder<'p> {
    fn new(modules: &'p [Module]) -> Self {
        let mut builder = Self {
            modules,
            strings: Vec::new(),
            string_indexes: HashMap::new(),
            functions: Vec::new(),
            function_ids: HashMap::new(),
            locations: Vec::new(),
            location_ids: HashMap::new(),
            mappings: Vec::new(),
            mapping_ids: HashMap::new(),
        };
        // The format requires the empty string first.
        builder.string("");
        builder
    }

    fn build(
        mut self,
        profile: &Profile,
        stacks: impl IntoIterator<Item = &'p FoldedStack>,
    ) -> proto::Profile {
        let summary = &profile.summary;
        let period = 1_000_000_000u64
            .checked_div(summary.frequency_hz)
            .unwrap_or(0);
        let (kind, unit) = profile.event.pprof_type();
        let mut sample_type = vec![self.value_type(kind, unit)];
        // CPU samples also as CPU time: samples times the period.
        let period = if profile.event == Event::Cpu {
            sample_type.push(self.value_type("cpu", "nanoseconds"));
            Some(period)
        } else {
            None
        };
        let period_type = Some(match period {
            Some(_) => self.value_type("cpu", "nanoseconds"),
            None => self.value_type(kind, unit),
        });
        let sample = stacks
            .into_iter()
            .map(|stack| self.sample(stack, period))
            .collect();
        let time_nanos = summary
            .started
            .and_then(|started| started.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |since| saturating_i64(since.as_nanos()));
        proto::Profile {
            sample_type,
            sample,
            mapping: self.mappings,
            location: self.locations,
            function: self.functions,
            string_table: self.strings,
            time_nanos,
            duration_nanos: saturating_i64(summary.duration.as_nanos()),
            period_type,
            period: saturating_i64(period.unwrap_or(0).into()),
            ..proto::Profile::default()
        }
    }

    /// One sample: its value, and for CPU (`period` given) its CPU time.
    fn sample(&mut self, stack: &'p FoldedStack, period: Option<u64>) -> proto::Sample {
        let code = &stack.frames[stack.context_frames.min(stack.frames.len())..];
        // Listed outermost first, so that the first mapping is usually the
        // program's own, as pprof expects; a sample names them innermost
        // first.
        let mut location_id: Vec<u64> = code
            .iter()
            .enumerate()
            .map(|(index, frame)| {
                let module = stack.modules.get(index).copied().flatten();
                self.location(frame, module)
            })
            .collect();
        location_id.reverse();
        let samples = saturating_i64(stack.samples.into());
        let label = stack
            .labels
            .iter()
            .map(|&(key_name, ref value)| {
                let key = self.string(key_name);
                match value.parse() {
                    Ok(num) if NUMERIC_LABELS.contains(&key_name) => proto::Label {
                        key,
                        num,
                        ..proto::Label::default()
                    },
                    _ => proto::Label {
                        key,
                        str: self.string(value),
                        ..proto::Label::default()
                    },
                }
            })
            .collect();
        let mut value = vec![samples];
        if let Some(period) = period {
            value.push(saturating_i64(
                u128::from(stack.samples) * u128::from(period),
            ));
        }
        proto::Sample {
            location_id,
            value,
            label,
        }
    }

    /// The id of the location of code frame `frame` in `module`.
    fn location(&mut self, frame: &'p str, module: Option<u32>) -> u64 {
        if let Some(&id) = self.location_ids.get(&(frame, module)) {
            return id;
        }
        let (name, file, line) = match source_line(frame) {
            Some((name, file, line)) => (name, file, line),
            None => (Cow::Borrowed(frame), "", 0),
        };
        let function_id = self.function(name, file);
        let mapping_id = module.map_or(0, |module| self.mapping(module));
        let id = self.locations.len() as u64 + 1;
        self.locations.push(proto::Location {
            id,
            mapping_id,
            line: vec![proto::Line {
                function_id,
                line,
                ..proto::Line::default()
            }],
            ..proto::Location::default()
        });
        self.location_ids.insert((frame, module), id);
        id
    }

    /// The id of function `name` in source file `file` ("" if unknown).
    fn function(&mut self, name: Cow<'p, str>, file: &'p str) -> u64 {
        let key = (name, file);
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let name_index = self.string(&key.0);
        let filename = self.string(file);
        self.functions.push(proto::Function {
            id,
            name: name_index,
            system_name: name_index,
            filename,
            ..proto::Function::default()
        });
        self.function_ids.insert(key, id);
        id
    }

    fn mapping(&mut self, module: u32) -> u64 {
        if let Some(&id) = self.mapping_ids.get(&module) {
            return id;
        }
        let Some(Module { path, build_id }) = self.modules.get(module as usize) else {
            return 0;
        };
        let id = self.mappings.len() as u64 + 1;
        let filename = self.string(path);
        let build_id = build_id.as_deref().map_or(0, |id| self.string(id));
        self.mappings.push(proto::Mapping {
            id,
            filename,
            build_id,
            // Frames are named already: pprof must not look for symbols.
            has_functions: true,
            ..proto::Mapping::default()
        });
        self.mapping_ids.insert(module, id);
        id
    }

    fn value_type(&mut self, r#type: &str, unit: &str) -> proto::ValueType {
        proto::ValueType {
            r#type: self.string(r#type),
            unit: self.string(unit),
        }
    }

    /// The index of `text` in the string table.
    fn string(&mut self, text: &str) -> i64 {
        if let Some(&index) = self.string_indexes.get(text) {
            return index;
        }
        let index = self.strings.len() as i64;
        self.strings.push(text.to_owned());
        self.string_indexes.insert(text.to_owned(), index);
        index
    }
}

/// A frame named with its source line, `name (file:LINE)` or, for a Java
/// frame, `name (File.java:LINE)_[j]`: the function's name (its kind suffix
/// kept), the file and the line.
pub(in crate::write) fn source_line(frame: &str) -> Option<(Cow<'_, str>, &str, i64)> {
    let (located, suffix) = match frame.rfind(")_[") {
        Some(end) if frame.ends_with(']') => frame.split_at(end + 1),
        _ => (frame, ""),
    };
    let (name, location) = located.strip_suffix(')')?.rsplit_once(" (")?;
    let (file, line) = location.rsplit_once(':')?;
    let line = line.parse().ok().filter(|&line: &i64| line > 0)?;
    if name.is_empty() || file.is_empty() {
        return None;
    }
    let name = match suffix {
        "" => Cow::Borrowed(name),
        suffix => Cow::Owned(format!("{name}{suffix}")),
    };
    Some((name, file, line))
}

fn saturating_i64(value: u128) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
