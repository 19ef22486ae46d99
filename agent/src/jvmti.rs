//! What the agent asks of JVMTI: capabilities, events, method ids and names.

use std::{
    ffi::{c_char, c_void, CStr},
    ptr,
};

use crate::jvmti_sys::*;

/// Calls a JVMTI function through the environment's function table.
macro_rules! call {
    ($env:expr, $function:ident $(, $arg:expr)* $(,)?) => {
        match (**$env).$function {
            Some(function) => function($env $(, $arg)*),
            None => jvmtiError_JVMTI_ERROR_NOT_AVAILABLE,
        }
    };
}
pub(crate) use call;

/// A JVMTI call failed.
#[derive(Debug)]
pub struct JvmtiError;

pub(crate) fn check(code: jvmtiError) -> Result<(), JvmtiError> {
    if code == jvmtiError_JVMTI_ERROR_NONE {
        Ok(())
    } else {
        Err(JvmtiError)
    }
}

/// A JVMTI environment.
#[derive(Clone, Copy)]
pub struct Jvmti(pub(crate) *mut jvmtiEnv);

// SAFETY: JVMTI environments may be used from any thread the JVM knows.
unsafe impl Send for Jvmti {}
// SAFETY: see above.
unsafe impl Sync for Jvmti {}

/// The events the agent needs.
pub struct Callbacks {
    /// Class loading: AsyncGetCallTrace works only while one is enabled.
    pub class_load: jvmtiEventClassLoad,
    /// Class prepared: its methods get their ids.
    pub class_prepare: jvmtiEventClassPrepare,
    /// A method was compiled.
    pub compiled_method_load: jvmtiEventCompiledMethodLoad,
    /// Compiled code was freed.
    pub compiled_method_unload: jvmtiEventCompiledMethodUnload,
    /// Code that is no method was generated.
    pub dynamic_code_generated: jvmtiEventDynamicCodeGenerated,
    /// The VM finished starting (for agents loaded at startup).
    pub vm_init: jvmtiEventVMInit,
    /// An allocation was sampled (enabled only while stoke wants it).
    pub sampled_object_alloc: jvmtiEventSampledObjectAlloc,
    /// A thread waits for a monitor another holds (enabled likewise).
    pub monitor_contended_enter: jvmtiEventMonitorContendedEnter,
    /// The thread got the monitor it waited for.
    pub monitor_contended_entered: jvmtiEventMonitorContendedEntered,
}

/// A method's names and line table.
pub struct MethodDescription {
    /// Class signature, e.g. `Ljava/lang/String;`.
    pub class: Vec<u8>,
    /// Method name.
    pub name: Vec<u8>,
    /// Method signature.
    pub signature: Vec<u8>,
    /// Source file name, empty if unknown.
    pub source: Vec<u8>,
    /// Little-endian `(start bci, line)` u32 pairs.
    pub lines: Vec<u8>,
}

impl Jvmti {
    /// The JVMTI environment of `vm`.
    ///
    /// # Safety
    /// `vm` is the JavaVM the agent was loaded into.
    pub unsafe fn of(vm: *mut JavaVM) -> Option<Self> {
        let mut env: *mut c_void = ptr::null_mut();
        let get_env = (**vm).GetEnv?;
        (get_env(vm, &mut env, JVMTI_VERSION_1_2 as i32) == JNI_OK as i32 && !env.is_null())
            .then_some(Self(env.cast()))
    }

    /// Asks for what compiled-method events and method descriptions need.
    pub fn add_capabilities(self) -> Result<(), JvmtiError> {
        // SAFETY: a zeroed capability set is empty.
        let mut capabilities: jvmtiCapabilities = unsafe { std::mem::zeroed() };
        capabilities.set_can_generate_compiled_method_load_events(1);
        capabilities.set_can_get_source_file_name(1);
        capabilities.set_can_get_line_numbers(1);
        // SAFETY: valid environment and capability set.
        check(unsafe { call!(self.0, AddCapabilities, &capabilities) })
    }

    /// Asks, separately, for retransforming classes: optional, a JVM that
    /// refuses it still gets Java stacks.
    pub fn add_retransform_capability(self) -> bool {
        // SAFETY: a zeroed capability set is empty.
        let mut capabilities: jvmtiCapabilities = unsafe { std::mem::zeroed() };
        capabilities.set_can_retransform_classes(1);
        // SAFETY: valid environment and capability set.
        check(unsafe { call!(self.0, AddCapabilities, &capabilities) }).is_ok()
    }

