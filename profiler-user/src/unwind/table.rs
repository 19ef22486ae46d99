//! The row format and its compiler: one ELF file's `.eh_frame` and
//! `.debug_frame`, and its separate debug file's `.debug_frame` (possibly
//! compressed), become a sorted array of [`UnwindRow`]s.
//!
//! DWARF CFI is a bytecode program per function (an FDE) that a debugger
//! runs to build a table "at this PC, the caller's registers are here". A BPF
//! program cannot run it, so it is run here, once per file, and only the
//! three columns that an x86_64 stack walk needs are kept: the CFA (the
//! caller's stack pointer), the return address and the caller's RBP. Rows
//! that a BPF unwinder could not apply are kept as [`RowKind::Unsupported`]
//! rather than dropped, so that a lookup never silently applies the rule of a
//! neighbouring function.

use std::{
    borrow::Cow,
    collections::HashMap,
    hash::BuildHasher,
    io::Read,
    path::PathBuf,
    time::{Duration, Instant},
};

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, CommonInformationEntry, DebugFrame, EhFrame, EndianSlice,
    LittleEndian, Operation, Register, RegisterRule, UnwindContext, UnwindOffset, UnwindSection,
    UnwindTableRow,
};
use object::{
    elf,
    read::elf::{FileHeader, ProgramHeader, SectionHeader, SectionTable},
    CompressedData, CompressionFormat, ReadCache, ReadRef,
};

use super::{
    bounded::BoundedFile,
    debug_file::{DebugFile, DebugLinks},
};

/// x86_64 DWARF register numbers (System V psABI, "DWARF Register Number
/// Mapping").
const RBP: Register = Register(6);
const RSP: Register = Register(7);
/// The return address column: x86_64 has no RA register, the CIE names
/// column 16 (RIP).
const RA: Register = Register(16);

pub use profiler_common::unwind::{RbpRule, RowKind, UnwindRow};

// The BPF map's value size: a change here is a change of the BPF side.
const _: () = assert!(std::mem::size_of::<UnwindRow>() == 12);

/// A row without its address: what merging compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rule {
    kind: RowKind,
    cfa_offset: i32,
    rbp: RbpRule,
    rbp_offset: i16,
}

impl Rule {
    /// A rule whose kind stops the unwinder: the other fields mean nothing,
    /// and are zero so that neighbouring rows of the same kind merge.
    const fn stop(kind: RowKind) -> Self {
        Self {
            kind,
            cfa_offset: 0,
            rbp: RbpRule::Unchanged,
            rbp_offset: 0,
        }
    }
}

/// A file's compiled unwind table.
#[derive(Clone, Debug, Default)]
pub struct UnwindTable {
    /// The rows, sorted by `pc`, strictly increasing; no two neighbours have
    /// the same rule. Each FDE's end is followed by a [`RowKind::NoCfi`] row
    /// unless the next FDE starts within alignment padding of it (less than
    /// 16 bytes later).
    pub rows: Vec<UnwindRow>,
    /// The ELF virtual address that rows' `pc` are relative to: the start of
    /// the first FDE. Keeping rows at 32 bits halves their address field.
    pub base: u64,
    /// What compiling counted.
    pub stats: TableStats,
    /// The separate debug file whose `.debug_frame` was read, as a path
    /// inside the root it was found in.
    pub debug_file: Option<PathBuf>,
    /// The file's `PT_LOAD` segments, to turn a mapping's file offset into a
    /// virtual address (the load bias of a mapping).
    segments: Vec<LoadSegment>,
}

