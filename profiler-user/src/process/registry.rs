//! The registry of sampled processes: a snapshot of each process's
//! executable mappings, taken when it is first sampled (and again after it
//! exec'd, or when it runs code it mapped since), so that its frames can be
//! named after it has exited.
//!
//! Every mapped file is opened through `/proc/PID/map_files/`, which reaches
//! the very file the process mapped: one deleted since, or one inside a
//! container's mount namespace, where the path means nothing on the host.
//! The descriptor is kept until the recording ends, and each file (by
//! device and inode) is opened once per host. Only regular files are
//! opened: a mapped device or FIFO keeps its name and no symbols.

use std::{
    cell::OnceCell,
    fs::File,
    io::{self, Read, Seek, SeekFrom, Write},
    os::fd::{FromRawFd, OwnedFd},
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use super::{
    identity::Identities,
    image::{base_name, FileOrigin, FileVersion, MappedFile, Mapping, MappingTarget, ProcessImage},
    maps::{self, MapsPath},
    reread::{same_mappings, Rereads},
};
use crate::procfs;
use foldhash::HashMap;

use crate::{
    model::{ImageId, Sample},
    rootfs::{self, Root},
};

/// Every process image seen during a recording: owned by the recording and
/// lent to the stages that read processes (the unwind loader, the Java
/// side, symbolization), so that each process's /proc is read once.
#[derive(Debug, Default)]
pub struct ProcessRegistry {
    images: Vec<ProcessImage>,
    live: HashMap<u32, ImageId>,
    /// Processes that exited since the last eviction: the samples their
    /// exiting threads take after the exit was recorded are theirs.
    exited: HashMap<u32, ImageId>,
    files: HashMap<(u64, u64), Arc<MappedFile>>,
    /// A copy of the vdso, which every process of this kernel maps alike.
    vdso: OnceCell<Option<Arc<MappedFile>>>,
    identities: Identities,
    rereads: Rereads,
    /// Images that replaced a live process's earlier one after a reread:
    /// not processes of their own.
    reread_images: usize,
}

/// What is known of a process before its /proc is read: a sample of it
/// spares some reads (each new process costs stoke a few, and a busy host
/// starts a hundred a second).
struct Known<'a> {
    /// The sampled thread's name: the process's if it is already gone.
    thread_name: &'a str,
    /// The process's own name (its main thread's), when the sample is of
    /// its main thread.
    process_name: Option<&'a str>,
    /// Whether it is a kernel thread, if the sample said.
    kernel_thread: Option<bool>,
    /// The key of its cgroups, if the sample said.
    cgroup_key: Option<u64>,
    /// Its executable's device and inode, if the sample said.
    exe_file: Option<((u32, u32), u64)>,
    /// How long it had run when sampled, if the sample said.
    age: Option<Duration>,
}

impl<'a> Known<'a> {
    fn nothing(thread_name: &'a str) -> Self {
        Self {
            thread_name,
            process_name: None,
            kernel_thread: None,
            cgroup_key: None,
            exe_file: None,
            age: None,
        }
    }

    fn of(sample: &'a Sample) -> Self {
        Self {
            thread_name: &sample.comm,
            process_name: (sample.tid == sample.tgid).then_some(sample.comm.as_str()),
            kernel_thread: Some(sample.kernel_thread),
            cgroup_key: sample.cgroup_key,
            exe_file: sample.exe_file,
            age: sample.age,
        }
    }
}

impl ProcessRegistry {
    /// The current image of process `pid`, snapshotting it on first sight.
    /// `thread_name` names the process if it is already gone.
    pub fn image_for(&mut self, pid: u32, thread_name: &str) -> ImageId {
        self.image_with(pid, &Known::nothing(thread_name))
    }

    /// Like [`Self::image_for`], with what a sample of the process tells.
    fn image_with(&mut self, pid: u32, known: &Known) -> ImageId {
        if let Some(&id) = self.live.get(&pid) {
            return id;
        }
        let id = self.add_snapshot(pid, known);
        self.live.insert(pid, id);
        id
    }

