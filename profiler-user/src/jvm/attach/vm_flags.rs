//! Whether SIGQUIT may be sent to a JVM, which would kill or disturb one
//! that does not expect it: decided from its options, as its launcher and
//! environment give them, and the signals it handles.

use super::AttachError;
use crate::procfs;

/// SIGQUIT's bit in the `SigCgt:` mask of `/proc/PID/status`.
pub(super) const SIGQUIT_MASK: u64 = procfs::signal_bit(libc::SIGQUIT);

/// The JVM options that decide whether SIGQUIT is safe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct VmFlags {
    pub(super) attach_disabled: bool,
    reduce_signal_usage: bool,
}

impl VmFlags {
    /// As HotSpot reads them: the last setting of a flag wins.
    pub(crate) fn from_options<'a>(options: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut flags = Self::default();
        for option in options {
            match option {
                b"-XX:+DisableAttachMechanism" => flags.attach_disabled = true,
                b"-XX:-DisableAttachMechanism" => flags.attach_disabled = false,
                b"-Xrs" | b"-XX:+ReduceSignalUsage" => flags.reduce_signal_usage = true,
                b"-XX:-ReduceSignalUsage" => flags.reduce_signal_usage = false,
                _ => {}
            }
        }
        flags
    }
}

/// The JVM's options in the order HotSpot applies them:
/// `JAVA_TOOL_OPTIONS`, then `JDK_JAVA_OPTIONS` (which the launcher puts
/// first on the command line), the command line, then `_JAVA_OPTIONS`.
/// Options in `@argfiles`, `-XX:Flags=` or `-XX:VMOptionsFile=` files are
/// not seen. Application arguments are scanned too: a false match only
/// makes stoke refuse.
pub(crate) fn launcher_options<'a>(cmdline: &'a [u8], environ: &'a [u8]) -> Vec<&'a [u8]> {
    let variable = |name: &[u8]| {
        environ
            .split(|&byte| byte == 0)
            .find_map(|entry| entry.strip_prefix(name)?.strip_prefix(b"="))
    };
    let words = |value: Option<&'a [u8]>| {
        value
            .into_iter()
            .flat_map(|value| value.split(u8::is_ascii_whitespace))
            .filter(|word| !word.is_empty())
    };
    words(variable(b"JAVA_TOOL_OPTIONS"))
        .chain(words(variable(b"JDK_JAVA_OPTIONS")))
        .chain(cmdline.split(|&byte| byte == 0).skip(1))
        .chain(words(variable(b"_JAVA_OPTIONS")))
        .collect()
}

/// Whether SIGQUIT may be sent, from the process's caught signals and
/// options; `cut` says the options were too long to read whole.
pub(super) fn sigquit_verdict(
    pid: u32,
    caught: u64,
    flags: VmFlags,
    cut: bool,
) -> Result<(), AttachError> {
    let unsafe_because = |reason| Err(AttachError::SigquitUnsafe { pid, reason });
    if flags.attach_disabled {
        return Err(AttachError::AttachDisabled { pid });
    }
    if cut {
        return unsafe_because("its command line is too long to check for -Xrs");
    }
    if flags.reduce_signal_usage {
        return unsafe_because("started with -Xrs");
    }
    if caught & SIGQUIT_MASK == 0 {
        return unsafe_because("it has no SIGQUIT handler, or is still starting");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_read_in_hotspot_order_and_the_last_wins() {
        let cmdline = b"java\0-Xmx1g\0-XX:+DisableAttachMechanism\0-cp\0x\0Main\0";
        let flags = VmFlags::from_options(launcher_options(cmdline, b""));
        assert!(flags.attach_disabled && !flags.reduce_signal_usage);
        // _JAVA_OPTIONS comes after the command line.
        let environ = b"PATH=/bin\0_JAVA_OPTIONS=-XX:-DisableAttachMechanism -Xrs\0";
        let flags = VmFlags::from_options(launcher_options(cmdline, environ));
        assert!(!flags.attach_disabled && flags.reduce_signal_usage);
        // JAVA_TOOL_OPTIONS comes before it.
        let environ = b"JAVA_TOOL_OPTIONS=-XX:-DisableAttachMechanism\0";
        let flags = VmFlags::from_options(launcher_options(cmdline, environ));
        assert!(flags.attach_disabled);
        // argv[0] and look-alike variables do not count.
        let flags = VmFlags::from_options(launcher_options(
            b"-Xrs\0Main\0",
            b"MY_JAVA_TOOL_OPTIONS=-Xrs\0",
        ));
        assert_eq!(flags, VmFlags::default());
    }

    #[test]
    fn sigquit_only_to_a_jvm_that_handles_it() {
        let handled = SIGQUIT_MASK | 1;
        let plain = VmFlags::default();
        assert!(sigquit_verdict(1, handled, plain, false).is_ok());
        let disabled = VmFlags {
            attach_disabled: true,
            ..plain
        };
        assert!(matches!(
            sigquit_verdict(1, handled, disabled, true),
            Err(AttachError::AttachDisabled { pid: 1 })
        ));
        let xrs = VmFlags {
            reduce_signal_usage: true,
            ..plain
        };
        for (caught, flags, cut) in [
            (handled, xrs, false),
            (1, plain, false),
            (handled, plain, true),
        ] {
            let error = sigquit_verdict(1, caught, flags, cut).unwrap_err();
            assert!(
                matches!(error, AttachError::SigquitUnsafe { .. }),
                "{error}"
            );
        }
    }
}
