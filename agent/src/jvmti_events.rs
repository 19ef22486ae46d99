//! What the agent asks of JVMTI for Java allocation and lock events:
//! their capabilities, switching them on and off, and, inside their
//! callbacks, the calling thread's stack and a class's signature.

use std::{ffi::CStr, mem::MaybeUninit, ptr};

use profiler_common::{
    java_events::{MAX_CLASS_NAME, MAX_EVENT_FRAMES},
    jvm::{JavaFrame, BCI_NATIVE},
};

use crate::{
    jvmti::{call, check, Jvmti, JvmtiError},
    jvmti_sys::*,
};

/// The JVMTI events that make up one kind of Java event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventGroup {
    /// SampledObjectAlloc.
    Alloc,
    /// MonitorContendedEnter and MonitorContendedEntered.
    Monitor,
}

impl EventGroup {
    fn events(self) -> &'static [jvmtiEvent] {
        match self {
            Self::Alloc => &[jvmtiEvent_JVMTI_EVENT_SAMPLED_OBJECT_ALLOC],
            Self::Monitor => &[
                jvmtiEvent_JVMTI_EVENT_MONITOR_CONTENDED_ENTER,
                jvmtiEvent_JVMTI_EVENT_MONITOR_CONTENDED_ENTERED,
            ],
        }
    }
}

/// A frame as JVMTI gives it, as stoke reads it.
pub fn java_frame(info: &jvmtiFrameInfo) -> JavaFrame {
    // JVMTI says -1 for a native method's location.
    let bci = match i32::try_from(info.location) {
        Ok(bci) if bci >= 0 => bci,
        _ => BCI_NATIVE,
    };
    JavaFrame::new(info.method as u64, bci)
}

impl Jvmti {
    /// Asks for the capability `group` needs; false if this JVM refuses
    /// (SampledObjectAlloc exists from JDK 11). Asked for at the first
    /// recording that wants the events, never before: a JVM no such
    /// recording ever profiles keeps its capabilities as they were.
    pub fn add_event_capability(self, group: EventGroup) -> bool {
        // SAFETY: a zeroed capability set is empty.
        let mut capabilities: jvmtiCapabilities = unsafe { std::mem::zeroed() };
        match group {
            EventGroup::Alloc => capabilities.set_can_generate_sampled_object_alloc_events(1),
            EventGroup::Monitor => capabilities.set_can_generate_monitor_events(1),
        }
        // SAFETY: valid environment and capability set.
        check(unsafe { call!(self.0, AddCapabilities, &capabilities) }).is_ok()
    }

    /// Switches `group`'s events on or off for every thread.
    pub fn set_events(self, group: EventGroup, on: bool) -> Result<(), JvmtiError> {
        let mode = if on {
            jvmtiEventMode_JVMTI_ENABLE
        } else {
            jvmtiEventMode_JVMTI_DISABLE
        };
        for &event in group.events() {
            // SAFETY: valid environment; a null thread means every thread.
            check(unsafe {
                call!(
                    self.0,
                    SetEventNotificationMode,
                    mode,
                    event,
                    ptr::null_mut()
                )
            })?;
        }
        Ok(())
    }

    /// Sets the mean bytes between sampled allocations.
    pub fn set_heap_sampling_interval(self, bytes: u64) -> Result<(), JvmtiError> {
        let interval = jint::try_from(bytes).unwrap_or(jint::MAX);
        // SAFETY: valid environment.
        check(unsafe { call!(self.0, SetHeapSamplingInterval, interval) })
    }

    /// The calling thread's Java stack, innermost first, into `frames`
    /// (left uninitialized: JVMTI writes only the frames it has); the
    /// frames written.
    pub fn own_stack(
        self,
        frames: &mut [MaybeUninit<jvmtiFrameInfo>; MAX_EVENT_FRAMES],
    ) -> &[jvmtiFrameInfo] {
        let mut count: jint = 0;
        // SAFETY: valid environment; a null thread is the calling one; the
        // buffer holds MAX_EVENT_FRAMES frames.
        let asked = unsafe {
            call!(
                self.0,
                GetStackTrace,
                ptr::null_mut(),
                0,
                MAX_EVENT_FRAMES as jint,
                frames.as_mut_ptr().cast(),
                &mut count
            )
        };
        let count = if check(asked).is_ok() {
            usize::try_from(count).unwrap_or(0).min(MAX_EVENT_FRAMES)
        } else {
            0
        };
        // SAFETY: GetStackTrace wrote the first `count` frames.
        unsafe { std::slice::from_raw_parts(frames.as_ptr().cast(), count) }
    }

    /// A class's signature (`[B`, `Ljava/lang/String;`) into `out`, cut
    /// at [`MAX_CLASS_NAME`] bytes; the bytes written.
    ///
    /// # Safety
    /// `class` is a live reference of the calling thread.
    pub unsafe fn class_signature(self, class: jclass, out: &mut [u8; MAX_CLASS_NAME]) -> usize {
        let mut signature: *mut std::ffi::c_char = ptr::null_mut();
        let asked = call!(
            self.0,
            GetClassSignature,
            class,
            &mut signature,
            ptr::null_mut()
        );
        if check(asked).is_err() || signature.is_null() {
            return 0;
        }
        let bytes = CStr::from_ptr(signature).to_bytes();
        let used = bytes.len().min(MAX_CLASS_NAME);
        out[..used].copy_from_slice(&bytes[..used]);
        self.deallocate(signature.cast());
        used
    }
}
