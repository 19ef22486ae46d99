//! The frame filters and flame graph options of `record` and `convert`:
//! `--all-user` and `--all-kernel` keep user or kernel frames (stacks that
//! become the same merged); `--title`, `--minwidth` and `--reverse` reach
//! the SVG and HTML flame graphs; bad values are refused.

use std::{path::Path, time::Duration};

use stoke_tests::{args, Stoke, StokeOutput};

const PROFILE: &str = "\
app [7];main;read;sys_read_[k];vfs_read_[k] 50
app [7];main;read;sys_read_[k] 10
app [7];main;work 39
app [7];main;tiny 1
";

fn convert(input: &Path, out: &Path, options: &[&str]) -> StokeOutput {
    let mut arguments = args!["convert", input.display(), "-o", out.display()].to_vec();
    arguments.extend(options.iter().map(|option| option.to_string()));
    Stoke::spawn(&arguments).wait(Duration::from_secs(30))
}

fn converted(input: &Path, out: &Path, options: &[&str]) -> String {
    convert(input, out, options).assert_success();
    std::fs::read_to_string(out).unwrap()
}

#[test]
fn filters_and_flame_graph_options() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.folded");
    std::fs::write(&input, PROFILE).unwrap();

    let user = converted(&input, &dir.path().join("user.folded"), &["--all-user"]);
    assert_eq!(
        user,
        "app [7];main;read 60\napp [7];main;tiny 1\napp [7];main;work 39\n"
    );
    let kernel = converted(&input, &dir.path().join("kernel.folded"), &["--all-kernel"]);
    assert_eq!(
        kernel,
        "app [7] 40\napp [7];sys_read_[k] 10\napp [7];sys_read_[k];vfs_read_[k] 50\n"
    );

    let svg_out = dir.path().join("graph.svg");
    let plain = converted(&input, &svg_out, &[]);
    let svg = converted(
        &input,
        &svg_out,
        &[
            "--title",
            "Checkout latency",
            "--minwidth",
            "2",
            "--reverse",
        ],
    );
    assert!(svg.contains("Checkout latency") && !plain.contains("Checkout latency"));
    assert!(plain.contains("<title>tiny (") && !svg.contains("<title>tiny ("));
    // Reversed, each leaf is a root with its callers above it: main is
    // drawn under each of the three leaves.
    let mains = |svg: &str| svg.matches("<title>main (").count();
    assert_eq!((mains(&plain), mains(&svg)), (1, 3));

    let html = converted(
        &input,
        &dir.path().join("graph.html"),
        &[
            "--title",
            "Checkout latency",
            "--minwidth",
            "2",
            "--reverse",
        ],
    );
    for expected in [
        r#""title":"Checkout latency""#,
        r#""reversed":true"#,
        r#""minwidth":2.0"#,
    ] {
        assert!(html.contains(expected), "the page data has {expected}");
    }

    let out = dir.path().join("bad.svg");
    convert(&input, &out, &["--minwidth", "150"]).assert_usage_error(&["percentage"]);
    convert(&input, &out, &["--all-user", "--all-kernel"]).assert_usage_error(&["--all-kernel"]);
    assert!(!out.exists(), "no output for a refused command");
}
