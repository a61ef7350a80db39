//! The OpenAI-compatible client against a real HTTP server on 127.0.0.1 that implements
//! `POST /embeddings` (a small std::net server, one connection per request).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mnemon_embed::{Embedder, OpenAiEmbedder, OpenAiEmbedderBuilder};
use serde_json::{Value, json};

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    authorization: Option<String>,
    body: Value,
}

/// A canned reply: status, extra header lines, body.
type Reply = (u16, Vec<String>, String);

/// Starts a server answering request number `n` (from 0) with `handler(n, body)`; returns the
/// base URL and the log of requests.
fn serve(
    handler: impl Fn(usize, &Value) -> Reply + Send + 'static,
) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&log);
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_owned();
            let path = parts.next().unwrap_or_default().to_owned();
            let mut length = 0;
            let mut authorization = None;
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                let header = header.trim_end();
                if header.is_empty() {
                    break;
                }
                let (name, value) = header.split_once(':').unwrap();
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap(),
                    "authorization" => authorization = Some(value.trim().to_owned()),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let (status, headers, reply) = handler(n, &body);
            seen.lock().unwrap().push(Seen {
                method,
                path,
                authorization,
                body,
            });
            let mut out = stream;
            let mut head = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
                reply.len()
            );
            for h in headers {
                head.push_str(&h);
                head.push_str("\r\n");
            }
            head.push_str("\r\n");
            let _ = out.write_all(head.as_bytes());
            let _ = out.write_all(reply.as_bytes());
        }
    });
    (base, log)
}

/// A vector that identifies its text: [length, first byte, 1].
fn vector_of(text: &str) -> Vec<f32> {
    vec![
        text.len() as f32,
        f32::from(text.bytes().next().unwrap_or(0)),
        1.0,
    ]
}

/// An OpenAI-style success body for `body.input`, listed in reverse to prove reordering.
fn embeddings(body: &Value) -> String {
    let inputs = body["input"].as_array().unwrap();
    let mut data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"object": "embedding", "index": i, "embedding": vector_of(t.as_str().unwrap())})
        })
        .collect();
    data.reverse();
    json!({"object": "list", "data": data, "model": body["model"],
           "usage": {"prompt_tokens": 1, "total_tokens": 1}})
    .to_string()
}

fn client(base: &str) -> OpenAiEmbedderBuilder {
    OpenAiEmbedder::builder()
        .base_url(base)
        .model("test-embed")
        .dimension(3)
        .backoff(Duration::from_millis(1), Duration::from_millis(20))
}

#[test]
fn embeds_in_order_across_batches() {
    let (base, log) = serve(|_, body| (200, vec![], embeddings(body)));
    let embedder = client(&base)
        .api_key("sk-test")
        .batch_size(2)
        .build()
        .unwrap();
    let texts = ["alpha", "beta", "gamma", "delta", "epsilon"];
    let vectors = embedder.embed(&texts).unwrap();
    let expected: Vec<Vec<f32>> = texts.iter().map(|t| vector_of(t)).collect();
    assert_eq!(vectors, expected);
    assert_eq!(embedder.model(), "openai.com:test-embed");

    let log = log.lock().unwrap();
    assert_eq!(log.len(), 3, "5 texts in batches of 2");
    let batches: Vec<&Value> = log.iter().map(|s| &s.body["input"]).collect();
    assert_eq!(
        batches,
        [
            &json!(["alpha", "beta"]),
            &json!(["gamma", "delta"]),
            &json!(["epsilon"])
        ]
    );
    for seen in log.iter() {
        assert_eq!(seen.method, "POST");
        assert_eq!(seen.path, "/v1/embeddings");
        assert_eq!(seen.authorization.as_deref(), Some("Bearer sk-test"));
        assert_eq!(seen.body["model"], "test-embed");
        assert_eq!(seen.body["encoding_format"], "float");
        assert!(seen.body.get("dimensions").is_none());
    }
}

#[test]
fn no_key_sends_no_authorization_and_empty_input_sends_nothing() {
    let (base, log) = serve(|_, body| (200, vec![], embeddings(body)));
    let embedder = client(&base).build().unwrap();
    assert!(embedder.embed(&[]).unwrap().is_empty());
    assert!(log.lock().unwrap().is_empty());
    embedder.embed(&["x"]).unwrap();
    assert_eq!(log.lock().unwrap()[0].authorization, None);
}

