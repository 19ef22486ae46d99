//! Names every distinct address of a recording once: kernel addresses in one
//! batch, each mapped file's offsets in one batch, JIT code from the JVM
//! agents' code maps or the runtimes' perf maps.

use std::{collections::BTreeMap, ops::Range};

use super::{perf_map::PerfMaps, Frames, Named, Symbolizer};
use crate::{
    jvm::symbols::JavaSymbols,
    process::{image::FileVersion, MappedFile, MappingTarget, ProcessImage},
};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

/// One counted stack's addresses, as [`AddressNames::resolve`] reads them.
pub struct StackAddresses<'a> {
    /// The process the stack is of.
    pub image: &'a ProcessImage,
    /// Kernel return addresses, innermost first.
    pub kernel: &'a [u64],
    /// User return addresses, innermost first.
    pub user: &'a [u64],
}

/// Most names kept between the intervals of `stoke continuous`: beyond it,
/// the names of the files least recently sampled are forgotten, and named
/// again when next seen.
const MAX_KEPT: usize = 1 << 20;

/// How many intervals the names of a file no stack was in are kept: a
/// program run again and again (a build, a cron job) finds its names,
/// even with a few intervals between its runs.
const KEPT_UNUSED_INTERVALS: u64 = 60;

/// The names of one version of a file, by file offset.
#[derive(Default)]
struct FileNames {
    names: HashMap<u64, Frames>,
    /// The functions named so far, by first offset: their end and frames.
    /// A new offset in one is named without reading the file again, which
    /// for a big program (dockerd) sampled anew in every interval of `stoke
    /// continuous` would be most of its cost.
    functions: BTreeMap<u64, (u64, Frames)>,
    /// The last interval a stack had an address in the file.
    last_used: u64,
}

impl FileNames {
    /// The frames of the function known to hold `offset`.
    fn in_function(&self, offset: u64) -> Option<&Frames> {
        let (_, (end, frames)) = self.functions.range(..=offset).next_back()?;
        (offset < *end).then_some(frames)
    }

    /// Keeps `frames` for every offset of `function`, unless it overlaps one
    /// kept already (a symbol inside another's extent, or a file whose
    /// symbols disagree): there, offsets go to the file each time.
    fn add_function(&mut self, function: Range<u64>, frames: &Frames) {
        let overlaps = self
            .functions
            .range(..function.end)
            .next_back()
            .is_some_and(|(_, (end, _))| *end > function.start);
        if !overlaps && !function.is_empty() {
            self.functions
                .insert(function.start, (function.end, frames.clone()));
        }
    }
}

/// The names of the addresses of a recording's stacks. Names stay for the
/// next [`AddressNames::resolve`], so that `stoke continuous` names each
/// address once, not once per interval.
#[derive(Default)]
pub struct AddressNames {
    kernel: HashMap<u64, Frames>,
    /// By file version (not by the open file, which is closed once no
    /// process maps it): every process mapping the same libc, or running
    /// the same program again, finds the names already read.
    files: HashMap<FileVersion, FileNames>,
    names: usize,
    /// Intervals ended ([`AddressNames::forget_unused`] calls).
    interval: u64,
    /// The perf maps of processes with code outside any file.
    perf_maps: PerfMaps,
}

