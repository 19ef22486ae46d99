//! Reading files that processes control, within bounds: a file's size, the
//! bytes read from it and the time spent on it are capped, so that no
//! mapped file (a sparse 8 GB file, forged section sizes, a file truncated
//! while it is read) can exhaust stoke's memory or hold it up.
//!
//! A [`BoundedFile`] is read at offsets (`pread`), never mapped: a file
//! truncated meanwhile gives a short read, which is an error, never a
//! SIGBUS.

use std::{
    cell::Cell,
    fs::File,
    io::{self, Read, Seek, SeekFrom},
    os::unix::fs::FileExt,
    path::Path,
    rc::Rc,
    time::Instant,
};

use crate::rootfs;

/// The largest file whose unwind table is compiled: far above any real
/// executable or library (libjvm.so is about 20 MB), and what keeps a
/// sparse file of terabytes from being read.
pub const MAX_FILE_BYTES: u64 = 256 << 20;

/// The most bytes read from one file to compile its table (headers, notes,
/// `.eh_frame`, `.debug_frame`, once each).
pub const MAX_READ_BYTES: u64 = 192 << 20;

/// The most bytes read from a separate debug file: its section headers,
/// build ID note and `.debug_frame`, whatever size the file has.
pub const MAX_DEBUG_READ_BYTES: u64 = 128 << 20;

/// Which bound a read ran into; shared with the [`BoundedFile`] once it is
/// moved into a reader that hides its errors (`object`'s `ReadCache`).
pub type Exceeded = Rc<Cell<Option<&'static str>>>;

/// A regular file read within a byte budget and a deadline.
#[derive(Debug)]
pub struct BoundedFile {
    file: File,
    /// The size when opened: reads stay below it even if the file grows.
    len: u64,
    position: u64,
    remaining: u64,
    deadline: Instant,
    exceeded: Exceeded,
}

impl BoundedFile {
    /// Opens the regular file at `path` (no FIFO, no device) for compiling
    /// its table: refused if larger than [`MAX_FILE_BYTES`].
    pub fn open(path: &Path, deadline: Instant) -> io::Result<Self> {
        let file = rootfs::open_regular(path)?;
        let len = file.metadata()?.len();
        if len > MAX_FILE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!(
                    "{} MB, more than the {} MB whose unwind tables are compiled",
                    len >> 20,
                    MAX_FILE_BYTES >> 20
                ),
            ));
        }
        Ok(Self::new(file, len, MAX_READ_BYTES, deadline))
    }

    /// A separate debug file, already opened as a regular file: any size
    /// (only its headers and `.debug_frame` are read), at most
    /// [`MAX_DEBUG_READ_BYTES`] read.
    pub fn for_debug_file(file: File, deadline: Instant) -> Self {
        let len = file.metadata().map_or(0, |metadata| metadata.len());
        Self::new(file, len, MAX_DEBUG_READ_BYTES, deadline)
    }

    fn new(file: File, len: u64, budget: u64, deadline: Instant) -> Self {
        Self {
            file,
            len,
            position: 0,
            remaining: budget,
            deadline,
            exceeded: Exceeded::default(),
        }
    }

    /// Where the bound a read ran into will be told.
    pub fn exceeded(&self) -> Exceeded {
        self.exceeded.clone()
    }

    fn refuse(&self, why: &'static str) -> io::Error {
        self.exceeded.set(Some(why));
        io::Error::other(why)
    }
}

impl Read for BoundedFile {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if buffer.is_empty() || self.position >= self.len {
            return Ok(0);
        }
        if Instant::now() > self.deadline {
            return Err(self.refuse("reading it takes too long"));
        }
        let wanted = (buffer.len() as u64)
            .min(self.len - self.position)
            .min(self.remaining);
        if wanted == 0 {
            return Err(self.refuse("more of it would be read than any real file needs"));
        }
        let read = self
            .file
            .read_at(&mut buffer[..wanted as usize], self.position)?;
        self.position += read as u64;
        self.remaining -= read as u64;
        Ok(read)
    }
}

impl Seek for BoundedFile {
    fn seek(&mut self, position: SeekFrom) -> io::Result<u64> {
        let target = match position {
            SeekFrom::Start(offset) => Some(offset),
            SeekFrom::End(delta) => self.len.checked_add_signed(delta),
            SeekFrom::Current(delta) => self.position.checked_add_signed(delta),
        };
        self.position = target.ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        Ok(self.position)
    }
}

#[cfg(test)]
mod tests {
    use std::{io::Write, time::Duration};

    use tempfile::NamedTempFile;

    use super::*;
    use crate::unwind::{file_table::read_and_compile, table::compile_from};

