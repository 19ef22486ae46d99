//! What blazesym reads: a private copy of each mapped file, in a sealed
//! memfd.
//!
//! blazesym maps the files it reads, and follows the links a file names to
//! other files (`.gnu_debuglink`, `.gnu_debugaltlink`, `.debug_sup`, a
//! `.dwp` beside it) on the host's filesystem, by any path the file gives:
//! a FIFO would block stoke forever, a device could react to being opened.
//! A process could also truncate a file that stoke has mapped (SIGBUS).
//! So blazesym gets a copy that no one else can change (sealed against
//! writes, shrinking and growing), of only the parts it reads for names
//! (the rest holes, see [`read_parts`]), with those links removed; where stoke's
//! own lookup (`debug_file::find_until`, inside the process's root, regular
//! files only) found a separate debug file, a sealed copy of it too, which
//! the copy's `.gnu_debuglink` then names by descriptor.

use std::{
    ffi::CStr,
    fs::File,
    io,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::fs::{FileExt, MetadataExt},
    },
    path::{Path, PathBuf},
    time::Instant,
};

use object::{
    elf,
    read::elf::{FileHeader, SectionHeader},
    ReadCache,
};

use super::read_parts::{self, ReadParts};
use crate::process::MappedFile;
use crate::{
    elf::{
        bounded::BoundedFile,
        debug_file::{self, DebugLinks},
        file::{self as elf_file, ElfFile, LoadSegment},
    },
    rootfs,
    unwind::table,
};

/// The most bytes copied of a file for blazesym (what it reads of a mapped
/// file, all of a separate debug file): far above any real library's
/// symbols and DWARF, and what a copy may cost in memory while its file is
/// symbolized. A file with more to copy has its frames named
/// `file+0xOFFSET`.
pub const MAX_COPY_BYTES: u64 = 256 << 20;

/// The largest mapped file whose parts are copied (a copy has the file's
/// size, its holes costing nothing): far above any real program.
pub const MAX_FILE_BYTES: u64 = 4 << 30;

/// Sections naming other files that blazesym would open.
const LINK_SECTIONS: [&[u8]; 3] = [b".gnu_debuglink", b".gnu_debugaltlink", b".debug_sup"];

/// Where blazesym looks for the debug file a copy's `.gnu_debuglink` names
/// (a descriptor number).
pub const DEBUG_DIR: &str = "/proc/self/fd";

/// A file's sealed copy, and its separate debug file's, held open while
/// blazesym reads them.
#[derive(Debug)]
pub struct Copy {
    file: File,
    debug_file: Option<File>,
    /// Whether blazesym is to read DWARF (else the copy has none).
    pub dwarf: bool,
    /// For a copy of a debug file's symbols in place of the file's own
    /// (see [`debug_symbols`]): the file's segments, which turn its
    /// offsets into the addresses the symbols have
    /// ([`elf_file::vaddr_of_offset`]).
    pub segments: Option<Vec<LoadSegment>>,
}

impl Copy {
    /// The path blazesym opens.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    /// The memory the copies take (their holes take none).
    pub fn allocated_bytes(&self) -> u64 {
        [Some(&self.file), self.debug_file.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|file| file.metadata().ok())
            .map(|metadata| metadata.blocks() * 512)
            .sum()
    }
}

/// Copies `mapped` (and its separate debug file, if it needs DWARF and
/// stoke's lookup finds one) for blazesym, with what it reads to name code
/// (and source `lines`). Errors with [`io::ErrorKind::FileTooLarge`] when
/// there is more than [`MAX_COPY_BYTES`] to copy.
pub fn for_blazesym(mapped: &MappedFile, lines: bool) -> io::Result<Copy> {
    let deadline = Instant::now() + table::COMPILE_TIME_BUDGET;
    let (file, dwarf) = copy_of(
        &mapped.path(),
        c"stoke-symbols",
        Parts::ReadForNames { lines },
        deadline,
    )?;
    let links = links_of(&file, deadline)?;
    // Only a `.gnu_debuglink` can name the debug file to blazesym.
    let found = mapped
        .origin
        .as_ref()
        .filter(|_| dwarf && links.debuglink.is_some())
        .and_then(|origin| {
            debug_file::find_until(
                &origin.root,
                Some(&origin.path),
                &links.as_links(),
                deadline,
            )
        });
    if let Some(found) = found.as_ref().filter(|_| !lines) {
        if let Some(copy) = debug_symbols(&file, &found.file, deadline)? {
            return Ok(copy);
        }
    }
    let debug_file = found.and_then(|found| debug_copy(found.file, deadline).ok());
    let crc_and_fd = debug_file
        .as_ref()
        .map(|(debug, crc)| (*crc, debug.as_raw_fd()));
    rewrite_links(&file, &links, crc_and_fd)?;
    check_links(&file, crc_and_fd, deadline)?;
    seal(&file)?;
    Ok(Copy {
        file,
        debug_file: debug_file.map(|(debug, _)| debug),
        dwarf,
        segments: None,
    })
}

