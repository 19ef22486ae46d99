//! Reads a live process's memory: `process_vm_readv`, a copy of at most the
//! bytes asked for, which fails on an address the process has not mapped.

use std::io;

/// Fills `buffer` from process `pid`'s memory at `address`, whole or not
/// at all.
pub fn read(pid: u32, address: u64, buffer: &mut [u8]) -> io::Result<()> {
    let local = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: buffer.len(),
    };
    // SAFETY: one local iovec over `buffer`, which lives through the call;
    // the remote one is only an address in the other process.
    let copied = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    match usize::try_from(copied) {
        Ok(copied) if copied == buffer.len() => Ok(()),
        Ok(_) => Err(io::ErrorKind::UnexpectedEof.into()),
        Err(_) => Err(io::Error::last_os_error()),
    }
}

/// A little-endian `u64` at `address` in process `pid`.
pub fn read_u64(pid: u32, address: u64) -> io::Result<u64> {
    let mut bytes = [0; 8];
    read(pid, address, &mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_refuses_unmapped_addresses() {
        let value: u64 = 0x1234_5678_9abc_def0;
        let address = &value as *const u64 as u64;
        assert_eq!(read_u64(std::process::id(), address).unwrap(), value);
        assert!(read_u64(std::process::id(), 8).is_err());
    }
}
