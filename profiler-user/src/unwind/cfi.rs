//! Evaluating DWARF CFI. Each FDE of `.eh_frame` or `.debug_frame` is a
//! bytecode program that gimli runs into rows "at this PC, the caller's
//! registers are here"; of each row, only the three columns that an x86_64
//! stack walk needs are kept, as a [`Rule`]: the CFA (the caller's stack
//! pointer), the return address and the caller's RBP. Rows that a BPF
//! unwinder could not apply are kept as [`RowKind::Unsupported`] rather
//! than dropped, so that a lookup never silently applies the rule of a
//! neighbouring function.

use std::{collections::HashMap, ops::Range, time::Instant};

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, CommonInformationEntry, DebugFrame, EhFrame, EndianSlice,
    FrameDescriptionEntry, LittleEndian, Operation, Register, RegisterRule, UnwindContext,
    UnwindOffset, UnwindSection, UnwindTableRow,
};

use super::table::{RbpRule, RowKind, Rule, TableStats};
use crate::elf::file::LoadSegment;

/// x86_64 DWARF register numbers (System V psABI, "DWARF Register Number
/// Mapping").
const RBP: Register = Register(6);
const RSP: Register = Register(7);
/// The return address column: x86_64 has no RA register, the CIE names
/// column 16 (RIP).
const RA: Register = Register(16);

/// The most FDEs evaluated per file (libjvm.so has about 40,000): each
/// costs an evaluation, and a forged section can pack millions.
const MAX_FDES: usize = 1 << 21;

/// The most rows gimli's evaluation may produce per file, before merging
/// (libjvm.so: about 300,000); each takes memory until the table is built.
const MAX_RAW_ROWS: usize = 1 << 23;

/// Why a file with more than [`MAX_RAW_ROWS`] gets no table.
const TOO_MANY_ROWS: &str = "more CFI rows than any real file has";

type Slice<'data> = EndianSlice<'data, LittleEndian>;

/// The section an FDE comes from. Ordered: where two FDEs overlap, the
/// first wins, and `.eh_frame` is what the program's own unwinder (C++
/// exceptions) trusts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Source {
    EhFrame,
    DebugFrame,
    /// The `.debug_frame` of the separate debug file.
    DebugFile,
}

/// One FDE kept for the table: its range and its rows in
/// [`Collected::raw`] (fewer than [`MAX_RAW_ROWS`]).
pub(super) struct Fde {
    pub start: u64,
    pub end: u64,
    pub source: Source,
    pub rows: Range<u32>,
}

/// A row as gimli gave it: its address as an offset from its FDE's start,
/// and its rule as the BPF map will hold it ([`Rule::packed`]), so that the
/// table says what the unwinder does. 8 bytes: a large library evaluates to
/// millions of rows before they merge.
pub(super) struct RawRow {
    pub offset: u32,
    pub rule: u32,
}

/// The FDEs that a file's sections gave, with their rows.
pub(super) struct Collected {
    pub fdes: Vec<Fde>,
    pub raw: Vec<RawRow>,
    pub stats: TableStats,
}

/// Evaluates the FDEs of a file's CFI sections, handed to it in the order
/// of [`Source`].
pub(super) struct Collector<'a> {
    /// What `.eh_frame` pointers are relative to, but for `.eh_frame`'s
    /// own address.
    bases: BaseAddresses,
    segments: &'a [LoadSegment],
    context: UnwindContext<usize>,
    /// When compiling gives up.
    deadline: Instant,
    collected: Collected,
    /// The bound the file exceeded, if one was: then it gets no table.
    limit: Option<&'static str>,
}

impl<'a> Collector<'a> {
    /// A collector for a file loaded as `segments`, giving up at
    /// `deadline`.
    pub fn new(bases: BaseAddresses, segments: &'a [LoadSegment], deadline: Instant) -> Self {
        Self {
            bases,
            segments,
            context: UnwindContext::new(),
            deadline,
            collected: Collected {
                fdes: Vec::new(),
                raw: Vec::new(),
                stats: TableStats::default(),
            },
            limit: None,
        }
    }

    /// What collecting counted so far, to which reading sections adds.
    pub fn stats(&mut self) -> &mut TableStats {
        &mut self.collected.stats
    }

