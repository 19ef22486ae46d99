//! The row format and its compiler: one ELF file's `.eh_frame` and
//! `.debug_frame`, and its separate debug file's `.debug_frame` (possibly
//! compressed), become a sorted array of [`UnwindRow`]s.
//!
//! DWARF CFI is a bytecode program per function (an FDE) that a debugger
//! runs to build a table "at this PC, the caller's registers are here". A BPF
//! program cannot run it, so it is run here, once per file:
//! [`crate::elf::file`] reads the file's sections, [`super::cfi`] evaluates
//! their FDEs into rules, and this module sorts, clips and merges the
//! rules into rows.

use std::{
    borrow::Cow,
    path::PathBuf,
    time::{Duration, Instant},
};

use gimli::BaseAddresses;
use object::{ReadCache, ReadRef};

use super::cfi::{Collected, Collector, RawRow, Source};
use crate::elf::{
    bounded::BoundedFile,
    debug_file::{DebugFile, DebugLinks},
    file::{
        self as elf_file, debug_file_sections, ElfError, ElfFile, LoadSegment, SectionContents,
        SectionError, Sections,
    },
};

use profiler_common::unwind::PackedRow;
pub use profiler_common::unwind::{RbpRule, RowKind, UnwindRow};

// The BPF map's value size: a change here is a change of the BPF side.
const _: () = assert!(std::mem::size_of::<PackedRow>() == 8);

/// A row without its address: what merging compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rule {
    pub kind: RowKind,
    pub cfa_offset: i32,
    pub rbp: RbpRule,
    pub rbp_offset: i16,
}

impl Rule {
    /// The rule as a [`PackedRow`] holds it: one that does not fit is
    /// [`RowKind::Unsupported`], where the unwinder stops.
    pub fn packed(self) -> u32 {
        UnwindRow {
            pc: 0,
            cfa_offset: self.cfa_offset,
            rbp_offset: self.rbp_offset,
            kind: self.kind,
            rbp: self.rbp,
        }
        .packed()
        .rule
    }

    /// The rule a [`PackedRow`]'s rule word holds.
    pub fn unpacked(rule: u32) -> Self {
        let row = PackedRow { pc: 0, rule }.unpacked();
        Self {
            kind: row.kind,
            cfa_offset: row.cfa_offset,
            rbp: row.rbp,
            rbp_offset: row.rbp_offset,
        }
    }

    /// A rule whose kind stops the unwinder: the other fields mean nothing,
    /// and are zero so that neighbouring rows of the same kind merge.
    pub const fn stop(kind: RowKind) -> Self {
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
    /// corrupt data, or more than [`crate::elf::file::MAX_SECTION_BYTES`] once
    /// decompressed.
    pub decompression_errors: usize,
    /// A separate debug file was found but left out: not an x86_64 ELF
    /// file, another build ID than the file's, or a malformed section table.
    pub debug_file_errors: usize,
    /// Rows that gimli's evaluation of the kept FDEs produced, before
    /// merging.
    pub raw_rows: usize,
}

impl UnwindTable {
    /// The row that applies at `vaddr` (an ELF virtual address of the
    /// file), or `None` where no CFI applies. A binary search of all the
    /// rows: what the BPF unwinder's search of one page's rows must agree
    /// with.
    #[cfg(test)]
    pub fn lookup(&self, vaddr: u64) -> Option<&UnwindRow> {
        let pc = u32::try_from(vaddr.checked_sub(self.base)?).ok()?;
        let index = self.rows.partition_point(|row| row.pc <= pc);
        let row = self.rows.get(index.checked_sub(1)?)?;
        (row.kind != RowKind::NoCfi).then_some(row)
    }

