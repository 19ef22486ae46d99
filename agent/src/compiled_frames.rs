//! The Java frames at each call of the JIT's compiled methods, kept while
//! Java events are recorded, so that [`crate::stack_walk`] can name a
//! compiled frame of an event's stack from its return address alone.
//!
//! A compiled frame is one physical frame for several Java frames: the
//! methods the JIT inlined into each other at that call. HotSpot decodes
//! them from scope data whose place it does not publish in every JDK;
//! CompiledMethodLoad hands the same frames to agents (its inlining
//! record: per PC, the methods and bytecode indexes, innermost first), so
//! the agent keeps them per method, from the JIT's events and a replay of
//! the code compiled before.
//!
//! Only while events are recorded ([`keep`]), and bounded by
//! [`MAX_BYTES`]: a method not kept leaves its events to JVMTI's
//! GetStackTrace.

use std::{
    cell::Cell,
    collections::HashMap,
    ffi::c_void,
    ptr::{self, NonNull},
    sync::{
        atomic::{AtomicBool, Ordering},
        RwLock, RwLockReadGuard,
    },
};

use foldhash::fast::FixedState;
use profiler_common::jvm::JavaFrame;

use crate::inlining;

/// Most memory the tables take; methods compiled beyond it are not kept.
pub const MAX_BYTES: usize = 64 << 20;

/// Whether methods are kept now.
static KEEPING: AtomicBool = AtomicBool::new(false);
static TABLE: RwLock<Table> = RwLock::new(Table::new());

thread_local! {
    /// Set on the worker while it replays the JIT's events for the table
    /// only: the code map stoke reads has them already.
    static REPLAYING: Cell<bool> = const { Cell::new(false) };
}

/// Code addresses are not chosen by anyone who could aim at collisions: a
/// fast hash with a fixed seed.
type Map<V> = HashMap<u64, V, FixedState>;

/// The frames at each call of each compiled method kept.
pub struct Table {
    bytes: usize,
    /// Each method's frames, by its code's start.
    methods: Map<Method>,
    /// Each call's frames, by its return address: one probe per compiled
    /// frame of a stack (a search by code range, then by call, took
    /// several cache misses, two thirds of a deep stack's walk).
    calls: Map<CallFrames>,
}

/// One compiled method's calls.
struct Method {
    /// The return addresses of its calls, each a key of `Table::calls`.
    returns: Box<[u64]>,
    /// Its calls' frames, end to end.
    frames: Box<[JavaFrame]>,
}

/// One call's frames, in its method's `frames`.
#[derive(Clone, Copy)]
struct CallFrames {
    first: NonNull<JavaFrame>,
    count: usize,
}

// SAFETY: `first` points into a method's `frames`, which the table owns,
// never changes and frees only with the call's entry (`Table::forget`):
// the pointer is shared and sent as the table is.
unsafe impl Send for CallFrames {}
unsafe impl Sync for CallFrames {}

impl Method {
    fn bytes(&self) -> usize {
        size_of::<Self>()
            + self.returns.len() * (size_of::<u64>() * 2 + size_of::<CallFrames>())
            + self.frames.len() * size_of::<JavaFrame>()
    }
}

impl Table {
    const fn new() -> Self {
        Table {
            bytes: 0,
            methods: HashMap::with_hasher(FixedState::with_seed(0)),
            calls: HashMap::with_hasher(FixedState::with_seed(0)),
        }
    }

    /// The Java frames at `pc`, a return address in compiled code,
    /// innermost first; `None` if no kept method has frames there.
    pub fn frames_at(&self, pc: u64) -> Option<&[JavaFrame]> {
        let call = self.calls.get(&pc)?;
        // SAFETY: see `CallFrames`; the method outlives `&self`, as
        // methods are freed only through `&mut self`.
        Some(unsafe { std::slice::from_raw_parts(call.first.as_ptr(), call.count) })
    }

    /// Keeps the frames of the method whose code starts at `start`, in
    /// place of any method kept there before: each call's return address
    /// and frame count, in the order of their frames in `frames`. Keeps
    /// nothing past [`MAX_BYTES`].
    fn insert(&mut self, start: u64, calls: &[(u64, usize)], frames: Vec<JavaFrame>) {
        let method = Method {
            returns: calls.iter().map(|&(pc, _)| pc).collect(),
            frames: frames.into(),
        };
        if self.bytes + method.bytes() > MAX_BYTES {
            return;
        }
        self.forget(start);
        let mut first = 0;
        for &(pc, count) in calls {
            let frames = &method.frames[first..first + count];
            first += count;
            let frames = CallFrames {
                first: NonNull::from(frames).cast(),
                count,
            };
            // A return address is in one method only; a stale entry of
            // a method whose code was freed without its unload event is
            // replaced.
            self.calls.insert(pc, frames);
        }
        self.bytes += method.bytes();
        self.methods.insert(start, method);
    }

    /// Drops `start`'s method, if kept.
    fn forget(&mut self, start: u64) {
        if let Some(old) = self.methods.remove(&start) {
            for pc in &old.returns {
                self.calls.remove(pc);
            }
            self.bytes -= old.bytes();
        }
    }
}

