//! Python frames in every stack: CPython processes are found by the
//! exports of their interpreter ([`find`]), with no debug symbols; each is
//! handed to the BPF sampler with its version's [`layout`], and the
//! sampler walks the sampled thread's frames into the sample; the frames'
//! code objects are named from the live process ([`code`]), lines from
//! their line tables ([`lines`]). Aggregation puts each call of the
//! interpreter's frames where `_PyEval_EvalFrameDefault` runs them.

mod code;
mod find;
pub mod layout;
mod lines;

#[cfg(test)]
pub use self::{find::read_file, lines::line_of};

use std::sync::Arc;

use anyhow::{Context, Result};
use aya::maps::{HashMap as BpfHashMap, MapData};
use foldhash::{HashMap, HashMapExt};
use profiler_common::python::PythonProcess;

use self::{code::Code, find::PythonFile, layout::Layout};
use crate::{
    model::{NamedFrame, PythonFrame, PythonSummary},
    process::{MappingTarget, ProcessImage},
};

/// The function in whose C frames CPython runs Python frames.
pub const EVAL_FUNCTION: &str = "_PyEval_EvalFrameDefault";

/// How CPython's perf map (`-X perf`, 3.12 and newer) names the trampoline
/// each Python function's calls go through: `py::QUALNAME:FILE`.
pub const TRAMPOLINE_PREFIX: &str = "py::";

/// The suffix of a Python frame's name (as `_[k]` is a kernel frame's).
pub const FRAME_SUFFIX: &str = "_[py]";

/// Bytes of code objects' names and line tables kept per process: past
/// them, others are read anew at every sample rather than kept.
const MAX_CACHED_BYTES: usize = 16 << 20;

/// Files remembered by device and inode (as CPython's or not) before all
/// are forgotten.
const MAX_FILES: usize = 4096;

/// Most processes named in the summary's lists.
const MAX_LISTED: usize = 16;

/// A CPython process being sampled.
struct Process {
    layout: Layout,
    code_type: u64,
    codes: HashMap<u64, Option<Arc<Code>>>,
    /// What `codes` holds, in bytes, roughly.
    cached_bytes: usize,
}

/// The CPython processes of a recording.
pub struct Pythons {
    /// None with `--no-python`.
    map: Option<BpfHashMap<MapData, u32, [u8; size_of::<PythonProcess>()]>>,
    lines: bool,
    processes: HashMap<u32, Process>,
    /// Files looked at, by device and inode: their exports, if CPython's.
    files: HashMap<(u64, u64), Option<PythonFile>>,
    summary: PythonSummary,
}

impl Pythons {
    /// Fills the sampler's `python_processes` map `map`, if given; names
    /// lines if `lines`.
    pub fn new(map: Option<aya::maps::Map>, lines: bool) -> Result<Self> {
        Ok(Self {
            map: map
                .map(BpfHashMap::try_from)
                .transpose()
                .context("the python_processes map")?,
            lines,
            processes: HashMap::new(),
            files: HashMap::new(),
            summary: PythonSummary::default(),
        })
    }

    /// Looks at a newly sampled process image: if it runs CPython, the
    /// sampler walks its threads' frames from now on.
    pub fn found(&mut self, image: &ProcessImage) {
        if self.map.is_none() {
            return;
        }
        let pid = image.pid;
        for mapping in image.mappings() {
            let MappingTarget::File(file) = &mapping.target else {
                continue;
            };
            if !find::may_be_python(&file.name) {
                continue;
            }
            if self.files.len() >= MAX_FILES {
                self.files.clear();
            }
            let exports = self
                .files
                .entry(file.key)
                .or_insert_with(|| find::read(&file.path()));
            let Some(exports) = exports.clone() else {
                continue;
            };
            let Some(bias) = exports.bias(mapping.start, mapping.file_offset) else {
                continue;
            };
            let minor = exports.minor.or_else(|| find::minor_in_name(&file.name));
            let runtime = exports.runtime.wrapping_add(bias);
            let result = match minor.map(|minor| (minor, layout::of_minor(minor))) {
                Some((minor, Some(layout))) => layout::check_runtime(pid, runtime, minor)
                    .and_then(|()| self.walk(pid, runtime, &layout))
                    .map(|()| (minor, layout)),
                Some((minor, None)) => Err(format!("Python 3.{minor} is not read")),
                None => Err(format!("no Python version in {}", file.name)),
            };
            match result {
                Ok((minor, layout)) => {
                    *self
                        .summary
                        .processes
                        .entry(format!("3.{minor}"))
                        .or_default() += 1;
                    self.processes.insert(
                        pid,
                        Process {
                            layout,
                            code_type: exports.code_type.wrapping_add(bias),
                            codes: HashMap::new(),
                            cached_bytes: 0,
                        },
                    );
                }
                Err(why) if self.summary.not_read.len() < MAX_LISTED => {
                    self.summary.not_read.push((pid, why));
                }
                Err(_) => {}
            }
            return;
        }
    }

    /// Has the sampler walk process `pid`'s frames, its `_PyRuntime` at
    /// `runtime`.
    fn walk(&mut self, pid: u32, runtime: u64, layout: &Layout) -> Result<(), String> {
        let walk = PythonProcess {
            interpreters_head: runtime.wrapping_add(layout.interpreters_head),
            ..layout.walk
        };
        // SAFETY: PythonProcess is repr(C) plain data without padding.
        let value: [u8; size_of::<PythonProcess>()] = unsafe { std::mem::transmute(walk) };
        let Some(map) = &mut self.map else {
            return Err("--no-python".into());
        };
        map.insert(pid, value, 0)
            .map_err(|error| format!("the sampler's map of Python processes: {error}"))
    }

    /// Process `pid` exec'd or exited: the sampler dropped it already.
    pub fn ended(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// The frames of a sample of process `pid`, named.
    pub fn name(&mut self, pid: u32, frames: &[PythonFrame]) -> Vec<NamedFrame> {
        let Some(process) = self.processes.get_mut(&pid) else {
            return Vec::new();
        };
        let lines = self.lines;
        frames
            .iter()
            .map(|frame| {
                let code = match process.codes.get(&frame.code) {
                    Some(code) => code.clone(),
                    None => {
                        let code = code::read(
                            pid,
                            frame.code,
                            process.code_type,
                            &process.layout.code,
                            lines,
                        )
                        .map(Arc::new);
                        let bytes = code.as_ref().map_or(0, |code| code.bytes()) + 64;
                        if process.cached_bytes + bytes <= MAX_CACHED_BYTES {
                            process.cached_bytes += bytes;
                            process.codes.insert(frame.code, code.clone());
                        }
                        code
                    }
                };
                let name = match code {
                    Some(code) if lines => {
                        let line = lines::line_of(
                            &code.line_table,
                            process.layout.code.lines,
                            code.first_line,
                            frame
                                .instruction
                                .wrapping_sub(process.layout.code.instructions as u32),
                        )
                        .unwrap_or(code.first_line.max(0) as u32);
                        format!("{} ({}:{line}){FRAME_SUFFIX}", code.name, code.file).into()
                    }
                    Some(code) => code.frame.clone(),
                    None => {
                        self.summary.unnamed_frames += 1;
                        format!("[unknown]{FRAME_SUFFIX}").into()
                    }
                };
                NamedFrame {
                    name,
                    entry: frame.entry,
                }
            })
            .collect()
    }

    /// How it went.
    pub fn summary(&self) -> PythonSummary {
        self.summary.clone()
    }
}
