//! One profile pushed to Grafana Pyroscope's ingest API:
//! `POST /ingest?name=APP{k=v,...}&from=&until=&format=pprof&...` with the
//! pprof as the raw body, which Pyroscope takes for profiles of its known
//! types (cpu). For pprof, `name` is a prefix: Pyroscope appends the
//! profile's type itself (`APP.cpu{...}`), so none is sent.

use std::time::Duration;

use super::{
    args::PyroscopeSettings,
    http::{self, Timeouts},
    unix_seconds,
    worker::{Delivery, Destination},
    Batch, ServiceProfile,
};

/// The Pyroscope destination.
pub(super) struct Pyroscope {
    agent: ureq::Agent,
    settings: PyroscopeSettings,
    timeouts: Timeouts,
}

impl Pyroscope {
    pub fn new(settings: PyroscopeSettings, timeouts: Timeouts) -> Self {
        let agent = http::agent(timeouts);
        Self {
            agent,
            settings,
            timeouts,
        }
    }
}

impl Destination for Pyroscope {
    fn name(&self) -> &'static str {
        "pyroscope"
    }

    fn deliver(
        &mut self,
        batch: &Batch,
        profile: &ServiceProfile,
        time_left: Option<Duration>,
    ) -> Delivery {
        let timeout = time_left.map_or(self.timeouts.request, |left| {
            left.min(self.timeouts.request)
        });
        let name = application_name(&profile.service, &profile.labels, &self.settings.labels);
        let mut request = self
            .agent
            .post(&self.settings.ingest_url)
            .query("name", name)
            .query("from", unix_seconds(batch.from).to_string())
            .query("until", unix_seconds(batch.until).to_string())
            .query("format", "pprof")
            .query("sampleRate", batch.sample_rate_hz.to_string())
            .query("spyName", "stoke")
            .header("Content-Type", "application/octet-stream");
        for (header, value) in &self.settings.headers {
            request = request.header(*header, value);
        }
        let result = request
            .config()
            .timeout_global(Some(timeout))
            .build()
            .send(&profile.pprof[..]);
        http::judge(result, &self.settings.ingest_url)
    }
}

/// `SERVICE{k=v,...}`: the profile's labels, then the static ones not
/// already there, as Pyroscope's application-name syntax allows them.
pub(super) fn application_name(
    service: &str,
    labels: &[(String, String)],
    static_labels: &[(String, String)],
) -> String {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (key, value) in labels.iter().chain(static_labels) {
        let key = sanitize_label_name(key);
        let value = sanitize_label_value(value);
        // Pyroscope, as Prometheus, takes an empty value as no label, and
        // reserves names that start with `__`.
        if value.is_empty() || key.starts_with("__") || pairs.iter().any(|(seen, _)| *seen == key) {
            continue;
        }
        pairs.push((key, value));
    }
    let labels: Vec<String> = pairs
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    format!("{}{{{}}}", sanitize_service(service), labels.join(","))
}

/// An application name has letters, digits, `_`, `-` and `.`; anything
/// else becomes `_`.
pub(super) fn sanitize_service(service: &str) -> String {
    let name: String = service
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "unknown".to_owned()
    } else {
        name
    }
}

/// Whether `name` is a label name as Pyroscope (and Prometheus) take it.
pub(super) fn is_label_name(name: &str) -> bool {
    !name.starts_with("__") && sanitize_label_name(name) == name
}

/// A label name: letters, digits and `_`, not starting with a digit.
fn sanitize_label_name(name: &str) -> String {
    let mut sanitized: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !sanitized.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        sanitized.insert(0, '_');
    }
    sanitized
}

/// A label value without the characters that delimit labels in the
/// application name (`,` `=` `{` `}`), quotes or control characters.
pub(super) fn sanitize_label_value(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if matches!(c, ',' | '=' | '{' | '}' | '"') || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn names_carry_the_labels_in_order() {
        let name = application_name(
            "web-api",
            &pairs(&[("container_name", "web_1"), ("pod", "web-5d9f")]),
            &pairs(&[("cluster", "prod"), ("pod", "ignored")]),
        );
        assert_eq!(
            name,
            "web-api{container_name=web_1,pod=web-5d9f,cluster=prod}"
        );
        assert_eq!(application_name("x", &[], &[]), "x{}");
    }

    #[test]
    fn what_pyroscope_cannot_take_is_rewritten_or_dropped() {
        let name = application_name(
            "my app/v2 {x}",
            &pairs(&[
                ("k8s.pod-name", "a,b=c{d}\"e\nf"),
                ("1st", "v"),
                ("__name__", "cpu"),
                ("empty", ""),
                ("unicode", "café"),
            ]),
            &[],
        );
        assert_eq!(
            name,
            "my_app_v2__x_{k8s_pod_name=a_b_c_d__e_f,_1st=v,unicode=café}"
        );
        assert_eq!(sanitize_service(""), "unknown");
        assert!(is_label_name("cluster_1") && !is_label_name("1a") && !is_label_name("__x"));
    }
}