/// For a file without a symbol table (`original`, its copy) whose separate
/// debug file `debug` has one: a copy of the debug file's symbol tables
/// alone, which blazesym reads in place of the file, by address (the
/// debug file's segments have addresses but no bytes). Its DWARF, most of
/// it and compressed, is neither copied nor inflated, which would cost
/// every time a new address of the file came. `None` when the debug file
/// has no symbol table.
fn debug_symbols(original: &File, debug: &File, deadline: Instant) -> io::Result<Option<Copy>> {
    let cache = ReadCache::new(BoundedFile::for_debug_file(original.try_clone()?, deadline));
    let Some(segments) = ElfFile::parse(&cache)
        .and_then(|elf| elf.load_segments())
        .ok()
        .filter(|segments| !segments.is_empty())
    else {
        return Ok(None);
    };
    let path = PathBuf::from(format!("/proc/self/fd/{}", debug.as_raw_fd()));
    let (file, dwarf) = copy_of(
        &path,
        c"stoke-debug-symbols",
        Parts::ReadForNames { lines: false },
        deadline,
    )?;
    if dwarf {
        return Ok(None);
    }
    unlink_and_seal(&file, deadline)?;
    Ok(Some(Copy {
        file,
        debug_file: None,
        dwarf: false,
        segments: Some(segments),
    }))
}

/// A copy of a separate debug file, without links, sealed; and its CRC32.
fn debug_copy(found: File, deadline: Instant) -> io::Result<(File, u32)> {
    let path = PathBuf::from(format!("/proc/self/fd/{}", found.as_raw_fd()));
    let (file, _) = copy_of(&path, c"stoke-debug-symbols", Parts::Whole, deadline)?;
    unlink_and_seal(&file, deadline)?;
    let crc = debug_file::checksum(&file, deadline)?;
    Ok((file, crc))
}

/// Removes every link of a debug file's copy, checks that none is left, and
/// seals it.
fn unlink_and_seal(file: &File, deadline: Instant) -> io::Result<()> {
    let links = links_of(file, deadline)?;
    rewrite_links(file, &links, None)?;
    check_links(file, None, deadline)?;
    seal(file)
}

/// Which parts of a file a copy holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Parts {
    /// All of it (a debug file: blazesym checks its CRC32, reading all).
    Whole,
    /// What blazesym reads to name code, and source `lines` if asked
    /// ([`read_parts`]); the rest holes.
    ReadForNames { lines: bool },
}

/// The regular file at `path`, copied into a new memfd of its size: the
/// `parts` asked for, at most [`MAX_COPY_BYTES`] of them, in a file of at
/// most [`MAX_FILE_BYTES`]; and whether blazesym is to read its DWARF.
/// Parts truncated meanwhile are left as holes.
fn copy_of(path: &Path, name: &CStr, parts: Parts, deadline: Instant) -> io::Result<(File, bool)> {
    let source = rootfs::open_regular(path)?;
    let size = source.metadata()?.len();
    let ReadParts { ranges, dwarf } = match parts {
        Parts::ReadForNames { lines } if size <= MAX_FILE_BYTES => {
            read_parts::of(&source, size, lines, deadline)?
        }
        _ => ReadParts {
            ranges: std::iter::once(0..size).collect(),
            dwarf: true,
        },
    };
    let copied: u64 = ranges.iter().map(|range| range.end - range.start).sum();
    if copied > MAX_COPY_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "{} MB to read, more than the {} MB read for symbols",
                copied >> 20,
                MAX_COPY_BYTES >> 20
            ),
        ));
    }
    // SAFETY: a NUL-terminated name; the result is checked, and when valid
    // a descriptor that nothing else owns.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: see above.
    let copy = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    copy.set_len(size)?;
    let mut buffer = vec![0; (1 << 20).min(copied as usize)];
    // Not beyond the size seen: a file growing meanwhile is copied as it was.
    for range in ranges {
        let mut offset = range.start;
        while offset < range.end {
            let wanted = buffer.len().min((range.end - offset) as usize);
            let read = source.read_at(&mut buffer[..wanted], offset)?;
            if read == 0 {
                break;
            }
            copy.write_all_at(&buffer[..read], offset)?;
            offset += read as u64;
        }
    }
    Ok((copy, dwarf))
}

