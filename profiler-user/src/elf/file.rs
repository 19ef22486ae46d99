//! Reading what unwinding needs of an ELF file: its `PT_LOAD` segments, its
//! sections by name (decompressed if need be), its dynamic symbols, its
//! build ID and `.gnu_debuglink`, and a [`Fingerprint`] of its build.
//!
//! Every file is hostile input, read through a reader that fetches only
//! the bytes asked for (an `object` [`ReadCache`] over a
//! [`BoundedFile`]): counts and sizes are capped far above any real
//! file's, so that a forged header costs neither memory nor time.

use std::{hash::BuildHasher, io::Read};

use object::{
    elf,
    read::elf::{FileHeader, ProgramHeader, SectionHeader, SectionTable, Sym},
    CompressedData, CompressionFormat, Endianness, ReadCache, ReadRef, StringTable,
};

use super::{bounded::BoundedFile, debug_file::DebugLinks};

/// The largest CFI section read (once decompressed): far above any real
/// one (libjvm.so's `.eh_frame`, among the largest, is 1.5 MB), low enough
/// that a forged size cannot exhaust memory.
pub const MAX_SECTION_BYTES: u64 = 64 << 20;

/// The most note sections searched for the build ID: real files have a
/// handful; a forged file with thousands would cost a read each.
const MAX_NOTE_SECTIONS: usize = 64;

/// The most sections a file may have (real ones have under 100; a file
/// read for its table is looked through for a few of them by name).
pub const MAX_SECTIONS: usize = 1 << 17;

/// The most dynamic symbols a file may have (libpython has some 2,000,
/// libjvm.so some 1,000).
const MAX_DYNAMIC_SYMBOLS: usize = 1 << 20;

/// The most program headers a file may have (real ones have about 15).
const MAX_PROGRAM_HEADERS: usize = 1 << 12;

type Header = elf::FileHeader64<Endianness>;

/// Why an ELF file cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// Not a 64-bit ELF file, or its headers are malformed.
    #[error("not a readable 64-bit ELF file: {0}")]
    Malformed(#[from] object::Error),
    /// An ELF file for another architecture: the rows only speak x86_64.
    #[error("not an x86_64 file (e_machine {0:?})")]
    Architecture(elf::Machine),
    /// The file exceeds one of the bounds hostile input is held to.
    #[error("{0}: left out")]
    Limit(&'static str),
}

/// A `PT_LOAD` segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    /// Where its bytes start in the file.
    pub offset: u64,
    /// How many of its bytes are in the file.
    pub file_size: u64,
    /// The virtual address it is loaded at.
    pub vaddr: u64,
    /// Its size in memory.
    pub mem_size: u64,
    /// Whether it is mapped executable (`PF_X`).
    pub executable: bool,
}

/// The page size the kernel maps segments by (x86_64).
const PAGE_SIZE: u64 = 4096;

/// The virtual address that file offset `offset` (of code, or where an
/// executable mapping begins) is loaded at, from a file's `PT_LOAD`
/// `segments`. The kernel maps a segment from its offset rounded down to a
/// page, so a mapping can begin in a page the segment shares with the one
/// before it: lld (Rust's default linker) starts the code segment 0xb80
/// bytes into a page of read-only data, one page further in memory than in
/// the file. Executable segments are matched first, by that page.
pub fn vaddr_of_offset(segments: &[LoadSegment], offset: u64) -> Option<u64> {
    let executable = segments.iter().filter(|s| s.executable);
    let others = segments.iter().filter(|s| !s.executable);
    executable
        .chain(others)
        .find(|s| {
            offset >= s.offset & !(PAGE_SIZE - 1) && offset < s.offset.saturating_add(s.file_size)
        })
        .and_then(|s| s.vaddr.checked_add(offset)?.checked_sub(s.offset))
}

/// Where a file's `PT_LOAD` `segments` store the bytes of address
/// `vaddr`, if they do.
pub fn offset_of_vaddr(segments: &[LoadSegment], vaddr: u64) -> Option<u64> {
    segments.iter().find_map(|segment| {
        let within = vaddr.checked_sub(segment.vaddr)?;
        (within < segment.file_size).then(|| segment.offset.checked_add(within))?
    })
}

