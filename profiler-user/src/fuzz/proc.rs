//! Target `proc`: the `/proc` files stoke parses, in the forms a process can sway: `status` (its name, in
//! any bytes), `maps` (the names of the files it maps), `cmdline`,
//! `environ` and `cgroup` (a process may move itself into any cgroup it can
//! create). Inputs are lines in the kernel's formats with chosen
//! values, mixed with raw ones.

use std::{io, os::fd::AsRawFd};

use bolero::TypeGenerator;

use super::harness::{self, Run};
use crate::{
    jvm::attach::{
        target::{hotspot_in_maps, ProcStatus},
        vm_flags::{launcher_options, VmFlags},
    },
    process::{
        cgroup::{self, Runtime},
        maps::{Entries, MapsEntry},
    },
    procfs::{innermost_ns_id, MAX_STATUS},
};

const STATUS_FIELDS: [&str; 8] = [
    "Name:", "Uid:", "Gid:", "NSpid:", "SigCgt:", "Pid:", "Tgid:", "NStgid:",
];

#[derive(Debug, TypeGenerator)]
enum StatusLine {
    /// A field the parsers look for, with numbers (hex for masks).
    Field {
        name: u8,
        values: Vec<u32>,
        hex: bool,
    },
    /// `Name:` with a thread name in any bytes (`prctl(PR_SET_NAME)`).
    Name(Vec<u8>),
    Raw(Vec<u8>),
}

const PSEUDO_PATHS: [&str; 8] = [
    "[heap]",
    "[stack]",
    "[vdso]",
    "[vvar]",
    "[vsyscall]",
    "[anon:stoke fuzz]",
    "[anon_shmem:x]",
    "/memfd:stoke-agent (deleted)",
];

#[derive(Debug, TypeGenerator)]
pub(super) enum MapsPath {
    Anonymous,
    Pseudo(u8),
    /// A file the process named: any bytes but NUL and `/`-separated
    /// (the kernel escapes a newline as `\012`).
    File(Vec<Vec<u8>>),
    /// A file named like a System V shared memory segment (`/SYSV<key>`).
    SysV(Vec<u8>),
    Raw(Vec<u8>),
}

#[derive(Debug, TypeGenerator)]
struct MapsLine {
    start: u32,
    pages: u16,
    perms: u8,
    offset: u32,
    device: (u8, u8),
    inode: u32,
    path: MapsPath,
    deleted: bool,
}

/// One component of a cgroup path.
#[derive(Debug, TypeGenerator)]
enum CgroupComponent {
    /// `docker-<id>.scope`, the id from 32 bytes (64 hex digits).
    Docker([u8; 32]),
    /// `pod<uid>` or a systemd pod slice.
    Pod([u8; 16], bool),
    /// `machine-<name>.scope`.
    Machine(Vec<u8>),
    Raw(Vec<u8>),
}

