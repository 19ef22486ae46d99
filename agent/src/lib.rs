//! Stoke's JVMTI agent, `libstoke_agent.so`.
//!
//! Loaded into a running JVM by `stoke record` (dynamic attach) or at
//! startup with `-agentpath:`, it shares one memfd with stoke
//! (`profiler_common::jvm`) and fills it with:
//! - Java stacks, taken by AsyncGetCallTrace in a handler of the signal that
//!   stoke's BPF sampler sends to the sampled thread ([`handler`]);
//! - the names and line tables of the methods stoke asks about;
//! - where the JIT put compiled methods (with the calls it inlined into
//!   them) and generated code;
//! - while a recording asks for them, sampled allocations and contended
//!   monitors with their Java stacks ([`java_events`], switched on and
//!   off by [`event_control`]; the stacks walked from HotSpot's structures
//!   by [`stack_walk`] where [`event_stack`] trusts that walk).
//!
//! When no stoke reads it for a while, it frees that memory and waits for
//! the next ([`idle`]).
//!
//! Nothing here may crash or stall the JVM: every callback catches panics,
//! and failures leave the JVM running without Java stacks.

mod compiled_frames;
mod event_control;
mod event_stack;
mod frame_anchor;
mod handler;
mod idle;
mod inlining;
mod java_events;
mod jvmti;
mod jvmti_events;
#[allow(clippy::all)]
mod jvmti_sys;
mod partial_frame;
mod shared;
mod stack_walk;
mod vm_structs;

use std::{
    collections::HashSet,
    ffi::{c_char, c_void, CStr},
    panic::{catch_unwind, AssertUnwindSafe},
    ptr,
    sync::{
        atomic::{AtomicBool, AtomicPtr, Ordering},
        Mutex, OnceLock,
    },
    time::Duration,
};

use profiler_common::jvm::{
    AgentStartError as StartError, AgentState, Event, MethodInfo, RECOMPILE_REQUEST,
};

use crate::{
    event_control::EventControl,
    idle::IdleWatch,
    jvmti::{Callbacks, Jvmti},
    jvmti_sys::{
        jclass, jint, jmethodID, jthread, jvmtiEnv, JNIEnv, JavaVM, JNI_OK, JNI_VERSION_1_6,
    },
    shared::SharedMemory,
};

static STARTED: AtomicBool = AtomicBool::new(false);
static VM: AtomicPtr<JavaVM> = AtomicPtr::new(ptr::null_mut());
static JVMTI: OnceLock<Jvmti> = OnceLock::new();
static SHARED: OnceLock<&'static SharedMemory> = OnceLock::new();
/// Method ids the JVM handed out: the only ones the agent will describe, so
/// that no stale or forged id reaches JVMTI.
static KNOWN_METHODS: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

/// How often the worker checks the signal handlers and whether a stoke
/// still reads the memory. Stoke's requests ring the doorbell, which the
/// worker answers at once: a short period would take the JVM's CPUs and
/// switch its threads out for nothing, a large part of what sampling a
/// JVM at 99 Hz costs it.
const WORKER_PERIOD: Duration = Duration::from_millis(100);

/// Entry point for `-agentpath:` at JVM startup.
#[no_mangle]
pub extern "C" fn Agent_OnLoad(
    vm: *mut JavaVM,
    options: *mut c_char,
    _reserved: *mut c_void,
) -> jint {
    start(vm, options, false)
}

/// Entry point for dynamic attach (`stoke record`).
#[no_mangle]
pub extern "C" fn Agent_OnAttach(
    vm: *mut JavaVM,
    options: *mut c_char,
    _reserved: *mut c_void,
) -> jint {
    start(vm, options, true)
}

