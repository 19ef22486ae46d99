//! Where each CPython version keeps what the sampler and the namer read:
//! field offsets of its runtime, thread, frame, code and string structures,
//! per minor version (CPython keeps them within one), as its headers give
//! them for x86_64 (`offsetof` against each version's `Include/internal`).

use profiler_common::python::{PythonLayout, PythonProcess, PYTHON_NO_OFFSET};

use crate::process::memory;

/// How a version maps a code object's instructions to lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineTable {
    /// 3.8 and 3.9: `co_lnotab`, (bytecode delta, line delta) pairs; the
    /// instruction is a byte offset.
    Lnotab,
    /// 3.10: `co_linetable`, (bytecode delta, line delta) pairs over
    /// ranges; the instruction counts code units.
    Ranges,
    /// 3.11 and later: `co_linetable`, the location table; the
    /// instruction is the instruction pointer's byte offset from the code
    /// object.
    Locations,
}

/// Offsets into a code object and the strings it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeLayout {
    pub filename: u64,
    /// `co_qualname` where there is one (3.11+), else `co_name`.
    pub name: u64,
    pub first_line: u64,
    /// The bytes object of the line table.
    pub line_table: u64,
    pub lines: LineTable,
    /// 3.11+: where the instructions start in the code object.
    pub instructions: u64,
    /// Size of a compact ASCII string's header (`PyASCIIObject`): its
    /// characters follow.
    pub ascii_header: u64,
    /// Size of another compact string's header (`PyCompactUnicodeObject`).
    pub compact_header: u64,
}

/// A version's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Offset of `interpreters.head` in `_PyRuntime`.
    pub interpreters_head: u64,
    /// What the sampler walks, but for where the runtime is.
    pub walk: PythonProcess,
    pub code: CodeLayout,
}

/// Every field of a frame the sampler reads lies below `read`.
#[allow(clippy::too_many_arguments)]
const fn walk(
    interpreter_threads: u16,
    thread_id: u16,
    thread_frame: u16,
    cframe_frame: u16,
    (frame_code, frame_previous, frame_instruction, frame_entry): (u16, u16, u16, u16),
    frame_read: u16,
    layout: PythonLayout,
) -> PythonProcess {
    PythonProcess {
        interpreters_head: 0,
        interpreter_threads,
        thread_next: 8,
        thread_id,
        thread_frame,
        cframe_frame,
        frame_code,
        frame_previous,
        frame_instruction,
        frame_entry,
        frame_read,
        layout: layout as u8,
        padding: [0; 3],
    }
}

const NONE: u16 = PYTHON_NO_OFFSET;

/// The layout of CPython 3.`minor`, if it is one read here.
pub fn of_minor(minor: u32) -> Option<Layout> {
    let objects = PythonLayout::FrameObjects;
    let (interpreters_head, walk, code) = match minor {
        8 | 9 => (
            32,
            walk(8, 176, 24, NONE, (32, 24, 104, NONE), 112, objects),
            code(104, 112, 40, 120, LineTable::Lnotab, 0, 48),
        ),
        10 => (
            32,
            walk(8, 176, 24, NONE, (32, 24, 96, NONE), 104, objects),
            code(104, 112, 40, 120, LineTable::Ranges, 0, 48),
        ),
        11 => (
            40,
            walk(
                16,
                152,
                56,
                8,
                (32, 48, 56, 68),
                72,
                PythonLayout::EntryFlag,
            ),
            code(112, 128, 72, 136, LineTable::Locations, 184, 48),
        ),
        12 => (
            40,
            walk(72, 136, 56, 0, (0, 8, 56, 70), 72, PythonLayout::ShimFrames),
            code(112, 128, 68, 136, LineTable::Locations, 192, 40),
        ),
        13 => (
            632,
            walk(
                7344,
                152,
                72,
                NONE,
                (0, 8, 56, 70),
                72,
                PythonLayout::ShimFrames,
            ),
            code(112, 128, 68, 136, LineTable::Locations, 200, 40),
        ),
        _ => return None,
    };
    Some(Layout {
        interpreters_head,
        walk,
        code,
    })
}

/// The cookie that starts `_PyRuntime` from 3.13 on: its debug offsets
/// (`_Py_DebugOffsets`) follow, then whether the build is free-threaded.
const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";
const FREE_THREADED: usize = 16;

/// Whether process `pid`'s `_PyRuntime` at `runtime` is one of 3.`minor`
/// the layout fits: from 3.13 on, it starts with its debug cookie and is
/// no free-threaded build (whose structures differ).
pub fn check_runtime(pid: u32, runtime: u64, minor: u32) -> Result<(), String> {
    if minor < 13 {
        return Ok(());
    }
    let mut start = [0; 24];
    memory::read(pid, runtime, &mut start)
        .map_err(|error| format!("reading its _PyRuntime: {error}"))?;
    if &start[..8] != DEBUG_COOKIE {
        return Err(format!("3.{minor}'s _PyRuntime without its debug cookie"));
    }
    if start[FREE_THREADED..].iter().any(|&byte| byte != 0) {
        return Err(format!("Python 3.{minor} free-threaded is not read"));
    }
    Ok(())
}

const fn code(
    filename: u64,
    name: u64,
    first_line: u64,
    line_table: u64,
    lines: LineTable,
    instructions: u64,
    ascii_header: u64,
) -> CodeLayout {
    CodeLayout {
        filename,
        name,
        first_line,
        line_table,
        lines,
        instructions,
        ascii_header,
        // PyCompactUnicodeObject adds utf8_length and utf8 (and before
        // 3.12 wstr_length).
        compact_header: if ascii_header == 48 { 72 } else { 56 },
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::python::PYTHON_FRAME_READ;

    use super::*;

    /// The oldest and newest minor versions of Python 3 read.
    const MINORS: std::ops::RangeInclusive<u32> = 8..=13;

    #[test]
    fn every_frame_field_read_lies_inside_the_bytes_read() {
        for minor in MINORS {
            let walk = of_minor(minor).unwrap().walk;
            let fields = [
                (walk.frame_code, 8),
                (walk.frame_previous, 8),
                (walk.frame_instruction, if minor < 11 { 4 } else { 8 }),
                (walk.frame_entry, 1),
            ];
            for (offset, size) in fields {
                if offset != NONE {
                    assert!(offset + size <= walk.frame_read, "3.{minor}: {offset}");
                    assert_eq!(offset % size, 0, "3.{minor}: {offset} unaligned");
                }
            }
            assert!(usize::from(walk.frame_read) <= PYTHON_FRAME_READ);
        }
        assert_eq!(of_minor(7), None);
        assert_eq!(of_minor(14), None);
    }
}
