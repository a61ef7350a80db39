//! Shared helpers of the host tests: a real `mnemon-host` server on `127.0.0.1:0` in a thread of
//! its own, a blocking HTTP client, and the fixture comparisons of
//! docs/reference/library.md#conformance.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;

use mnemon_host::{ConfigSource, Host, HostError, HostHandle, HostOptions, LibrarySource, Sources};
use mnemon_tests::fixture;
use serde_json::{Map, Value};

/// A running host. Dropping it stops the host and waits for its thread.
pub struct Server {
    pub addr: SocketAddr,
    pub handle: HostHandle,
    pub runtime: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    stop_by: StopBy,
    thread: Option<JoinHandle<Result<(), HostError>>>,
}

/// How the server thread is told to stop.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum StopBy {
    /// [`Server::stop`] or drop.
    Channel,
    /// SIGINT or SIGTERM to this process (`Host::run_until_signal`), which also reloads on SIGHUP.
    Signals,
}

impl Server {
    /// Starts a host on 127.0.0.1:0 with two worker threads, stopped through a channel.
    pub fn start(sources: Sources, options: HostOptions) -> Server {
        Self::start_with(sources, options, 2, StopBy::Channel)
    }

    /// Starts a host with `workers` async worker threads.
    pub fn start_with(
        sources: Sources,
        options: HostOptions,
        workers: usize,
        stop_by: StopBy,
    ) -> Server {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                if stop_by == StopBy::Signals {
                    // Installing a listener replaces the default action (terminate) for good,
                    // so a signal sent before the host listens cannot kill the test process.
                    use tokio::signal::unix::{SignalKind, signal};
                    for kind in [
                        SignalKind::hangup(),
                        SignalKind::terminate(),
                        SignalKind::interrupt(),
                    ] {
                        drop(signal(kind).unwrap());
                    }
                }
                let host = match Host::bind(([127, 0, 0, 1], 0).into(), sources, options).await {
                    Ok(host) => host,
                    Err(e) => {
                        let message = e.to_string();
                        ready_tx.send(Err(message)).unwrap();
                        return Err(e);
                    }
                };
                ready_tx
                    .send(Ok((
                        host.local_addr().unwrap(),
                        host.handle(),
                        tokio::runtime::Handle::current(),
                    )))
                    .unwrap();
                match stop_by {
                    StopBy::Channel => {
                        host.run(async {
                            let _ = stop_rx.await;
                        })
                        .await
                    }
                    StopBy::Signals => host.run_until_signal().await,
                }
            })
        });
        let (addr, handle, runtime) = ready_rx
            .recv()
            .unwrap()
            .unwrap_or_else(|e| panic!("the host did not start: {e}"));
        Server {
            addr,
            handle,
            runtime,
            stop: Some(stop_tx),
            stop_by,
            thread: Some(thread),
        }
    }

    /// The fixture library with the fixture host config (docs/reference/host.md#conformance).
    pub fn fixture() -> Server {
        Self::start(fixture_sources(), HostOptions::default())
    }

    /// `http://127.0.0.1:port<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops the host (graceful) and returns how its `run` ended.
    pub fn stop(mut self) -> Result<(), HostError> {
        self.stop_inner().expect("already stopped")
    }

    /// Waits for the server thread, which must already be stopping (signals).
    pub fn join(mut self) -> Result<(), HostError> {
        self.stop.take();
        self.thread.take().unwrap().join().unwrap()
    }

    /// Whether the server thread has ended.
    pub fn finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Reloads through the host handle.
    pub fn reload(&self) -> Result<mnemon_host::Reloaded, HostError> {
        self.runtime.block_on(self.handle.reload())
    }

    fn stop_inner(&mut self) -> Option<Result<(), HostError>> {
        let stop = self.stop.take()?;
        let _ = stop.send(());
        Some(self.thread.take()?.join().unwrap())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A signal-stopped server is joined by its test; never hang here waiting for a signal.
        if self.stop_by == StopBy::Channel {
            let _ = self.stop_inner();
        }
    }
}

