//! `stoke report`: a whole-host sweep into one HTML file, with a workload
//! in a real docker container limited to half a CPU and a process on the
//! host; the tables name both, with the CPU each was measured to use, the
//! container throttled by its quota in (nearly) every period, and the
//! terminal headline says the same; in Chromium, the drawn tables list the process with its
//! container and sort by a click, and the flame graph draws. Against a
//! baseline of another workload, the function that took over and the one
//! that went away head the changes table. A process whose agent stoke did
//! not load says why in its row.

mod browser;

use std::{fs, path::Path, thread, time::Duration};

use browser::{number, Browser};
use serde_json::Value;

use stoke_tests::docker::{Container, Engine, Image, Rootfs};
use stoke_tests::{
    args, cpu_time, prepare, record_to, require_root, Stoke, TempDir, Workload, JDK_17,
};

/// Samples per second of the recordings.
const HZ: u32 = 299;

/// The value of `attribute` in the first tag of `html` that has
/// `marker` (an attribute and its value) in it.
fn attribute_of(html: &str, marker: &str, attribute: &str) -> Option<String> {
    let at = html.find(marker)?;
    tag_attribute(&html[html[..at].rfind('<')?..], attribute)
}

/// The value of `attribute` in the tag `html` starts with.
fn tag_attribute(html: &str, attribute: &str) -> Option<String> {
    let tag = &html[..html.find('>')?];
    let key = format!("{attribute}=\"");
    let value = &tag[tag.find(&key)? + key.len()..];
    Some(value[..value.find('"')?].to_owned())
}

/// The number in `attribute` of the tag with `marker`, or a panic that
/// shows the table the tag should be in.
fn number_of(html: &str, marker: &str, attribute: &str) -> f64 {
    attribute_of(html, marker, attribute)
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {attribute} on a tag with {marker} in the report"))
}

/// Samples `cpu` of CPU time should give at HZ.
fn expected_samples(cpu: Duration) -> f64 {
    cpu.as_secs_f64() * f64::from(HZ)
}

fn assert_about(what: &str, measured: f64, expected: f64) {
    println!("{what}: {measured} samples, {expected:.0} expected");
    assert!(
        (0.8 * expected..=1.1 * expected + 10.0).contains(&measured),
        "{what}: {measured} samples in the report, {expected:.0} expected from its CPU time"
    );
}

fn container_image(dir: &TempDir, workload: &Workload) -> Image {
    let mut rootfs = Rootfs::new(&dir.join("rootfs"));
    rootfs.add_program(workload.exe(), &format!("/app/{}", workload.name()));
    Image::import(Engine::Docker, workload.name(), &rootfs)
}

