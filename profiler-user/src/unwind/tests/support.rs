//! What the unwinder's tests share: this machine's real files, the test
//! program they build, and the invariants every table keeps.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use object::{read::elf::ElfFile64, Object, ObjectSymbol};
use tempfile::TempDir;

use crate::unwind::{
    pages,
    table::{compile, RowKind, UnwindRow, UnwindTable},
};

/// This machine's libc.
pub const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

/// A fresh directory for a test's files, removed however the test ends.
pub fn temp_dir(label: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("stoke-unwind-{label}-"))
        .tempdir()
        .expect("a temporary directory")
}

/// The bytes of the file at `path`.
pub fn read(path: &str) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// The table of the file at `path`, checked against [`check_invariants`].
pub fn compile_file(path: &str) -> UnwindTable {
    let table = compile(&read(path)).unwrap_or_else(|error| panic!("{path}: {error}"));
    check_invariants(&table);
    table
}

/// What the BPF side relies on: sorted rows, no useless row, lookups that
/// agree with the rows, through the page index as without it.
pub fn check_invariants(table: &UnwindTable) {
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
    let Some(index) = pages::page_index(&table.rows) else {
        return;
    };
    let page_starts = (0..index.pages.len() as u32).map(|page| page << index.shift);
    let row_pcs = table.rows.iter().map(|row| row.pc);
    for pc in page_starts
        .chain(row_pcs)
        .flat_map(|pc| [pc, pc.wrapping_sub(1)])
    {
        let whole = table
            .rows
            .partition_point(|row| row.pc <= pc)
            .checked_sub(1);
        assert_eq!(
            pages::find_row(&table.rows, &index, pc),
            whole,
            "at {pc:#x}"
        );
    }
}

/// A symbol's address, from the dynamic symbols or the symbol table.
pub fn symbol_address(path: &str, name: &str) -> u64 {
    let data = read(path);
    let file = ElfFile64::<object::Endianness>::parse(&*data).unwrap();
    file.dynamic_symbols()
        .chain(file.symbols())
        .find(|symbol| symbol.is_definition() && symbol.name() == Ok(name))
        .unwrap_or_else(|| panic!("{path}: no symbol {name}"))
        .address()
}

/// Function symbols of a file, from its symbol tables and, when installed
/// (libc6-dbg), its separate debug file's: `(start, end, name)`.
pub fn function_symbols(path: &str) -> Vec<(u64, u64, String)> {
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

/// The test program: functions without frame pointers, the innermost
/// stopping itself inside libc (raise → pthread_kill → tgkill). `b`
/// realigns its stack, for which GCC keeps the caller's frame address below
/// RBP (DRAP: CFA = *(RBP - 16), RBP saved at *RBP).
pub const STOPPER_C: &str = r#"
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

/// No `.eh_frame` for the program's own functions: CFI in `.debug_frame`
/// only (`_start`, from crt1.o, keeps its `.eh_frame`).
const FLAGS: &[&str] = &[
    "-O2",
    "-fomit-frame-pointer",
    "-fno-asynchronous-unwind-tables",
    "-fno-unwind-tables",
    "-g",
];

/// Runs `program` with `args`, which must succeed.
pub fn run(program: &str, args: &[&Path]) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("running {program}: {error}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Builds [`STOPPER_C`] into `dir/name` with [`FLAGS`] and `extra`.
pub fn build(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let source = dir.join("stopper.c");
    fs::write(&source, STOPPER_C).unwrap();
    let program = dir.join(name);
    let status = Command::new("cc")
        .args(FLAGS)
        .args(extra)
        .arg("-o")
        .arg(&program)
        .arg(&source)
        .status()
        .expect("cc runs");
    assert!(status.success());
    program
}

/// Splits `program` as Debian does: its DWARF into `debug`, stripped of
/// it, and a `.gnu_debuglink` to `debug` (whose CRC32 it records). When
/// `compress` is given, the debug file's sections are compressed with it
/// first.
pub fn split(program: &Path, debug: &Path, compress: Option<&str>) {
    run("objcopy", &[Path::new("--only-keep-debug"), program, debug]);
    if let Some(format) = compress {
        let option = format!("--compress-debug-sections={format}");
        run("objcopy", &[Path::new(&option), debug]);
    }
    run("strip", &[Path::new("--strip-debug"), program]);
    let option = format!("--add-gnu-debuglink={}", debug.display());
    run("objcopy", &[Path::new(&option), program]);
}