/// OpenAI answers 400 to an empty string in `input`: empty texts are not sent, and get the zero
/// vector (a text without words, as the hashing embedder gives it). A batch with one failed
/// whole before.
#[test]
fn empty_texts_get_the_zero_vector_without_a_request() {
    let (base, log) = serve(|_, body| {
        let inputs = body["input"].as_array().unwrap();
        if inputs.iter().any(|t| t.as_str() == Some("")) {
            let refusal = json!({"error": {"message": "'$.input' is invalid", "type": "invalid_request_error"}});
            return (400, vec![], refusal.to_string());
        }
        (200, vec![], embeddings(body))
    });
    let embedder = client(&base).batch_size(2).build().unwrap();
    let vectors = embedder.embed(&["", "alpha", "", "beta", "gamma"]).unwrap();
    let zero = vec![0.0; 3];
    assert_eq!(
        vectors,
        [
            zero.clone(),
            vector_of("alpha"),
            zero.clone(),
            vector_of("beta"),
            vector_of("gamma")
        ]
    );
    let batches: Vec<Value> = log
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.body["input"].clone())
        .collect();
    assert_eq!(batches, [json!(["alpha", "beta"]), json!(["gamma"])]);
    // Only empty texts: nothing is sent.
    assert_eq!(embedder.embed(&["", ""]).unwrap(), [zero.clone(), zero]);
    assert_eq!(log.lock().unwrap().len(), 2);
}

#[test]
fn shortened_known_model_sends_dimensions() {
    let (base, log) = serve(|_, body| {
        let n = body["input"].as_array().unwrap().len();
        let data: Vec<Value> = (0..n)
            .map(|i| json!({"index": i, "embedding": vec![0.5f32; 256]}))
            .collect();
        (200, vec![], json!({"data": data}).to_string())
    });
    let embedder = OpenAiEmbedder::builder()
        .base_url(&base)
        .model("text-embedding-3-large")
        .dimension(256)
        .build()
        .unwrap();
    assert_eq!(embedder.embed(&["a"]).unwrap()[0].len(), 256);
    assert_eq!(log.lock().unwrap()[0].body["dimensions"], 256);
}

#[test]
fn unauthorized_reports_status_and_server_message_without_retrying() {
    let (base, log) = serve(|_, _| {
        (
            401,
            vec![],
            json!({"error": {"message": "Incorrect API key provided: sk-bad.", "type": "invalid_request_error", "code": "invalid_api_key"}})
                .to_string(),
        )
    });
    let embedder = client(&base).api_key("sk-bad").build().unwrap();
    let error = embedder.embed(&["a"]).unwrap_err().to_string();
    assert!(error.contains("401"), "{error}");
    assert!(error.contains("Incorrect API key provided"), "{error}");
    assert!(error.contains("OPENAI_API_KEY"), "{error}");
    assert_eq!(log.lock().unwrap().len(), 1, "a 401 is not retried");
}

#[test]
fn rate_limit_and_server_errors_are_retried_then_succeed() {
    let (base, log) = serve(|n, body| match n {
        0 => (
            429,
            vec!["Retry-After: 0".into()],
            json!({"error": {"message": "Rate limit reached"}}).to_string(),
        ),
        1 => (503, vec![], "upstream unavailable".into()),
        _ => (200, vec![], embeddings(body)),
    });
    let embedder = client(&base).build().unwrap();
    let vectors = embedder.embed(&["retry me"]).unwrap();
    assert_eq!(vectors, vec![vector_of("retry me")]);
    assert_eq!(log.lock().unwrap().len(), 3);
}

#[test]
fn retries_are_bounded() {
    let (base, log) = serve(|_, _| {
        (
            429,
            vec![],
            json!({"error": {"message": "Rate limit reached"}}).to_string(),
        )
    });
    let embedder = client(&base).max_retries(2).build().unwrap();
    let started = Instant::now();
    let error = embedder.embed(&["a"]).unwrap_err().to_string();
    assert!(error.contains("429"), "{error}");
    assert!(error.contains("Rate limit reached"), "{error}");
    assert!(error.contains("after 3 attempts"), "{error}");
    assert_eq!(log.lock().unwrap().len(), 3);
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A batch's retries stop at its deadline, however many `max_retries` allows: a caller
/// waiting on an embedding (a search by text) is not held for minutes of backoff.
#[test]
fn retries_stop_at_the_batchs_deadline() {
    let (base, log) = serve(|_, _| {
        (
            503,
            vec![],
            json!({"error": {"message": "overloaded"}}).to_string(),
        )
    });
    let embedder = client(&base)
        .max_retries(1_000)
        .backoff(Duration::from_millis(100), Duration::from_millis(100))
        .deadline(Duration::from_millis(700))
        .build()
        .unwrap();
    let started = Instant::now();
    let error = embedder.embed(&["a"]).unwrap_err().to_string();
    let took = started.elapsed();
    assert!(
        error.contains("503") && error.contains("overloaded"),
        "{error}"
    );
    assert!(
        error.contains("deadline of 700ms leaves no time"),
        "{error}"
    );
    let attempts = log.lock().unwrap().len();
    assert!(
        (1..=7).contains(&attempts),
        "{attempts} attempts in {took:?}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// A server that never answers holds one attempt for the rest of the batch's deadline at
/// most, not for the (longer) attempt timeout.
#[test]
fn a_silent_server_is_given_up_at_the_deadline() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    // Accepts and reads, never answers; the connections stay open until the test ends.
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&held);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            keep.lock().unwrap().push(stream);
        }
    });
    let embedder = client(&base)
        .timeout(Duration::from_secs(60))
        .deadline(Duration::from_millis(800))
        .build()
        .unwrap();
    let started = Instant::now();
    let error = embedder.embed(&["a"]).unwrap_err().to_string();
    let took = started.elapsed();
    assert!(
        error.contains("deadline of 800ms leaves no time"),
        "{error}"
    );
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(20),
        "{took:?}"
    );
}

