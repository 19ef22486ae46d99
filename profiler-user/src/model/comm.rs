//! A thread's name as a sample carries it.

use std::{fmt, ops::Deref};

use profiler_common::COMM_LEN;

/// Room for the longest text a kernel `comm` gives: each of its bytes may
/// be invalid UTF-8, shown as U+FFFD (3 bytes).
const TEXT_MAX: usize = 3 * COMM_LEN;

/// A thread's name (the kernel's `comm`) as text, held inline: every
/// sample has one, and a heap allocation per sample costs more than the
/// rest of its parsing.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Comm {
    len: u8,
    bytes: [u8; TEXT_MAX],
}

impl Comm {
    /// A NUL-padded kernel `comm` as text (invalid UTF-8 replaced).
    pub fn new(raw: &[u8; COMM_LEN]) -> Self {
        let end = raw.iter().position(|&byte| byte == 0).unwrap_or(COMM_LEN);
        Self::from(&*String::from_utf8_lossy(&raw[..end]))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Always the bytes of a str (`From<&str>`).
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl From<&str> for Comm {
    /// `text`, cut at a character boundary to fit.
    fn from(text: &str) -> Self {
        let mut len = text.len().min(TEXT_MAX);
        while !text.is_char_boundary(len) {
            len -= 1;
        }
        let mut bytes = [0; TEXT_MAX];
        bytes[..len].copy_from_slice(&text.as_bytes()[..len]);
        Self {
            len: len as u8,
            bytes,
        }
    }
}

impl Deref for Comm {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<&str> for Comm {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(bytes: &[u8]) -> [u8; COMM_LEN] {
        let mut comm = [0; COMM_LEN];
        comm[..bytes.len()].copy_from_slice(bytes);
        comm
    }

    #[test]
    fn a_comm_is_its_text_up_to_the_first_nul() {
        assert_eq!(Comm::new(&raw(b"java")), "java");
        assert_eq!(Comm::new(&raw(b"C2 Compiler")).as_str(), "C2 Compiler");
        assert_eq!(Comm::new(&[b'x'; COMM_LEN]).len(), COMM_LEN);
    }

    #[test]
    fn invalid_utf8_is_replaced_even_in_every_byte() {
        assert_eq!(Comm::new(&raw(b"a\xffb")), "a\u{fffd}b");
        let all_invalid = Comm::new(&[0xff; COMM_LEN]);
        assert_eq!(all_invalid.as_str(), "\u{fffd}".repeat(COMM_LEN));
    }

    #[test]
    fn text_too_long_is_cut_at_a_character() {
        let long = "é".repeat(TEXT_MAX);
        let comm = Comm::from(long.as_str());
        assert_eq!(comm.len(), TEXT_MAX);
        assert!(comm.chars().all(|c| c == 'é'));
    }
}