impl AddressNames {
    /// Names the addresses of `stacks` not named yet.
    pub fn resolve<'s>(
        &mut self,
        stacks: impl IntoIterator<Item = StackAddresses<'s>>,
        symbolizer: &Symbolizer,
    ) {
        let mut kernel_addresses = HashSet::new();
        let mut file_offsets: HashMap<FileVersion, (&MappedFile, HashSet<u64>)> = HashMap::new();
        let mut jit_processes = HashSet::new();
        for stack in stacks {
            kernel_addresses.extend(
                call_sites(stack.kernel).filter(|address| !self.kernel.contains_key(address)),
            );
            for address in call_sites(stack.user) {
                let file = match stack.image.locate(address) {
                    Some((mapping, offset)) => match &mapping.target {
                        MappingTarget::File(file) => Some((file, offset)),
                        MappingTarget::Named(_) => None,
                    },
                    None => None,
                };
                let Some((file, offset)) = file else {
                    jit_processes.insert(stack.image.pid);
                    continue;
                };
                let kept = self.files.entry(file.version).or_default();
                kept.last_used = self.interval;
                if kept.names.contains_key(&offset) {
                    continue;
                }
                if let Some(frames) = kept.in_function(offset) {
                    let frames = frames.clone();
                    kept.names.insert(offset, frames);
                    self.names += 1;
                    continue;
                }
                file_offsets
                    .entry(file.version)
                    .or_insert_with(|| (file, HashSet::new()))
                    .1
                    .insert(offset);
            }
        }
        for pid in jit_processes {
            self.perf_maps.refresh(pid);
        }
        let kernel_addresses: Vec<u64> = kernel_addresses.into_iter().collect();
        self.names += kernel_addresses.len();
        self.kernel.extend(
            kernel_addresses
                .iter()
                .copied()
                .zip(symbolizer.kernel(&kernel_addresses)),
        );
        for (version, (file, offsets)) in file_offsets {
            let offsets: Vec<u64> = offsets.into_iter().collect();
            let named = symbolizer.file_names(file, &offsets);
            self.names += offsets.len();
            let kept = self.files.entry(version).or_default();
            for (offset, Named { frames, function }) in offsets.into_iter().zip(named) {
                if let Some(function) = function {
                    kept.add_function(function, &frames);
                }
                kept.names.insert(offset, frames);
            }
        }
    }

    /// How many distinct addresses are named.
    pub fn len(&self) -> usize {
        self.names
    }

    /// Ends an interval of `stoke continuous`: forgets the names of files
    /// no stack was in for [`KEPT_UNUSED_INTERVALS`], then those of the
    /// files least recently used while there are more than [`MAX_KEPT`]
    /// names: what is kept between intervals stays bounded.
    pub fn forget_unused(&mut self) {
        let interval = self.interval;
        self.files
            .retain(|_, file| interval - file.last_used < KEPT_UNUSED_INTERVALS);
        self.perf_maps.forget_ended();
        self.interval += 1;
        self.names = self.kernel.len()
            + self
                .files
                .values()
                .map(|file| file.names.len())
                .sum::<usize>();
        if self.names <= MAX_KEPT {
            return;
        }
        let mut by_use: Vec<(u64, FileVersion)> = self
            .files
            .iter()
            .map(|(&version, file)| (file.last_used, version))
            .collect();
        by_use.sort_unstable_by_key(|&(last_used, _)| last_used);
        for (_, version) in by_use {
            if self.names <= MAX_KEPT {
                break;
            }
            if let Some(file) = self.files.remove(&version) {
                self.names -= file.names.len();
            }
        }
        if self.names > MAX_KEPT {
            self.kernel.clear();
            self.names = 0;
        }
    }

    /// The frames of a kernel call site (see [`call_site`]).
    pub fn kernel(&self, address: u64) -> &Frames {
        &self.kernel[&address]
    }

    /// The frames of a user call site (see [`call_site`]) of `image`: its
    /// file's symbols, else the JIT's method (`java` has what the process's
    /// JVM agent told, the perf map what its runtime wrote), else the
    /// mapping's name.
    pub fn user(&self, image: &ProcessImage, address: u64, java: Option<&JavaSymbols>) -> Frames {
        let located = image.locate(address);
        if let Some((mapping, offset)) = located {
            if let MappingTarget::File(file) = &mapping.target {
                return self.files[&file.version].names[&offset].clone();
            }
        }
        let jit = java
            .and_then(|java| java.code_name(address))
            .or_else(|| self.perf_maps.name(image.pid, address));
        let name = match (jit, located) {
            (Some(name), _) => name,
            (None, Some((mapping, offset))) => match &mapping.target {
                MappingTarget::Named(name) => format!("{name}+{offset:#x}").into(),
                MappingTarget::File(_) => unreachable!("file frames returned above"),
            },
            (None, None) => "[unknown]".into(),
        };
        Frames::from([name])
    }
}

/// A return address points after its call instruction, which may already be
/// the next function; one byte back is inside the call. The innermost frame
/// (`index` 0) is the interrupted instruction itself.
pub fn call_site(index: usize, address: u64) -> u64 {
    if index == 0 {
        address
    } else {
        address.saturating_sub(1)
    }
}

