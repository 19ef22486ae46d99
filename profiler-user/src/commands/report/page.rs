//! The report as one self-contained HTML file: facts, headline, sortable
//! tables, the flame graph, and the changes against a baseline. Every name
//! in it comes from profiled processes, so every one is escaped.

use std::{fmt::Write as _, time::UNIX_EPOCH};

use super::{
    baseline::Change,
    sweep::{Sweep, HOST_GROUP},
    Event, Facts,
};
use crate::process::cpu_quota::Throttling;

const TEMPLATE: &str = include_str!("page/report.html");
const STYLE: &str = include_str!("page/report.css");
const SCRIPT: &str = include_str!("page/report.js");

/// `text` safe inside HTML text and double-quoted attributes.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// A table: headers, then rows of (cell HTML, numeric sort value) with the
/// row's own attributes.
struct Table {
    html: String,
}

impl Table {
    fn new(id: &str, headers: &[&str]) -> Self {
        let mut html = format!("<table class=\"sortable\" id=\"{id}\"><thead><tr>");
        for header in headers {
            let _ = write!(html, "<th>{}</th>", escape(header));
        }
        html.push_str("</tr></thead><tbody>");
        Self { html }
    }

    fn row(&mut self, attributes: &str, cells: &[Cell]) {
        let _ = write!(self.html, "<tr {attributes}>");
        for cell in cells {
            match cell {
                Cell::Text(text) => {
                    let _ = write!(self.html, "<td>{}</td>", escape(text));
                }
                Cell::Code(text) => {
                    let _ = write!(self.html, "<td class=\"code\">{}</td>", escape(text));
                }
                Cell::Number(shown, value) => {
                    let _ = write!(
                        self.html,
                        "<td class=\"number\" data-value=\"{value}\">{}</td>",
                        escape(shown)
                    );
                }
            }
        }
        self.html.push_str("</tr>");
    }

    fn finish(mut self) -> String {
        self.html.push_str("</tbody></table>");
        self.html
    }
}

enum Cell {
    Text(String),
    Code(String),
    Number(String, f64),
}

fn share_cell(sweep: &Sweep, samples: u64) -> Cell {
    let share = sweep.share(samples);
    Cell::Number(percent(share), share)
}

fn count_cell(count: u64) -> Cell {
    Cell::Number(count.to_string(), count as f64)
}

/// The whole page; `flame_graphs` are HTML documents, one per event, and
/// A flame graph page in a frame of the report, by its id and title.
fn frame(id: &str, title: &str, page: &str) -> String {
    format!(
        "<iframe class=\"flamegraph\" id=\"{id}\" title=\"{title}\" srcdoc=\"{}\"></iframe>",
        escape(page)
    )
}

/// `changes` come with the differential flame graph's.
pub fn render(
    facts: &Facts,
    sweep: &Sweep,
    changes: Option<&(Vec<Change>, String)>,
    flame_graphs: &[(Event, String)],
) -> String {
    let title = format!("Stoke report: {}", facts.host);
    let mut body = format!("<h1>{}</h1>", escape(&title));
    body += &facts_table(facts);
    body += &headline(sweep);
    body += "<h2>CPU by container</h2>";
    body += &containers(sweep);
    body += "<h2>CPU by process</h2>";
    body += &processes(sweep);
    for (event, flame_graph) in flame_graphs {
        let _ = write!(
            body,
            "<h2>Flame graph: {} ({})</h2>",
            event.title(),
            event.unit()
        );
        body += &frame(
            &format!("flamegraph-{}", event.name()),
            &format!("{} flame graph", event.title()),
            flame_graph,
        );
    }
    body += "<h2>Top functions</h2>";
    body += &functions(sweep);
    body += "<h2>Recording quality</h2>";
    body += &quality(facts, sweep);
    if let Some((changes, flame_graph)) = changes {
        body += "<h2>Changes against the baseline</h2>";
        body += &changes_table(changes);
        body += "<h2>Differential flame graph: now against the baseline</h2>";
        body += &frame(
            "flamegraph-baseline",
            "differential flame graph",
            flame_graph,
        );
    }
    TEMPLATE
        .replace("{{TITLE}}", &escape(&title))
        .replace("{{STYLE}}", STYLE)
        .replace("{{SCRIPT}}", SCRIPT)
        .replace("{{BODY}}", &body)
}

fn facts_table(facts: &Facts) -> String {
    let summary = &facts.summary;
    let started = summary
        .started
        .and_then(|started| started.duration_since(UNIX_EPOCH).ok())
        .map_or(String::from("<td>unknown</td>"), |since| {
            format!("<td data-epoch-ms=\"{}\"></td>", since.as_millis())
        });
    let kernel = match &summary.kernel_limits {
        Some(limits) => format!("{}: {}", escape(&facts.kernel), escape(limits)),
        None => escape(&facts.kernel),
    };
    let rows = [
        ("host", escape(&facts.host)),
        ("kernel", kernel),
        ("CPUs", summary.cpus.to_string()),
        (
            "recorded",
            format!(
                "{:.1} s at {} Hz per CPU",
                summary.duration.as_secs_f64(),
                summary.frequency_hz
            ),
        ),
        ("samples", summary.samples.to_string()),
        ("lost", summary.lost().to_string()),
        ("processes", summary.processes.to_string()),
    ];
    let mut html = String::from("<table id=\"facts\">");
    for (name, value) in rows {
        let _ = write!(html, "<tr><th>{name}</th><td>{value}</td></tr>");
    }
    let _ = write!(html, "<tr><th>started</th>{started}</tr></table>");
    html
}

