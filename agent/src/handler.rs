//! The signal handler that takes a thread's Java stack with
//! AsyncGetCallTrace, and the check that it is still installed.
//!
//! Everything the handler does is async-signal-safe: atomics, `gettid`,
//! `clock_gettime`, `GetEnv` (a thread-local read in HotSpot) and
//! AsyncGetCallTrace, which exists to be called from signal handlers. It
//! allocates nothing and takes no lock.

use std::{
    ffi::{c_int, c_void},
    io, mem, ptr,
    sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering},
};

use profiler_common::jvm::{
    JavaFrame, SampleSlot, MAX_JAVA_FRAMES, NOT_A_JAVA_THREAD, SIGNAL, TOP_FRAME_POPPED,
};

use crate::{
    frame_anchor,
    jvmti_sys::{JNIEnv, JavaVM, JNI_OK, JNI_VERSION_1_6},
    partial_frame::partial_frame,
    shared::SharedMemory,
};

/// `ASGCT_CallTrace` from HotSpot's (unpublished) declaration.
#[repr(C)]
struct CallTrace {
    env: *mut JNIEnv,
    frame_count: i32,
    frames: *mut JavaFrame,
}

type AsyncGetCallTrace = unsafe extern "C" fn(*mut CallTrace, i32, *mut c_void);

static ASYNC_GET_CALL_TRACE: AtomicUsize = AtomicUsize::new(0);
static VM: AtomicPtr<JavaVM> = AtomicPtr::new(ptr::null_mut());
static SHARED: AtomicPtr<SharedMemory> = AtomicPtr::new(ptr::null_mut());
/// The span of the code the JVM generated so far (compiled methods, the
/// interpreter, stubs): HotSpot reserves one range for it, so this is
/// where a return address into Java code can point.
static CODE_LOW: AtomicU64 = AtomicU64::new(u64::MAX);
static CODE_HIGH: AtomicU64 = AtomicU64::new(0);

/// AsyncGetCallTrace's `ticks_unknown_not_Java`: the thread is in the JVM
/// or native code, and its last Java frame is not walkable.
const UNKNOWN_NOT_JAVA: i32 = -3;
/// AsyncGetCallTrace's `ticks_unknown_Java` and `ticks_not_walkable_Java`:
/// the thread is in Java code, but no walkable frame was found from the
/// interrupted one (often: it is not set up yet).
const UNKNOWN_JAVA: i32 = -5;
const NOT_WALKABLE_JAVA: i32 = -6;
/// The largest distance from the stack pointer at which RBP is taken for a
/// stub's frame pointer.
const MAX_STUB_FRAME: u64 = 64 << 10;

/// Notes code the JVM generated at `[start, start + size)`.
pub fn note_code(start: u64, size: u64) {
    CODE_LOW.fetch_min(start, Ordering::Relaxed);
    CODE_HIGH.fetch_max(start.saturating_add(size), Ordering::Relaxed);
}

pub(crate) fn in_code(address: u64) -> bool {
    (CODE_LOW.load(Ordering::Relaxed)..CODE_HIGH.load(Ordering::Relaxed)).contains(&address)
}

/// Finds AsyncGetCallTrace in the JVM; false if this JVM has none.
pub fn find_async_get_call_trace() -> bool {
    // SAFETY: dlsym with a NUL-terminated name.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"AsyncGetCallTrace".as_ptr()) };
    ASYNC_GET_CALL_TRACE.store(symbol as usize, Ordering::Release);
    !symbol.is_null()
}