    /// Retransforms the class of `method` without changing its bytes, which
    /// makes HotSpot throw away its compiled code. Recompiled while an agent
    /// listens for compiled methods, the code gets the debug information
    /// AsyncGetCallTrace needs to walk past it.
    ///
    /// # Safety
    /// `method` is a jmethodID of this JVM; `jni` is the calling thread's.
    pub unsafe fn recompile_class_of(self, jni: *mut JNIEnv, method: jmethodID) -> bool {
        let mut class: jclass = ptr::null_mut();
        if check(call!(self.0, GetMethodDeclaringClass, method, &mut class)).is_err() {
            return false;
        }
        let mut modifiable: jboolean = 0;
        let done = check(call!(self.0, IsModifiableClass, class, &mut modifiable)).is_ok()
            && modifiable != 0
            && check(call!(self.0, RetransformClasses, 1, &class)).is_ok();
        if let Some(delete) = (**jni).DeleteLocalRef {
            delete(jni, class);
        }
        done
    }

    /// Registers the callbacks and enables their events (VMInit only when
    /// `at_startup`).
    pub fn enable_events(self, callbacks: &Callbacks, at_startup: bool) -> Result<(), JvmtiError> {
        // SAFETY: zeroed callbacks are all absent; the set ones are valid.
        let mut table: jvmtiEventCallbacks = unsafe { std::mem::zeroed() };
        table.ClassLoad = callbacks.class_load;
        table.ClassPrepare = callbacks.class_prepare;
        table.CompiledMethodLoad = callbacks.compiled_method_load;
        table.CompiledMethodUnload = callbacks.compiled_method_unload;
        table.DynamicCodeGenerated = callbacks.dynamic_code_generated;
        table.VMInit = callbacks.vm_init;
        table.SampledObjectAlloc = callbacks.sampled_object_alloc;
        table.MonitorContendedEnter = callbacks.monitor_contended_enter;
        table.MonitorContendedEntered = callbacks.monitor_contended_entered;
        let size = std::mem::size_of::<jvmtiEventCallbacks>() as jint;
        // SAFETY: valid environment and table.
        check(unsafe { call!(self.0, SetEventCallbacks, &table, size) })?;
        let mut events = vec![
            jvmtiEvent_JVMTI_EVENT_CLASS_LOAD,
            jvmtiEvent_JVMTI_EVENT_CLASS_PREPARE,
            jvmtiEvent_JVMTI_EVENT_COMPILED_METHOD_LOAD,
            jvmtiEvent_JVMTI_EVENT_COMPILED_METHOD_UNLOAD,
            jvmtiEvent_JVMTI_EVENT_DYNAMIC_CODE_GENERATED,
        ];
        if at_startup {
            events.push(jvmtiEvent_JVMTI_EVENT_VM_INIT);
        }
        for event in events {
            // SAFETY: valid environment; a null thread means every thread.
            check(unsafe {
                call!(
                    self.0,
                    SetEventNotificationMode,
                    jvmtiEventMode_JVMTI_ENABLE,
                    event,
                    ptr::null_mut()
                )
            })?;
        }
        Ok(())
    }

    /// Replays compiled methods and generated code that exist already.
    pub fn replay_code_events(self) -> Result<(), JvmtiError> {
        // SAFETY: valid environment.
        check(unsafe {
            call!(
                self.0,
                GenerateEvents,
                jvmtiEvent_JVMTI_EVENT_DYNAMIC_CODE_GENERATED
            )
        })?;
        self.replay_compiled_methods()
    }

    /// Replays the CompiledMethodLoad events of the methods compiled so
    /// far, on the calling thread.
    pub fn replay_compiled_methods(self) -> Result<(), JvmtiError> {
        // SAFETY: valid environment.
        check(unsafe {
            call!(
                self.0,
                GenerateEvents,
                jvmtiEvent_JVMTI_EVENT_COMPILED_METHOD_LOAD
            )
        })
    }

