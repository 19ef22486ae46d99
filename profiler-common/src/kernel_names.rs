//! The kernel-address namer's maps: userspace writes up to
//! [`KERNEL_NAMES_BATCH`] addresses, runs the BPF program once, and reads
//! one name per address, each at most [`KERNEL_NAME_LEN`] bytes with its
//! terminating NUL.

/// Addresses named per run of the namer.
pub const KERNEL_NAMES_BATCH: u32 = 512;

/// Bytes of one name, its NUL included. Kernel symbols are shorter than
/// this but for a few generated ones, which are cut.
pub const KERNEL_NAME_LEN: usize = 128;