/// What compiling one file counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// FDEs found in `.eh_frame` and `.debug_frame` (the file's own and
    /// its separate debug file's).
    pub fdes: usize,
    /// Of those, the FDEs of `.debug_frame` that made it into the table
    /// (the others describe functions `.eh_frame` already covers).
    pub debug_frame_fdes: usize,
    /// Of `debug_frame_fdes`, those from the separate debug file.
    pub debug_file_fdes: usize,
    /// FDEs that gimli could not parse or evaluate: left out, as if the file
    /// had no CFI there.
    pub skipped_fdes: usize,
    /// FDEs left out on purpose: empty, outside the executable segments
    /// (entries of functions the linker discarded), or describing addresses
    /// another FDE already covers (`.debug_frame` repeating `.eh_frame`:
    /// a `.debug_frame` FDE overlapping an `.eh_frame` one is left out).
    pub discarded_fdes: usize,
    /// Sections whose list of entries could not be walked to its end (a
    /// malformed length): what followed the error is missing.
    pub section_errors: usize,
    /// Compressed `.debug_frame` sections (`SHF_COMPRESSED`) read.
    pub decompressed_sections: usize,
    /// Compressed `.debug_frame` sections left out: an unknown format,
    /// corrupt data, or more than [`MAX_SECTION_BYTES`] once decompressed.
    pub decompression_errors: usize,
    /// A separate debug file was found but left out: not an x86_64 ELF
    /// file, another build ID than the file's, or a malformed section table.
    pub debug_file_errors: usize,
    /// Rows that gimli's evaluation of the kept FDEs produced, before
    /// merging.
    pub raw_rows: usize,
}

/// A `PT_LOAD` segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LoadSegment {
    offset: u64,
    file_size: u64,
    vaddr: u64,
    mem_size: u64,
    executable: bool,
}

impl UnwindTable {
    /// The row that applies at `vaddr` (an ELF virtual address of the
    /// file), or `None` where no CFI applies. A binary search, as the BPF
    /// unwinder will do.
    #[cfg(test)]
    pub fn lookup(&self, vaddr: u64) -> Option<&UnwindRow> {
        let pc = u32::try_from(vaddr.checked_sub(self.base)?).ok()?;
        let index = self.rows.partition_point(|row| row.pc <= pc);
        let row = self.rows.get(index.checked_sub(1)?)?;
        (row.kind != RowKind::NoCfi).then_some(row)
    }

    /// The virtual address that a file offset is loaded at, from the
    /// `PT_LOAD` segments: a mapping at `start` with file offset `offset`
    /// has load bias `start - vaddr_of_offset(offset)`.
    pub fn vaddr_of_offset(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| offset >= s.offset && offset - s.offset < s.file_size)
            .and_then(|s| s.vaddr.checked_add(offset - s.offset))
    }

    /// The table's size as the BPF map will hold it.
    #[cfg(test)]
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of_val(self.rows.as_slice())
    }

    /// How many rows are of `kind`.
    #[cfg(test)]
    pub fn count(&self, kind: RowKind) -> usize {
        self.rows.iter().filter(|row| row.kind == kind).count()
    }
}

/// Why a file has no table at all. Errors in single FDEs are not here: they
/// are counted in [`TableStats::skipped_fdes`].
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// Not a 64-bit ELF file, or its headers are malformed.
    #[error("not a readable 64-bit ELF file: {0}")]
    Elf(#[from] object::Error),
    /// An ELF file for another architecture: the rows only speak x86_64.
    #[error("not an x86_64 file (e_machine {0:?})")]
    Architecture(elf::Machine),
    /// The file exceeds one of the bounds hostile input is held to.
    #[error("{0}: left out")]
    Limit(&'static str),
}

type Slice<'data> = EndianSlice<'data, LittleEndian>;

/// One FDE kept for the table: its range and its rows in `raw`.
struct Fde {
    start: u64,
    end: u64,
    source: Source,
    rows: std::ops::Range<usize>,
}

/// The section an FDE comes from. Ordered: where two FDEs overlap, the
/// first wins, and `.eh_frame` is what the program's own unwinder (C++
/// exceptions) trusts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    EhFrame,
    DebugFrame,
    /// The `.debug_frame` of the separate debug file.
    DebugFile,
}

/// A row as gimli gave it, with its full address.
struct RawRow {
    pc: u64,
    rule: Rule,
}

/// What [`collect`] fills.
struct Collected {
    fdes: Vec<Fde>,
    raw: Vec<RawRow>,
    stats: TableStats,
    /// When compiling gives up.
    deadline: Instant,
    /// The bound the file exceeded, if one was: then it gets no table.
    limit: Option<&'static str>,
}

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

