//! The one reader of `/proc/PID/maps`: the process's mappings, line by line.
//!
//! A process names the files it maps as it likes (any bytes but NUL; the
//! kernel escapes a newline as `\012`), so lines are read as bytes, never
//! as UTF-8, and a path is whatever follows the fixed fields: one odd name
//! costs that mapping's name, never the others. The file is read as a
//! stream of at most [`MAX_MAPS`] bytes, so memory stays bounded by one
//! line.

use std::{
    ffi::OsStr,
    fs::File,
    io::{self, BufRead, BufReader, Read, Take},
    os::unix::ffi::OsStrExt,
    path::PathBuf,
};

/// The most of a `/proc/PID/maps` file read: 65,530 mappings (the default
/// `vm.max_map_count`) of files with 1 KiB paths.
pub const MAX_MAPS: u64 = 64 * 1024 * 1024;

/// What a mapping maps, as its line names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapsPath {
    /// Nothing named: anonymous memory.
    Anonymous,
    /// `[vdso]`, the kernel's code for fast system calls.
    Vdso,
    /// `[vsyscall]`, the legacy page of fixed system-call entry points.
    Vsyscall,
    /// `[heap]`, the `brk` area.
    Heap,
    /// `[stack]`, the main thread's stack.
    Stack,
    /// Another bracketed name, brackets included: `[vvar]`, `[anon:NAME]`
    /// (`prctl(PR_SET_VMA_ANON_NAME)`), `[anon_shmem:NAME]`.
    Other(String),
    /// A file, as the kernel shows it from this process's root, ` (deleted)`
    /// mark included if it was unlinked since.
    File(PathBuf),
}

impl MapsPath {
    pub(super) fn parse(shown: &[u8]) -> Self {
        match shown {
            b"" => Self::Anonymous,
            b"[vdso]" => Self::Vdso,
            b"[vsyscall]" => Self::Vsyscall,
            b"[heap]" => Self::Heap,
            b"[stack]" => Self::Stack,
            [b'[', .., b']'] => Self::Other(String::from_utf8_lossy(shown).into_owned()),
            _ => Self::File(PathBuf::from(OsStr::from_bytes(shown))),
        }
    }

    /// The name as the line shows it (empty for anonymous memory).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Anonymous => b"",
            Self::Vdso => b"[vdso]",
            Self::Vsyscall => b"[vsyscall]",
            Self::Heap => b"[heap]",
            Self::Stack => b"[stack]",
            Self::Other(name) => name.as_bytes(),
            Self::File(path) => path.as_os_str().as_bytes(),
        }
    }
}

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapsEntry {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `r`, `w`, `x` (or `-` each), then `s` (shared) or `p` (private).
    pub perms: [u8; 4],
    /// The file offset mapped at `start`.
    pub offset: u64,
    /// The mapped file's device, major and minor.
    pub device: (u32, u32),
    /// The mapped file's inode (0 for memory without a file).
    pub inode: u64,
    /// What is mapped.
    pub path: MapsPath,
}

impl MapsEntry {
    /// Whether the mapping is executable.
    pub fn is_executable(&self) -> bool {
        self.perms[2] == b'x'
    }

    /// One line without its newline; `None` if the fixed fields are not
    /// the kernel's.
    fn parse(line: &[u8]) -> Option<Self> {
        let mut rest = line;
        let (start, end) = split_once(next_field(&mut rest)?, b'-')?;
        let perms = next_field(&mut rest)?.try_into().ok()?;
        let offset = next_field(&mut rest)?;
        let (major, minor) = split_once(next_field(&mut rest)?, b':')?;
        let inode = next_field(&mut rest)?;
        // The kernel pads the path to a column with spaces; a path starts
        // with `/` or `[`, and may end in spaces of its own.
        let path = &rest[rest.iter().take_while(|&&byte| byte == b' ').count()..];
        Some(Self {
            start: number(start, 16)?,
            end: number(end, 16)?,
            perms,
            offset: number(offset, 16)?,
            device: (
                u32::try_from(number(major, 16)?).ok()?,
                u32::try_from(number(minor, 16)?).ok()?,
            ),
            inode: number(inode, 10)?,
            path: MapsPath::parse(path),
        })
    }
}

/// The next space-ended field of `rest`, which moves past it and its space.
fn next_field<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let length = rest.iter().position(|&byte| byte == b' ');
    let field = &rest[..length.unwrap_or(rest.len())];
    *rest = &rest[length.map_or(rest.len(), |length| length + 1)..];
    (!field.is_empty()).then_some(field)
}

fn split_once(field: &[u8], separator: u8) -> Option<(&[u8], &[u8])> {
    let at = field.iter().position(|&byte| byte == separator)?;
    Some((&field[..at], &field[at + 1..]))
}

