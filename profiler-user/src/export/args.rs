//! The flags that say where `stoke continuous` delivers its profiles, and
//! their checking: every mistake is found at start, in one line, not at the
//! first push an interval later.

use std::{num::NonZeroUsize, path::PathBuf, time::Duration};

use anyhow::{bail, Context};
use base64::Engine;
use clap::Args;

/// Where profiles go: Grafana Pyroscope, a directory, or both.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// Push every profile to this Grafana Pyroscope server: its base URL,
    /// to which `/ingest` is appended (e.g. http://pyroscope:4040).
    #[arg(long, value_name = "URL")]
    pub pyroscope: Option<String>,

    /// HTTP basic authentication for --pyroscope (Grafana Cloud: the stack's
    /// user id and an access token).
    #[arg(
        long,
        value_name = "USER:PASSWORD",
        env = "STOKE_PYROSCOPE_BASIC_AUTH",
        hide_env_values = true,
        conflicts_with = "bearer_token"
    )]
    pub basic_auth: Option<String>,

    /// A bearer token for --pyroscope.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "STOKE_PYROSCOPE_TOKEN",
        hide_env_values = true
    )]
    pub bearer_token: Option<String>,

    /// The tenant, sent as X-Scope-OrgID (multi-tenant Pyroscope).
    #[arg(long, value_name = "ID", env = "STOKE_PYROSCOPE_TENANT")]
    pub tenant: Option<String>,

    /// A label on every profile pushed, such as cluster=prod or
    /// region=eu-west-1. Repeatable. Names are letters, digits and `_`,
    /// not starting with a digit.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,

    /// Push every profile as OpenTelemetry's profiles signal (OTLP/HTTP,
    /// protobuf) to this collector: its base URL, to which
    /// `/v1development/profiles` is appended (e.g. http://otel-collector:4318).
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,

    /// Also write every profile as DIR/SERVICE/UNTIL.pb.gz (UNTIL: the
    /// interval's end in UNIX seconds).
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,

    /// Files kept per service in --output-dir: the oldest beyond N are
    /// removed.
    #[arg(long, value_name = "N", default_value = "60")]
    pub keep: NonZeroUsize,

    /// How long --output-dir keeps the files of a service that stopped (a
    /// container removed): once its newest file is older, its directory
    /// is removed, if it holds only stoke's profiles. Seconds, or a number
    /// and s, m, h or d.
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse, default_value = "24h")]
    pub retention: Duration,

    /// Batches (intervals) held per destination while it cannot take them:
    /// beyond N, the oldest is dropped and counted.
    #[arg(long, value_name = "N", default_value = "10")]
    pub queue: NonZeroUsize,
}

/// The checked form of [`ExportArgs`].
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub pyroscope: Option<PyroscopeSettings>,
    pub otlp: Option<OtlpSettings>,
    pub output_dir: Option<PathBuf>,
    pub keep: usize,
    pub retention: Duration,
    pub queue: usize,
}

/// How to reach an OTLP collector.
#[derive(Debug, Clone)]
pub(super) struct OtlpSettings {
    /// The profiles endpoint: the base URL and `/v1development/profiles`.
    pub url: String,
    /// Resource attributes after each profile's own labels.
    pub labels: Vec<(String, String)>,
}

/// How to reach Pyroscope.
#[derive(Debug, Clone)]
pub(super) struct PyroscopeSettings {
    /// The ingest endpoint: the base URL and `/ingest`.
    pub ingest_url: String,
    /// Sent with every request: authorization and tenant.
    pub headers: Vec<(&'static str, String)>,
    /// Labels after each profile's own.
    pub labels: Vec<(String, String)>,
}

impl ExportArgs {
    /// Checks the flags: at least one destination, a usable URL and
    /// credentials, and a directory that exists or could be made.
    pub(super) fn settings(&self) -> anyhow::Result<Settings> {
        if self.pyroscope.is_none() && self.otlp.is_none() && self.output_dir.is_none() {
            bail!("nowhere to send profiles: give --pyroscope URL, --otlp URL, --output-dir DIR, or several");
        }
        let pyroscope = self
            .pyroscope
            .as_deref()
            .map(|url| self.pyroscope_settings(url))
            .transpose()?;
        let otlp = self
            .otlp
            .as_deref()
            .map(|url| {
                anyhow::Ok(OtlpSettings {
                    url: format!("{}/v1development/profiles", base_url("--otlp", url)?),
                    labels: self.labels.clone(),
                })
            })
            .transpose()?;
        if let Some(dir) = &self.output_dir {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("--output-dir {}: cannot create it", dir.display()))?;
        }
        Ok(Settings {
            pyroscope,
            otlp,
            output_dir: self.output_dir.clone(),
            keep: self.keep.get(),
            retention: self.retention,
            queue: self.queue.get(),
        })
    }

