//! The subcommands, each a thin driver of the stages: `record`,
//! `continuous`, `report`, `convert`, `diff` and `list` (`attach`, `agent`
//! and `tables` live beside what they drive: `jvm::attach`, `jvm::agent`,
//! `unwind::inspect`).

pub mod continuous;
pub mod convert;
pub mod diff;
pub mod list;
pub mod record;
pub mod report;
