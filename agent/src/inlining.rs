//! The inlining records HotSpot passes with CompiledMethodLoad: the Java
//! frames at each PC of compiled code that has them ([`for_each_pc`]), and
//! the calls the JIT inlined ([`InlineEdge`]s), so that stoke can tell an
//! inlined frame (`_[i]`) from a frame of its own.

use std::ffi::c_void;

use profiler_common::jvm::InlineEdge;

use crate::jvmti_sys::{
    jint, jmethodID, jvmtiCMLRKind_JVMTI_CMLR_INLINE_INFO, jvmtiCompiledMethodLoadInlineRecord,
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
    // SAFETY: as the caller promises.
    unsafe {
        for_each_pc(compile_info, |_, methods, bcis| {
            for callee in 0..methods.len().saturating_sub(1) {
                edges.push(InlineEdge {
                    caller: methods[callee + 1] as u64,
                    caller_bci: bcis[callee + 1],
                    callee: methods[callee] as u64,
                });
            }
        })
    };
    edges.sort_unstable();
    edges.dedup();
    edges
}

/// Calls `visit(pc, methods, bcis)` for each PC of the `compile_info` of a
/// CompiledMethodLoad event that has scopes: the methods at that PC,
/// innermost first (the method inlined deepest, then its callers up to the
/// compiled method itself), and the bytecode index in each.
///
/// # Safety
/// `compile_info` is what the JVM passed to CompiledMethodLoad, valid for
/// the callback's duration.
pub unsafe fn for_each_pc(
    compile_info: *const c_void,
    mut visit: impl FnMut(u64, &[jmethodID], &[jint]),
) {
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
                let depth = methods.len().min(bcis.len()).min(MAX_DEPTH);
                if depth > 0 {
                    visit(pc.pc as u64, &methods[..depth], &bcis[..depth]);
                }
            }
        }
        record = header.next;
    }
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
