//! Puts compiled tables where the BPF unwinder reads them, process by
//! process, on a thread of its own: compiling a large library takes a
//! moment, and sampling must not wait for it.
//!
//! Each file's table is compiled once per recording and copied into the
//! memory-mapped `unwind_rows` array: files are told apart by device and
//! inode, and copies of one build of a library (in other containers'
//! filesystems) share the table of the first copy seen, by build ID and
//! `.eh_frame` ([`elf_file::Fingerprint`]), and its page index
//! ([`pages`]) into `unwind_pages`; each process gets its sorted
//! executable mappings in `unwind_processes`. Until a process's entry is
//! in, the sampler walks its frame pointers.
//!
//! A process whose files all have their tables already (most new processes
//! of a busy host run the same few binaries) is loaded by the caller
//! itself when the thread is idle: handing it over would cost two context
//! switches for a map update of microseconds.

use std::{
    collections::HashMap,
    hash::RandomState,
    marker::PhantomData,
    os::fd::{AsFd, AsRawFd},
    ptr::NonNull,
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc::{self, Sender},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use aya::maps::{HashMap as BpfHashMap, Map, MapData};
use profiler_common::unwind::{
    Mapping, PackedRow, ProcessMappings, UnwindPage, UnwindRow, MAX_MAPPINGS,
};

use super::{
    bounded::BoundedFile,
    debug_file,
    elf_file::{self, Fingerprint},
    pages,
    table::{self, UnwindTable},
};
use crate::process::{MappedFile, MappingTarget, ProcessImage};

/// Bytes of one `T` in an array map: the kernel rounds values up to 8.
const fn stride<T>() -> usize {
    size_of::<T>().next_multiple_of(8)
}

/// Rows of one file the BPF binary search can handle (25 steps).
const MAX_FILE_ROWS: usize = 1 << 24;

/// Bytes that `rows` rows take in the map.
pub fn map_bytes(rows: usize) -> usize {
    rows * stride::<PackedRow>()
}

/// Capacity of the page-index map for a rows map of `rows`: pages are
/// fewer than rows in any file with an index worth having (libc has 23k
/// rows in 400 pages).
pub fn page_capacity(rows: u32) -> u32 {
    rows / 4
}

/// The BPF maps the loader fills.
pub struct UnwindMaps {
    /// `unwind_rows`: every file's rows.
    pub rows: Map,
    /// `unwind_pages`: every file's page index.
    pub pages: Map,
    /// `unwind_processes`: each process's mappings.
    pub processes: Map,
}

/// Whether a recording loads a table (one it could search, that has rows).
pub fn loadable(table: &UnwindTable) -> bool {
    !table.rows.is_empty() && table.rows.len() < MAX_FILE_ROWS
}

/// One executable mapping to load.
struct ExecMapping {
    start: u64,
    end: u64,
    file_offset: u64,
    file: Arc<MappedFile>,
}

/// What changed since the last request: processes that ended (their
/// mappings are gone), then new processes to load.
struct Request {
    ended: Vec<u32>,
    new: Vec<(u32, Vec<ExecMapping>)>,
}

/// What loading tables cost, for the summary and the bench.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct UnwindSummary {
    /// Files whose tables were compiled and loaded.
    pub files: usize,
    /// Files that shared the table of another copy of the same build.
    pub shared_files: usize,
    /// Of those, the files whose separate debug file was read.
    pub debug_files: usize,
    /// Files without usable CFI (their frames walk frame pointers).
    pub files_without_table: usize,
    /// Files left out because the rows map was full.
    pub files_without_room: usize,
    /// Rows loaded, all files together.
    pub rows: usize,
    /// CFI entries the compiler could not read, left out of the tables.
    pub skipped_fdes: usize,
    /// Bytes the loaded rows take in the map.
    pub bytes: usize,
    /// Time spent compiling tables.
    #[serde(serialize_with = "crate::profile::seconds")]
    pub compile_time: Duration,
    /// Processes whose tables were loaded.
    pub processes: usize,
}

/// The loader thread's handle.
pub struct UnwindLoader {
    requests: Sender<Request>,
    shared: Arc<Shared>,
    thread: JoinHandle<()>,
}

/// What the loader thread and its caller share.
struct Shared {
    worker: Mutex<Worker>,
    /// Requests sent to the thread and not yet done: while any is, a later
    /// one must wait its turn (it may end or replace what they load).
    pending: AtomicUsize,
}

