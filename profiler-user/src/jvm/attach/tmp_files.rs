//! Files in the JVM's `/tmp`, written as the JVM's user: the trigger file
//! that asks for the attach listener, and the agent, placed under a free
//! name without ever overwriting or following anything found there.

use std::{
    ffi::{CStr, CString},
    fs::{File, Permissions},
    io::{self, Read, Write},
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd},
        unix::fs::{MetadataExt, PermissionsExt},
    },
};

use super::{
    target::{TargetHandle, RESOLVE_SAFE},
    AttachError,
};
use crate::rootfs::openat2;

/// Agent file names leave room for the temporary and alternative names
/// derived from them within NAME_MAX (255).
const MAX_AGENT_NAME_LEN: usize = 180;
/// How many other names `install_agent` tries when the name is taken.
pub(super) const NAME_ALTERNATIVES: usize = 16;

/// A name in the JVM's `/tmp` as a C string.
pub(super) fn c_name(name: &str) -> Result<CString, AttachError> {
    CString::new(name).map_err(|_| AttachError::InvalidRequest(format!("a NUL byte in {name:?}")))
}

/// The trigger file, as the JVM's user, open for reading: its lock
/// serializes the stokes that start the JVM's listener. One left by a
/// client that died is reused if it is the JVM's user's, as the JVM
/// requires.
pub(super) fn create_trigger(handle: &TargetHandle, trigger: &CStr) -> Result<File, AttachError> {
    let name = trigger.to_string_lossy();
    let tmp = handle.tmp.as_fd();
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDONLY | libc::O_CLOEXEC;
    match openat2(tmp, trigger, flags, 0o600, RESOLVE_SAFE) {
        Ok(fd) => Ok(File::from(fd)),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            // Non-blocking: a FIFO put there must not hang the open.
            let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            let ours = openat2(tmp, trigger, flags, 0, RESOLVE_SAFE)
                .map(File::from)
                .ok()
                .filter(|file| {
                    file.metadata().is_ok_and(|metadata| {
                        metadata.is_file() && metadata.uid() == handle.target.uid
                    })
                });
            ours.ok_or_else(|| AttachError::ForeignFile {
                pid: handle.target.pid,
                name: name.into_owned(),
            })
        }
        Err(error) => Err(handle.fs_error(format!("create /tmp/{name}"), error)),
    }
}

/// Removes `name` from the JVM's `/tmp`, if there; never follows a symlink.
pub(super) fn remove_file(handle: &TargetHandle, name: &CStr) -> Result<(), AttachError> {
    // SAFETY: unlinkat with a live C string, relative to our directory
    // descriptor; it never follows a symlink in the last component.
    let result = unsafe { libc::unlinkat(handle.tmp.as_raw_fd(), name.as_ptr(), 0) };
    let error = io::Error::last_os_error();
    if result == 0 || error.kind() == io::ErrorKind::NotFound {
        return Ok(());
    }
    Err(handle.fs_error(format!("remove /tmp/{}", name.to_string_lossy()), error))
}

/// Whether the directory is on a mount that forbids mapping code.
pub(super) fn mounted_noexec(dir: BorrowedFd) -> bool {
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: fstatvfs fills `stat` when it returns 0.
    unsafe {
        libc::fstatvfs(dir.as_raw_fd(), stat.as_mut_ptr()) == 0
            && stat.assume_init().f_flag & libc::ST_NOEXEC != 0
    }
}

/// A plain file name, with room for the names derived from it.
pub(super) fn check_file_name(name: &str) -> Result<(), AttachError> {
    let plain = !name.is_empty()
        && name.len() <= MAX_AGENT_NAME_LEN
        && name != "."
        && name != ".."
        && !name.contains(['/', '\0']);
    if plain {
        Ok(())
    } else {
        Err(AttachError::InvalidRequest(format!(
            "{name:?} is not a plain file name of at most {MAX_AGENT_NAME_LEN} bytes"
        )))
    }
}

/// `name`, then `<stem>-1<.ext>`, `<stem>-2<.ext>`...
fn candidate_names(name: &str) -> impl Iterator<Item = String> + '_ {
    let (stem, extension) = match name.rfind('.') {
        Some(dot) if dot > 0 => name.split_at(dot),
        _ => (name, ""),
    };
    std::iter::once(name.to_owned())
        .chain((1..=NAME_ALTERNATIVES).map(move |n| format!("{stem}-{n}{extension}")))
}

/// What is found under a candidate name.
#[derive(Debug, PartialEq, Eq)]
enum Existing {
    Absent,
    /// The same bytes, in a file only the JVM's user can change.
    Same,
    /// Anything else: never touched.
    Other,
}

/// Writes the agent under the first free name, or finds it already there;
/// returns the name. Runs as the JVM's user.
pub(super) fn place_agent(
    handle: &TargetHandle,
    file_name: &str,
    agent: &[u8],
) -> Result<String, AttachError> {
    let mut temporary = None;
    let placed = place_under_free_name(handle, file_name, agent, &mut temporary);
    if let Some(temporary) = temporary {
        // Left only when it was not renamed into place; best effort.
        let _ = remove_file(handle, &temporary);
    }
    placed
}