#[test]
fn a_zero_deadline_or_timeout_is_refused() {
    for builder in [
        client("http://127.0.0.1:9/v1").deadline(Duration::ZERO),
        client("http://127.0.0.1:9/v1").timeout(Duration::ZERO),
    ] {
        let error = builder.build().unwrap_err().to_string();
        assert!(error.contains("longer than zero"), "{error}");
    }
}

#[test]
fn malformed_responses_are_clear_errors() {
    let cases: Vec<(&str, &str)> = vec![
        ("not json", "not an embeddings list"),
        (r#"{"data": []}"#, "0 embeddings for 1 texts"),
        (
            r#"{"data": [{"index": 5, "embedding": [1, 2, 3]}]}"#,
            "index 5",
        ),
        (
            r#"{"data": [{"index": 0, "embedding": [1, 2]}]}"#,
            "vectors of 2 floats, expected 3",
        ),
        (
            r#"{"data": [{"index": 0, "embedding": "AAAA"}]}"#,
            "not an embeddings list",
        ),
    ];
    for (body, expected) in cases {
        let reply = body.to_owned();
        let (base, log) = serve(move |_, _| (200, vec![], reply.clone()));
        let embedder = client(&base).build().unwrap();
        let error = embedder.embed(&["a"]).unwrap_err().to_string();
        assert!(error.contains(expected), "{body}: {error}");
        assert_eq!(log.lock().unwrap().len(), 1, "{body}: not retried");
    }
    let (base, _) = serve(|_, _| {
        (
            200,
            vec![],
            r#"{"data": [{"index": 0, "embedding": [1,2,3]}, {"index": 0, "embedding": [1,2,3]}]}"#
                .into(),
        )
    });
    let error = client(&base)
        .build()
        .unwrap()
        .embed(&["a", "b"])
        .unwrap_err();
    assert!(error.to_string().contains("repeats index 0"), "{error}");
}

#[test]
fn connection_refused_is_retried_then_reported() {
    // Bind and drop a listener to get a port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let embedder = client(&format!("http://127.0.0.1:{port}/v1"))
        .max_retries(1)
        .build()
        .unwrap();
    let error = embedder.embed(&["a"]).unwrap_err().to_string();
    assert!(error.contains("request to"), "{error}");
    assert!(error.contains("after 2 attempts"), "{error}");
}

/// A `Retry-After` too large for a `Duration` panicked the client (`Duration::from_secs_f64`);
/// it is capped at the backoff like any other wait.
#[test]
fn a_huge_retry_after_is_capped_not_a_panic() {
    let (base, log) = serve(|n, body| match n {
        0 => (429, vec!["Retry-After: 1e20".into()], "{}".into()),
        _ => (200, vec![], embeddings(body)),
    });
    let embedder = client(&base).build().unwrap();
    let started = Instant::now();
    assert_eq!(embedder.embed(&["a"]).unwrap(), vec![vector_of("a")]);
    assert_eq!(log.lock().unwrap().len(), 2);
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A response far larger than the batch's embeddings can take is refused once that many bytes
/// are read, not read whole (a server answering gigabytes took the process's memory).
#[test]
fn a_response_larger_than_its_embeddings_can_be_is_refused() {
    let (base, _log) = serve(|_, body| {
        let mut reply = embeddings(body);
        reply.push_str(&" ".repeat(4 * 1024 * 1024));
        (200, vec![], reply)
    });
    let embedder = client(&base).max_retries(0).build().unwrap();
    let error = embedder.embed(&["a"]).unwrap_err().to_string();
    assert!(error.contains("larger than"), "{error}");
}

/// A base URL may carry a user name and password (sent as basic authentication); no message
/// or `Debug` output shows them.
#[test]
fn credentials_in_the_base_url_are_never_shown() {
    let (base, log) = serve(|_, _| (500, vec![], "upstream down".into()));
    let base = base.replacen("http://", "http://proxy-user:s3cret@", 1);
    let embedder = client(&base).max_retries(0).build().unwrap();
    let error = embedder.embed(&["a"]).unwrap_err().to_string();
    assert!(error.contains("500"), "{error}");
    assert!(!error.contains("s3cret"), "{error}");
    assert!(!format!("{embedder:?}").contains("s3cret"));
    assert!(!embedder.endpoint().contains("s3cret"));
    // They are still sent, as basic authentication.
    let seen = log.lock().unwrap();
    assert!(
        seen[0]
            .authorization
            .as_deref()
            .is_some_and(|a| a.starts_with("Basic ")),
        "{seen:?}"
    );
}
