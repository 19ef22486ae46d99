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
//! executable mappings in `unwind_mappings`, and where they are in
//! `unwind_processes`. Until a process's entry is
//! in, the sampler walks its frame pointers.
//!
//! A process whose files all have their tables already (most new processes
//! of a busy host run the same few binaries) is loaded by the caller
//! itself when the thread is idle: handing it over would cost two context
//! switches for a map update of microseconds.

use std::{
    hash::RandomState,
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc::{self, Sender},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    thread::JoinHandle,
    time::Instant,
};

use anyhow::{Context, Result};
use aya::{
    maps::{HashMap as BpfHashMap, Map, MapData},
    Ebpf,
};
use foldhash::{HashMap, HashMapExt, HashSet};
use profiler_common::{
    bpf_names as names,
    unwind::{Mapping, PackedRow, ProcessMappings, UnwindPage, UnwindRow, MAX_MAPPINGS},
};

use super::{
    file_table,
    mapped_array::{stride, MappedArray},
    pages,
    table::{self, UnwindTable},
};
use crate::elf::{
    bounded::BoundedFile,
    file::{self as elf_file, Fingerprint},
};
use crate::model::UnwindSummary;
use crate::process::{MappedFile, MappingTarget, ProcessImage};

/// Rows of one file the BPF binary search can handle (25 steps).
const MAX_FILE_ROWS: usize = 1 << 24;

/// Files remembered by device and inode, beyond those that loaded
/// processes map, before the others are forgotten.
const MAX_FILES_SEEN: usize = 4096;

/// Bytes that `rows` rows take in the map.
pub fn map_bytes(rows: usize) -> usize {
    rows * stride::<PackedRow>()
}

/// The BPF maps the loader fills, taken from the sampler's object.
pub struct UnwindMaps {
    /// `unwind_rows`: every file's rows.
    pub rows: Map,
    /// `unwind_pages`: every file's page index.
    pub pages: Map,
    /// `unwind_processes`: where each process's mappings are.
    pub processes: Map,
    /// `unwind_mappings`: every process's mappings.
    pub mappings: Map,
}