/// The fixture library and host config.
pub fn fixture_sources() -> Sources {
    Sources {
        library: LibrarySource::Path(fixture("polymath/library.json")),
        config: ConfigSource::File(fixture("polymath/host.SECRET.json")),
    }
}

/// A library file on disk, no config.
pub fn file_sources(path: &Path) -> Sources {
    Sources {
        library: LibrarySource::Path(path.to_owned()),
        config: ConfigSource::Defaults,
    }
}

/// A blocking client that never uses a proxy and never decompresses by itself.
pub fn client() -> reqwest::blocking::Client {
    install_crypto_provider();
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// `cargo test --workspace` unifies reqwest's features across the workspace, and
/// `mnemon-embed` turns on `rustls-no-provider`: a client built before any rustls provider is
/// installed then panics. The tests only speak plain HTTP to 127.0.0.1, but reqwest builds its
/// TLS configuration up front, so install ring (as `mnemon-embed` does) when nothing is yet.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another test thread is fine: any provider will do.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A response, fully read.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    fn from(response: reqwest::blocking::Response) -> Reply {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes().unwrap().to_vec();
        Reply {
            status,
            headers,
            body,
        }
    }

    /// The body parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// A header's value ("" when absent).
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }

    /// Every value of a header.
    pub fn header_all(&self, name: &str) -> Vec<String> {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }

    /// The `error` message of a JSON error body.
    pub fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error in {:?}", self.json()))
            .to_owned()
    }
}

/// Sends a request with the given content type (if any) and body.
pub fn post(server: &Server, content_type: Option<&str>, body: impl Into<Vec<u8>>) -> Reply {
    let mut request = client().post(server.url("/")).body(body.into());
    if let Some(ct) = content_type {
        request = request.header("Content-Type", ct);
    }
    Reply::from(request.send().unwrap())
}

/// Sends any request.
pub fn send(request: reqwest::blocking::RequestBuilder) -> Reply {
    Reply::from(request.send().unwrap())
}

/// Encodes JSON arguments as a form body: strings as they are, other values as JSON text.
pub fn form_body(args: &Map<String, Value>) -> String {
    let mut form = form_urlencoded::Serializer::new(String::new());
    for (key, value) in args {
        match value {
            Value::String(s) => form.append_pair(key, s),
            other => form.append_pair(key, &other.to_string()),
        };
    }
    form.finish()
}

/// POSTs arguments as `application/x-www-form-urlencoded`.
pub fn post_form(server: &Server, args: &Map<String, Value>) -> Reply {
    post(
        server,
        Some("application/x-www-form-urlencoded"),
        form_body(args),
    )
}

/// POSTs arguments as `application/json`.
pub fn post_json(server: &Server, args: &Value) -> Reply {
    post(server, Some("application/json"), args.to_string())
}

/// Reads a fixture file as JSON.
pub fn read_json(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(name)).unwrap()).unwrap()
}

