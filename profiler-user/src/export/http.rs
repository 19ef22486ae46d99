//! What the HTTP destinations (Pyroscope, OTLP) share: a client with
//! bounded waits, and the sorting of an answer into delivered, worth
//! retrying, or refused for good.

use std::time::Duration;

use super::worker::Delivery;

/// Connect and total timeouts of one request: a backend that hangs holds
/// the worker no longer than this.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeouts {
    pub connect: Duration,
    pub request: Duration,
}

/// A client that follows no redirect (a redirected POST would arrive as a
/// GET without its profile) and leaves statuses to [`judge`].
pub(super) fn agent(timeouts: Timeouts) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_connect(Some(timeouts.connect))
        .timeout_global(Some(timeouts.request))
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("stoke/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// What the answer to a POST to `url` says of the delivery: a 2xx took it;
/// an unreachable backend, a 5xx or a 429 is worth retrying; any other
/// status refuses it for good, with the first line of its answer.
pub(super) fn judge(
    result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    url: &str,
) -> Delivery {
    let mut response = match result {
        Ok(response) => response,
        Err(error) => return Delivery::Failed(format!("{url}: {error}")),
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
    let detail = format!("{url}: HTTP {status}: {reason}");
    if status.is_server_error() || status == ureq::http::StatusCode::TOO_MANY_REQUESTS {
        Delivery::Failed(detail)
    } else {
        Delivery::Refused {
            kind: format!("HTTP {}", status.as_u16()),
            detail,
        }
    }
}