/// The most program headers a file may have (real ones have about 15).
const MAX_PROGRAM_HEADERS: usize = 1 << 12;

/// The most FDEs evaluated per file (libjvm.so has about 40,000): each
/// costs an evaluation, and a forged section can pack millions.
const MAX_FDES: usize = 1 << 21;

/// The most rows gimli's evaluation may produce per file, before merging
/// (libjvm.so: about 300,000); each takes memory until the table is built.
const MAX_RAW_ROWS: usize = 1 << 23;

/// How long compiling one file may take: libjvm.so takes 40 ms. A file
/// that takes longer is forged or pathological, and holds up the tables
/// of every process after it.
pub const COMPILE_TIME_BUDGET: Duration = Duration::from_secs(3);

/// Compiles the unwind table of an ELF file from its own sections: its
/// `.eh_frame` and `.debug_frame`. Errors only when the file is no x86_64
/// ELF file at all; malformed CFI leaves out what it spoils.
#[cfg(test)]
pub fn compile(elf_bytes: &[u8]) -> Result<UnwindTable, CompileError> {
    compile_with(elf_bytes, |_| None)
}

/// Like [`compile`], adding the `.debug_frame` of the file's separate
/// debug file, which `find_debug_file` finds from what the file says of
/// it (build ID, `.gnu_debuglink`). The debug file is hostile input: a
/// malformed one is counted in [`TableStats::debug_file_errors`] and leaves
/// the table as the file's own sections make it.
#[cfg(test)]
pub fn compile_with(
    elf_bytes: &[u8],
    find_debug_file: impl FnOnce(&DebugLinks<'_>) -> Option<DebugFile>,
) -> Result<UnwindTable, CompileError> {
    compile_from(
        elf_bytes,
        Instant::now() + COMPILE_TIME_BUDGET,
        find_debug_file,
    )
}

/// Like [`compile_with`], reading the file through `data` (a
/// [`ReadCache`] over a [`BoundedFile`] reads only the headers, notes and
/// CFI sections, not the whole file), and giving up at `deadline`.
pub fn compile_from<'data, R: ReadRef<'data>>(
    data: R,
    deadline: Instant,
    find_debug_file: impl FnOnce(&DebugLinks<'_>) -> Option<DebugFile>,
) -> Result<UnwindTable, CompileError> {
    let header = elf::FileHeader64::<object::Endianness>::parse(data)?;
    let endian = header.endian()?;
    if header.e_machine(endian) != elf::EM_X86_64 || !header.is_little_endian() {
        return Err(CompileError::Architecture(header.e_machine(endian)));
    }
    let program_headers = header.program_headers(endian, data)?;
    if program_headers.len() > MAX_PROGRAM_HEADERS {
        return Err(CompileError::Limit(
            "more program headers than any real file has",
        ));
    }
    let segments: Vec<LoadSegment> = program_headers
        .iter()
        .filter(|header| header.p_type(endian) == elf::PT_LOAD)
        .map(|header| LoadSegment {
            offset: header.p_offset(endian),
            file_size: header.p_filesz(endian),
            vaddr: header.p_vaddr(endian),
            mem_size: header.p_memsz(endian),
            executable: header.p_flags(endian).contains(elf::PF_X),
        })
        .collect();

    let sections = header.sections(endian, data)?;
    if sections.len() > MAX_SECTIONS {
        return Err(CompileError::Limit("more sections than any real file has"));
    }
    let section = |name: &str| {
        sections
            .section_by_name(endian, name.as_bytes())
            .map(|(_, section)| section)
    };
    let section_address = |name: &str| section(name).map(|s| s.sh_addr(endian));
    let mut bases = BaseAddresses::default();
    // Pointers in .eh_frame are relative to these (DW_EH_PE_pcrel,
    // textrel, datarel): gimli errors on a pointer whose base is unset.
    if let Some(address) = section_address(".text") {
        bases = bases.set_text(address);
    }
    if let Some(address) = section_address(".got") {
        bases = bases.set_got(address);
    }
    if let Some(address) = section_address(".eh_frame_hdr") {
        bases = bases.set_eh_frame_hdr(address);
    }

    let mut collected = Collected {
        fdes: Vec::new(),
        raw: Vec::new(),
        stats: TableStats::default(),
        deadline,
        limit: None,
    };
    let mut context = UnwindContext::new();
    // A section whose bytes are not in the file is left out, not fatal:
    // the other may still be whole.
    if let Some(section) = section(".eh_frame") {
        // A NOBITS .eh_frame (a separate debug file) reads as empty.
        let bytes = match section.file_range(endian) {
            None => Ok(&[][..]),
            Some((_, size)) if size > MAX_SECTION_BYTES => Err(()),
            Some((offset, size)) => data.read_bytes_at(offset, size),
        };
        if let Ok(data) = bytes {
            let bases = bases.clone().set_eh_frame(section.sh_addr(endian));
            let mut eh_frame = EhFrame::new(data, LittleEndian);
            eh_frame.set_address_size(8);
            collect(
                &eh_frame,
                &bases,
                Source::EhFrame,
                &segments,
                &mut context,
                &mut collected,
            );
        } else {
            collected.stats.section_errors += 1;
        }
    }
    if let Some(section) = section(".debug_frame") {
        if let Some(data) = debug_frame_bytes(section, endian, data, &mut collected.stats) {
            collect_debug_frame(
                &data,
                &bases,
                Source::DebugFrame,
                &segments,
                &mut context,
                &mut collected,
            );
        }
    }

    // The separate debug file is looked for whenever the file names one,
    // not only when its own CFI leaves code uncovered: telling that apart
    // would need the extent of every function, which a stripped file does
    // not have, and code outside every FDE (alignment padding, PLT stubs
    // without CFI, hand-written assembly) is normal. A lookup costs a few
    // failed opens when no debug file is installed; when one is, FDEs of
    // its `.debug_frame` that overlap the file's own are not evaluated
    // (see `collect`).
    let links = DebugLinks {
        build_id: build_id_note(endian, &sections, data).ok().flatten(),
        debuglink: gnu_debuglink(endian, &sections, data),
    };
    let mut debug_file = None;
    if collected.limit.is_none() && (links.build_id.is_some() || links.debuglink.is_some()) {
        if let Some(found) = find_debug_file(&links) {
            let cache = ReadCache::new(BoundedFile::for_debug_file(found.file, deadline));
            match separate_debug_frame(&cache, links.build_id, &mut collected.stats) {
                Ok(data) => {
                    if let Some(data) = data {
                        collect_debug_frame(
                            &data,
                            &bases,
                            Source::DebugFile,
                            &segments,
                            &mut context,
                            &mut collected,
                        );
                    }
                    debug_file = Some(found.path);
                }
                Err(()) => collected.stats.debug_file_errors += 1,
            }
        }
    }
    if let Some(limit) = collected.limit {
        return Err(CompileError::Limit(limit));
    }
    let mut table = assemble(collected, segments);
    table.debug_file = debug_file;
    Ok(table)
}

/// `.gnu_debuglink`'s file name and CRC32, if the file has a well-formed
/// one.
pub fn gnu_debuglink<'data, R: ReadRef<'data>>(
    endian: object::Endianness,
    sections: &SectionTable<'data, elf::FileHeader64<object::Endianness>, R>,
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

/// Collects a `.debug_frame` section's FDEs.
fn collect_debug_frame(
    data: &[u8],
    bases: &BaseAddresses,
    source: Source,
    segments: &[LoadSegment],
    context: &mut UnwindContext<usize>,
    collected: &mut Collected,
) {
    let mut debug_frame = DebugFrame::new(data, LittleEndian);
    debug_frame.set_address_size(8);
    collect(&debug_frame, bases, source, segments, context, collected);
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

/// The `.debug_frame` of a separate debug file, decompressed if need be:
/// `Ok(None)` if it has none, `Err` if it is no x86_64 ELF file or was
/// built with another build ID than `build_id`. Only the section headers,
/// the build ID note and `.debug_frame` are read: debug files run to
/// hundreds of megabytes of other DWARF.
fn separate_debug_frame<'data, R: ReadRef<'data>>(
    data: R,
    build_id: Option<&[u8]>,
    stats: &mut TableStats,
) -> Result<Option<Cow<'data, [u8]>>, ()> {
    let header = elf::FileHeader64::<object::Endianness>::parse(data).map_err(|_| ())?;
    let endian = header.endian().map_err(|_| ())?;
    if header.e_machine(endian) != elf::EM_X86_64 || !header.is_little_endian() {
        return Err(());
    }
    let sections = header.sections(endian, data).map_err(|_| ())?;
    if sections.len() > MAX_SECTIONS {
        return Err(());
    }
    if let Some(expected) = build_id {
        // gdb accepts a debug file without a build ID; one with another
        // is of another build.
        if build_id_note(endian, &sections, data)?.is_some_and(|own| own != expected) {
            return Err(());
        }
    }
    let Some((_, section)) = sections.section_by_name(endian, b".debug_frame") else {
        return Ok(None);
    };
    Ok(debug_frame_bytes(section, endian, data, stats))
}

/// The GNU build ID note among `sections`, if there is one.
pub(crate) fn build_id_note<'data, R: ReadRef<'data>>(
    endian: object::Endianness,
    sections: &SectionTable<'data, elf::FileHeader64<object::Endianness>, R>,
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
    let header = elf::FileHeader64::<object::Endianness>::parse(&cache).ok()?;
    let endian = header.endian().ok()?;
    let sections = header
        .sections(endian, &cache)
        .ok()
        .filter(|sections| sections.len() <= MAX_SECTIONS)?;
    let build_id = build_id_note(endian, &sections, &cache).ok()??.to_vec();
    let eh_frame = match sections.section_by_name(endian, b".eh_frame") {
        Some((_, section)) if section.sh_type(endian) != elf::SHT_NOBITS => {
            let (offset, size) = section.file_range(endian)?;
            if size > MAX_SECTION_BYTES {
                return None;
            }
            cache.read_bytes_at(offset, size).ok()?
        }
        _ => &[],
    };
    Some(Fingerprint {
        build_id,
        eh_frame_hash: hasher.hash_one(eh_frame),
    })
}

/// The bytes of a `.debug_frame` section, decompressed if need be; `None`
/// if it has none (`SHT_NOBITS`) or they cannot be read, which `stats`
/// counts.
fn debug_frame_bytes<'data, R: ReadRef<'data>>(
    section: &elf::SectionHeader64<object::Endianness>,
    endian: object::Endianness,
    data: R,
    stats: &mut TableStats,
) -> Option<Cow<'data, [u8]>> {
    if section.sh_type(endian) == elf::SHT_NOBITS {
        return None;
    }
    match section.compression(endian, data) {
        Ok(None) => {
            let bytes = section
                .file_range(endian)
                .filter(|&(_, size)| size <= MAX_SECTION_BYTES)
                .and_then(|(offset, size)| data.read_bytes_at(offset, size).ok());
            let Some(bytes) = bytes else {
                stats.section_errors += 1;
                return None;
            };
            Some(Cow::Borrowed(bytes))
        }
        Ok(Some((header, offset, size))) => {
            let format = match header.ch_type.get(endian) {
                elf::ELFCOMPRESS_ZLIB => CompressionFormat::Zlib,
                elf::ELFCOMPRESS_ZSTD => CompressionFormat::Zstandard,
                _ => CompressionFormat::Unknown,
            };
            let bytes = (size <= MAX_SECTION_BYTES)
                .then(|| data.read_bytes_at(offset, size).ok())
                .flatten();
            let Some(bytes) = bytes else {
                stats.decompression_errors += 1;
                return None;
            };
            let compressed = CompressedData {
                format,
                data: bytes,
                uncompressed_size: header.ch_size.get(endian),
            };
            match decompress(&compressed) {
                Ok(bytes) => {
                    stats.decompressed_sections += 1;
                    Some(Cow::Owned(bytes))
                }
                Err(()) => {
                    stats.decompression_errors += 1;
                    None
                }
            }
        }
        Err(_) => {
            // The section's range or its compression header is outside
            // the file.
            if section.sh_flags(endian).contains(elf::SHF_COMPRESSED) {
                stats.decompression_errors += 1;
            } else {
                stats.section_errors += 1;
            }
            None
        }
    }
}

/// Evaluates every FDE of one section into `collected`.
fn collect<'data, S: UnwindSection<Slice<'data>>>(
    section: &S,
    bases: &BaseAddresses,
    source: Source,
    segments: &[LoadSegment],
    context: &mut UnwindContext<usize>,
    collected: &mut Collected,
) {
    // What the sections collected before cover. The first section wins
    // wherever two cover a PC: an FDE that overlaps one of theirs is left
    // out whole, not evaluated. In real files it repeats that FDE
    // (`.debug_frame` often repeats all of `.eh_frame`); a partial overlap
    // is corrupt or forged, and must not override the file's `.eh_frame`.
    // Sorted by start, with the largest end so far.
    let mut earlier: Vec<(u64, u64)> = collected
        .fdes
        .iter()
        .map(|fde| (fde.start, fde.end))
        .collect();
    earlier.sort_unstable();
    let mut max_end = 0;
    for range in &mut earlier {
        max_end = max_end.max(range.1);
        range.1 = max_end;
    }
    let overlaps_earlier = |start: u64, end: u64| {
        // Among the FDEs starting before `end`, one ends after `start`.
        let index = earlier.partition_point(|&(earlier_start, _)| earlier_start < end);
        index
            .checked_sub(1)
            .is_some_and(|index| earlier[index].1 > start)
    };
    // Most FDEs share a handful of CIEs: parse each once.
    let mut cies: HashMap<usize, CommonInformationEntry<Slice<'data>>> = HashMap::new();
    let mut entries = section.entries(bases);
    while collected.limit.is_none() {
        let partial = match entries.next() {
            Ok(None) => break,
            Ok(Some(CieOrFde::Cie(_))) => continue,
            Ok(Some(CieOrFde::Fde(partial))) => partial,
            Err(_) => {
                // A bad entry length: the next entry's position is unknown.
                collected.stats.section_errors += 1;
                break;
            }
        };
        collected.stats.fdes += 1;
        if collected.stats.fdes > MAX_FDES {
            collected.limit = Some("more CFI entries than any real file has");
            break;
        }
        if collected.raw.len() > MAX_RAW_ROWS {
            collected.limit = Some("more CFI rows than any real file has");
            break;
        }
        // Checked per FDE: one FDE's rows are bounded by its bytes.
        if Instant::now() > collected.deadline {
            collected.limit = Some("compiling its CFI takes too long");
            break;
        }
        let fde = partial.parse(|section, bases, offset| {
            let key = UnwindOffset::into(offset);
            if let Some(cie) = cies.get(&key) {
                return Ok(cie.clone());
            }
            let cie = section.cie_from_offset(bases, offset)?;
            cies.insert(key, cie.clone());
            Ok(cie)
        });
        let Ok(fde) = fde else {
            collected.stats.skipped_fdes += 1;
            continue;
        };
        let (start, end) = (fde.initial_address(), fde.end_address());
        let executable = segments
            .iter()
            .any(|s| s.executable && start >= s.vaddr && end <= s.vaddr.saturating_add(s.mem_size));
        if start >= end || !executable || overlaps_earlier(start, end) {
            collected.stats.discarded_fdes += 1;
            continue;
        }
        let cie = fde.cie();
        let encoding = cie.encoding();
        let ra_at_column_16 = cie.return_address_register() == RA;
        let signal_frame = cie.is_signal_trampoline();
        let first = collected.raw.len();
        let ok = (|| -> gimli::Result<()> {
            let mut rows = fde.rows(section, bases, context)?;
            let mut previous = start;
            while let Some(row) = rows.next_row()? {
                let pc = row.start_address();
                if pc < previous {
                    // Addresses only move forward in valid CFI.
                    return Err(gimli::Error::InvalidCfiSetLoc(pc));
                }
                previous = pc;
                if collected.raw.len() >= MAX_RAW_ROWS {
                    collected.limit = Some("more CFI rows than any real file has");
                    return Ok(());
                }
                // A signal trampoline's CFI describes the kernel's signal
                // frame with expressions; the unwinder reads the saved
                // registers from the frame itself.
                let rule = if signal_frame {
                    Rule::stop(RowKind::Signal)
                } else if ra_at_column_16 {
                    rule_of(row, section, encoding)
                } else {
                    Rule::stop(RowKind::Unsupported)
                };
                collected.raw.push(RawRow { pc, rule });
            }
            Ok(())
        })();
        if ok.is_err() {
            collected.raw.truncate(first);
            collected.stats.skipped_fdes += 1;
            continue;
        }
        collected.fdes.push(Fde {
            start,
            end,
            source,
            rows: first..collected.raw.len(),
        });
    }
}

/// Translates one of gimli's rows into a [`Rule`].
fn rule_of<'data, S: UnwindSection<Slice<'data>>>(
    row: &UnwindTableRow<usize>,
    section: &S,
    encoding: gimli::Encoding,
) -> Rule {
    match row.register(RA) {
        Some(RegisterRule::Offset(-8)) => {}
        Some(RegisterRule::Undefined) => return Rule::stop(RowKind::End),
        _ => return Rule::stop(RowKind::Unsupported),
    }
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let kind = match *register {
                RSP => Some(RowKind::CfaRsp),
                RBP => Some(RowKind::CfaRbp),
                _ => None,
            };
            kind.zip(i32::try_from(*offset).ok())
        }
        CfaRule::Expression(expression) => expression
            .get(section)
            .ok()
            .and_then(|expression| cfa_expression(expression.0, encoding)),
    };
    let Some((kind, cfa_offset)) = cfa else {
        return Rule::stop(RowKind::Unsupported);
    };
    let (rbp, rbp_offset) = match row.register(RBP) {
        // No rule: RBP is callee-saved, so it keeps the caller's value.
        None | Some(RegisterRule::SameValue) => (RbpRule::Unchanged, 0),
        Some(RegisterRule::Offset(offset)) => match i16::try_from(offset) {
            Ok(offset) => (RbpRule::AtCfa, offset),
            Err(_) => (RbpRule::Unsupported, 0),
        },
        Some(RegisterRule::Expression(expression)) => expression
            .get(section)
            .ok()
            .and_then(|expression| rbp_expression(expression.0, encoding))
            .map_or((RbpRule::Unsupported, 0), |offset| (RbpRule::AtRbp, offset)),
        Some(_) => (RbpRule::Unsupported, 0),
    };
    Rule {
        kind,
        cfa_offset,
        rbp,
        rbp_offset,
    }
}