/// Texts of the two fixture bits with byte-identical embeddings, in file order (37, then 41).
pub fn tie_texts() -> Vec<String> {
    read_json("polymath/queries.json")["tie"]["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect()
}

fn text_of(bit: &Value) -> String {
    bit.get("text")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

fn assert_same_bit(case: &str, pos: usize, got: &Value, want: &Value) {
    let g = got.as_object().unwrap();
    let w = want.as_object().unwrap();
    let gk: Vec<&String> = g.keys().collect();
    let wk: Vec<&String> = w.keys().collect();
    assert_eq!(gk, wk, "{case}: keys of bit {pos}");
    for (k, wv) in w {
        let gv = &g[k];
        if k == "similarity" {
            let d = (gv.as_f64().unwrap() - wv.as_f64().unwrap()).abs();
            assert!(d <= 1e-5, "{case}: similarity of bit {pos} differs by {d}");
        } else {
            // Serialised, so key order inside `info` counts.
            assert_eq!(gv.to_string(), wv.to_string(), "{case}: {k} of bit {pos}");
        }
    }
}

/// Compares a result with the reference's (docs/reference/library.md#query-conformance): top-level
/// keys in order and values, bits per position with similarity within 1e-5, tied bits as a set with
/// 37 before 41.
pub fn assert_result(case: &str, got: &Value, want: &Value, ties: Option<&[String]>) {
    let got = got.as_object().unwrap();
    let want = want.as_object().unwrap();
    let gk: Vec<&String> = got.keys().collect();
    let wk: Vec<&String> = want.keys().collect();
    assert_eq!(gk, wk, "{case}: top-level keys");
    for (k, wv) in want {
        if k != "bits" {
            assert_eq!(&got[k], wv, "{case}: top-level {k}");
        }
    }
    let gb = got["bits"].as_array().unwrap();
    let wb = want["bits"].as_array().unwrap();
    assert_eq!(gb.len(), wb.len(), "{case}: number of bits");
    for bit in gb {
        assert!(bit.get("access_tag").is_none(), "{case}: access_tag leaked");
    }
    let is_tie = |b: &Value| ties.is_some_and(|t| t.contains(&text_of(b)));
    let tie_positions: Vec<usize> = (0..wb.len()).filter(|&i| is_tie(&wb[i])).collect();
    for i in (0..wb.len()).filter(|i| !tie_positions.contains(i)) {
        assert_same_bit(case, i, &gb[i], &wb[i]);
    }
    if let Some(ties) = ties.filter(|_| !tie_positions.is_empty()) {
        // Both tied bits returned: file order (37 first); only one: the earlier one (37).
        assert_eq!(
            text_of(&gb[tie_positions[0]]),
            ties[0],
            "{case}: tied bits keep file order"
        );
        for &i in &tie_positions {
            let w = wb
                .iter()
                .find(|b| text_of(b) == text_of(&gb[i]))
                .unwrap_or_else(|| panic!("{case}: tied bit {i} not in the reference result"));
            assert_same_bit(case, i, &gb[i], w);
        }
    }
}

/// The messages an error case may give (docs/reference/library.md#query-conformance).
pub fn expected_errors(case: &Value) -> Vec<String> {
    match case["name"].as_str().unwrap() {
        "err_short_embedding" => {
            vec!["query_embedding has 8 dimensions but the library's embeddings have 1536".into()]
        }
        "err_bad_base64_padding" => {
            vec!["query_embedding is not valid base64: Incorrect padding".into()]
        }
        _ => {
            let mut v = vec![case["error"].as_str().unwrap().to_owned()];
            if let Some(alts) = case.get("error_alternatives").and_then(Value::as_array) {
                v.extend(alts.iter().map(|a| a.as_str().unwrap().to_owned()));
            }
            v
        }
    }
}

/// Recursive JSON equality ignoring object key order, with numbers equal within 1e-5.
pub fn assert_json_close(path: &str, got: &Value, want: &Value) {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            let mut gk: Vec<&String> = g.keys().collect();
            let mut wk: Vec<&String> = w.keys().collect();
            gk.sort();
            wk.sort();
            assert_eq!(gk, wk, "{path}: keys");
            for (k, wv) in w {
                assert_json_close(&format!("{path}.{k}"), &g[k], wv);
            }
        }
        (Value::Array(g), Value::Array(w)) => {
            assert_eq!(g.len(), w.len(), "{path}: length");
            for (i, (gv, wv)) in g.iter().zip(w).enumerate() {
                assert_json_close(&format!("{path}[{i}]"), gv, wv);
            }
        }
        (Value::Number(g), Value::Number(w)) => {
            let d = (g.as_f64().unwrap() - w.as_f64().unwrap()).abs();
            assert!(d <= 1e-5, "{path}: {g} vs {w}");
        }
        _ => assert_eq!(got, want, "{path}"),
    }
}
