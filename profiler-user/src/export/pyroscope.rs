//! One profile pushed to Grafana Pyroscope's ingest API:
//! `POST /ingest?name=APP{k=v,...}&from=&until=&format=pprof&...` with the
//! pprof as the raw body, which Pyroscope takes for profiles of its known
//! types (cpu, alloc_*, contentions/delay). For pprof, `name` is a prefix:
//! Pyroscope appends the profile's type itself (`APP.cpu{...}`), so none is
//! sent. A sample type it does not know (offcpu) it drops unless told its
//! units: that profile goes as a form with a `sample_type_config`, whose
//! display name makes it `APP.offcpu{...}`.

use std::{borrow::Cow, time::Duration};

use super::{
    args::PyroscopeSettings,
    unix_seconds,
    worker::{Delivery, Destination},
    Batch, ServiceProfile,
};
use crate::event::Event;

/// Connect and total timeouts of one request: a backend that hangs holds
/// the worker no longer than this.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeouts {
    pub connect: Duration,
    pub request: Duration,
}

/// The Pyroscope destination.
pub(super) struct Pyroscope {
    agent: ureq::Agent,
    settings: PyroscopeSettings,
    timeouts: Timeouts,
}

impl Pyroscope {
    pub fn new(settings: PyroscopeSettings, timeouts: Timeouts) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(timeouts.connect))
            .timeout_global(Some(timeouts.request))
            // Statuses are sorted below: retried, or refused.
            .http_status_as_error(false)
            // A redirected POST would arrive as a GET without its profile.
            .max_redirects(0)
            .user_agent(concat!("stoke/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
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
            .header("Content-Type", content_type(profile));
        for (header, value) in &self.settings.headers {
            request = request.header(*header, value);
        }
        let result = request
            .config()
            .timeout_global(Some(timeout))
            .build()
            .send(&body(profile)[..]);
        let mut response = match result {
            Ok(response) => response,
            Err(error) => {
                return Delivery::Failed(format!("{}: {error}", self.settings.ingest_url))
            }
        };
        let status = response.status();
        if status.is_success() {
            return Delivery::Delivered;
        }
        // The answer's first line says why; a long one is cut.
        let answer = response
            .body_mut()
            .with_config()
            .limit(4096)
            .read_to_string()
            .unwrap_or_default();
        let reason = answer
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        let detail = format!("{}: HTTP {status}: {reason}", self.settings.ingest_url);
        if status.is_server_error() || status == ureq::http::StatusCode::TOO_MANY_REQUESTS {
            Delivery::Failed(detail)
        } else {
            Delivery::Refused {
                kind: format!("HTTP {}", status.as_u16()),
                detail,
            }
        }
    }
}

/// The stem of a form's boundary; [`boundary`] numbers it until it does not
/// occur in the pprof.
const BOUNDARY: &str = "stoke-sample-type-config-boundary";

/// The units Pyroscope is told of for the sample types it does not know.
fn sample_type_config(event: Event) -> Option<&'static str> {
    match event {
        // `lock_nanoseconds` is its unit for time (shown as durations).
        Event::Offcpu => Some(
            r#"{"offcpu":{"units":"lock_nanoseconds","display-name":"offcpu","aggregation":"sum"}}"#,
        ),
        Event::Cpu | Event::Alloc | Event::Lock => None,
    }
}

/// A boundary that does not occur in `pprof`.
fn boundary(pprof: &[u8]) -> String {
    (0u32..)
        .map(|n| format!("{BOUNDARY}-{n}"))
        .find(|boundary| {
            !pprof
                .windows(boundary.len())
                .any(|window| window == boundary.as_bytes())
        })
        .unwrap_or_default()
}

fn content_type(profile: &ServiceProfile) -> String {
    match sample_type_config(profile.event) {
        Some(_) => format!("multipart/form-data; boundary={}", boundary(&profile.pprof)),
        None => "application/octet-stream".to_owned(),
    }
}

/// The pprof as is, or in a form with its sample type config.
pub(super) fn body(profile: &ServiceProfile) -> Cow<'_, [u8]> {
    let Some(config) = sample_type_config(profile.event) else {
        return Cow::Borrowed(&profile.pprof);
    };
    let boundary = boundary(&profile.pprof);
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(&profile.pprof);
    body.extend_from_slice(
        format!(
            "\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"sample_type_config\"; filename=\"sample_type_config.json\"\r\nContent-Type: application/json\r\n\r\n{config}\r\n--{boundary}--\r\n"
        )
        .as_bytes(),
    );
    Cow::Owned(body)
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