#[test]
fn a_report_names_a_container_and_a_host_process_with_their_cpu() {
    require_root();
    let (dir, workload) = prepare("report", "busy_other");
    let image = container_image(&dir, &workload);
    let exe = format!("/app/{}", workload.name());
    let container = Container::run_with(workload.name(), &image, &["--cpus", "0.5"], &[&exe, "60"]);
    let host = workload.spawn(&["60"]);
    let out = dir.join("report.html");
    let seconds = 3.0;

    let mut stoke = Stoke::spawn(&args![
        "report",
        "-a",
        "-F",
        HZ,
        "-d",
        seconds,
        "-o",
        out.display()
    ]);
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(60));
    let (container_before, host_before) = (cpu_time(container.pid()), cpu_time(host.pid()));
    thread::sleep(Duration::from_secs_f64(seconds));
    let container_cpu = cpu_time(container.pid()) - container_before;
    let host_cpu = cpu_time(host.pid()) - host_before;
    let output = stoke.wait(Duration::from_secs(120));
    output.assert_success();
    let html = fs::read_to_string(&out).expect("the report was written");

    let in_container = format!("data-container=\"{}\"", container.name());
    assert_about(
        "the container's row",
        number_of(&html, &in_container, "data-samples"),
        expected_samples(container_cpu),
    );
    assert!(
        html.contains("data-container=\"(host)\""),
        "no row for the host's own processes"
    );
    // A burner limited to half a CPU uses its quota up in every 100 ms
    // period it runs in.
    let periods = number_of(&html, &in_container, "data-periods");
    let throttled = number_of(&html, &in_container, "data-throttled");
    println!("the container was throttled in {throttled} of {periods} periods");
    assert!(
        periods >= 20.0 && throttled >= 0.9 * periods,
        "the container was throttled in {throttled} of {periods} quota periods \
         (≥ 20 periods, ≥ 90% of them wanted)"
    );
    assert!(
        output.stderr.contains(&format!("{} in ", container.name()))
            && output.stderr.contains("throttled by their CPU quota"),
        "the headline does not say the container was throttled:\n{}",
        output.stderr
    );
    for (pid, cpu, what) in [
        (container.pid(), container_cpu, "the containerized process"),
        (host.pid(), host_cpu, "the host process"),
    ] {
        assert_about(
            what,
            number_of(&html, &format!("data-pid=\"{pid}\""), "data-samples"),
            expected_samples(cpu),
        );
    }
    // The containerized process's row names its container.
    let row_start = html
        .find(&format!("data-pid=\"{}\"", container.pid()))
        .unwrap();
    let row = &html[row_start..row_start + html[row_start..].find("</tr>").unwrap()];
    assert!(
        row.contains(&format!("<td>{}</td>", container.name())),
        "the process row does not name its container: {row}"
    );
    let functions = &html[html
        .find("id=\"functions\"")
        .expect("no functions table in the report")..];
    let functions = &functions[..functions.find("</table>").unwrap()];
    assert!(
        functions.contains(">other_spin</td>"),
        "the workload's hot function is not in the top functions table: {functions}"
    );
    assert!(
        html.contains("<iframe class=\"flamegraph\""),
        "no flame graph in the report"
    );
    // The terminal headline names the same container.
    assert!(
        output.stderr.contains("by container:") && output.stderr.contains(container.name()),
        "the headline does not name the container:\n{}",
        output.stderr
    );
    assert_drawn_in_chromium(&out, container.pid(), container.name(), host.pid());
}

