//! The profile as the page's JSON: a frame-name table and the stacks as a
//! prefix tree, which shares the frames stacks have in common and keeps a
//! whole host's profile to a few megabytes.

use std::{collections::HashMap, io};

use serde::Serialize;

use super::kind::{kinds, FrameKind};
use crate::{process::identity::host_name, profile::Profile};

/// What the page is given.
#[derive(Serialize)]
struct PageData<'a> {
    title: String,
    subtitle: String,
    /// Every distinct frame name once.
    names: Vec<&'a str>,
    /// Per name, its [`FrameKind`] as one digit.
    kinds: String,
    /// The prefix tree of the stacks in preorder, three numbers per node:
    /// its depth (0 for a root), its name's index in `names`, and the
    /// samples of the stack that ends there.
    nodes: Vec<u64>,
}

/// The page data of `profile`, as JSON that is safe inside a `<script>`
/// element: no `<`, `>` or `&` in it (escaped as `\u003c`...), so no frame
/// name can end the element or open a comment.
pub(super) fn json(profile: &Profile) -> io::Result<String> {
    let data = page_data(profile);
    let json = serde_json::to_string(&data)?;
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

fn page_data(profile: &Profile) -> PageData<'_> {
    let summary = &profile.summary;
    let mut names = Vec::new();
    let mut kind_of = Vec::new();
    let mut index: HashMap<&str, u64> = HashMap::new();
    // Sorted, a stack follows the stacks it shares a prefix with, so the
    // tree comes out in preorder from one pass.
    let mut stacks: Vec<_> = profile.stacks.iter().collect();
    stacks.sort_unstable_by(|a, b| a.frames.cmp(&b.frames));
    let mut nodes: Vec<u64> = Vec::new();
    let mut path: Vec<&str> = Vec::new();
    for stack in stacks {
        let shared = path
            .iter()
            .zip(&stack.frames)
            .take_while(|(a, b)| **a == &***b)
            .count();
        path.truncate(shared);
        let frame_kinds = kinds(&stack.frames, stack.context_frames);
        for (depth, frame) in stack.frames.iter().enumerate().skip(shared) {
            let name = index.entry(frame).or_insert_with(|| {
                names.push(&**frame);
                kind_of.push(frame_kinds[depth]);
                names.len() as u64 - 1
            });
            nodes.extend([depth as u64, *name, 0]);
            path.push(frame);
        }
        if stack.frames.is_empty() {
            continue;
        }
        if shared == stack.frames.len() {
            // The same stack again (inputs other than a recording may
            // repeat one): find its node, the last one at its depth.
            let depth = stack.frames.len() as u64 - 1;
            let node = nodes.chunks(3).rposition(|node| node[0] == depth);
            if let Some(node) = node {
                nodes[node * 3 + 2] += stack.samples;
            }
        } else {
            *nodes.last_mut().expect("a node was just added") += stack.samples;
        }
    }
    let (title, subtitle) = if summary.cpus == 0 {
        // Not a recording (`stoke convert`): only the samples are known.
        (
            "Stoke profile".to_owned(),
            format!("{} samples", summary.samples),
        )
    } else {
        (
            format!("Stoke CPU profile of {}", host_name()),
            format!(
                "{} samples in {:.1} s at {} Hz on {} CPUs, {} lost",
                summary.samples,
                summary.duration.as_secs_f64(),
                summary.frequency_hz,
                summary.cpus,
                summary.lost(),
            ),
        )
    };
    PageData {
        title,
        subtitle,
        names,
        kinds: kind_of.iter().map(|kind| FrameKind::digit(*kind)).collect(),
        nodes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::tests::profile;

    #[test]
    fn stacks_share_their_prefixes() {
        let profile = profile(&[
            ("a [1];main;x", 2),
            ("a [1];main", 1),
            ("a [1];main;y_[k]", 3),
        ]);
        let data = page_data(&profile);
        assert_eq!(data.names, ["a [1]", "main", "x", "y_[k]"]);
        assert_eq!(data.kinds, "6001");
        #[rustfmt::skip]
        assert_eq!(data.nodes, [0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3]);
    }

    #[test]
    fn samples_add_up() {
        let profile = profile(&[("a;b", 4), ("c", 5), ("a;d;e", 6)]);
        let data = page_data(&profile);
        let total: u64 = data.nodes.chunks(3).map(|node| node[2]).sum();
        assert_eq!(total, 15);
        assert_eq!(data.subtitle, "15 samples");
    }

    #[test]
    fn json_has_no_markup_characters() {
        let json = json(&profile(&[("a;<b>&c", 1)])).unwrap();
        assert!(!json.contains(['<', '>', '&']), "{json}");
        assert!(json.contains("\\u003cb\\u003e\\u0026c"));
    }
}