/// Digits only (no sign), at most 64 bits.
fn number(digits: &[u8], radix: u32) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &digit| {
        value
            .checked_mul(u64::from(radix))?
            .checked_add(u64::from(char::from(digit).to_digit(radix)?))
    })
}

/// The mappings of a maps file being read; a line whose fixed fields are
/// not the kernel's is passed over, and the first read error ends it.
pub struct Entries<R> {
    reader: R,
    line: Vec<u8>,
    failed: bool,
}

impl<R: BufRead> Entries<R> {
    /// The mappings `reader` lists, in the format of `/proc/PID/maps`.
    pub fn new(reader: R) -> Self {
        Self {
            reader,
            line: Vec::new(),
            failed: false,
        }
    }
}

impl<R: BufRead> Iterator for Entries<R> {
    type Item = io::Result<MapsEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.failed {
            self.line.clear();
            match self.reader.read_until(b'\n', &mut self.line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(error) => {
                    self.failed = true;
                    return Some(Err(error));
                }
            }
            let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
            if let Some(entry) = MapsEntry::parse(line) {
                return Some(Ok(entry));
            }
        }
        None
    }
}

/// The mappings of process `pid`, read from `/proc/PID/maps` as they come
/// (the first [`MAX_MAPS`] bytes).
pub fn read(pid: u32) -> io::Result<Entries<BufReader<Take<File>>>> {
    let file = File::open(format!("/proc/{pid}/maps"))?;
    Ok(Entries::new(BufReader::new(file.take(MAX_MAPS))))
}

/// The executable mappings of process `pid`, in address order: asked of
/// the kernel ([`maps_query`](super::maps_query)) where it can answer,
/// otherwise read from `/proc/PID/maps` (the first [`MAX_MAPS`] bytes; a
/// read error ends the list).
pub fn executable(pid: u32) -> io::Result<Vec<MapsEntry>> {
    let file = File::open(format!("/proc/{pid}/maps"))?;
    if let Some(entries) = super::maps_query::executable(&file)? {
        return Ok(entries);
    }
    Ok(Entries::new(BufReader::new(file.take(MAX_MAPS)))
        .map_while(Result::ok)
        .filter(MapsEntry::is_executable)
        .collect())
}

