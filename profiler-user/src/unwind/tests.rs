//! Tests on this machine's real files: tables of libc, libjvm, liblzma and
//! xz, checked against readelf, used to unwind a live process's stack, and
//! fed malformed bytes.

use std::{
    collections::HashMap,
    fs,
    os::unix::fs::FileExt,
    path::Path,
    process::{Child, Command},
    time::{Duration, Instant},
};

use object::{read::elf::ElfFile64, Object, ObjectSection, ObjectSymbol};

use super::{
    table::{compile, RbpRule, RowKind, UnwindRow, UnwindTable},
    unwind,
};

pub(super) const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";
const LIBJVM: &str = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
const LIBLZMA: &str = "/lib/x86_64-linux-gnu/liblzma.so.5";
const XZ: &str = "/usr/bin/xz";

pub(super) fn read(path: &str) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

fn compile_file(path: &str) -> UnwindTable {
    let table = compile(&read(path)).unwrap_or_else(|error| panic!("{path}: {error}"));
    check_invariants(&table);
    table
}

/// What the BPF side relies on: sorted rows, no useless row, lookups that
/// agree with the rows.
pub(crate) fn check_invariants(table: &UnwindTable) {
    for pair in table.rows.windows(2) {
        assert!(pair[0].pc < pair[1].pc, "rows out of order: {pair:?}");
        let same = |a: &UnwindRow, b: &UnwindRow| {
            (a.kind, a.cfa_offset, a.rbp, a.rbp_offset)
                == (b.kind, b.cfa_offset, b.rbp, b.rbp_offset)
        };
        assert!(!same(&pair[0], &pair[1]), "rows not merged: {pair:?}");
    }
    if let Some(last) = table.rows.last() {
        assert_eq!(
            last.kind,
            RowKind::NoCfi,
            "the last FDE's end has no gap row"
        );
    }
    for (index, row) in table.rows.iter().enumerate() {
        let address = table.base + u64::from(row.pc);
        let expected = (row.kind != RowKind::NoCfi).then_some(row);
        assert_eq!(table.lookup(address), expected);
        let before = index
            .checked_sub(1)
            .map(|i| &table.rows[i])
            .filter(|row| row.kind != RowKind::NoCfi);
        assert_eq!(table.lookup(address.wrapping_sub(1)), before);
    }
}

/// The share of rows with CFI that a BPF unwinder cannot apply.
fn unsupported_share(table: &UnwindTable) -> f64 {
    let with_cfi = table.rows.len() - table.count(RowKind::NoCfi);
    table.count(RowKind::Unsupported) as f64 / with_cfi.max(1) as f64
}

/// A symbol's address, from the dynamic symbols or the symbol table.
fn symbol_address(path: &str, name: &str) -> u64 {
    let data = read(path);
    let file = ElfFile64::<object::Endianness>::parse(&*data).unwrap();
    file.dynamic_symbols()
        .chain(file.symbols())
        .find(|symbol| symbol.is_definition() && symbol.name() == Ok(name))
        .unwrap_or_else(|| panic!("{path}: no symbol {name}"))
        .address()
}

/// On entry, before any push, the CFA is RSP + 8 (the return address is the
/// only thing the call put on the stack) and RBP is the caller's.
fn assert_entry_row(table: &UnwindTable, path: &str, name: &str) {
    let address = symbol_address(path, name);
    let row = table
        .lookup(address)
        .unwrap_or_else(|| panic!("{path}: no row at {name} ({address:#x})"));
    assert_eq!(
        (row.kind, row.cfa_offset, row.rbp),
        (RowKind::CfaRsp, 8, RbpRule::Unchanged),
        "{path}: {name} at {address:#x}"
    );
}

fn summary(path: &str, table: &UnwindTable) -> String {
    let stats = &table.stats;
    format!(
        "{path}: {} FDEs ({} skipped, {} discarded), {} raw rows -> {} rows \
         ({} gaps, {} PLT, {} end, {} unsupported = {:.2}%), {} KiB",
        stats.fdes,
        stats.skipped_fdes,
        stats.discarded_fdes,
        stats.raw_rows,
        table.rows.len(),
        table.count(RowKind::NoCfi),
        table.count(RowKind::Plt),
        table.count(RowKind::End),
        table.count(RowKind::Unsupported),
        unsupported_share(table) * 100.0,
        table.size_bytes() / 1024,
    )
}

