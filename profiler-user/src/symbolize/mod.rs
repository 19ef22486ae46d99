//! Stage 3, symbolization: names kernel frames with the kernel's own lookup
//! ([`kernel_names`], or kallsyms where it cannot run) and native frames
//! from the ELF files (and their DWARF) that processes mapped.
//!
//! Symbolization happens once, after recording, over each distinct address:
//! a file's addresses go to blazesym in one batch, read from a sealed copy
//! of the file (see [`copy`]); [`names`] gathers the distinct addresses of
//! the counted stacks and names each once. Only what blazesym cannot learn
//! later is captured while processes live (see [`crate::process`]).

pub mod copy;
mod go_pclntab;
pub mod kernel_names;
pub mod names;
pub mod perf_map;
pub mod prepared;
pub mod read_parts;

use std::{
    cell::{OnceCell, RefCell},
    collections::HashMap,
    io,
    ops::Range,
    path::Path,
    sync::Arc,
};

use blazesym::symbolize::{
    source::{Elf, Kernel, Source},
    CodeInfo, Input, Sym, Symbolized, Symbolizer as BlazeSymbolizer,
};

use self::{
    go_pclntab::GoTable,
    kernel_names::KernelNamer,
    prepared::{Prepared, PreparedFiles},
};
use crate::{
    elf::file as elf_file,
    process::{image::FileVersion, MappedFile},
};

/// The frames one address stands for, outermost first: the function, then
/// the functions inlined into it at that address (with `--lines`).
pub type Frames = Arc<[Arc<str>]>;

/// An address's frames, and the extent of its function where every
/// address in it gets the same frames.
pub struct Named {
    pub frames: Frames,
    /// In the addresses' space (offsets into the file for a file's).
    pub function: Option<Range<u64>>,
}

impl Named {
    fn unnamed(name: String) -> Self {
        Self {
            frames: Frames::from([Arc::from(name)]),
            function: None,
        }
    }
}

/// Names addresses.
pub struct Symbolizer {
    lines: bool,
    /// Names kernel addresses, if the sampler's could be loaded.
    kernel_namer: Option<RefCell<KernelNamer>>,
    /// Names them without it: kept for the kernel's addresses, so that `stoke
    /// continuous` reads kallsyms once, not once per interval (its index
    /// is a few MB).
    kernel: OnceCell<BlazeSymbolizer>,
    /// Files kept copied and indexed; none unless
    /// [`Self::keep_files_prepared`].
    prepared: RefCell<PreparedFiles>,
    /// The Go function tables of files whose symbols left code unnamed.
    go_tables: RefCell<HashMap<FileVersion, Option<Arc<GoTable>>>>,
}

/// Most Go function tables kept at once (each its program's functions'
/// entries and names, up to a few MB): beyond, they are read again when
/// needed.
const MAX_GO_TABLES: usize = 32;

impl Symbolizer {
    /// A symbolizer; `lines` adds source locations and inlined functions.
    pub fn new(lines: bool) -> Self {
        Self {
            lines,
            kernel_namer: None,
            kernel: OnceCell::new(),
            prepared: RefCell::default(),
            go_tables: RefCell::default(),
        }
    }

    /// Names kernel addresses with `namer` (the kernel's own lookup) rather
    /// than /proc/kallsyms.
    pub fn with_kernel_namer(self, namer: Option<KernelNamer>) -> Self {
        Self {
            kernel_namer: namer.map(RefCell::new),
            ..self
        }
    }

    /// Names kernel addresses; every name ends in `_[k]`.
    pub fn kernel(&self, addresses: &[u64]) -> Vec<Frames> {
        let named = self
            .kernel_namer
            .as_ref()
            .and_then(|namer| namer.borrow_mut().name(addresses));
        let functions = match named {
            // A module's function is named as kallsyms names it, without
            // its module.
            Some(names) => names
                .iter()
                .map(|name| {
                    let function = name.split(' ').next().unwrap_or_default();
                    Frames::from([frame_name(function, None)])
                })
                .collect(),
            None => self.kernel_from_kallsyms(addresses),
        };
        functions
            .iter()
            .map(|frames| {
                frames
                    .iter()
                    .map(|name| Arc::from(format!("{name}_[k]")))
                    .collect()
            })
            .collect()
    }

