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
    cell::{Cell, RefCell},
    collections::BTreeMap,
    ffi::c_void,
    ptr,
    sync::{
        atomic::{AtomicBool, Ordering},
        RwLock, RwLockReadGuard,
    },
};

use profiler_common::jvm::JavaFrame;

use crate::inlining;

/// Most memory the tables take; methods compiled beyond it are not kept.
pub const MAX_BYTES: usize = 64 << 20;

/// Whether methods are kept now.
static KEEPING: AtomicBool = AtomicBool::new(false);
static TABLE: RwLock<Table> = RwLock::new(Table {
    generation: 1,
    bytes: 0,
    methods: BTreeMap::new(),
});

thread_local! {
    /// Set on the worker while it replays the JIT's events for the table
    /// only: the code map stoke reads has them already.
    static REPLAYING: Cell<bool> = const { Cell::new(false) };
}

/// The frames at each call of each compiled method kept, by its code's
/// start.
pub struct Table {
    /// Changed whenever a method's frames are freed, which makes the
    /// threads' [`RECENT`] calls stale.
    generation: u64,
    bytes: usize,
    methods: BTreeMap<u64, Method>,
}

/// One compiled method's calls.
struct Method {
    /// Where its code ends.
    end: u64,
    /// The PCs with frames, ascending: the offset from the code's start,
    /// and where its frames are in `frames` (first and count).
    calls: Box<[Call]>,
    frames: Box<[JavaFrame]>,
}

#[derive(Clone, Copy)]
struct Call {
    offset: u32,
    first: u32,
    count: u32,
}

impl Method {
    fn bytes(&self) -> usize {
        size_of::<Self>()
            + self.calls.len() * size_of::<Call>()
            + self.frames.len() * size_of::<JavaFrame>()
    }
}

impl Table {
    /// The Java frames at `pc`, a return address in compiled code,
    /// innermost first; `None` if no kept method has frames there. Asked
    /// of this thread's recent calls first: an event's stack mostly shares
    /// its compiled frames with the thread's previous events, and each
    /// lookup in the table takes several cache misses.
    pub fn frames_at(&self, pc: u64) -> Option<&[JavaFrame]> {
        let index = (pc ^ (pc >> 9)) as usize % RECENT_CALLS;
        let recent = RECENT
            .try_with(|recent| recent.borrow()[index])
            .ok()
            .filter(|recent| recent.pc == pc && recent.generation == self.generation);
        if let Some(recent) = recent {
            // SAFETY: the frames of a method still kept: none was freed
            // since (the generation is the same), and none can be while
            // `self` is borrowed.
            return Some(unsafe { std::slice::from_raw_parts(recent.frames, recent.count) });
        }
        let frames = self.look_up(pc)?;
        let _ = RECENT.try_with(|recent| {
            recent.borrow_mut()[index] = Recent {
                pc,
                generation: self.generation,
                frames: frames.as_ptr(),
                count: frames.len(),
            }
        });
        Some(frames)
    }

    fn look_up(&self, pc: u64) -> Option<&[JavaFrame]> {
        let (&start, method) = self.methods.range(..=pc).next_back()?;
        if pc >= method.end {
            return None;
        }
        let offset = u32::try_from(pc - start).ok()?;
        let index = method
            .calls
            .binary_search_by_key(&offset, |call| call.offset)
            .ok()?;
        let call = method.calls[index];
        let first = call.first as usize;
        method.frames.get(first..first + call.count as usize)
    }

    /// Drops `start`'s method, if kept.
    fn forget(&mut self, start: u64) {
        if let Some(old) = self.methods.remove(&start) {
            self.bytes -= old.bytes();
            self.generation += 1;
        }
    }
}

/// Calls a thread looked up last, by PC.
const RECENT_CALLS: usize = 128;

#[derive(Clone, Copy)]
struct Recent {
    pc: u64,
    generation: u64,
    frames: *const JavaFrame,
    count: usize,
}

thread_local! {
    static RECENT: RefCell<[Recent; RECENT_CALLS]> = const {
        RefCell::new(
            [Recent {
                pc: 0,
                generation: 0,
                frames: ptr::null(),
                count: 0,
            }; RECENT_CALLS],
        )
    };
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
        table.methods = BTreeMap::new();
        table.bytes = 0;
        table.generation += 1;
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
    let mut calls = Vec::new();
    let mut frames = Vec::new();
    // SAFETY: as the caller promises.
    unsafe {
        inlining::for_each_pc(compile_info, |pc, methods, bcis| {
            let Some(offset) = pc.checked_sub(start).filter(|_| pc < end) else {
                return;
            };
            // [start, pc) is the method's code, as the caller promises.
            if !follows_call(start, pc) {
                return;
            }
            calls.push(Call {
                offset: offset as u32,
                first: frames.len() as u32,
                count: methods.len() as u32,
            });
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
    calls.sort_unstable_by_key(|call| call.offset);
    let method = Method {
        end,
        calls: calls.into(),
        frames: frames.into(),
    };
    let mut table = TABLE
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !KEEPING.load(Ordering::Acquire) || table.bytes + method.bytes() > MAX_BYTES {
        return;
    }
    table.forget(start);
    table.bytes += method.bytes();
    table.methods.insert(start, method);
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

    fn method(end: u64, calls: &[(u32, &[(u64, i32)])]) -> Method {
        let mut frames = Vec::new();
        let calls = calls
            .iter()
            .map(|&(offset, at)| {
                let call = Call {
                    offset,
                    first: frames.len() as u32,
                    count: at.len() as u32,
                };
                frames.extend(at.iter().map(|&(id, bci)| JavaFrame::new(id, bci)));
                call
            })
            .collect::<Vec<_>>();
        Method {
            end,
            calls: calls.into(),
            frames: frames.into(),
        }
    }

    #[test]
    fn a_return_address_names_the_frames_of_its_call_only() {
        let mut methods = BTreeMap::new();
        methods.insert(
            0x1000,
            method(0x1100, &[(0x10, &[(7, 3), (8, 12)]), (0x40, &[(8, 20)])]),
        );
        methods.insert(0x2000, method(0x2080, &[(0x8, &[(9, 1)])]));
        let mut table = Table {
            generation: 1,
            bytes: 0,
            methods,
        };
        let ids = |table: &Table, pc| {
            table.frames_at(pc).map(|frames| {
                frames
                    .iter()
                    .map(|f| (f.method_id, f.bci))
                    .collect::<Vec<_>>()
            })
        };
        // Twice each: looked up, then from the thread's recent calls.
        for _ in 0..2 {
            assert_eq!(ids(&table, 0x1010), Some(vec![(7, 3), (8, 12)]));
            assert_eq!(ids(&table, 0x1040), Some(vec![(8, 20)]));
            assert_eq!(ids(&table, 0x2008), Some(vec![(9, 1)]));
            // Between calls, past a method's end, before any method.
            assert_eq!(ids(&table, 0x1020), None);
            assert_eq!(ids(&table, 0x1100), None);
            assert_eq!(ids(&table, 0x0fff), None);
        }
        // A method forgotten is not named from the recent calls either.
        table.forget(0x1000);
        assert_eq!(ids(&table, 0x1010), None);
        assert_eq!(ids(&table, 0x2008), Some(vec![(9, 1)]));
    }
}
