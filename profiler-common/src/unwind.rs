//! Compiled unwind tables as the BPF unwinder reads them, and why it stops.

use num_enum::TryFromPrimitive;

/// How a row finds the CFA (the caller's stack pointer before its call).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, TryFromPrimitive)]
pub enum RowKind {
    /// No CFI covers these addresses: walk frame pointers.
    NoCfi = 0,
    /// CFA = RSP + `cfa_offset`.
    CfaRsp = 1,
    /// CFA = RBP + `cfa_offset`.
    CfaRbp = 2,
    /// CFA = *(RBP + `cfa_offset`) (stack realignment, DRAP).
    CfaRbpDeref = 3,
    /// A PLT entry: RSP + `cfa_offset` + ((RIP & 15) >= 11 ? 8 : 0).
    Plt = 4,
    /// The outermost frame: the stack ends here.
    End = 5,
    /// CFI the unwinder cannot follow.
    Unsupported = 6,
    /// A signal trampoline (`__restore_rt`): the interrupted registers are
    /// in the kernel's signal frame at RSP.
    Signal = 7,
}

/// Where the caller's RBP is.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, TryFromPrimitive)]
pub enum RbpRule {
    /// RBP holds the caller's value.
    Unchanged = 0,
    /// At *(CFA + `rbp_offset`).
    AtCfa = 1,
    /// At *(RBP + `rbp_offset`).
    AtRbp = 2,
    /// Unknown.
    Unsupported = 3,
}

/// One row: from `pc` up to the next row's, how to find the caller. The
/// return address is always at *(CFA - 8). The BPF unwinder reads it
/// packed ([`PackedRow`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnwindRow {
    /// Offset from the table's base address.
    pub pc: u32,
    /// The CFA's offset for the kinds that have one.
    pub cfa_offset: i32,
    /// The offset of [`RbpRule::AtCfa`] and [`RbpRule::AtRbp`].
    pub rbp_offset: i16,
    /// How to find the CFA.
    pub kind: RowKind,
    /// How to find the caller's RBP.
    pub rbp: RbpRule,
}

/// Where [`PackedRow::rule`] keeps the RBP rule: the CFA's kind is in the
/// 3 bits below.
pub const ROW_RBP_SHIFT: u32 = 3;
/// Where [`PackedRow::rule`] keeps the RBP offset, in 8 signed bits of
/// 8-byte words.
pub const ROW_RBP_OFFSET_SHIFT: u32 = 5;
/// Where [`PackedRow::rule`] keeps the CFA offset: the 19 signed bits
/// above the rest.
pub const ROW_CFA_OFFSET_SHIFT: u32 = 13;

/// The CFA offsets a packed row holds: a stack frame of up to 256 KiB.
const CFA_OFFSETS: core::ops::RangeInclusive<i32> = -(1 << 18)..=(1 << 18) - 1;
/// The RBP offsets a packed row holds: whole words within 1 KiB (RBP is
/// saved by a push, 8-byte aligned from the CFA).
const RBP_OFFSETS: core::ops::RangeInclusive<i16> = -1024..=1016;

/// An [`UnwindRow`] as the BPF unwinder reads it from the `unwind_rows`
/// map: 8 bytes instead of 16 (a map value of 12 is rounded up to 16), so
/// that the million rows the map has room for take 8 MB, which the kernel
/// allocates, and stoke maps, in full when the map is created.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedRow {
    /// Offset from the table's base address.
    pub pc: u32,
    /// The kind, the RBP rule and both offsets (`ROW_*_SHIFT`).
    pub rule: u32,
}

impl UnwindRow {
    /// Whether a [`PackedRow`] holds this row's offsets.
    pub fn packable(&self) -> bool {
        let rbp_fits = match self.rbp {
            RbpRule::AtCfa | RbpRule::AtRbp => {
                RBP_OFFSETS.contains(&self.rbp_offset) && self.rbp_offset % 8 == 0
            }
            RbpRule::Unchanged | RbpRule::Unsupported => true,
        };
        rbp_fits && CFA_OFFSETS.contains(&self.cfa_offset)
    }