fn start(vm: *mut JavaVM, options: *mut c_char, live: bool) -> jint {
    // A second attach finds the agent running and reuses it.
    if STARTED.swap(true, Ordering::AcqRel) {
        return 0;
    }
    if !options.is_null() {
        // SAFETY: the JVM passes a NUL-terminated option string.
        let options = unsafe { CStr::from_ptr(options) };
        idle::configure(&options.to_string_lossy());
    }
    match catch_unwind(|| unsafe { start_agent(vm, live) }) {
        Ok(Ok(())) => 0,
        Ok(Err(error)) => {
            // Nothing was set up yet: the next attach may start it.
            if error == StartError::NoJvmti {
                STARTED.store(false, Ordering::Release);
            }
            error as jint
        }
        Err(_) => StartError::Panicked as jint,
    }
}

/// # Safety
/// `vm` is the JavaVM the agent was loaded into.
unsafe fn start_agent(vm: *mut JavaVM, live: bool) -> Result<(), StartError> {
    VM.store(vm, Ordering::Release);
    if !handler::find_async_get_call_trace() {
        return Err(StartError::NoAsyncGetCallTrace);
    }
    let jvmti = Jvmti::of(vm).ok_or(StartError::NoJvmti)?;
    jvmti
        .add_capabilities()
        .map_err(|_| StartError::Capabilities)?;
    let shared: &'static SharedMemory = Box::leak(Box::new(
        SharedMemory::create().map_err(|_| StartError::SharedMemory)?,
    ));
    let _ = SHARED.set(shared);
    let _ = JVMTI.set(jvmti);
    *lock_known_methods() = Some(HashSet::new());
    let callbacks = Callbacks {
        class_load: Some(on_class_load),
        class_prepare: Some(on_class_prepare),
        compiled_method_load: Some(on_compiled_method_load),
        compiled_method_unload: Some(on_compiled_method_unload),
        dynamic_code_generated: Some(on_dynamic_code_generated),
        vm_init: Some(on_vm_init),
        sampled_object_alloc: Some(java_events::on_sampled_object_alloc),
        monitor_contended_enter: Some(java_events::on_monitor_contended_enter),
        monitor_contended_entered: Some(java_events::on_monitor_contended_entered),
    };
    if jvmti.enable_events(&callbacks, !live).is_err() {
        shared.set_state(AgentState::Failed);
        return Err(StartError::Events);
    }
    if live {
        remember_loaded_methods(jvmti, vm);
        // Code compiled before the agent came: replayed, not lost.
        let _ = jvmti.replay_code_events();
        go_live(vm, shared);
    }
    Ok(())
}

/// Installs the handler and starts the worker: from now on stoke may
/// signal this JVM.
fn go_live(vm: *mut JavaVM, shared: &'static SharedMemory) {
    if handler::install(vm, shared).is_err() {
        shared.set_state(AgentState::Failed);
        return;
    }
    handler::install_trap(shared);
    if let Some(code_cache) = stack_walk::code_cache() {
        let header = shared.header();
        header
            .code_cache_start
            .store(code_cache.start, Ordering::Relaxed);
        header
            .code_cache_end
            .store(code_cache.end, Ordering::Relaxed);
    }
    match std::thread::Builder::new()
        .name("stoke-agent".into())
        .spawn(move || worker(shared))
    {
        Ok(_) => shared.set_state(AgentState::Ready),
        Err(_) => shared.set_state(AgentState::Failed),
    }
}

/// # Safety
/// `vm` is the JavaVM; the calling thread is a Java thread.
unsafe fn remember_loaded_methods(jvmti: Jvmti, vm: *mut JavaVM) {
    let Some(jni) = jni_env(vm) else { return };
    let Ok(classes) = jvmti.loaded_classes() else {
        return;
    };
    for class in classes {
        remember_methods(jvmti, class);
        delete_local_ref(jni, class);
    }
}

fn remember_methods(jvmti: Jvmti, class: jclass) {
    let ids = jvmti.class_methods(class);
    if let Some(known) = lock_known_methods().as_mut() {
        known.extend(ids);
    }
}

fn lock_known_methods() -> std::sync::MutexGuard<'static, Option<HashSet<u64>>> {
    KNOWN_METHODS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Answers stoke's method requests, watches the signal handler, and