#[test]
fn compiles_libc() {
    let table = compile_file(LIBC);
    eprintln!("{}", summary(LIBC, &table));
    assert!(table.stats.fdes >= 2000, "{:?}", table.stats);
    assert_eq!(table.stats.skipped_fdes, 0);
    assert!(table.rows.len() < table.stats.raw_rows);
    assert!(unsupported_share(&table) < 0.05);
    for name in ["memcpy", "write", "malloc", "__libc_start_main"] {
        assert_entry_row(&table, LIBC, name);
    }
    // The PLT's first entry pushes twice; its rows after that are the
    // classic expression.
    let data = read(LIBC);
    let file = ElfFile64::<object::Endianness>::parse(&*data).unwrap();
    let plt = file.section_by_name(".plt").unwrap().address();
    let row = table.lookup(plt + 0x20).unwrap();
    assert_eq!((row.kind, row.cfa_offset), (RowKind::Plt, 8));
    assert_eq!(table.lookup(plt).unwrap().cfa_offset, 16);
}

#[test]
fn compiles_libjvm() {
    let table = compile_file(LIBJVM);
    eprintln!("{}", summary(LIBJVM, &table));
    assert!(table.stats.fdes >= 10_000, "{:?}", table.stats);
    assert_eq!(table.stats.skipped_fdes, 0);
    assert!(table.rows.len() < table.stats.raw_rows);
    assert!(unsupported_share(&table) < 0.05);
    for name in ["JNI_CreateJavaVM", "JVM_GetStackAccessControlContext"] {
        // HotSpot is built with frame pointers: the entry row is the same.
        assert_entry_row(&table, LIBJVM, name);
    }
}

#[test]
fn compiles_liblzma_and_xz() {
    let table = compile_file(LIBLZMA);
    eprintln!("{}", summary(LIBLZMA, &table));
    assert!(table.stats.fdes >= 100, "{:?}", table.stats);
    assert!(table.rows.len() < table.stats.raw_rows);
    assert!(unsupported_share(&table) < 0.05);
    for name in ["lzma_code", "lzma_stream_decoder"] {
        assert_entry_row(&table, LIBLZMA, name);
    }

    // xz is stripped: its entry point, `_start`, is the one known function.
    // Its CFI ends the stack (`.cfi_undefined rip`).
    let table = compile_file(XZ);
    eprintln!("{}", summary(XZ, &table));
    assert!(table.stats.fdes >= 50, "{:?}", table.stats);
    assert!(unsupported_share(&table) < 0.05);
    let data = read(XZ);
    let entry = ElfFile64::<object::Endianness>::parse(&*data)
        .unwrap()
        .entry();
    assert_eq!(table.lookup(entry).unwrap().kind, RowKind::End);
}

/// Compile time and size; printed, not asserted (run with --nocapture).
#[test]
fn compile_time_and_size() {
    for path in [LIBC, LIBJVM] {
        let data = read(path);
        let start = Instant::now();
        let table = compile(&data).unwrap();
        let elapsed = start.elapsed();
        eprintln!(
            "{path}: {} bytes of ELF -> {} rows, {} bytes of table in {:.1} ms ({})",
            data.len(),
            table.rows.len(),
            table.size_bytes(),
            elapsed.as_secs_f64() * 1000.0,
            if cfg!(debug_assertions) {
                "debug build"
            } else {
                "release build"
            },
        );
    }
}

/// One row of `readelf --debug-dump=frames-interp`: the CFA column and the
/// registers' columns by name.
#[derive(Clone, Debug)]
struct ReadelfRow {
    cfa: String,
    registers: HashMap<String, String>,
}

/// One FDE of readelf's output.
#[derive(Debug)]
struct ReadelfFde {
    cie: String,
    start: u64,
    rows: Vec<(u64, ReadelfRow)>,
}

