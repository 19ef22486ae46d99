//! One request and its answer over a connected attach socket, within one
//! deadline, reading at most [`MAX_REPLY`] bytes.

use std::{
    io::{self, Read},
    os::{fd::AsRawFd, unix::net::UnixStream},
    time::{Duration, Instant},
};

use super::AttachError;

/// The largest answer read from a JVM.
const MAX_REPLY: usize = 64 * 1024;

/// Sends `request` and reads the answer until the JVM hangs up, all before
/// `timeout` from now.
pub(super) fn exchange(
    pid: u32,
    stream: &UnixStream,
    request: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, AttachError> {
    let deadline = Instant::now() + timeout;
    send_all(pid, stream, request, deadline, timeout)?;
    receive_all(pid, stream, deadline, timeout)
}

fn send_all(
    pid: u32,
    stream: &UnixStream,
    mut rest: &[u8],
    deadline: Instant,
    timeout: Duration,
) -> Result<(), AttachError> {
    while !rest.is_empty() {
        let left = time_left(deadline).ok_or(AttachError::Timeout { pid, timeout })?;
        stream
            .set_write_timeout(Some(left))
            .map_err(|source| AttachError::Io {
                pid,
                step: "set a socket timeout",
                source,
            })?;
        // SAFETY: sending from a live buffer of the length given.
        // MSG_NOSIGNAL: a JVM that hung up must not kill stoke with SIGPIPE.
        let sent = unsafe {
            libc::send(
                stream.as_raw_fd(),
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if sent < 0 {
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Err(AttachError::Timeout { pid, timeout }),
                Some(libc::EPIPE | libc::ECONNRESET) => return Err(AttachError::NoAnswer { pid }),
                _ => {
                    return Err(AttachError::Io {
                        pid,
                        step: "send the request",
                        source: error,
                    })
                }
            }
        }
        rest = rest.get(sent.unsigned_abs()..).unwrap_or_default();
    }
    Ok(())
}

fn receive_all(
    pid: u32,
    mut stream: &UnixStream,
    deadline: Instant,
    timeout: Duration,
) -> Result<Vec<u8>, AttachError> {
    let mut reply = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let left = time_left(deadline).ok_or(AttachError::Timeout { pid, timeout })?;
        stream
            .set_read_timeout(Some(left))
            .map_err(|source| AttachError::Io {
                pid,
                step: "set a socket timeout",
                source,
            })?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(reply),
            Ok(read) => {
                if reply.len() + read > MAX_REPLY {
                    return Err(AttachError::ReplyTooLarge {
                        pid,
                        limit: MAX_REPLY,
                    });
                }
                reply.extend_from_slice(chunk.get(..read).unwrap_or_default());
            }
            Err(error) => match error.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                    return Err(AttachError::Timeout { pid, timeout })
                }
                // The JVM closes without reading a request it rejects.
                io::ErrorKind::ConnectionReset if reply.is_empty() => {
                    return Err(AttachError::NoAnswer { pid })
                }
                io::ErrorKind::ConnectionReset => return Ok(reply),
                _ => {
                    return Err(AttachError::Io {
                        pid,
                        step: "read the answer",
                        source: error,
                    })
                }
            },
        }
    }
}

/// The time until `deadline`, if any is left.
fn time_left(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::jvm::attach::protocol::encode_request;

    const TIMEOUT: Duration = Duration::from_secs(20);

    #[test]
    fn answers_are_bounded_in_size_and_time() {
        let request = encode_request("properties", &[]).unwrap();

        let (client, server) = UnixStream::pair().unwrap();
        let talker = std::thread::spawn(move || {
            let mut server = server;
            let mut request = [0u8; 64];
            let _ = server.read(&mut request);
            let _ = server.write_all(&vec![b'x'; MAX_REPLY + 10]);
        });
        let error = exchange(1, &client, &request, TIMEOUT).unwrap_err();
        assert!(
            matches!(error, AttachError::ReplyTooLarge { .. }),
            "{error}"
        );
        drop(client);
        talker.join().unwrap();

        let (client, _silent) = UnixStream::pair().unwrap();
        let start = Instant::now();
        let error = exchange(1, &client, &request, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(error, AttachError::Timeout { .. }), "{error}");
        assert!(start.elapsed() < Duration::from_secs(2));

        let (client, server) = UnixStream::pair().unwrap();
        drop(server);
        let error = exchange(1, &client, &request, TIMEOUT).unwrap_err();
        assert!(matches!(error, AttachError::NoAnswer { pid: 1 }), "{error}");
    }
}