    /// The image a sample belongs to. An exiting thread's process may have
    /// been recorded as exited already: its image then, or, if it was never
    /// seen, a snapshot of what is left of it, not taken for a live
    /// process (nothing is loaded for it).
    pub fn image_of(&mut self, sample: &Sample) -> ImageId {
        let pid = sample.tgid;
        let known = Known::of(sample);
        if let Some(&id) = self.live.get(&pid) {
            return self.with_code_of(id, sample);
        }
        if !sample.exiting {
            return self.image_with(pid, &known);
        }
        if let Some(&id) = self.exited.get(&pid) {
            return id;
        }
        let id = self.add_snapshot(pid, &known);
        self.exited.insert(pid, id);
        id
    }

    /// The image of a live process that holds the code its sample ran:
    /// `id`'s, or, if the sample ran code outside its mappings (a library
    /// the process loaded since it was snapshotted, or code it generated in
    /// new memory), a new image with its mappings read again, whose files
    /// the unwinder then loads. Reads of a process's mappings back off.
    fn with_code_of(&mut self, id: ImageId, sample: &Sample) -> ImageId {
        if !self.rereads.due(&self.images[id], sample) {
            return id;
        }
        let Ok(maps) = maps::executable(sample.tgid) else {
            return id;
        };
        let mappings = self.mappings(sample.tgid, maps);
        let old = &self.images[id];
        if same_mappings(&mappings, &old.mappings) {
            return id;
        }
        let image = ProcessImage {
            pid: old.pid,
            name: old.name.clone(),
            exe: old.exe.clone(),
            kernel_thread: old.kernel_thread,
            identity: old.identity.clone(),
            started: old.started,
            mappings,
        };
        self.images.push(image);
        self.reread_images += 1;
        let id = self.images.len() - 1;
        self.live.insert(sample.tgid, id);
        id
    }

    /// A new image of process `pid`, as it is now.
    fn add_snapshot(&mut self, pid: u32, known: &Known) -> ImageId {
        let image = self.snapshot(pid, known);
        self.images.push(image);
        self.images.len() - 1
    }

    /// Process `pid` exec'd: its next sample needs a new snapshot.
    pub fn forget(&mut self, pid: u32) {
        self.live.remove(&pid);
        self.rereads.forget(pid);
    }

    /// Process `pid` exited: the samples its threads take while they exit
    /// are still its own.
    pub fn exited(&mut self, pid: u32) {
        if let Some(id) = self.live.remove(&pid) {
            self.exited.insert(pid, id);
        }
        self.rereads.forget(pid);
    }

    /// The processes taken as alive whose /proc entry is gone: their exit
    /// record was lost (a full ring), and nothing else would end them.
    pub fn live_but_gone(&self) -> Vec<u32> {
        self.live
            .keys()
            .copied()
            .filter(|pid| !Path::new(&format!("/proc/{pid}")).exists())
            .collect()
    }

    /// Whether the image is its process's current one: the process has
    /// not exec'd or exited since.
    pub fn is_live(&self, id: ImageId) -> bool {
        self.live.get(&self.images[id].pid) == Some(&id)
    }

    /// The image behind an id [`Self::image_for`] returned.
    pub fn image(&self, id: ImageId) -> &ProcessImage {
        &self.images[id]
    }

    /// How many process images were seen.
    pub fn len(&self) -> usize {
        self.images.len()
    }

    /// How many processes were seen (an exec'd process counts twice).
    pub fn processes_seen(&self) -> usize {
        self.images.len() - self.reread_images
    }

