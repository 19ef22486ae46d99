//! Java stacks of threads in the JVM runtime whose last Java frame is not
//! walkable yet.
//!
//! A thread that calls from Java code into the JVM records its last Java
//! frame in its frame anchor, the stack pointer first and the pc only when
//! the JVM needs to walk the stack (HotSpot's `make_walkable`). Until then
//! AsyncGetCallTrace finds no frame to start from (`ticks_unknown_not_Java`)
//! and the sample has no Java frames: on a warm JVM these are most of the
//! samples that lack them, threads in allocation slow paths and other
//! runtime calls of compiled code.
//!
//! The handler then completes the anchor for the length of one
//! AsyncGetCallTrace call and puts it back as it was, word for word:
//! - as `make_walkable` would: the pc is the return address below the
//!   anchor's stack pointer (the call into the JVM). Enough for the
//!   interpreter's and most stubs' calls;
//! - from the Java caller of C2's runtime stubs (`OptoRuntime`), which
//!   AsyncGetCallTrace refuses to walk from (they are marked never safe):
//!   such a stub saved RBP where the anchor's stack pointer points and was
//!   called from the word above it, so the anchor is pointed at the
//!   caller's frame.
//!
//! Each pc is taken only if it points into the JVM's generated code. The
//! anchor is the interrupted thread's own and the handler runs on that
//! thread; no other thread reads it while the thread is in the JVM (a
//! safepoint waits for it instead), so the JVM never sees the change.
//! async-profiler goes further and patches the stubs' frame descriptions in
//! the JVM; stoke changes nothing that outlives the handler.

use std::{ffi::c_void, ptr, sync::OnceLock};

use crate::{handler, jvmti_sys::JNIEnv, vm_structs};

/// Where a thread's state and frame anchor are in its thread object, and
/// the anchor's fields.
struct Layout {
    /// The JNIEnv's offset in the thread object (HotSpot embeds it there).
    env: usize,
    /// The thread's state (`JavaThreadState`).
    state: usize,
    anchor: usize,
    sp: usize,
    pc: usize,
    fp: usize,
}

static LAYOUT: OnceLock<Layout> = OnceLock::new();

/// HotSpot's `_thread_in_vm`, `_thread_in_vm_trans` and `_thread_in_Java`
/// (`JavaThreadState`, the same values in every JDK since 8).
const THREAD_IN_VM: u32 = 6;
const THREAD_IN_VM_TRANS: u32 = 7;
const THREAD_IN_JAVA: u32 = 8;

/// The farthest the JNIEnv is looked for from the start of its thread
/// object (688 bytes in JDK 17).
const MAX_ENV_OFFSET: usize = 16 << 10;

/// Learns the anchor's place from the JVM's structure table and the
/// calling Java thread, whose JNIEnv is `env`. Leaves anchors alone if any
/// of it is not found.
///
/// # Safety
/// `env` is the calling thread's JNIEnv.
pub unsafe fn learn(env: *mut JNIEnv) {
    let Some(layout) = layout_of(env) else { return };
    let _ = LAYOUT.set(layout);
}

unsafe fn layout_of(env: *mut JNIEnv) -> Option<Layout> {
    let [anchor, state, sp, pc, fp, thread_id, osthread] = vm_structs::field_offsets([
        (&["JavaThread"], "_anchor"),
        (&["JavaThread"], "_thread_state"),
        (&["JavaFrameAnchor"], "_last_Java_sp"),
        (&["JavaFrameAnchor"], "_last_Java_pc"),
        (&["JavaFrameAnchor"], "_last_Java_fp"),
        (&["OSThread"], "_thread_id"),
        (&["JavaThread", "Thread"], "_osthread"),
    ])?;
    // The JNIEnv is a field of the thread object whose name the table does
    // not give in every JDK: the thread is where, that far below the env,
    // an OSThread names this very thread.
    let tid = libc::gettid();
    let env = env as usize;
    let env_offset = (8..MAX_ENV_OFFSET).step_by(8).find(|&offset| {
        let Some(thread) = env.checked_sub(offset) else {
            return false;
        };
        handler::read_word((thread + osthread) as u64)
            .and_then(|os_thread| {
                handler::read_bytes::<4>(os_thread.checked_add(thread_id as u64)?)
            })
            .is_some_and(|id| i32::from_ne_bytes(id) == tid)
    })?;
    Some(Layout {
        env: env_offset,
        state,
        anchor,
        sp,
        pc,
        fp,
    })
}

