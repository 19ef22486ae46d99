//! Compiled unwind tables as the BPF unwinder reads them, and why it stops.

use num_enum::TryFromPrimitive;

/// How a row finds the CFA (the caller's stack pointer before its call).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
/// return address is always at *(CFA - 8).
#[repr(C)]
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

/// A table's rows are indexed by pages of `1 << UNWIND_PAGE_SHIFT` bytes of
/// `pc`, so that a lookup searches one page's rows, not the whole file's.
pub const UNWIND_PAGE_SHIFT: u32 = 12;

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

/// Most executable mappings of one process the unwinder knows.
pub const MAX_MAPPINGS: usize = 256;

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
}

/// A process's executable mappings, sorted by start.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProcessMappings {
    /// Mappings in use.
    pub count: u32,
    /// Keeps `mappings` 8-byte aligned, as in C.
    pub padding: u32,
    /// The mappings, `count` of them first.
    pub mappings: [Mapping; MAX_MAPPINGS],
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
pub const ROOT_FUNCTIONS: [&str; 8] = [
    "_start",
    "__libc_start_main",
    "__libc_start_call_main",
    "start_thread",
    "clone3",
    "__clone3",
    "clone",
    "__clone",
];
