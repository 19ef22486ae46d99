//! Checks made before recording, so that what a user can fix is reported in
//! one line naming the cause and the fix, before any BPF is loaded.

use std::path::Path;

use anyhow::{bail, Result};

use crate::procfs;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;
const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";
/// The most of a one-number sysctl file read.
const MAX_SYSCTL: u64 = 64;

/// Root, or CAP_BPF with CAP_PERFMON (or CAP_SYS_ADMIN, which implies both).
pub fn check_privileges() -> Result<()> {
    let status = procfs::read_status("/proc/self/status").unwrap_or_default();
    let effective = procfs::status_field(&status, "CapEff:")
        .and_then(|mut values| values.next())
        .and_then(|bits| u64::from_str_radix(bits, 16).ok())
        .unwrap_or(0);
    let has = |capability: u32| effective & (1 << capability) != 0;
    if !(has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))) {
        bail!("stoke needs root, or the CAP_BPF and CAP_PERFMON capabilities, to load its BPF sampler: run it with sudo");
    }
    Ok(())
}

/// The kernel's BTF, which the sampler's CO-RE relocations need.
pub fn check_btf() -> Result<()> {
    if !Path::new(BTF_PATH).exists() {
        bail!("this kernel has no BTF ({BTF_PATH} is missing): stoke needs a kernel built with CONFIG_DEBUG_INFO_BTF=y, as most distribution kernels since 2020 are");
    }
    Ok(())
}

/// A frequency the kernel will accept.
pub fn check_frequency(hz: u64) -> Result<()> {
    let max = procfs::read_bounded("/proc/sys/kernel/perf_event_max_sample_rate", MAX_SYSCTL)
        .ok()
        .and_then(|(bytes, _)| String::from_utf8(bytes).ok())
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(100_000);
    if hz == 0 || hz > max {
        bail!("-F {hz}: the sampling frequency must be between 1 and {max} Hz (the limit is kernel.perf_event_max_sample_rate); 99 is a good default");
    }
    Ok(())
}

/// Every pid names a running process.
pub fn check_pids(pids: &[u32]) -> Result<()> {
    for pid in pids {
        if *pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with pid {pid}: check it is still running (ps -p {pid})");
        }
        if procfs::has_exited(*pid) {
            bail!(
                "process {pid} has exited (a zombie its parent has not reaped): \
                 profile a running process"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frequencies_outside_the_kernel_limit_are_refused() {
        assert!(check_frequency(99).is_ok());
        for bad in [0, 10_000_000] {
            let message = check_frequency(bad).unwrap_err().to_string();
            assert!(
                message.contains("frequency") && message.contains(&bad.to_string()),
                "{message}"
            );
        }
    }

    #[test]
    fn pids_must_exist() {
        assert!(check_pids(&[std::process::id()]).is_ok());
        let message = check_pids(&[std::process::id(), u32::MAX])
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with(&format!("no process with pid {}", u32::MAX)),
            "{message}"
        );
        assert!(check_pids(&[0]).is_err());
    }
}