/// Installs the handler. Refuses if the application already handles the
/// signal: taking it over would break the application.
pub fn install(vm: *mut JavaVM, shared: &'static SharedMemory) -> io::Result<()> {
    VM.store(vm, Ordering::Release);
    SHARED.store(ptr::from_ref(shared).cast_mut(), Ordering::Release);
    let previous = current_action()?;
    if previous.sa_sigaction != libc::SIG_DFL
        && previous.sa_sigaction != libc::SIG_IGN
        && previous.sa_sigaction != handler_address()
    {
        return Err(io::Error::other("the application handles SIGURG itself"));
    }
    // SAFETY: a zeroed sigaction is valid; fields set below.
    let mut action: libc::sigaction = unsafe { mem::zeroed() };
    action.sa_sigaction = handler_address();
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: installing a handler with a valid action.
    unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(SIGNAL, &action, ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `si_code` of a SIGTRAP sent by a perf event's `sigtrap`.
const TRAP_PERF: c_int = 6;
/// Where Linux keeps `si_perf_data` in a siginfo (after signo, errno, code
/// and padding, then `si_addr`).
const SI_PERF_DATA_OFFSET: usize = 24;

/// Installs the handler of SIGTRAP too, if the JVM has none (HotSpot on
/// x86-64 uses none): stoke may then sample the JVM's threads with perf
/// events of their own, whose SIGTRAP reaches the thread with no
/// inter-processor interrupt. Says so in the shared header.
pub fn install_trap(shared: &SharedMemory) {
    let Ok(previous) = current_action_of(libc::SIGTRAP) else {
        return;
    };
    if previous.sa_sigaction != libc::SIG_DFL {
        return;
    }
    // SAFETY: a zeroed sigaction is valid; fields set below.
    let mut action: libc::sigaction = unsafe { mem::zeroed() };
    action.sa_sigaction = on_trap as *const () as libc::sighandler_t;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: installing a handler with a valid action.
    let installed = unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTRAP, &action, ptr::null_mut()) == 0
    };
    if installed {
        shared
            .header()
            .trap_handler
            .store(on_trap as *const () as u64, Ordering::Release);
    }
}

/// Whether the SIGTRAP handler is still ours; if not, stoke is told to
/// stop its per-thread events.
pub fn check_trap(shared: &SharedMemory) {
    if !handler_is(libc::SIGTRAP, on_trap as *const () as libc::sighandler_t) {
        shared.header().trap_handler.store(0, Ordering::Release);
    }
}

