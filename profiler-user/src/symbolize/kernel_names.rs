//! Kernel addresses named by the kernel itself: a BPF program of the
//! sampler's object, run on demand, formats each address with `%ps` (see
//! `profiler-ebpf/src/bpf/kernel_names.bpf.h`), so that no recording reads
//! /proc/kallsyms, which costs CPU on every read (the kernel formats over
//! a hundred thousand lines, then stoke parses them) for a few hundred
//! names.

use std::{
    io,
    os::fd::{AsFd, AsRawFd},
};

use aya::{
    maps::{Array, MapData},
    programs::{ProgramFd, RawTracePoint},
    Ebpf,
};
use profiler_common::{
    bpf_names as names,
    kernel_names::{KERNEL_NAMES_BATCH, KERNEL_NAME_LEN},
};

/// The program's name in the sampler's object.
const PROGRAM: &str = names::program::name_kernel_addresses;

/// The loaded namer and its two maps.
pub struct KernelNamer {
    program: ProgramFd,
    addresses: Array<MapData, u64>,
    names: Array<MapData, [u8; KERNEL_NAME_LEN]>,
}

impl KernelNamer {
    /// Loads the namer of the sampler's object `ebpf` and takes its maps;
    /// `None` where the kernel cannot run it (before 5.17).
    pub fn take_from(ebpf: &mut Ebpf) -> Option<Self> {
        let program: &mut RawTracePoint = ebpf.program_mut(PROGRAM)?.try_into().ok()?;
        program.load().ok()?;
        let program = program.fd().ok()?.try_clone().ok()?;
        let addresses = Array::try_from(ebpf.take_map(names::map::kernel_addresses)?).ok()?;
        let names = Array::try_from(ebpf.take_map(names::map::kernel_names)?).ok()?;
        Some(Self {
            program,
            addresses,
            names,
        })
    }

    /// The name of each address, in order: the function's, with
    /// ` [module]` for a module's; the address in hex where the kernel
    /// knows none. `None` if the kernel failed to run the program.
    pub fn name(&mut self, addresses: &[u64]) -> Option<Vec<String>> {
        let mut names = Vec::with_capacity(addresses.len());
        for batch in addresses.chunks(KERNEL_NAMES_BATCH as usize) {
            for (index, &address) in (0..).zip(batch) {
                self.addresses.set(index, address, 0).ok()?;
            }
            run_once(&self.program, batch.len() as u64).ok()?;
            for index in (0..).take(batch.len()) {
                let bytes = self.names.get(&index, 0).ok()?;
                let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
                names.push(String::from_utf8_lossy(&bytes[..end]).into_owned());
            }
        }
        Some(names)
    }
}

/// `BPF_PROG_TEST_RUN`'s part of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// Runs the raw-tracepoint `program` once with `argument` as its first
/// argument. (aya runs only the programs it holds, and the sampler's
/// object holds this one: its descriptor is run here.)
fn run_once(program: &ProgramFd, argument: u64) -> io::Result<()> {
    let arguments = [argument];
    let attr = TestRunAttr {
        prog_fd: program.as_fd().as_raw_fd() as u32,
        ctx_size_in: size_of_val(&arguments) as u32,
        ctx_in: arguments.as_ptr() as u64,
        ..TestRunAttr::default()
    };
    // SAFETY: `attr` is a complete BPF_PROG_TEST_RUN attribute whose only
    // pointer, ctx_in, points at `arguments`, alive for the call.
    let result = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            std::ptr::from_ref(&attr),
            size_of::<TestRunAttr>(),
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
