//! `stoke diff` and `stoke convert` end to end: the differential flame
//! graph in headless Chromium (network off, from `file://`) colours a grown
//! function red and a shrunk one blue and lists the biggest changes; the
//! folded diff has both counts, from folded and from pprof inputs; bad
//! inputs and outputs are one-line errors that leave no file.

mod browser;

use std::{ffi::OsStr, time::Duration};

use browser::{convert, number, Browser};
use serde_json::Value;
use stoke_tests::{Stoke, StokeOutput, TempDir};

/// Runs stoke with `args` to the end.
fn run_stoke(args: &[&OsStr]) -> StokeOutput {
    Stoke::spawn(args).wait(Duration::from_secs(120))
}

/// Runs stoke with `args`, which must succeed.
fn stoke(args: &[&OsStr]) {
    run_stoke(args).assert_success();
}

#[test]
fn convert_and_diff_refuse_bad_input_in_one_line() {
    let dir = TempDir::new("html-errors");
    let bad = dir.join("bad.folded");
    let good = dir.join("good.folded");
    let page = dir.join("out.html");
    std::fs::write(&bad, "app;main 3\nnot a folded line\n").unwrap();
    std::fs::write(&good, "app;main 3\n").unwrap();
    let output = run_stoke(&[
        "convert".as_ref(),
        bad.as_os_str(),
        "-o".as_ref(),
        page.as_os_str(),
    ]);
    output.assert_user_error(&["line", "2", "folded"]);
    assert!(!page.exists(), "a failed convert left {}", page.display());
    let svg = dir.join("diff.svg");
    let output = run_stoke(&[
        "diff".as_ref(),
        good.as_os_str(),
        good.as_os_str(),
        "-o".as_ref(),
        svg.as_os_str(),
    ]);
    output.assert_user_error(&["html", "folded"]);
    assert!(!svg.exists());
    // --format takes only what diff writes, and its help lists only those.
    let output = run_stoke(&[
        "diff".as_ref(),
        good.as_os_str(),
        good.as_os_str(),
        "-o".as_ref(),
        page.as_os_str(),
        "--format".as_ref(),
        "svg".as_ref(),
    ]);
    output.assert_usage_error(&["svg", "html", "folded"]);
    assert!(!page.exists());
    let output = run_stoke(&["diff".as_ref(), "--help".as_ref()]);
    output.assert_success();
    let values: Vec<&str> = output
        .stdout
        .lines()
        .skip_while(|line| !line.contains("--format"))
        .take_while(|line| !line.contains("--help"))
        .filter_map(|line| line.trim().strip_prefix("- ")?.split(':').next())
        .collect();
    assert_eq!(values, ["html", "folded"], "{}", output.stdout);
    let output = run_stoke(&[
        "diff".as_ref(),
        good.as_os_str(),
        dir.join("missing.pb.gz").as_os_str(),
        "-o".as_ref(),
        page.as_os_str(),
    ]);
    output.assert_user_error(&["missing.pb.gz"]);
    assert!(!page.exists());
    // Standard input can be read once: not as both profiles.
    let output = run_stoke(&[
        "diff".as_ref(),
        "-".as_ref(),
        "-".as_ref(),
        "-o".as_ref(),
        page.as_os_str(),
    ]);
    output.assert_user_error(&["BEFORE", "AFTER", "standard", "input"]);
    assert!(!page.exists());
}