extern "C" fn on_trap(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: errno is thread-local; the interrupted code must find it as
    // it left it.
    let errno = unsafe { *libc::__errno_location() };
    let shared = SHARED.load(Ordering::Acquire);
    // SAFETY: the kernel's siginfo for this signal.
    let (code, data) = unsafe {
        (
            (*info).si_code,
            ptr::read_unaligned(info.cast::<u8>().add(SI_PERF_DATA_OFFSET).cast::<u64>()),
        )
    };
    let cookie = if shared.is_null() {
        0
    } else {
        // SAFETY: set once, before the handler was installed, never freed.
        unsafe { &*shared }
            .header()
            .trap_cookie
            .load(Ordering::Acquire)
    };
    if code == TRAP_PERF && cookie != 0 && data == cookie {
        // SAFETY: as above.
        take_stack(unsafe { &*shared }, context);
    } else {
        // Not stoke's: what would have happened without the agent (the
        // default action, a core dump) happens.
        // SAFETY: restoring the default action and raising the signal.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
    // SAFETY: see above.
    unsafe { *libc::__errno_location() = errno };
}

/// Whether the handler is still the one installed for the signal.
pub fn is_installed() -> bool {
    handler_is(SIGNAL, handler_address())
}

/// Whether `signal`'s handler is `handler` now.
fn handler_is(signal: c_int, handler: libc::sighandler_t) -> bool {
    current_action_of(signal).is_ok_and(|action| action.sa_sigaction == handler)
}

fn handler_address() -> libc::sighandler_t {
    on_signal as *const () as libc::sighandler_t
}

fn current_action() -> io::Result<libc::sigaction> {
    current_action_of(SIGNAL)
}

fn current_action_of(signal: c_int) -> io::Result<libc::sigaction> {
    // SAFETY: querying, with a valid out-pointer.
    unsafe {
        let mut action: libc::sigaction = mem::zeroed();
        if libc::sigaction(signal, ptr::null(), &mut action) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(action)
    }
}

extern "C" fn on_signal(_signal: c_int, _info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: errno is thread-local; the interrupted code must find it as
    // it left it.
    let errno = unsafe { *libc::__errno_location() };
    let shared = SHARED.load(Ordering::Acquire);
    if !shared.is_null() {
        // SAFETY: set once, before the handler was installed, never freed.
        take_stack(unsafe { &*shared }, context);
    }
    // SAFETY: see above.
    unsafe { *libc::__errno_location() = errno };
}

fn take_stack(shared: &SharedMemory, context: *mut c_void) {
    let Some(claim) = shared.claim::<SampleSlot>() else {
        return;
    };
    let slot = claim.slot;
    // SAFETY: the claimed slot is ours until committed; context is the
    // kernel's ucontext for this signal.
    unsafe {
        (*slot).tid = libc::gettid() as u32;
        (*slot).time_ns = monotonic_ns();
        (*slot).pc = interrupted_pc(context);
        let frames = ptr::addr_of_mut!((*slot).frames).cast();
        let (count, flags) = match current_env() {
            Some(env) => java_stack_of(env, frames, context),
            None => (NOT_A_JAVA_THREAD, 0),
        };
        (*slot).frame_count = count;
        (*slot).flags = flags;
    }
    shared.commit(claim);
}

/// The Java stack of the thread whose JNIEnv is `env`, into `frames`: its
/// frame count or failure code, and the sample's flags. When
/// AsyncGetCallTrace cannot walk from where the thread is, walks from its
/// completed frame anchor, then from its caller.
///
/// # Safety
/// `frames` holds MAX_JAVA_FRAMES frames; `context` is a signal ucontext;
/// `env` is the calling thread's.
unsafe fn java_stack_of(
    env: *mut c_void,
    frames: *mut JavaFrame,
    context: *mut c_void,
) -> (i32, u32) {
    let mut count = java_stack(env, frames, context);
    // The anchor first: a thread in the JVM runtime, or just back from
    // it in the stub that called it (already in the Java state), is
    // found by it alone, and any other thread has none to complete.
    if count == UNKNOWN_NOT_JAVA || count == UNKNOWN_JAVA || count == NOT_WALKABLE_JAVA {
        let completed = frame_anchor::walk_completed(env, || java_stack(env, frames, context));
        count = completed.unwrap_or(count);
    }
    if count == UNKNOWN_JAVA || count == NOT_WALKABLE_JAVA {
        if let Some(from_caller) = java_stack_from_caller(env, frames, context) {
            return (from_caller, TOP_FRAME_POPPED);
        }
    }
    (count, 0)
}

/// The calling thread's JNIEnv; `None` for a thread the JVM does not know
/// (a GC or native thread).
fn current_env() -> Option<*mut c_void> {
    let vm = VM.load(Ordering::Acquire);
    if vm.is_null() {
        return None;
    }
    let mut env: *mut c_void = ptr::null_mut();
    // SAFETY: the JavaVM, which outlives the agent; GetEnv reads a
    // thread-local.
    let get_env = unsafe { (**vm).GetEnv? };
    let got = unsafe { get_env(vm, &mut env, JNI_VERSION_1_6 as i32) };
    (got == JNI_OK as i32 && !env.is_null()).then_some(env)
}

/// Runs AsyncGetCallTrace into `frames`; its frame count or failure code.
///
/// # Safety
/// As [`java_stack_of`].
unsafe fn java_stack(env: *mut c_void, frames: *mut JavaFrame, context: *mut c_void) -> i32 {
    let agct = ASYNC_GET_CALL_TRACE.load(Ordering::Acquire);
    if agct == 0 {
        return NOT_A_JAVA_THREAD;
    }
    let mut trace = CallTrace {
        env: env.cast(),
        frame_count: 0,
        frames,
    };
    let agct: AsyncGetCallTrace = mem::transmute(agct);
    agct(&mut trace, MAX_JAVA_FRAMES as i32, context);
    trace.frame_count
}

/// When AsyncGetCallTrace cannot walk from the interrupted instruction,
/// walks again from its caller, on a copy of the context with the top frame
/// popped, as async-profiler does (JDK-8178287). The shapes tried, in turn:
/// - a frame partly built or torn down, as the instructions around the
///   interrupted one tell ([`partial_frame`]: a compiled method's prologue
///   or epilogue, a stub's first instructions);
/// - nothing pushed yet (the first instructions of a compiled method or
///   stub): the return address is on top of the stack;
/// - a frame set up with `enter` (HotSpot's stubs, e.g. the array copies):
///   the return address is above the saved RBP that RBP points to.
///
/// A return address is taken only if it points into the JVM's code, and
/// only if the interrupted instruction is there too. The frame count, if a
/// walk found frames.
///
/// # Safety
/// As [`java_stack_of`].
unsafe fn java_stack_from_caller(
    env: *mut c_void,
    frames: *mut JavaFrame,
    context: *mut c_void,
) -> Option<i32> {
    if context.is_null() {
        return None;
    }
    let interrupted = &*context.cast::<libc::ucontext_t>();
    let registers = &interrupted.uc_mcontext.gregs;
    let sp = registers[libc::REG_RSP as usize] as u64;
    let fp = registers[libc::REG_RBP as usize] as u64;
    if !in_code(registers[libc::REG_RIP as usize] as u64) || sp == 0 || !sp.is_multiple_of(8) {
        return None;
    }
    let pc = registers[libc::REG_RIP as usize] as u64;
    // The thread's own stack pointer in Java code: mapped (the kernel put
    // the signal frame just below it).
    let on_top = ptr::read(sp as *const u64);
    let partly_built = code_around(pc)
        .and_then(|(before, at)| partial_frame(before, at))
        .and_then(|shape| {
            let caller_fp = match shape.saved_rbp {
                Some(offset) => read_word(sp + offset)?,
                None => fp,
            };
            let return_address = sp + shape.return_address;
            Some((read_word(return_address)?, return_address + 8, caller_fp))
        })
        .filter(|&(return_address, _, _)| in_code(return_address));
    let not_set_up = in_code(on_top).then_some((on_top, sp + 8, fp));
    // RBP is a frame pointer only if the code set one up; otherwise it is
    // any value, so it is read through a call that fails instead of
    // faulting.
    let set_up = (fp >= sp && fp - sp < MAX_STUB_FRAME && fp.is_multiple_of(8))
        .then(|| Some((read_word(fp + 8)?, fp + 16, read_word(fp)?)))
        .flatten()
        .filter(|&(return_address, _, _)| in_code(return_address));
    for (pc, sp, fp) in [partly_built, not_set_up, set_up].into_iter().flatten() {
        let mut popped: libc::ucontext_t = ptr::read(interrupted);
        popped.uc_mcontext.gregs[libc::REG_RIP as usize] = pc as i64;
        popped.uc_mcontext.gregs[libc::REG_RSP as usize] = sp as i64;
        popped.uc_mcontext.gregs[libc::REG_RBP as usize] = fp as i64;
        let count = java_stack(env, frames, ptr::addr_of_mut!(popped).cast());
        if count > 0 {
            return Some(count);
        }
    }
    None
}

/// The 16 bytes of code before `pc` and the 8 from it, or `None` where
/// nothing is mapped.
fn code_around(pc: u64) -> Option<([u8; 16], [u8; 8])> {
    let bytes: [u8; 24] = read_bytes(pc.checked_sub(16)?)?;
    let (before, from) = bytes.split_at(16);
    Some((before.try_into().ok()?, from.try_into().ok()?))
}

/// A word of this process's memory, or `None` where nothing is mapped.
pub(crate) fn read_word(address: u64) -> Option<u64> {
    read_bytes(address).map(u64::from_ne_bytes)
}

/// `N` bytes of this process's memory, or `None` where any is unmapped:
/// `process_vm_readv` on itself reports a bad address instead of faulting,
/// and is a plain system call (async-signal-safe).
pub(crate) fn read_bytes<const N: usize>(address: u64) -> Option<[u8; N]> {
    let mut bytes = [0u8; N];
    let local = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: N,
    };
    let remote = libc::iovec {
        iov_base: address as *mut c_void,
        iov_len: N,
    };
    // SAFETY: one iovec each way, the local one our own buffer.
    let read = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (usize::try_from(read) == Ok(N)).then_some(bytes)
}

/// # Safety
/// `context` is null or a signal ucontext.
unsafe fn interrupted_pc(context: *mut c_void) -> u64 {
    if context.is_null() {
        return 0;
    }
    let context = &*context.cast::<libc::ucontext_t>();
    context.uc_mcontext.gregs[libc::REG_RIP as usize] as u64
}

pub(crate) fn monotonic_ns() -> u64 {
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe {
        let mut now: libc::timespec = mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
        now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
    }
}
