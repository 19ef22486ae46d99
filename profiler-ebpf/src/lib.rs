//! Stoke's BPF programs, compiled from C by this crate's build script.
//!
//! The object holds the `sample_cpu` perf_event program and the
//! `process_exec`/`process_exit` tracepoints, with the maps and settings that
//! `src/bpf/sampler.bpf.c` describes, the off-CPU programs and the kernel
//! address namer (run on demand).

/// The bytes wrapped so that they start 8-byte aligned, as ELF parsers need.
#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);

static SAMPLER: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/sampler.bpf.o")));

/// The compiled sampler object, ready for `aya::EbpfLoader::load`.
pub fn sampler_object() -> &'static [u8] {
    &SAMPLER.0
}