    /// A file holding `bytes`, removed however the test ends.
    fn temp_file(bytes: &[u8]) -> NamedTempFile {
        let mut file = NamedTempFile::with_prefix("stoke-bounded-").unwrap();
        file.write_all(bytes).unwrap();
        file
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn a_sparse_huge_file_is_refused_without_reading() {
        let file = temp_file(b"");
        file.as_file().set_len(8 << 30).unwrap();
        let error = BoundedFile::open(file.path(), later()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::FileTooLarge, "{error}");
    }

    #[test]
    fn devices_and_fifos_are_refused() {
        for path in ["/dev/zero", "/dev/null", "/proc/self"] {
            assert!(
                BoundedFile::open(Path::new(path), later()).is_err(),
                "{path}"
            );
        }
    }

    #[test]
    fn reads_stop_at_the_budget_and_say_why() {
        let temp = temp_file(&[7; 10_000]);
        let file = rootfs::open_regular(temp.path()).unwrap();
        let mut bounded = BoundedFile::new(file, 10_000, 4096, later());
        let exceeded = bounded.exceeded();
        let mut buffer = vec![0; 10_000];
        let error = bounded.read_exact(&mut buffer).unwrap_err();
        assert!(error.to_string().contains("more of it"), "{error}");
        assert!(exceeded.get().is_some());
    }

    #[test]
    fn reads_stop_at_the_deadline() {
        let file = temp_file(&[7; 100]);
        let mut bounded = BoundedFile::open(file.path(), Instant::now()).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let mut buffer = [0; 10];
        assert!(bounded.read(&mut buffer).is_err());
        assert_eq!(bounded.exceeded().get(), Some("reading it takes too long"));
    }

    /// xz with its `.eh_frame` section header claiming `size` bytes, in a
    /// file (sparse) of `file_size` bytes.
    fn forged_xz(size: u64, file_size: u64) -> NamedTempFile {
        use object::{read::elf::ElfFile64, Object, ObjectSection};
        let mut bytes = std::fs::read("/usr/bin/xz").unwrap();
        let index = ElfFile64::<object::Endianness>::parse(&*bytes)
            .unwrap()
            .section_by_name(".eh_frame")
            .unwrap()
            .index()
            .0;
        let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
        let size_field = shoff + index * 64 + 32;
        bytes[size_field..size_field + 8].copy_from_slice(&size.to_le_bytes());
        let file = temp_file(&bytes);
        file.as_file().set_len(file_size).unwrap();
        file
    }

    #[test]
    fn forged_section_sizes_are_not_read() {
        // 100 MB of .eh_frame claimed, in a 200 MB file: above the 64 MB a
        // section may have, left out without being read.
        let file = forged_xz(100 << 20, 200 << 20);
        let (table, time) = read_and_compile(file.path(), None, None);
        let table = table.unwrap();
        assert!(table.stats.section_errors >= 1, "{:?}", table.stats);
        assert!(time < Duration::from_secs(1), "{time:?}");
    }

    #[test]
    fn files_with_too_many_sections_get_no_table() {
        // xz's section table copied to the end, followed by copies of its
        // last header, up to 200,000 sections (extended numbering: e_shnum
        // 0, the count in section 0's sh_size).
        let mut bytes = std::fs::read("/usr/bin/xz").unwrap();
        let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
        let count = usize::from(u16::from_le_bytes([bytes[0x3c], bytes[0x3d]]));
        let mut headers = bytes[shoff..shoff + count * 64].to_vec();
        let last = headers[headers.len() - 64..].to_vec();
        let total = 200_000;
        for _ in count..total {
            headers.extend_from_slice(&last);
        }
        headers[32..40].copy_from_slice(&(total as u64).to_le_bytes());
        let new_shoff = bytes.len().next_multiple_of(8);
        bytes.resize(new_shoff, 0);
        bytes.extend_from_slice(&headers);
        bytes[0x28..0x30].copy_from_slice(&(new_shoff as u64).to_le_bytes());
        bytes[0x3c..0x3e].copy_from_slice(&0u16.to_le_bytes());
        let error = compile_from(&*bytes, later(), |_| None).unwrap_err();
        assert!(error.to_string().contains("more sections"), "{error}");
    }

    #[test]
    fn compiling_stops_at_the_deadline() {
        let bytes = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6").unwrap();
        let error = compile_from(&*bytes, Instant::now(), |_| None).unwrap_err();
        assert!(error.to_string().contains("too long"), "{error}");
    }

    #[test]
    fn a_file_truncated_while_read_gives_an_error() {
        let file = temp_file(&[7; 100_000]);
        let mut bounded = BoundedFile::open(file.path(), later()).unwrap();
        file.as_file().set_len(1000).unwrap();
        let mut buffer = vec![0; 100_000];
        assert!(bounded.read_exact(&mut buffer).is_err());
    }
}
