//! Function names of Go programs built without a symbol table (`-ldflags
//! '-s -w'`, as distributions and images ship them): the runtime's own
//! table, `.gopclntab`, which every Go binary keeps to print its panics.
//! Go 1.16 and later (the header's magic says which layout): a header, a
//! table of function names, and the function table, sorted by entry pc.
//! The section is read bounded (as unwind tables are), and every offset in
//! it is checked: it is the sampled program's, hostile input.

use std::{ops::Range, path::Path, time::Instant};

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

/// A Go program's function table.
pub struct GoTable {
    section: Vec<u8>,
    segments: Vec<LoadSegment>,
    /// Where the names and the function table start in `section`.
    names: usize,
    functions: usize,
    count: usize,
    /// Go 1.18+: entries are 32-bit offsets from `text`; before, addresses.
    relative: bool,
    text: u64,
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
            SectionContents::Stored(bytes) => bytes.to_vec(),
            SectionContents::Decompressed(bytes) => bytes,
            SectionContents::Missing => return None,
        };
        let text = sections.address(".text").unwrap_or(0);
        Self::parse(section, segments, text)
    }

    fn parse(section: Vec<u8>, segments: Vec<LoadSegment>, text: u64) -> Option<Self> {
        let magic = u32::from_le_bytes(section.get(..4)?.try_into().ok()?);
        // 64-bit pointers only.
        if section.get(7) != Some(&8) {
            return None;
        }
        let word = |index: usize| read_u64(&section, 8 + 8 * index);
        let (count, text, names, functions, relative) = match magic {
            GO_1_16 => (word(0)?, text, word(2)?, word(6)?, false),
            GO_1_18 | GO_1_20 => {
                let start = word(2)?;
                let start = if start == 0 { text } else { start };
                (word(0)?, start, word(3)?, word(7)?, true)
            }
            _ => return None,
        };
        let entry_size: u64 = if relative { 8 } else { 16 };
        let end = functions.checked_add(count.checked_mul(entry_size)?)?;
        if end > section.len() as u64 || names > section.len() as u64 {
            return None;
        }
        Some(Self {
            count: usize::try_from(count).ok()?,
            names: usize::try_from(names).ok()?,
            functions: usize::try_from(functions).ok()?,
            relative,
            text,
            section,
            segments,
        })
    }

    /// The name of the function holding the code at file offset `offset`.
    pub fn name(&self, offset: u64) -> Option<String> {
        let pc = vaddr_of_offset(&self.segments, offset)?;
        let index = self.function_index(pc)?;
        let function_offset = self.function_offset(index)?;
        let function = self.functions.checked_add(function_offset)?;
        let name_field = function.checked_add(if self.relative { 4 } else { 8 })?;
        let name_offset = read_u32(&self.section, name_field)? as usize;
        let start = self.names.checked_add(name_offset)?;
        let bytes = self.section.get(start..)?;
        let end = bytes.iter().take(MAX_NAME).position(|&byte| byte == 0)?;
        let name = String::from_utf8_lossy(&bytes[..end]).into_owned();
        (!name.is_empty()).then_some(name)
    }

    /// The index of the last function whose entry is at or before `pc`,
    /// if `pc` is before the table's end.
    fn function_index(&self, pc: u64) -> Option<usize> {
        let mut range: Range<usize> = 0..self.count;
        while range.len() > 1 {
            let middle = range.start + range.len() / 2;
            if self.entry(middle)? <= pc {
                range.start = middle;
            } else {
                range.end = middle;
            }
        }
        (range.len() == 1 && self.entry(range.start)? <= pc).then_some(range.start)
    }

    fn entry(&self, index: usize) -> Option<u64> {
        if self.relative {
            let at = self.functions.checked_add(index.checked_mul(8)?)?;
            self.text
                .checked_add(u64::from(read_u32(&self.section, at)?))
        } else {
            read_u64(
                &self.section,
                self.functions.checked_add(index.checked_mul(16)?)?,
            )
        }
    }

    fn function_offset(&self, index: usize) -> Option<usize> {
        let offset = if self.relative {
            let at = self
                .functions
                .checked_add(index.checked_mul(8)?.checked_add(4)?)?;
            u64::from(read_u32(&self.section, at)?)
        } else {
            let at = self
                .functions
                .checked_add(index.checked_mul(16)?.checked_add(8)?)?;
            read_u64(&self.section, at)?
        };
        usize::try_from(offset).ok()
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

    /// A Go 1.20 table of `functions` (entry offset from `text`, name).
    fn table(functions: &[(u32, &str)], text: u64) -> GoTable {
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
            0,
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
        let segments = vec![LoadSegment {
            offset: 0x1000,
            file_size: 0x10000,
            vaddr: 0x401000,
            mem_size: 0x10000,
            executable: true,
        }];
        GoTable::parse(section, segments, 0).unwrap()
    }

    #[test]
    fn offsets_are_named_by_the_function_they_are_in() {
        let table = table(
            &[
                (0, "runtime.main"),
                (0x100, "main.main"),
                (0x180, "main.hotA"),
            ],
            0x401000,
        );
        assert_eq!(table.name(0x1000).as_deref(), Some("runtime.main"));
        assert_eq!(table.name(0x1150).as_deref(), Some("main.main"));
        assert_eq!(table.name(0x1190).as_deref(), Some("main.hotA"));
        assert_eq!(table.name(0x100).as_deref(), None, "before the text");
    }

    #[test]
    fn damaged_tables_name_nothing_and_never_panic() {
        let good = table(&[(0, "runtime.main"), (0x100, "main.main")], 0x401000);
        for cut in [0, 4, 8, 40, good.section.len() - 3] {
            let section = good.section[..cut].to_vec();
            if let Some(table) = GoTable::parse(section, good.segments.clone(), 0) {
                let _ = table.name(0x1150);
            }
        }
        let mut section = good.section.clone();
        section[0] = 0;
        assert!(GoTable::parse(section, good.segments.clone(), 0).is_none());
    }
}