impl UnwindMaps {
    /// Takes the maps from the sampler's loaded `object`.
    pub fn take_from(object: &mut Ebpf) -> Result<Self> {
        let mut take = |name: &str| {
            object
                .take_map(name)
                .with_context(|| format!("no {name} map"))
        };
        Ok(Self {
            rows: take(names::map::unwind_rows)?,
            pages: take(names::map::unwind_pages)?,
            processes: take(names::map::unwind_processes)?,
            mappings: take(names::map::unwind_mappings)?,
        })
    }
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
        let rows = MappedArray::map(maps.rows, names::map::unwind_rows)?;
        let pages = MappedArray::map(maps.pages, names::map::unwind_pages)?;
        let mappings = MappedArray::map(maps.mappings, names::map::unwind_mappings)?;
        let processes: BpfHashMap<MapData, u32, [u8; size_of::<ProcessMappings>()]> =
            BpfHashMap::try_from(maps.processes)?;
        let shared = Arc::new(Shared {
            worker: Mutex::new(Worker {
                rows,
                pages,
                mappings,
                processes,
                files: HashMap::new(),
                builds: HashMap::new(),
                hasher: RandomState::new(),
                mapped_by: HashMap::new(),
                loaded: Vec::new(),
                files_limit: MAX_FILES_SEEN,
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
    page_shift: u32,
    table: UnwindTable,
}

/// A process in the maps: the files it maps, by device and inode, and
/// where its mappings are in `unwind_mappings`.
struct LoadedProcess {
    files: Vec<(u64, u64)>,
    first: u32,
    count: u32,
}

struct Worker {
    rows: MappedArray<PackedRow>,
    pages: MappedArray<UnwindPage>,
    mappings: MappedArray<Mapping>,
    processes: BpfHashMap<MapData, u32, [u8; size_of::<ProcessMappings>()]>,
    /// By device and inode; `None` for files without a usable table.
    files: HashMap<(u64, u64), Option<Arc<LoadedFile>>>,
    /// The same, by build.
    builds: HashMap<Fingerprint, Option<Arc<LoadedFile>>>,
    /// Keys the `.eh_frame` hashes of fingerprints, secret to this run.
    hasher: RandomState,
    /// Each loaded process: the files it maps (tables no process maps
    /// can make room for others) and where its mappings are.
    mapped_by: HashMap<u32, LoadedProcess>,
    /// Every table in the maps.
    loaded: Vec<Arc<LoadedFile>>,
    /// How many files by device and inode are remembered before those no
    /// process maps are forgotten.
    files_limit: usize,
    summary: UnwindSummary,
}

impl Worker {
    fn apply(&mut self, request: Request) {
        let Request { ended, new } = request;
        for pid in ended {
            self.end(pid);
        }
        for (pid, mappings) in new {
            self.load(pid, &mappings);
        }
        if self.files.len() > self.files_limit {
            self.forget_unmapped_files();
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
        let left_out = mappings.len().saturating_sub(MAX_MAPPINGS);
        let mappings = &mappings[..mappings.len() - left_out];
        // A process whose mappings were read again (it ran code it mapped
        // since) is loaded anew: the image loaded last is the one in force.
        self.end(pid);
        // Before its files load: they are in use while the others make room.
        self.mapped_by.insert(
            pid,
            LoadedProcess {
                files: mappings.iter().map(|m| m.file.key).collect(),
                first: 0,
                count: 0,
            },
        );
        let mut placed: Vec<Mapping> = mappings.iter().map(|m| self.place(m)).collect();
        placed.sort_by_key(|mapping| mapping.start);
        let count = placed.len() as u32;
        let Some(first) = self.mappings.insert(placed.into_iter()) else {
            self.summary.processes_without_room += 1;
            return;
        };
        // SAFETY: ProcessMappings is repr(C) plain data without padding.
        let value: [u8; size_of::<ProcessMappings>()] =
            unsafe { std::mem::transmute(ProcessMappings { count, first }) };
        if self.processes.insert(pid, value, 0).is_ok() {
            self.summary.processes += 1;
            self.summary.processes_over_mapping_cap += usize::from(left_out > 0);
            self.summary.mappings_left_out += left_out;
            if let Some(process) = self.mapped_by.get_mut(&pid) {
                (process.first, process.count) = (first, count);
            }
        } else {
            self.mappings.remove(first, count);
        }
    }

    /// Process `pid` ended: its entry leaves the processes map, then its
    /// mappings make room for others.
    fn end(&mut self, pid: u32) {
        if let Some(process) = self.mapped_by.remove(&pid) {
            let _ = self.processes.remove(&pid);
            self.mappings.remove(process.first, process.count);
        }
    }

    /// An executable mapping as the unwinder reads it: with its file's
    /// rows, once they are loaded.
    fn place(&mut self, mapping: &ExecMapping) -> Mapping {
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
                placed.row_base = (mapping.start.wrapping_sub(vaddr)).wrapping_add(file.table.base);
                placed.rows_start = file.rows_start;
                placed.rows_count = file.rows_count;
                placed.pages_start = file.pages_start;
                placed.pages_count = file.pages_count;
                placed.page_shift = file.page_shift;
            }
        }
        placed
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
        let loaded = self.compile_and_load(file);
        if let Some(fingerprint) = fingerprint {
            self.builds.insert(fingerprint, loaded.clone());
        }
        loaded
    }

    fn compile_and_load(&mut self, file: &MappedFile) -> Option<Arc<LoadedFile>> {
        let origin = file.origin.as_ref();
        let (table, elapsed) = file_table::read_and_compile(
            &file.path(),
            origin.map(|origin| &*origin.root),
            origin.map(|origin| origin.path.as_path()),
        );
        self.summary.compile_time += elapsed;
        let Some(mut table) = table.ok().filter(loadable) else {
            self.summary.files_without_table += 1;
            return None;
        };
        let packed = || table.rows.iter().map(UnwindRow::packed);
        let mut rows_start = self.rows.insert(packed());
        if rows_start.is_none() && self.remove_unmapped_tables() {
            rows_start = self.rows.insert(packed());
        }
        let Some(rows_start) = rows_start else {
            self.summary.files_without_room += 1;
            return None;
        };
        // Without room for its index, a file's rows are searched whole.
        let index = pages::page_index(&table.rows).unwrap_or_default();
        let (pages_start, pages_count) = match self.pages.insert(index.pages.iter().copied()) {
            Some(start) => (start, index.pages.len() as u32),
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
        let loaded = Arc::new(LoadedFile {
            rows_start,
            rows_count,
            pages_start,
            pages_count,
            page_shift: index.shift,
            table,
        });
        self.loaded.push(loaded.clone());
        Some(loaded)
    }

    /// Forgets which device and inode had which table for the files no
    /// loaded process maps: a host that runs for days sees new inodes by
    /// the thousand (each container its own). The tables stay, found again
    /// by build.
    fn forget_unmapped_files(&mut self) {
        let mapped: HashSet<(u64, u64)> = self
            .mapped_by
            .values()
            .flat_map(|process| process.files.iter().copied())
            .collect();
        self.files.retain(|key, _| mapped.contains(key));
        // Builds without a table hold no room in the maps, only memory.
        if self.builds.len() > MAX_FILES_SEEN {
            self.builds.retain(|_, file| file.is_some());
        }
        self.files_limit = MAX_FILES_SEEN.max(2 * self.files.len());
    }

    /// Removes from the maps the tables of the files no loaded process
    /// maps, to make room for a new one: whether any were. Their processes
    /// have left the processes map, so no sample reads their rows any more
    /// (but one being taken as a process exits).
    fn remove_unmapped_tables(&mut self) -> bool {
        self.forget_unmapped_files();
        let in_use: HashSet<*const LoadedFile> =
            self.files.values().flatten().map(Arc::as_ptr).collect();
        self.builds.retain(|_, file| {
            file.as_ref()
                .is_none_or(|file| in_use.contains(&Arc::as_ptr(file)))
        });
        let before = self.loaded.len();
        let (rows, pages) = (&mut self.rows, &mut self.pages);
        self.loaded.retain(|file| {
            let keep = in_use.contains(&Arc::as_ptr(file));
            if !keep {
                rows.remove(file.rows_start, file.rows_count);
                pages.remove(file.pages_start, file.pages_count);
            }
            keep
        });
        let removed = before - self.loaded.len();
        self.summary.files_removed += removed;
        removed > 0
    }
}