impl LoadSegment {
    /// Whether the code at `start..end` lies in this segment, which is
    /// executable.
    pub fn holds_code(&self, start: u64, end: u64) -> bool {
        self.executable && start >= self.vaddr && end <= self.vaddr.saturating_add(self.mem_size)
    }
}

/// A 64-bit ELF file's header, read from `data`.
pub struct ElfFile<'data, R: ReadRef<'data>> {
    data: R,
    header: &'data Header,
    endian: Endianness,
}

impl<'data, R: ReadRef<'data>> ElfFile<'data, R> {
    /// Reads the header of any 64-bit ELF file.
    pub fn parse(data: R) -> Result<Self, ElfError> {
        let header = Header::parse(data)?;
        let endian = header.endian()?;
        Ok(Self {
            data,
            header,
            endian,
        })
    }

    /// Like [`Self::parse`], refusing files for other machines than x86_64.
    pub fn parse_x86_64(data: R) -> Result<Self, ElfError> {
        let file = Self::parse(data)?;
        let machine = file.header.e_machine(file.endian);
        if machine != elf::EM_X86_64 || !file.header.is_little_endian() {
            return Err(ElfError::Architecture(machine));
        }
        Ok(file)
    }

    /// The file's `PT_LOAD` segments.
    pub fn load_segments(&self) -> Result<Vec<LoadSegment>, ElfError> {
        let endian = self.endian;
        let program_headers = self.header.program_headers(endian, self.data)?;
        if program_headers.len() > MAX_PROGRAM_HEADERS {
            return Err(ElfError::Limit(
                "more program headers than any real file has",
            ));
        }
        Ok(program_headers
            .iter()
            .filter(|header| header.p_type(endian) == elf::PT_LOAD)
            .map(|header| LoadSegment {
                offset: header.p_offset(endian),
                file_size: header.p_filesz(endian),
                vaddr: header.p_vaddr(endian),
                mem_size: header.p_memsz(endian),
                executable: header.p_flags(endian).contains(elf::PF_X),
            })
            .collect())
    }

    /// The file's section table.
    pub fn sections(&self) -> Result<Sections<'data, R>, ElfError> {
        let table = self.header.sections(self.endian, self.data)?;
        if table.len() > MAX_SECTIONS {
            return Err(ElfError::Limit("more sections than any real file has"));
        }
        Ok(Sections {
            data: self.data,
            endian: self.endian,
            table,
        })
    }
}

/// A file's sections, looked up by name (the first of that name).
pub struct Sections<'data, R: ReadRef<'data>> {
    data: R,
    endian: Endianness,
    table: SectionTable<'data, Header, R>,
}

/// A section's bytes, as [`Sections::contents`] reads them.
pub enum SectionContents<'data> {
    /// No such section, or one without bytes in the file (`SHT_NOBITS`:
    /// a separate debug file's stand-in for a section it leaves out).
    Missing,
    /// The bytes as the file stores them.
    Stored(&'data [u8]),
    /// A `SHF_COMPRESSED` section's bytes, decompressed.
    Decompressed(Vec<u8>),
}

/// Why a section's bytes cannot be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionError {
    /// They are outside the file, or more than [`MAX_SECTION_BYTES`].
    Unreadable,
    /// A compressed section in an unknown format, with corrupt data, or of
    /// more than [`MAX_SECTION_BYTES`] once decompressed.
    Compression,
}