/// Parses readelf's interpreted frames: the CIEs' last rows (the initial
/// state of FDEs that print no table) and the FDEs' rows.
fn parse_readelf(text: &str) -> (HashMap<String, ReadelfRow>, Vec<ReadelfFde>) {
    let mut cies = HashMap::new();
    let mut fdes = Vec::new();
    // The CIE being read, if the current entry is a CIE.
    let mut cie: Option<String> = None;
    let mut columns: Vec<String> = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [offset, _, _, "CIE", ..] => {
                cie = Some(offset.to_string());
                columns.clear();
            }
            [_, _, _, "FDE", cie_word, pc, ..] => {
                cie = None;
                columns.clear();
                let range = pc.strip_prefix("pc=").unwrap();
                let (start, _) = range.split_once("..").unwrap();
                fdes.push(ReadelfFde {
                    cie: cie_word.strip_prefix("cie=").unwrap().to_string(),
                    start: u64::from_str_radix(start, 16).unwrap(),
                    rows: Vec::new(),
                });
            }
            ["LOC", "CFA", registers @ ..] => {
                columns = registers.iter().map(|r| r.to_string()).collect();
            }
            [location, cfa, values @ ..] if !columns.is_empty() => {
                let Ok(location) = u64::from_str_radix(location, 16) else {
                    continue;
                };
                // "r10 (r10)" is one value of two words.
                let mut merged: Vec<String> = Vec::new();
                for value in values {
                    match merged.last_mut() {
                        Some(last) if value.starts_with('(') => {
                            last.push(' ');
                            last.push_str(value);
                        }
                        _ => merged.push(value.to_string()),
                    }
                }
                let row = ReadelfRow {
                    cfa: cfa.to_string(),
                    registers: columns.iter().cloned().zip(merged).collect(),
                };
                match &cie {
                    Some(cie) => {
                        cies.insert(cie.clone(), row);
                    }
                    None => {
                        let fde = fdes.last_mut().unwrap();
                        // Two rows at one address: the later one applies.
                        if fde.rows.last().is_some_and(|(at, _)| *at == location) {
                            fde.rows.pop();
                        }
                        fde.rows.push((location, row));
                    }
                }
            }
            _ => {}
        }
    }
    (cies, fdes)
}

/// Whether our row says what readelf's row says.
fn agrees(row: Option<&UnwindRow>, readelf: &ReadelfRow) -> bool {
    let Some(row) = row else {
        return false;
    };
    let register = |name: &str| readelf.registers.get(name).map_or("u", |v| v.as_str());
    // A signal trampoline's CFI gives every register, the return address
    // included, by expressions into the signal frame: our Signal row
    // stands for all of them.
    if row.kind == RowKind::Signal {
        return readelf.cfa == "exp" && register("ra") == "exp";
    }
    match register("ra") {
        "c-8" => {}
        // readelf prints "u" for an undefined register.
        "u" => return row.kind == RowKind::End,
        _ => return row.kind == RowKind::Unsupported,
    }
    let offset_of = |text: &str, prefix: &str| -> Option<i64> {
        let rest = text.strip_prefix(prefix)?;
        rest.strip_prefix('+').unwrap_or(rest).parse().ok()
    };
    let cfa_ok = if let Some(offset) = offset_of(&readelf.cfa, "rsp") {
        (row.kind, i64::from(row.cfa_offset)) == (RowKind::CfaRsp, offset)
    } else if let Some(offset) = offset_of(&readelf.cfa, "rbp") {
        (row.kind, i64::from(row.cfa_offset)) == (RowKind::CfaRbp, offset)
    } else if readelf.cfa == "exp" {
        // readelf does not print the expression: any of the kinds an
        // expression can become.
        matches!(
            row.kind,
            RowKind::Plt | RowKind::CfaRbpDeref | RowKind::Unsupported
        )
    } else {
        row.kind == RowKind::Unsupported
    };
    if !cfa_ok {
        return false;
    }
    if row.kind == RowKind::Unsupported {
        return true;
    }
    let rbp = register("rbp");
    match rbp {
        "u" | "s" => row.rbp == RbpRule::Unchanged,
        "exp" => matches!(row.rbp, RbpRule::AtRbp | RbpRule::Unsupported),
        _ => match offset_of(rbp, "c") {
            Some(offset) => (row.rbp, i64::from(row.rbp_offset)) == (RbpRule::AtCfa, offset),
            None => row.rbp == RbpRule::Unsupported,
        },
    }
}

