//! Interactive SVG flame graphs, drawn by inferno.

use std::io::{self, Write};

use inferno::flamegraph::{from_lines, Direction, Options};

use super::{folded, GraphOptions};
use crate::{
    event::Event,
    model::{Profile, RecordingSummary},
};

/// Writes `profile` as a flame graph drawn as `graph` says, or as a small
/// SVG saying there is nothing to show when it holds no samples.
pub(super) fn write(
    profile: &Profile,
    graph: &GraphOptions,
    out: &mut dyn Write,
) -> io::Result<()> {
    let subtitle = subtitle(profile);
    let title = match &graph.title {
        Some(title) => title.clone(),
        None => format!("Stoke {} profile", profile.event.title()),
    };
    // inferno refuses to draw zero samples, but a quiet machine is a
    // legitimate recording, not a failure.
    if profile.stacks.iter().all(|stack| stack.samples == 0) {
        return write_empty(&title, &subtitle, out);
    }
    let mut options = Options::default();
    options.title = title;
    options.subtitle = Some(subtitle);
    options.count_name = profile.event.unit().into();
    // inferno's minimum width is a percentage too.
    options.min_width = options.min_width.max(graph.min_width);
    if graph.reverse {
        options.reverse_stack_order = true;
        options.direction = Direction::Inverted;
    }
    // Colors from name hashes rather than at random, so a function keeps
    // its color from one graph to the next and output is reproducible.
    options.hash = true;
    let lines = folded::lines(profile);
    from_lines(&mut options, lines.iter().map(String::as_str), out)
}

/// One line about how the recording went, shown under the title.
pub(super) fn subtitle(profile: &Profile) -> String {
    let summary: &RecordingSummary = &profile.summary;
    if profile.event != Event::Cpu {
        let total: u64 = profile.stacks.iter().map(|stack| stack.samples).sum();
        return format!(
            "{total} {} in {:.1} s",
            profile.event.unit(),
            summary.duration.as_secs_f64()
        );
    }
    format!(
        "{} samples in {:.1} s at {} Hz on {} CPUs, {} lost",
        summary.samples,
        summary.duration.as_secs_f64(),
        summary.frequency_hz,
        summary.cpus,
        summary.lost(),
    )
}

fn write_empty(title: &str, subtitle: &str, out: &mut dyn Write) -> io::Result<()> {
    write!(
        out,
        r#"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="1200" height="110" viewBox="0 0 1200 110" xmlns="http://www.w3.org/2000/svg">
<g font-family="Verdana" text-anchor="middle">
<text x="600" y="24" font-size="17">{title}</text>
<text x="600" y="50" font-size="12">{subtitle}</text>
<text x="600" y="85" font-size="14">No samples were recorded.</text>
</g>
</svg>
"#
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::write::tests::profile;

    fn svg(profile: &Profile) -> String {
        svg_with(profile, &GraphOptions::default())
    }

    fn svg_with(profile: &Profile, graph: &GraphOptions) -> String {
        let mut out = Vec::new();
        write(profile, graph, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn draws_functions_and_recording_details() {
        let mut profile = profile(&[("app;main;compute", 5), ("app;main", 1)]);
        profile.summary.duration = Duration::from_millis(2500);
        profile.summary.frequency_hz = 99;
        profile.summary.cpus = 4;
        let svg = svg(&profile);
        assert!(svg.contains("<svg"));
        assert!(svg.contains("compute"));
        assert!(svg.contains("Stoke CPU profile"));
        assert!(svg.contains("6 samples in 2.5 s at 99 Hz on 4 CPUs, 0 lost"));
    }

    #[test]
    fn empty_profile_is_a_valid_svg() {
        let svg = svg(&profile(&[]));
        assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("No samples"));
    }

    #[test]
    fn title_minwidth_and_reverse_change_the_graph() {
        let profile = profile(&[
            ("app;a;leaf", 495),
            ("app;b;leaf", 495),
            ("app;b;narrow", 10),
        ]);
        let plain = svg(&profile);
        let leaves = |svg: &str| svg.matches("<title>leaf (").count();
        assert_eq!(leaves(&plain), 2, "leaf under a and under b");
        assert!(plain.contains("<title>narrow ("));
        let graph = GraphOptions {
            title: Some("My <title>".into()),
            min_width: 2.0,
            reverse: true,
        };
        let drawn = svg_with(&profile, &graph);
        assert!(drawn.contains("My &lt;title&gt;"), "the title, escaped");
        assert!(!drawn.contains("narrow"), "1% is under --minwidth 2");
        assert_eq!(
            leaves(&drawn),
            1,
            "reversed: leaf is one root, its callers above it"
        );
    }
}