/// The cells' text of each row of the report's table `id`, as drawn.
fn table_rows(browser: &Browser, id: &str) -> Vec<Vec<String>> {
    let rows = browser.js(&format!(
        "return Array.from(document.querySelectorAll('#{id} tbody tr'))\
         .map(row => Array.from(row.cells).map(cell => cell.innerText.trim()));"
    ));
    let Value::Array(rows) = rows else {
        panic!("no rows in #{id}: {rows}")
    };
    rows.iter()
        .map(|row| {
            row.as_array()
                .expect("a row of cells")
                .iter()
                .map(|cell| cell.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .collect()
}

/// The report in Chromium, from file:// with the network off: the process
/// tables list the containerized process with its container and the host
/// process, the containers table the container; a click on `samples`
/// sorts the processes by it, most first; the flame graph draws.
fn assert_drawn_in_chromium(report: &Path, in_container: u32, container: &str, on_host: u32) {
    let browser = Browser::start();
    browser.load(
        &format!("file://{}", report.display()),
        "document.readyState === 'complete'",
    );
    let processes = table_rows(&browser, "processes");
    let row_of = |pid: u32| {
        processes
            .iter()
            .find(|row| row.first().map(String::as_str) == Some(&pid.to_string()))
            .unwrap_or_else(|| panic!("no drawn row for pid {pid} in {processes:?}"))
    };
    assert_eq!(
        row_of(in_container)[2],
        container,
        "the drawn row of the containerized process names no container"
    );
    row_of(on_host);
    let containers = table_rows(&browser, "containers");
    assert!(
        containers.iter().any(|row| row[0] == container),
        "no drawn row for {container} in {containers:?}"
    );

    let header = browser.js(
        "return Array.from(document.querySelectorAll('#processes th'))\
         .findIndex(th => th.innerText.trim() === 'samples');",
    );
    let column = number(&header) as usize;
    browser.js(&format!(
        "document.querySelectorAll('#processes th')[{column}].click(); return true;"
    ));
    let samples: Vec<f64> = browser
        .js(
            "return Array.from(document.querySelectorAll('#processes tbody tr'))\
             .map(row => Number(row.getAttribute('data-samples')));",
        )
        .as_array()
        .expect("the rows' samples")
        .iter()
        .map(number)
        .collect();
    assert!(
        samples.windows(2).all(|pair| pair[0] >= pair[1]),
        "a click on `samples` did not sort the processes by it, most first: {samples:?}"
    );

    // The flame graph's frame draws its own page. Its bottom, where the
    // roots are, is looked at: how tall the graph is depends on the host's
    // deepest stacks, and its top may be all narrow frames.
    browser.wait_for(
        "(() => { const frame = document.querySelector('iframe.flamegraph'); \
         frame.scrollIntoView({ block: 'end' }); \
         return frame.contentDocument && frame.contentDocument.querySelector('canvas'); })()",
        Duration::from_secs(30),
    );
    thread::sleep(Duration::from_millis(500));
    let frame = browser.js(
        "const r = document.querySelector('iframe.flamegraph').getBoundingClientRect(); \
         const bottom = Math.min(r.bottom, window.innerHeight); \
         const top = Math.max(r.top, bottom - 400); \
         return [r.x, top, r.width, bottom - top];",
    );
    let [x, y, width, height] = [0, 1, 2, 3].map(|at| number(&frame[at]).max(0.0) as u32);
    let shot = browser.screenshot("report.png");
    let coloured = shot.coloured_share(x, y, width, height);
    println!(
        "the flame graph colours {:.1}% of its frame's last {height} pixels",
        coloured * 100.0
    );
    assert!(
        coloured > 0.05,
        "the report's flame graph drew nothing ({:.1}% coloured)",
        coloured * 100.0
    );
}

/// A click at the middle of the widest drawn frame named `name` in the
/// flame graph of the frame the browser is in; waits for the redraw.
fn click_frame(browser: &Browser, name: &str) {
    let renders = browser.js("return stoke.renders();");
    browser.js(&format!(
        "const f = stoke.frames({name:?}).sort((a, b) => b.width - a.width)[0];
         const r = canvas.getBoundingClientRect();
         canvas.dispatchEvent(new MouseEvent('click', {{clientX: r.left + f.x + f.width / 2, clientY: r.top + f.y + 8}}));"
    ));
    browser.wait_for(
        &format!("stoke.renders() > {renders}"),
        Duration::from_secs(5),
    );
}

/// The report of the 70:30 workload, and its flame graph in Chromium: a
/// search finds hot_seventy's share, a click on hot_thirty zooms it to
/// the graph's width, and the report's URL keeps that view: loading it
/// again restores the search and the zoom.
#[test]
fn the_reports_flame_graph_searches_zooms_and_shares_its_view() {
    require_root();
    let (dir, workload) = prepare("report-flamegraph", "fp_split");
    let running = workload.spawn(&["30"]);
    let out = dir.join("report.html");
    Stoke::spawn(&args![
        "report",
        "-p",
        running.pid(),
        "-F",
        HZ,
        "-d",
        2,
        "-o",
        out.display()
    ])
    .wait(Duration::from_secs(120))
    .assert_success();
    drop(running);

    let browser = Browser::start();
    let open = |url: &str| {
        browser.load(url, "document.readyState === 'complete'");
        browser.enter_frame("iframe.flamegraph");
        browser.wait_for("window.stoke !== undefined", Duration::from_secs(30));
    };
    open(&format!("file://{}", out.display()));
    let total = number(&browser.js("return stoke.state().total;"));
    let drawn = |name: &str| drawn_samples(&browser, name);
    let seventy = drawn("hot_seventy");

    browser.type_into("search", "hot_seventy");
    let state = browser.js("return stoke.state();");
    println!("search hot_seventy in the report's flame graph: {state}");
    let matched = number(&state["matched"]);
    assert_eq!(matched, seventy, "{state}");
    // The workload splits its own CPU time 70:30, however busy the host.
    let share = matched / total;
    assert!((0.6..0.8).contains(&share), "{state}");
    assert!(
        state["matchedText"]
            .as_str()
            .unwrap()
            .contains(&format!("{:.2}%", 100.0 * share)),
        "{state}"
    );
    assert_eq!(
        browser.js("return stoke.frames('hot_seventy').every((frame) => frame.matched);"),
        true
    );

    click_frame(&browser, "hot_thirty");
    let zoomed = browser.js(
        "return [stoke.state(), stoke.frames('hot_thirty'), stoke.frames('hot_seventy'), \
         document.getElementById('totals').textContent];",
    );
    println!("zoomed on hot_thirty: {zoomed}");
    let width = number(&zoomed[0]["canvasWidth"]);
    assert!(
        (number(&zoomed[1][0]["width"]) - width).abs() < 1.0,
        "hot_thirty does not span the graph: {zoomed}"
    );
    assert_eq!(zoomed[2].as_array().unwrap().len(), 0, "{zoomed}");
    assert!(
        zoomed[3].as_str().unwrap().contains("zoomed on hot_thirty"),
        "{zoomed}"
    );

    let before = browser.js("return [stoke.view(), stoke.state()];");
    browser.leave_frame();
    let url = browser.url();
    println!("the report's shared view: {url}");
    open(&url);
    let after = browser.js("return [stoke.view(), stoke.state()];");
    assert_eq!(
        before, after,
        "the view did not survive loading the report from its URL"
    );
    assert_eq!(
        browser.js("return document.getElementById('search').value;"),
        "hot_seventy"
    );
}

#[test]
fn a_baseline_shows_which_function_grew_and_which_shrank() {
    require_root();
    let (dir, before) = prepare("report-baseline", "fp_split");
    let after = Workload::build("busy_other", dir.path());
    let baseline = dir.join("baseline.folded");
    {
        let running = before.spawn(&["30"]);
        record_to(&args!["-p", running.pid()], HZ, 2.0, &baseline).assert_success();
    }
    let running = after.spawn(&["30"]);
    let out = dir.join("report.html");
    let output = Stoke::spawn(&args![
        "report",
        "-p",
        running.pid(),
        "-F",
        HZ,
        "-d",
        2,
        "--baseline",
        baseline.display(),
        "-o",
        out.display()
    ])
    .wait(Duration::from_secs(120));
    output.assert_success();
    let html = fs::read_to_string(&out).expect("the report was written");
    let changes = &html[html
        .find("id=\"changes\"")
        .expect("no changes table in the report")..];
    let delta = |function: &str| {
        let at = changes
            .find(&format!(">{function}</td>"))
            .unwrap_or_else(|| panic!("{function} is not in the changes table"));
        let row = &changes[changes[..at].rfind("<tr").unwrap()..];
        tag_attribute(row, "data-delta")
            .and_then(|delta| delta.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no data-delta on the row of {function}"))
    };
    let (grew, shrank) = (delta("other_spin"), delta("spin"));
    println!("other_spin {grew:+.3}, spin {shrank:+.3}");
    // Nearly all samples are in each workload's leaf on its side.
    assert!(
        grew > 0.6,
        "other_spin grew by only {grew:.3} of the samples"
    );
    assert!(
        shrank < -0.6,
        "spin shrank by only {shrank:.3} of the samples"
    );

    // The differential flame graph below it: now's stacks, the function
    // that grew in red; the one gone since has no width.
    let browser = Browser::start();
    open_frame(&browser, &out, "#flamegraph-baseline");
    browser.screenshot("report-baseline.png");
    let grown = browser.js("return stoke.frames('other_spin')[0];");
    println!("other_spin in the differential flame graph: {grown}");
    let colour = grown["colour"].as_str().expect("other_spin is drawn");
    assert!(
        colour.starts_with("hsl(0,") || colour.starts_with("hsl(0 "),
        "other_spin, which grew, is not red: {colour}"
    );
    assert!(number(&grown["samples"]) > 0.0 && number(&grown["before"]) == 0.0);
    assert_eq!(
        browser.js("return stoke.frames('spin').length;"),
        0,
        "spin, gone since the baseline, has a width now"
    );
}

/// A process that maps libjvm.so but runs no JVM: stoke does not load its
/// agent there, and the report's row for it says why, as stoke's warning
/// did.
#[test]
fn a_jvm_row_says_why_its_stacks_are_native() {
    require_root();
    let (dir, workload) = prepare("report-no-agent", "libjvm_host");
    let running = workload.spawn(&args![10, JDK_17.libjvm().display()]);
    let pid = running.pid();
    let out = dir.join("report.html");
    let output = Stoke::spawn(&args![
        "report",
        "-p",
        pid,
        "-F",
        HZ,
        "-d",
        2,
        "-o",
        out.display()
    ])
    .wait(Duration::from_secs(120));
    output.assert_success();
    let prefix = format!("stoke: warning: JVM {pid}: ");
    let why = output
        .stderr
        .lines()
        .find_map(|line| {
            line.strip_prefix(&prefix)?
                .strip_suffix("; its stacks stay native-only")
        })
        .unwrap_or_else(|| panic!("no warning for {pid}:\n{}", output.stderr));
    let html = fs::read_to_string(&out).expect("the report was written");
    let row_start = html
        .find(&format!("data-pid=\"{pid}\""))
        .expect("no row for the process");
    let row = &html[row_start..row_start + html[row_start..].find("</tr>").unwrap()];
    let escaped = why
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;");
    assert!(
        row.contains(&format!("<td>native frames only: {escaped}</td>")),
        "the row does not say why ({why}): {row}"
    );
}

#[test]
fn a_baseline_that_is_not_a_profile_is_refused_before_recording() {
    require_root();
    let dir = TempDir::new("report-bad-baseline");
    let baseline = dir.join("notes.txt");
    fs::write(&baseline, "this is not\na profile\n").unwrap();
    let out = dir.join("report.html");
    let output = Stoke::spawn(&args![
        "report",
        "-d",
        1,
        "--baseline",
        baseline.display(),
        "-o",
        out.display()
    ])
    .wait(Duration::from_secs(60));
    output.assert_user_error(&["baseline", "folded"]);
    assert!(!out.exists(), "a report was written after the error");
}

/// With `-e cpu,offcpu` the report adds where threads waited: an off-CPU
/// flame graph whose waits split as the workload blocks (7 ms asleep, 3 ms
/// on a pipe per round), the tables still counting CPU.
#[test]
fn a_report_with_offcpu_draws_where_threads_waited() {
    require_root();
    let (dir, workload) = prepare("report-offcpu", "offcpu_split");
    let running = workload.spawn(&args![60]);
    let out = dir.join("report.html");
    let output = Stoke::spawn(&args![
        "report",
        "-p",
        running.pid(),
        "-e",
        "cpu,offcpu",
        "-d",
        3,
        "-o",
        out.display()
    ])
    .wait(Duration::from_secs(120));
    output.assert_success();

    let browser = Browser::start();
    open_frame(&browser, &out, "#flamegraph-offcpu");
    browser.screenshot("report-offcpu.png");
    let (seventy, thirty) = (
        drawn_samples(&browser, "sleep_seventy"),
        drawn_samples(&browser, "wait_thirty"),
    );
    let share = 100.0 * seventy / (seventy + thirty);
    println!("off-CPU: sleep_seventy {seventy} ns, wait_thirty {thirty} ns: {share:.1}%");
    // 3 s of rounds: nearly all of the main thread's time waits.
    assert!(
        seventy + thirty > 2.0e9,
        "only {:.2} s of waits drawn",
        (seventy + thirty) / 1e9
    );
    assert!(
        (65.0..=75.0).contains(&share),
        "sleep_seventy has {share:.1}% of the waits, expected about 70"
    );
}

/// Opens the report `out` and enters its flame graph frame `selector`.
fn open_frame(browser: &Browser, out: &Path, selector: &str) {
    browser.load(
        &format!("file://{}", out.display()),
        "document.readyState === 'complete'",
    );
    browser.enter_frame(selector);
    browser.wait_for("window.stoke !== undefined", Duration::from_secs(30));
}

/// The samples of the drawn frames named `name` in the flame graph the
/// browser is in.
fn drawn_samples(browser: &Browser, name: &str) -> f64 {
    let frames = browser.js(&format!("return stoke.frames({name:?});"));
    frames
        .as_array()
        .expect("the drawn frames")
        .iter()
        .map(|frame| number(&frame["samples"]))
        .sum()
}