/// A copy's `.gnu_debuglink`.
#[derive(Debug)]
struct DebugLink {
    name: Vec<u8>,
    crc: u32,
    /// The section's file offset and size.
    range: (u64, u64),
    /// The file offset of its section header's `sh_name`.
    name_field: u64,
}

/// Where a copy's link sections are.
#[derive(Debug, Default)]
struct Links {
    build_id: Option<Vec<u8>>,
    /// The first `.gnu_debuglink`, the one readers use.
    debuglink: Option<DebugLink>,
    /// File offsets of the `sh_name` fields of the other link sections.
    other_name_fields: Vec<u64>,
}

impl Links {
    fn as_links(&self) -> DebugLinks<'_> {
        DebugLinks {
            build_id: self.build_id.as_deref(),
            debuglink: self
                .debuglink
                .as_ref()
                .map(|link| (link.name.as_slice(), link.crc)),
        }
    }
}

/// Reads where `file`'s link sections are (a file that is no 64-bit ELF
/// file has none that blazesym would follow: it reads nothing else).
fn links_of(file: &File, deadline: Instant) -> io::Result<Links> {
    let cache = ReadCache::new(BoundedFile::for_debug_file(file.try_clone()?, deadline));
    let Ok(header) = elf::FileHeader64::<object::Endianness>::parse(&cache) else {
        return Ok(Links::default());
    };
    let malformed = |_| io::Error::new(io::ErrorKind::InvalidData, "malformed ELF section table");
    let endian = header.endian().map_err(malformed)?;
    let sections = header.sections(endian, &cache).map_err(malformed)?;
    if sections.len() > elf_file::MAX_SECTIONS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "more sections than any real file has",
        ));
    }
    let mut links = Links {
        build_id: elf_file::build_id_note(endian, &sections, &cache)
            .ok()
            .flatten()
            .map(<[u8]>::to_vec),
        ..Links::default()
    };
    let entry_size = u64::from(header.e_shentsize(endian));
    for (index, section) in sections.enumerate() {
        let Ok(name) = sections.section_name(endian, section) else {
            continue;
        };
        if !LINK_SECTIONS.contains(&name) {
            continue;
        }
        let name_field = header.e_shoff(endian) + index.0 as u64 * entry_size;
        let debuglink = (name == b".gnu_debuglink" && links.debuglink.is_none())
            .then(|| section.file_range(endian))
            .flatten()
            .zip(elf_file::gnu_debuglink(endian, &sections, &cache));
        match debuglink {
            Some((range, (name, crc))) => {
                links.debuglink = Some(DebugLink {
                    name: name.to_vec(),
                    crc,
                    range,
                    name_field,
                });
            }
            None => links.other_name_fields.push(name_field),
        }
    }
    Ok(links)
}

/// Makes blazesym follow no link of `file`'s but `.gnu_debuglink` to
/// `debug` (its CRC32 and descriptor), if given and there is room for it:
/// the others lose their names (`sh_name` 0, the empty name), so blazesym
/// does not find them.
fn rewrite_links(file: &File, links: &Links, debug: Option<(u32, i32)>) -> io::Result<()> {
    let mut name_fields = links.other_name_fields.clone();
    if let Some(link) = &links.debuglink {
        let (offset, size) = link.range;
        let name = debug.map(|(_, fd)| fd.to_string()).unwrap_or_default();
        let crc_offset = (name.len() + 1).next_multiple_of(4);
        match debug {
            Some((crc, _)) if crc_offset as u64 + 4 <= size => {
                let mut content = vec![0; crc_offset + 4];
                content[..name.len()].copy_from_slice(name.as_bytes());
                content[crc_offset..crc_offset + 4].copy_from_slice(&crc.to_le_bytes());
                file.write_all_at(&content, offset)?;
            }
            _ => name_fields.push(link.name_field),
        }
    }
    for name_field in name_fields {
        file.write_all_at(&0u32.to_le_bytes(), name_field)?;
    }
    Ok(())
}

