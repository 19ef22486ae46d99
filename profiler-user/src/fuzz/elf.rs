//! Target `elf`: the unwind-table compiler, the fingerprint and CPython's
//! exports on mutated ELF files. Each input picks a real file (libc, xz,
//! python3.11, small programs built here with `.debug_frame`, plain and
//! zlib-compressed) and edits to make in it, aimed at the parts the parsers
//! read: the ELF, program and section headers, `.eh_frame`,
//! `.eh_frame_hdr`, `.debug_frame`, the notes, `.gnu_debuglink` and the
//! dynamic symbols. The mutated file is compiled on its own, and as the
//! separate debug file of the clean one; what compiles must keep the
//! table's invariants.

use std::{
    collections::hash_map::RandomState, ops::Range, path::PathBuf, process::Command, sync::OnceLock,
};

use bolero::TypeGenerator;
use object::{read::elf::ElfFile64, Object, ObjectSection};

use super::harness::{self, Run};
use crate::{
    elf::{bounded::BoundedFile, debug_file::DebugFile, file::fingerprint},
    interpreter::python,
    unwind::{
        table::{compile, compile_with, COMPILE_TIME_BUDGET},
        tests::support::check_invariants,
    },
};

/// Real files to start from, where present.
const SYSTEM_SEEDS: &[&str] = &[
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/usr/bin/xz",
    "/usr/bin/true",
    "/usr/bin/python3.11",
];

/// A program with functions of several shapes, built here with its CFI in
/// `.debug_frame` (plain and compressed).
const PROGRAM_C: &str = r#"
#include <stdlib.h>
__attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noinline)) long frame(long n) {
    long *v = alloca(16 + (n & 7) * 8);
    v[0] = leaf(n);
    return v[0] + (n > 0 ? frame(n - 1) : 0);
}
int main(int argc, char **argv) { (void)argv; return (int)frame(argc); }
"#;

/// One seed file and the byte ranges worth mutating in it.
struct Seed {
    name: String,
    bytes: Vec<u8>,
    regions: Vec<Range<usize>>,
}

#[derive(Debug, TypeGenerator)]
struct ElfInput {
    seed: u8,
    /// Cut the file to this many bytes (modulo its length).
    truncate: Option<u32>,
    edits: Vec<Edit>,
    /// Also hand the mutated file as the clean file's separate debug file.
    as_debug_file: bool,
}

#[derive(Debug, TypeGenerator)]
struct Edit {
    /// Which region of the seed (modulo their number).
    region: u8,
    /// Where in it (modulo its length).
    at: u32,
    value: Value,
}

#[derive(Debug, TypeGenerator)]
enum Value {
    Byte(u8),
    Word(u32),
    Long(u64),
    /// A value parsers compare against.
    Edge(u8),
    /// Bytes copied from elsewhere in the file.
    Copy {
        from: u32,
        len: u8,
    },
}

const EDGES: [u64; 10] = [
    0,
    1,
    8,
    16,
    0x7f,
    0xff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    u64::MAX,
];

/// The most edits applied from one input.
const MAX_EDITS: usize = 16;

fn seeds() -> &'static [Seed] {
    static SEEDS: OnceLock<Vec<Seed>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut files: Vec<(String, Vec<u8>)> = SYSTEM_SEEDS
            .iter()
            .filter_map(|path| Some((path.to_string(), std::fs::read(path).ok()?)))
            .collect();
        files.extend(built_seeds());
        let seeds: Vec<Seed> = files
            .into_iter()
            .map(|(name, bytes)| Seed {
                regions: regions(&bytes),
                name,
                bytes,
            })
            .collect();
        assert!(
            seeds.iter().any(|seed| seed.name.contains("libc")),
            "no libc to start from"
        );
        seeds
    })
}

