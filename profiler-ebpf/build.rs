//! Compiles `src/bpf/sampler.bpf.c` (every BPF program of stoke's) with
//! clang `-target bpf` into the objects that `lib.rs` embeds: one with the
//! off-CPU programs (`STOKE_OFFCPU` defined), one without. The compiler is
//! `$CLANG`, else `clang-19`, else `clang`. The first must define every
//! name userspace looks up (`profiler_common::bpf_names`).

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

use object::{Object, ObjectSymbol};

const SOURCE: &str = "src/bpf/sampler.bpf.c";

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    // A directory is watched whole: every header the program includes.
    for watched in ["src/bpf", "../profiler-common/include/stoke_abi.h"] {
        println!("cargo:rerun-if-changed={watched}");
    }
    println!("cargo:rerun-if-env-changed=CLANG");

    let clang = find_tool("CLANG", &["clang-19", "clang"]).unwrap_or_else(|| {
        fail("no clang found: install clang-19 (apt-get install clang-19 llvm-19 libbpf-dev) or set CLANG")
    });
    let strip = find_tool("LLVM_STRIP", &["llvm-strip-19", "llvm-strip"]);
    for (object, defines) in [
        ("sampler.bpf.o", &["-DSTOKE_OFFCPU"][..]),
        ("sampler_cpu.bpf.o", &[][..]),
    ] {
        compile(
            &clang,
            strip.as_deref(),
            &manifest,
            defines,
            &out_dir.join(object),
        );
    }
    check_names(&out_dir.join("sampler.bpf.o"));
}

/// Fails unless the object at `path` defines every name of
/// `profiler_common::bpf_names`.
fn check_names(path: &Path) {
    let bytes = fs::read(path).unwrap_or_else(|error| fail(&format!("reading {path:?}: {error}")));
    let file = object::File::parse(&*bytes)
        .unwrap_or_else(|error| fail(&format!("parsing {path:?}: {error}")));
    let defined: Vec<&str> = file
        .symbols()
        .filter(|symbol| symbol.is_definition())
        .filter_map(|symbol| symbol.name().ok())
        .collect();
    let missing: Vec<&str> = profiler_common::bpf_names::ALL
        .iter()
        .copied()
        .filter(|name| !defined.contains(name))
        .collect();
    if !missing.is_empty() {
        fail(&format!(
            "{SOURCE} defines no {}: profiler-common/src/bpf_names.rs and the BPF code disagree",
            missing.join(", ")
        ));
    }
}

/// Compiles the sampler with `defines` into `out`, then strips its DWARF.
fn compile(clang: &str, strip: Option<&str>, manifest: &Path, defines: &[&str], out: &Path) {
    let abi_include = manifest.join("../profiler-common/include");
    let status = Command::new(clang)
        .args([
            "-target",
            "bpf",
            "-D__TARGET_ARCH_x86",
            "-g",
            "-O2",
            "-Wall",
            "-Werror",
        ])
        .args(defines)
        .arg("-I")
        .arg(&abi_include)
        .arg("-c")
        .arg(manifest.join(SOURCE))
        .arg("-o")
        .arg(out)
        .status()
        .unwrap_or_else(|error| fail(&format!("running {clang}: {error}")));
    if !status.success() {
        fail(&format!(
            "{clang} failed to compile {SOURCE}; <bpf/bpf_helpers.h> comes from libbpf-dev"
        ));
    }
    // DWARF is only for humans; BTF (which CO-RE needs) survives `-g`.
    if let Some(strip) = strip {
        let stripped = Command::new(strip).arg("-g").arg(out).status();
        if !stripped.is_ok_and(|status| status.success()) {
            fail("llvm-strip failed on the BPF object");
        }
    }
}

fn find_tool(variable: &str, candidates: &[&str]) -> Option<String> {
    if let Some(chosen) = env::var_os(variable) {
        return Some(chosen.to_string_lossy().into_owned());
    }
    candidates
        .iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(|name| name.to_string())
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1);
}