fn headline(sweep: &Sweep) -> String {
    let mut items = Vec::new();
    if let Some(container) = sweep.containers.first() {
        items.push(format!(
            "Busiest container: <b>{}</b>, {} of the CPU samples",
            escape(&container.name),
            percent(sweep.share(container.samples))
        ));
    }
    if let Some(process) = sweep.processes.first() {
        let place = if process.container == HOST_GROUP {
            "on the host".to_owned()
        } else {
            format!("in container {}", escape(&process.container))
        };
        items.push(format!(
            "Busiest process: <b>{} [{}]</b> {place}, {}",
            escape(&process.comm),
            process.pid,
            percent(sweep.share(process.samples))
        ));
    }
    if let Some(function) = sweep.functions.first() {
        items.push(format!(
            "Hottest function: <code>{}</code>, {} self",
            escape(&function.name),
            percent(sweep.share(function.self_samples))
        ));
    }
    let mut html = String::from("<ul class=\"headline\">");
    for item in items {
        let _ = write!(html, "<li>{item}</li>");
    }
    html + "</ul>"
}

fn containers(sweep: &Sweep) -> String {
    let mut table = Table::new(
        "containers",
        &[
            "container",
            "id",
            "pod",
            "processes",
            "samples",
            "CPU share",
            "throttled",
        ],
    );
    for row in &sweep.containers {
        let throttling = row.throttling.unwrap_or_default();
        table.row(
            &format!(
                "data-container=\"{}\" data-samples=\"{}\" data-periods=\"{}\" data-throttled=\"{}\"",
                escape(&row.name),
                row.samples,
                throttling.periods,
                throttling.throttled
            ),
            &[
                Cell::Text(row.name.clone()),
                Cell::Code(row.id.chars().take(12).collect()),
                Cell::Text(row.pod.clone()),
                count_cell(row.processes as u64),
                count_cell(row.samples),
                share_cell(sweep, row.samples),
                Cell::Text(throttled(throttling)),
            ],
        );
    }
    table.finish()
}

/// "in 98% of 30 periods", or nothing without a quota.
fn throttled(throttling: Throttling) -> String {
    throttling.share().map_or_else(String::new, |share| {
        format!("in {:.0}% of {} periods", share * 100.0, throttling.periods)
    })
}

fn processes(sweep: &Sweep) -> String {
    let mut table = Table::new(
        "processes",
        &[
            "pid",
            "command",
            "container",
            "executable",
            "JVM",
            "samples",
            "CPU share",
        ],
    );
    for row in &sweep.processes {
        let jvm_class = if row.jvm.is_some() {
            " class=\"jvm\""
        } else {
            ""
        };
        table.row(
            &format!(
                "data-pid=\"{}\" data-samples=\"{}\"{jvm_class}",
                row.pid, row.samples
            ),
            &[
                count_cell(u64::from(row.pid)),
                Cell::Text(row.comm.clone()),
                Cell::Text(row.container.clone()),
                Cell::Code(row.exe.clone()),
                Cell::Text(row.jvm.clone().unwrap_or_default()),
                count_cell(row.samples),
                share_cell(sweep, row.samples),
            ],
        );
    }
    table.finish()
}

fn functions(sweep: &Sweep) -> String {
    let mut table = Table::new("functions", &["function", "self", "total"]);
    for row in &sweep.functions {
        table.row(
            &format!("data-self=\"{}\"", row.self_samples),
            &[
                Cell::Code(row.name.to_string()),
                share_cell(sweep, row.self_samples),
                share_cell(sweep, row.total),
            ],
        );
    }
    table.finish()
}

fn quality(facts: &Facts, sweep: &Sweep) -> String {
    let summary = &facts.summary;
    let shown = |share: Option<f64>| share.map_or("no such samples".into(), percent);
    let mut truncated: Vec<String> = summary
        .stack_quality
        .truncated
        .iter()
        .map(|(why, samples)| format!("{} {samples}", escape(why)))
        .collect();
    if truncated.is_empty() {
        truncated.push("none".into());
    }
    format!(
        "<table id=\"quality\">\
         <tr><th>native stacks reaching their root</th><td>{}</td></tr>\
         <tr><th>JVM samples with Java frames</th><td>{}</td></tr>\
         <tr><th>samples lost</th><td>{}</td></tr>\
         <tr><th>partial kernel / user stacks</th><td>{} / {}</td></tr>\
         <tr><th>stacks cut short, by reason</th><td>{}</td></tr></table>",
        shown(sweep.reached_root),
        shown(sweep.java_coverage),
        summary.lost(),
        summary.partial_kernel_stacks,
        summary.partial_user_stacks,
        truncated.join(", ")
    )
}

fn changes_table(changes: &[Change]) -> String {
    let mut table = Table::new("changes", &["function", "baseline", "now", "change"]);
    for change in changes {
        let delta = change.after - change.before;
        let class = if delta > 0.0 { "grew" } else { "shrank" };
        table.row(
            &format!("class=\"{class}\" data-delta=\"{delta}\""),
            &[
                Cell::Code(change.name.to_string()),
                Cell::Number(percent(change.before), change.before),
                Cell::Number(percent(change.after), change.after),
                Cell::Number(format!("{:+.1} points", delta * 100.0), delta),
            ],
        );
    }
    table.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_processes_cannot_inject_markup() {
        assert_eq!(
            escape("<script>alert(\"x\")</script>&'"),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"
        );
    }
}
