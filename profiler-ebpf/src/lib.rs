//! Stoke's BPF programs, compiled from C by this crate's build script.
//!
//! The object holds the `sample_cpu` perf_event program and the
//! `process_exec`/`process_exit` tracepoints, with the maps and settings that
//! `src/bpf/sampler.bpf.c` describes, the kernel address namer (run on
//! demand) and, in one of its two builds, the off-CPU programs.

/// The bytes wrapped so that they start 8-byte aligned, as ELF parsers need.
#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);

static SAMPLER: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/sampler.bpf.o")));

static SAMPLER_CPU: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(
    env!("OUT_DIR"),
    "/sampler_cpu.bpf.o"
)));

/// The compiled sampler object, ready for `aya::EbpfLoader::load`: with the
/// off-CPU programs, or without them, for recordings of other events (a
/// shorter start-up: the loader relocates fewer kernel types).
pub fn sampler_object(offcpu: bool) -> &'static [u8] {
    if offcpu {
        &SAMPLER.0
    } else {
        &SAMPLER_CPU.0
    }
}
