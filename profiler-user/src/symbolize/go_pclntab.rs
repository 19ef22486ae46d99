//! Function names of Go programs built without a symbol table (`-ldflags
//! '-s -w'`, as distributions and images ship them): the runtime's own
//! table, `.gopclntab`, which every Go binary keeps to print its panics.
//! Go 1.16 and later (the header's magic says which layout): a header, a
//! table of function names, and the function table, sorted by entry pc.
//! The section is read bounded (as unwind tables are), and every offset in
//! it is checked: it is the sampled program's, hostile input.

use std::{path::Path, time::Instant};

use object::ReadCache;

use crate::{
    elf::{
        bounded::BoundedFile,
        file::{vaddr_of_offset, ElfFile, LoadSegment, SectionContents},
    },
    unwind::table::COMPILE_TIME_BUDGET,
};

/// The header magics of the layouts read: Go 1.16-1.17, 1.18-1.19, 1.20+.
const GO_1_16: u32 = 0xffff_fffa;
const GO_1_18: u32 = 0xffff_fff0;
const GO_1_20: u32 = 0xffff_fff1;

/// The longest function name taken.
const MAX_NAME: usize = 4096;

/// The name offset of a function whose record is damaged: past any names
/// table read (a section is read bounded, far below 4 GiB).
const NO_NAME: u32 = u32::MAX;

/// A Go program's function table, kept compact: each function's entry and
/// name, and the table of names; the rest of the section (line and stack
/// tables, most of its size) is dropped once read.
pub struct GoTable {
    segments: Vec<LoadSegment>,
    /// Entry addresses, sorted in a valid table.
    entries: Vec<u64>,
    /// Each function's name, as an offset into `names`.
    name_offsets: Vec<u32>,
    /// The section's table of names, NUL-terminated.
    names: Vec<u8>,
}

impl GoTable {
    /// The table of the ELF file at `path`, if it is a Go program of a
    /// layout read here.
    pub fn read(path: &Path) -> Option<Self> {
        let cache =
            ReadCache::new(BoundedFile::open(path, Instant::now() + COMPILE_TIME_BUDGET).ok()?);
        let elf = ElfFile::parse(&cache).ok()?;
        let segments = elf.load_segments().ok()?;
        let sections = elf.sections().ok()?;
        let section = match sections.contents(".gopclntab").ok()? {
            SectionContents::Stored(bytes) => std::borrow::Cow::Borrowed(bytes),
            SectionContents::Decompressed(bytes) => std::borrow::Cow::Owned(bytes),
            SectionContents::Missing => return None,
        };
        let text = sections.address(".text").unwrap_or(0);
        Self::parse(&section, segments, text)
    }

    fn parse(section: &[u8], segments: Vec<LoadSegment>, text: u64) -> Option<Self> {
        let magic = u32::from_le_bytes(section.get(..4)?.try_into().ok()?);
        // 64-bit pointers only.
        if section.get(7) != Some(&8) {
            return None;
        }
        let word = |index: usize| read_u64(section, 8 + 8 * index);
        // The names run from their offset to the next table's (the
        // compilation units').
        let (count, text, names, names_end, functions, relative) = match magic {
            GO_1_16 => (word(0)?, text, word(2)?, word(3)?, word(6)?, false),
            GO_1_18 | GO_1_20 => {
                let start = word(2)?;
                let start = if start == 0 { text } else { start };
                (word(0)?, start, word(3)?, word(4)?, word(7)?, true)
            }
            _ => return None,
        };
        let entry_size: u64 = if relative { 8 } else { 16 };
        let end = functions.checked_add(count.checked_mul(entry_size)?)?;
        if end > section.len() as u64 || names > names_end || names_end > section.len() as u64 {
            return None;
        }
        let (count, functions) = (
            usize::try_from(count).ok()?,
            usize::try_from(functions).ok()?,
        );
        let mut entries = Vec::with_capacity(count);
        let mut name_offsets = Vec::with_capacity(count);
        for index in 0..count {
            // An entry and the offset of its function's record; the record
            // starts with the entry (32 bits from `text` since 1.18), then
            // the name's offset.
            let (entry, record) = if relative {
                let at = functions + 8 * index;
                let entry = text.checked_add(u64::from(read_u32(section, at)?))?;
                (entry, u64::from(read_u32(section, at + 4)?))
            } else {
                let at = functions + 16 * index;
                (read_u64(section, at)?, read_u64(section, at + 8)?)
            };
            // A record outside the section names nothing; the others
            // still name their functions.
            let name_offset = usize::try_from(record)
                .ok()
                .and_then(|record| {
                    record
                        .checked_add(functions)?
                        .checked_add(if relative { 4 } else { 8 })
                })
                .and_then(|name_field| read_u32(section, name_field))
                .unwrap_or(NO_NAME);
            entries.push(entry);
            name_offsets.push(name_offset);
        }
        Some(Self {
            segments,
            entries,
            name_offsets,
            names: section[names as usize..names_end as usize].to_vec(),
        })
    }

