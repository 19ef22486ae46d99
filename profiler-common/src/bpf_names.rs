//! The names userspace looks up in the BPF object: its programs, maps and
//! load-time settings (`const volatile` globals). Each constant is the C
//! identifier itself, spelt as in `profiler-ebpf/src/bpf`; `profiler-ebpf`'s
//! build checks that the compiled object defines every one of [`ALL`], so
//! a name misspelt or renamed on either side fails the build.
#![allow(non_upper_case_globals)]

/// Declares each name as a constant of a module, and lists them all.
macro_rules! names {
    ($($(#[$doc:meta])* $module:ident { $($name:ident),* $(,)? })*) => {
        $(
            $(#[$doc])*
            pub mod $module {
                $(
                    #[doc = concat!("`", stringify!($name), "`")]
                    pub const $name: &str = stringify!($name);
                )*
            }
        )*
        /// Every name above.
        pub const ALL: &[&str] = &[$($($module::$name,)*)*];
    };
}

names! {
    /// Programs.
    program {
        sample_cpu,
        sample_cpu_legacy,
        sample_cpu_legacy_unwind,
        sample_cpu_legacy_finish,
        sample_probe_legacy_unwind,
        sample_probe_legacy_finish,
        sample_tracepoint_legacy_unwind,
        sample_tracepoint_legacy_finish,
        sample_counter_legacy,
        sample_probe_legacy,
        sample_tracepoint_legacy,
        sample_counter_legacy_0,
        sample_counter_legacy_1,
        sample_counter_legacy_2,
        sample_counter_legacy_3,
        sample_counter_legacy_4,
        sample_counter_legacy_5,
        sample_counter_legacy_6,
        sample_counter_legacy_7,
        sample_probe_legacy_0,
        sample_probe_legacy_1,
        sample_probe_legacy_2,
        sample_probe_legacy_3,
        sample_probe_legacy_4,
        sample_probe_legacy_5,
        sample_probe_legacy_6,
        sample_probe_legacy_7,
        sample_tracepoint_legacy_0,
        sample_tracepoint_legacy_1,
        sample_tracepoint_legacy_2,
        sample_tracepoint_legacy_3,
        sample_tracepoint_legacy_4,
        sample_tracepoint_legacy_5,
        sample_tracepoint_legacy_6,
        sample_tracepoint_legacy_7,
        sample_probe,
        sample_tracepoint,
        process_exec,
        process_exit,
        offcpu_switch,
        offcpu_switch_task_work,
        offcpu_syscall_exit,
        offcpu_thread_exit,
        offcpu_wakeup,
        offcpu_waiting,
        name_kernel_addresses,
    }
    /// Maps.
    map {
        samples,
        counters,
        ended_tgids,
        signal_tgids,
        target_tgids,
        timed_threads,
        offcpu_start,
        unwind_rows,
        unwind_pages,
        unwind_processes,
        unwind_mappings,
        legacy_unwinder,
        legacy_probe_unwinder,
        legacy_tracepoint_unwinder,
        legacy_cookies,
        python_processes,
        kernel_addresses,
        kernel_names,
    }
    /// Settings fixed at load time.
    global {
        filter_tgids,
        thread_events,
        include_idle,
        cpu_java_stacks,
        wakeup_bytes,
        offcpu_min_ns,
        offcpu_budget,
        offcpu_jvms_only,
        offcpu_wall,
        offcpu_runqueue,
        legacy_quiet_counters,
    }
}
