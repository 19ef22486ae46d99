//! Part 11, HTML flame graph: how long a page of 100,000 distinct stacks
//! takes to load and draw first in Chromium, and how big it is.
//!
//! The profile is the tests' synthetic one (`synthetic_profile`: a few
//! processes, paths repeating near the root and spreading towards the
//! leaves), converted by `stoke convert`. Chromium loads it headless from
//! file:// (`--dump-dom`); the page notes when it first drew (its
//! `data-first-draw-ms`, from the navigation's start), which the dump shows.

use std::{fs, process::Command, time::Instant};

use anyhow::{ensure, Context, Result};

use super::{
    report::{Section, Table, Target, Verdict},
    stats::show,
    Bench, Part,
};

/// Distinct stacks in the page.
const STACKS: usize = 100_000;

/// The target for the first draw.
const TARGET_MS: f64 = 2000.0;

const CHROMIUM: &str = "/usr/bin/chromium";

pub fn run(bench: &Bench) -> Result<Section> {
    if !std::path::Path::new(CHROMIUM).exists() {
        return Ok(section(
            "Left out: no Chromium (`cargo xtask setup` installs Debian's `chromium`).\n".into(),
            Vec::new(),
        ));
    }
    let folded = bench.scratch("large.folded");
    let page = bench.scratch("large.html");
    fs::write(&folded, stoke_tests::synthetic_profile(STACKS))
        .with_context(|| format!("writing {}", folded.display()))?;
    let converted = Instant::now();
    let output = Command::new(&bench.stoke)
        .arg("convert")
        .arg(&folded)
        .arg("-o")
        .arg(&page)
        .output()
        .context("running stoke convert")?;
    ensure!(
        output.status.success(),
        "stoke convert failed: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let convert_ms = converted.elapsed().as_secs_f64() * 1e3;
    let (mut first_draws, mut walls) = (Vec::new(), Vec::new());
    for round in 0..bench.settings.rounds {
        let what = format!(
            "HTML round {}: a page of {STACKS} stacks in Chromium",
            round + 1
        );
        let (first_draw, wall) = bench.measure(&what, || load(&page))?.value;
        bench.log(&format!("{what}: first draw after {first_draw:.0} ms"));
        first_draws.push(first_draw);
        walls.push(wall);
    }
    let size = |path| fs::metadata(path).map_or(0.0, |meta| meta.len() as f64 / 1024.0);
    let mut table = Table::new(&["", ""]);
    table.row(vec![
        "folded profile, HTML page".into(),
        format!("{:.0} KiB, {:.0} KiB", size(&folded), size(&page)),
    ]);
    table.row(vec![
        "`stoke convert` folded → HTML".into(),
        format!("{convert_ms:.0} ms"),
    ]);
    table.row(vec![
        "first draw, from the navigation's start".into(),
        show(&first_draws, 0, " ms"),
    ]);
    table.row(vec![
        "Chromium run, start to DOM dumped".into(),
        show(&walls, 0, " ms"),
    ]);
    let worst = first_draws.iter().copied().fold(0.0, f64::max);
    let goal = format!(
        "a page of {STACKS} stacks draws first in < {:.0} s",
        TARGET_MS / 1e3
    );
    let measured = format!("{worst:.0} ms at most");
    let target = if bench.settings.smoke {
        Target {
            goal,
            measured,
            verdict: Verdict::NotJudged("smoke run".into()),
        }
    } else {
        Target::judge(goal, measured, worst < TARGET_MS, || {
            "slower than the target".into()
        })
    };
    Ok(section(
        format!(
            "A page of {STACKS} distinct stacks (`synthetic_profile` of the tests), made by \
             `stoke convert`, loaded from file:// by headless Chromium ({CHROMIUM} \
             --headless --dump-dom, 1400×900), once per round.\n\n{}",
            table.markdown()
        ),
        vec![target],
    ))
}

/// Loads `page` in headless Chromium: the first draw's time, as the page
/// noted it, and the run's wall time, in milliseconds.
fn load(page: &std::path::Path) -> Result<(f64, f64)> {
    let started = Instant::now();
    let output = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1400,900",
            "--dump-dom",
        ])
        .arg(format!("file://{}", page.display()))
        .output()
        .context("running chromium")?;
    let wall = started.elapsed().as_secs_f64() * 1e3;
    ensure!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let dom = String::from_utf8_lossy(&output.stdout);
    let first_draw = first_draw_ms(&dom).context("the page noted no first draw")?;
    Ok((first_draw, wall))
}

/// The `data-first-draw-ms` the page set on its root element.
fn first_draw_ms(dom: &str) -> Option<f64> {
    let key = "data-first-draw-ms=\"";
    let value = &dom[dom.find(key)? + key.len()..];
    value[..value.find('"')?].parse().ok()
}

fn section(body: String, targets: Vec<Target>) -> Section {
    Section::new(Part::Html, body, targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_draw_is_read_from_the_dom() {
        let dom = "<html lang=\"en\" data-first-draw-ms=\"812\"><head>";
        assert_eq!(first_draw_ms(dom), Some(812.0));
        assert_eq!(first_draw_ms("<html>"), None);
    }
}
