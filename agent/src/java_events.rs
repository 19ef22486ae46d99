//! The JVMTI callbacks that record Java events into the ring stoke reads
//! (`profiler_common::java_events`): sampled allocations and contended
//! monitors, with the calling thread's Java stack and the class of the
//! object allocated or locked. They run on the allocating or contending
//! Java thread: they take no lock, allocate nothing, and drop the event
//! when the ring is full. Which of them record is [`crate::event_control`]'s
//! decision, as stoke asks.

use std::{
    cell::Cell,
    mem::MaybeUninit,
    ptr::{self, addr_of_mut},
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
};

use profiler_common::{
    java_events::{
        JavaEventKind, JavaEventSlot, MAX_CLASS_NAME, MAX_EVENT_FRAMES, WANT_ALLOC, WANT_LOCK,
    },
    jvm::JavaFrame,
};

use crate::{
    event_stack::{self, Source},
    guarded,
    handler::monotonic_ns,
    jvmti_sys::{jclass, jlong, jobject, jthread, jvmtiEnv, JNIEnv},
    shared, JVMTI,
};

/// The Java events recorded now (`WANT_*` bits).
pub static RECORDING: AtomicU32 = AtomicU32::new(0);
/// The shortest monitor wait recorded, in nanoseconds.
pub static LOCK_THRESHOLD_NS: AtomicU64 = AtomicU64::new(u64::MAX);
/// When monitor events were last switched on: a wait that began before
/// (its Enter unseen) has no known start.
pub static MONITORS_ON_SINCE_NS: AtomicU64 = AtomicU64::new(u64::MAX);

thread_local! {
    /// When this thread began waiting for a contended monitor; 0 when not.
    /// A const-initialized `Cell` of an integer: no allocation, no
    /// destructor to register on the JVM's threads.
    static WAITING_SINCE_NS: Cell<u64> = const { Cell::new(0) };
    /// This thread's id, once asked ([`own_tid`]).
    static OWN_TID: Cell<u32> = const { Cell::new(0) };
}

/// JVMTI SampledObjectAlloc: the allocating thread allocated `size` bytes
/// of `class`, and HotSpot's sampler picked it.
pub unsafe extern "C" fn on_sampled_object_alloc(
    _: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    _: jthread,
    _: jobject,
    class: jclass,
    size: jlong,
) {
    guarded(|| {
        let Some(shared) = shared() else { return };
        shared
            .header()
            .alloc_samples
            .fetch_add(1, Ordering::Relaxed);
        if RECORDING.load(Ordering::Relaxed) & WANT_ALLOC != 0 {
            let size = u64::try_from(size).unwrap_or(0);
            // SAFETY: jni is this thread's; class the callback's reference.
            unsafe { record(jni, JavaEventKind::Alloc, size, class) };
        }
    });
}

/// JVMTI MonitorContendedEnter: this thread starts waiting for a monitor.
pub unsafe extern "C" fn on_monitor_contended_enter(
    _: *mut jvmtiEnv,
    _: *mut JNIEnv,
    _: jthread,
    _: jobject,
) {
    guarded(|| {
        let _ = WAITING_SINCE_NS.try_with(|since| since.set(monotonic_ns()));
    });
}

/// JVMTI MonitorContendedEntered: this thread got the monitor; a wait
/// of at least the threshold is recorded, with the monitor's class.
pub unsafe extern "C" fn on_monitor_contended_entered(
    _: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    _: jthread,
    object: jobject,
) {
    guarded(|| {
        let Ok(since) = WAITING_SINCE_NS.try_with(|since| since.replace(0)) else {
            return;
        };
        let waited = monotonic_ns().saturating_sub(since);
        if since == 0
            || since < MONITORS_ON_SINCE_NS.load(Ordering::Relaxed)
            || waited < LOCK_THRESHOLD_NS.load(Ordering::Relaxed)
            || RECORDING.load(Ordering::Relaxed) & WANT_LOCK == 0
        {
            return;
        }
        // SAFETY: jni is this thread's; object the callback's live
        // reference; the class reference is deleted after use.
        unsafe {
            let Some(get_class) = (**jni).GetObjectClass else {
                return;
            };
            let class = get_class(jni, object);
            if class.is_null() {
                return;
            }
            record(jni, JavaEventKind::Monitor, waited, class);
            crate::delete_local_ref(jni, class);
        }
    });
}

/// Takes the calling thread's stack and `class`'s signature, then writes
/// them into a slot of the ring (claimed last, so that it is held for a
/// copy only).
///
/// # Safety
/// `jni` is the calling thread's JNIEnv, in a JVMTI callback; `class` a
/// live reference of it.
unsafe fn record(jni: *mut JNIEnv, kind: JavaEventKind, value: u64, class: jclass) {
    let (Some(shared), Some(&jvmti)) = (shared(), JVMTI.get()) else {
        return;
    };
    let mut stack = [const { MaybeUninit::uninit() }; MAX_EVENT_FRAMES];
    let (frame_count, source) = event_stack::take(jvmti, jni, &mut stack);
    if source == Source::Walked {
        shared
            .header()
            .java_events_walked
            .fetch_add(1, Ordering::Relaxed);
    }
    let mut name = [0u8; MAX_CLASS_NAME];
    // SAFETY: class is a live reference of this thread.
    let class_len = unsafe { jvmti.class_signature(class, &mut name) };
    let Some(claim) = shared.claim::<JavaEventSlot>() else {
        return;
    };
    let slot = claim.slot;
    // SAFETY: the claimed slot is ours until committed; counts bounded;
    // the first `frame_count` frames of `stack` are written.
    unsafe {
        addr_of_mut!((*slot).kind).write(kind as u32);
        addr_of_mut!((*slot).tid).write(own_tid());
        addr_of_mut!((*slot).value).write(value);
        addr_of_mut!((*slot).time_ns).write(monotonic_ns());
        addr_of_mut!((*slot).frame_count).write(frame_count as u32);
        addr_of_mut!((*slot).class_len).write(class_len as u32);
        ptr::copy_nonoverlapping(
            name.as_ptr(),
            addr_of_mut!((*slot).class).cast::<u8>(),
            class_len,
        );
        ptr::copy_nonoverlapping(
            stack.as_ptr().cast::<JavaFrame>(),
            addr_of_mut!((*slot).frames).cast::<JavaFrame>(),
            frame_count,
        );
    }
    shared.commit(claim);
}

/// The calling thread's id, asked of the kernel once per thread (a
/// system call each event otherwise); 0 if its thread-local is gone.
fn own_tid() -> u32 {
    OWN_TID
        .try_with(|tid| {
            if tid.get() == 0 {
                // SAFETY: gettid has no preconditions.
                tid.set(unsafe { libc::gettid() } as u32);
            }
            tid.get()
        })
        .unwrap_or(0)
}
