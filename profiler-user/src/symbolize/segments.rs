//! A file's loaded segments: how its file offsets become the virtual
//! addresses its symbols have. Needed where code is named from the
//! symbol table of a separate debug file: that file keeps the program
//! headers' addresses, not their file offsets (its segments have no
//! bytes), so blazesym must be given addresses, not offsets.

use std::{fs::File, io, time::Instant};

use object::{elf, read::elf::FileHeader, read::elf::ProgramHeader, ReadCache};

use crate::unwind::bounded::BoundedFile;

/// Most loaded segments read: real files have 2 to 5.
const MAX_SEGMENTS: usize = 64;

/// One `PT_LOAD` segment: its bytes in the file and its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    offset: u64,
    size: u64,
    address: u64,
}

/// The loaded segments of a 64-bit ELF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segments(Vec<Segment>);

impl Segments {
    /// The segments of `file` (which need only hold its headers); `None`
    /// for a file that is no 64-bit ELF file, or a malformed one.
    pub fn of(file: &File, deadline: Instant) -> io::Result<Option<Self>> {
        let cache = ReadCache::new(BoundedFile::for_debug_file(file.try_clone()?, deadline));
        let Ok(header) = elf::FileHeader64::<object::Endianness>::parse(&cache) else {
            return Ok(None);
        };
        let Ok(endian) = header.endian() else {
            return Ok(None);
        };
        let Ok(headers) = header.program_headers(endian, &cache) else {
            return Ok(None);
        };
        let segments: Vec<Segment> = headers
            .iter()
            .filter(|segment| segment.p_type(endian) == elf::PT_LOAD)
            .take(MAX_SEGMENTS + 1)
            .map(|segment| Segment {
                offset: segment.p_offset(endian),
                size: segment.p_filesz(endian),
                address: segment.p_vaddr(endian),
            })
            .collect();
        Ok((!segments.is_empty() && segments.len() <= MAX_SEGMENTS).then_some(Self(segments)))
    }

    /// The virtual address of file offset `offset`, if a segment loads it.
    pub fn address_of(&self, offset: u64) -> Option<u64> {
        self.0
            .iter()
            .find(|segment| offset >= segment.offset && offset - segment.offset < segment.size)
            .and_then(|segment| segment.address.checked_add(offset - segment.offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_the_addresses_of_their_segment() {
        let file = File::open(std::env::current_exe().unwrap()).unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        let segments = Segments::of(&file, deadline).unwrap().expect("an ELF file");
        let first = segments.0[0];
        assert_eq!(segments.address_of(first.offset), Some(first.address));
        let last = segments.0.last().unwrap();
        assert_eq!(
            segments.address_of(last.offset + last.size - 1),
            Some(last.address + last.size - 1)
        );
        assert_eq!(segments.address_of(u64::MAX), None);
        let not_elf = File::open("/proc/self/status").unwrap();
        assert_eq!(Segments::of(&not_elf, deadline).unwrap(), None);
    }
}
