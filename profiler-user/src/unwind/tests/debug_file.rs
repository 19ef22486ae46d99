//! Separate debug files and compressed `.debug_frame`, on programs built
//! here without unwind tables (their only CFI is in `.debug_frame`) and
//! split the way distributions split them.

use std::{
    fs,
    path::{Path, PathBuf},
};

use object::{read::elf::ElfFile64, Object, ObjectSection};

use super::support::{build, check_invariants, function_symbols, read, run, split, temp_dir, LIBC};
use crate::{
    elf::debug_file::{find, DebugFile, DebugLinks},
    rootfs::Root,
    unwind::table::{compile, compile_with, UnwindTable},
};

/// The program's own functions.
const FUNCTIONS: &[&str] = &["a", "b", "c", "main"];

/// Compiles `program` with its debug file looked up in `root`, the program
/// being at `path` there.
fn compile_in(program: &Path, root: &Root, path: &Path) -> UnwindTable {
    let table = compile_with(&read(program.to_str().unwrap()), |links| {
        find(root, Some(path), links)
    })
    .unwrap();
    check_invariants(&table);
    table
}

/// Compiles `program` with `debug` as its debug file, however it looks.
fn compile_with_file(program: &Path, debug: &Path) -> UnwindTable {
    let table = compile_with(&read(program.to_str().unwrap()), |_| {
        Some(DebugFile {
            file: fs::File::open(debug).unwrap(),
            path: debug.to_owned(),
        })
    })
    .unwrap();
    check_invariants(&table);
    table
}

/// Of the program's own functions, those whose entry has a row.
fn covered(table: &UnwindTable, program: &Path) -> Vec<&'static str> {
    let symbols = function_symbols(program.to_str().unwrap());
    FUNCTIONS
        .iter()
        .copied()
        .filter(|name| {
            let (start, _, _) = symbols
                .iter()
                .find(|(_, _, symbol)| symbol == name)
                .unwrap_or_else(|| panic!("no function {name}"));
            table.lookup(*start).is_some()
        })
        .collect()
}

fn build_id_path(program: &Path) -> PathBuf {
    let data = read(program.to_str().unwrap());
    let file = ElfFile64::<object::Endianness>::parse(&*data).unwrap();
    let id = file.build_id().unwrap().expect("cc links with a build ID");
    let hex: String = id.iter().map(|byte| format!("{byte:02x}")).collect();
    PathBuf::from(format!(
        "usr/lib/debug/.build-id/{}/{}.debug",
        &hex[..2],
        &hex[2..]
    ))
}

/// The stripped program's table covers none of its functions; with the
/// debug file next to it, in `.debug/`, or under `/usr/lib/debug/`, all.
#[test]
fn debuglink_finds_the_debug_file_and_covers_the_program() {
    let dir = temp_dir("link");
    let program = build(dir.path(), "prog", &[]);
    let unstripped = compile(&read(program.to_str().unwrap())).unwrap();
    assert_eq!(
        covered(&unstripped, &program),
        FUNCTIONS,
        "before splitting"
    );
    let debug = dir.path().join("prog.debug");
    split(&program, &debug, None);

    let alone = compile(&read(program.to_str().unwrap())).unwrap();
    assert!(covered(&alone, &program).is_empty(), "{:?}", alone.stats);
    assert_eq!(alone.stats.debug_frame_fdes, 0);

    let host = Root::host().unwrap();
    let with = compile_in(&program, &host, &program);
    eprintln!(
        "stripped: {} rows; with its debug file: {} rows, {:?}",
        alone.rows.len(),
        with.rows.len(),
        with.stats
    );
    assert_eq!(with.debug_file.as_deref(), Some(debug.as_path()));
    assert_eq!(covered(&with, &program), FUNCTIONS);
    assert!(with.stats.debug_file_fdes >= FUNCTIONS.len());
    // What the unstripped program's own .debug_frame gave.
    assert_eq!(with.rows, unstripped.rows);

    // In the .debug subdirectory.
    fs::create_dir(dir.path().join(".debug")).unwrap();
    let in_subdirectory = dir.path().join(".debug/prog.debug");
    fs::rename(&debug, &in_subdirectory).unwrap();
    let with = compile_in(&program, &host, &program);
    assert_eq!(with.debug_file.as_deref(), Some(in_subdirectory.as_path()));
    assert_eq!(covered(&with, &program), FUNCTIONS);

    // Under /usr/lib/debug/ followed by the program's directory, in a
    // container's root: the program is /opt/app/prog there.
    let root = dir.path().join("root");
    let global = root.join("usr/lib/debug/opt/app/prog.debug");
    fs::create_dir_all(global.parent().unwrap()).unwrap();
    fs::rename(&in_subdirectory, &global).unwrap();
    let container = Root::at(&root).unwrap();
    let with = compile_in(&program, &container, Path::new("/opt/app/prog"));
    assert_eq!(
        with.debug_file.as_deref(),
        Some(Path::new("/usr/lib/debug/opt/app/prog.debug"))
    );
    assert_eq!(covered(&with, &program), FUNCTIONS);
    // That root is not the host's: on the host, nothing.
    let without = compile_in(&program, &host, &program);
    assert_eq!(without.debug_file, None);
    assert_eq!(without.rows, alone.rows);
}

