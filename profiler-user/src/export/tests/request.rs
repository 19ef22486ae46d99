//! What one push carries: the ingest query, the body as given, the
//! credentials and tenant.

use std::time::Duration;

use super::{args, receiver::Receiver, soon, start, Batch, ServiceProfile};

fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_push_carries_the_ingest_query_and_the_body_as_given() {
    let receiver = Receiver::start();
    let mut args = args(Some(&format!("{}/", receiver.url)), None, 4);
    args.labels = pairs(&[("cluster", "prod-eu")]);
    args.bearer_token = Some("t0ken".to_owned());
    args.tenant = Some("team-a".to_owned());
    let exporter = start(&args);
    let from = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    // Gzip's magic and bytes that are not UTF-8: the body must arrive as is.
    let web: Vec<u8> = [0x1f, 0x8b, 0x08, 0x00, 0xff, 0xfe, 0x00, 0x80].to_vec();
    exporter.submit(Batch {
        from,
        until: from + Duration::from_secs(15),
        sample_rate_hz: 99,
        profiles: vec![
            ServiceProfile {
                event: crate::event::Event::Cpu,
                service: "web api".to_owned(),
                labels: pairs(&[("container_name", "web,1"), ("pod", "web-5d9f")]),
                pprof: web.clone(),
            },
            ServiceProfile {
                event: crate::event::Event::Cpu,
                service: "db".to_owned(),
                labels: Vec::new(),
                pprof: b"db".to_vec(),
            },
        ],
    });
    let stats = exporter.finish(soon()).pyroscope.unwrap();
    assert_eq!(
        (stats.delivered, stats.failed_attempts, stats.dropped),
        (2, 0, 0)
    );
    let requests = receiver.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first.path, "/ingest");
    assert_eq!(
        first.query,
        pairs(&[
            (
                "name",
                "web_api{container_name=web_1,pod=web-5d9f,cluster=prod-eu}"
            ),
            ("from", "1700000000"),
            ("until", "1700000015"),
            ("format", "pprof"),
            ("sampleRate", "99"),
            ("spyName", "stoke"),
        ])
    );
    // The name's braces, commas and equals signs are percent-encoded.
    assert!(
        first
            .raw_query
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"%&=-._~".contains(&byte)),
        "{}",
        first.raw_query
    );
    assert_eq!(first.body, web);
    assert_eq!(first.header("authorization"), Some("Bearer t0ken"));
    assert_eq!(first.header("x-scope-orgid"), Some("team-a"));
    assert_eq!(
        first.header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(
        requests[1].query[0],
        ("name".to_owned(), "db{cluster=prod-eu}".to_owned())
    );
    assert_eq!(requests[1].body, b"db");
}

#[test]
fn an_offcpu_profile_goes_as_a_form_with_its_units() {
    let receiver = Receiver::start();
    let exporter = start(&args(Some(&receiver.url), None, 4));
    let mut batch = super::batch(1);
    batch.profiles[0].event = crate::event::Event::Offcpu;
    let pprof = batch.profiles[0].pprof.clone();
    exporter.submit(batch);
    exporter.finish(soon());
    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    let content_type = requests[0].header("content-type").unwrap();
    let boundary = content_type
        .strip_prefix("multipart/form-data; boundary=")
        .unwrap();
    let body = String::from_utf8_lossy(&requests[0].body);
    let parts: Vec<&str> = body.split(&format!("--{boundary}")).collect();
    assert_eq!(parts.len(), 4, "{body}");
    assert!(parts[1].contains("name=\"profile\""));
    assert!(parts[1].ends_with(&format!("\r\n\r\n{}\r\n", String::from_utf8_lossy(&pprof))));
    assert!(parts[2].contains("name=\"sample_type_config\""));
    assert!(parts[2].contains(r#"{"offcpu":{"units":"lock_nanoseconds","display-name":"offcpu""#));
    assert_eq!(parts[3], "--\r\n");
}

#[test]
fn basic_auth_is_sent_and_nothing_else() {
    let receiver = Receiver::start();
    let mut args = args(Some(&receiver.url), None, 4);
    args.basic_auth = Some("12345:glc_secret".to_owned());
    let exporter = start(&args);
    exporter.submit(super::batch(1));
    exporter.finish(soon());
    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    // base64("12345:glc_secret")
    assert_eq!(
        requests[0].header("authorization"),
        Some("Basic MTIzNDU6Z2xjX3NlY3JldA==")
    );
    assert_eq!(requests[0].header("x-scope-orgid"), None);
}