    /// [`Self::kernel`]'s frames from /proc/kallsyms, without their suffix.
    fn kernel_from_kallsyms(&self, addresses: &[u64]) -> Vec<Frames> {
        let kernel = Kernel {
            vmlinux: blazesym::MaybeDefault::None,
            debug_syms: false,
            ..Kernel::default()
        };
        self.batch(
            self.kernel.get_or_init(|| self.blazesym()),
            &Source::Kernel(kernel),
            Input::AbsAddr(addresses),
            addresses,
            |address| format!("{address:#x}"),
        )
        .into_iter()
        .map(|named| named.frames)
        .collect()
    }

    /// [`Self::file_names`]' frames alone.
    #[cfg(test)]
    pub fn file(&self, file: &MappedFile, offsets: &[u64]) -> Vec<Frames> {
        self.file_names(file, offsets)
            .into_iter()
            .map(|named| named.frames)
            .collect()
    }

    /// Names addresses given as offsets into a mapped file, with the extent
    /// of each one's function; a frame without a symbol is named
    /// `file+0xOFFSET`. The file is copied for the time of the call (see
    /// [`copy`]), or kept copied within the budget
    /// [`Self::keep_files_prepared`] set.
    pub fn file_names(&self, file: &MappedFile, offsets: &[u64]) -> Vec<Named> {
        let unnamed = |offset: u64| format!("{}+{offset:#x}", file.name);
        let mut named = self.symbols_names(file, offsets, unnamed);
        let unknown: Vec<usize> = (0..named.len())
            .filter(|&index| *named[index].frames == [Arc::from(unnamed(offsets[index]))])
            .collect();
        if let Some(go) = unknown.first().and_then(|_| self.go_table(file)) {
            for index in unknown {
                if let Some(name) = go.name(offsets[index]) {
                    named[index] = Named {
                        frames: Frames::from([frame_name(&name, None)]),
                        function: None,
                    };
                }
            }
        }
        named
    }

    /// The Go function table of `file`, if it is a Go program.
    fn go_table(&self, file: &MappedFile) -> Option<Arc<GoTable>> {
        let mut tables = self.go_tables.borrow_mut();
        if tables.len() >= MAX_GO_TABLES && !tables.contains_key(&file.version) {
            tables.clear();
        }
        tables
            .entry(file.version)
            .or_insert_with(|| GoTable::read(&file.path()).map(Arc::new))
            .clone()
    }

    /// [`Self::file_names`] from the file's symbol tables (and DWARF).
    fn symbols_names(
        &self,
        file: &MappedFile,
        offsets: &[u64],
        unnamed: impl Fn(u64) -> String,
    ) -> Vec<Named> {
        let mut kept = self.prepared.borrow_mut();
        if let Some(prepared) = kept.get(&file.version) {
            return self.name_in(prepared, offsets, unnamed);
        }
        let copy = match copy::for_blazesym(file, self.lines) {
            Ok(copy) => copy,
            Err(error) => {
                // The one case a user would wonder about; the others (a
                // file that is no ELF file) were never named before either.
                if error.kind() == io::ErrorKind::FileTooLarge {
                    eprintln!(
                        "stoke: warning: {}: {error}: its frames are named {}+0xOFFSET",
                        file.name, file.name
                    );
                }
                return offsets
                    .iter()
                    .map(|&offset| Named::unnamed(unnamed(offset)))
                    .collect();
            }
        };
        kept.make_room(copy.allocated_bytes());
        // blazesym keeps every file it parsed mapped and indexed: a fresh one
        // per file bounds stoke's memory by the largest file, not their sum.
        let prepared = Prepared::new(copy, self.blazesym());
        let named = self.name_in(&prepared, offsets, unnamed);
        kept.keep(file.version, prepared);
        named
    }

    /// [`Self::file_names`] with the file copied and indexed.
    fn name_in(
        &self,
        prepared: &Prepared,
        offsets: &[u64],
        unnamed: impl Fn(u64) -> String,
    ) -> Vec<Named> {
        let copy = &prepared.copy;
        // DWARF, where needed, is read from the copy itself and from the
        // debug file its rewritten `.gnu_debuglink` names, nothing else.
        let source = Source::Elf(Elf {
            debug_syms: copy.dwarf,
            ..Elf::new(copy.path())
        });
        // A debug file's symbols in place of the file's are read by address.
        let addresses: Option<Vec<u64>> = copy.segments.as_ref().map(|segments| {
            offsets
                .iter()
                .map(|&offset| elf_file::vaddr_of_offset(segments, offset).unwrap_or(u64::MAX))
                .collect()
        });
        let input = match &addresses {
            Some(addresses) => Input::VirtOffset(&addresses[..]),
            None => Input::FileOffset(offsets),
        };
        self.batch(&prepared.blazesym, &source, input, offsets, unnamed)
    }