/// `prog` built in `dir` and split into `prog` + `prog.debug`, and the
/// debug file of another build of it (`-O1`): `(prog, its debug file, the
/// other's debug file)`.
fn two_builds(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let program = build(dir, "prog", &[]);
    let debug = dir.join("prog.debug");
    split(&program, &debug, None);
    let other_dir = dir.join("other");
    fs::create_dir(&other_dir).unwrap();
    let other = build(&other_dir, "prog", &["-O1"]);
    let other_debug = other_dir.join("prog.debug");
    split(&other, &other_debug, None);
    (program, debug, other_debug)
}

/// A debug file whose CRC32 is not the one `.gnu_debuglink` records (one
/// of another build) is not read.
#[test]
fn debuglink_checksum_mismatch_is_ignored() {
    let dir = temp_dir("crc");
    let (program, debug, other_debug) = two_builds(dir.path());
    // Without its build ID note, only the checksum tells it apart.
    run(
        "objcopy",
        &[
            Path::new("--remove-section=.note.gnu.build-id"),
            &other_debug,
            &debug,
        ],
    );

    let host = Root::host().unwrap();
    let table = compile_in(&program, &host, &program);
    assert_eq!(table.debug_file, None, "{:?}", table.stats);
    // Refused by the lookup, not read.
    assert_eq!(table.stats.debug_file_errors, 0);
    assert!(covered(&table, &program).is_empty());
    assert_eq!(table.stats.debug_frame_fdes, 0);
}

/// By build ID, inside a container's root: found; one of another build at
/// that path is refused; a symlink out of the root leads nowhere, one
/// inside it is followed.
#[test]
fn build_id_lookup_stays_in_the_root() {
    let dir = temp_dir("build-id");
    let (program, debug, other_debug) = two_builds(dir.path());

    let root = dir.path().join("root");
    let by_id = root.join(build_id_path(&program));
    fs::create_dir_all(by_id.parent().unwrap()).unwrap();
    let container = Root::at(&root).unwrap();
    // The program's own directory is not in this root: only the build ID
    // can find the debug file.
    let in_root = Path::new("/opt/prog");
    let absolute = Path::new("/").join(build_id_path(&program));

    fs::copy(&debug, &by_id).unwrap();
    let table = compile_in(&program, &container, in_root);
    assert_eq!(table.debug_file.as_deref(), Some(absolute.as_path()));
    assert_eq!(covered(&table, &program), FUNCTIONS);

    fs::copy(&other_debug, &by_id).unwrap();
    let table = compile_in(&program, &container, in_root);
    assert_eq!(table.stats.debug_file_errors, 1, "{:?}", table.stats);
    assert_eq!(table.debug_file, None);
    assert!(covered(&table, &program).is_empty());

    // Debian's build-id entries are relative symlinks: followed inside.
    fs::remove_file(&by_id).unwrap();
    let real = root.join("usr/lib/debug/real/prog.debug");
    fs::create_dir_all(real.parent().unwrap()).unwrap();
    fs::copy(&debug, &real).unwrap();
    std::os::unix::fs::symlink("../../real/prog.debug", &by_id).unwrap();
    let table = compile_in(&program, &container, in_root);
    assert_eq!(covered(&table, &program), FUNCTIONS);

    // The host's path of the debug file means another file in the root.
    fs::remove_file(&by_id).unwrap();
    std::os::unix::fs::symlink(&debug, &by_id).unwrap();
    let table = compile_in(&program, &container, in_root);
    assert_eq!(table.debug_file, None);
    assert!(covered(&table, &program).is_empty());
}

