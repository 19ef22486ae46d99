//! The inlining records HotSpot passes with CompiledMethodLoad, turned into
//! the calls the JIT inlined ([`InlineEdge`]s), so that stoke can tell an
//! inlined frame (`_[i]`) from a frame of its own.

use std::ffi::c_void;

use profiler_common::jvm::InlineEdge;

use crate::jvmti_sys::{
    jint, jvmtiCMLRKind_JVMTI_CMLR_INLINE_INFO, jvmtiCompiledMethodLoadInlineRecord,
    jvmtiCompiledMethodLoadRecordHeader, JVMTI_CMLR_MAJOR_VERSION,
};

/// Records followed at most: HotSpot sends one, and a loop must end.
const MAX_RECORDS: usize = 16;
/// Frames of one PC looked at at most: deeper inlining is cut there.
const MAX_DEPTH: usize = 256;

/// The distinct calls inlined into a compiled method, from the
/// `compile_info` of its CompiledMethodLoad event (null or other record
/// kinds give none).
///
/// # Safety
/// `compile_info` is what the JVM passed to CompiledMethodLoad, valid for
/// the callback's duration.
pub unsafe fn inline_edges(compile_info: *const c_void) -> Vec<InlineEdge> {
    let mut edges = Vec::new();
    let mut record = compile_info.cast::<jvmtiCompiledMethodLoadRecordHeader>();
    for _ in 0..MAX_RECORDS {
        // SAFETY: a record header the JVM built, or null.
        let Some(header) = (unsafe { record.as_ref() }) else {
            break;
        };
        if header.kind == jvmtiCMLRKind_JVMTI_CMLR_INLINE_INFO
            && header.majorinfoversion == JVMTI_CMLR_MAJOR_VERSION as jint
        {
            // SAFETY: the kind says this header starts an inline record.
            let inline = unsafe { &*record.cast::<jvmtiCompiledMethodLoadInlineRecord>() };
            // SAFETY: the record's array of `numpcs` entries.
            for pc in unsafe { array(inline.pcinfo, inline.numpcs) } {
                // SAFETY: each PC's arrays of `numstackframes` entries.
                let (methods, bcis) = unsafe {
                    (
                        array(pc.methods, pc.numstackframes),
                        array(pc.bcis, pc.numstackframes),
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