    /// The bound the file exceeded, if one was.
    pub fn limit(&self) -> Option<&'static str> {
        self.limit
    }

    /// Collects the FDEs of `.eh_frame`, whose bytes are loaded at
    /// `address`.
    pub fn eh_frame(&mut self, bytes: &[u8], address: u64) {
        let bases = self.bases.clone().set_eh_frame(address);
        let mut eh_frame = EhFrame::new(bytes, LittleEndian);
        eh_frame.set_address_size(8);
        self.section(&eh_frame, &bases, Source::EhFrame);
    }

    /// Collects the FDEs of a `.debug_frame`.
    pub fn debug_frame(&mut self, bytes: &[u8], source: Source) {
        let bases = self.bases.clone();
        let mut debug_frame = DebugFrame::new(bytes, LittleEndian);
        debug_frame.set_address_size(8);
        self.section(&debug_frame, &bases, source);
    }

    /// What was collected, or the bound the file exceeded.
    pub fn finish(self) -> Result<Collected, &'static str> {
        match self.limit {
            Some(limit) => Err(limit),
            None => Ok(self.collected),
        }
    }

    /// Evaluates every FDE of one section.
    fn section<'data, S: UnwindSection<Slice<'data>>>(
        &mut self,
        section: &S,
        bases: &BaseAddresses,
        source: Source,
    ) {
        // The first section wins wherever two cover a PC: an FDE that
        // overlaps one of the sections collected before is left out whole,
        // not evaluated. In real files it repeats that FDE (`.debug_frame`
        // often repeats all of `.eh_frame`); a partial overlap is corrupt
        // or forged, and must not override the file's `.eh_frame`.
        let earlier = Coverage::of(&self.collected.fdes);
        let mut cies = CieCache::default();
        let mut entries = section.entries(bases);
        while self.limit.is_none() {
            let partial = match entries.next() {
                Ok(None) => break,
                Ok(Some(CieOrFde::Cie(_))) => continue,
                Ok(Some(CieOrFde::Fde(partial))) => partial,
                Err(_) => {
                    // A bad entry length: the next entry's position is unknown.
                    self.collected.stats.section_errors += 1;
                    break;
                }
            };
            self.collected.stats.fdes += 1;
            if let Some(limit) = self.exceeded_bound() {
                self.limit = Some(limit);
                break;
            }
            let Ok(fde) = partial.parse(|section, bases, offset| cies.get(section, bases, offset))
            else {
                self.collected.stats.skipped_fdes += 1;
                continue;
            };
            let (start, end) = (fde.initial_address(), fde.end_address());
            let in_code = self.segments.iter().any(|s| s.holds_code(start, end));
            if start >= end || !in_code || earlier.overlaps(start, end) {
                self.collected.stats.discarded_fdes += 1;
                continue;
            }
            let first = self.collected.raw.len();
            if self.evaluate(&fde, section, bases).is_err() {
                self.collected.raw.truncate(first);
                self.collected.stats.skipped_fdes += 1;
                continue;
            }
            // Both within MAX_RAW_ROWS, checked before each row.
            let index = |len: usize| u32::try_from(len).unwrap_or(u32::MAX);
            self.collected.fdes.push(Fde {
                start,
                end,
                source,
                rows: index(first)..index(self.collected.raw.len()),
            });
        }
    }

    /// The bound that evaluating one more FDE would go past, if any.
    /// Checked per FDE: one FDE's rows are bounded by its bytes.
    fn exceeded_bound(&self) -> Option<&'static str> {
        if self.collected.stats.fdes > MAX_FDES {
            Some("more CFI entries than any real file has")
        } else if self.collected.raw.len() > MAX_RAW_ROWS {
            Some(TOO_MANY_ROWS)
        } else if Instant::now() > self.deadline {
            Some("compiling its CFI takes too long")
        } else {
            None
        }
    }

    /// Runs one FDE, appending a [`RawRow`] per row; `Err` if its CFI is
    /// malformed, when the rows it appended are to be dropped.
    fn evaluate<'data, S: UnwindSection<Slice<'data>>>(
        &mut self,
        fde: &FrameDescriptionEntry<Slice<'data>>,
        section: &S,
        bases: &BaseAddresses,
    ) -> gimli::Result<()> {
        let cie = fde.cie();
        let encoding = cie.encoding();
        let ra_at_column_16 = cie.return_address_register() == RA;
        let signal_frame = cie.is_signal_trampoline();
        let mut rows = fde.rows(section, bases, &mut self.context)?;
        let start = fde.initial_address();
        let mut previous = start;
        while let Some(row) = rows.next_row()? {
            let pc = row.start_address();
            // Addresses only move forward in valid CFI, and no function
            // spans 4 GiB.
            let offset = u32::try_from(pc.wrapping_sub(start))
                .ok()
                .filter(|_| pc >= previous)
                .ok_or(gimli::Error::InvalidCfiSetLoc(pc))?;
            previous = pc;
            if self.collected.raw.len() >= MAX_RAW_ROWS {
                self.limit = Some(TOO_MANY_ROWS);
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
            self.collected.raw.push(RawRow {
                offset,
                rule: rule.packed(),
            });
        }
        Ok(())
    }
}

/// The ranges that FDEs collected before cover: sorted by start, each with
/// the largest end so far.
struct Coverage(Vec<(u64, u64)>);

impl Coverage {
    fn of(fdes: &[Fde]) -> Self {
        let mut ranges: Vec<(u64, u64)> = fdes.iter().map(|fde| (fde.start, fde.end)).collect();
        ranges.sort_unstable();
        let mut max_end = 0;
        for range in &mut ranges {
            max_end = max_end.max(range.1);
            range.1 = max_end;
        }
        Self(ranges)
    }

    /// Whether `start..end` overlaps a covered range: among the FDEs
    /// starting before `end`, one ends after `start`.
    fn overlaps(&self, start: u64, end: u64) -> bool {
        let index = self
            .0
            .partition_point(|&(earlier_start, _)| earlier_start < end);
        index
            .checked_sub(1)
            .is_some_and(|index| self.0[index].1 > start)
    }
}

/// The CIEs of one section parsed so far, by offset: most FDEs share a
/// handful, each parsed once.
#[derive(Default)]
struct CieCache<'data>(HashMap<usize, CommonInformationEntry<Slice<'data>>>);

impl<'data> CieCache<'data> {
    fn get<S: UnwindSection<Slice<'data>>>(
        &mut self,
        section: &S,
        bases: &BaseAddresses,
        offset: S::Offset,
    ) -> gimli::Result<CommonInformationEntry<Slice<'data>>> {
        let key = UnwindOffset::into(offset);
        if let Some(cie) = self.0.get(&key) {
            return Ok(cie.clone());
        }
        let cie = section.cie_from_offset(bases, offset)?;
        self.0.insert(key, cie.clone());
        Ok(cie)
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
