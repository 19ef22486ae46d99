//! The line of an instruction, from a code object's line table in each
//! format CPython has had since 3.8 (`Objects/lnotab_notes.txt`,
//! `InternalDocs/code_objects.md`). Tables are the process's bytes:
//! every read is checked, a malformed table gives no line.

use super::layout::LineTable;

/// The line of the instruction at `instruction` (as the frame gave it:
/// see [`LineTable`]) of a code object starting at `first_line`, from
/// `table`; `None` where the table has none.
pub fn line_of(table: &[u8], format: LineTable, first_line: i32, instruction: u32) -> Option<u32> {
    let line = match format {
        LineTable::Lnotab => lnotab(table, first_line, instruction),
        LineTable::Ranges => ranges(table, first_line, instruction.checked_mul(2)?),
        LineTable::Locations => locations(table, first_line, instruction / 2),
    }?;
    u32::try_from(line).ok().filter(|&line| line > 0)
}

/// (bytecode delta, signed line delta) pairs: the line at a byte offset
/// is the last one whose start is at or before it.
fn lnotab(table: &[u8], first_line: i32, offset: u32) -> Option<i32> {
    let mut line = first_line;
    let mut address = 0u32;
    for pair in table.chunks_exact(2) {
        address = address.saturating_add(u32::from(pair[0]));
        if address > offset {
            break;
        }
        line = line.saturating_add(i32::from(pair[1] as i8));
    }
    Some(line)
}

/// (range length, signed line delta) pairs; a delta of -128 is a range
/// without a line.
fn ranges(table: &[u8], first_line: i32, offset: u32) -> Option<i32> {
    let mut line = first_line;
    let mut start = 0u32;
    for pair in table.chunks_exact(2) {
        let end = start.saturating_add(u32::from(pair[0]));
        let delta = pair[1] as i8;
        if delta != -128 {
            line = line.saturating_add(i32::from(delta));
        }
        if (start..end).contains(&offset) {
            return (delta != -128).then_some(line);
        }
        start = end;
    }
    None
}

/// The location table: entries of a first byte (1, code: 4 bits, code
/// units - 1: 3 bits) and, by code, none to four varints of line and
/// column information.
fn locations(table: &[u8], first_line: i32, unit: u32) -> Option<i32> {
    let mut bytes = table.iter().copied();
    let mut line = first_line;
    let mut start = 0u32;
    while let Some(first) = bytes.next() {
        if first & 0x80 == 0 {
            return None;
        }
        let code = (first >> 3) & 15;
        let end = start.saturating_add(u32::from(first & 7) + 1);
        let has_line = match code {
            15 => false,
            14 => {
                line = line.saturating_add(signed_varint(&mut bytes)?);
                for _ in 0..3 {
                    varint(&mut bytes)?;
                }
                true
            }
            13 => {
                line = line.saturating_add(signed_varint(&mut bytes)?);
                true
            }
            10..=12 => {
                line = line.saturating_add(i32::from(code) - 10);
                bytes.nth(1)?;
                true
            }
            _ => {
                bytes.next()?;
                true
            }
        };
        if (start..end).contains(&unit) {
            return has_line.then_some(line);
        }
        start = end;
    }
    None
}

/// 6 bits a byte, least significant first; bit 6 says another follows.
fn varint(bytes: &mut impl Iterator<Item = u8>) -> Option<u32> {
    let mut value = 0u32;
    for shift in (0..32).step_by(6) {
        let byte = bytes.next()?;
        value |= u32::from(byte & 63) << shift;
        if byte & 64 == 0 {
            return Some(value);
        }
    }
    None
}

/// A varint whose lowest bit is the sign.
fn signed_varint(bytes: &mut impl Iterator<Item = u8>) -> Option<i32> {
    let value = varint(bytes)?;
    let magnitude = i32::try_from(value >> 1).ok()?;
    Some(if value & 1 != 0 {
        -magnitude
    } else {
        magnitude
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lnotab_pairs_move_the_line_at_their_offsets() {
        // Offsets 0-5 line 10, 6-13 line 11, 14- line 9.
        let table = [6, 1, 8, 0xfe];
        assert_eq!(line_of(&table, LineTable::Lnotab, 10, 0), Some(10));
        assert_eq!(line_of(&table, LineTable::Lnotab, 10, 6), Some(11));
        assert_eq!(line_of(&table, LineTable::Lnotab, 10, 20), Some(9));
    }

    #[test]
    fn ranges_count_code_units_and_may_have_no_line() {
        // Bytes 0-3 line 5, 4-7 no line, 8-11 line 7.
        let table = [4, 0, 4, 0x80, 4, 2];
        assert_eq!(line_of(&table, LineTable::Ranges, 5, 1), Some(5));
        assert_eq!(line_of(&table, LineTable::Ranges, 5, 2), None);
        assert_eq!(line_of(&table, LineTable::Ranges, 5, 4), Some(7));
    }

    /// A location entry's first byte.
    fn entry(code: u8, units: u8) -> u8 {
        0x80 | code << 3 | (units - 1)
    }

    #[test]
    fn location_entries_of_every_form() {
        let table = [
            entry(13, 1), // 1 unit, no columns, line +1 (varint 2)
            2,
            entry(3, 2), // 2 units, short form: same line
            0x20,
            entry(11, 1), // 1 unit, one-line form: line +1
            4,
            9,
            entry(15, 1), // 1 unit without a location
            entry(14, 1), // 1 unit, long form: line -2 (varint 5)
            5,
            0,
            1,
            2,
        ];
        let line = |unit: u32| line_of(&table, LineTable::Locations, 20, unit * 2);
        assert_eq!(
            [line(0), line(1), line(2), line(3), line(4), line(5)],
            [Some(21), Some(21), Some(21), Some(22), None, Some(20)]
        );
        assert_eq!(line(6), None);
    }

    #[test]
    fn malformed_tables_give_no_line() {
        assert_eq!(line_of(&[0x7f], LineTable::Locations, 1, 0), None);
        assert_eq!(
            line_of(&[entry(14, 1), 0xff], LineTable::Locations, 1, 0),
            None
        );
        assert_eq!(line_of(&[], LineTable::Ranges, 1, 0), None);
    }
}