#[derive(Debug, TypeGenerator)]
struct ProcInput {
    status: Vec<StatusLine>,
    maps: Vec<MapsLine>,
    cmdline: Vec<Vec<u8>>,
    environ: Vec<(u8, Vec<u8>)>,
    /// `/proc/PID/cgroup` lines: hierarchy id, v1 controllers (or none for
    /// v2), path components.
    cgroup: Vec<(u8, bool, Vec<CgroupComponent>)>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn cgroup_component(component: &CgroupComponent) -> String {
    match component {
        CgroupComponent::Docker(id) => format!("docker-{}.scope", hex(id)),
        CgroupComponent::Pod(uid, systemd) => {
            let uid = hex(uid);
            let uid = format!(
                "{}-{}-{}-{}-{}",
                &uid[..8],
                &uid[8..12],
                &uid[12..16],
                &uid[16..20],
                &uid[20..]
            );
            if *systemd {
                format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_"))
            } else {
                format!("pod{uid}")
            }
        }
        CgroupComponent::Machine(name) => {
            format!("machine-{}.scope", String::from_utf8_lossy(name))
        }
        CgroupComponent::Raw(bytes) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// Checks what stoke reads of a cgroup file: whatever the text, a path is
/// chosen and placed without a panic, and a docker scope as the last
/// component of the unified path names that container.
fn check_cgroup(lines: &[(u8, bool, Vec<CgroupComponent>)]) {
    let text: String = lines
        .iter()
        .map(|(id, v1, components)| {
            let path: Vec<String> = components.iter().map(cgroup_component).collect();
            let controllers = if *v1 { "cpu,cpuacct" } else { "" };
            format!(
                "{}:{controllers}:/{}\n",
                if *v1 { *id } else { 0 },
                path.join("/")
            )
        })
        .collect();
    let Some(path) = cgroup::main_path(&text) else {
        return;
    };
    let placement = cgroup::placement(path);
    let unified = lines
        .iter()
        .find(|(_, v1, components)| !v1 && !components.is_empty());
    if let Some((_, _, components)) = unified {
        if let Some(CgroupComponent::Docker(id)) = components.last() {
            let one_line_each = text.lines().count() == lines.len();
            if one_line_each && text.lines().filter(|line| line.starts_with("0::")).count() == 1 {
                assert_eq!(placement.container, Some((Runtime::Docker, hex(id))));
            }
        }
    }
}

fn status_text(lines: &[StatusLine]) -> Vec<u8> {
    let mut text = Vec::new();
    for line in lines {
        match line {
            StatusLine::Field { name, values, hex } => {
                text.extend_from_slice(STATUS_FIELDS[usize::from(*name) % 8].as_bytes());
                for value in values {
                    let value = if *hex {
                        format!("\t{value:016x}")
                    } else {
                        format!("\t{value}")
                    };
                    text.extend_from_slice(value.as_bytes());
                }
            }
            StatusLine::Name(name) => {
                text.extend_from_slice(b"Name:\t");
                text.extend(name.iter().take(15).map(|&byte| match byte {
                    b'\n' => b' ',
                    other => other,
                }));
            }
            StatusLine::Raw(bytes) => text.extend_from_slice(bytes),
        }
        text.push(b'\n');
    }
    text
}

/// The path a maps line ends with, as the kernel prints it.
pub(super) fn path_bytes(path: &MapsPath) -> Vec<u8> {
    let no_newline = |bytes: &[u8]| -> Vec<u8> {
        bytes
            .iter()
            .flat_map(|&byte| match byte {
                b'\n' => b"\\012".to_vec(),
                0 => b"_".to_vec(),
                other => vec![other],
            })
            .collect()
    };
    match path {
        MapsPath::Anonymous => Vec::new(),
        MapsPath::Pseudo(which) => PSEUDO_PATHS[usize::from(*which) % 8].as_bytes().to_vec(),
        MapsPath::File(components) => components
            .iter()
            .flat_map(|component| {
                let mut part = b"/".to_vec();
                part.extend(no_newline(component).into_iter().filter(|&b| b != b'/'));
                part
            })
            .collect(),
        MapsPath::SysV(rest) => [b"/SYSV".as_slice(), &no_newline(rest)].concat(),
        MapsPath::Raw(bytes) => no_newline(bytes),
    }
}

fn maps_text(lines: &[MapsLine]) -> Vec<u8> {
    let mut text = Vec::new();
    for line in lines {
        let start = u64::from(line.start) << 12;
        let end = start + (u64::from(line.pages) + 1) * 4096;
        let perms: String = [b'r', b'w', b'x']
            .iter()
            .enumerate()
            .map(|(bit, &flag)| {
                if line.perms & (1 << bit) != 0 {
                    flag as char
                } else {
                    '-'
                }
            })
            .chain([if line.perms & 8 != 0 { 's' } else { 'p' }])
            .collect();
        // The kernel ends the fixed fields with a space, path or not.
        let head = format!(
            "{start:08x}-{end:08x} {perms} {:08x} {:02x}:{:02x} {} ",
            line.offset, line.device.0, line.device.1, line.inode
        );
        text.extend_from_slice(head.as_bytes());
        let path = path_bytes(&line.path);
        if !path.is_empty() {
            // The kernel pads the path to a column.
            text.extend(std::iter::repeat_n(
                b' ',
                73usize.saturating_sub(head.len()),
            ));
            text.extend_from_slice(&path);
            if line.deleted {
                text.extend_from_slice(b" (deleted)");
            }
        }
        text.push(b'\n');
    }
    text
}

/// What the fields of `line`, as [`maps_text`] writes it, read back as.
fn assert_entry_is(line: &MapsLine, entry: &MapsEntry) {
    let start = u64::from(line.start) << 12;
    assert_eq!(
        (entry.start, entry.end),
        (start, start + (u64::from(line.pages) + 1) * 4096)
    );
    assert_eq!(entry.is_executable(), line.perms & 4 != 0);
    assert_eq!(entry.offset, u64::from(line.offset));
    assert_eq!(
        entry.device,
        (u32::from(line.device.0), u32::from(line.device.1))
    );
    assert_eq!(entry.inode, u64::from(line.inode));
    let mut path = path_bytes(&line.path);
    if line.deleted && !path.is_empty() {
        path.extend_from_slice(b" (deleted)");
    }
    assert_eq!(
        entry.path.as_bytes(),
        path,
        "{:?}",
        String::from_utf8_lossy(&path)
    );
}

fn environ_bytes(entries: &[(u8, Vec<u8>)]) -> Vec<u8> {
    const NAMES: [&str; 5] = [
        "JAVA_TOOL_OPTIONS=",
        "JDK_JAVA_OPTIONS=",
        "_JAVA_OPTIONS=",
        "PATH=",
        "",
    ];
    let mut bytes = Vec::new();
    for (name, value) in entries {
        bytes.extend_from_slice(NAMES[usize::from(*name) % 5].as_bytes());
        bytes.extend_from_slice(value);
        bytes.push(0);
    }
    bytes
}

#[test]
fn proc() {
    let run = Run::start("proc");
    bolero::check!()
        .with_type::<ProcInput>()
        .with_test_time(harness::budget())
        .with_shrink_time(harness::SHRINK_TIME)
        .for_each(|input| {
            run.input(|| {
                // status: attach's parser and the recording's tid mapping
                // must agree on the innermost pid.
                let status = status_text(&input.status);
                // Both read at most MAX_STATUS bytes of a status file.
                let read = &status[..status.len().min(MAX_STATUS as usize)];
                let parsed = ProcStatus::parse(&String::from_utf8_lossy(read));
                let file = harness::memfd(&status);
                let path = format!("/proc/self/fd/{}", file.as_raw_fd());
                let ns_id = innermost_ns_id(std::path::Path::new(&path));
                if let Ok(parsed) = parsed {
                    assert_eq!(
                        ns_id,
                        Some(parsed.ns_pid),
                        "the two status parsers disagree"
                    );
                }

                let maps = maps_text(&input.maps);
                let _ = hotspot_in_maps(Entries::new(&maps[..]));
                let parsed = Entries::new(&maps[..]).collect::<io::Result<Vec<_>>>();
                let parsed = parsed.expect("reading bytes fails not");
                // Lines in the kernel's format, of files with any names,
                // are all read, each as written (else the process's frames
                // go unnamed, or misnamed).
                let kernel_format = !input
                    .maps
                    .iter()
                    .any(|line| matches!(line.path, MapsPath::Raw(_)));
                if kernel_format {
                    assert_eq!(parsed.len(), input.maps.len());
                    for (line, entry) in input.maps.iter().zip(&parsed) {
                        assert_entry_is(line, entry);
                    }
                }

                let cmdline: Vec<u8> = input
                    .cmdline
                    .iter()
                    .flat_map(|arg| arg.iter().copied().chain([0]))
                    .collect();
                let environ = environ_bytes(&input.environ);
                let _ = VmFlags::from_options(launcher_options(&cmdline, &environ));

                check_cgroup(&input.cgroup);
            })
        });
}
