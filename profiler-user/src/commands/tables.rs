//! `stoke tables FILE...`: compiles each file's unwind table as a
//! recording would (its separate debug file included) and prints what it
//! costs, one tab-separated line per file.
//!
//! The bench reads the output by its header's column names: `file`,
//! `rows`, `bytes` and `compile_ms` come first and keep their names.

use std::{
    io::{self, Write},
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use crate::{
    cli::TablesArgs,
    rootfs::Root,
    unwind::{
        file_table::{self, TableError},
        loader,
        table::{RowKind, UnwindTable},
    },
};

/// The columns, in order.
pub const HEADER: [&str; 10] = [
    "file",
    "rows",
    "bytes",
    "compile_ms",
    "fdes",
    "debug_frame_fdes",
    "debug_file_fdes",
    "unsupported_rows",
    "skipped_fdes",
    "debug_file",
];

/// One file's numbers (the total's too).
#[derive(Debug, Default)]
struct Line {
    rows: usize,
    bytes: usize,
    compile_time: Duration,
    fdes: usize,
    debug_frame_fdes: usize,
    debug_file_fdes: usize,
    unsupported: usize,
    skipped_fdes: usize,
}

impl Line {
    fn of(table: &UnwindTable, compile_time: Duration) -> Self {
        Self {
            rows: table.rows.len(),
            bytes: loader::map_bytes(table.rows.len()),
            compile_time,
            fdes: table.stats.fdes,
            debug_frame_fdes: table.stats.debug_frame_fdes,
            debug_file_fdes: table.stats.debug_file_fdes,
            unsupported: table
                .rows
                .iter()
                .filter(|row| row.kind == RowKind::Unsupported)
                .count(),
            skipped_fdes: table.stats.skipped_fdes,
        }
    }

    fn add(&mut self, other: &Self) {
        self.rows += other.rows;
        self.bytes += other.bytes;
        self.compile_time += other.compile_time;
        self.fdes += other.fdes;
        self.debug_frame_fdes += other.debug_frame_fdes;
        self.debug_file_fdes += other.debug_file_fdes;
        self.unsupported += other.unsupported;
        self.skipped_fdes += other.skipped_fdes;
    }

    fn write(&self, out: &mut dyn Write, file: &str, debug_file: &str) -> io::Result<()> {
        writeln!(
            out,
            "{file}\t{}\t{}\t{:.2}\t{}\t{}\t{}\t{}\t{}\t{debug_file}",
            self.rows,
            self.bytes,
            self.compile_time.as_secs_f64() * 1e3,
            self.fdes,
            self.debug_frame_fdes,
            self.debug_file_fdes,
            self.unsupported,
            self.skipped_fdes,
        )
    }
}

/// Runs `stoke tables`. A file that cannot be read or is no x86_64 ELF
/// file gets a `stoke: error:` line on stderr instead of its line; the
/// others are still compiled, and the exit status is then 1.
pub fn run(args: &TablesArgs) -> ExitCode {
    match write_tables(&args.files, &mut io::stdout().lock()) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("stoke: error: writing the tables: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Writes the table of `files` to `out`; how many files failed.
fn write_tables(files: &[PathBuf], out: &mut dyn Write) -> io::Result<usize> {
    // Without a root, debug files are not looked for: say so once.
    let root = Root::host()
        .map_err(|error| eprintln!("stoke: warning: opening /: {error}: no separate debug files"))
        .ok();
    writeln!(out, "{}", HEADER.join("\t"))?;
    let mut total = Line::default();
    let mut failed = 0;
    for file in files {
        match table_of(file, root.as_ref()) {
            Ok((table, time)) => {
                let line = Line::of(&table, time);
                let debug_file = table.debug_file.as_deref().map_or("-".into(), field);
                line.write(out, &field(file), &debug_file)?;
                total.add(&line);
            }
            Err(error) => {
                failed += 1;
                eprintln!(
                    "stoke: error: {}: {}",
                    file.display(),
                    crate::one_line(&error.to_string())
                );
            }
        }
        out.flush()?;
    }
    total.write(out, "total", "-")?;
    out.flush()?;
    Ok(failed)
}

/// Compiles one file's table the way the loader does.
fn table_of(file: &Path, root: Option<&Root>) -> Result<(UnwindTable, Duration), TableError> {
    // Debug links are relative to the file's real directory, as
    // /proc/PID/maps shows it to a recording.
    let real = std::fs::canonicalize(file)?;
    let (table, time) = file_table::read_and_compile(&real, root, Some(&real));
    Ok((table?, time))
}

/// A path as one field: no tab or line break.
fn field(path: &Path) -> String {
    path.display()
        .to_string()
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_good_files_and_counts_bad_ones() {
        let files = [
            PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
            PathBuf::from("/etc/passwd"),
            PathBuf::from("/nonexistent"),
            PathBuf::from("/usr/bin/xz"),
        ];
        let mut out = Vec::new();
        assert_eq!(write_tables(&files, &mut out).unwrap(), 2);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines[0], HEADER);
        assert_eq!(lines[0][..4], ["file", "rows", "bytes", "compile_ms"]);
        assert_eq!(lines[1][0], "/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(lines[2][0], "/usr/bin/xz");
        assert_eq!(lines[3][0], "total");
        let number = |line: &[&str], column: usize| line[column].parse::<f64>().unwrap();
        for line in &lines[1..] {
            assert_eq!(line.len(), HEADER.len());
            assert_eq!(number(line, 2), number(line, 1) * 8.0);
        }
        for column in [1, 2, 4, 5, 6, 7, 8] {
            assert_eq!(
                number(&lines[3], column),
                number(&lines[1], column) + number(&lines[2], column),
                "{}",
                HEADER[column]
            );
        }
        assert_eq!(lines[3][9], "-");
    }

    #[test]
    fn fields_have_no_tabs() {
        assert_eq!(field(Path::new("/a\tb\nc")), "/a?b?c");
    }
}