    /// Every class loaded so far, as local references of `jni`'s thread.
    pub fn loaded_classes(self) -> Result<Vec<jclass>, JvmtiError> {
        let mut count = 0;
        let mut classes: *mut jclass = ptr::null_mut();
        // SAFETY: valid environment and out-pointers.
        check(unsafe { call!(self.0, GetLoadedClasses, &mut count, &mut classes) })?;
        // SAFETY: JVMTI returned `count` classes there.
        let list = unsafe { copy_array(classes, count) };
        self.deallocate(classes.cast());
        Ok(list)
    }

    /// The method ids of a class. Asking creates them, which
    /// AsyncGetCallTrace needs: it names only methods that have ids.
    pub fn class_methods(self, class: jclass) -> Vec<u64> {
        let mut count = 0;
        let mut methods: *mut jmethodID = ptr::null_mut();
        // SAFETY: valid environment, class and out-pointers.
        if check(unsafe { call!(self.0, GetClassMethods, class, &mut count, &mut methods) })
            .is_err()
        {
            return Vec::new();
        }
        // SAFETY: JVMTI returned `count` methods there.
        let ids = unsafe { copy_array(methods, count) }
            .into_iter()
            .map(|id| id as u64)
            .collect();
        self.deallocate(methods.cast());
        ids
    }

    /// A method's names and lines; `None` if the method is gone.
    ///
    /// # Safety
    /// `method` is a jmethodID of this JVM; `jni` is the calling thread's.
    pub unsafe fn describe(self, jni: *mut JNIEnv, method: jmethodID) -> Option<MethodDescription> {
        let mut class: jclass = ptr::null_mut();
        check(call!(self.0, GetMethodDeclaringClass, method, &mut class)).ok()?;
        let description = self.describe_in(method, class);
        if let Some(delete) = (**jni).DeleteLocalRef {
            delete(jni, class);
        }
        description
    }

    unsafe fn describe_in(self, method: jmethodID, class: jclass) -> Option<MethodDescription> {
        let mut class_signature: *mut c_char = ptr::null_mut();
        let mut name: *mut c_char = ptr::null_mut();
        let mut signature: *mut c_char = ptr::null_mut();
        let mut source: *mut c_char = ptr::null_mut();
        let null = ptr::null_mut();
        check(call!(
            self.0,
            GetClassSignature,
            class,
            &mut class_signature,
            null
        ))
        .ok()?;
        let named = check(call!(
            self.0,
            GetMethodName,
            method,
            &mut name,
            &mut signature,
            null
        ));
        // Classes compiled without debug info have no source file: not an error.
        let _ = call!(self.0, GetSourceFileName, class, &mut source);
        let description = named.ok().map(|()| MethodDescription {
            class: self.take_string(class_signature),
            name: self.take_string(name),
            signature: self.take_string(signature),
            source: self.take_string(source),
            lines: self.line_table(method),
        });
        for text in [class_signature, name, signature, source] {
            self.deallocate(text.cast());
        }
        description
    }

    unsafe fn line_table(self, method: jmethodID) -> Vec<u8> {
        let mut count = 0;
        let mut table: *mut jvmtiLineNumberEntry = ptr::null_mut();
        if check(call!(
            self.0,
            GetLineNumberTable,
            method,
            &mut count,
            &mut table
        ))
        .is_err()
        {
            return Vec::new();
        }
        let lines = copy_array(table, count)
            .into_iter()
            .flat_map(|entry| {
                let start = u32::try_from(entry.start_location).unwrap_or(u32::MAX);
                let line = u32::try_from(entry.line_number).unwrap_or(0);
                [start.to_le_bytes(), line.to_le_bytes()].concat()
            })
            .collect();
        self.deallocate(table.cast());
        lines
    }

    unsafe fn take_string(self, text: *mut c_char) -> Vec<u8> {
        if text.is_null() {
            Vec::new()
        } else {
            CStr::from_ptr(text).to_bytes().to_vec()
        }
    }

    pub(crate) fn deallocate(self, memory: *mut u8) {
        if !memory.is_null() {
            // SAFETY: memory JVMTI allocated for us.
            unsafe { call!(self.0, Deallocate, memory) };
        }
    }
}

/// # Safety
/// `items` is null or points to `count` values.
unsafe fn copy_array<T: Copy>(items: *const T, count: jint) -> Vec<T> {
    if items.is_null() || count <= 0 {
        return Vec::new();
    }
    std::slice::from_raw_parts(items, count as usize).to_vec()
}