    /// Drops the images of processes that ended (exited or exec'd), and the
    /// files only they mapped; the live images get new ids, in the order
    /// they had. For `stoke continuous`, between intervals, when no counted
    /// stack refers to an image any more: what it holds stays bounded by
    /// the processes alive, not by those seen over days.
    pub fn evict_ended(&mut self) {
        let mut ids: Vec<(u32, ImageId)> = self.live.iter().map(|(&pid, &id)| (pid, id)).collect();
        ids.sort_unstable_by_key(|&(_, id)| id);
        let mut images = std::mem::take(&mut self.images)
            .into_iter()
            .map(Some)
            .collect::<Vec<_>>();
        self.live.clear();
        for (pid, old) in ids {
            let image = images[old].take().expect("a live image is listed once");
            self.images.push(image);
            self.live.insert(pid, self.images.len() - 1);
        }
        drop(images);
        self.reread_images = 0;
        self.exited.clear();
        self.files.retain(|_, file| Arc::strong_count(file) > 1);
        self.identities.forget_unused();
    }

    fn snapshot(&mut self, pid: u32, known: &Known) -> ProcessImage {
        let name = match known.process_name {
            // As /proc's comm reads, less its line break.
            Some(name) => name.trim_ascii_end().to_owned(),
            None => procfs::read_comm(format!("/proc/{pid}/comm")).map_or_else(
                || known.thread_name.to_owned(),
                |comm| String::from_utf8_lossy(&comm).into_owned(),
            ),
        };
        let maps = maps::executable(pid);
        // The executable is among the mappings: a read of /proc/PID/exe
        // less per process. A process whose maps are gone has no
        // executable left either.
        let exe = maps.as_ref().ok().and_then(|maps| {
            known
                .exe_file
                .and_then(|(device, inode)| {
                    maps.iter().find_map(|map| match &map.path {
                        MapsPath::File(path) if map.device == device && map.inode == inode => {
                            Some(path.to_string_lossy().into())
                        }
                        _ => None,
                    })
                })
                .or_else(|| {
                    std::fs::read_link(format!("/proc/{pid}/exe"))
                        .ok()
                        .map(|path| path.to_string_lossy().into())
                })
        });
        let mut image = ProcessImage {
            pid,
            name,
            exe,
            identity: self.identities.of(pid, known.cgroup_key),
            // The sample was taken moments ago: the start is placed a
            // little late, the process taken as younger by as much.
            started: known.age.and_then(|age| Instant::now().checked_sub(age)),
            kernel_thread: known
                .kernel_thread
                .unwrap_or_else(|| procfs::is_kernel_thread(pid)),
            mappings: Vec::new(),
        };
        if let Ok(maps) = maps {
            image.mappings = self.mappings(pid, maps);
        }
        image
    }

    /// A process's executable mappings, sorted by address, each file
    /// opened on first sight.
    fn mappings(&mut self, pid: u32, maps: Vec<maps::MapsEntry>) -> Vec<Mapping> {
        let mut mappings = Vec::with_capacity(maps.len());
        // Opened at the first file not seen before.
        let mut root: Option<Option<Arc<Root>>> = None;
        for map in maps {
            let (start, end) = (map.start, map.end);
            let target = match &map.path {
                MapsPath::File(path) => {
                    let key = (device_number(map.device), map.inode);
                    match self.open_mapped(pid, start, end, path, key, &mut root) {
                        Some(file) => MappingTarget::File(file),
                        None => MappingTarget::Named(base_name(path)),
                    }
                }
                MapsPath::Vdso => {
                    match self.vdso.get_or_init(|| copy_own_vdso().ok().map(Arc::new)) {
                        Some(vdso) => MappingTarget::File(vdso.clone()),
                        None => MappingTarget::Named("[vdso]".into()),
                    }
                }
                MapsPath::Anonymous => MappingTarget::Named("[anon]".into()),
                // Bracketed, as is_file_code expects of memory without a file.
                special => MappingTarget::Named(String::from_utf8_lossy(special.as_bytes()).into()),
            };
            mappings.push(Mapping {
                start,
                end,
                file_offset: map.offset,
                target,
            });
        }
        mappings.sort_by_key(|mapping| mapping.start);
        mappings
    }