/// Every row of every FDE of libc, as readelf interprets them, against
/// what a lookup in our table gives at the row's address (a superset of
/// the ~200 FDE sample asked for: the whole file costs under a second).
#[test]
fn libc_agrees_with_readelf() {
    let output = Command::new("readelf")
        .args(["--debug-dump=frames-interp", LIBC])
        .output()
        .expect("readelf (binutils) runs");
    // readelf 2.40 exits with 1 on libc without a word on stderr: judge
    // by its output.
    let text = String::from_utf8_lossy(&output.stdout);
    let (cies, fdes) = parse_readelf(&text);
    assert!(!fdes.is_empty(), "no FDE in readelf's output");
    let table = compile_file(LIBC);

    let mut compared_fdes = 0;
    let mut compared_rows = 0;
    let mut disagreements = Vec::new();
    for fde in &fdes {
        // An FDE without instructions prints no table: its CIE's initial
        // row applies at its start.
        let rows = if fde.rows.is_empty() {
            vec![(fde.start, cies[&fde.cie].clone())]
        } else {
            fde.rows.clone()
        };
        compared_fdes += 1;
        for (location, readelf) in &rows {
            compared_rows += 1;
            let ours = table.lookup(*location);
            if !agrees(ours, readelf) {
                disagreements.push(format!("{location:#x}: readelf {readelf:?}, ours {ours:?}"));
            }
        }
    }
    eprintln!("readelf: {compared_fdes} FDEs, {compared_rows} rows compared");
    assert!(compared_fdes >= 2000);
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements[..disagreements.len().min(20)].join("\n")
    );
}

/// The test program: functions without frame pointers, the innermost
/// stopping itself inside libc (raise → pthread_kill → tgkill). `b`
/// realigns its stack, for which GCC keeps the caller's frame address below
/// RBP (DRAP: CFA = *(RBP - 16), RBP saved at *RBP).
pub(super) const STOPPER_C: &str = r#"
#include <signal.h>
#include <string.h>

volatile int sink;

__attribute__((noinline, noclone)) int c(int x) {
    volatile char buffer[200];
    buffer[x % 200] = (char)x;
    raise(SIGSTOP);
    return buffer[(x + 1) % 200] + sink;
}

__attribute__((noinline, noclone)) int b(int x, int n) {
    char aligned[64] __attribute__((aligned(64)));
    char variable[n];
    memset(aligned, x, sizeof aligned);
    memset(variable, x, n);
    return c(x + 1) + aligned[x % 64] + variable[x % n];
}

__attribute__((noinline, noclone)) int a(int x) {
    int r = b(x * 2, x + 10);
    sink = r;
    return r + 2;
}

int main(int argc, char **argv) {
    (void)argv;
    return a(argc) & 1;
}
"#;