fn call_sites(stack: &[u64]) -> impl Iterator<Item = u64> + '_ {
    stack
        .iter()
        .enumerate()
        .map(|(index, &address)| call_site(index, address))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::process::ProcessRegistry;

    /// The file holding `address` in `image`.
    fn file_at(image: &ProcessImage, address: u64) -> Arc<MappedFile> {
        match &image.locate(address).unwrap().0.target {
            MappingTarget::File(file) => file.clone(),
            MappingTarget::Named(name) => panic!("{name} is no file"),
        }
    }

    #[test]
    fn names_outlive_the_processes_that_mapped_the_file() {
        let pid = std::process::id();
        let here = names_outlive_the_processes_that_mapped_the_file as *const () as u64;
        let stack = [here];
        let symbolizer = Symbolizer::new(false);
        let mut registry = ProcessRegistry::default();
        let mut names = AddressNames::default();
        let resolve = |names: &mut AddressNames, image: &ProcessImage| {
            let stack = StackAddresses {
                image,
                kernel: &[],
                user: &stack,
            };
            names.resolve([stack], &symbolizer);
            names.user(image, here, None)
        };
        let first = registry.image_for(pid, "self");
        let named = resolve(&mut names, registry.image(first));
        assert!(named[0].contains("names_outlive"), "{}", named[0]);
        let first_file = Arc::downgrade(&file_at(registry.image(first), here));
        names.forget_unused();
        // The process "ends": its files close; the next image opens them anew.
        registry.forget(pid);
        registry.evict_ended();
        assert!(first_file.upgrade().is_none());
        let second = registry.image_for(pid, "self");
        assert_eq!(names.len(), 1);
        assert_eq!(resolve(&mut names, registry.image(second)), named);
        assert_eq!(names.len(), 1, "named again");
        // Unused for long enough, they are forgotten.
        for _ in 0..=KEPT_UNUSED_INTERVALS {
            names.forget_unused();
        }
        assert_eq!(names.len(), 0);
    }

    /// An address in a function named before gets its name from it, the
    /// name the file gives: in the test program (its own symbols) and in
    /// libc (named by its debug file's symbols, by address).
    #[test]
    fn addresses_in_functions_named_before_get_the_same_names() {
        let symbolizer = Symbolizer::new(false);
        let mut registry = ProcessRegistry::default();
        let image = registry.image_for(std::process::id(), "self");
        let image = registry.image(image);
        let own = addresses_in_functions_named_before_get_the_same_names as *const () as u64;
        for start in [own, libc::getpid as *const () as u64] {
            let mut names = AddressNames::default();
            let resolve = |names: &mut AddressNames, address: u64| {
                let stack = [address];
                let stack = StackAddresses {
                    image,
                    kernel: &[],
                    user: &stack,
                };
                names.resolve([stack], &symbolizer);
                names.forget_unused();
            };
            resolve(&mut names, start);
            let file = file_at(image, start);
            let (_, offset) = image.locate(start).unwrap();
            let kept = &names.files[&file.version];
            let function = kept.in_function(offset + 2).expect("its function kept");
            assert_eq!(function, &kept.names[&offset]);
            for delta in 1..4 {
                resolve(&mut names, start + delta);
            }
            let kept = &names.files[&file.version];
            let later: Vec<u64> = (1..4).map(|delta| offset + delta).collect();
            let from_file = symbolizer.file(&file, &later);
            for (offset, frames) in later.iter().zip(from_file) {
                assert_eq!(kept.names[offset], frames, "{}", frames[0]);
            }
        }
    }

    #[test]
    fn functions_that_overlap_are_not_kept() {
        let frames = |name: &str| Frames::from([Arc::from(name)]);
        let mut file = FileNames::default();
        file.add_function(0x100..0x200, &frames("outer"));
        file.add_function(0x180..0x190, &frames("inner"));
        file.add_function(0x200..0x210, &frames("next"));
        file.add_function(0x300..0x300, &frames("empty"));
        let name = |offset| file.in_function(offset).map(|frames| frames[0].to_string());
        assert_eq!(name(0xff), None);
        assert_eq!(name(0x100).as_deref(), Some("outer"));
        assert_eq!(name(0x185).as_deref(), Some("outer"));
        assert_eq!(name(0x1ff).as_deref(), Some("outer"));
        assert_eq!(name(0x200).as_deref(), Some("next"));
        assert_eq!(name(0x210), None);
        assert_eq!(name(0x300), None);
    }

    #[test]
    fn only_return_addresses_step_back_into_the_call() {
        assert_eq!(call_site(0, 0x100), 0x100);
        assert_eq!(call_site(1, 0x100), 0xff);
        assert_eq!(call_site(3, 0), 0);
    }
}