    /// Keeps files copied and indexed between calls, within `budget` bytes
    /// of copies (see [`prepared`]).
    pub fn keep_files_prepared(&mut self, budget: u64) {
        self.prepared = RefCell::new(PreparedFiles::with_budget(budget));
    }

    /// Ends an interval of `stoke continuous`: files no address was named
    /// in for a while are no longer kept prepared.
    pub fn end_interval(&self) {
        self.prepared.borrow_mut().end_interval();
    }

    fn blazesym(&self) -> BlazeSymbolizer {
        BlazeSymbolizer::builder()
            .enable_code_info(self.lines)
            .enable_inlined_fns(self.lines)
            .enable_demangling(true)
            .set_debug_dirs(Some([copy::DEBUG_DIR]))
            .build()
    }

    /// Names `input`'s addresses; one that cannot be named is named
    /// `unnamed` of its key, the same place in `keys`.
    fn batch(
        &self,
        blazesym: &BlazeSymbolizer,
        source: &Source,
        input: Input<&[u64]>,
        keys: &[u64],
        unnamed: impl Fn(u64) -> String,
    ) -> Vec<Named> {
        match blazesym.symbolize(source, input) {
            Ok(results) => results
                .iter()
                .zip(keys)
                .map(|(result, &key)| match result {
                    Symbolized::Sym(sym) => Named {
                        frames: self.frames_of(sym),
                        function: self.function_of(sym, key),
                    },
                    Symbolized::Unknown(_) => Named::unnamed(unnamed(key)),
                })
                .collect(),
            Err(_) => keys
                .iter()
                .map(|&key| Named::unnamed(unnamed(key)))
                .collect(),
        }
    }

    /// The keys of the function that `sym`, found for `key`, names, where
    /// every key in it gets the same frames: not with `--lines` (each
    /// address has its own line and inlined calls), and not for a symbol of
    /// no size, or one that does not hold the address.
    fn function_of(&self, sym: &Sym, key: u64) -> Option<Range<u64>> {
        let size = u64::try_from(sym.size?).ok()?;
        let offset = u64::try_from(sym.offset).ok()?;
        if self.lines || offset >= size {
            return None;
        }
        let start = key.checked_sub(offset)?;
        Some(start..start.checked_add(size)?)
    }

    fn frames_of(&self, sym: &Sym) -> Frames {
        if !self.lines {
            return Frames::from([frame_name(&sym.name, None)]);
        }
        // blazesym has moved each location to the frame whose code it is in
        // (its docs notwithstanding): the symbol's is where it calls the
        // first inlined function, the innermost inlined function's the
        // address's own.
        std::iter::once((&sym.name, sym.code_info.as_deref()))
            .chain(
                sym.inlined
                    .iter()
                    .map(|inlined| (&inlined.name, inlined.code_info.as_ref())),
            )
            .map(|(name, location)| frame_name(name, location))
            .collect()
    }
}