/// The first operations of a DWARF expression (`None` if it has more than
/// `N` or does not parse).
fn operations<const N: usize>(
    bytes: Slice<'_>,
    encoding: gimli::Encoding,
) -> Option<Vec<Operation<Slice<'_>>>> {
    let mut iter = gimli::Expression(bytes).operations(encoding);
    let mut operations = Vec::with_capacity(N);
    while let Some(operation) = iter.next().ok()? {
        if operations.len() == N {
            return None;
        }
        operations.push(operation);
    }
    Some(operations)
}

/// Recognizes the CFA expressions that the format has a kind for.
fn cfa_expression(bytes: Slice<'_>, encoding: gimli::Encoding) -> Option<(RowKind, i32)> {
    use Operation::*;
    let operations = operations::<9>(bytes, encoding)?;
    match operations.as_slice() {
        // DW_OP_breg7 (rsp): N; DW_OP_breg16 (rip): 0; DW_OP_lit15; DW_OP_and;
        // DW_OP_lit11; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus
        [RegisterOffset {
            register: RSP,
            offset,
            ..
        }, RegisterOffset {
            register: RA,
            offset: 0,
            ..
        }, UnsignedConstant { value: 15 }, And, UnsignedConstant { value: 11 }, Ge, UnsignedConstant { value: 3 }, Shl, Plus] => {
            Some((RowKind::Plt, i32::try_from(*offset).ok()?))
        }
        // DW_OP_breg6 (rbp): N; DW_OP_deref
        [RegisterOffset {
            register: RBP,
            offset,
            ..
        }, Deref {
            size: 8,
            space: false,
            ..
        }] => Some((RowKind::CfaRbpDeref, i32::try_from(*offset).ok()?)),
        _ => None,
    }
}

