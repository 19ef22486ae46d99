//! Stage 2, processes: what each sampled process maps and where it runs,
//! read from /proc once, when the process is first sampled ([`registry`];
//! again when it runs code it mapped since: [`reread`]):
//! its mappings through one bounded reader of `/proc/PID/maps` ([`maps`],
//! which asks the kernel for the executable ones alone where it can:
//! [`maps_query`]),
//! small /proc files through another ([`crate::procfs`]), held by a pidfd where
//! it must not be mistaken for another ([`pidfd`]), its container or
//! service ([`identity`]) from its cgroup ([`cgroup`]; its CPU quota's
//! throttling for reports: [`cpu_quota`]) and the container
//! runtimes' files ([`runtime_metadata`]); a few bytes of its memory at
//! a time, for interpreters' names ([`memory`]). The recording owns the registry
//! and lends it to the stages that need a process's mappings: the unwind
//! loader (which files to compile tables for), the Java side (is it a JVM;
//! where its JIT code is) and symbolization (which file an address is in).

pub mod cgroup;
pub mod cpu_quota;
pub mod identity;
pub mod image;
pub mod maps;
mod maps_query;
pub mod memory;
pub mod pidfd;
pub mod registry;
mod reread;
pub mod runtime_metadata;

pub use self::{
    image::{MappedFile, MappingTarget, ProcessImage},
    registry::ProcessRegistry,
};