    /// The row packed; a row that is not [`packable`](Self::packable) is
    /// packed as [`RowKind::Unsupported`], where the unwinder stops.
    pub fn packed(&self) -> PackedRow {
        let (kind, rbp, rbp_words, cfa_offset) = if self.packable() {
            (self.kind, self.rbp, self.rbp_offset / 8, self.cfa_offset)
        } else {
            (RowKind::Unsupported, RbpRule::Unsupported, 0, 0)
        };
        PackedRow {
            pc: self.pc,
            rule: u32::from(kind as u8)
                | u32::from(rbp as u8) << ROW_RBP_SHIFT
                | u32::from(rbp_words as u8) << ROW_RBP_OFFSET_SHIFT
                | (cfa_offset as u32) << ROW_CFA_OFFSET_SHIFT,
        }
    }
}

impl PackedRow {
    /// The row it packs.
    pub fn unpacked(&self) -> UnwindRow {
        let rule = self.rule;
        UnwindRow {
            pc: self.pc,
            kind: RowKind::try_from((rule & 7) as u8).unwrap_or(RowKind::Unsupported),
            rbp: RbpRule::try_from((rule >> ROW_RBP_SHIFT & 3) as u8)
                .unwrap_or(RbpRule::Unsupported),
            rbp_offset: i16::from((rule >> ROW_RBP_OFFSET_SHIFT) as u8 as i8) * 8,
            cfa_offset: rule as i32 >> ROW_CFA_OFFSET_SHIFT,
        }
    }
}

/// A table's rows are indexed by pages of `pc`, so that a lookup searches
/// one page's rows, not the whole file's. Each file's pages are the
/// smallest, from `1 << MIN_UNWIND_PAGE_SHIFT` bytes to
/// `1 << MAX_UNWIND_PAGE_SHIFT`, that number at most a quarter of its rows:
/// a page's few rows then lie in a cache line or two, found in two or three
/// steps (a sample's unwinding touches these lines cold).
pub const MIN_UNWIND_PAGE_SHIFT: u32 = 8;
/// The largest pages: at most 65,536 pages cover any table (`pc` is 32-bit).
pub const MAX_UNWIND_PAGE_SHIFT: u32 = 16;

/// Rows a page has at least, on average: so that the pages of every file
/// take at most a quarter of the room of its rows, as the page map is
/// sized ([`unwind_page_capacity`]).
pub const ROWS_PER_PAGE: u32 = 4;

/// Capacity of the `unwind_pages` map beside an `unwind_rows` map of
/// `rows`: a file's pages are at most [`ROWS_PER_PAGE`] times fewer than
/// its rows.
pub const fn unwind_page_capacity(rows: u32) -> u32 {
    rows / ROWS_PER_PAGE
}

/// Which of a file's rows begin in one page of its table: rows `first` up
/// to `end` (indices among the file's rows). The last row before `first`
/// covers the page's start.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindPage {
    /// The first row whose `pc` is in the page or past it.
    pub first: u32,
    /// The first row whose `pc` is past the page.
    pub end: u32,
}

/// Most executable mappings of one process the unwinder knows: far above
/// real processes (a browser, or a JVM or Python with many native
/// libraries, maps hundreds of files). A process past it has its mappings
/// from there on left out (counted in the summary): stacks end in their
/// code.
pub const MAX_MAPPINGS: usize = 16_384;

/// Steps of the BPF binary search for a pc among a process's mappings: `n`
/// steps search fewer than `1 << n`.
pub const MAPPING_SEARCH_STEPS: u32 = 15;

const _: () = assert!(MAX_MAPPINGS < 1 << MAPPING_SEARCH_STEPS);

/// One executable mapping of a process, with its file's rows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// A row's `pc` is `address - row_base`.
    pub row_base: u64,
    /// Index of the file's first row in the `unwind_rows` map.
    pub rows_start: u32,
    /// Rows of the file; 0 means no table: walk frame pointers.
    pub rows_count: u32,
    /// Index of the file's first page in the `unwind_pages` map.
    pub pages_start: u32,
    /// Pages of the file, from `pc` 0 to its last row's page; 0 means the
    /// rows are searched without an index.
    pub pages_count: u32,
    /// A page of the file is `1 << page_shift` bytes of `pc`.
    pub page_shift: u32,
    /// Explicit, so that no byte of a mapping written to the map is
    /// undefined.
    pub padding: u32,
}

/// A process's executable mappings: `count` [`Mapping`]s (at most
/// [`MAX_MAPPINGS`]), sorted by start, from index `first` of the
/// `unwind_mappings` map. 8 bytes a process in the kernel's hash map, where
/// room for the mappings themselves would be copied in and allocated whole
/// for every process, most of it empty.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessMappings {
    /// Mappings of the process.
    pub count: u32,
    /// Index of its first mapping in `unwind_mappings`.
    pub first: u32,
}

