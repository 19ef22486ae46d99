//! Off-CPU waits still going on when a recording ends or an interval of
//! `stoke continuous` is cut: the BPF task iterator `offcpu_waiting`
//! (profiler-ebpf's `offcpu_waiting.bpf.h`) sends one off-CPU record into
//! the ring for each profiled thread asleep then, weighed from when it
//! blocked (or from the recording's start, or the last cut), with its
//! kernel stack and the user address it entered the kernel at; the rest of
//! the wait counts at its end or the next cut. Without it, a thread blocked
//! past the end, or since before the start (the deadlocked thread an
//! incident is about), would not show at all.

use std::{fs::File, io::Read};

use anyhow::{Context, Result};
use aya::{programs::Iter, Btf, Ebpf};
use profiler_common::bpf_names as names;

const PROGRAM: &str = names::program::offcpu_waiting;

/// Records the iterator sends between two reads (it writes 8 bytes of
/// output per record, and a read returns once it has the bytes asked
/// for): the ring is drained in between, so that a host with thousands of
/// sleeping threads cannot fill it.
const RECORDS_PER_READ: usize = 256;

/// Loads the iterator (before sampling starts, so that a kernel refusing
/// it fails the recording at once, not at its end).
pub fn load(ebpf: &mut Ebpf, btf: &Btf) -> Result<()> {
    program(ebpf)?
        .load("task", btf)
        .context("loading the task iterator for waits in progress")?;
    Ok(())
}

fn program(ebpf: &mut Ebpf) -> Result<&mut Iter> {
    Ok(ebpf
        .program_mut(PROGRAM)
        .with_context(|| format!("no {PROGRAM} program in the BPF object"))?
        .try_into()?)
}

/// One run of the iterator over every thread of the host.
pub struct WaitsInProgress {
    output: File,
    /// Records sent so far.
    pub waits: u64,
}

impl WaitsInProgress {
    /// Starts a run of the loaded iterator.
    pub fn start(ebpf: &mut Ebpf) -> Result<Self> {
        let iter = program(ebpf)?;
        let link = iter.attach().context("attaching the task iterator")?;
        let output = iter
            .take_link(link)?
            .into_file()
            .context("creating the task iterator")?;
        Ok(Self { output, waits: 0 })
    }

    /// Lets the iterator send its next records into the ring; false once
    /// it has visited every thread.
    pub fn next_batch(&mut self) -> Result<bool> {
        // Each record's weight, 8 bytes: only their number matters here.
        let mut weights = [0u8; RECORDS_PER_READ * 8];
        let read = self
            .output
            .read(&mut weights)
            .context("running the task iterator")?;
        self.waits += (read / 8) as u64;
        Ok(read > 0)
    }
}
