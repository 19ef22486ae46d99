//! The interactive HTML flame graph: one self-contained page (no network
//! fetch, works from `file://`) that draws on a canvas, so that it stays
//! smooth with a whole host's stacks.
//!
//! The page is `page.html` with `flamegraph.css` and the scripts of this
//! directory inlined, and the profile embedded as JSON ([`data`]). Frame
//! names come from untrusted processes: they only ever reach the page as
//! JSON string values inside a `<script type="application/json">` element,
//! with `<`, `>` and `&` escaped, and the scripts put them on the canvas or
//! into `textContent`, never into markup.

mod data;
pub(super) mod kind;

use std::io::{self, Write};

pub use kind::count_context_frames;

use super::GraphOptions;
use crate::{aggregate::diff::Diff, model::Profile};

const PAGE: &str = include_str!("page.html");
const CSS: &str = include_str!("flamegraph.css");
/// The scripts, in the order they run: the data model, then the view.
const SCRIPTS: [&str; 2] = [include_str!("profile.js"), include_str!("flamegraph.js")];

/// Writes `profile` as an HTML flame graph page drawn as `graph` says.
pub(super) fn write(
    profile: &Profile,
    graph: &GraphOptions,
    out: &mut dyn Write,
) -> io::Result<()> {
    write_page(&data::json(profile, graph)?, out)
}

/// Writes `diff` as a differential flame graph page: AFTER's stacks,
/// coloured by how their samples changed from BEFORE's, and a table of
/// the biggest changes.
pub fn write_diff(diff: &Diff, out: &mut dyn Write) -> io::Result<()> {
    write_page(&data::diff_json(diff)?, out)
}

fn write_page(json: &str, out: &mut dyn Write) -> io::Result<()> {
    let mut rest = PAGE;
    while let Some(start) = rest.find("{{") {
        let end = start
            + rest[start..]
                .find("}}")
                .expect("page.html closes every placeholder");
        out.write_all(&rest.as_bytes()[..start])?;
        match &rest[start + 2..end] {
            "css" => out.write_all(CSS.as_bytes())?,
            "scripts" => {
                for script in SCRIPTS {
                    out.write_all(script.as_bytes())?;
                }
            }
            "data" => out.write_all(json.as_bytes())?,
            other => unreachable!("page.html has an unknown placeholder {other}"),
        }
        rest = &rest[end + 2..];
    }
    out.write_all(rest.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::tests::profile;

    fn page(profile: &Profile) -> String {
        page_with(profile, &GraphOptions::default())
    }

    fn page_with(profile: &Profile, graph: &GraphOptions) -> String {
        let mut out = Vec::new();
        write(profile, graph, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn graph_options_reach_the_page() {
        let profile = profile(&[("app [1];main", 5)]);
        let plain = page(&profile);
        assert!(plain.contains("\"reversed\":false") && plain.contains("\"minwidth\":0.0"));
        let graph = GraphOptions {
            title: Some("Checkout <slow>".into()),
            min_width: 0.5,
            reverse: true,
        };
        let page = page_with(&profile, &graph);
        assert!(page.contains("\"title\":\"Checkout \\u003cslow\\u003e\""));
        assert!(page.contains("\"reversed\":true") && page.contains("\"minwidth\":0.5"));
    }

    #[test]
    fn page_is_self_contained() {
        let page = page(&profile(&[("app [1];main;compute", 5)]));
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(!page.contains("{{"), "a placeholder was left");
        assert!(page.contains("\"compute\""));
        for remote in ["http://", "https://", "src=", "href="] {
            assert!(!page.contains(remote), "the page refers to {remote}");
        }
    }

    #[test]
    fn hostile_names_cannot_close_the_data_element() {
        let evil = "</script><script>alert(1)</script><!--";
        let page = page(&profile(&[(&format!("app [1];{evil}"), 1)]));
        assert!(!page.contains(evil));
        assert_eq!(
            page.matches("</script>").count(),
            2,
            "data and scripts only"
        );
    }
}