/// A frame anchor's fields, as offsets from its start.
#[derive(Clone, Copy)]
pub struct AnchorFields {
    pub sp: usize,
    pub pc: usize,
    pub fp: usize,
}

/// Where the anchor of the thread whose JNIEnv is `env` is, and its
/// fields; `None` until learnt.
pub fn anchor_of(env: *mut JNIEnv) -> Option<(usize, AnchorFields)> {
    let layout = LAYOUT.get()?;
    let thread = (env as usize).checked_sub(layout.env)?;
    let fields = AnchorFields {
        sp: layout.sp,
        pc: layout.pc,
        fp: layout.fp,
    };
    Some((thread + layout.anchor, fields))
}

/// When the thread whose JNIEnv is `env` is in the JVM with an anchor that
/// is not walkable, runs `walk` (AsyncGetCallTrace) with the anchor
/// completed in turn as the module says; the first positive frame count.
///
/// # Safety
/// `env` is the calling thread's JNIEnv; called from its signal handler.
pub unsafe fn walk_completed(env: *mut c_void, mut walk: impl FnMut() -> i32) -> Option<i32> {
    let layout = LAYOUT.get()?;
    // In the JVM, on the way back from it to Java code (the state a
    // runtime call leaves the JVM in: on JDK 17.0.21 a sample often lands
    // just after the memory fence that publishes it, 6% of an
    // allocation-bound thread's samples), or in Java code: states where no
    // other thread walks its stack (a safepoint or handshake waits for
    // it). A thread blocked or in native code may be walked by others, and
    // has its anchor complete anyway.
    let thread = (env as usize).checked_sub(layout.env)?;
    let state = ptr::read_volatile(ptr::with_exposed_provenance::<u32>(thread + layout.state));
    if ![THREAD_IN_VM, THREAD_IN_VM_TRANS, THREAD_IN_JAVA].contains(&state) {
        return None;
    }
    let anchor = thread + layout.anchor;
    let field = |offset: usize| ptr::with_exposed_provenance_mut::<u64>(anchor + offset);
    let (sp_field, pc_field, fp_field) = (field(layout.sp), field(layout.pc), field(layout.fp));
    let saved = (
        ptr::read_volatile(sp_field),
        ptr::read_volatile(pc_field),
        ptr::read_volatile(fp_field),
    );
    let (sp, pc, fp) = saved;
    if sp == 0 || pc != 0 || !sp.is_multiple_of(8) {
        return None;
    }
    // The thread's own stack, read through calls that fail rather than
    // fault should the anchor hold anything else.
    let into_jvm = handler::read_word(sp.checked_sub(8)?).filter(|&pc| handler::in_code(pc))?;
    let mut walk_from = |(sp, pc, fp): (u64, u64, u64)| {
        ptr::write_volatile(fp_field, fp);
        ptr::write_volatile(sp_field, sp);
        ptr::write_volatile(pc_field, pc);
        Some(walk()).filter(|&walked| walked > 0)
    };
    // The stub's caller is read only when the JVM's own way finds nothing.
    let count = walk_from((sp, into_jvm, fp)).or_else(|| {
        let words = handler::read_bytes::<16>(sp)?;
        let saved_rbp = u64::from_ne_bytes(words[..8].try_into().ok()?);
        let return_address = u64::from_ne_bytes(words[8..].try_into().ok()?);
        handler::in_code(return_address).then_some(())?;
        walk_from((sp + 16, return_address, saved_rbp))
    });
    // Not walkable again first, as it was.
    ptr::write_volatile(pc_field, saved.1);
    ptr::write_volatile(sp_field, saved.0);
    ptr::write_volatile(fp_field, saved.2);
    count
}