/// switches Java events on and off as stoke asks, on a
/// daemon thread the JVM knows (JVMTI serves only such threads).
fn worker(shared: &'static SharedMemory) {
    let vm = VM.load(Ordering::Acquire);
    // SAFETY: vm is the JavaVM; attaching this thread as a daemon.
    let Some(jni) = (unsafe { attach_daemon(vm) }) else {
        return;
    };
    let Some(&jvmti) = JVMTI.get() else { return };
    // SAFETY: this thread's own env.
    unsafe { frame_anchor::learn(jni) };
    stack_walk::learn();
    let mut described = HashSet::new();
    let mut recompiled = HashSet::new();
    let mut idle = IdleWatch::new();
    let mut java_events = EventControl::default();
    // Asked for at the first recompile request only (`stoke record
    // --java-retransform`): holding it makes HotSpot's JIT record extra
    // dependencies in every method it compiles.
    let mut can_retransform = None;
    let mut rung = shared.doorbell();
    loop {
        shared.wait_for_doorbell(rung, WORKER_PERIOD);
        let before = rung;
        // Read before the work: a ring during it ends the next wait at once.
        rung = shared.doorbell();
        if !handler::is_installed() {
            shared.set_state(AgentState::HandlerLost);
        }
        handler::check_trap(shared);
        if idle.idled(shared, rung != before) {
            // The stoke that woke the agent asks for every name again, and
            // needs the code map anew.
            described.clear();
            let _ = jvmti.replay_code_events();
            shared.active();
        }
        java_events.apply(jvmti, shared);
        shared.take_requests(|request| {
            let method_id = request & !RECOMPILE_REQUEST;
            let known = lock_known_methods()
                .as_ref()
                .is_some_and(|known| known.contains(&method_id));
            if !known {
                // Say so, with an empty description, rather than let stoke
                // wait for a name that will not come. JVMTI never sees the
                // id: it may be stale or forged.
                if request & RECOMPILE_REQUEST == 0 && described.insert(method_id) {
                    shared.append_event(&Event::Method(MethodInfo {
                        method_id,
                        class: b"",
                        name: b"",
                        signature: b"",
                        source: b"",
                        lines: b"",
                    }));
                }
                return;
            }
            let _ = catch_unwind(AssertUnwindSafe(|| {
                if request & RECOMPILE_REQUEST == 0 {
                    if described.insert(method_id) {
                        publish_method(jvmti, jni, shared, method_id);
                    }
                } else if *can_retransform.get_or_insert_with(|| jvmti.add_retransform_capability())
                    && recompiled.insert(method_id)
                {
                    // SAFETY: a method id the JVM handed out; jni is ours.
                    unsafe { jvmti.recompile_class_of(jni, method_id as jmethodID) };
                }
            }));
        });
    }
}

fn publish_method(jvmti: Jvmti, jni: *mut JNIEnv, shared: &SharedMemory, method_id: u64) {
    // SAFETY: the id is one the JVM handed out; jni is this thread's.
    let Some(description) = (unsafe { jvmti.describe(jni, method_id as jmethodID) }) else {
        return;
    };
    shared.append_event(&Event::Method(MethodInfo {
        method_id,
        class: &description.class,
        name: &description.name,
        signature: &description.signature,
        source: &description.source,
        lines: &description.lines,
    }));
}

/// # Safety
/// `vm` is the JavaVM.
unsafe fn attach_daemon(vm: *mut JavaVM) -> Option<*mut JNIEnv> {
    let attach = (**vm).AttachCurrentThreadAsDaemon?;
    let mut env: *mut c_void = ptr::null_mut();
    (attach(vm, &mut env, ptr::null_mut()) == JNI_OK as i32 && !env.is_null()).then_some(env.cast())
}

