//! The binary interface between Stoke's BPF sampler and its userspace, and
//! between its JVM agent and `stoke`.
//!
//! [`ring`], [`unwind`], [`python`], [`kernel_names`] and [`kfunc`] are
//! the BPF side's: `include/stoke_abi.h`, which the BPF programs include,
//! is generated from them by `cargo xtask codegen`
//! (cbindgen), and `cargo xtask lint` fails when the committed header is not
//! what they generate. [`jvm`] and [`java_events`] are shared by two Rust
//! programs only. [`bpf_names`] are the names userspace looks up in the
//! BPF object, checked against it when it is built.
#![no_std]

pub mod bpf_names;
pub mod java_events;
pub mod jvm;
pub mod kernel_names;
pub mod kfunc;
pub mod python;
pub mod ring;
pub mod unwind;

pub use ring::*;