    /// The name of the function holding the code at file offset `offset`.
    pub fn name(&self, offset: u64) -> Option<String> {
        let pc = vaddr_of_offset(&self.segments, offset)?;
        let index = self
            .entries
            .partition_point(|&entry| entry <= pc)
            .checked_sub(1)?;
        let start = *self.name_offsets.get(index)? as usize;
        let bytes = self.names.get(start..)?;
        let end = bytes.iter().take(MAX_NAME).position(|&byte| byte == 0)?;
        let name = String::from_utf8_lossy(&bytes[..end]).into_owned();
        (!name.is_empty()).then_some(name)
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        bytes.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        bytes.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments() -> Vec<LoadSegment> {
        vec![LoadSegment {
            offset: 0x1000,
            file_size: 0x10000,
            vaddr: 0x401000,
            mem_size: 0x10000,
            executable: true,
        }]
    }

    /// A Go 1.20 section of `functions` (entry offset from `text`, name).
    fn section(functions: &[(u32, &str)], text: u64) -> Vec<u8> {
        let header = 8 + 8 * 8;
        let mut names = Vec::new();
        let mut name_offsets = Vec::new();
        for (_, name) in functions {
            name_offsets.push(names.len() as u32);
            names.extend_from_slice(name.as_bytes());
            names.push(0);
        }
        let names_at = header;
        let table_at = names_at + names.len();
        let funcs_at = table_at + 8 * functions.len();
        let mut section = Vec::new();
        section.extend_from_slice(&GO_1_20.to_le_bytes());
        section.extend_from_slice(&[0, 0, 1, 8]);
        for word in [
            functions.len() as u64,
            0,
            text,
            names_at as u64,
            table_at as u64,
            0,
            0,
            table_at as u64,
        ] {
            section.extend_from_slice(&word.to_le_bytes());
        }
        section.extend_from_slice(&names);
        for (index, (entry, _)) in functions.iter().enumerate() {
            section.extend_from_slice(&entry.to_le_bytes());
            let func = (funcs_at - table_at + 8 * index) as u32;
            section.extend_from_slice(&func.to_le_bytes());
        }
        for (index, (entry, _)) in functions.iter().enumerate() {
            section.extend_from_slice(&entry.to_le_bytes());
            section.extend_from_slice(&name_offsets[index].to_le_bytes());
        }
        section
    }

    #[test]
    fn offsets_are_named_by_the_function_they_are_in() {
        let section = section(
            &[
                (0, "runtime.main"),
                (0x100, "main.main"),
                (0x180, "main.hotA"),
            ],
            0x401000,
        );
        let table = GoTable::parse(&section, segments(), 0).unwrap();
        assert_eq!(table.name(0x1000).as_deref(), Some("runtime.main"));
        assert_eq!(table.name(0x1150).as_deref(), Some("main.main"));
        assert_eq!(table.name(0x1190).as_deref(), Some("main.hotA"));
        assert_eq!(table.name(0x100).as_deref(), None, "before the text");
    }

    #[test]
    fn damaged_tables_name_nothing_and_never_panic() {
        let good = section(&[(0, "runtime.main"), (0x100, "main.main")], 0x401000);
        for cut in [0, 4, 8, 40, good.len() - 3] {
            if let Some(table) = GoTable::parse(&good[..cut], segments(), 0) {
                let _ = table.name(0x1150);
            }
        }
        let mut bad = good.clone();
        bad[0] = 0;
        assert!(GoTable::parse(&bad, segments(), 0).is_none());
        // A name's offset past the names: no name.
        let mut far = good;
        let last = far.len() - 4;
        far[last..].copy_from_slice(&u32::MAX.to_le_bytes());
        let table = GoTable::parse(&far, segments(), 0).unwrap();
        assert_eq!(table.name(0x1150), None);
        assert_eq!(table.name(0x1000).as_deref(), Some("runtime.main"));
    }

    #[test]
    fn a_record_outside_the_section_leaves_only_its_function_unnamed() {
        let mut section = section(
            &[
                (0, "runtime.main"),
                (0x100, "main.main"),
                (0x180, "main.hotA"),
            ],
            0x401000,
        );
        // The second function's record offset, in the function table
        // (after the 72-byte header and the names).
        let names = "runtime.main\0main.main\0main.hotA\0".len();
        let at = 72 + names + 8 + 4;
        section[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let table = GoTable::parse(&section, segments(), 0).unwrap();
        assert_eq!(table.name(0x1000).as_deref(), Some("runtime.main"));
        assert_eq!(table.name(0x1150), None);
        assert_eq!(table.name(0x1190).as_deref(), Some("main.hotA"));
    }
}
