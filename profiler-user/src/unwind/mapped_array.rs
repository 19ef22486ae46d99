//! An array map (`unwind_rows`, `unwind_pages`) mapped into stoke
//! (BPF_F_MMAPABLE): values are written in place, without a system call
//! each, in ranges that are taken and given back ([`FreeRanges`]).

use std::{
    marker::PhantomData,
    os::fd::{AsFd, AsRawFd},
    ptr::NonNull,
};

use anyhow::{bail, Context, Result};
use aya::maps::{Map, MapData};

use super::free_ranges::FreeRanges;

/// Bytes of one `T` in an array map: the kernel rounds values up to 8.
pub const fn stride<T>() -> usize {
    size_of::<T>().next_multiple_of(8)
}

/// A mapped array map of `T`s.
pub struct MappedArray<T> {
    /// Keeps the map (and so the mapping's memory) alive.
    _map: MapData,
    base: NonNull<u8>,
    capacity: usize,
    free: FreeRanges,
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
    /// Maps the whole of `map`, named `name` in errors.
    pub fn map(map: Map, name: &str) -> Result<Self> {
        let Map::Array(data) = map else {
            bail!("{name} is not an array map");
        };
        let entries = data.info()?.max_entries();
        let capacity = entries as usize;
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
            free: FreeRanges::new(entries),
            values: PhantomData,
        })
    }

    /// Copies `values` into a free range; its first index, or `None` when
    /// no range has room.
    pub fn insert(&mut self, values: impl ExactSizeIterator<Item = T>) -> Option<u32> {
        let count = u32::try_from(values.len()).ok()?;
        let start = self.free.take(count)?;
        // `take`: never past the room taken, whatever the iterator yields.
        for (index, value) in (start as usize..).zip(values.take(count as usize)) {
            // SAFETY: within the mapping (the range was free, so inside the
            // capacity); values are plain data.
            unsafe {
                let slot = self.base.as_ptr().add(index * stride::<T>());
                std::ptr::write_unaligned(slot.cast::<T>(), value);
            }
        }
        Some(start)
    }

    /// Gives back the `count` values from `start` that [`Self::insert`]
    /// placed: a later insert may overwrite them, so no process's mappings
    /// may point there any more.
    pub fn remove(&mut self, start: u32, count: u32) {
        self.free.give_back(start, count);
    }
}