#[test]
fn diff_colours_growth_red_and_shrinkage_blue() {
    let dir = TempDir::new("html-diff");
    let before = dir.join("before.folded");
    let after = dir.join("after.folded");
    // AFTER has twice the samples: scaled, grows goes 60 -> 120, shrinks
    // 100 -> 60, same stays at 20 and gone 20 -> 0.
    std::fs::write(
        &before,
        "app [1];main;grows 30\napp [1];main;shrinks 50\napp [1];main;same 10\napp [1];main;gone 10\n",
    )
    .unwrap();
    std::fs::write(
        &after,
        "app [2];main;grows 120\napp [2];main;shrinks 60\napp [2];main;same 20\n",
    )
    .unwrap();
    // pprof input too: BEFORE as pprof, from `stoke convert`.
    let before_pprof = dir.join("before.pb.gz");
    let after_pprof = dir.join("after.pb.gz");
    convert(&before, &before_pprof);
    convert(&after, &after_pprof);
    let page = dir.join("diff.html");
    let folded = dir.join("diff.folded");
    let pprof_folded = dir.join("pprof-diff.folded");
    stoke(&[
        "diff".as_ref(),
        before.as_os_str(),
        after.as_os_str(),
        "-o".as_ref(),
        page.as_os_str(),
        "-o".as_ref(),
        folded.as_os_str(),
    ]);
    assert_eq!(
        std::fs::read_to_string(&folded).unwrap(),
        "app [*];main;gone 20 0\napp [*];main;grows 60 120\napp [*];main;same 20 20\napp [*];main;shrinks 100 60\n"
    );
    stoke(&[
        "diff".as_ref(),
        before_pprof.as_os_str(),
        after_pprof.as_os_str(),
        "-o".as_ref(),
        pprof_folded.as_os_str(),
    ]);
    assert_eq!(
        std::fs::read_to_string(&pprof_folded).unwrap(),
        "main;gone 20 0\nmain;grows 60 120\nmain;same 20 20\nmain;shrinks 100 60\n",
        "pprof inputs (no comm label: no process frame)"
    );

    let browser = Browser::start();
    browser.open(&page, "");
    browser.screenshot("diff.png");
    let frame = |name: &str| browser.js(&format!("return stoke.frames({name:?})[0];"));
    let hsl = |frame: &Value| -> (f64, f64) {
        let colour = frame["colour"].as_str().unwrap();
        let parts: Vec<f64> = colour
            .trim_start_matches("hsl(")
            .trim_end_matches(')')
            .split(',')
            .map(|part| part.trim().trim_end_matches('%').parse().unwrap())
            .collect();
        (parts[0], parts[2])
    };
    let grows = frame("grows");
    let shrinks = frame("shrinks");
    let same = frame("same");
    println!("grows {grows}\nshrinks {shrinks}\nsame {same}");
    assert_eq!(
        (number(&grows["before"]), number(&grows["samples"])),
        (60.0, 120.0)
    );
    let (hue, lightness) = hsl(&grows);
    assert!(hue == 0.0 && lightness < 80.0, "grows is not red: {grows}");
    let (hue, lightness) = hsl(&shrinks);
    assert!(
        hue == 220.0 && lightness < 85.0,
        "shrinks is not blue: {shrinks}"
    );
    assert!(hsl(&same).1 >= 90.0, "same is not pale: {same}");
    assert_eq!(
        browser.js("return stoke.frames('gone').length;"),
        0,
        "gone has no width after"
    );
    // Sized by BEFORE (a link's fragment), what is gone is drawn, and each
    // frame has its BEFORE width: gone 20, shrinks 100 of main's 200.
    browser.open(&page, "before=1");
    let main = number(&frame("main")["width"]);
    let gone = number(&frame("gone")["width"]);
    let shrinks = number(&frame("shrinks")["width"]);
    println!("sized by BEFORE: main {main}, gone {gone}, shrinks {shrinks}");
    assert!(
        (gone / main - 0.1).abs() < 0.01 && (shrinks / main - 0.5).abs() < 0.01,
        "not sized by BEFORE: main {main}, gone {gone}, shrinks {shrinks}"
    );
    browser.open(&page, "");

    let table = browser.js(
        "return [...document.querySelectorAll('#changes tbody tr')].map((row) => [...row.cells].map((cell) => cell.textContent));",
    );
    println!("changes: {table}");
    let rows = table.as_array().unwrap();
    assert_eq!(rows[0], serde_json::json!(["grows", "60", "120", "+60"]));
    assert_eq!(rows[1], serde_json::json!(["shrinks", "100", "60", "-40"]));
    assert_eq!(rows[2], serde_json::json!(["gone", "20", "0", "-20"]));
    assert_eq!(rows.len(), 3, "unchanged frames are not listed: {table}");

    // Transforms apply to both sides: keeping `grows` keeps its change.
    browser.type_into("keep", "grows");
    let grows = frame("grows");
    assert_eq!(
        (number(&grows["before"]), number(&grows["samples"])),
        (60.0, 120.0)
    );
    assert_eq!(number(&browser.js("return stoke.state().total;")), 120.0);
}