/// Broken debug files are left out and leave the program's own table as it
/// was.
#[test]
fn hostile_debug_files_leave_the_table_alone() {
    let dir = temp_dir("hostile");
    let program = build(dir.path(), "prog", &[]);
    let debug = dir.path().join("prog.debug");
    split(&program, &debug, None);
    let alone = compile(&read(program.to_str().unwrap())).unwrap();
    let good = read(debug.to_str().unwrap());

    let bad = dir.path().join("bad.debug");
    let mut noise = 0x1234_5678_9abc_def1_u64;
    let mut next = move || {
        noise ^= noise << 13;
        noise ^= noise >> 7;
        noise ^= noise << 17;
        noise
    };
    let mut arm = good.clone();
    arm[18..20].copy_from_slice(&183u16.to_le_bytes()); // EM_AARCH64
    let mut wild_sections = good.clone();
    wild_sections[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes()); // e_shoff
    let garbage: Vec<u8> = (0..4096).map(|_| next() as u8).collect();
    for (what, bytes) in [
        ("empty", Vec::new()),
        ("garbage", garbage),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("header only", good[..64].to_vec()),
        ("another architecture", arm),
        ("section headers out of the file", wild_sections),
    ] {
        fs::write(&bad, &bytes).unwrap();
        let table = compile_with_file(&program, &bad);
        assert_eq!(table.rows, alone.rows, "{what}: {:?}", table.stats);
        assert_eq!(table.debug_file_or_error(), Err(()), "{what}");
    }

    // Random bytes in .debug_frame: whatever its FDEs become, no panic, a
    // valid table, and the program's own .eh_frame rows (crt1.o's
    // `_start`) win.
    let (start, size) = {
        let file = ElfFile64::<object::Endianness>::parse(&*good).unwrap();
        let section = file.section_by_name(".debug_frame").unwrap();
        let (start, size) = section.file_range().unwrap();
        (start as usize, size as usize)
    };
    let start_symbol = function_symbols(program.to_str().unwrap())
        .into_iter()
        .find(|(_, _, name)| name == "_start")
        .unwrap();
    for _ in 0..200 {
        let mut bytes = good.clone();
        for _ in 0..1 + next() % 8 {
            bytes[start + (next() as usize) % size] = next() as u8;
        }
        fs::write(&bad, &bytes).unwrap();
        let table = compile_with_file(&program, &bad);
        // Rows' addresses are relative to the first FDE, which the damage
        // may move: compare rules.
        let rule = |table: &UnwindTable, address: u64| {
            table
                .lookup(address)
                .map(|row| (row.kind, row.cfa_offset, row.rbp, row.rbp_offset))
        };
        for address in start_symbol.0..start_symbol.1 {
            assert_eq!(rule(&table, address), rule(&alone, address));
        }
    }
}

impl UnwindTable {
    /// `Ok` if a debug file was read, `Err` if one was found and refused.
    fn debug_file_or_error(&self) -> Result<(), ()> {
        match (&self.debug_file, self.stats.debug_file_errors) {
            (Some(_), 0) => Ok(()),
            (None, 1) => Err(()),
            other => panic!("debug file and errors disagree: {other:?}"),
        }
    }
}

