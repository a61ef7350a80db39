//! The host's access log (docs/reference/host.md#operation): one line per request with method,
//! path, status, latency and bit count, and never a token, an embedding or a query string. Runs in
//! a process of its own because it installs the global tracing subscriber.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod host_support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use host_support::{Server, client, post, post_json, read_json, send};
use serde_json::Value;

/// Collects everything logged, for inspection.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn request_logs_never_contain_tokens_or_embeddings() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        // Debug for every crate, the host's dependencies included, to be strict.
        .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let queries = read_json("polymath/queries.json");
    let case = queries["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "private_bit_default_token")
        .unwrap();
    let args = case["args"].clone();
    let token = args["access_token"].as_str().unwrap().to_owned();
    let embedding = args["query_embedding"].as_str().unwrap().to_owned();

    let server = Server::fixture();
    let ok = post_json(&server, &args);
    assert_eq!(ok.status, 200);
    let mut bad = args.clone();
    bad["count"] = Value::from(0);
    assert_eq!(post_json(&server, &bad).status, 400);
    let form = send(
        client()
            .post(server.url(&format!("/?access_token={token}")))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(host_support::form_body(args.as_object().unwrap())),
    );
    assert_eq!(form.status, 200);
    assert_eq!(post(&server, Some("text/plain"), token.clone()).status, 400);
    assert_eq!(send(client().get(server.url("/healthz"))).status, 200);
    // A 60 KB path is logged cut short, not as a 60 KB line.
    let long_path = format!("/{}", "p".repeat(60_000));
    assert_eq!(send(client().get(server.url(&long_path))).status, 404);
    server.stop().unwrap();

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let access: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("mnemon_host::access"))
        .collect();
    assert_eq!(access.len(), 6, "{log}");
    assert!(access[0].contains("method=POST") && access[0].contains("path=/"));
    assert!(access[0].contains("status=200") && access[0].contains("bits=3"));
    assert!(access[0].contains("latency_us="));
    assert!(access[1].contains("status=400") && !access[1].contains("bits="));
    assert!(access[4].contains("path=/healthz") && access[4].contains("status=200"));
    assert!(access[5].contains("status=404") && access[5].contains("path_len=60001"));
    assert!(
        access[5].len() < 1000,
        "a {} byte log line",
        access[5].len()
    );
    assert!(!log.contains(&token), "a token reached the log:\n{log}");
    assert!(
        !log.contains(&embedding[..40]),
        "an embedding reached the log"
    );
    assert!(
        !log.contains("access_token"),
        "a query string reached the log"
    );
}
