//! Target `python`: CPython line tables as a process holds them, read for
//! `--lines`: any bytes, in each version's format, at any first line and
//! instruction. Whatever the table, a line is a positive number or none.

use bolero::TypeGenerator;

use super::harness::{self, Run};
use crate::interpreter::python::{layout::LineTable, line_of};

#[derive(Debug, TypeGenerator)]
struct LineInput {
    table: Vec<u8>,
    /// Modulo 3: lnotab, 3.10's ranges, 3.11's locations.
    format: u8,
    first_line: i32,
    instruction: u32,
}

#[test]
fn python() {
    let run = Run::start("python");
    bolero::check!()
        .with_type::<LineInput>()
        .with_test_time(harness::budget())
        .with_shrink_time(harness::SHRINK_TIME)
        .for_each(|input| {
            run.input(|| {
                let format = [LineTable::Lnotab, LineTable::Ranges, LineTable::Locations]
                    [usize::from(input.format % 3)];
                let line = line_of(&input.table, format, input.first_line, input.instruction);
                assert!(line.is_none_or(|line| line > 0));
            })
        });
}