impl<'data, R: ReadRef<'data>> Sections<'data, R> {
    fn by_name(&self, name: &str) -> Option<&'data elf::SectionHeader64<Endianness>> {
        self.table
            .section_by_name(self.endian, name.as_bytes())
            .map(|(_, section)| section)
    }

    /// The values of the dynamic symbols (`.dynsym`) named `names`, in
    /// their order: `None` where none of that name has a value other than
    /// 0 (the last one of a name counts).
    pub fn dynamic_symbols<const N: usize>(
        &self,
        names: [&[u8]; N],
    ) -> Result<[Option<u64>; N], ElfError> {
        let symbols = self
            .table
            .symbols(self.endian, self.data, elf::SHT_DYNSYM)?;
        if symbols.len() > MAX_DYNAMIC_SYMBOLS {
            return Err(ElfError::Limit(
                "more dynamic symbols than any real file has",
            ));
        }
        // The names read at once (the reader would make a read of each).
        let strings = self
            .table
            .section(symbols.string_section())?
            .file_range(self.endian)
            .filter(|&(_, size)| size <= MAX_SECTION_BYTES)
            .and_then(|(offset, size)| self.data.read_bytes_at(offset, size).ok())
            .ok_or(ElfError::Limit("unreadable dynamic symbol names"))?;
        let strings = StringTable::new(strings, 0, strings.len() as u64);
        let mut values = [None; N];
        for symbol in symbols.iter() {
            let Ok(name) = symbol.name(self.endian, strings) else {
                continue;
            };
            if let Some(index) = names.iter().position(|&wanted| wanted == name) {
                values[index] = Some(symbol.st_value(self.endian)).filter(|&value| value != 0);
            }
        }
        Ok(values)
    }

    /// The address of section `name`.
    pub fn address(&self, name: &str) -> Option<u64> {
        self.by_name(name)
            .map(|section| section.sh_addr(self.endian))
    }

    /// The address of section `name` and its bytes as stored, compressed
    /// or not; a section without bytes in the file (`SHT_NOBITS`) reads as
    /// empty.
    pub fn stored(&self, name: &str) -> Option<(u64, Result<&'data [u8], SectionError>)> {
        let section = self.by_name(name)?;
        let bytes = match section.file_range(self.endian) {
            None => Ok(&[][..]),
            Some((_, size)) if size > MAX_SECTION_BYTES => Err(SectionError::Unreadable),
            Some((offset, size)) => self
                .data
                .read_bytes_at(offset, size)
                .map_err(|()| SectionError::Unreadable),
        };
        Some((section.sh_addr(self.endian), bytes))
    }

    /// The bytes of section `name`, decompressed if need be.
    pub fn contents(&self, name: &str) -> Result<SectionContents<'data>, SectionError> {
        let endian = self.endian;
        let Some(section) = self
            .by_name(name)
            .filter(|section| section.sh_type(endian) != elf::SHT_NOBITS)
        else {
            return Ok(SectionContents::Missing);
        };
        match section.compression(endian, self.data) {
            Ok(None) => section
                .file_range(endian)
                .filter(|&(_, size)| size <= MAX_SECTION_BYTES)
                .and_then(|(offset, size)| self.data.read_bytes_at(offset, size).ok())
                .map(SectionContents::Stored)
                .ok_or(SectionError::Unreadable),
            Ok(Some((header, offset, size))) => {
                let format = match header.ch_type.get(endian) {
                    elf::ELFCOMPRESS_ZLIB => CompressionFormat::Zlib,
                    elf::ELFCOMPRESS_ZSTD => CompressionFormat::Zstandard,
                    _ => CompressionFormat::Unknown,
                };
                let bytes = (size <= MAX_SECTION_BYTES)
                    .then(|| self.data.read_bytes_at(offset, size).ok())
                    .flatten()
                    .ok_or(SectionError::Compression)?;
                let compressed = CompressedData {
                    format,
                    data: bytes,
                    uncompressed_size: header.ch_size.get(endian),
                };
                decompress(&compressed)
                    .map(SectionContents::Decompressed)
                    .map_err(|()| SectionError::Compression)
            }
            // The section's range or its compression header is outside
            // the file.
            Err(_) if section.sh_flags(endian).contains(elf::SHF_COMPRESSED) => {
                Err(SectionError::Compression)
            }
            Err(_) => Err(SectionError::Unreadable),
        }
    }

    /// The GNU build ID note's bytes, if there is one.
    pub fn build_id(&self) -> Result<Option<&'data [u8]>, ()> {
        build_id_note(self.endian, &self.table, self.data)
    }

    /// What the file says about its separate debug file.
    pub fn debug_links(&self) -> DebugLinks<'data> {
        DebugLinks {
            build_id: self.build_id().ok().flatten(),
            debuglink: gnu_debuglink(self.endian, &self.table, self.data),
        }
    }
}

/// The sections of a separate debug file: `Err` if it is no x86_64 ELF
/// file, its section table is malformed, or it was built with another
/// build ID than `build_id`.
pub fn debug_file_sections<'data, R: ReadRef<'data>>(
    data: R,
    build_id: Option<&[u8]>,
) -> Result<Sections<'data, R>, ()> {
    let sections = ElfFile::parse_x86_64(data)
        .and_then(|file| file.sections())
        .map_err(|_| ())?;
    if let Some(expected) = build_id {
        // gdb accepts a debug file without a build ID; one with another
        // is of another build.
        if sections.build_id()?.is_some_and(|own| own != expected) {
            return Err(());
        }
    }
    Ok(sections)
}

