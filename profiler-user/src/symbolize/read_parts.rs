//! Which parts of an ELF file blazesym reads to name its code: its headers
//! and the sections that are not loaded into memory (`.symtab`, `.strtab`,
//! `.debug_*`, `.gnu_debugdata`, `.gnu_debuglink`...), and of those loaded
//! only `.dynsym`, its string table and the notes (the build ID). Code and
//! data (`.text`, `.rodata`), most of a library, are never read: the copy
//! for blazesym leaves them as holes, which cost neither memory nor time.
//!
//! A file with a symbol table names its functions without DWARF (blazesym
//! gives a function the linkage name either way): unless source lines are
//! asked for, its `.debug_*` sections, most of a program built with debug
//! information, are not read either.

use std::{collections::HashSet, fs::File, io, ops::Range, time::Instant};

use object::{
    elf,
    read::elf::{FileHeader, SectionHeader},
    ReadCache,
};

use crate::elf::{bounded::BoundedFile, file as elf_file};

/// What of a file blazesym reads.
#[derive(Debug, PartialEq, Eq)]
pub struct ReadParts {
    /// Byte ranges, sorted, disjoint and within the file.
    pub ranges: Vec<Range<u64>>,
    /// Whether blazesym needs DWARF (else the symbol table names all).
    pub dwarf: bool,
}

/// The parts of `file` (of `size` bytes) that blazesym reads, with DWARF if
/// `lines` (source locations) or the file has no symbol table: the whole
/// file when it is no 64-bit ELF file, a relocatable one (blazesym applies
/// its relocations to DWARF) or a malformed one, as blazesym may read any
/// of it.
pub fn of(file: &File, size: u64, lines: bool, deadline: Instant) -> io::Result<ReadParts> {
    let cache = ReadCache::new(BoundedFile::for_debug_file(file.try_clone()?, deadline));
    let (parts, dwarf) = elf_parts(&cache, lines).unwrap_or_else(|| (vec![(0, size)], true));
    Ok(ReadParts {
        ranges: merged(parts, size),
        dwarf,
    })
}

/// The (offset, size) of each part blazesym reads, and whether it needs
/// DWARF; `None` where it may read anything.
fn elf_parts(cache: &ReadCache<BoundedFile>, lines: bool) -> Option<(Vec<(u64, u64)>, bool)> {
    let header = elf::FileHeader64::<object::Endianness>::parse(cache).ok()?;
    let endian = header.endian().ok()?;
    if header.e_type(endian) == elf::ET_REL {
        return None;
    }
    let sections = header.sections(endian, cache).ok()?;
    if sections.len() > elf_file::MAX_SECTIONS {
        return None;
    }
    let program_headers = header.phnum(endian, cache).ok()? as u64;
    let mut parts = vec![
        (0, size_of::<elf::FileHeader64<object::Endianness>>() as u64),
        (
            header.e_phoff(endian),
            program_headers * u64::from(header.e_phentsize(endian)),
        ),
        (
            header.e_shoff(endian),
            sections.len() as u64 * u64::from(header.e_shentsize(endian)),
        ),
    ];
    let section_names = header.shstrndx(endian, cache).ok()?;
    let dwarf = lines
        || !sections.iter().any(|section| {
            section.sh_type(endian) == elf::SHT_SYMTAB && section.sh_size(endian) > 0
        });
    let dynamic_strings: HashSet<u32> = sections
        .iter()
        .filter(|section| section.sh_type(endian) == elf::SHT_DYNSYM)
        .map(|section| section.sh_link(endian))
        .collect();
    for (index, section) in sections.enumerate() {
        let loaded = section.sh_flags(endian).contains(elf::SHF_ALLOC);
        let debug_info = sections
            .section_name(endian, section)
            .is_ok_and(|name| name.starts_with(b".debug_") || name.starts_with(b".zdebug_"));
        let read = (!loaded && (dwarf || !debug_info))
            || matches!(section.sh_type(endian), elf::SHT_DYNSYM | elf::SHT_NOTE)
            || index.0 == section_names as usize
            || u32::try_from(index.0).is_ok_and(|index| dynamic_strings.contains(&index));
        if let Some(range) = section.file_range(endian).filter(|_| read) {
            parts.push(range);
        }
    }
    Some((parts, dwarf))
}

/// `parts` as sorted, disjoint ranges within `size`.
fn merged(parts: Vec<(u64, u64)>, size: u64) -> Vec<Range<u64>> {
    let mut ranges: Vec<Range<u64>> = parts
        .into_iter()
        .map(|(offset, length)| offset.min(size)..offset.saturating_add(length).min(size))
        .filter(|range| !range.is_empty())
        .collect();
    ranges.sort_unstable_by_key(|range| range.start);
    let mut disjoint: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match disjoint.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => disjoint.push(range),
        }
    }
    disjoint
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_merged_and_clipped_to_the_file() {
        let parts = vec![
            (100, 50),
            (0, 64),
            (120, 100),
            (400, 10),
            (60, 10),
            (300, 0),
        ];
        assert_eq!(merged(parts, 405), vec![0..70, 100..220, 400..405]);
        assert_eq!(merged(vec![(u64::MAX, u64::MAX)], 10), vec![]);
    }

    #[test]
    fn code_is_not_read_but_symbols_are() {
        let path = std::env::current_exe().unwrap();
        let file = File::open(&path).unwrap();
        let size = file.metadata().unwrap().len();
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        let with_lines = of(&file, size, true, deadline).unwrap();
        let parts = of(&file, size, false, deadline).unwrap();
        assert!(with_lines.dwarf && !parts.dwarf);
        let parts = parts.ranges;
        let bytes = std::fs::read(&path).unwrap();
        let elf = elf::FileHeader64::<object::Endianness>::parse(&*bytes).unwrap();
        let endian = elf.endian().unwrap();
        let sections = elf.sections(endian, &*bytes).unwrap();
        let range_of = |name: &[u8]| {
            let (_, section) = sections.section_by_name(endian, name).unwrap();
            let (offset, size) = section.file_range(endian).unwrap();
            offset..offset + size
        };
        let covered = |range: &Range<u64>| {
            parts
                .iter()
                .any(|part| part.start <= range.start && range.end <= part.end)
        };
        let overlaps = |range: &Range<u64>| {
            parts
                .iter()
                .any(|part| part.start < range.end && range.start < part.end)
        };
        for read in [&b".symtab"[..], b".strtab", b".dynsym", b".dynstr"] {
            assert!(
                covered(&range_of(read)),
                "{}",
                String::from_utf8_lossy(read)
            );
        }
        assert!(!overlaps(&range_of(b".text")));
        let read: u64 = parts.iter().map(|part| part.end - part.start).sum();
        let text = range_of(b".text");
        assert!(read <= size - (text.end - text.start), "{read} of {size}");
    }
}