    fn pyroscope_settings(&self, url: &str) -> anyhow::Result<PyroscopeSettings> {
        let base = base_url("--pyroscope", url)?;
        let mut headers = Vec::new();
        if let Some(credentials) = &self.basic_auth {
            if !credentials.contains(':') {
                bail!("--basic-auth: expected USER:PASSWORD");
            }
            let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
            headers.push(("Authorization", format!("Basic {encoded}")));
        }
        if let Some(token) = &self.bearer_token {
            headers.push((
                "Authorization",
                format!("Bearer {}", header_value("--bearer-token", token)?),
            ));
        }
        if let Some(tenant) = &self.tenant {
            headers.push((
                "X-Scope-OrgID",
                header_value("--tenant", tenant)?.to_owned(),
            ));
        }
        Ok(PyroscopeSettings {
            ingest_url: format!("{base}/ingest"),
            headers,
            labels: self.labels.clone(),
        })
    }
}

/// A server's base URL given with `flag`, without its trailing `/`: an
/// http:// or https:// URL with a host and no query.
fn base_url<'a>(flag: &str, url: &'a str) -> anyhow::Result<&'a str> {
    let uri: ureq::http::Uri = url
        .parse()
        .with_context(|| format!("{flag} {url}: not a URL"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        bail!("{flag} {url}: not an http:// or https:// URL with a host");
    }
    if uri.query().is_some() {
        bail!("{flag} {url}: give the server's base URL, without a query");
    }
    Ok(url.trim_end_matches('/'))
}

/// `value`, if it can be sent in an HTTP header as is.
fn header_value<'a>(flag: &str, value: &'a str) -> anyhow::Result<&'a str> {
    if value.is_empty() || !value.bytes().all(|byte| byte.is_ascii_graphic()) {
        bail!("{flag}: empty, or has spaces or characters an HTTP header cannot carry");
    }
    Ok(value)
}

/// Parses `--label KEY=VALUE`, refusing what Pyroscope would not take
/// rather than rewriting the user's own words.
fn parse_label(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| "expected KEY=VALUE".to_owned())?;
    if !super::pyroscope::is_label_name(key) {
        return Err(format!(
            "label name {key:?}: use letters, digits and _, not starting with a digit or __"
        ));
    }
    if value.is_empty() || super::pyroscope::sanitize_label_value(value) != value {
        return Err(format!(
            "label value {value:?}: must be non-empty, without , = {{ }} \" or control characters"
        ));
    }
    Ok((key.to_owned(), value.to_owned()))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        export: ExportArgs,
    }

    fn parse(args: &[&str]) -> Result<ExportArgs, clap::Error> {
        Command::try_parse_from(std::iter::once("stoke").chain(args.iter().copied()))
            .map(|command| command.export)
    }

    fn error(args: &[&str]) -> String {
        format!("{:#}", parse(args).unwrap().settings().unwrap_err())
    }

    #[test]
    fn a_destination_is_required() {
        assert!(error(&[]).starts_with("nowhere to send profiles"));
        assert!(error(&["--pyroscope", "ftp://host"]).contains("not an http:// or https://"));
        assert!(error(&["--pyroscope", "http://host/?a=b"]).contains("without a query"));
    }

    #[test]
    fn credentials_become_headers() {
        let args = parse(&[
            "--pyroscope",
            "https://host:4040/prefix/",
            "--basic-auth",
            "user:pass word",
            "--tenant",
            "team-a",
        ])
        .unwrap();
        let settings = args.settings().unwrap().pyroscope.unwrap();
        assert_eq!(settings.ingest_url, "https://host:4040/prefix/ingest");
        assert_eq!(
            settings.headers,
            [
                ("Authorization", "Basic dXNlcjpwYXNzIHdvcmQ=".to_owned()),
                ("X-Scope-OrgID", "team-a".to_owned())
            ]
        );
        assert!(
            error(&["--pyroscope", "http://h", "--basic-auth", "user"]).contains("USER:PASSWORD")
        );
        assert!(error(&["--pyroscope", "http://h", "--tenant", "a b"]).starts_with("--tenant"));
        assert!(parse(&["--basic-auth", "u:p", "--bearer-token", "t"]).is_err());
    }

    #[test]
    fn labels_are_checked_as_given() {
        let args = parse(&["--output-dir", "/tmp", "--label", "cluster=prod-1"]).unwrap();
        assert_eq!(args.labels, [("cluster".to_owned(), "prod-1".to_owned())]);
        for bad in [
            "cluster",
            "1x=a",
            "a-b=c",
            "__name__=x",
            "a=",
            "a=b,c",
            "a=b}",
        ] {
            assert!(
                parse(&["--output-dir", "/tmp", "--label", bad]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn limits_are_positive() {
        assert!(parse(&["--output-dir", "/tmp", "--keep", "0"]).is_err());
        assert!(parse(&["--output-dir", "/tmp", "--queue", "0"]).is_err());
        let args = parse(&["--output-dir", "/tmp"]).unwrap();
        assert_eq!((args.keep.get(), args.queue.get()), (60, 10));
    }

    #[test]
    fn an_output_dir_that_cannot_be_made_fails_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let blocked = file.join("profiles");
        let message = error(&["--output-dir", blocked.to_str().unwrap()]);
        assert!(message.starts_with("--output-dir"), "{message}");
        let made = dir.path().join("a/b");
        parse(&["--output-dir", made.to_str().unwrap()])
            .unwrap()
            .settings()
            .unwrap();
        assert!(made.is_dir());
    }
}