    /// The virtual address that the file offset of an executable mapping
    /// is loaded at ([`elf_file::vaddr_of_offset`]): a mapping at `start`
    /// with file offset `offset` has load bias `start - vaddr_of_offset(offset)`.
    pub fn vaddr_of_offset(&self, offset: u64) -> Option<u64> {
        elf_file::vaddr_of_offset(&self.segments, offset)
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
    /// The file's headers cannot be read, or are not x86_64's.
    #[error(transparent)]
    Elf(#[from] ElfError),
    /// The file exceeds one of the bounds hostile input is held to.
    #[error("{0}: left out")]
    Limit(&'static str),
}

/// How long compiling one file may take: far above what the largest real
/// libraries (libjvm.so) take. A file that takes longer is forged or
/// pathological, and holds up the tables of every process after it.
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

/// Like `compile_with`, reading the file through `data` (a
/// [`ReadCache`] over a [`BoundedFile`] reads only the headers, notes and
/// CFI sections, not the whole file), and giving up at `deadline`.
pub fn compile_from<'data, R: ReadRef<'data>>(
    data: R,
    deadline: Instant,
    find_debug_file: impl FnOnce(&DebugLinks<'_>) -> Option<DebugFile>,
) -> Result<UnwindTable, CompileError> {
    let file = ElfFile::parse_x86_64(data)?;
    let segments = file.load_segments()?;
    let sections = file.sections()?;
    let mut collector = Collector::new(base_addresses(&sections), &segments, deadline);
    collect_own_cfi(&sections, &mut collector);
    // The separate debug file is looked for whenever the file names one,
    // not only when its own CFI leaves code uncovered: telling that apart
    // would need the extent of every function, which a stripped file does
    // not have, and code outside every FDE (alignment padding, PLT stubs
    // without CFI, hand-written assembly) is normal. A lookup costs a few
    // failed opens when no debug file is installed; when one is, FDEs of
    // its `.debug_frame` that overlap the file's own are not evaluated
    // (see `cfi`).
    let links = sections.debug_links();
    let names_a_debug_file = links.build_id.is_some() || links.debuglink.is_some();
    let debug_file = if collector.limit().is_none() && names_a_debug_file {
        find_debug_file(&links)
            .and_then(|found| collect_debug_file(found, links.build_id, deadline, &mut collector))
    } else {
        None
    };
    let collected = collector.finish().map_err(CompileError::Limit)?;
    let mut table = assemble(collected, segments);
    table.debug_file = debug_file;
    Ok(table)
}

/// What pointers in `.eh_frame` are relative to (`DW_EH_PE_pcrel`,
/// `textrel`, `datarel`): gimli errors on a pointer whose base is unset.
fn base_addresses<'data, R: ReadRef<'data>>(sections: &Sections<'data, R>) -> BaseAddresses {
    let mut bases = BaseAddresses::default();
    if let Some(address) = sections.address(".text") {
        bases = bases.set_text(address);
    }
    if let Some(address) = sections.address(".got") {
        bases = bases.set_got(address);
    }
    if let Some(address) = sections.address(".eh_frame_hdr") {
        bases = bases.set_eh_frame_hdr(address);
    }
    bases
}

/// Collects the file's own `.eh_frame` and `.debug_frame`. A section whose
/// bytes are not in the file is left out, not fatal: the other may still
/// be whole.
fn collect_own_cfi<'data, R: ReadRef<'data>>(
    sections: &Sections<'data, R>,
    collector: &mut Collector<'_>,
) {
    // A NOBITS .eh_frame (a separate debug file) reads as empty.
    match sections.stored(".eh_frame") {
        Some((address, Ok(bytes))) => collector.eh_frame(bytes, address),
        Some((_, Err(_))) => collector.stats().section_errors += 1,
        None => {}
    }
    if let Some(bytes) = debug_frame_bytes(sections, collector.stats()) {
        collector.debug_frame(&bytes, Source::DebugFrame);
    }
}

/// Collects the `.debug_frame` of `found`, the file's separate debug file
/// (built with `build_id`, if the file has one). Returns its path if it was
/// read; refused (not an x86_64 file, another build, a malformed section
/// table), it counts in [`TableStats::debug_file_errors`].
fn collect_debug_file(
    found: DebugFile,
    build_id: Option<&[u8]>,
    deadline: Instant,
    collector: &mut Collector<'_>,
) -> Option<PathBuf> {
    // Only the section headers, the build ID note and `.debug_frame` are
    // read: debug files run to hundreds of megabytes of other DWARF.
    let cache = ReadCache::new(BoundedFile::for_debug_file(found.file, deadline));
    let Ok(sections) = debug_file_sections(&cache, build_id) else {
        collector.stats().debug_file_errors += 1;
        return None;
    };
    if let Some(bytes) = debug_frame_bytes(&sections, collector.stats()) {
        collector.debug_frame(&bytes, Source::DebugFile);
    }
    Some(found.path)
}

/// The bytes of a `.debug_frame` section, decompressed if need be; `None`
/// if there are none or they cannot be read, which `stats` counts.
fn debug_frame_bytes<'data, R: ReadRef<'data>>(
    sections: &Sections<'data, R>,
    stats: &mut TableStats,
) -> Option<Cow<'data, [u8]>> {
    match sections.contents(".debug_frame") {
        Ok(SectionContents::Missing) => None,
        Ok(SectionContents::Stored(bytes)) => Some(Cow::Borrowed(bytes)),
        Ok(SectionContents::Decompressed(bytes)) => {
            stats.decompressed_sections += 1;
            Some(Cow::Owned(bytes))
        }
        Err(SectionError::Unreadable) => {
            stats.section_errors += 1;
            None
        }
        Err(SectionError::Compression) => {
            stats.decompression_errors += 1;
            None
        }
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
        let fde_rows = &raw[fde.rows.start as usize..fde.rows.end as usize];
        stats.raw_rows += fde_rows.len();
        let pc_of = |row: &RawRow| fde.start + u64::from(row.offset);
        // The rule in force at `start`: the FDE's last row at or before it
        // (the first row starts at the FDE's start, which is <= `start`).
        let first = fde_rows.partition_point(|row| pc_of(row) <= start);
        let Some(initial) = first.checked_sub(1).map(|index| &fde_rows[index]) else {
            continue;
        };
        push(&mut rows, offset(start), Rule::unpacked(initial.rule));
        for row in &fde_rows[first..] {
            let pc = pc_of(row);
            if pc >= fde.end {
                break;
            }
            push(&mut rows, offset(pc), Rule::unpacked(row.rule));
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
    // Rules come packed and unpacked (`RawRow`): as the unwinder reads them.
    let row = UnwindRow {
        pc,
        cfa_offset: rule.cfa_offset,
        rbp_offset: rule.rbp_offset,
        kind: rule.kind,
        rbp: rule.rbp,
    };
    let rule_of = |row: &UnwindRow| (row.kind, row.cfa_offset, row.rbp, row.rbp_offset);
    if rows
        .last()
        .is_some_and(|last| rule_of(last) == rule_of(&row))
    {
        return;
    }
    rows.push(row);
}
