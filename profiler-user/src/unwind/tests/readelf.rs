//! libc's table against `readelf --debug-dump=frames-interp`, row by
//! row.

use std::{collections::HashMap, process::Command};

use super::support::{compile_file, LIBC};
use crate::unwind::table::{RbpRule, RowKind, UnwindRow};

/// One row of `readelf --debug-dump=frames-interp`: the CFA column and the
/// registers' columns by name.
#[derive(Clone, Debug)]
struct ReadelfRow {
    cfa: String,
    registers: HashMap<String, String>,
}

/// One FDE of readelf's output.
#[derive(Debug)]
struct ReadelfFde {
    cie: String,
    start: u64,
    rows: Vec<(u64, ReadelfRow)>,
}

/// Parses readelf's interpreted frames: the CIEs' last rows (the initial
/// state of FDEs that print no table) and the FDEs' rows.
fn parse_readelf(text: &str) -> (HashMap<String, ReadelfRow>, Vec<ReadelfFde>) {
    let mut cies = HashMap::new();
    let mut fdes = Vec::new();
    // The CIE being read, if the current entry is a CIE.
    let mut cie: Option<String> = None;
    let mut columns: Vec<String> = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [offset, _, _, "CIE", ..] => {
                cie = Some(offset.to_string());
                columns.clear();
            }
            [_, _, _, "FDE", cie_word, pc, ..] => {
                cie = None;
                columns.clear();
                let range = pc.strip_prefix("pc=").unwrap();
                let (start, _) = range.split_once("..").unwrap();
                fdes.push(ReadelfFde {
                    cie: cie_word.strip_prefix("cie=").unwrap().to_string(),
                    start: u64::from_str_radix(start, 16).unwrap(),
                    rows: Vec::new(),
                });
            }
            ["LOC", "CFA", registers @ ..] => {
                columns = registers.iter().map(|r| r.to_string()).collect();
            }
            [location, cfa, values @ ..] if !columns.is_empty() => {
                let Ok(location) = u64::from_str_radix(location, 16) else {
                    continue;
                };
                // "r10 (r10)" is one value of two words.
                let mut merged: Vec<String> = Vec::new();
                for value in values {
                    match merged.last_mut() {
                        Some(last) if value.starts_with('(') => {
                            last.push(' ');
                            last.push_str(value);
                        }
                        _ => merged.push(value.to_string()),
                    }
                }
                let row = ReadelfRow {
                    cfa: cfa.to_string(),
                    registers: columns.iter().cloned().zip(merged).collect(),
                };
                match &cie {
                    Some(cie) => {
                        cies.insert(cie.clone(), row);
                    }
                    None => {
                        let fde = fdes.last_mut().unwrap();
                        // Two rows at one address: the later one applies.
                        if fde.rows.last().is_some_and(|(at, _)| *at == location) {
                            fde.rows.pop();
                        }
                        fde.rows.push((location, row));
                    }
                }
            }
            _ => {}
        }
    }
    (cies, fdes)
}

/// Whether our row says what readelf's row says.
fn agrees(row: Option<&UnwindRow>, readelf: &ReadelfRow) -> bool {
    let Some(row) = row else {
        return false;
    };
    let register = |name: &str| readelf.registers.get(name).map_or("u", |v| v.as_str());
    // A signal trampoline's CFI gives every register, the return address
    // included, by expressions into the signal frame: our Signal row
    // stands for all of them.
    if row.kind == RowKind::Signal {
        return readelf.cfa == "exp" && register("ra") == "exp";
    }
    match register("ra") {
        "c-8" => {}
        // readelf prints "u" for an undefined register.
        "u" => return row.kind == RowKind::End,
        _ => return row.kind == RowKind::Unsupported,
    }
    let offset_of = |text: &str, prefix: &str| -> Option<i64> {
        let rest = text.strip_prefix(prefix)?;
        rest.strip_prefix('+').unwrap_or(rest).parse().ok()
    };
    let cfa_ok = if let Some(offset) = offset_of(&readelf.cfa, "rsp") {
        (row.kind, i64::from(row.cfa_offset)) == (RowKind::CfaRsp, offset)
    } else if let Some(offset) = offset_of(&readelf.cfa, "rbp") {
        (row.kind, i64::from(row.cfa_offset)) == (RowKind::CfaRbp, offset)
    } else if readelf.cfa == "exp" {
        // readelf does not print the expression: any of the kinds an
        // expression can become.
        matches!(
            row.kind,
            RowKind::Plt | RowKind::CfaRbpDeref | RowKind::Unsupported
        )
    } else {
        row.kind == RowKind::Unsupported
    };
    if !cfa_ok {
        return false;
    }
    if row.kind == RowKind::Unsupported {
        return true;
    }
    let rbp = register("rbp");
    match rbp {
        "u" | "s" => row.rbp == RbpRule::Unchanged,
        "exp" => matches!(row.rbp, RbpRule::AtRbp | RbpRule::Unsupported),
        _ => match offset_of(rbp, "c") {
            Some(offset) => (row.rbp, i64::from(row.rbp_offset)) == (RbpRule::AtCfa, offset),
            None => row.rbp == RbpRule::Unsupported,
        },
    }
}

/// Every row of every FDE of libc, as readelf interprets them, against
/// what a lookup in our table gives at the row's address (a superset of
/// the ~200 FDE sample asked for: the whole file costs under a second).
#[test]
fn libc_agrees_with_readelf() {
    let output = Command::new("readelf")
        .args(["--debug-dump=frames-interp", LIBC])
        .output()
        .expect("readelf (binutils) runs");
    // readelf 2.40 exits with 1 on libc without a word on stderr: judge
    // by its output.
    let text = String::from_utf8_lossy(&output.stdout);
    let (cies, fdes) = parse_readelf(&text);
    assert!(!fdes.is_empty(), "no FDE in readelf's output");
    let table = compile_file(LIBC);

    let mut compared_fdes = 0;
    let mut compared_rows = 0;
    let mut disagreements = Vec::new();
    for fde in &fdes {
        // An FDE without instructions prints no table: its CIE's initial
        // row applies at its start.
        let rows = if fde.rows.is_empty() {
            vec![(fde.start, cies[&fde.cie].clone())]
        } else {
            fde.rows.clone()
        };
        compared_fdes += 1;
        for (location, readelf) in &rows {
            compared_rows += 1;
            let ours = table.lookup(*location);
            if !agrees(ours, readelf) {
                disagreements.push(format!("{location:#x}: readelf {readelf:?}, ours {ours:?}"));
            }
        }
    }
    eprintln!("readelf: {compared_fdes} FDEs, {compared_rows} rows compared");
    assert!(compared_fdes >= 2000);
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements[..disagreements.len().min(20)].join("\n")
    );
}
