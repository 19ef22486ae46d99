//! A stand-in for Pyroscope on loopback: records every request and answers
//! with the status the test sets.

use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicU16, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    /// The query as sent, still percent-encoded.
    pub raw_query: String,
    /// The query's pairs, decoded, in order.
    pub query: Vec<(String, String)>,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// What the receiver answered.
    pub status: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// An HTTP server on 127.0.0.1.
pub struct Receiver {
    pub url: String,
    server: Arc<tiny_http::Server>,
    status: Arc<AtomicU16>,
    script: Arc<Mutex<VecDeque<u16>>>,
    requests: Arc<Mutex<Vec<Received>>>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    /// Listens on a free port.
    pub fn start() -> Self {
        Self::start_on(0)
    }

    /// Listens on `port`.
    pub fn start_on(port: u16) -> Self {
        let server = Arc::new(tiny_http::Server::http(("127.0.0.1", port)).unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let status = Arc::new(AtomicU16::new(200));
        let script = Arc::new(Mutex::new(VecDeque::new()));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let thread = std::thread::spawn({
            let (server, status, script, requests) = (
                server.clone(),
                status.clone(),
                script.clone(),
                requests.clone(),
            );
            move || {
                for mut request in server.incoming_requests() {
                    let mut body = Vec::new();
                    request.as_reader().read_to_end(&mut body).unwrap();
                    let (path, raw_query) =
                        request.url().split_once('?').unwrap_or((request.url(), ""));
                    let scripted = script.lock().unwrap().pop_front();
                    let status = scripted.unwrap_or_else(|| status.load(Ordering::SeqCst));
                    let received = Received {
                        path: path.to_owned(),
                        raw_query: raw_query.to_owned(),
                        query: form_urlencoded::parse(raw_query.as_bytes())
                            .into_owned()
                            .collect(),
                        headers: request
                            .headers()
                            .iter()
                            .map(|header| {
                                (
                                    header.field.as_str().as_str().to_ascii_lowercase(),
                                    header.value.to_string(),
                                )
                            })
                            .collect(),
                        body,
                        status,
                    };
                    requests.lock().unwrap().push(received);
                    let _ = request.respond(
                        tiny_http::Response::from_string("answer from the test")
                            .with_status_code(status),
                    );
                }
            }
        });
        Self {
            url: format!("http://127.0.0.1:{port}"),
            server,
            status,
            script,
            requests,
            thread: Some(thread),
        }
    }

    /// Answers `status` from now on.
    pub fn answer(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    /// Answers the next requests with `statuses`, one each, before the
    /// status set by [`Receiver::answer`].
    pub fn answer_next(&self, statuses: &[u16]) {
        self.script.lock().unwrap().extend(statuses);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Received> {
        self.requests.lock().unwrap().clone()
    }

    /// The bodies of the requests answered 200, in order.
    pub fn accepted_bodies(&self) -> Vec<Vec<u8>> {
        self.requests()
            .into_iter()
            .filter(|request| request.status == 200)
            .map(|request| request.body)
            .collect()
    }

    /// Waits until `count` requests have arrived (at most 10 s).
    pub fn wait_for(&self, count: usize) {
        let start = Instant::now();
        while self.requests.lock().unwrap().len() < count {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{count} requests never came"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