/// Why a user stack ends, in [`crate::RecordHeader::flags`] bits
/// [`STOP_SHIFT`] on.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, TryFromPrimitive)]
pub enum StopReason {
    /// The process had no tables: frame pointers by the kernel.
    FramePointers = 0,
    /// The outermost frame.
    End = 1,
    /// Code without CFI, and no frame pointer to follow.
    NoCfi = 2,
    /// CFI the unwinder cannot follow.
    Unsupported = 3,
    /// Stack memory could not be read.
    ReadFailed = 4,
    /// The frame limit.
    Depth = 5,
    /// Code outside any mapped file: JIT code, or a lost stack.
    UnknownCode = 6,
    /// A frame-pointer step found no frame.
    BadFrame = 7,
}

/// First bit of the stop reason in a record's flags.
pub const STOP_SHIFT: u32 = 8;
/// Mask of the stop reason once shifted down.
pub const STOP_MASK: u32 = 0xf;

impl StopReason {
    /// The reason in a record's flags.
    pub fn from_flags(flags: u32) -> Self {
        Self::try_from((flags >> STOP_SHIFT) & STOP_MASK).unwrap_or(Self::FramePointers)
    }
}

/// At a signal trampoline RSP points at the kernel's `struct ucontext`:
/// its `uc_mcontext` (`struct sigcontext`) starts this far in.
pub const SIGCONTEXT_OFFSET: u32 = 40;
/// Offset of the interrupted RBP in `struct sigcontext`.
pub const SIGCONTEXT_RBP: u32 = 80;
/// Offset of the interrupted RSP in `struct sigcontext`.
pub const SIGCONTEXT_RSP: u32 = 120;
/// Offset of the interrupted RIP in `struct sigcontext`.
pub const SIGCONTEXT_RIP: u32 = 128;

/// The functions a process's or thread's stack starts in (the executable's
/// entry, libc's start of `main`, a thread's start): a stack that reaches
/// one is whole. Stoke's stack quality and the bench count by it.
/// `__GI___clone` is glibc's `clone` as its debug symbols name it, the
/// outermost frame of a thread started by `clone()` itself.
pub const ROOT_FUNCTIONS: [&str; 9] = [
    "_start",
    "__libc_start_main",
    "__libc_start_call_main",
    "start_thread",
    "clone3",
    "__clone3",
    "clone",
    "__clone",
    "__GI___clone",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: RowKind, cfa_offset: i32, rbp: RbpRule, rbp_offset: i16) -> UnwindRow {
        UnwindRow {
            pc: 0x1234_5678,
            cfa_offset,
            rbp_offset,
            kind,
            rbp,
        }
    }

    #[test]
    fn rows_pack_and_unpack_to_themselves_at_the_edges() {
        for row in [
            row(RowKind::CfaRsp, 8, RbpRule::Unchanged, 0),
            row(RowKind::CfaRsp, 16, RbpRule::AtCfa, -16),
            row(RowKind::CfaRbp, -(1 << 18), RbpRule::AtCfa, -1024),
            row(RowKind::CfaRbpDeref, (1 << 18) - 1, RbpRule::AtRbp, 1016),
            row(RowKind::Plt, 24, RbpRule::AtRbp, 0),
            row(RowKind::Signal, 0, RbpRule::Unsupported, 0),
            row(RowKind::End, 0, RbpRule::Unchanged, 0),
        ] {
            assert!(row.packable(), "{row:?}");
            assert_eq!(row.packed().unpacked(), row);
        }
    }

    #[test]
    fn rows_that_do_not_fit_pack_as_unsupported() {
        for row in [
            row(RowKind::CfaRsp, 1 << 18, RbpRule::Unchanged, 0),
            row(RowKind::CfaRsp, -(1 << 18) - 1, RbpRule::Unchanged, 0),
            row(RowKind::CfaRsp, 16, RbpRule::AtCfa, -1032),
            row(RowKind::CfaRsp, 16, RbpRule::AtCfa, 1024),
            row(RowKind::CfaRsp, 16, RbpRule::AtRbp, -12),
        ] {
            assert!(!row.packable(), "{row:?}");
            let unpacked = row.packed().unpacked();
            assert_eq!((unpacked.pc, unpacked.kind), (row.pc, RowKind::Unsupported));
        }
    }
}
