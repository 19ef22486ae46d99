//! Go's `go tool pprof`, the reference reader of pprof profiles, on
//! stoke's output.

use std::{collections::BTreeMap, path::Path, process::Command};

/// Debian's golang-go puts `go` here, not on PATH.
const DEBIAN_GO: &str = "/usr/lib/go/bin/go";

/// `go tool pprof ARGS FILE`'s output, which must succeed.
pub fn go_pprof(args: &[&str], file: &Path) -> String {
    let go = if Path::new(DEBIAN_GO).exists() {
        DEBIAN_GO
    } else {
        "go"
    };
    let output = Command::new(go)
        .args(["tool", "pprof", "-sample_index=samples"])
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {go} (cargo xtask setup installs golang-go): {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "go tool pprof {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// `-tags`' samples by label key and value.
pub fn pprof_tags(pprof: &Path) -> BTreeMap<String, BTreeMap<String, u64>> {
    let text = go_pprof(&["-tags"], pprof);
    let mut tags: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut key = String::new();
    for line in text.lines().map(str::trim).filter(|line| !line.is_empty()) {
        if let Some((name, _)) = line.split_once(": Total ") {
            key = name.to_owned();
        } else if let Some((count, value)) = line.split_once(" (") {
            let value = value.split_once("): ").expect("a tag value").1;
            tags.entry(key.clone())
                .or_default()
                .insert(value.to_owned(), whole_count(count));
        }
    }
    tags
}

/// A count `-tags` prints as a decimal (`1782.0`).
fn whole_count(text: &str) -> u64 {
    let count: f64 = text
        .parse()
        .unwrap_or_else(|_| panic!("{text} is no count"));
    assert_eq!(count.fract(), 0.0, "{text} samples");
    count as u64
}
