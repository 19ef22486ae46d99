//! The reference unwinder on a live process's stack: a program built
//! without frame pointers, stopped inside libc, unwound with the tables of
//! its files alone.

use std::{
    collections::HashMap,
    fs,
    os::unix::fs::FileExt,
    path::Path,
    process::{Child, Command},
    time::{Duration, Instant},
};

use super::support::{compile_file, function_symbols, symbol_address, temp_dir, LIBC, STOPPER_C};
use crate::unwind::{
    reference::unwind,
    table::{RowKind, UnwindTable},
};

/// Kills and reaps the test's child however the test ends.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (polling, so a test cannot hang) for a wait status of `pid`.
fn wait_for(pid: libc::pid_t, flags: libc::c_int) -> libc::c_int {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut status = 0;
        // SAFETY: waitpid only writes the status.
        let waited = unsafe { libc::waitpid(pid, &mut status, flags | libc::WNOHANG) };
        assert!(waited >= 0, "waitpid: {}", std::io::Error::last_os_error());
        if waited == pid {
            return status;
        }
        assert!(Instant::now() < deadline, "{pid} did not stop");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A process's executable mapping of a file.
struct Mapping {
    start: u64,
    end: u64,
    path: String,
    /// Virtual address = runtime address - bias.
    bias: u64,
}

/// Stops a program without frame pointers inside libc, reads its registers
/// with ptrace and its stack from /proc/PID/mem, and unwinds it with the
/// executable's and libc's tables alone.
#[test]
fn unwinds_a_real_stack_without_frame_pointers() {
    let table = unwind_stopper("eh", &[]);
    assert_eq!(table.stats.debug_frame_fdes, 0);
}

/// The same with the program's CFI in `.debug_frame` only (as GCC emits it
/// without unwind tables); `_start`'s stays in `.eh_frame`.
#[test]
fn unwinds_with_debug_frame() {
    let table = unwind_stopper("debug", &["-fno-asynchronous-unwind-tables"]);
    assert!(table.stats.debug_frame_fdes >= 4, "{:?}", table.stats);
    assert!(table.stats.debug_frame_fdes < table.stats.fdes);
}

/// Builds [`STOPPER_C`] with `flags`, runs it until it stops, unwinds it
/// and checks the frames; returns the program's table.
fn unwind_stopper(name: &str, flags: &[&str]) -> UnwindTable {
    let dir = temp_dir(name);
    let source = dir.path().join("stopper.c");
    let executable = dir.path().join("stopper");
    fs::write(&source, STOPPER_C).unwrap();
    let status = Command::new("cc")
        .args(["-O2", "-fomit-frame-pointer", "-g"])
        .args(flags)
        .arg("-o")
        .arg(&executable)
        .arg(&source)
        .status()
        .expect("cc runs");
    assert!(status.success());

    let child = Reaper(Command::new(&executable).spawn().unwrap());
    let pid = child.0.id() as libc::pid_t;
    let status = wait_for(pid, libc::WUNTRACED);
    assert!(libc::WIFSTOPPED(status), "status {status:#x}");
    // SAFETY: ptrace on our own stopped child, with a valid register buffer.
    let regs = unsafe {
        let attached = libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0);
        assert_eq!(attached, 0, "{}", std::io::Error::last_os_error());
        wait_for(pid, libc::__WALL);
        let mut regs: libc::user_regs_struct = std::mem::zeroed();
        let got = libc::ptrace(libc::PTRACE_GETREGS, pid, 0, &mut regs);
        assert_eq!(got, 0, "{}", std::io::Error::last_os_error());
        regs
    };

    // Each executable file mapping, with the load bias of its table.
    let mut tables: HashMap<String, UnwindTable> = HashMap::new();
    let mut mappings = Vec::new();
    for line in fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
    {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [range, perms, offset, _, _, path] = fields[..] else {
            continue;
        };
        if !perms.contains('x') || !path.starts_with('/') {
            continue;
        }
        let (start, end) = range.split_once('-').unwrap();
        let start = u64::from_str_radix(start, 16).unwrap();
        let offset = u64::from_str_radix(offset, 16).unwrap();
        let table = tables
            .entry(path.to_string())
            .or_insert_with(|| compile_file(path));
        let vaddr = table.vaddr_of_offset(offset).unwrap();
        mappings.push(Mapping {
            start,
            end: u64::from_str_radix(end, 16).unwrap(),
            path: path.to_string(),
            bias: start - vaddr,
        });
    }
    let mapping_of = |pc: u64| mappings.iter().find(|m| (m.start..m.end).contains(&pc));
    let memory = fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let frames = unwind(
        |pc| {
            let mapping = mapping_of(pc)?;
            tables[&mapping.path].lookup(pc - mapping.bias).copied()
        },
        (regs.rip, regs.rsp, regs.rbp),
        |address| {
            let mut bytes = [0; 8];
            memory.read_exact_at(&mut bytes, address).ok()?;
            Some(u64::from_ne_bytes(bytes))
        },
    );
    // SAFETY: detaching from our tracee.
    unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0) };

    // Name each frame: the address itself for the first, the call's
    // address (return address - 1) for the others.
    let mut symbols: HashMap<String, Vec<(u64, u64, String)>> = HashMap::new();
    let named: Vec<(String, String)> = frames
        .iter()
        .enumerate()
        .map(|(index, &pc)| {
            let address = if index == 0 { pc } else { pc - 1 };
            let Some(mapping) = mapping_of(address) else {
                return ("?".into(), format!("{address:#x}"));
            };
            let vaddr = address - mapping.bias;
            let file = Path::new(&mapping.path)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .to_string();
            let name = symbols
                .entry(mapping.path.clone())
                .or_insert_with(|| function_symbols(&mapping.path))
                .iter()
                .find(|(start, end, _)| (*start..*end).contains(&vaddr))
                .map_or(format!("{vaddr:#x}"), |(_, _, name)| name.clone());
            (file, name)
        })
        .collect();
    eprintln!("unwound: {named:?}");

    let in_program = |(file, _): &(String, String)| file == "stopper";
    let first = named
        .iter()
        .position(in_program)
        .expect("a frame in the program");
    assert!(first >= 1, "the stop is inside libc");
    assert!(
        named[..first].iter().all(|(file, _)| file == "libc.so.6"),
        "{named:?}"
    );
    let names: Vec<&str> = named[first..]
        .iter()
        .map(|(_, name)| name.as_str())
        .collect();
    assert_eq!(names[..4], ["c", "b", "a", "main"], "{named:?}");
    assert_eq!(named[first + 4].0, "libc.so.6");
    let libc_start_main = symbol_address(LIBC, "__libc_start_main");
    if names[4].starts_with("0x") {
        // No debug symbols for libc: __libc_start_call_main is a local
        // function, just before __libc_start_main.
        let vaddr = u64::from_str_radix(&names[4][2..], 16).unwrap();
        assert!(vaddr < libc_start_main);
        assert!(libc_start_main - vaddr < 0x1000);
    } else {
        assert_eq!(names[4], "__libc_start_call_main");
    }
    // The walk reaches the program's entry point, whose CFI ends the stack.
    assert_eq!(
        named.last().unwrap(),
        &("stopper".to_string(), "_start".to_string())
    );
    // And the program's functions really have no frame pointer: `a` and
    // `c` find their CFA from RSP alone, `b` through DRAP.
    let program = executable.to_str().unwrap();
    let table = &tables[program];
    let kinds = |name: &str| -> Vec<RowKind> {
        let (start, end, _) = function_symbols(program)
            .into_iter()
            .find(|(_, _, symbol)| symbol == name)
            .unwrap();
        (start..end)
            .filter_map(|address| table.lookup(address).map(|row| row.kind))
            .collect()
    };
    for name in ["a", "c"] {
        assert!(
            kinds(name).iter().all(|kind| *kind == RowKind::CfaRsp),
            "{name}"
        );
    }
    assert!(kinds("b").contains(&RowKind::CfaRbpDeref));
    drop(child);
    tables.remove(program).unwrap()
}