/// Removes a test's directory however the test ends.
pub(super) struct TempDir(pub(super) std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

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

/// Function symbols of a file, from its symbol tables and, when installed
/// (libc6-dbg), its separate debug file's: `(start, end, name)`.
pub(super) fn function_symbols(path: &str) -> Vec<(u64, u64, String)> {
    let data = read(path);
    let file = ElfFile64::<object::Endianness>::parse(&*data).unwrap();
    let mut symbols = symbols_of(&file);
    if let Ok(Some(id)) = file.build_id() {
        let hex: String = id.iter().map(|byte| format!("{byte:02x}")).collect();
        let debug = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
        if let Ok(data) = fs::read(debug) {
            symbols.extend(symbols_of(
                &ElfFile64::<object::Endianness>::parse(&*data).unwrap(),
            ));
        }
    }
    symbols
}

fn symbols_of(file: &ElfFile64<'_, object::Endianness>) -> Vec<(u64, u64, String)> {
    file.dynamic_symbols()
        .chain(file.symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .filter_map(|s| {
            Some((
                s.address(),
                s.address() + s.size(),
                s.name().ok()?.to_string(),
            ))
        })
        .collect()
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

/// When `.debug_frame` repeats `.eh_frame` (GNU as's `.cfi_sections
/// .eh_frame, .debug_frame`), the repeats are discarded: the table is the
/// one `.eh_frame` alone gives.
#[test]
fn repeated_debug_frame_changes_nothing() {
    let dir =
        TempDir(std::env::temp_dir().join(format!("stoke-unwind-repeat-{}", std::process::id())));
    fs::create_dir_all(&dir.0).unwrap();
    let source = dir.0.join("stopper.c");
    fs::write(&source, STOPPER_C).unwrap();
    let assembly = dir.0.join("stopper.s");
    let cc = |args: &[&Path]| {
        let status = Command::new("cc").args(args).status().expect("cc runs");
        assert!(status.success());
    };
    cc(&[
        Path::new("-O2"),
        Path::new("-S"),
        Path::new("-o"),
        &assembly,
        &source,
    ]);
    let text = fs::read_to_string(&assembly).unwrap();
    let both = dir.0.join("both.s");
    fs::write(
        &both,
        format!(".cfi_sections .eh_frame, .debug_frame\n{text}"),
    )
    .unwrap();
    let (only_eh, with_debug) = (dir.0.join("only-eh"), dir.0.join("with-debug"));
    cc(&[Path::new("-o"), &only_eh, &assembly]);
    cc(&[Path::new("-o"), &with_debug, &both]);

    let only_eh = compile_file(only_eh.to_str().unwrap());
    let with_debug = compile_file(with_debug.to_str().unwrap());
    assert!(with_debug.stats.fdes >= only_eh.stats.fdes + 4);
    assert_eq!(with_debug.stats.debug_frame_fdes, 0);
    assert_eq!(
        with_debug.stats.discarded_fdes,
        with_debug.stats.fdes - only_eh.stats.fdes
    );
    assert_eq!(with_debug.rows, only_eh.rows);
}

/// Builds [`STOPPER_C`] with `flags`, runs it until it stops, unwinds it
/// and checks the frames; returns the program's table.
fn unwind_stopper(name: &str, flags: &[&str]) -> UnwindTable {
    let dir =
        TempDir(std::env::temp_dir().join(format!("stoke-unwind-{name}-{}", std::process::id())));
    fs::create_dir_all(&dir.0).unwrap();
    let source = dir.0.join("stopper.c");
    let executable = dir.0.join("stopper");
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

/// Reproducible bytes for corrupting files (xorshift64).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}

/// Files come from untrusted processes: malformed bytes give an error or a
/// smaller table, never a panic (nor an endless loop).
#[test]
fn malformed_files_never_panic() {
    assert!(compile(&[]).is_err());
    assert!(compile(b"\x7fELF garbage").is_err());
    let mut noise = Noise(0x5eed_1234_abcd_ef01);
    let garbage: Vec<u8> = (0..4096).map(|_| noise.next() as u8).collect();
    assert!(compile(&garbage).is_err());

    let libc = read(LIBC);
    for length in [
        4,
        16,
        63,
        64,
        65,
        1000,
        4096,
        libc.len() / 2,
        libc.len() - 1,
    ] {
        if let Ok(table) = compile(&libc[..length]) {
            check_invariants(&table);
        }
    }

    // Another architecture: refused, not misread.
    let mut arm = read(XZ);
    arm[18..20].copy_from_slice(&183u16.to_le_bytes()); // EM_AARCH64
    assert!(compile(&arm).is_err());

    // Corrupt .eh_frame (headers intact, so gimli sees the garbage) and,
    // separately, random bytes anywhere.
    let xz = read(XZ);
    let (eh_start, eh_size) = {
        let file = ElfFile64::<object::Endianness>::parse(&*xz).unwrap();
        let section = file.section_by_name(".eh_frame").unwrap();
        let (start, size) = section.file_range().unwrap();
        (start as usize, size as usize)
    };
    let clean = compile(&xz).unwrap();
    // Tens of thousands of rounds found nothing more; this many keeps the
    // test under a second.
    const ROUNDS: usize = 600;
    let mut damaged_tables = 0;
    for round in 0..ROUNDS {
        let mut bytes = xz.clone();
        for _ in 0..1 + noise.below(8) {
            let at = if round % 3 == 2 {
                noise.below(bytes.len())
            } else {
                eh_start + noise.below(eh_size)
            };
            bytes[at] = noise.next() as u8;
        }
        if let Ok(table) = compile(&bytes) {
            check_invariants(&table);
            damaged_tables += usize::from(table.rows != clean.rows);
        }
    }
    eprintln!("{damaged_tables} of {ROUNDS} corrupted files compiled to a different table");
}

/// The merge and gap rules on a real table: a function's rows never extend
/// past its FDE's end when the next function starts later.
#[test]
fn gaps_end_functions() {
    let table = compile_file(LIBLZMA);
    let gaps = table.count(RowKind::NoCfi);
    assert!(gaps >= 1);
    for (index, row) in table.rows.iter().enumerate() {
        if row.kind == RowKind::NoCfi && index + 1 < table.rows.len() {
            // Inside a gap, nothing applies; right after it, the next FDE.
            let at = table.base + u64::from(row.pc);
            assert!(table.lookup(at).is_none());
            let next = table.base + u64::from(table.rows[index + 1].pc);
            assert!(table.lookup(next).is_some());
        }
    }
}
