//! Unwinding without frame pointers: each executable file's DWARF CFI
//! (`.eh_frame`, `.debug_frame`) compiled into compact rows that a BPF
//! unwinder searches per PC, a page of them at a time, the OpenTelemetry
//! eBPF profiler's approach.
//!
//! [`table`] compiles a file's CFI, its sections read by
//! [`crate::elf`] (which also finds its separate debug file), evaluated by
//! `cfi`; [`file_table`] does both for a mapped file, within bounds. [`loader`] puts the tables
//! of the sampled processes where the BPF unwinder finds them, with a
//! [`pages`] index into each, in ranges of the maps (`mapped_array`) that
//! files no process maps any more give back (`free_ranges`); `stoke tables`
//! (`crate::commands::tables`) prints what compiling a file costs. For
//! tests, `reference` is an unwinder that applies the rows the way the BPF
//! side does.

mod cfi;
pub mod file_table;
mod free_ranges;
pub mod loader;
mod mapped_array;
pub mod pages;
#[cfg(test)]
pub mod reference;
pub mod table;

#[cfg(test)]
pub(crate) mod tests;