/// A frame's name: never empty. (Folding cleans every frame of what would
/// break the output formats: [`crate::model::clean_frame`].)
fn frame_name(name: &str, location: Option<&CodeInfo>) -> Arc<str> {
    let mut text: String = if name.is_empty() {
        "[unnamed]".to_owned()
    } else {
        name.to_string()
    };
    if let Some(location) = location {
        let file = Path::new(&location.file).display();
        match location.line {
            Some(line) => text.push_str(&format!(" ({file}:{line})")),
            None => text.push_str(&format!(" ({file})")),
        }
    }
    text.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::sampler::SamplerConfig;

    #[test]
    fn frame_names_are_never_empty() {
        assert_eq!(&*frame_name("", None), "[unnamed]");
    }

    #[test]
    fn kernel_frames_are_named_from_kallsyms() {
        let address = kallsyms_functions()
            .into_iter()
            .find_map(|(address, name)| (name == "vfs_read").then_some(address))
            .expect("vfs_read in kallsyms (run as root)");
        let names = Symbolizer::new(false).kernel(&[address + 4, 1]);
        assert_eq!(&*names[0][0], "vfs_read_[k]");
        assert!(names[1][0].ends_with("_[k]") && !names[1][0].is_empty());
    }

    /// The kernel's own lookup and kallsyms give the same names, modules'
    /// functions included, over more than one batch.
    #[test]
    fn the_kernel_names_its_addresses_as_kallsyms_does() {
        let mut functions = kallsyms_functions();
        functions.sort_unstable();
        // Only a function alone at its address, and not the last: its
        // name is the one answer.
        let alone: Vec<&(u64, String)> = functions
            .windows(3)
            .filter(|w| w[0].0 != w[1].0 && w[1].0 != w[2].0)
            .map(|w| &w[1])
            .step_by(97)
            .collect();
        assert!(alone.len() > 600, "{} functions", alone.len());
        let addresses: Vec<u64> = alone.iter().map(|(address, _)| address + 1).collect();
        let mut sampler = crate::sample::sampler::Sampler::load(&SamplerConfig {
            frequency_hz: 1,
            pids: Some(vec![std::process::id()]),
            include_idle: false,
            bpf_stats: false,
            legacy: false,
            unwind_rows: 0,
            cpu: false,
            cpu_java_stacks: false,
            offcpu: None,
            counters: Vec::new(),
            counter_rate: crate::sample::counter_events::Rate::Period(1),
        })
        .unwrap();
        let mut namer = kernel_names::KernelNamer::take_from(sampler.object_mut())
            .expect("the namer loads on this kernel");
        assert!(namer.name(&addresses).is_some(), "the namer runs");
        let by_kernel = Symbolizer::new(false)
            .with_kernel_namer(Some(namer))
            .kernel(&addresses);
        let by_kallsyms = Symbolizer::new(false).kernel(&addresses);
        let differing: Vec<String> = by_kernel
            .iter()
            .zip(&by_kallsyms)
            .zip(&alone)
            .filter(|((kernel, kallsyms), _)| kernel[0] != kallsyms[0])
            .map(|((kernel, kallsyms), (_, name))| {
                format!("{name}: {} / {}", kernel[0], kallsyms[0])
            })
            .collect();
        assert!(
            differing.len() * 100 <= addresses.len(),
            "{} of {} differ: {differing:?}",
            differing.len(),
            addresses.len()
        );
    }

    /// The functions (text symbols) /proc/kallsyms lists at an address.
    fn kallsyms_functions() -> Vec<(u64, String)> {
        let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
        kallsyms
            .lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let address = u64::from_str_radix(fields.next()?, 16).ok()?;
                let kind = fields.next()?;
                let name = fields.next()?;
                (address != 0 && matches!(kind, "T" | "t")).then(|| (address, name.to_owned()))
            })
            .collect()
    }

    /// The file this process maps at `address`, and the address's offset
    /// in it.
    pub(super) fn own_file_at(address: u64) -> (std::sync::Arc<MappedFile>, u64) {
        let mut table = crate::process::ProcessRegistry::default();
        let id = table.image_for(std::process::id(), "self");
        let (mapping, offset) = table.image(id).locate(address).unwrap();
        match &mapping.target {
            crate::process::MappingTarget::File(file) => (file.clone(), offset),
            crate::process::MappingTarget::Named(name) => panic!("{name} is no file"),
        }
    }

    #[test]
    fn native_frames_are_named_or_fall_back_to_file_and_offset() {
        let here = native_frames_are_named_or_fall_back_to_file_and_offset as *const () as u64;
        let (file, offset) = own_file_at(here);
        let file = &*file;
        let names = Symbolizer::new(false).file(file, &[offset, u64::MAX / 2]);
        assert!(
            names[0][0].contains("native_frames_are_named"),
            "{}",
            names[0][0]
        );
        assert_eq!(&*names[1][0], format!("{}+{:#x}", file.name, u64::MAX / 2));
    }

    /// Debian's libc has no `.symtab`; its debug package's file has one
    /// (`cargo xtask setup` installs libc6-dbg): that is what names it,
    /// by address, with none of the file's DWARF copied.
    #[test]
    fn a_stripped_libc_is_named_from_its_debug_files_symbol_table() {
        let (file, offset) = own_file_at(libc::getpid as *const () as u64);
        let file = &*file;
        let copy = copy::for_blazesym(file, false).unwrap();
        assert!(
            copy.segments.is_some() && !copy.dwarf,
            "{} is not named from its debug file's symbols alone",
            file.name
        );
        let copied = copy.path().metadata().unwrap().len();
        let names = Symbolizer::new(false).file(file, &[offset, u64::MAX / 2]);
        assert!(
            names[0][0].contains("getpid"),
            "{} ({copied} bytes)",
            names[0][0]
        );
        // An offset no segment loads has no address: named by its offset.
        assert_eq!(&*names[1][0], format!("{}+{:#x}", file.name, u64::MAX / 2));
    }
}