/// [`PROGRAM_C`] built with its CFI in `.debug_frame`, plain and zlib- and
/// zstd-compressed (where the compiler can).
fn built_seeds() -> Vec<(String, Vec<u8>)> {
    let dir = std::env::temp_dir().join(format!("stoke-fuzz-elf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("creating the seed directory");
    let source = dir.join("program.c");
    std::fs::write(&source, PROGRAM_C).expect("writing the seed source");
    let mut built = Vec::new();
    for (name, extra) in [
        ("debug-frame", None),
        ("debug-frame-zlib", Some("-gz=zlib")),
        ("debug-frame-zstd", Some("-gz=zstd")),
    ] {
        let output = dir.join(name);
        let status = Command::new("cc")
            .args(["-O2", "-g", "-fno-asynchronous-unwind-tables", "-o"])
            .arg(&output)
            .arg(&source)
            .args(extra)
            // A compiler without zstd says so: that seed is left out.
            .stderr(std::process::Stdio::null())
            .status();
        if status.is_ok_and(|status| status.success()) {
            if let Ok(bytes) = std::fs::read(&output) {
                built.push((name.to_owned(), bytes));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    built
}

/// The whole file, then the headers and the sections the parsers read.
fn regions(bytes: &[u8]) -> Vec<Range<usize>> {
    let mut regions = vec![0..bytes.len(), 0..64.min(bytes.len())];
    let Ok(file) = ElfFile64::<object::Endianness>::parse(bytes) else {
        return regions;
    };
    let header = file.elf_header();
    let endian = file.endian();
    use object::read::elf::FileHeader;
    let ph = header.e_phoff(endian) as usize;
    regions.push(ph..ph + usize::from(header.e_phnum(endian)) * 56);
    let sh = header.e_shoff(endian) as usize;
    regions.push(sh..sh + usize::from(header.e_shnum(endian)) * 64);
    for name in [
        ".eh_frame",
        ".eh_frame_hdr",
        ".debug_frame",
        ".note.gnu.build-id",
        ".gnu_debuglink",
        ".dynsym",
        ".dynstr",
    ] {
        if let Some((start, size)) = file
            .section_by_name(name)
            .and_then(|section| section.file_range())
        {
            regions.push(start as usize..(start + size) as usize);
        }
    }
    regions.retain(|region| !region.is_empty() && region.end <= bytes.len());
    regions
}

fn mutate(seed: &Seed, input: &ElfInput) -> Vec<u8> {
    let mut bytes = seed.bytes.clone();
    for edit in input.edits.iter().take(MAX_EDITS) {
        let region = &seed.regions[usize::from(edit.region) % seed.regions.len()];
        let at = region.start + edit.at as usize % region.len();
        let value: Vec<u8> = match edit.value {
            Value::Byte(byte) => vec![byte],
            Value::Word(word) => word.to_le_bytes().to_vec(),
            Value::Long(long) => long.to_le_bytes().to_vec(),
            Value::Edge(which) => {
                EDGES[usize::from(which) % EDGES.len()].to_le_bytes()[..1 << (which % 4)].to_vec()
            }
            Value::Copy { from, len } => {
                let from = from as usize % bytes.len();
                bytes[from..(from + usize::from(len)).min(bytes.len())].to_vec()
            }
        };
        let end = (at + value.len()).min(bytes.len());
        bytes[at..end].copy_from_slice(&value[..end - at]);
    }
    if let Some(length) = input.truncate {
        bytes.truncate(length as usize % (bytes.len() + 1));
    }
    bytes
}

#[test]
fn elf() {
    let seeds = seeds();
    let run = Run::start("elf");
    let hasher = RandomState::new();
    bolero::check!()
        .with_type::<ElfInput>()
        .with_test_time(harness::budget())
        .with_shrink_time(harness::SHRINK_TIME)
        .for_each(|input| {
            run.input(|| {
                let seed = &seeds[usize::from(input.seed) % seeds.len()];
                let bytes = mutate(seed, input);
                if let Ok(table) = compile(&bytes) {
                    check_invariants(&table);
                }
                if input.as_debug_file {
                    let debug_file = DebugFile {
                        file: harness::memfd(&bytes),
                        path: PathBuf::from("/fuzz.debug"),
                    };
                    let table = compile_with(&seed.bytes, |_| Some(debug_file))
                        .expect("the clean seed compiles");
                    check_invariants(&table);
                }
                // Reads the file through its own bounded reads.
                let bounded = || {
                    BoundedFile::for_debug_file(
                        harness::memfd(&bytes),
                        std::time::Instant::now() + COMPILE_TIME_BUDGET,
                    )
                };
                let _ = fingerprint(bounded(), &hasher);
                let _ = python::read_file(bounded());
            })
        });
}