    fn open_mapped(
        &mut self,
        pid: u32,
        start: u64,
        end: u64,
        path: &Path,
        key: (u64, u64),
        root: &mut Option<Option<Arc<Root>>>,
    ) -> Option<Arc<MappedFile>> {
        if let Some(file) = self.files.get(&key) {
            return Some(file.clone());
        }
        // A process can map a device (`/dev/zero` readable and executable):
        // only regular files are read, for unwind tables and symbols.
        let file = rootfs::open_regular(Path::new(&format!(
            "/proc/{pid}/map_files/{start:x}-{end:x}"
        )))
        .ok()?;
        let origin = root
            .get_or_insert_with(|| Root::of_process(pid).ok().map(Arc::new))
            .clone()
            .map(|root| FileOrigin {
                root,
                path: path.to_owned(),
            });
        let mapped = Arc::new(MappedFile {
            version: FileVersion::of(&file, key).ok()?,
            file,
            key,
            name: base_name(path),
            origin,
        });
        self.files.insert(key, mapped.clone());
        Some(mapped)
    }
}

/// The vdso has no file: copy this process's own into a memfd, so that
/// blazesym reads it like any ELF file.
fn copy_own_vdso() -> io::Result<MappedFile> {
    let vdso = maps::read(std::process::id())?
        .map_while(Result::ok)
        .find(|map| map.path == MapsPath::Vdso)
        .ok_or_else(|| io::Error::other("no vdso mapped"))?;
    let (start, end) = (vdso.start, vdso.end);
    let mut image = vec![0; usize::try_from(end - start).map_err(io::Error::other)?];
    let mut memory = File::open("/proc/self/mem")?;
    memory.seek(SeekFrom::Start(start))?;
    memory.read_exact(&mut image)?;
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked
    // and, when valid, a descriptor that nothing else owns.
    let fd = unsafe { libc::memfd_create(c"stoke-vdso".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: see above.
    let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(&image)?;
    // No device has this number: the vdso is a file of its own kind.
    let key = (u64::MAX, 0);
    Ok(MappedFile {
        version: FileVersion::of(&file, key)?,
        file,
        key,
        name: "[vdso]".into(),
        origin: None,
    })
}

fn device_number((major, minor): (u32, u32)) -> u64 {
    (u64::from(major) << 32) | u64::from(minor)
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::process::maps::MappedPage;

    #[test]
    fn snapshot_of_this_process_opens_its_executable() {
        let mut table = ProcessRegistry::default();
        let id = table.image_for(std::process::id(), "fallback");
        let image = table.image(id);
        let here = snapshot_of_this_process_opens_its_executable as *const () as u64;
        let (mapping, _) = image.locate(here).expect("own code is mapped");
        let MappingTarget::File(file) = &mapping.target else {
            panic!("own code not opened")
        };
        let own_name = std::env::current_exe().unwrap();
        assert_eq!(file.name, base_name(&own_name));
        assert!(std::fs::metadata(file.path()).is_ok());
        assert_eq!(
            table.image_for(std::process::id(), "other"),
            id,
            "live image reused"
        );
        table.forget(std::process::id());
        assert_ne!(
            table.image_for(std::process::id(), "other"),
            id,
            "forgotten image replaced"
        );
    }

    #[test]
    fn ended_processes_are_evicted_with_the_files_only_they_mapped() {
        let mut registry = ProcessRegistry::default();
        let own = std::process::id();
        registry.image_for(u32::MAX - 1, "gone");
        registry.image_for(own, "self");
        registry.forget(u32::MAX - 1);
        registry.evict_ended();
        assert_eq!(registry.len(), 1);
        let id = registry.image_for(own, "self");
        assert_eq!(
            (id, registry.image(id).pid),
            (0, own),
            "the live image keeps its place"
        );
        assert!(!registry.files.is_empty(), "its executable stays open");
        registry.forget(own);
        registry.evict_ended();
        assert_eq!((registry.len(), registry.files.len()), (0, 0));
    }

    #[test]
    fn a_process_gone_without_its_exit_record_is_found() {
        let mut registry = ProcessRegistry::default();
        let own = std::process::id();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        registry.image_for(child.id(), "child");
        registry.image_for(own, "self");
        child.wait().unwrap();
        assert_eq!(registry.live_but_gone(), [child.id()]);
        registry.exited(child.id());
        assert!(registry.live_but_gone().is_empty());
    }

    /// A page of this test's executable, mapped executable anew.
    fn map_own_code() -> MappedPage {
        MappedPage::of(&File::open(std::env::current_exe().unwrap()).unwrap(), true)
    }

    #[test]
    fn code_mapped_after_the_snapshot_is_read_again_with_back_off() {
        let mut registry = ProcessRegistry::default();
        let own = std::process::id();
        let here = map_own_code as *const () as u64;
        let sample = |pc: u64| Sample::for_test(own, own, 0, vec![pc]);
        let first = registry.image_of(&sample(here));
        assert_eq!(
            registry.image_of(&sample(here)),
            first,
            "own code was mapped"
        );
        let late_page = map_own_code();
        let late = late_page.start() + 16;
        assert!(registry.image(first).locate(late).is_none());
        let reread = registry.image_of(&sample(late));
        assert_ne!(reread, first, "mappings read again");
        assert!(registry.image(reread).locate(late).is_some());
        assert!(registry.is_live(reread) && !registry.is_live(first));
        // Right after a read, code mapped since waits for the next one.
        let later = map_own_code();
        assert_eq!(registry.image_of(&sample(later.start() + 16)), reread);
        assert_eq!((registry.len(), registry.processes_seen()), (2, 1));
    }

    #[test]
    fn the_vdso_is_a_readable_elf_file() {
        let vdso = copy_own_vdso().unwrap();
        let mut magic = [0; 4];
        File::open(vdso.path())
            .unwrap()
            .read_exact(&mut magic)
            .unwrap();
        assert_eq!(&magic, b"\x7fELF");
        assert_eq!(&*vdso.name, "[vdso]");
    }

    #[test]
    fn the_executable_is_the_mapping_of_the_file_the_sample_names() {
        let own = std::process::id();
        let maps = maps::executable(own).unwrap();
        let libc = maps
            .iter()
            .find(|map| map.path.as_bytes().windows(4).any(|part| part == b"libc"))
            .expect("libc is mapped");
        let named = |exe_file| {
            let mut sample = Sample::for_test(own, own, 0, vec![1]);
            sample.exe_file = exe_file;
            let mut registry = ProcessRegistry::default();
            let id = registry.image_of(&sample);
            registry.image(id).exe.clone()
        };
        // A file the process maps, named by the sample: its path, whatever
        // /proc/PID/exe says.
        let libc_path = String::from_utf8_lossy(libc.path.as_bytes()).into_owned();
        assert_eq!(
            named(Some((libc.device, libc.inode))).as_deref(),
            Some(libc_path.as_str())
        );
        // One it does not map, or none named: /proc/PID/exe.
        let own_exe = std::fs::read_link("/proc/self/exe").unwrap();
        let own_exe = own_exe.to_string_lossy();
        assert_eq!(named(Some(((0, 0), 1))).as_deref(), Some(&*own_exe));
        assert_eq!(named(None).as_deref(), Some(&*own_exe));
    }

    #[test]
    fn a_vanished_process_keeps_its_thread_name() {
        let mut table = ProcessRegistry::default();
        let id = table.image_for(u32::MAX - 1, "gone");
        assert_eq!(table.image(id).name, "gone");
        assert!(table.image(id).locate(0x1000).is_none());
    }
}
