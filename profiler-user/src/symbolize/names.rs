//! Names every distinct address of a recording once: kernel addresses in one
//! batch, each mapped file's offsets in one batch, JIT code from the JVM
//! agents' code maps.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Weak},
};

use super::{Frames, Symbolizer};
use crate::{
    jvm::symbols::JavaSymbols,
    process::{MappedFile, MappingTarget, ProcessImage},
};

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
/// the names are forgotten and named again when next seen.
const MAX_KEPT: usize = 1 << 20;

/// The names of the addresses of a recording's stacks. Names stay for the
/// next [`AddressNames::resolve`], so that `stoke continuous` names each
/// address once, not once per interval.
#[derive(Default)]
pub struct AddressNames {
    kernel: HashMap<u64, Frames>,
    /// By mapped file and file offset. The file's address is its identity:
    /// the `Weak` held here keeps the allocation, so that no other file
    /// gets that address, but lets the file close once no process maps it.
    files: HashMap<*const MappedFile, (Weak<MappedFile>, HashMap<u64, Frames>)>,
    names: usize,
}

impl AddressNames {
    /// Names the addresses of `stacks` not named yet.
    pub fn resolve<'s>(
        &mut self,
        stacks: impl IntoIterator<Item = StackAddresses<'s>>,
        symbolizer: &Symbolizer,
    ) {
        let mut kernel_addresses = HashSet::new();
        let mut file_offsets: HashMap<*const MappedFile, (Arc<MappedFile>, HashSet<u64>)> =
            HashMap::new();
        for stack in stacks {
            kernel_addresses.extend(
                call_sites(stack.kernel).filter(|address| !self.kernel.contains_key(address)),
            );
            for address in call_sites(stack.user) {
                let Some((mapping, offset)) = stack.image.locate(address) else {
                    continue;
                };
                let MappingTarget::File(file) = &mapping.target else {
                    continue;
                };
                let key = Arc::as_ptr(file);
                if self
                    .files
                    .get(&key)
                    .is_some_and(|(_, named)| named.contains_key(&offset))
                {
                    continue;
                }
                file_offsets
                    .entry(key)
                    .or_insert_with(|| (file.clone(), HashSet::new()))
                    .1
                    .insert(offset);
            }
        }
        let kernel_addresses: Vec<u64> = kernel_addresses.into_iter().collect();
        self.names += kernel_addresses.len();
        self.kernel.extend(
            kernel_addresses
                .iter()
                .copied()
                .zip(symbolizer.kernel(&kernel_addresses)),
        );
        for (key, (file, offsets)) in file_offsets {
            let offsets: Vec<u64> = offsets.into_iter().collect();
            let frames = symbolizer.file(&file, &offsets);
            self.names += offsets.len();
            let named = &mut self
                .files
                .entry(key)
                .or_insert_with(|| (Arc::downgrade(&file), HashMap::new()))
                .1;
            named.extend(offsets.into_iter().zip(frames));
        }
    }

    /// How many distinct addresses are named.
    pub fn len(&self) -> usize {
        self.names
    }

    /// Forgets the names of files that no process maps any more, and every
    /// name once there are too many: what `stoke continuous` keeps between
    /// intervals stays bounded.
    pub fn forget_unused(&mut self) {
        self.files.retain(|_, (file, _)| file.strong_count() > 0);
        self.names = self.kernel.len()
            + self
                .files
                .values()
                .map(|(_, named)| named.len())
                .sum::<usize>();
        if self.names > MAX_KEPT {
            *self = Self::default();
        }
    }

    /// The frames of a kernel call site (see [`call_site`]).
    pub fn kernel(&self, address: u64) -> &Frames {
        &self.kernel[&address]
    }

    /// The frames of a user call site (see [`call_site`]) of `image`: its
    /// file's symbols, else the JIT's method (`java` has what the process's
    /// JVM agent told), else the mapping's name.
    pub fn user(&self, image: &ProcessImage, address: u64, java: Option<&JavaSymbols>) -> Frames {
        let located = image.locate(address);
        if let Some((mapping, offset)) = located {
            if let MappingTarget::File(file) = &mapping.target {
                return self.files[&Arc::as_ptr(file)].1[&offset].clone();
            }
        }
        let jit = java.and_then(|java| java.code_name(address));
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
    use super::*;

    #[test]
    fn only_return_addresses_step_back_into_the_call() {
        assert_eq!(call_site(0, 0x100), 0x100);
        assert_eq!(call_site(1, 0x100), 0xff);
        assert_eq!(call_site(3, 0), 0);
    }
}
