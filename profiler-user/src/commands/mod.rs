//! The subcommands, each a thin driver of the stages: `record`,
//! `continuous`, `report`, `convert`, `diff`, `list`, `attach`, `agent` and
//! `tables`.

pub mod agent;
pub mod attach;
pub mod continuous;
pub mod convert;
pub mod diff;
pub mod list;
pub mod record;
pub mod report;
pub mod tables;
