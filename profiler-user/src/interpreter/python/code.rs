//! What a frame's code object says: its function's qualified name, its
//! file and its line table, read from the live process. The object is the
//! process's: its type is checked against `PyCode_Type` (an address
//! reused by something else since the sample is refused), every length is
//! capped, and a string that is not a compact one (every name and file
//! name CPython makes is) is refused.

use std::sync::Arc;

use super::{layout::CodeLayout, FRAME_SUFFIX};
use crate::process::memory;

/// The bytes of a code object read: past its name, file, first line and
/// line table in every version.
const CODE_BYTES: usize = 144;

/// Where an object's type is.
const OB_TYPE: usize = 8;

/// A string's length (`Py_ssize_t`) and its state bits.
const STRING_LENGTH: usize = 16;
const STRING_STATE: usize = 32;

/// The longest name or file name taken, in characters.
const MAX_STRING: u64 = 1024;

/// The longest line table read: a function of some 30,000 lines.
const MAX_LINE_TABLE: u64 = 64 << 10;

/// A bytes object's size and where its bytes start.
const BYTES_SIZE: u64 = 16;
const BYTES_START: u64 = 32;

/// A code object, read.
#[derive(Debug, PartialEq, Eq)]
pub struct Code {
    /// `co_qualname` (3.11+) or `co_name`.
    pub name: Arc<str>,
    /// The name as a frame without its line.
    pub frame: Arc<str>,
    /// `co_filename`'s last component.
    pub file: Arc<str>,
    /// `co_firstlineno`.
    pub first_line: i32,
    /// The line table's bytes; empty unless asked for.
    pub line_table: Box<[u8]>,
}

impl Code {
    /// Roughly the bytes it holds.
    pub fn bytes(&self) -> usize {
        self.name.len() + self.frame.len() + self.file.len() + self.line_table.len()
    }
}

/// The code object at `address` of process `pid`, whose `PyCode_Type` is
/// at `code_type`, laid out as `layout` says; with its line table if
/// `lines`.
pub fn read(
    pid: u32,
    address: u64,
    code_type: u64,
    layout: &CodeLayout,
    lines: bool,
) -> Option<Code> {
    let mut object = [0; CODE_BYTES];
    memory::read(pid, address, &mut object).ok()?;
    let word = |offset: u64| {
        let offset = usize::try_from(offset).ok()?;
        Some(u64::from_le_bytes(
            object.get(offset..offset + 8)?.try_into().ok()?,
        ))
    };
    if word(OB_TYPE as u64)? != code_type {
        return None;
    }
    let name = string(pid, word(layout.name)?, layout)?;
    let path = string(pid, word(layout.filename)?, layout)?;
    let file = path.rsplit('/').next().unwrap_or(&path).into();
    let first_line = word(layout.first_line)? as u32 as i32;
    let line_table = if lines {
        bytes(pid, word(layout.line_table)?).unwrap_or_default()
    } else {
        Box::default()
    };
    Some(Code {
        frame: format!("{name}{FRAME_SUFFIX}").into(),
        name: name.into(),
        file,
        first_line,
        line_table,
    })
}

/// A compact `str` object's characters.
fn string(pid: u32, address: u64, layout: &CodeLayout) -> Option<String> {
    let mut header = [0; 40];
    memory::read(pid, address, &mut header).ok()?;
    let length = u64::from_le_bytes(header[STRING_LENGTH..STRING_LENGTH + 8].try_into().ok()?);
    let state = u32::from_le_bytes(header[STRING_STATE..STRING_STATE + 4].try_into().ok()?);
    let (kind, compact, ascii) = ((state >> 2) & 7, state & 1 << 5 != 0, state & 1 << 6 != 0);
    if !compact || length > MAX_STRING || !matches!(kind, 1 | 2 | 4) {
        return None;
    }
    let start = if ascii {
        layout.ascii_header
    } else {
        layout.compact_header
    };
    let mut data = vec![0; usize::try_from(length * u64::from(kind)).ok()?];
    memory::read(pid, address.checked_add(start)?, &mut data).ok()?;
    Some(match kind {
        1 => data.iter().map(|&byte| char::from(byte)).collect(),
        2 => char::decode_utf16(
            data.chunks_exact(2)
                .map(|unit| u16::from_le_bytes([unit[0], unit[1]])),
        )
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect(),
        _ => data
            .chunks_exact(4)
            .map(|unit| {
                char::from_u32(u32::from_le_bytes([unit[0], unit[1], unit[2], unit[3]]))
                    .unwrap_or(char::REPLACEMENT_CHARACTER)
            })
            .collect(),
    })
}

/// A `bytes` object's bytes, if there are at most [`MAX_LINE_TABLE`].
fn bytes(pid: u32, address: u64) -> Option<Box<[u8]>> {
    let size = memory::read_u64(pid, address.checked_add(BYTES_SIZE)?).ok()?;
    if size > MAX_LINE_TABLE {
        return None;
    }
    let mut data = vec![0; size as usize];
    memory::read(pid, address.checked_add(BYTES_START)?, &mut data).ok()?;
    Some(data.into())
}