/// For tests: a `sleep 30` child once its libraries are all mapped, which
/// is once it sleeps (clock_nanosleep, 230 on x86-64): while ld.so maps
/// them, two reads of its mappings may differ.
#[cfg(test)]
pub fn sleeping_child() -> std::process::Child {
    use std::time::{Duration, Instant};

    let child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let asleep = || {
        std::fs::read_to_string(format!("/proc/{}/syscall", child.id()))
            .is_ok_and(|syscall| syscall.starts_with("230 "))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !asleep() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

/// For tests: the first page of `file` mapped into this process (private,
/// readable, and executable if `executable`), unmapped when dropped.
#[cfg(test)]
pub struct MappedPage(*mut libc::c_void);

#[cfg(test)]
impl MappedPage {
    /// Maps the first page of `file`.
    pub fn of(file: &File, executable: bool) -> Self {
        use std::os::fd::AsRawFd;

        let protection = if executable {
            libc::PROT_READ | libc::PROT_EXEC
        } else {
            libc::PROT_READ
        };
        // SAFETY: a new private mapping of an open file, unmapped on drop.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                protection,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(address, libc::MAP_FAILED, "mapping a page");
        Self(address)
    }

    /// The page's first address.
    pub fn start(&self) -> u64 {
        self.0 as u64
    }

    /// One past the page's last address.
    pub fn end(&self) -> u64 {
        self.start() + PAGE as u64
    }
}

#[cfg(test)]
const PAGE: usize = 4096;

#[cfg(test)]
impl Drop for MappedPage {
    fn drop(&mut self) {
        // SAFETY: the mapping `of` made, unmapped once.
        unsafe { libc::munmap(self.0, PAGE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &[u8]) -> Vec<MapsEntry> {
        Entries::new(text).collect::<io::Result<_>>().unwrap()
    }

    /// The kernel's answers to `PROCMAP_QUERY` are the executable lines of
    /// the text, field for field, for this process and for a child with
    /// libraries of its own (here, where the kernel is 6.18), but for
    /// `[vsyscall]`: the kernel's own page, in no process's list of
    /// mappings (no code runs there since vsyscall emulation).
    #[test]
    fn the_kernel_lists_executable_mappings_as_the_text_does() {
        let mut child = sleeping_child();
        for pid in [std::process::id(), child.id()] {
            let file = File::open(format!("/proc/{pid}/maps")).unwrap();
            let asked = super::super::maps_query::executable(&file)
                .unwrap()
                .expect("this kernel answers PROCMAP_QUERY");
            let text: Vec<MapsEntry> = read(pid)
                .unwrap()
                .map(Result::unwrap)
                .filter(|entry| entry.is_executable() && entry.path != MapsPath::Vsyscall)
                .collect();
            assert!(asked.len() >= 3, "{asked:?}");
            assert_eq!(asked, text);
            assert_eq!(executable(pid).unwrap(), text);
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn own_maps_show_this_code_and_the_vdso() {
        let here = own_maps_show_this_code_and_the_vdso as *const () as u64;
        let entries: Vec<_> = read(std::process::id())
            .unwrap()
            .collect::<io::Result<_>>()
            .unwrap();
        let own = entries
            .iter()
            .find(|entry| (entry.start..entry.end).contains(&here))
            .expect("own code is mapped");
        assert!(own.is_executable());
        assert_eq!(
            own.path,
            MapsPath::File(std::env::current_exe().unwrap()),
            "{own:?}"
        );
        let metadata = std::fs::metadata(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(
            own.inode,
            std::os::unix::fs::MetadataExt::ino(&metadata),
            "{own:?}"
        );
        let vdso = entries
            .iter()
            .find(|entry| entry.path == MapsPath::Vdso)
            .expect("a vdso");
        assert!(vdso.is_executable() && vdso.end > vdso.start);
        assert!(entries.iter().any(|entry| entry.path == MapsPath::Stack));
        // Every line is one entry.
        let lines = std::fs::read(format!("/proc/{}/maps", std::process::id())).unwrap();
        let count = lines.iter().filter(|&&byte| byte == b'\n').count();
        assert!(
            count.abs_diff(entries.len()) < 8,
            "{count} lines, {} entries",
            entries.len()
        );
    }

    #[test]
    fn lines_are_read_field_by_field() {
        let text = b"55d4c6a00000-55d4c6a01000 r-xp 0001f000 fe:01 1837363                   /usr/bin/cat\n\
            7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n\
            7ffd1000-7ffd3000 r-xp 00000000 00:00 0                          [vdso]\n\
            7f02-7f03 rw-s 00000000 00:05 42                          [anon:stoke x]\n";
        let entries = parse(text);
        assert_eq!(
            entries[0],
            MapsEntry {
                start: 0x55d4c6a00000,
                end: 0x55d4c6a01000,
                perms: *b"r-xp",
                offset: 0x1f000,
                device: (0xfe, 1),
                inode: 1837363,
                path: MapsPath::File("/usr/bin/cat".into()),
            }
        );
        assert!(entries[0].is_executable() && !entries[1].is_executable());
        assert_eq!(entries[1].path, MapsPath::Anonymous);
        assert_eq!(entries[2].path, MapsPath::Vdso);
        assert_eq!(entries[3].path, MapsPath::Other("[anon:stoke x]".into()));
        assert_eq!(entries[3].perms, *b"rw-s");
        assert_eq!(entries.len(), 4);
    }

    #[test]
    fn hostile_names_are_kept_byte_for_byte() {
        let names: [&[u8]; 6] = [
            b"/SYSV",
            b"/SYSV (deleted)",
            b"/SYSV0000002a (deleted)",
            b"/\x80 (deleted)",
            b"/tmp/\xe9t\xe9  ",
            b"/a\\012[vdso]",
        ];
        for name in names {
            let line = [
                b"1000-2000 r-xp 00000000 00:2a 17      ".as_slice(),
                name,
                b"\n",
            ]
            .concat();
            let text = [line.as_slice(), b"3000-4000 rw-p 00000000 00:00 0 \n"].concat();
            let entries = parse(&text);
            assert_eq!(entries.len(), 2, "{:?}", String::from_utf8_lossy(name));
            assert_eq!(entries[0].path.as_bytes(), name);
            assert!(matches!(entries[0].path, MapsPath::File(_)));
        }
    }

    #[test]
    fn a_line_not_in_the_kernel_format_is_passed_over() {
        let text = b"garbage\n\
            1000-2000 r-xp 00000000 00:00 0\n\
            1000-2000 r-xpx 00000000 00:00 0 /x\n\
            -2000 r-xp 00000000 00:00 0 /x\n\
            1000-2000 r-xp +0000000 00:00 0 /x\n\
            1000-2000 r-xp 00000000 00:00 99999999999999999999 /x\n\
            1000-2000 r-xp 00000000 100000000:00 1 /x\n\
            \n\
            3000-4000 r-xp 00000000 00:00 0 /last";
        let entries = parse(text);
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert_eq!(entries[0].path, MapsPath::Anonymous);
        assert_eq!(entries[1].path, MapsPath::File("/last".into()));
    }
}
