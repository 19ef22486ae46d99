//! Stage 2, processes: what each sampled process maps, read from /proc
//! once, when the process is first sampled ([`registry`]), through one
//! bounded reader of `/proc/PID/maps` ([`maps`]). The recording owns the
//! registry and lends it to the stages that need a process's mappings: the
//! unwind loader (which files to compile tables for), the Java side (is it
//! a JVM; where its JIT code is) and symbolization (which file an address
//! is in).

pub mod image;
pub mod maps;
pub mod registry;

pub use self::{
    image::{MappedFile, MappingTarget, ProcessImage},
    registry::{ImageId, ProcessRegistry},
};
