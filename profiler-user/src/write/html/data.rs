//! The profile as the page's JSON: a frame-name table and the stacks as a
//! prefix tree, which shares the frames stacks have in common and keeps a
//! whole host's profile to a few megabytes.

use std::{collections::HashMap, io, sync::Arc};

use serde::Serialize;

use super::kind::{kinds, FrameKind};
use crate::{
    aggregate::diff::Diff,
    model::Profile,
    process::identity::host_name,
    write::{flamegraph, GraphOptions},
};

/// Rows of the table of biggest changes in a diff.
const CHANGES: usize = 30;

/// What the page is given.
#[derive(Serialize)]
struct PageData<'a> {
    title: String,
    subtitle: String,
    /// What the values count: `samples`, `nanoseconds`, `bytes`.
    unit: &'static str,
    /// Whether the page opens reversed (callers of each leaf, top down).
    reversed: bool,
    /// Frames narrower than this percent of the drawn width are not drawn.
    minwidth: f64,
    /// Every distinct frame name once.
    names: Vec<&'a str>,
    /// Per name, its [`FrameKind`] as one digit.
    kinds: String,
    /// The prefix tree of the stacks in preorder, three numbers per node:
    /// its depth (0 for a root), its name's index in `names`, and the
    /// samples of the stack that ends there (AFTER's in a diff).
    nodes: Vec<u64>,
    /// In a diff, per node, BEFORE's samples of the stack that ends there,
    /// scaled to AFTER's total.
    #[serde(skip_serializing_if = "Option::is_none")]
    before: Option<Vec<f64>>,
    /// In a diff, the frames whose samples changed most.
    #[serde(skip_serializing_if = "Option::is_none")]
    changes: Option<Vec<Change<'a>>>,
}

/// A frame's samples (stacks through it, each once) in both profiles.
#[derive(Serialize)]
struct Change<'a> {
    name: &'a str,
    before: f64,
    after: u64,
}

/// One stack as the page takes it.
struct Entry<'a> {
    frames: &'a [Arc<str>],
    context_frames: usize,
    samples: u64,
    before: f64,
}

/// The page data of `profile`, drawn as `graph` says, as JSON safe inside
/// a `<script>` element.
pub(super) fn json(profile: &Profile, graph: &GraphOptions) -> io::Result<String> {
    let summary = &profile.summary;
    let (title, subtitle) = if summary.cpus == 0 {
        // Not a recording (`stoke convert`): only the samples are known.
        (
            "Stoke profile".to_owned(),
            format!("{} samples", summary.samples),
        )
    } else {
        (
            format!("Stoke {} profile of {}", profile.event.title(), host_name()),
            flamegraph::subtitle(profile),
        )
    };
    let entries = profile.stacks.iter().map(|stack| Entry {
        frames: &stack.frames,
        context_frames: stack.context_frames,
        samples: stack.samples,
        before: 0.0,
    });
    let title = graph.title.clone().unwrap_or(title);
    let mut data = page_data(title, subtitle, entries.collect(), false);
    data.unit = profile.event.unit();
    data.reversed = graph.reverse;
    data.minwidth = graph.min_width;
    safe_json(&data)
}

/// The page data of a diff, as JSON safe inside a `<script>` element.
pub(super) fn diff_json(diff: &Diff) -> io::Result<String> {
    let scale = diff.scale();
    let title = "Stoke differential profile".to_owned();
    let subtitle = format!(
        "{} ({} samples, scaled by {scale:.3}) to {} ({} samples): width is after, red grew, blue shrank",
        diff.before_name, diff.before_samples, diff.after_name, diff.after_samples
    );
    let entries = diff.stacks.iter().map(|stack| Entry {
        frames: &stack.frames,
        context_frames: stack.context_frames,
        samples: stack.after,
        before: stack.before as f64 * scale,
    });
    safe_json(&page_data(title, subtitle, entries.collect(), true))
}

/// `data` as JSON with no `<`, `>` or `&` in it (escaped as `\u003c`...),
/// so that no frame name can end the element or open a comment.
fn safe_json(data: &PageData) -> io::Result<String> {
    let json = serde_json::to_string(data)?;
    let mut safe = String::with_capacity(json.len() + json.len() / 64);
    for c in json.chars() {
        match c {
            '<' => safe.push_str("\\u003c"),
            '>' => safe.push_str("\\u003e"),
            '&' => safe.push_str("\\u0026"),
            c => safe.push(c),
        }
    }
    Ok(safe)
}

