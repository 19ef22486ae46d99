//! The JFR encoding of values: integers as JFR's variant of LEB128, strings
//! with an encoding byte, and events as a size, then a type, then fields.

/// A buffer that JFR values are appended to.
#[derive(Debug, Default)]
pub(super) struct Buffer {
    pub(super) bytes: Vec<u8>,
}

/// The encoding byte of a UTF-8 string, whose length in bytes follows.
const UTF8: u8 = 3;

impl Buffer {
    /// `value` as JFR's LEB128: seven bits a byte, lowest first, the high
    /// bit set on every byte but the last; the ninth byte, if reached,
    /// carries eight bits, so that no value takes more than nine.
    pub(super) fn varint(&mut self, mut value: u64) -> &mut Self {
        for _ in 0..8 {
            if value < 0x80 {
                self.bytes.push(value as u8);
                return self;
            }
            self.bytes.push(value as u8 | 0x80);
            value >>= 7;
        }
        self.bytes.push(value as u8);
        self
    }

    /// An `int` field: readers take the low 32 bits of the number read.
    pub(super) fn int(&mut self, value: i32) -> &mut Self {
        self.varint(u64::from(value as u32))
    }

    /// A `boolean` field.
    pub(super) fn boolean(&mut self, value: bool) -> &mut Self {
        self.bytes.push(u8::from(value));
        self
    }

    /// A `java.lang.String` field, written out (not a pool reference).
    pub(super) fn string(&mut self, text: &str) -> &mut Self {
        self.bytes.push(UTF8);
        self.varint(text.len() as u64);
        self.bytes.extend_from_slice(text.as_bytes());
        self
    }

    /// Appends `body` (an event's type and fields) as one event: preceded
    /// by its size, which counts the size's own bytes.
    pub(super) fn event(&mut self, body: &[u8]) {
        let len = body.len() as u64;
        let size = (1..=9)
            .map(|width| len + width)
            .find(|&size| varint_len(size) as u64 == size - len)
            .expect("a size fits in nine bytes");
        self.varint(size);
        self.bytes.extend_from_slice(body);
    }
}

/// How many bytes [`Buffer::varint`] writes for `value`.
fn varint_len(value: u64) -> usize {
    let mut buffer = Buffer::default();
    buffer.varint(value);
    buffer.bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(value: u64) -> Vec<u8> {
        let mut buffer = Buffer::default();
        buffer.varint(value);
        buffer.bytes
    }

    #[test]
    fn integers_are_jfr_leb128() {
        assert_eq!(varint(0), [0]);
        assert_eq!(varint(127), [0x7f]);
        assert_eq!(varint(128), [0x80, 0x01]);
        assert_eq!(varint(300), [0xac, 0x02]);
        assert_eq!(
            varint(1 << 56),
            [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]
        );
        // Nine bytes at most, the last with all eight bits.
        assert_eq!(varint(u64::MAX), [0xff; 9]);
        let mut buffer = Buffer::default();
        buffer.int(-1);
        assert_eq!(buffer.bytes, [0xff, 0xff, 0xff, 0xff, 0x0f]);
    }

    #[test]
    fn strings_carry_encoding_and_length() {
        let mut buffer = Buffer::default();
        buffer.string("é!").string("");
        assert_eq!(buffer.bytes, [3, 3, 0xc3, 0xa9, b'!', 3, 0]);
    }

    #[test]
    fn event_size_counts_itself() {
        for len in [0, 1, 125, 126, 127, 128, 16_381, 16_382, 16_383, 20_000] {
            let mut buffer = Buffer::default();
            buffer.event(&vec![7; len]);
            let size_len = buffer.bytes.len() - len;
            let mut size = 0u64;
            for (index, byte) in buffer.bytes[..size_len].iter().enumerate() {
                size |= u64::from(byte & 0x7f) << (7 * index);
            }
            assert_eq!(size as usize, buffer.bytes.len(), "{len}");
        }
    }
}
