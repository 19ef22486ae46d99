//! The Java stack of a Java event: walked from HotSpot's structures
//! ([`crate::stack_walk`]) once that walk has matched JVMTI's
//! GetStackTrace frame for frame on this JVM's first events, else (and
//! where a walk gives up) GetStackTrace's.
//!
//! The check guards what no test can cover: a JDK build whose frames or
//! structures differ from those the walk knows. One event whose walk
//! differs turns the walk off for the JVM's life.

use std::{
    mem::MaybeUninit,
    sync::atomic::{AtomicI32, Ordering},
};

use profiler_common::{java_events::MAX_EVENT_FRAMES, jvm::JavaFrame};

use crate::{
    compiled_frames, jvmti::Jvmti, jvmti_events::java_frame, jvmti_sys::JNIEnv, stack_walk,
};

/// Walks that must match GetStackTrace before walks alone are trusted.
const CHECKS: i32 = 64;
/// Walks that matched so far; [`DISAGREED`] once one did not.
static MATCHED: AtomicI32 = AtomicI32::new(0);
const DISAGREED: i32 = -1;

/// How an event's stack was taken.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Walked,
    Jvmti,
}

/// The calling thread's Java stack, innermost first, into `out`: the
/// frames written and how they were taken.
///
/// # Safety
/// `env` is the calling Java thread's JNIEnv, in a JVMTI callback.
pub unsafe fn take(
    jvmti: Jvmti,
    env: *mut JNIEnv,
    out: &mut [MaybeUninit<JavaFrame>; MAX_EVENT_FRAMES],
) -> (usize, Source) {
    let matched = MATCHED.load(Ordering::Relaxed);
    if matched >= CHECKS {
        if let Some(count) = walk(env, out) {
            return (count, Source::Walked);
        }
        return (from_jvmti(jvmti, out), Source::Jvmti);
    }
    let count = from_jvmti(jvmti, out);
    if matched != DISAGREED {
        let mut walked = [const { MaybeUninit::uninit() }; MAX_EVENT_FRAMES];
        if let Some(walked_count) = walk(env, &mut walked) {
            // SAFETY: both hold that many frames written.
            let same = walked_count == count
                && (0..count).all(|index| unsafe {
                    walked[index].assume_init_ref() == out[index].assume_init_ref()
                });
            let _ = MATCHED.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |matched| {
                (matched != DISAGREED).then_some(if same { matched + 1 } else { DISAGREED })
            });
        }
    }
    (count, Source::Jvmti)
}

/// # Safety
/// As [`take`].
unsafe fn walk(
    env: *mut JNIEnv,
    out: &mut [MaybeUninit<JavaFrame>; MAX_EVENT_FRAMES],
) -> Option<usize> {
    let compiled = compiled_frames::table();
    stack_walk::walk(env, &compiled, out)
}

fn from_jvmti(jvmti: Jvmti, out: &mut [MaybeUninit<JavaFrame>; MAX_EVENT_FRAMES]) -> usize {
    // Not zeroed first: 2 KiB an event, of which JVMTI fills a few frames.
    let mut stack = [const { MaybeUninit::uninit() }; MAX_EVENT_FRAMES];
    let stack = jvmti.own_stack(&mut stack);
    for (slot, frame) in out.iter_mut().zip(stack) {
        slot.write(java_frame(frame));
    }
    stack.len()
}