fn page_data<'a>(
    title: String,
    subtitle: String,
    mut stacks: Vec<Entry<'a>>,
    diff: bool,
) -> PageData<'a> {
    let mut names = Vec::new();
    let mut kind_of = Vec::new();
    let mut index: HashMap<&str, u64> = HashMap::new();
    // Sorted, a stack follows the stacks it shares a prefix with, so the
    // tree comes out in preorder from one pass.
    stacks.sort_unstable_by(|a, b| a.frames.cmp(b.frames));
    let mut nodes: Vec<u64> = Vec::new();
    let mut before: Vec<f64> = Vec::new();
    let mut path: Vec<&str> = Vec::new();
    for stack in &stacks {
        let shared = path
            .iter()
            .zip(stack.frames)
            .take_while(|(a, b)| **a == &***b)
            .count();
        path.truncate(shared);
        let frame_kinds = kinds(stack.frames, stack.context_frames);
        for (depth, frame) in stack.frames.iter().enumerate().skip(shared) {
            let name = index.entry(frame).or_insert_with(|| {
                names.push(&**frame);
                kind_of.push(frame_kinds[depth]);
                names.len() as u64 - 1
            });
            nodes.extend([depth as u64, *name, 0]);
            before.push(0.0);
            path.push(frame);
        }
        if stack.frames.is_empty() {
            continue;
        }
        // The same stack again (inputs other than a recording may repeat
        // one) ends at the last node at its depth.
        let depth = stack.frames.len() as u64 - 1;
        if let Some(node) = nodes.chunks(3).rposition(|node| node[0] == depth) {
            nodes[node * 3 + 2] += stack.samples;
            before[node] += stack.before;
        }
    }
    let changes = diff.then(|| changes(&stacks));
    PageData {
        title,
        subtitle,
        unit: "samples",
        reversed: false,
        minwidth: 0.0,
        names,
        kinds: kind_of.iter().map(|kind| FrameKind::digit(*kind)).collect(),
        nodes,
        before: diff.then(|| before.iter().map(|b| (b * 100.0).round() / 100.0).collect()),
        changes,
    }
}

/// The frames whose samples changed most, biggest change first; unchanged
/// frames are left out.
fn changes<'a>(stacks: &[Entry<'a>]) -> Vec<Change<'a>> {
    let mut by_name: HashMap<&str, (f64, u64)> = HashMap::new();
    let mut seen = Vec::new();
    for stack in stacks {
        seen.clear();
        for frame in stack.frames {
            if seen.contains(&&**frame) {
                continue;
            }
            seen.push(frame);
            let counts = by_name.entry(frame).or_default();
            counts.0 += stack.before;
            counts.1 += stack.samples;
        }
    }
    let mut changes: Vec<Change> = by_name
        .into_iter()
        .map(|(name, (before, after))| Change {
            name,
            before: (before * 100.0).round() / 100.0,
            after,
        })
        .collect();
    let size = |change: &Change| (change.after as f64 - change.before).abs();
    changes.retain(|change| size(change) >= 0.01);
    changes.sort_by(|a, b| size(b).total_cmp(&size(a)).then(a.name.cmp(b.name)));
    changes.truncate(CHANGES);
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::tests::profile;

    fn data(profile: &Profile) -> PageData<'_> {
        let entries = profile.stacks.iter().map(|stack| Entry {
            frames: &stack.frames,
            context_frames: stack.context_frames,
            samples: stack.samples,
            before: 0.0,
        });
        page_data(String::new(), String::new(), entries.collect(), false)
    }

    #[test]
    fn stacks_share_their_prefixes() {
        let profile = profile(&[
            ("a [1];main;x", 2),
            ("a [1];main", 1),
            ("a [1];main;y_[k]", 3),
        ]);
        let data = data(&profile);
        assert_eq!(data.names, ["a [1]", "main", "x", "y_[k]"]);
        assert_eq!(data.kinds, "6001");
        #[rustfmt::skip]
        assert_eq!(data.nodes, [0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3]);
        assert!(data.before.is_none() && data.changes.is_none());
    }

    #[test]
    fn samples_add_up() {
        let profile = profile(&[("a;b", 4), ("c", 5), ("a;d;e", 6)]);
        let total: u64 = data(&profile).nodes.chunks(3).map(|node| node[2]).sum();
        assert_eq!(total, 15);
        assert!(json(&profile, &GraphOptions::default())
            .unwrap()
            .contains("\"15 samples\""));
    }

    #[test]
    fn json_has_no_markup_characters() {
        let json = json(&profile(&[("a;<b>&c", 1)]), &GraphOptions::default()).unwrap();
        assert!(!json.contains(['<', '>', '&']), "{json}");
        assert!(json.contains("\\u003cb\\u003e\\u0026c"));
    }

    #[test]
    fn a_diff_carries_scaled_before_counts_and_the_biggest_changes() {
        let before = profile(&[("a [1];x", 6), ("a [1];y", 2), ("a [1];z", 2)]);
        let after = profile(&[("a [2];x", 5), ("a [2];y", 15)]);
        let diff = crate::aggregate::diff::diff(&before, &after, "b".into(), "a".into());
        let json: serde_json::Value = serde_json::from_str(&diff_json(&diff).unwrap()).unwrap();
        assert_eq!(json["names"], serde_json::json!(["a [*]", "x", "y", "z"]));
        assert_eq!(json["before"], serde_json::json!([0.0, 12.0, 4.0, 4.0]));
        let changes = &json["changes"];
        assert_eq!(changes[0]["name"], "y");
        assert_eq!(
            (changes[0]["before"].as_f64(), changes[0]["after"].as_u64()),
            (Some(4.0), Some(15))
        );
        assert_eq!(changes[1]["name"], "x");
        assert_eq!(changes[2]["name"], "z");
    }
}