fn place_under_free_name(
    handle: &TargetHandle,
    file_name: &str,
    agent: &[u8],
    temporary: &mut Option<CString>,
) -> Result<String, AttachError> {
    for name in candidate_names(file_name) {
        let c_candidate = c_name(&name)?;
        // Twice: a rename that lost a race finds the winner's file next.
        for _ in 0..2 {
            match existing_agent(handle, &c_candidate, agent)? {
                Existing::Same => return Ok(name),
                Existing::Other => break,
                Existing::Absent => {}
            }
            let from = match temporary {
                Some(from) => from,
                None => temporary.insert(write_temporary(handle, file_name, agent)?),
            };
            match rename_noreplace(handle.tmp.as_fd(), from, &c_candidate) {
                Ok(()) => {
                    *temporary = None;
                    return Ok(name);
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => {
                    return Err(handle.fs_error(format!("rename into /tmp/{name}"), error))
                }
            }
        }
    }
    Err(AttachError::NoFreeName {
        pid: handle.target.pid,
        name: file_name.to_owned(),
    })
}

/// Looks at `name` without following a symlink or blocking on a FIFO.
fn existing_agent(
    handle: &TargetHandle,
    name: &CStr,
    agent: &[u8],
) -> Result<Existing, AttachError> {
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    let fd = match openat2(handle.tmp.as_fd(), name, flags, 0, RESOLVE_SAFE) {
        Ok(fd) => fd,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Existing::Absent),
        Err(error) if error.raw_os_error() == Some(libc::ENOSYS) => {
            return Err(AttachError::KernelTooOld { what: "openat2" })
        }
        // A symlink (ELOOP), another user's private file...
        Err(_) => return Ok(Existing::Other),
    };
    let mut file = File::from(fd);
    let Ok(metadata) = file.metadata() else {
        return Ok(Existing::Other);
    };
    // A file another user owns, or may write, could change after the check.
    let trusted = metadata.is_file()
        && metadata.uid() == handle.target.uid
        && metadata.mode() & 0o022 == 0
        && metadata.len() == agent.len() as u64;
    if trusted && same_content(&mut file, agent) {
        Ok(Existing::Same)
    } else {
        Ok(Existing::Other)
    }
}

fn same_content(file: &mut impl Read, expected: &[u8]) -> bool {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut offset = 0;
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return offset == expected.len(),
            Ok(read) => {
                let (Some(want), Some(got)) =
                    (expected.get(offset..offset + read), buffer.get(..read))
                else {
                    return false;
                };
                if want != got {
                    return false;
                }
                offset += read;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// The agent in a new hidden file next to its final place, mode 0644
/// whatever the umask, so that the JVM's user can map it.
fn write_temporary(
    handle: &TargetHandle,
    file_name: &str,
    agent: &[u8],
) -> Result<CString, AttachError> {
    let tmp = handle.tmp.as_fd();
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC;
    for attempt in 0..8 {
        let name = format!(".{file_name}.{}-{attempt}.tmp", std::process::id());
        let c_temporary = c_name(&name)?;
        let fd = match openat2(tmp, &c_temporary, flags, 0o644, RESOLVE_SAFE) {
            Ok(fd) => fd,
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(handle.fs_error(format!("create /tmp/{name}"), error)),
        };
        let mut file = File::from(fd);
        let written = file
            .write_all(agent)
            .and_then(|()| file.set_permissions(Permissions::from_mode(0o644)));
        if let Err(error) = written {
            let _ = remove_file(handle, &c_temporary);
            return Err(handle.fs_error(format!("write /tmp/{name}"), error));
        }
        return Ok(c_temporary);
    }
    Err(handle.fs_error(
        format!("create a temporary file for {file_name}"),
        io::ErrorKind::AlreadyExists.into(),
    ))
}

/// Renames `from` to `to` in `dir` unless `to` exists (EEXIST then).
/// Filesystems without RENAME_NOREPLACE get link + unlink, which is as
/// atomic for this purpose.
fn rename_noreplace(dir: BorrowedFd, from: &CStr, to: &CStr) -> io::Result<()> {
    let dir = dir.as_raw_fd();
    // SAFETY: live C strings, relative to our directory descriptor.
    let renamed = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            dir,
            from.as_ptr(),
            dir,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if renamed == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() != Some(libc::EINVAL) {
        return Err(error);
    }
    // SAFETY: as above; linkat does not follow a symlink without AT_SYMLINK_FOLLOW.
    if unsafe { libc::linkat(dir, from.as_ptr(), dir, to.as_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    unsafe { libc::unlinkat(dir, from.as_ptr(), 0) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_names_are_plain_and_alternatives_keep_the_extension() {
        let names: Vec<_> = candidate_names("libstoke_agent-ab12.so").take(3).collect();
        assert_eq!(
            names,
            [
                "libstoke_agent-ab12.so",
                "libstoke_agent-ab12-1.so",
                "libstoke_agent-ab12-2.so"
            ]
        );
        assert_eq!(candidate_names(".hidden").nth(1).unwrap(), ".hidden-1");
        assert_eq!(candidate_names("agent").count(), NAME_ALTERNATIVES + 1);
        assert!(check_file_name("libstoke_agent-ab12.so").is_ok());
        let long = "a".repeat(MAX_AGENT_NAME_LEN + 1);
        for bad in ["", ".", "..", "../x.so", "a/b.so", "a\0b", long.as_str()] {
            assert!(check_file_name(bad).is_err(), "{bad:?}");
        }
    }
}
