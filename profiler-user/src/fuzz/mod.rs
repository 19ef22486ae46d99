//! Fuzzing of every parser of what untrusted processes and users write (issue 12):
//! one target per module, each a `#[test]` driven by bolero. Under `cargo
//! test` a target runs random and structure-aware inputs for a short
//! budget; `cargo xtask fuzz` runs each in a process of its own with a
//! longer budget and a memory limit, and counts inputs and crashes
//! ([`harness`]). What they found is kept in [`regressions`].
//!
//! The targets: unwind tables and fingerprints of mutated ELF files
//! ([`elf`]), the sampler's ring records ([`record`]), the agent's shared
//! memory with its event log, Java symbols and merging ([`agent`]), the
//! merging of samples with Java stacks ([`merge`]), the `/proc` parsers
//! ([`proc`]), the attach protocol's replies ([`attach`]), CPython's line
//! tables ([`python`]), and the
//! profiles users give `stoke convert`, `stoke diff` and `--baseline`:
//! folded files ([`folded`]) and pprof profiles ([`pprof`]).

mod agent;
pub(crate) mod alloc;
mod attach;
mod elf;
mod folded;
pub(crate) mod harness;
mod merge;
mod pprof;
mod proc;
mod python;
mod record;
mod regressions;