/// Decompresses a `SHF_COMPRESSED` section (zlib or zstd), refusing more
/// than [`MAX_SECTION_BYTES`] and any size other than the header's.
fn decompress(data: &CompressedData<'_>) -> Result<Vec<u8>, ()> {
    if data.uncompressed_size > MAX_SECTION_BYTES {
        return Err(());
    }
    let size = usize::try_from(data.uncompressed_size).map_err(|_| ())?;
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(size).map_err(|_| ())?;
    // One byte more than announced would be read: more data is an error.
    let limit = data.uncompressed_size + 1;
    let read = match data.format {
        CompressionFormat::Zlib => flate2::read::ZlibDecoder::new(data.data)
            .take(limit)
            .read_to_end(&mut bytes),
        CompressionFormat::Zstandard => zstd::stream::read::Decoder::with_buffer(data.data)
            .and_then(|decoder| decoder.take(limit).read_to_end(&mut bytes)),
        _ => return Err(()),
    };
    match read {
        Ok(_) if bytes.len() == size => Ok(bytes),
        _ => Err(()),
    }
}

/// `.gnu_debuglink`'s file name and CRC32, if the file has a well-formed
/// one.
pub fn gnu_debuglink<'data, R: ReadRef<'data>>(
    endian: Endianness,
    sections: &SectionTable<'data, Header, R>,
    data: R,
) -> Option<(&'data [u8], u32)> {
    let (_, section) = sections.section_by_name(endian, b".gnu_debuglink")?;
    let (offset, size) = section.file_range(endian)?;
    // A file name (at most PATH_MAX) and the CRC.
    let bytes = data.read_bytes_at(offset, size.min(4096 + 8)).ok()?;
    let name_length = bytes.iter().position(|&byte| byte == 0)?;
    let crc_offset = (name_length + 1).next_multiple_of(4);
    let crc = bytes.get(crc_offset..crc_offset + 4)?;
    let crc = u32::from_le_bytes(crc.try_into().ok()?);
    Some((&bytes[..name_length], crc))
}

/// The GNU build ID note among `sections`, if there is one.
pub fn build_id_note<'data, R: ReadRef<'data>>(
    endian: Endianness,
    sections: &SectionTable<'data, Header, R>,
    data: R,
) -> Result<Option<&'data [u8]>, ()> {
    let mut found = None;
    let notes = sections
        .iter()
        .filter(|section| section.sh_type(endian) == elf::SHT_NOTE)
        .take(MAX_NOTE_SECTIONS);
    for section in notes {
        let Some(mut notes) = section.notes(endian, data).map_err(|_| ())? else {
            continue;
        };
        while let Some(note) = notes.next().map_err(|_| ())? {
            if note.name() == elf::ELF_NOTE_GNU && note.n_type(endian) == elf::NT_GNU_BUILD_ID {
                found = Some(note.desc());
            }
        }
    }
    Ok(found)
}

/// What tells copies of one build of a file apart from other files without
/// compiling them: its build ID and a keyed hash of its `.eh_frame`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    build_id: Vec<u8>,
    eh_frame_hash: u64,
}

/// The [`Fingerprint`] of an ELF file, reading only its headers, notes and
/// `.eh_frame`; `None` without a build ID. The build ID alone would do for
/// honest files, but any process can forge one: hashing the CFI the table
/// is compiled from (with `hasher`'s secret keys) keeps a forged copy from
/// lending its table to the real file.
pub fn fingerprint(file: BoundedFile, hasher: &impl BuildHasher) -> Option<Fingerprint> {
    let cache = ReadCache::new(file);
    let sections = ElfFile::parse(&cache).ok()?.sections().ok()?;
    let build_id = sections.build_id().ok()??.to_vec();
    let eh_frame = match sections.stored(".eh_frame") {
        Some((_, bytes)) => bytes.ok()?,
        None => &[],
    };
    Some(Fingerprint {
        build_id,
        eh_frame_hash: hasher.hash_one(eh_frame),
    })
}