/// # Safety
/// `vm` is the JavaVM.
unsafe fn jni_env(vm: *mut JavaVM) -> Option<*mut JNIEnv> {
    let get_env = (**vm).GetEnv?;
    let mut env: *mut c_void = ptr::null_mut();
    (get_env(vm, &mut env, JNI_VERSION_1_6 as i32) == JNI_OK as i32 && !env.is_null())
        .then_some(env.cast())
}

/// # Safety
/// `jni` is the calling thread's; `object` a local reference of it.
unsafe fn delete_local_ref(jni: *mut JNIEnv, object: jclass) {
    if let Some(delete) = (**jni).DeleteLocalRef {
        delete(jni, object);
    }
}

fn shared() -> Option<&'static SharedMemory> {
    SHARED.get().copied()
}

/// Runs a callback body; a panic must not cross into the JVM.
fn guarded(body: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(body));
}

unsafe extern "C" fn on_class_load(_: *mut jvmtiEnv, _: *mut JNIEnv, _: jthread, _: jclass) {}

unsafe extern "C" fn on_class_prepare(_: *mut jvmtiEnv, _: *mut JNIEnv, _: jthread, class: jclass) {
    guarded(|| {
        if let Some(&jvmti) = JVMTI.get() {
            remember_methods(jvmti, class);
        }
    });
}

unsafe extern "C" fn on_compiled_method_load(
    _: *mut jvmtiEnv,
    method: jmethodID,
    code_size: jint,
    code_address: *const c_void,
    _map_length: jint,
    _map: *const jvmti_sys::jvmtiAddrLocationMap,
    compile_info: *const c_void,
) {
    guarded(|| {
        let start = code_address as u64;
        let size = u64::try_from(code_size).unwrap_or(0);
        // SAFETY: the code and compile_info of this CompiledMethodLoad
        // event.
        unsafe { compiled_frames::add(start, size, compile_info) };
        if compiled_frames::replaying() {
            return;
        }
        let method_id = method as u64;
        // SAFETY: the compile_info of this CompiledMethodLoad event.
        let inlined = unsafe { inlining::inline_edges(compile_info) };
        if let Some(known) = lock_known_methods().as_mut() {
            known.insert(method_id);
            known.extend(inlined.iter().flat_map(|edge| [edge.caller, edge.callee]));
        }
        handler::note_code(start, size);
        let Some(shared) = shared() else { return };
        shared.append_event(&Event::CodeLoad {
            method_id,
            start,
            size,
        });
        if !inlined.is_empty() {
            let edges: Vec<u8> = inlined.iter().flat_map(|edge| edge.to_bytes()).collect();
            shared.append_event(&Event::CodeInline {
                start,
                edges: &edges,
            });
        }
    });
}

unsafe extern "C" fn on_compiled_method_unload(
    _: *mut jvmtiEnv,
    method: jmethodID,
    code_address: *const c_void,
) {
    guarded(|| {
        compiled_frames::remove(code_address as u64);
        if let Some(shared) = shared() {
            shared.append_event(&Event::CodeUnload {
                method_id: method as u64,
                start: code_address as u64,
            });
        }
    });
}

unsafe extern "C" fn on_dynamic_code_generated(
    _: *mut jvmtiEnv,
    name: *const c_char,
    address: *const c_void,
    length: jint,
) {
    guarded(|| {
        let start = address as u64;
        let size = u64::try_from(length).unwrap_or(0);
        handler::note_code(start, size);
        let Some(shared) = shared() else { return };
        // SAFETY: JVMTI passes a NUL-terminated name or null.
        let name = if name.is_null() {
            &[][..]
        } else {
            unsafe { CStr::from_ptr(name) }.to_bytes()
        };
        shared.append_event(&Event::DynamicCode { start, size, name });
    });
}

unsafe extern "C" fn on_vm_init(_: *mut jvmtiEnv, _: *mut JNIEnv, _: jthread) {
    guarded(|| {
        if let Some(shared) = shared() {
            go_live(VM.load(Ordering::Acquire), shared);
        }
    });
}
