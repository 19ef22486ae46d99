//! A local HTTP receiver standing in for a profile backend (Pyroscope's
//! `/ingest`, an OpenTelemetry collector), which cannot be installed here:
//! it records every request and answers with the status set at the time.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU16, Ordering},
        Arc, Mutex,
    },
    thread,
};

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Request {
    pub path: String,
    pub query: HashMap<String, String>,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    /// The status it was answered with.
    pub status: u16,
}

impl Request {
    /// The query parameter `key` as a UNIX time.
    pub fn seconds(&self, key: &str) -> u64 {
        self.query[key].parse().expect("a UNIX time")
    }
}

/// A backend as far as stoke sees it.
pub struct Receiver {
    port: u16,
    server: Arc<tiny_http::Server>,
    requests: Arc<Mutex<Vec<Request>>>,
    /// The status answered from now on.
    pub status: Arc<AtomicU16>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Receiver {
    /// Listens on 127.0.0.1:`port` (0: any free port), answering `status`.
    pub fn start(port: u16, status: u16) -> Self {
        let server =
            Arc::new(tiny_http::Server::http(("127.0.0.1", port)).expect("listening on loopback"));
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let status = Arc::new(AtomicU16::new(status));
        let thread = {
            let (server, requests, status) = (server.clone(), requests.clone(), status.clone());
            thread::spawn(move || {
                for mut request in server.incoming_requests() {
                    let mut body = Vec::new();
                    request.as_reader().read_to_end(&mut body).expect("a body");
                    let (path, query) =
                        request.url().split_once('?').unwrap_or((request.url(), ""));
                    let status = status.load(Ordering::SeqCst);
                    requests.lock().unwrap().push(Request {
                        path: path.to_owned(),
                        query: form_urlencoded::parse(query.as_bytes())
                            .into_owned()
                            .collect(),
                        headers: request
                            .headers()
                            .iter()
                            .map(|h| (h.field.to_string().to_lowercase(), h.value.to_string()))
                            .collect(),
                        body,
                        status,
                    });
                    let _ = request.respond(tiny_http::Response::empty(status));
                }
            })
        };
        Receiver {
            port,
            server,
            requests,
            status,
            thread: Some(thread),
        }
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// The requests answered 200.
    pub fn accepted(&self) -> Vec<Request> {
        let requests = self.requests.lock().unwrap();
        requests
            .iter()
            .filter(|r| r.status == 200)
            .cloned()
            .collect()
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
