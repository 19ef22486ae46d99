//! Writers that turn a finished [`Profile`] into the file the user asked for.

mod flamegraph;
mod folded;
mod html;
mod jfr;
mod json;
pub mod otlp;
mod output_file;
mod outputs;
pub mod pprof;
mod summary;

pub use folded::write_diff as write_diff_folded;
pub use html::{count_context_frames, write_diff as write_diff_html};
pub use output_file::OutputFile;
pub use outputs::OutputPlan;

use std::{
    io::{BufWriter, Write},
    path::{Path, PathBuf},
};

use crate::model::Profile;

/// What kind of file to write a profile as.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Collapsed stacks, one line per stack, for other flame graph tools.
    Folded,
    /// An interactive flame graph.
    Svg,
    /// An interactive canvas flame graph page with search, zoom and live
    /// transforms, for profiles of any size.
    Html,
    /// A text report of the hottest functions.
    Txt,
    /// The summary and every stack, for programs.
    Json,
    /// pprof's profile.proto, gzipped, for `go tool pprof`, Pyroscope and
    /// other pprof tools.
    Pprof,
    /// OpenTelemetry's profiles signal (OTLP `ProfilesData`, protobuf).
    Otlp,
    /// A JDK Flight Recorder file, for `jfr`, Java Mission Control and
    /// other JFR tools.
    Jfr,
}

/// The output path's extension names no format and `--format` was not given.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot tell the output format of {}: name it .svg, .html, .folded, .txt, .json, .pb.gz, .otlp.pb or .jfr, or pass --format",
    .path.display()
)]
pub struct UnknownExtension {
    path: PathBuf,
}

impl Format {
    /// Picks the format for the output at `path`: `flag` (`--format`) if
    /// given, otherwise the one its extension names; folded stacks, text for
    /// pipes, on standard output.
    pub fn for_output(path: &Path, flag: Option<Format>) -> Result<Format, UnknownExtension> {
        if let Some(format) = flag {
            return Ok(format);
        }
        if output_file::is_standard_output(path) {
            return Ok(Format::Folded);
        }
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        if name.ends_with(".pb.gz") {
            return Ok(Format::Pprof);
        }
        if name.ends_with(".otlp.pb") {
            return Ok(Format::Otlp);
        }
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match extension.as_deref() {
            Some("folded" | "collapsed") => Ok(Format::Folded),
            Some("svg") => Ok(Format::Svg),
            Some("html" | "htm") => Ok(Format::Html),
            Some("txt") => Ok(Format::Txt),
            Some("json") => Ok(Format::Json),
            Some("jfr") => Ok(Format::Jfr),
            _ => Err(UnknownExtension {
                path: path.to_owned(),
            }),
        }
    }
}

/// How SVG and HTML flame graphs are drawn (`--title`, `--minwidth`,
/// `--reverse`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphOptions {
    /// The title instead of Stoke's own.
    pub title: Option<String>,
    /// Frames narrower than this percent of the graph's width are left out.
    pub min_width: f64,
    /// Callers of each leaf function, leaf at the top (an icicle graph).
    pub reverse: bool,
}

/// Writes `profile` to `out` as `format`, its flame graphs drawn as
/// `graph` says.
pub fn write_profile(
    profile: &Profile,
    format: Format,
    graph: &GraphOptions,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    // The writers emit many small pieces; callers hand in unbuffered files.
    let mut out = BufWriter::new(out);
    match format {
        Format::Folded => folded::write(profile, &mut out)?,
        Format::Svg => flamegraph::write(profile, graph, &mut out)?,
        Format::Html => html::write(profile, graph, &mut out)?,
        Format::Txt => summary::write(profile, &mut out)?,
        Format::Json => json::write(profile, &mut out)?,
        Format::Pprof => pprof::write(profile, &mut out)?,
        Format::Otlp => otlp::write(profile, &mut out)?,
        Format::Jfr => jfr::write(profile, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{FoldedStack, RecordingSummary};

    /// A profile of `stacks` given as `"proc;a;b"` and a count, with one
    /// context frame.
    pub(crate) fn profile(stacks: &[(&str, u64)]) -> Profile {
        Profile {
            event: crate::event::Event::Cpu,
            stacks: stacks
                .iter()
                .map(|&(frames, samples)| FoldedStack {
                    frames: frames.split(';').map(Arc::from).collect(),
                    context_frames: 1,
                    samples,
                    labels: Arc::new([]),
                    modules: Box::new([]),
                })
                .collect(),
            modules: Vec::new(),
            summary: RecordingSummary {
                samples: stacks
                    .iter()
                    .fold(0, |total, &(_, n)| total.saturating_add(n)),
                ..RecordingSummary::default()
            },
        }
    }

    #[test]
    fn flag_wins_over_extension() {
        let format = Format::for_output(Path::new("out.svg"), Some(Format::Txt));
        assert_eq!(format.unwrap(), Format::Txt);
        let format = Format::for_output(Path::new("out"), Some(Format::Folded));
        assert_eq!(format.unwrap(), Format::Folded);
    }

    #[test]
    fn extension_names_format() {
        for (path, format) in [
            ("a.folded", Format::Folded),
            ("dir/a.collapsed", Format::Folded),
            ("a.svg", Format::Svg),
            ("a.html", Format::Html),
            ("a.HTM", Format::Html),
            ("A.SVG", Format::Svg),
            ("a.txt", Format::Txt),
            ("a.json", Format::Json),
            ("a.pb.gz", Format::Pprof),
            ("dir/host.PB.GZ", Format::Pprof),
            ("host.otlp.pb", Format::Otlp),
            ("a.jfr", Format::Jfr),
            ("-", Format::Folded),
            ("/dev/stdout", Format::Folded),
        ] {
            assert_eq!(
                Format::for_output(Path::new(path), None).unwrap(),
                format,
                "{path}"
            );
        }
    }

    #[test]
    fn unknown_or_missing_extension_is_an_error() {
        for path in ["profile", "profile.xml", "dir.svg/profile", "profile.gz"] {
            let error = Format::for_output(Path::new(path), None)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(path) && error.contains("--format"),
                "{error}"
            );
            assert!(!error.contains('\n'));
        }
    }

    #[test]
    fn write_profile_writes_each_format() {
        let profile = profile(&[("app;main", 2)]);
        for format in [
            Format::Folded,
            Format::Svg,
            Format::Html,
            Format::Txt,
            Format::Json,
        ] {
            let mut out = Vec::new();
            write_profile(&profile, format, &GraphOptions::default(), &mut out).unwrap();
            assert!(
                String::from_utf8(out).unwrap().contains("main"),
                "{format:?}"
            );
        }
    }
}
