//! The HTTP side of `--metrics-addr`: one thread answers one request at a
//! time, `GET /metrics` with the exposition, anything else with an error
//! status, and closes each connection after its answer. A request is read
//! into a fixed buffer within a deadline, so that a client that sends too
//! much, or too slowly, costs a bounded moment and no memory.

use std::{
    io::{self, Read, Write},
    net::{TcpListener, TcpStream},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use super::Metrics;

/// The most bytes a request (its line and headers) may take.
const MAX_REQUEST: usize = 8192;

/// The most headers a request may have.
const MAX_HEADERS: usize = 32;

/// How long a client gets to send its request, and to take the answer.
const DEADLINE: Duration = Duration::from_secs(5);

/// After an accept fails (out of file descriptors), how long to wait
/// before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Answers requests on `listener` from a thread of its own, for as long as
/// stoke runs.
pub(super) fn start(listener: TcpListener, metrics: Metrics) -> Result<()> {
    std::thread::Builder::new()
        .name("stoke-metrics".into())
        .spawn(move || loop {
            match listener.accept() {
                // A client that goes away is its own loss.
                Ok((stream, _)) => drop(answer(stream, &metrics)),
                Err(_) => std::thread::sleep(ACCEPT_RETRY),
            }
        })
        .context("cannot start the metrics thread")?;
    Ok(())
}

/// Reads one request from `stream` and answers it.
fn answer(mut stream: TcpStream, metrics: &Metrics) -> io::Result<()> {
    let deadline = Instant::now() + DEADLINE;
    stream.set_write_timeout(Some(DEADLINE))?;
    let mut request = [0; MAX_REQUEST];
    let mut length = 0;
    loop {
        if length == request.len() {
            return respond(&mut stream, "431 Request Header Fields Too Large", "");
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return respond(&mut stream, "408 Request Timeout", "");
        }
        stream.set_read_timeout(Some(left))?;
        let read = stream.read(&mut request[length..])?;
        if read == 0 {
            return Ok(());
        }
        length += read;
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut headers);
        match parsed.parse(&request[..length]) {
            Ok(httparse::Status::Partial) => continue,
            Ok(httparse::Status::Complete(_)) => {
                let path = parsed.path.unwrap_or("");
                let path = path.split_once('?').map_or(path, |(path, _)| path);
                return match (parsed.method, path) {
                    (Some("GET"), "/metrics") => respond(&mut stream, "200 OK", &metrics.render()),
                    (Some("GET"), _) => respond(&mut stream, "404 Not Found", "try /metrics\n"),
                    _ => respond(&mut stream, "405 Method Not Allowed", ""),
                };
            }
            Err(_) => return respond(&mut stream, "400 Bad Request", ""),
        }
    }
}

fn respond(stream: &mut TcpStream, status: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use std::net::Shutdown;

    use super::*;

    fn ask(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(request).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    }

    #[test]
    fn answers_metrics_and_refuses_the_rest() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Metrics {
            state: Default::default(),
        };
        start(listener, metrics.clone()).unwrap();
        let summary = crate::model::RecordingSummary {
            samples: 41,
            ..Default::default()
        };
        metrics.add_interval(&summary);
        metrics.add_interval(&summary);
        let answer = ask(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains("\nstoke_samples_total 82\n"), "{answer}");
        assert!(answer.contains("\nstoke_intervals_total 2\n"), "{answer}");
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert!(ask(addr, b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(ask(addr, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(ask(addr, b"\x01\x02 nonsense\r\n\r\n").starts_with("HTTP/1.1 400"));
        let endless = [b'a'; MAX_REQUEST + 10];
        let mut stream = TcpStream::connect(addr).unwrap();
        let _ = stream.write_all(b"GET /");
        let _ = stream.write_all(&endless);
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
        // A client that sends half a request and goes away leaves the
        // server answering the next.
        let half = TcpStream::connect(addr).unwrap();
        (&half).write_all(b"GET /met").unwrap();
        half.shutdown(Shutdown::Both).unwrap();
        assert!(ask(addr, b"GET /metrics HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 200"));
    }

    #[test]
    fn an_address_in_use_or_malformed_is_one_error() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let error = format!("{:#}", Metrics::serve(&addr).err().unwrap());
        assert!(
            error.starts_with(&format!("--metrics-addr {addr}: cannot listen there: ")),
            "{error}"
        );
        let error = format!("{:#}", Metrics::serve("localhost").err().unwrap());
        assert!(error.contains("not an address and port"), "{error}");
    }
}
