//! Tests of the unwinder on this machine's real files and on programs
//! built here: what tables cover ([`table`]), that they agree with readelf
//! ([`readelf`]), that the reference unwinder walks a live stack with them
//! ([`reference`]), separate debug files ([`debug_file`]), and that the loader makes room
//! for new tables ([`loader`]); [`support`]
//! holds what they share.

mod debug_file;
mod loader;
mod readelf;
mod reference;
pub mod support;
mod table;
