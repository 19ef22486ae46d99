//! RESULTS.md: a header about the machine, a summary of the targets, then
//! one section per part. Rerunning some parts replaces their sections and
//! keeps the others, so a disturbed part can be measured again alone.

use std::{fmt::Write as _, fs, path::Path};

use anyhow::{Context, Result};

use super::{host::HostInfo, Part};

/// How a measurement compares with its target.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Met,
    /// Met, with a caveat (e.g. the noise is larger than the target).
    MetBut(String),
    /// Missed, and why (a short explanation from the data).
    Missed(String),
    /// Not judged, and why (e.g. a smoke run's durations are too short).
    NotJudged(String),
}

impl Verdict {
    fn show(&self) -> String {
        match self {
            Verdict::Met => "met".into(),
            Verdict::MetBut(caveat) => format!("met, but {caveat}"),
            Verdict::Missed(why) => format!("missed: {why}"),
            Verdict::NotJudged(why) => format!("not judged: {why}"),
        }
    }
}

/// One target of the issue (or a check of the bench's own) and the result.
#[derive(Debug, Clone)]
pub struct Target {
    pub goal: String,
    pub measured: String,
    pub verdict: Verdict,
}

impl Target {
    /// A target met when `met` holds, missed with `why` otherwise.
    pub fn judge(
        goal: impl Into<String>,
        measured: impl Into<String>,
        met: bool,
        why: impl FnOnce() -> String,
    ) -> Self {
        Self {
            goal: goal.into(),
            measured: measured.into(),
            verdict: if met {
                Verdict::Met
            } else {
                Verdict::Missed(why())
            },
        }
    }

    /// A target `value ≤ limit`, judged against the `noise` of the
    /// measurement (in the value's unit): over the limit is missed, by less
    /// than the noise said so; under it, met, unless the noise is wider than
    /// the limit itself. `shown` formats a value as the table does.
    pub fn at_most(
        goal: impl Into<String>,
        measured: impl Into<String>,
        (value, limit, noise): (f64, f64, f64),
        shown: impl Fn(f64) -> String,
    ) -> Self {
        let verdict = if value > limit + noise {
            Verdict::Missed(format!(
                "over by {}, more than the noise ({})",
                shown(value - limit),
                shown(noise)
            ))
        } else if value > limit {
            Verdict::Missed(format!(
                "within noise: over by {}, less than the noise ({})",
                shown(value - limit),
                shown(noise)
            ))
        } else if noise > limit.abs() {
            Verdict::MetBut(format!(
                "not resolved: the noise ({}) is wider than the limit",
                shown(noise)
            ))
        } else {
            Verdict::Met
        };
        Self {
            goal: goal.into(),
            measured: measured.into(),
            verdict,
        }
    }
}

/// One part's results: markdown (without its heading) and its targets.
pub struct Section {
    pub part: Part,
    pub body: String,
    pub targets: Vec<Target>,
    /// When, on what and how it was measured: a line under the heading.
    pub provenance: String,
}

impl Section {
    /// A part's section; `cargo xtask bench` adds its provenance.
    pub fn new(part: Part, body: String, targets: Vec<Target>) -> Self {
        Self {
            part,
            body,
            targets,
            provenance: String::new(),
        }
    }
}

/// A markdown table built row by row.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|&cell| cell.to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| {
            let cells: Vec<String> = cells.iter().map(|cell| cell.replace('|', "\\|")).collect();
            format!("| {} |\n", cells.join(" | "))
        };
        let mut text = line(&self.header);
        text += &line(&vec!["---".to_owned(); self.header.len()]);
        for row in &self.rows {
            text += &line(row);
        }
        text
    }
}

const TARGETS_BEGIN: &str = "<!-- targets -->";
const TARGETS_END: &str = "<!-- /targets -->";

fn part_begin(part: Part) -> String {
    format!("<!-- part:{} -->", part.name())
}

fn part_end(part: Part) -> String {
    format!("<!-- /part:{} -->", part.name())
}

/// A section as it appears in the file, between its markers.
fn render_section(section: &Section) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "{}", part_begin(section.part));
    let _ = writeln!(text, "## {}\n", section.part.title());
    let _ = writeln!(text, "_{}_\n", section.provenance);
    text += section.body.trim_end();
    text += "\n\n";
    if !section.targets.is_empty() {
        let mut table = Table::new(&["target", "measured", "verdict"]);
        for target in &section.targets {
            table.row(vec![
                target.goal.clone(),
                target.measured.clone(),
                target.verdict.show(),
            ]);
        }
        let _ = write!(
            text,
            "Targets:\n\n{TARGETS_BEGIN}\n{}{TARGETS_END}\n\n",
            table.markdown()
        );
    }
    let _ = writeln!(text, "{}", part_end(section.part));
    text
}

