//! Reading a child's stdout and stderr on threads of their own, so that a
//! child never blocks on a full pipe and a test can look at what it said
//! while it still runs.

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

/// Appends what `pipe` yields to `text` as it comes (not only at the end:
/// a test may look at what a process that is still running said so far).
pub(crate) fn read_as_it_comes(
    mut pipe: impl Read + Send + 'static,
    text: &Arc<Mutex<String>>,
) -> JoinHandle<()> {
    let text = Arc::clone(text);
    thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(n @ 1..) = pipe.read(&mut buffer) {
            text.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    })
}

/// Reads all of `pipe` on a thread of its own; the handle yields it.
pub(crate) fn read_in_background(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}