/// The table, to read while walking a stack.
pub fn table() -> RwLockReadGuard<'static, Table> {
    TABLE
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts keeping methods (then `replay` the JIT's events of the code
/// compiled so far, which reach [`add`] on this thread), or stops and
/// frees the table.
pub fn keep(on: bool, replay: impl FnOnce()) {
    if on == KEEPING.swap(on, Ordering::AcqRel) {
        return;
    }
    if on {
        let _ = REPLAYING.try_with(|replaying| replaying.set(true));
        replay();
        let _ = REPLAYING.try_with(|replaying| replaying.set(false));
    } else {
        let mut table = TABLE
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *table = Table::new();
    }
}

/// Whether the calling thread replays events for the table only.
pub fn replaying() -> bool {
    REPLAYING.try_with(Cell::get).unwrap_or(false)
}

/// Keeps the frames of a method the JIT compiled to `[start, start +
/// size)`, from its CompiledMethodLoad `compile_info`.
///
/// # Safety
/// `[start, start + size)` and `compile_info` are what the JVM passed to
/// CompiledMethodLoad (the method's code and its records), valid for the
/// callback's duration.
pub unsafe fn add(start: u64, size: u64, compile_info: *const c_void) {
    if !KEEPING.load(Ordering::Acquire) {
        return;
    }
    let Some(end) = start.checked_add(size) else {
        return;
    };
    // Each call's return address and frame count, in the order of their
    // frames.
    let mut calls: Vec<(u64, usize)> = Vec::new();
    let mut frames = Vec::new();
    // SAFETY: as the caller promises.
    unsafe {
        inlining::for_each_pc(compile_info, |pc, methods, bcis| {
            // [start, pc) is the method's code, as the caller promises.
            if pc <= start || pc >= end || !follows_call(start, pc) {
                return;
            }
            calls.push((pc, methods.len()));
            frames.extend(
                methods
                    .iter()
                    .zip(bcis)
                    .map(|(&method, &bci)| JavaFrame::new(method as u64, bci)),
            );
        })
    };
    if calls.is_empty() {
        return;
    }
    let mut table = TABLE
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if KEEPING.load(Ordering::Acquire) {
        table.insert(start, &calls, frames);
    }
}

/// Whether the instruction before `pc` may be a call, which makes `pc` a
/// return address: `call rel32`, or `call` through a register (HotSpot's
/// calls from compiled code). The bytes before a PC do not decode one way
/// only: a PC taken for a return address in error costs a few bytes, one
/// missed leaves its events to GetStackTrace.
///
/// # Safety
/// `[start, pc)` is code of one compiled method, mapped.
unsafe fn follows_call(start: u64, pc: u64) -> bool {
    let byte = |back: u64| {
        (pc - start >= back)
            // SAFETY: inside the method's code, as the caller promises.
            .then(|| unsafe { ptr::with_exposed_provenance::<u8>((pc - back) as usize).read() })
    };
    let register_call = |modrm: Option<u8>| modrm.is_some_and(|modrm| modrm & 0xf8 == 0xd0);
    byte(5) == Some(0xe8)
        || (byte(2) == Some(0xff) && register_call(byte(1)))
        || (byte(3) == Some(0x41) && byte(2) == Some(0xff) && register_call(byte(1)))
}

/// Forgets the method whose code started at `start` (CompiledMethodUnload).
pub fn remove(start: u64) {
    if !KEEPING.load(Ordering::Acquire) {
        return;
    }
    let mut table = TABLE
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    table.forget(start);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A method whose calls return to the given PCs with the given frames.
    fn insert(table: &mut Table, start: u64, calls: &[(u64, &[(u64, i32)])]) {
        let frames = calls
            .iter()
            .flat_map(|(_, at)| at.iter().map(|&(id, bci)| JavaFrame::new(id, bci)))
            .collect();
        let counts: Vec<_> = calls.iter().map(|(pc, at)| (*pc, at.len())).collect();
        table.insert(start, &counts, frames);
    }

    fn ids(table: &Table, pc: u64) -> Option<Vec<(u64, i32)>> {
        table
            .frames_at(pc)
            .map(|frames| frames.iter().map(|f| (f.method_id, f.bci)).collect())
    }

    #[test]
    fn a_return_address_names_the_frames_of_its_call_only() {
        let mut table = Table::new();
        insert(
            &mut table,
            0x1000,
            &[(0x1010, &[(7, 3), (8, 12)]), (0x1040, &[(8, 20)])],
        );
        insert(&mut table, 0x2000, &[(0x2008, &[(9, 1)])]);
        assert_eq!(ids(&table, 0x1010), Some(vec![(7, 3), (8, 12)]));
        assert_eq!(ids(&table, 0x1040), Some(vec![(8, 20)]));
        assert_eq!(ids(&table, 0x2008), Some(vec![(9, 1)]));
        // Between calls, past a method's end, before any method.
        assert_eq!(ids(&table, 0x1020), None);
        assert_eq!(ids(&table, 0x1100), None);
        assert_eq!(ids(&table, 0x0fff), None);
        let bytes = table.bytes;

        // A method forgotten names nothing; one compiled again at the same
        // start replaces it, and the memory they take is counted once.
        table.forget(0x1000);
        assert_eq!(ids(&table, 0x1010), None);
        assert_eq!(ids(&table, 0x2008), Some(vec![(9, 1)]));
        insert(
            &mut table,
            0x1000,
            &[(0x1010, &[(7, 3), (8, 12)]), (0x1040, &[(8, 20)])],
        );
        insert(&mut table, 0x1000, &[(0x1020, &[(10, 5)])]);
        assert_eq!(ids(&table, 0x1010), None);
        assert_eq!(ids(&table, 0x1020), Some(vec![(10, 5)]));
        insert(
            &mut table,
            0x1000,
            &[(0x1010, &[(7, 3), (8, 12)]), (0x1040, &[(8, 20)])],
        );
        assert_eq!(table.bytes, bytes);
        assert_eq!(table.calls.len(), 3);
    }
}