/// `SHF_COMPRESSED` `.debug_frame` sections (zlib, zstd), in the file and
/// in its debug file, read as the uncompressed one; broken ones counted.
#[test]
fn compressed_debug_frame_is_read() {
    let dir = temp_dir("compressed");
    let program = build(dir.path(), "prog", &[]);
    let plain = compile(&read(program.to_str().unwrap())).unwrap();
    assert_eq!(plain.stats.decompressed_sections, 0);
    assert_eq!(covered(&plain, &program), FUNCTIONS);
    for format in ["zlib", "zstd"] {
        let compressed = dir.path().join(format!("prog-{format}"));
        let option = format!("--compress-debug-sections={format}");
        run("objcopy", &[Path::new(&option), &program, &compressed]);
        let bytes = read(compressed.to_str().unwrap());
        let table = compile(&bytes).unwrap();
        check_invariants(&table);
        assert_eq!(table.stats.decompressed_sections, 1, "{format}");
        assert_eq!(table.stats.decompression_errors, 0, "{format}");
        assert_eq!(table.rows, plain.rows, "{format}");

        // The compression header (Elf64_Chdr: type, reserved, size,
        // alignment), then the compressed bytes.
        let start = {
            let file = ElfFile64::<object::Endianness>::parse(&*bytes).unwrap();
            let section = file.section_by_name(".debug_frame").unwrap();
            section.file_range().unwrap().0 as usize
        };
        let size_field = start + 8..start + 16;
        let true_size = u64::from_le_bytes(bytes[size_field.clone()].try_into().unwrap());
        for (what, damage) in [
            ("huge size", 1u64 << 40),
            ("short size", true_size - 1),
            ("long size", true_size + 1),
        ] {
            let mut broken = bytes.clone();
            broken[size_field.clone()].copy_from_slice(&damage.to_le_bytes());
            let table = compile(&broken).unwrap();
            assert_eq!(table.stats.decompression_errors, 1, "{format}: {what}");
            assert!(covered(&table, &program).is_empty(), "{format}: {what}");
        }
        let mut broken = bytes.clone();
        broken[start..start + 4].copy_from_slice(&7u32.to_le_bytes());
        let table = compile(&broken).unwrap();
        assert_eq!(
            table.stats.decompression_errors, 1,
            "{format}: unknown type"
        );
        let mut broken = bytes.clone();
        broken[start + 24..start + 32].fill(0xff);
        let table = compile(&broken).unwrap();
        assert_eq!(table.stats.decompression_errors, 1, "{format}: bad data");
    }

    // A compressed separate debug file.
    let stripped = dir.path().join("stripped");
    fs::copy(&program, &stripped).unwrap();
    split(&stripped, &dir.path().join("stripped.debug"), Some("zlib"));
    let table = compile_in(&stripped, &Root::host().unwrap(), &stripped);
    assert_eq!(table.stats.decompressed_sections, 1, "{:?}", table.stats);
    assert_eq!(covered(&table, &stripped), FUNCTIONS);
    assert_eq!(table.rows, plain.rows);
}

/// libc6-dbg (`cargo xtask setup` installs it) puts libc's debug file under
/// `/usr/lib/debug/.build-id/`; the lookup finds it there. Debian's has no
/// `.debug_frame` (libc's CFI is all in `.eh_frame`): the table stays the
/// same.
#[test]
fn finds_libcs_debug_file_by_build_id() {
    assert!(
        Path::new("/usr/lib/debug/.build-id").is_dir(),
        "/usr/lib/debug/.build-id is missing: install libc6-dbg (cargo xtask setup)"
    );
    let real = fs::canonicalize(LIBC).unwrap();
    let bytes = read(LIBC);
    let mut links_seen = None;
    let table = compile_with(&bytes, |links: &DebugLinks<'_>| {
        links_seen = Some((
            links.build_id.map(<[u8]>::to_vec),
            links.debuglink.is_some(),
        ));
        find(&Root::host().unwrap(), Some(&real), links)
    })
    .unwrap();
    check_invariants(&table);
    let (build_id, has_debuglink) = links_seen.expect("libc names its debug file");
    assert!(has_debuglink);
    let hex: String = build_id
        .expect("libc has a build ID")
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let expected = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
    assert_eq!(
        table.debug_file.as_deref(),
        Some(Path::new(&expected)),
        "{:?}",
        table.stats
    );
    assert_eq!(table.stats.debug_file_errors, 0);
    let alone = compile(&bytes).unwrap();
    eprintln!(
        "libc: {} rows alone, {} with {expected} ({} of its FDEs used)",
        alone.rows.len(),
        table.rows.len(),
        table.stats.debug_file_fdes
    );
    assert!(table.rows.len() >= alone.rows.len());
}
