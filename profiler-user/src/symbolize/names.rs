//! Names every distinct address of a recording once: kernel addresses in one
//! batch, each mapped file's offsets in one batch, JIT code from the JVM
//! agents' code maps.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
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

/// The names of every address of a recording's stacks.
pub struct AddressNames<'a> {
    kernel: HashMap<u64, Frames>,
    /// By mapped file (its address as identity) and file offset.
    files: HashMap<(*const MappedFile, u64), Frames>,
    java: &'a HashMap<u32, JavaSymbols>,
}

impl<'a> AddressNames<'a> {
    /// Names the addresses of `stacks`; `java` has what the JVM agents told,
    /// by pid, for addresses in JIT code.
    pub fn resolve<'s>(
        stacks: impl IntoIterator<Item = StackAddresses<'s>>,
        symbolizer: &Symbolizer,
        java: &'a HashMap<u32, JavaSymbols>,
    ) -> Self {
        let mut kernel_addresses = HashSet::new();
        let mut file_offsets: HashMap<*const MappedFile, (Arc<MappedFile>, HashSet<u64>)> =
            HashMap::new();
        for stack in stacks {
            kernel_addresses.extend(call_sites(stack.kernel));
            for address in call_sites(stack.user) {
                if let Some((mapping, offset)) = stack.image.locate(address) {
                    if let MappingTarget::File(file) = &mapping.target {
                        file_offsets
                            .entry(Arc::as_ptr(file))
                            .or_insert_with(|| (file.clone(), HashSet::new()))
                            .1
                            .insert(offset);
                    }
                }
            }
        }
        let kernel_addresses: Vec<u64> = kernel_addresses.into_iter().collect();
        let kernel = kernel_addresses
            .iter()
            .copied()
            .zip(symbolizer.kernel(&kernel_addresses))
            .collect();
        let mut files = HashMap::new();
        for (key, (file, offsets)) in file_offsets {
            let offsets: Vec<u64> = offsets.into_iter().collect();
            for (offset, frames) in offsets.iter().zip(symbolizer.file(&file, &offsets)) {
                files.insert((key, *offset), frames);
            }
        }
        Self {
            kernel,
            files,
            java,
        }
    }

    /// How many distinct addresses were named.
    pub fn len(&self) -> usize {
        self.kernel.len() + self.files.len()
    }

    /// What the JVM agent of process `pid` told, if it is a JVM with one.
    pub fn java(&self, pid: u32) -> Option<&JavaSymbols> {
        self.java.get(&pid)
    }

    /// The frames of a kernel call site (see [`call_site`]).
    pub fn kernel(&self, address: u64) -> &Frames {
        &self.kernel[&address]
    }

    /// The frames of a user call site (see [`call_site`]) of `image`: its
    /// file's symbols, else the JIT's method, else the mapping's name.
    pub fn user(&self, image: &ProcessImage, address: u64) -> Frames {
        let located = image.locate(address);
        if let Some((mapping, offset)) = located {
            if let MappingTarget::File(file) = &mapping.target {
                return self.files[&(Arc::as_ptr(file), offset)].clone();
            }
        }
        let jit = self
            .java
            .get(&image.pid)
            .and_then(|java| java.code_name(address));
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