/// Recognizes `DW_OP_breg6 (rbp): N` as the address of the saved RBP.
fn rbp_expression(bytes: Slice<'_>, encoding: gimli::Encoding) -> Option<i16> {
    match operations::<1>(bytes, encoding)?.as_slice() {
        [Operation::RegisterOffset {
            register: RBP,
            offset,
            ..
        }] => i16::try_from(*offset).ok(),
        _ => None,
    }
}

/// The shortest space between two FDEs that gets a [`RowKind::NoCfi`] row.
/// Shorter spaces are the padding that aligns functions to 16 bytes: no
/// instruction there ever runs (nor is returned to: return addresses are
/// looked up minus one), so the previous function's last row may cover it.
/// That drops a row per function and lets that row merge with the next
/// function's first (both are usually CFA = RSP + 8). The OpenTelemetry
/// profiler drops the same gaps.
const MIN_GAP: u64 = 16;

/// Sorts, clips and merges the collected FDEs' rows into the table.
fn assemble(collected: Collected, segments: Vec<LoadSegment>) -> UnwindTable {
    let Collected {
        mut fdes,
        raw,
        mut stats,
        ..
    } = collected;
    fdes.sort_by_key(|fde| (fde.start, fde.source));
    let base = fdes.first().map_or(0, |fde| fde.start);
    // Every address passed here is in [base, end of an FDE whose end was
    // checked to fit in 32 bits], so the truncation never happens.
    let offset = |address: u64| (address - base) as u32;
    let mut rows: Vec<UnwindRow> = Vec::new();
    // The end of what the rows emitted so far cover.
    let mut covered = base;
    for fde in &fdes {
        let start = fde.start.max(covered);
        let Some(end) = fde
            .end
            .checked_sub(base)
            .and_then(|end| u32::try_from(end).ok())
        else {
            // Beyond 4 GiB of the first function: no real file has that.
            stats.discarded_fdes += 1;
            continue;
        };
        if fde.end <= start {
            stats.discarded_fdes += 1;
            continue;
        }
        if fde.start.saturating_sub(covered) >= MIN_GAP && !rows.is_empty() {
            push(&mut rows, offset(covered), Rule::stop(RowKind::NoCfi));
        }
        let fde_rows = &raw[fde.rows.clone()];
        stats.raw_rows += fde_rows.len();
        // The rule in force at `start`: the FDE's last row at or before it
        // (the first row starts at the FDE's start, which is <= `start`).
        let first = fde_rows.partition_point(|row| row.pc <= start);
        let Some(initial) = first.checked_sub(1).map(|index| &fde_rows[index]) else {
            continue;
        };
        push(&mut rows, offset(start), initial.rule);
        for row in &fde_rows[first..] {
            if row.pc >= fde.end {
                break;
            }
            push(&mut rows, offset(row.pc), row.rule);
        }
        stats.debug_frame_fdes += usize::from(fde.source != Source::EhFrame);
        stats.debug_file_fdes += usize::from(fde.source == Source::DebugFile);
        covered = base + u64::from(end);
    }
    if !rows.is_empty() {
        push(&mut rows, offset(covered), Rule::stop(RowKind::NoCfi));
    }
    UnwindTable {
        rows,
        base,
        stats,
        debug_file: None,
        segments,
    }
}

/// Appends a row, merging it into the previous one when their rules match.
fn push(rows: &mut Vec<UnwindRow>, pc: u32, rule: Rule) {
    // A row of zero length (two rows at one address) never applies.
    if rows.last().is_some_and(|last| last.pc == pc) {
        rows.pop();
    }
    if let Some(last) = rows.last() {
        let last_rule = Rule {
            kind: last.kind,
            cfa_offset: last.cfa_offset,
            rbp: last.rbp,
            rbp_offset: last.rbp_offset,
        };
        if last_rule == rule {
            return;
        }
    }
    rows.push(UnwindRow {
        pc,
        cfa_offset: rule.cfa_offset,
        rbp_offset: rule.rbp_offset,
        kind: rule.kind,
        rbp: rule.rbp,
    });
}