/// The text of `part`'s section in an earlier RESULTS file, markers included.
fn existing_section(previous: &str, part: Part) -> Option<String> {
    let begin = previous.find(&part_begin(part))?;
    let end_marker = part_end(part);
    let end = previous[begin..].find(&end_marker)? + begin + end_marker.len();
    Some(format!("{}\n", &previous[begin..end]))
}

/// The target rows of a rendered section (without the table's header).
fn target_rows(section: &str) -> Vec<String> {
    let Some(begin) = section.find(TARGETS_BEGIN) else {
        return Vec::new();
    };
    let Some(end) = section[begin..].find(TARGETS_END) else {
        return Vec::new();
    };
    section[begin + TARGETS_BEGIN.len()..begin + end]
        .lines()
        .filter(|line| line.starts_with("| "))
        .skip(2) // header and separator
        .map(str::to_owned)
        .collect()
}

/// Writes the results file at `path`: the sections just measured, and,
/// when `keep_others`, the other parts' sections of the file already there.
pub fn write(
    path: &Path,
    host: &HostInfo,
    sections: &[Section],
    keep_others: bool,
    smoke: bool,
) -> Result<()> {
    let previous = if keep_others {
        fs::read_to_string(path).unwrap_or_default()
    } else {
        String::new()
    };
    let rendered: Vec<(Part, String)> = Part::ALL
        .iter()
        .filter_map(|&part| {
            match sections.iter().find(|section| section.part == part) {
                Some(section) => Some(render_section(section)),
                None => existing_section(&previous, part),
            }
            .map(|text| (part, text))
        })
        .collect();

    let mut text = String::from("# Stoke benchmark results\n\n");
    if smoke {
        text += "**Smoke run**: durations and rounds far too small for the numbers to \
                 mean anything; it only shows that every part of the bench works.\n\n";
    }
    text += "Written by `cargo xtask bench` (see [README.md](README.md) for what each \
             part measures and how). Stoke and `perf record` ran on this machine side by \
             side, interleaved within each round, the order rotated between rounds; \
             figures are `median (min–max)` over the rounds.\n\n";
    let mut header = Table::new(&["", ""]);
    header.row(vec!["last written".into(), host.date.clone()]);
    header.row(vec!["kernel".into(), host.kernel.clone()]);
    header.row(vec![
        "CPUs".into(),
        format!(
            "{} ({}), {:.1} GiB RAM",
            host.cpus, host.cpu_model, host.memory_gib
        ),
    ]);
    header.row(vec!["stoke commit".into(), host.commit.clone()]);
    header.row(vec!["perf".into(), host.perf_version.clone()]);
    text += &header.markdown();
    text += "\nEach section says when it was measured: `--parts` reruns replace only \
             their own sections.\n\n";

    let mut summary = Table::new(&["part", "target", "measured", "verdict"]);
    let mut any = false;
    for (part, section) in &rendered {
        for row in target_rows(section) {
            summary.row(
                std::iter::once(part.title())
                    .chain(split_row(&row))
                    .collect(),
            );
            any = true;
        }
    }
    if any {
        text += "## Targets\n\n";
        text += &summary.markdown();
        text += "\n";
    }
    for (_, section) in &rendered {
        text += section;
        text += "\n";
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(path, text.trim_end().to_owned() + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

/// The cells of a markdown table row (escaped pipes stay in their cell).
fn split_row(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                cell.push('|');
            }
            '|' => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            _ => cell.push(c),
        }
    }
    cells.push(cell.trim().to_owned());
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(part: Part, goal: &str) -> Section {
        Section {
            part,
            body: "body text".into(),
            targets: vec![Target::judge(goal, "1 | 2", false, || "why".into())],
            provenance: "measured now".into(),
        }
    }

    #[test]
    fn tables_escape_pipes_and_rows_split_back() {
        let mut table = Table::new(&["a", "b"]);
        table.row(vec!["x|y".into(), "z".into()]);
        assert_eq!(
            table.markdown(),
            "| a | b |\n| --- | --- |\n| x\\|y | z |\n"
        );
        assert_eq!(split_row("| x\\|y | z |"), ["x|y", "z"]);
    }

    #[test]
    fn rerun_parts_replace_only_their_sections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("RESULTS.md");
        let host = HostInfo {
            date: "today".into(),
            kernel: "6.18".into(),
            cpus: 2,
            cpu_model: "cpu".into(),
            memory_gib: 1.0,
            commit: "abc".into(),
            perf_version: "perf 6.1".into(),
        };
        write(
            &path,
            &host,
            &[
                section(Part::Overhead, "first"),
                section(Part::Scale, "old"),
            ],
            false,
            false,
        )
        .unwrap();
        write(&path, &host, &[section(Part::Scale, "new")], true, false).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains("| first |"), "{text}");
        assert!(text.contains("| new |"), "{text}");
        assert!(!text.contains("| old |"), "{text}");
        // The summary has the kept section's target too, with its part.
        assert!(
            text.contains(&format!(
                "| {} | first | 1 \\| 2 | missed: why |",
                Part::Overhead.title()
            )),
            "{text}"
        );
    }
}