impl Shared {
    fn worker(&self) -> MutexGuard<'_, Worker> {
        self.worker.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl UnwindLoader {
    /// Starts the thread that owns the maps.
    pub fn start(maps: UnwindMaps) -> Result<Self> {
        let rows = MappedArray::map(maps.rows, "unwind_rows")?;
        let pages = MappedArray::map(maps.pages, "unwind_pages")?;
        let processes: BpfHashMap<MapData, u32, [u8; size_of::<ProcessMappings>()]> =
            BpfHashMap::try_from(maps.processes)?;
        let shared = Arc::new(Shared {
            worker: Mutex::new(Worker {
                rows,
                pages,
                processes,
                files: HashMap::new(),
                builds: HashMap::new(),
                hasher: RandomState::new(),
                summary: UnwindSummary::default(),
            }),
            pending: AtomicUsize::new(0),
        });
        let (requests, incoming) = mpsc::channel::<Request>();
        let thread = std::thread::Builder::new()
            .name("stoke-unwind".into())
            .spawn({
                let shared = shared.clone();
                move || {
                    for request in incoming {
                        shared.worker().apply(request);
                        shared.pending.fetch_sub(1, Ordering::Release);
                    }
                }
            })
            .context("starting the unwind table thread")?;
        Ok(Self {
            requests,
            shared,
            thread,
        })
    }

    /// Forgets the mappings of the processes that exec'd or exited
    /// (`ended`), then loads the tables of newly seen process images.
    pub fn update<'a>(&self, ended: Vec<u32>, new: impl Iterator<Item = &'a ProcessImage>) {
        let new: Vec<_> = new.map(|image| (image.pid, exec_mappings(image))).collect();
        if ended.is_empty() && new.is_empty() {
            return;
        }
        let request = Request { ended, new };
        if self.shared.pending.load(Ordering::Acquire) == 0 {
            if let Ok(mut worker) = self.shared.worker.try_lock() {
                if worker.has_tables_for(&request) {
                    worker.apply(request);
                    return;
                }
            }
        }
        self.shared.pending.fetch_add(1, Ordering::AcqRel);
        if self.requests.send(request).is_err() {
            self.shared.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Stops the thread and says what it did.
    pub fn finish(self) -> UnwindSummary {
        drop(self.requests);
        let _ = self.thread.join();
        self.shared.worker().summary.clone()
    }
}

/// The file mappings of an image, to load.
fn exec_mappings(image: &ProcessImage) -> Vec<ExecMapping> {
    image
        .mappings()
        .iter()
        .filter_map(|mapping| match &mapping.target {
            MappingTarget::File(file) => Some(ExecMapping {
                start: mapping.start,
                end: mapping.end,
                file_offset: mapping.file_offset,
                file: file.clone(),
            }),
            MappingTarget::Named(_) => None,
        })
        .collect()
}

/// A file's rows and pages in the maps, and its table (without the rows,
/// which live in the map) to place them in each process.
struct LoadedFile {
    rows_start: u32,
    rows_count: u32,
    pages_start: u32,
    pages_count: u32,
    table: UnwindTable,
}

struct Worker {
    rows: MappedArray<PackedRow>,
    pages: MappedArray<UnwindPage>,
    processes: BpfHashMap<MapData, u32, [u8; size_of::<ProcessMappings>()]>,
    /// By device and inode; `None` for files without a usable table.
    files: HashMap<(u64, u64), Option<Arc<LoadedFile>>>,
    /// The same, by build.
    builds: HashMap<Fingerprint, Option<Arc<LoadedFile>>>,
    /// Keys the `.eh_frame` hashes of fingerprints, secret to this run.
    hasher: RandomState,
    summary: UnwindSummary,
}

impl Worker {
    fn apply(&mut self, request: Request) {
        let Request { ended, new } = request;
        for pid in ended {
            let _ = self.processes.remove(&pid);
        }
        for (pid, mappings) in new {
            self.load(pid, &mappings);
        }
    }

    /// Whether every file the request's processes map has been seen, so
    /// that loading them compiles nothing.
    fn has_tables_for(&self, request: &Request) -> bool {
        request
            .new
            .iter()
            .flat_map(|(_, mappings)| mappings.iter().take(MAX_MAPPINGS))
            .all(|mapping| self.files.contains_key(&mapping.file.key))
    }

    fn load(&mut self, pid: u32, mappings: &[ExecMapping]) {
        let mut process = ProcessMappings {
            count: 0,
            padding: 0,
            mappings: [Mapping::default(); MAX_MAPPINGS],
        };
        for mapping in mappings.iter().take(MAX_MAPPINGS) {
            let entry = match self.files.get(&mapping.file.key) {
                Some(entry) => entry.clone(),
                None => {
                    let loaded = self.table_of(&mapping.file);
                    self.files.insert(mapping.file.key, loaded.clone());
                    loaded
                }
            };
            let mut placed = Mapping {
                start: mapping.start,
                end: mapping.end,
                ..Mapping::default()
            };
            if let Some(file) = entry {
                if let Some(vaddr) = file.table.vaddr_of_offset(mapping.file_offset) {
                    // address - row_base = (address - load bias) - base.
                    placed.row_base =
                        (mapping.start.wrapping_sub(vaddr)).wrapping_add(file.table.base);
                    placed.rows_start = file.rows_start;
                    placed.rows_count = file.rows_count;
                    placed.pages_start = file.pages_start;
                    placed.pages_count = file.pages_count;
                }
            }
            process.mappings[process.count as usize] = placed;
            process.count += 1;
        }
        process.mappings[..process.count as usize].sort_by_key(|mapping| mapping.start);
        // SAFETY: ProcessMappings is repr(C) plain data without padding.
        let bytes: [u8; size_of::<ProcessMappings>()] = unsafe { std::mem::transmute(process) };
        if self.processes.insert(pid, bytes, 0).is_ok() {
            self.summary.processes += 1;
        }
    }

    /// The table of a file not seen before: another copy's of the same
    /// build, or compiled and loaded now.
    fn table_of(&mut self, file: &MappedFile) -> Option<Arc<LoadedFile>> {
        let deadline = Instant::now() + table::COMPILE_TIME_BUDGET;
        let fingerprint = BoundedFile::open(&file.path(), deadline)
            .ok()
            .and_then(|opened| elf_file::fingerprint(opened, &self.hasher));
        if let Some(shared) = fingerprint.as_ref().and_then(|f| self.builds.get(f)) {
            self.summary.shared_files += usize::from(shared.is_some());
            return shared.clone();
        }
        let loaded = self.compile_and_load(file).map(Arc::new);
        if let Some(fingerprint) = fingerprint {
            self.builds.insert(fingerprint, loaded.clone());
        }
        loaded
    }

    fn compile_and_load(&mut self, file: &MappedFile) -> Option<LoadedFile> {
        let origin = file.origin.as_ref();
        let (table, elapsed) = debug_file::read_and_compile(
            &file.path(),
            origin.map(|origin| &*origin.root),
            origin.map(|origin| origin.path.as_path()),
        );
        self.summary.compile_time += elapsed;
        let Some(mut table) = table.ok().filter(loadable) else {
            self.summary.files_without_table += 1;
            return None;
        };
        let Some(rows_start) = self.rows.append(table.rows.iter().map(UnwindRow::packed)) else {
            self.summary.files_without_room += 1;
            return None;
        };
        // Without room for its index, a file's rows are searched whole.
        let index = pages::page_index(&table.rows).unwrap_or_default();
        let (pages_start, pages_count) = match self.pages.append(index.iter().copied()) {
            Some(start) => (start, index.len() as u32),
            None => (0, 0),
        };
        self.summary.files += 1;
        self.summary.rows += table.rows.len();
        self.summary.skipped_fdes += table.stats.skipped_fdes;
        self.summary.bytes +=
            map_bytes(table.rows.len()) + pages_count as usize * stride::<UnwindPage>();
        self.summary.debug_files += usize::from(table.debug_file.is_some());
        let rows_count = table.rows.len() as u32;
        table.rows = Vec::new();
        Some(LoadedFile {
            rows_start,
            rows_count,
            pages_start,
            pages_count,
            table,
        })
    }
}

/// An array map (`unwind_rows`, `unwind_pages`), mapped into stoke
/// (BPF_F_MMAPABLE), filled from the front.
struct MappedArray<T> {
    /// Keeps the map (and so the mapping's memory) alive.
    _map: MapData,
    base: NonNull<u8>,
    capacity: usize,
    used: usize,
    values: PhantomData<T>,
}

// SAFETY: the mapping is owned by this value and used from one thread.
unsafe impl<T> Send for MappedArray<T> {}

impl<T> Drop for MappedArray<T> {
    fn drop(&mut self) {
        let len = (self.capacity * stride::<T>()).next_multiple_of(4096);
        // SAFETY: unmapping what map() mapped.
        unsafe { libc::munmap(self.base.as_ptr().cast(), len) };
    }
}

impl<T: Copy> MappedArray<T> {
    fn map(map: Map, name: &str) -> Result<Self> {
        let Map::Array(data) = map else {
            bail!("{name} is not an array map");
        };
        let capacity = data.info()?.max_entries() as usize;
        let len = (capacity * stride::<T>()).next_multiple_of(4096);
        // SAFETY: mapping the whole of a BPF_F_MMAPABLE array map.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                data.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("mapping {name}"));
        }
        Ok(Self {
            _map: data,
            base: NonNull::new(base.cast()).context("mmap returned null")?,
            capacity,
            used: 0,
            values: PhantomData,
        })
    }

    /// Copies `values` in after the others; their first index, or `None`
    /// when they do not fit.
    fn append(&mut self, values: impl ExactSizeIterator<Item = T>) -> Option<u32> {
        let count = values.len();
        if self.capacity - self.used < count {
            return None;
        }
        let start = self.used;
        // `take`: never past the room checked, whatever the iterator yields.
        for value in values.take(count) {
            // SAFETY: within the mapping; values are plain data.
            unsafe {
                let slot = self.base.as_ptr().add(self.used * stride::<T>());
                std::ptr::write_unaligned(slot.cast::<T>(), value);
            }
            self.used += 1;
        }
        u32::try_from(start).ok()
    }
}
