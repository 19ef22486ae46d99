//! The files native frames are code of, each listed once with its path and
//! build ID, for the profile's writers (pprof's mappings).

use std::{
    collections::HashMap,
    fmt::Write,
    sync::Arc,
    time::{Duration, Instant},
};

use object::ReadCache;

use crate::{
    elf::{bounded::BoundedFile, file::ElfFile},
    model::Module,
    process::{MappedFile, MappingTarget, ProcessImage},
};

/// How long reading one file's build ID may take: its notes are near the
/// start of the file, so only a stalled filesystem makes it slow.
const BUILD_ID_TIME_BUDGET: Duration = Duration::from_millis(200);

/// Files by the index their frames refer to them with.
#[derive(Debug, Default)]
pub struct ModuleTable {
    modules: Vec<Module>,
    /// Index by device and inode.
    indexes: HashMap<(u64, u64), u32>,
}

impl ModuleTable {
    /// The index of the file whose code `address` is in `image`, listing
    /// the file if new; `None` if no file holds the address.
    pub fn index(&mut self, image: &ProcessImage, address: u64) -> Option<u32> {
        let (mapping, _) = image.locate(address)?;
        let MappingTarget::File(file) = &mapping.target else {
            return None;
        };
        let next = u32::try_from(self.modules.len()).ok()?;
        let index = *self.indexes.entry(file.key).or_insert_with(|| {
            self.modules.push(module_of(file));
            next
        });
        Some(index)
    }

    /// The files listed, in index order.
    pub fn into_modules(self) -> Vec<Module> {
        self.modules
    }
}

fn module_of(file: &MappedFile) -> Module {
    let path = match &file.origin {
        Some(origin) => origin.path.to_string_lossy().into(),
        None => file.name.clone(),
    };
    Module {
        path,
        build_id: build_id(file),
    }
}

/// The file's GNU build ID in hex, if it has one.
fn build_id(file: &MappedFile) -> Option<Arc<str>> {
    let opened = BoundedFile::open(&file.path(), Instant::now() + BUILD_ID_TIME_BUDGET).ok()?;
    let cache = ReadCache::new(opened);
    let id = ElfFile::parse(&cache)
        .ok()?
        .sections()
        .ok()?
        .build_id()
        .ok()??;
    let mut hex = String::with_capacity(2 * id.len());
    for byte in id {
        write!(hex, "{byte:02x}").ok()?;
    }
    Some(hex.into())
}
