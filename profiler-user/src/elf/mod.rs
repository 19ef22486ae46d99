//! Reading the ELF files processes map, for unwinding and symbolization
//! alike: [`bounded`] holds every read of a file a process controls to
//! bounds of size, bytes and time; [`file`](mod@file) reads an ELF file's headers,
//! segments, notes and sections through it; [`debug_file`] finds a file's
//! separate debug file inside the process's root.

pub mod bounded;
pub mod debug_file;
pub mod file;
