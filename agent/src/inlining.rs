//! The inlining records HotSpot passes with CompiledMethodLoad, turned into
//! the calls the JIT inlined ([`InlineEdge`]s), so that stoke can tell an
//! inlined frame (`_[i]`) from a frame of its own.

use std::ffi::c_void;

use profiler_common::jvm::InlineEdge;

use crate::jvmti_sys::{jint, jmethodID};

/// `jvmticmlr.h`'s record kinds; only the inlining record is read.
const JVMTI_CMLR_INLINE_INFO: u32 = 2;
/// The record version this reader knows (`jvmticmlr.h`, 1.0 since JDK 6).
const JVMTI_CMLR_MAJOR_VERSION: jint = 1;
/// Records followed at most: HotSpot sends one, and a loop must end.
const MAX_RECORDS: usize = 16;
/// Frames of one PC looked at at most: deeper inlining is cut there.
const MAX_DEPTH: usize = 256;

/// `jvmtiCompiledMethodLoadRecordHeader` of `jvmticmlr.h`, which the
/// bindgen bindings of `jvmti.h` do not include.
#[repr(C)]
struct RecordHeader {
    kind: u32,
    major_version: jint,
    _minor_version: jint,
    next: *const RecordHeader,
}

/// `PCStackInfo`: the methods and bytecode indices at one PC of compiled
/// code, innermost first.
#[repr(C)]
struct PcStackInfo {
    _pc: *const c_void,
    frame_count: jint,
    methods: *const jmethodID,
    bcis: *const jint,
}

/// `jvmtiCompiledMethodLoadInlineRecord`.
#[repr(C)]
struct InlineRecord {
    header: RecordHeader,
    pc_count: jint,
    pcs: *const PcStackInfo,
}

/// The distinct calls inlined into a compiled method, from the
/// `compile_info` of its CompiledMethodLoad event (null or other record
/// kinds give none).
///
/// # Safety
/// `compile_info` is what the JVM passed to CompiledMethodLoad, valid for
/// the callback's duration.
pub unsafe fn inline_edges(compile_info: *const c_void) -> Vec<InlineEdge> {
    let mut edges = Vec::new();
    let mut record = compile_info.cast::<RecordHeader>();
    for _ in 0..MAX_RECORDS {
        // SAFETY: a record header the JVM built, or null.
        let Some(header) = (unsafe { record.as_ref() }) else {
            break;
        };
        if header.kind == JVMTI_CMLR_INLINE_INFO && header.major_version == JVMTI_CMLR_MAJOR_VERSION
        {
            // SAFETY: the kind says this header starts an inline record.
            let inline = unsafe { &*record.cast::<InlineRecord>() };
            // SAFETY: the record's array of `pc_count` entries.
            for pc in unsafe { array(inline.pcs, inline.pc_count) } {
                // SAFETY: each PC's arrays of `frame_count` entries.
                let (methods, bcis) = unsafe {
                    (
                        array(pc.methods, pc.frame_count),
                        array(pc.bcis, pc.frame_count),
                    )
                };
                let depth = methods.len().min(MAX_DEPTH);
                for callee in 0..depth.saturating_sub(1) {
                    edges.push(InlineEdge {
                        caller: methods[callee + 1] as u64,
                        caller_bci: bcis[callee + 1],
                        callee: methods[callee] as u64,
                    });
                }
            }
        }
        record = header.next;
    }
    edges.sort_unstable();
    edges.dedup();
    edges
}

/// # Safety
/// `items` points to `count` initialized values, or is null.
unsafe fn array<'a, T>(items: *const T, count: jint) -> &'a [T] {
    match usize::try_from(count) {
        // SAFETY: as the caller promises.
        Ok(count) if count > 0 && !items.is_null() => unsafe {
            std::slice::from_raw_parts(items, count)
        },
        _ => &[],
    }
}