/// Checks that `file` has no link section left but a `.gnu_debuglink` to
/// `debug`, if given: a forged section name table can give the empty name
/// (offset 0) a link section's name.
fn check_links(file: &File, debug: Option<(u32, i32)>, deadline: Instant) -> io::Result<()> {
    let links = links_of(file, deadline)?;
    let ours = match (&links.debuglink, debug) {
        (None, _) => true,
        (Some(link), Some((crc, fd))) => link.name == fd.to_string().as_bytes() && link.crc == crc,
        (Some(_), None) => false,
    };
    if ours && links.other_name_fields.is_empty() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "its links to other files cannot be removed",
        ))
    }
}

/// Seals `file` against any change: blazesym maps it, and a mapping of a
/// file that shrinks faults (SIGBUS).
fn seal(file: &File) -> io::Result<()> {
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor this function borrows.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::{ffi::CString, os::unix::ffi::OsStrExt, sync::mpsc, time::Duration};

    use blazesym::symbolize::{
        source::{Elf, Source},
        Input,
    };

    use object::{
        read::elf::{ElfFile64, ProgramHeader},
        Object, ObjectSection, ObjectSymbol,
    };

    use super::*;
    use crate::{
        symbolize::Symbolizer,
        unwind::tests::support::{build, run, split},
    };

    /// The file offset in `program` of function `name`, whose address
    /// `symbols` (the program or its debug file) gives.
    fn offset_of(program: &Path, symbols: &Path, name: &str) -> u64 {
        let bytes = std::fs::read(symbols).unwrap();
        let file = ElfFile64::<object::Endianness>::parse(&*bytes).unwrap();
        let address = file
            .symbols()
            .find(|symbol| symbol.name() == Ok(name))
            .unwrap_or_else(|| panic!("{name} in {}", symbols.display()))
            .address();
        let bytes = std::fs::read(program).unwrap();
        let file = ElfFile64::<object::Endianness>::parse(&*bytes).unwrap();
        let endian = file.endian();
        let load = file
            .elf_program_headers()
            .iter()
            .find(|header| {
                let start = header.p_vaddr(endian);
                header.p_type(endian) == elf::PT_LOAD
                    && (start..start + header.p_memsz(endian)).contains(&address)
            })
            .unwrap();
        address - load.p_vaddr(endian) + load.p_offset(endian)
    }

    /// What blazesym names the code at `offset` of `program` as, reading
    /// the file itself, following its links (regular files, for a
    /// reference).
    fn reference_name(program: &Path, offset: u64) -> Option<String> {
        reference_name_from(program, offset, true)
    }

    /// [`reference_name`], reading DWARF or not.
    fn reference_name_from(program: &Path, offset: u64, dwarf: bool) -> Option<String> {
        blazesym_name(program, dwarf, Input::FileOffset(&[offset][..]))
    }

    /// What blazesym names the one address of `input` in the file at `path`.
    fn blazesym_name(path: &Path, dwarf: bool, input: Input<&[u64]>) -> Option<String> {
        let blazesym = blazesym::symbolize::Symbolizer::new();
        let results = blazesym
            .symbolize(
                &Source::Elf(Elf {
                    debug_syms: dwarf,
                    ..Elf::new(path)
                }),
                input,
            )
            .unwrap();
        results[0].as_sym().map(|sym| sym.name.to_string())
    }

    /// Runs `work` on a thread of its own, failing if it takes more than
    /// 10 s (a FIFO opened would block it forever).
    fn within_10_s<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || sender.send(work()));
        receiver
            .recv_timeout(Duration::from_secs(10))
            .expect("blocked for more than 10 s")
    }

    #[test]
    fn names_come_from_the_debug_file_stoke_found() {
        let dir = tempfile::tempdir().unwrap();
        let program = build(dir.path(), "split", &[]);
        let debug = dir.path().join("split.debug");
        split(&program, &debug, None);
        // No symbols left in the program: only its debug file names `a`.
        run("strip", &[&program]);
        let offset = offset_of(&program, &debug, "a");
        // (blazesym names it from its DWARF, whatever name that gives.)
        let reference = reference_name(&program, offset).expect("named from the debug file");
        let mapped = MappedFile::on_host(&program);
        for lines in [false, true] {
            let names = Symbolizer::new(lines).file(&mapped, &[offset]);
            assert!(names[0][0].starts_with(&reference), "{}", names[0][0]);
        }
        // Names alone come from the debug file's symbol table, copied
        // without its DWARF and with no link, read by address.
        let copy = for_blazesym(&mapped, false).unwrap();
        assert!(copy.segments.is_some() && !copy.dwarf);
        let bytes = std::fs::read(copy.path()).unwrap();
        let elf = ElfFile64::<object::Endianness>::parse(&*bytes).unwrap();
        assert!(elf.section_by_name(".symtab").is_some());
        assert!(elf.gnu_debuglink().unwrap().is_none());
        // Its DWARF sections are holes.
        let dwarf: Vec<_> = elf
            .sections()
            .filter(|section| section.name().is_ok_and(|name| name.starts_with(".debug_")))
            .filter_map(|section| section.file_range())
            .collect();
        assert!(!dwarf.is_empty());
        for (start, size) in dwarf {
            let range = start as usize..(start + size) as usize;
            assert!(bytes[range].iter().all(|&byte| byte == 0));
        }
        drop(copy);
        // With source lines, blazesym reads the debug file's DWARF: the
        // copy's link names a copy of it, by descriptor.
        let copy = for_blazesym(&mapped, true).unwrap();
        let bytes = std::fs::read(copy.path()).unwrap();
        let elf = ElfFile64::<object::Endianness>::parse(&*bytes).unwrap();
        let (name, _) = elf.gnu_debuglink().unwrap().unwrap();
        let fd: i32 = std::str::from_utf8(name).unwrap().parse().unwrap();
        assert_eq!(
            std::fs::read_link(format!("/proc/self/fd/{fd}"))
                .unwrap()
                .to_string_lossy()
                .split(' ')
                .next(),
            Some("/memfd:stoke-debug-symbols")
        );
        drop(copy);
        std::fs::remove_file(&debug).unwrap();
        assert_eq!(
            reference_name(&program, offset),
            None,
            "the stripped program names it itself"
        );
    }

    #[test]
    fn links_to_fifos_are_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let name = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let program = build(dir.path(), "linked", &[]);
        let offset = offset_of(&program, &program, "a");
        let reference = reference_name(&program, offset).expect("named");
        // An absolute debug link, which stoke's lookup refuses and blazesym
        // would follow; and a `.dwp` beside the program.
        let mut section = fifo.as_os_str().as_bytes().to_vec();
        section.push(0);
        section.resize(section.len().next_multiple_of(4) + 4, 0);
        let content = dir.path().join("debuglink");
        std::fs::write(&content, section).unwrap();
        let add = format!(".gnu_debuglink={}", content.display());
        run(
            "objcopy",
            &[Path::new("--add-section"), Path::new(&add), &program],
        );
        let name = CString::new(dir.path().join("linked.dwp").as_os_str().as_bytes()).unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let names = within_10_s(move || {
            let mapped = MappedFile::on_host(&program);
            let copy = for_blazesym(&mapped, false).unwrap();
            let bytes = std::fs::read(copy.path()).unwrap();
            let elf = ElfFile64::<object::Endianness>::parse(&*bytes).unwrap();
            assert!(elf.section_by_name(".gnu_debuglink").is_none());
            assert!(elf.gnu_debuglink().unwrap().is_none());
            Symbolizer::new(false).file(&mapped, &[offset])
        });
        assert_eq!(&*names[0][0], reference);
    }

    /// The executable segments of `program`: (file offset, size).
    fn code_segments(program: &Path) -> Vec<(u64, u64)> {
        let bytes = std::fs::read(program).unwrap();
        let file = ElfFile64::<object::Endianness>::parse(&*bytes).unwrap();
        let endian = file.endian();
        file.elf_program_headers()
            .iter()
            .filter(|header| {
                header.p_type(endian) == elf::PT_LOAD && header.p_flags(endian).contains(elf::PF_X)
            })
            .map(|header| (header.p_offset(endian), header.p_filesz(endian)))
            .collect()
    }

    /// The debug file of `elf` that Debian's debug packages install, by
    /// build ID.
    fn debug_file_of(elf: &ElfFile64<object::Endianness>) -> PathBuf {
        let id: String = elf
            .build_id()
            .unwrap()
            .expect("a build ID")
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let path = PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &id[..2],
            &id[2..]
        ));
        assert!(path.exists(), "no {} (libc6-dbg)", path.display());
        path
    }

    /// The function blazesym finds at file offset `offset` of `program`
    /// in the symbol table of `symbols` (the program or its debug file),
    /// by address.
    fn symbol_table_name(program: &Path, symbols: &Path, offset: u64) -> Option<String> {
        let bytes = std::fs::read(program).unwrap();
        let file = ElfFile64::<object::Endianness>::parse(&*bytes).unwrap();
        let endian = file.endian();
        let load = file.elf_program_headers().iter().find(|header| {
            let start = header.p_offset(endian);
            header.p_type(endian) == elf::PT_LOAD
                && (start..start + header.p_filesz(endian)).contains(&offset)
        })?;
        let address = load.p_vaddr(endian) + offset - load.p_offset(endian);
        blazesym_name(symbols, false, Input::VirtOffset(&[address][..]))
    }

    #[test]
    fn copies_hold_what_names_need_and_little_else() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps
            .lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .find(|path| path.contains("/libc.so"))
            .map(PathBuf::from)
            .expect("libc mapped");
        for program in [libc, std::env::current_exe().unwrap()] {
            let code = code_segments(&program);
            let offsets: Vec<u64> = code
                .iter()
                .flat_map(|&(start, size)| (0..64).map(move |step| start + size * step / 64))
                .collect();
            let mapped = MappedFile::on_host(&program);
            let names = Symbolizer::new(false).file(&mapped, &offsets);
            // Named as from the file itself, from its symbol table if it has
            // one (this test is built with DWARF too: not read); Debian's
            // libc has none: from its debug file's (libc6-dbg).
            let copy = for_blazesym(&mapped, false).unwrap();
            let bytes = std::fs::read(&program).unwrap();
            let elf = ElfFile64::<object::Endianness>::parse(&*bytes).unwrap();
            let symbols = match elf.section_by_name(".symtab") {
                Some(_) => program.clone(),
                None => debug_file_of(&elf),
            };
            assert!(!copy.dwarf && (copy.segments.is_some() == (symbols != program)));
            for (offset, name) in offsets.iter().zip(&names) {
                let reference = symbol_table_name(&program, &symbols, *offset)
                    .unwrap_or_else(|| format!("{}+{offset:#x}", mapped.name));
                assert_eq!(*name[0], *reference, "{} at {offset:#x}", program.display());
            }
            let named = names.iter().filter(|name| !name[0].contains("+0x")).count();
            assert!(
                named * 2 > offsets.len(),
                "{}: {named} named",
                program.display()
            );
            // The copy has the file's size; its code is holes.
            let metadata = copy.file.metadata().unwrap();
            let size = std::fs::metadata(&symbols).unwrap().len();
            assert_eq!(metadata.len(), size);
            let stored = std::os::unix::fs::MetadataExt::blocks(&metadata) * 512;
            let code_bytes: u64 = code.iter().map(|&(_, size)| size).sum();
            assert!(
                stored + code_bytes <= size + (64 << 10),
                "{}: {stored} bytes stored of {size}, {code_bytes} of code",
                program.display()
            );
        }
    }

    #[test]
    fn copies_are_sealed() {
        let mapped = MappedFile::on_host(Path::new("/usr/bin/xz"));
        let copy = for_blazesym(&mapped, false).unwrap();
        // SAFETY: fcntl on a descriptor the copy holds.
        let seals = unsafe { libc::fcntl(copy.file.as_raw_fd(), libc::F_GET_SEALS) };
        let wanted =
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
        assert_eq!(seals & wanted, wanted);
        assert!(copy.file.set_len(0).is_err());
        assert!(copy.file.write_all_at(b"x", 0).is_err());
    }
}
