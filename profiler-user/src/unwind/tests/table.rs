//! Tables of this machine's real files (libc, libjvm, liblzma, xz): what
//! they cover, how they merge, and what malformed bytes do to them.

use std::{fs, path::Path, process::Command, time::Instant};

use object::{read::elf::ElfFile64, Object, ObjectSection, ObjectSymbol};

use super::support::{
    check_invariants, compile_file, read, symbol_address, temp_dir, LIBC, STOPPER_C,
};
use crate::{
    elf::file::{self as elf_file, ElfFile},
    unwind::table::{compile, RbpRule, RowKind, Rule, UnwindTable},
};

const LIBJVM: &str = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
const LIBLZMA: &str = "/lib/x86_64-linux-gnu/liblzma.so.5";
const XZ: &str = "/usr/bin/xz";

/// The share of rows with CFI that a BPF unwinder cannot apply.
fn unsupported_share(table: &UnwindTable) -> f64 {
    let with_cfi = table.rows.len() - table.count(RowKind::NoCfi);
    table.count(RowKind::Unsupported) as f64 / with_cfi.max(1) as f64
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

/// When `.debug_frame` repeats `.eh_frame` (GNU as's `.cfi_sections
/// .eh_frame, .debug_frame`), the repeats are discarded: the table is the
/// one `.eh_frame` alone gives.
#[test]
fn repeated_debug_frame_changes_nothing() {
    let dir = temp_dir("repeat");
    let source = dir.path().join("stopper.c");
    fs::write(&source, STOPPER_C).unwrap();
    let assembly = dir.path().join("stopper.s");
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
    let both = dir.path().join("both.s");
    fs::write(
        &both,
        format!(".cfi_sections .eh_frame, .debug_frame\n{text}"),
    )
    .unwrap();
    let (only_eh, with_debug) = (dir.path().join("only-eh"), dir.path().join("with-debug"));
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

/// This test binary is linked by lld (Rust's default linker), whose code
/// segment starts inside a page of read-only data, one page further in
/// memory than in the file: the executable mapping's offset lies in the
/// segment before. Its load bias must still place its functions at their
/// symbols' addresses (it was off by that page: 90% of a Rust program's
/// stacks stopped at their first caller).
#[test]
fn a_mapping_that_begins_in_a_page_shared_with_read_only_data_gets_its_bias() {
    let exe = std::env::current_exe().unwrap();
    let path = exe.to_str().unwrap();
    let table = compile_file(path);
    let maps = fs::read_to_string("/proc/self/maps").unwrap();
    let (start, offset) = maps
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.len() == 6 && fields[1].contains('x') && fields[5] == path)
        .map(|fields| {
            let start = fields[0].split('-').next().unwrap();
            (
                u64::from_str_radix(start, 16).unwrap(),
                u64::from_str_radix(fields[2], 16).unwrap(),
            )
        })
        .expect("this binary's code mapping");
    let bias = start - table.vaddr_of_offset(offset).unwrap();
    let here = a_mapping_that_begins_in_a_page_shared_with_read_only_data_gets_its_bias as *const ()
        as u64;
    let data = read(path);
    let elf = ElfFile64::<object::Endianness>::parse(&*data).unwrap();
    let named = elf
        .symbols()
        .find(|symbol| symbol.address() == here - bias)
        .and_then(|symbol| symbol.name().ok().map(str::to_owned));
    assert!(
        named
            .as_deref()
            .is_some_and(|name| name.contains("shared_with_read_only_data")),
        "the code at {here:#x} (bias {bias:#x}, mapping offset {offset:#x}) is {named:?}"
    );
}

/// Offsets become the addresses of their segment: the first and last
/// bytes of the file's segments, and every byte of code; an offset no
/// segment holds has none; a file that is no ELF file has no segments.
#[test]
fn offsets_become_the_addresses_of_their_segment() {
    let data = read(std::env::current_exe().unwrap().to_str().unwrap());
    let segments = ElfFile::parse(&*data).unwrap().load_segments().unwrap();
    let (first, last) = (segments[0], segments[segments.len() - 1]);
    assert_eq!(
        elf_file::vaddr_of_offset(&segments, first.offset),
        Some(first.vaddr)
    );
    let end = last.offset + last.file_size - 1;
    assert_eq!(
        elf_file::vaddr_of_offset(&segments, end),
        Some(last.vaddr + last.file_size - 1)
    );
    for code in segments.iter().filter(|segment| segment.executable) {
        for offset in [code.offset, code.offset + code.file_size - 1] {
            assert_eq!(
                elf_file::vaddr_of_offset(&segments, offset),
                Some(code.vaddr + offset - code.offset)
            );
        }
    }
    assert_eq!(elf_file::vaddr_of_offset(&segments, u64::MAX), None);
    let status = fs::read("/proc/self/status").unwrap();
    assert!(ElfFile::parse(&*status).is_err());
}

/// Rules are kept as the BPF map holds them from the moment they are
/// evaluated: one that does not fit (a frame of a megabyte, an RBP saved
/// off an 8-byte word) is unsupported, where the unwinder stops, never a
/// wrong offset; the others come back unchanged.
#[test]
fn rules_are_kept_as_the_unwinder_reads_them() {
    let rule = |kind, cfa_offset, rbp, rbp_offset| Rule {
        kind,
        cfa_offset,
        rbp,
        rbp_offset,
    };
    let unsupported = rule(RowKind::Unsupported, 0, RbpRule::Unsupported, 0);
    for (evaluated, kept) in [
        (
            rule(RowKind::CfaRsp, 1 << 20, RbpRule::Unchanged, 0),
            unsupported,
        ),
        (rule(RowKind::CfaRbp, 16, RbpRule::AtCfa, -20), unsupported),
        (
            rule(RowKind::CfaRsp, 8, RbpRule::Unchanged, 0),
            rule(RowKind::CfaRsp, 8, RbpRule::Unchanged, 0),
        ),
        (
            rule(RowKind::CfaRbp, 16, RbpRule::AtCfa, -16),
            rule(RowKind::CfaRbp, 16, RbpRule::AtCfa, -16),
        ),
    ] {
        assert_eq!(Rule::unpacked(evaluated.packed()), kept, "{evaluated:?}");
    }
}
