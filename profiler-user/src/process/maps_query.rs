//! A process's executable mappings asked of the kernel one by one with
//! `PROCMAP_QUERY` (Linux 6.11 and later), where reading `/proc/PID/maps`
//! has the kernel format every mapping, stacks, heaps and data included,
//! and stoke parse them all to keep the few with code: under process churn
//! that text was a fifth of stoke's CPU.

use std::{
    ffi::OsStr,
    fs::File,
    io,
    os::{fd::AsRawFd, unix::ffi::OsStrExt},
    path::PathBuf,
};

use super::maps::{MapsEntry, MapsPath};

/// `struct procmap_query` of `<linux/fs.h>`.
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: u64 =
    (3 << 30) | ((size_of::<ProcmapQuery>() as u64) << 16) | (0x66 << 8) | 17;
const VMA_READABLE: u64 = 0x01;
const VMA_WRITABLE: u64 = 0x02;
const VMA_EXECUTABLE: u64 = 0x04;
const VMA_SHARED: u64 = 0x08;
const COVERING_OR_NEXT_VMA: u64 = 0x10;
/// Room for a path the kernel can name (`PATH_MAX`).
const NAME_BYTES: usize = 4096;
/// As many mappings as a process may have (the default
/// `vm.max_map_count`): the walk ends there whatever the kernel says.
const MAX_MAPPINGS: usize = 65_530;

/// The executable mappings of the process whose `/proc/PID/maps` is
/// `maps`, in address order; `None` if this kernel has no `PROCMAP_QUERY`
/// (or a name does not fit), for the caller to read the text instead.
pub fn executable(maps: &File) -> io::Result<Option<Vec<MapsEntry>>> {
    let mut name = vec![0u8; NAME_BYTES];
    let mut entries = Vec::new();
    let mut address = 0;
    while entries.len() < MAX_MAPPINGS {
        let mut query = ProcmapQuery {
            size: size_of::<ProcmapQuery>() as u64,
            query_flags: COVERING_OR_NEXT_VMA | VMA_EXECUTABLE,
            query_addr: address,
            vma_name_size: NAME_BYTES as u32,
            vma_name_addr: name.as_mut_ptr() as u64,
            ..ProcmapQuery::default()
        };
        // SAFETY: the query is the kernel's struct, sized in its own
        // `size`, and its name buffer holds NAME_BYTES bytes.
        let result = unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY as _, &mut query) };
        if result != 0 {
            let error = io::Error::last_os_error();
            return match error.raw_os_error() {
                // No executable mapping at or above the address: the end.
                Some(libc::ENOENT) => Ok(Some(entries)),
                // An older kernel; a name longer than the buffer.
                Some(libc::ENOTTY | libc::EINVAL | libc::ENAMETOOLONG | libc::E2BIG) => Ok(None),
                _ => Err(error),
            };
        }
        // The name's length counts its NUL.
        let length = (query.vma_name_size as usize)
            .saturating_sub(1)
            .min(NAME_BYTES);
        entries.push(entry(&query, &name[..length]));
        if query.vma_end <= address {
            break;
        }
        address = query.vma_end;
    }
    Ok(Some(entries))
}

fn entry(query: &ProcmapQuery, name: &[u8]) -> MapsEntry {
    let flag = |bit, yes| {
        if query.vma_flags & bit != 0 {
            yes
        } else {
            b'-'
        }
    };
    let shared = if query.vma_flags & VMA_SHARED != 0 {
        b's'
    } else {
        b'p'
    };
    MapsEntry {
        start: query.vma_start,
        end: query.vma_end,
        perms: [
            flag(VMA_READABLE, b'r'),
            flag(VMA_WRITABLE, b'w'),
            flag(VMA_EXECUTABLE, b'x'),
            shared,
        ],
        offset: query.vma_offset,
        device: (query.dev_major, query.dev_minor),
        inode: query.inode,
        path: if query.inode != 0 && name.starts_with(b"/") {
            MapsPath::File(PathBuf::from(OsStr::from_bytes(name)))
        } else {
            MapsPath::parse(name)
        },
    }
}
