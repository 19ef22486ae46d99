//! Kernel and user probes as events: `-e kprobe:FUNC` counts the calls of
//! a kernel function, `-e uprobe:PATH:SYMBOL` those of a function of an ELF
//! file, `-e SYSTEM:NAME` the hits of a kernel tracepoint, each by the stack
//! that reached it.

use std::{fmt, fs::File, io::Read, path::PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol};

/// The most of an ELF file read to find a symbol.
const MAX_ELF_BYTES: u64 = 1 << 30;

/// A probe `-e` names.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Probe {
    /// Its name in titles and file names: `kprobe-FUNC`, `uprobe-SYMBOL`
    /// (characters other than letters, digits, `_` and `-` as `_`).
    name: String,
    /// Where it is.
    pub target: ProbeTarget,
}

/// Where a probe is.
#[derive(Debug, PartialEq, Eq, Hash)]
pub enum ProbeTarget {
    /// The entry of a kernel function.
    Kernel {
        /// The function's name.
        function: String,
    },
    /// A kernel tracepoint.
    Tracepoint {
        /// Its system, e.g. `sched`.
        system: String,
        /// Its name, e.g. `sched_switch`.
        name: String,
    },
    /// An instruction of an ELF file, in every process that maps it.
    User {
        /// The file.
        path: PathBuf,
        /// The symbol's offset in the file.
        offset: u64,
    },
}

impl Probe {
    /// The probe `spec` names (`kprobe:FUNC`, `uprobe:PATH:SYMBOL`), if it
    /// names one; an error says what is wrong with it.
    pub fn parse(spec: &str) -> Option<Result<Self, String>> {
        if let Some(function) = spec.strip_prefix("kprobe:") {
            return Some(kernel(function));
        }
        let Some(rest) = spec.strip_prefix("uprobe:") else {
            return tracepoint(spec);
        };
        let Some((path, symbol)) = rest.rsplit_once(':') else {
            return Some(Err(format!(
                "'{spec}' names no symbol: uprobe:PATH:SYMBOL, e.g. uprobe:/usr/lib/x86_64-linux-gnu/libc.so.6:malloc"
            )));
        };
        Some(user(path, symbol))
    }

    /// Its name in titles and file names.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it is in the kernel.
    pub fn in_kernel(&self) -> bool {
        !matches!(self.target, ProbeTarget::User { .. })
    }
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// `kind-what`, with only letters, digits, `_` and `-`.
fn file_safe(kind: &str, what: &str) -> String {
    let what: String = what
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{kind}-{what}")
}

fn kernel(function: &str) -> Result<Probe, String> {
    let valid = !function.is_empty()
        && function.len() <= 256
        && function
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    if !valid {
        return Err(format!(
            "'{function}' is no kernel function name: kprobe:FUNC, e.g. kprobe:do_sys_openat2"
        ));
    }
    Ok(Probe {
        name: file_safe("kprobe", function),
        target: ProbeTarget::Kernel {
            function: function.to_owned(),
        },
    })
}

/// The tracepoint `spec` names (`SYSTEM:NAME`, letters, digits and `_`),
/// if it has that shape.
fn tracepoint(spec: &str) -> Option<Result<Probe, String>> {
    let (system, name) = spec.split_once(':')?;
    let word = |part: &str| {
        !part.is_empty()
            && part.len() <= 128
            && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    if !word(system) || !word(name) {
        return Some(Err(format!(
            "'{spec}' is no tracepoint: SYSTEM:NAME, e.g. sched:sched_switch"
        )));
    }
    Some(Ok(Probe {
        name: format!("tp-{system}-{name}"),
        target: ProbeTarget::Tracepoint {
            system: system.to_owned(),
            name: name.to_owned(),
        },
    }))
}

fn user(path: &str, symbol: &str) -> Result<Probe, String> {
    let offset =
        symbol_offset(path, symbol).map_err(|why| format!("uprobe:{path}:{symbol}: {why}"))?;
    Ok(Probe {
        name: file_safe("uprobe", symbol),
        target: ProbeTarget::User {
            path: PathBuf::from(path),
            offset,
        },
    })
}

/// Where `symbol` of ELF file `path` starts in the file.
fn symbol_offset(path: &str, symbol: &str) -> Result<u64, String> {
    let file = File::open(path).map_err(|error| format!("cannot open it: {error}"))?;
    let metadata = file.metadata().map_err(|error| error.to_string())?;
    if !metadata.is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(MAX_ELF_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|error| format!("cannot read it: {error}"))?;
    let elf = object::File::parse(&*bytes).map_err(|error| format!("not an ELF file: {error}"))?;
    let address = elf
        .symbols()
        .chain(elf.dynamic_symbols())
        .find(|found| found.name() == Ok(symbol) && found.address() != 0)
        .map(|found| found.address())
        .ok_or_else(|| format!("it has no symbol {symbol}"))?;
    elf.segments()
        .find_map(|segment| {
            let (file_offset, size) = segment.file_range();
            let start = segment.address();
            (start <= address && address < start + size).then(|| address - start + file_offset)
        })
        .ok_or_else(|| format!("symbol {symbol} is in no loaded segment"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_are_named_for_files_and_checked() {
        let probe = Probe::parse("kprobe:do_sys_openat2").unwrap().unwrap();
        assert_eq!(probe.name(), "kprobe-do_sys_openat2");
        assert!(probe.in_kernel());
        assert!(Probe::parse("kprobe:a/b").unwrap().is_err());
        assert!(Probe::parse("page-faults").is_none());
        let switch = Probe::parse("sched:sched_switch").unwrap().unwrap();
        assert_eq!(switch.name(), "tp-sched-sched_switch");
        assert!(switch.in_kernel());
        assert!(Probe::parse("sched:../x").unwrap().is_err());
        let error = Probe::parse("uprobe:/nonexistent:f").unwrap().unwrap_err();
        assert!(error.contains("cannot open"), "{error}");
        assert!(Probe::parse("uprobe:/bin/true").unwrap().is_err());
    }

    #[test]
    fn a_user_probe_finds_its_symbol_in_the_file() {
        // This test binary's own main symbol lies in its text segment.
        let exe = std::env::current_exe().unwrap();
        let path = exe.to_str().unwrap();
        let probe = Probe::parse(&format!("uprobe:{path}:main"))
            .unwrap()
            .unwrap();
        let ProbeTarget::User { offset, .. } = probe.target else {
            panic!("no user probe");
        };
        assert!(offset > 0 && offset < std::fs::metadata(path).unwrap().len());
        assert_eq!(probe.name(), "uprobe-main");
        let missing = Probe::parse(&format!("uprobe:{path}:no_such_symbol_here"));
        assert!(missing.unwrap().unwrap_err().contains("no symbol"));
    }
}
