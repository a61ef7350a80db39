//! The host's HTTP behaviour (docs/reference/host.md#library-host-protocol), over real HTTP on
//! 127.0.0.1: body types, malformed and oversized requests, tokens, CORS, gzip, the small
//! endpoints, seeded random queries, reloads under load, draining on shutdown, and slow queries not
//! stalling others.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::host_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use host_support::{
    Reply, Server, StopBy, client, file_sources, fixture_sources, form_body, post, post_form,
    post_json, read_json, send,
};
use mnemon_host::{ConfigSource, HostOptions, LibrarySource, Sources};
use mnemon_library::encode_embedding;
use serde_json::{Map, Value, json};

/// The arguments of a fixture case.
fn case_args(name: &str) -> Map<String, Value> {
    read_json("polymath/queries.json")["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()["args"]
        .as_object()
        .unwrap()
        .clone()
}

/// Writes a small library of `dim`-dimensional basis vectors (bit i = e_i), with bit 1 tagged
/// `team`.
fn basis_library(dir: &std::path::Path, name: &str, dim: usize, bits: usize) -> std::path::PathBuf {
    let mut lib = mnemon_library::Library::blank("test:basis");
    for i in 0..bits {
        let mut v = vec![0f32; dim];
        v[i % dim] = 1.0;
        let mut bit = json!({
            "text": format!("bit {i}"),
            "info": {"url": format!("https://example.com/{i}")},
            "embedding": encode_embedding(&v),
            "token_count": 3,
        });
        if i == 1 {
            bit["access_tag"] = json!("team");
        }
        lib.insert(&bit).unwrap();
    }
    let path = dir.join(name);
    lib.save(&path, true).unwrap();
    path
}

fn basis_args(dim: usize) -> Value {
    let mut q = vec![0f32; dim];
    q[0] = 1.0;
    json!({"version": 1, "query_embedding_model": "test:basis",
           "query_embedding": encode_embedding(&q), "count": -1, "count_type": "bit"})
}

#[test]
fn json_with_charset_and_any_case_is_json() {
    let server = Server::fixture();
    let args = Value::Object(case_args("bits_5_near_cycle"));
    let plain = post_json(&server, &args);
    assert_eq!(plain.status, 200);
    for ct in [
        "application/json; charset=utf-8",
        "Application/JSON;charset=UTF-8",
        " application/json ",
    ] {
        let reply = post(&server, Some(ct), args.to_string());
        assert_eq!(reply.status, 200, "{ct}: {:?}", reply.json());
        assert_eq!(reply.body, plain.body, "{ct}");
    }
    let form = post(
        &server,
        Some("application/x-www-form-urlencoded; charset=utf-8"),
        form_body(args.as_object().unwrap()),
    );
    assert_eq!(form.status, 200);
    assert_eq!(form.json()["bits"], plain.json()["bits"]);
}

/// A multipart body with the given (name, filename, value) parts.
fn multipart(boundary: &str, parts: &[(&str, Option<&str>, &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, filename, value) in parts {
        write!(
            body,
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\""
        )
        .unwrap();
        if let Some(f) = filename {
            write!(body, "; filename=\"{f}\"\r\nContent-Type: text/plain").unwrap();
        }
        write!(body, "\r\n\r\n{value}\r\n").unwrap();
    }
    write!(body, "--{boundary}--\r\n").unwrap();
    body
}

#[test]
fn multipart_fields_are_arguments_and_uploads_are_ignored() {
    let server = Server::fixture();
    let args = case_args("bits_5_near_cycle");
    let want = post_json(&server, &Value::Object(args.clone()));
    let mut parts: Vec<(&str, Option<&str>, &str)> = vec![
        // A file part is ignored even though it comes first.
        ("count", Some("count.txt"), "0"),
    ];
    for (k, v) in &args {
        parts.push((
            k.as_str(),
            None,
            v.as_str().unwrap_or_else(|| {
                if k == "version" {
                    "1"
                } else if k == "count" {
                    "5"
                } else {
                    panic!("{k}")
                }
            }),
        ));
    }
    // A repeated field: the first value wins.
    parts.push(("count", None, "1"));
    let boundary = "mnemon-test-boundary-7f3a";
    let reply = post(
        &server,
        Some(&format!("multipart/form-data; boundary={boundary}")),
        multipart(boundary, &parts),
    );
    assert_eq!(reply.status, 200, "{:?}", reply.json());
    assert_eq!(reply.json()["bits"], want.json()["bits"]);
    assert_eq!(reply.json()["bits"].as_array().unwrap().len(), 5);

    let broken = post(&server, Some("multipart/form-data"), "no boundary here");
    assert_eq!(broken.status, 400);
    assert!(
        broken
            .error()
            .starts_with("invalid multipart/form-data body"),
        "{}",
        broken.error()
    );
    let truncated = post(
        &server,
        Some(&format!("multipart/form-data; boundary={boundary}")),
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"version\"\r\n\r\n1"),
    );
    assert_eq!(truncated.status, 400, "{:?}", truncated.json());
}

#[test]
fn query_string_arguments_are_ignored() {
    let server = Server::fixture();
    let args = case_args("bits_1_near_sail");
    let reply = send(
        client()
            .post(server.url("/?version=0&count=0&omit=text"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form_body(&args)),
    );
    assert_eq!(reply.status, 200, "{:?}", reply.json());
    assert_eq!(reply.json()["bits"].as_array().unwrap().len(), 1);
    let no_body = send(client().post(server.url("/?version=1&count=2")));
    assert_eq!(no_body.status, 400);
    assert_eq!(no_body.error(), "version must be at least 1");
}

#[test]
fn other_or_missing_content_types_ignore_the_body() {
    let server = Server::fixture();
    let json = Value::Object(case_args("bits_1_near_sail")).to_string();
    for ct in [
        Some("text/plain"),
        Some("application/xml"),
        Some("application/jsonl"),
        Some("multipart/mixed; boundary=x"),
        None,
    ] {
        let reply = post(&server, ct, json.clone());
        assert_eq!(reply.status, 400, "{ct:?}");
        assert_eq!(reply.error(), "version must be at least 1", "{ct:?}");
        assert_eq!(reply.header("access-control-allow-origin"), "*");
    }
}

#[test]
fn bad_bodies_get_400_with_a_readable_message() {
    let server = Server::fixture();
    let cases: &[(&[u8], &str)] = &[
        (b"{", "Failed to decode JSON object: "),
        (b"", "Failed to decode JSON object: "),
        (b"{\"version\": 1,}", "Failed to decode JSON object: "),
        (b"\xff\xfe{}", "Failed to decode JSON object: "),
        (b"{\"a\": \"\\ud800\"}", "Failed to decode JSON object: "),
        (b"null", "No arguments provided"),
        (b"{}", "No arguments provided"),
        (b"[1, 2]", "JSON body must be an object"),
        (b"\"version=1\"", "JSON body must be an object"),
        (b"42", "JSON body must be an object"),
    ];
    for (body, prefix) in cases {
        let reply = post(&server, Some("application/json"), body.to_vec());
        assert_eq!(reply.status, 400, "{body:?}");
        assert!(
            reply.error().starts_with(prefix),
            "{body:?}: {}",
            reply.error()
        );
    }
    // Argument errors through a form body keep the library's messages.
    let form_cases: &[(&str, &str)] = &[
        ("version=x", "invalid literal for int() with base 10: 'x'"),
        ("version=1&count=0", "count must be greater than 0"),
        (
            "version=1&count=%ZZ",
            "invalid literal for int() with base 10: '%ZZ'",
        ),
        (
            "version=1",
            "Embedding model was None but expected openai.com:text-embedding-ada-002",
        ),
        ("\u{1}=&&&===", "version must be at least 1"),
    ];
    for (body, message) in form_cases {
        let reply = post(&server, Some("application/x-www-form-urlencoded"), *body);
        assert_eq!(reply.status, 400, "{body}");
        assert_eq!(reply.error(), *message, "{body}");
    }
    // A `+` that was not percent-encoded arrives as a space and breaks the vector.
    let mut args = case_args("bits_1_near_sail");
    let embedding = args["query_embedding"].as_str().unwrap().to_owned();
    assert!(embedding.contains('+'));
    args.shift_remove("query_embedding");
    let raw = format!("{}&query_embedding={embedding}", form_body(&args));
    let reply = post(&server, Some("application/x-www-form-urlencoded"), raw);
    assert_eq!(reply.status, 400);
    assert!(
        reply.error().starts_with("query_embedding"),
        "{}",
        reply.error()
    );
    // The server keeps serving.
    assert_eq!(send(client().get(server.url("/healthz"))).status, 200);
}

#[test]
fn unknown_tokens_grant_nothing_and_are_not_errors() {
    let server = Server::fixture();
    let mut args = case_args("private_bit_no_token");
    let anonymous = post_json(&server, &Value::Object(args.clone()));
    for token in [
        "tokA_nobody_0000",
        "",
        " tokA_ana_default_5c1e",
        "TOKA_ANA_DEFAULT_5C1E",
    ] {
        args.insert("access_token".into(), json!(token));
        let reply = post_json(&server, &Value::Object(args.clone()));
        assert_eq!(reply.status, 200, "{token:?}");
        assert_eq!(reply.json(), anonymous.json(), "{token:?}");
        assert_eq!(reply.json()["details"]["counts"]["restricted"], 13);
    }
    // A non-string token grants nothing either.
    args.insert("access_token".into(), json!(12345));
    let reply = post_json(&server, &Value::Object(args.clone()));
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json(), anonymous.json());
    // The real token does grant its tag.
    args.insert("access_token".into(), json!("tokA_ana_default_5c1e"));
    let granted = post_json(&server, &Value::Object(args));
    assert_eq!(granted.json()["details"]["counts"]["restricted"], 3);
}

/// Sends raw bytes on a fresh connection and reads until the server closes or `limit` passes.
fn raw_exchange(server: &Server, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut buf = [0u8; 4096];
    let n = stream.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn oversized_bodies_get_413() {
    let small = Server::start(
        fixture_sources(),
        HostOptions {
            max_body_bytes: 1000,
            ..HostOptions::default()
        },
    );
    // Refused on Content-Length, before the body is sent at all.
    let head = raw_exchange(
        &small,
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000000\r\n\r\n",
    );
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(
        head.contains(r#"{"error":"request body too large"}"#),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("access-control-allow-origin: *")
    );

    // Exactly at the limit is read; one byte over is not.
    let at_limit = format!("version=1&pad={}", "x".repeat(1000 - 14));
    assert_eq!(at_limit.len(), 1000);
    let reply = post(
        &small,
        Some("application/x-www-form-urlencoded"),
        at_limit.clone(),
    );
    assert_eq!(reply.status, 400, "{:?}", reply.json());
    let reply = post(
        &small,
        Some("application/x-www-form-urlencoded"),
        format!("{at_limit}x"),
    );
    assert_eq!(reply.status, 413);
    assert_eq!(reply.json(), json!({"error": "request body too large"}));

    // A chunked body (no Content-Length) is cut off while it is read.
    let chunked = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    let mut request = chunked.to_vec();
    for _ in 0..3 {
        request.extend_from_slice(b"1f4\r\n");
        request.extend(std::iter::repeat_n(b' ', 500));
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let head = raw_exchange(&small, &request);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");

    // The default limit is 2 MiB.
    let server = Server::fixture();
    let reply = post(
        &server,
        Some("application/json"),
        vec![b' '; 2 * 1024 * 1024 + 1],
    );
    assert_eq!(reply.status, 413);
    let reply = post(
        &server,
        Some("application/json"),
        vec![b' '; 2 * 1024 * 1024],
    );
    assert_eq!(reply.status, 400);
    assert!(reply.error().starts_with("Failed to decode JSON object"));
}

/// A client that keeps writing a refused body gets the 413, never a reset or a broken pipe:
/// the host reads on and discards the rest (docs/limits.md). Before, the host closed the
/// connection with the body unread, and the client's writes failed.
#[test]
fn a_refused_body_still_being_sent_gets_its_413_not_a_reset() {
    let small = Server::start(
        fixture_sources(),
        HostOptions {
            max_body_bytes: 1000,
            ..HostOptions::default()
        },
    );
    for declared in [true, false] {
        let mut stream = TcpStream::connect(small.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let head: &[u8] = if declared {
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000000\r\n\r\n"
        } else {
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        };
        stream.write_all(head).unwrap();
        // Let the answer come (and, before the fix, the connection close) before the body.
        std::thread::sleep(Duration::from_millis(300));
        let chunk = vec![b' '; 40_000];
        for _ in 0..100 {
            if declared {
                stream.write_all(&chunk).unwrap();
            } else {
                stream
                    .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                    .unwrap();
                stream.write_all(&chunk).unwrap();
                stream.write_all(b"\r\n").unwrap();
            }
        }
        if !declared {
            stream.write_all(b"0\r\n\r\n").unwrap();
        }
        let mut buf = [0u8; 4096];
        let n = stream.read(&mut buf).unwrap();
        let reply = String::from_utf8_lossy(&buf[..n]);
        assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    }
}

#[test]
fn a_body_that_does_not_arrive_gets_408() {
    let server = Server::start(
        fixture_sources(),
        HostOptions {
            body_timeout: Duration::from_millis(300),
            ..HostOptions::default()
        },
    );
    let started = Instant::now();
    let head = raw_exchange(
        &server,
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"version\"",
    );
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert!(
        head.contains(r#"{"error":"request body not received in time"}"#),
        "{head}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // Complete bodies are unaffected.
    let reply = post_json(&server, &Value::Object(case_args("bits_1_near_sail")));
    assert_eq!(reply.status, 200);
}

#[test]
fn cors_on_every_response_and_preflight() {
    let server = Server::fixture();
    let replies = [
        post_json(&server, &Value::Object(case_args("bits_1_near_sail"))),
        post_json(&server, &json!({"version": 0})),
        send(client().get(server.url("/nowhere"))),
        send(client().get(server.url("/"))),
        send(client().get(server.url("/healthz"))),
    ];
    for reply in &replies {
        assert_eq!(
            reply.header("access-control-allow-origin"),
            "*",
            "{}",
            reply.status
        );
    }
    let preflight = send(
        client()
            .request(reqwest::Method::OPTIONS, server.url("/"))
            .header("Origin", "https://app.example.com")
            .header("Access-Control-Request-Method", "POST")
            .header(
                "Access-Control-Request-Headers",
                "content-type,x-polymath-client",
            ),
    );
    assert_eq!(preflight.status, 204);
    assert_eq!(preflight.header("access-control-allow-origin"), "*");
    assert_eq!(
        preflight.header("access-control-allow-methods"),
        "GET, POST, OPTIONS"
    );
    assert_eq!(
        preflight.header("access-control-allow-headers"),
        "content-type,x-polymath-client"
    );
    assert_eq!(preflight.header("access-control-max-age"), "86400");
    assert!(preflight.body.is_empty());
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[test]
fn gzip_when_accepted_and_at_least_500_bytes() {
    let server = Server::fixture();
    let args = case_args("bits_5_near_cycle");
    let gzip_post = |body: String, ct: &str| {
        send(
            client()
                .post(server.url("/"))
                .header("Content-Type", ct)
                .header("Accept-Encoding", "gzip")
                .body(body),
        )
    };
    let plain = post_json(&server, &Value::Object(args.clone()));
    assert!(plain.body.len() >= 500);
    assert_eq!(plain.header("content-encoding"), "");
    let zipped = gzip_post(Value::Object(args).to_string(), "application/json");
    assert_eq!(zipped.status, 200);
    assert_eq!(zipped.header("content-encoding"), "gzip");
    assert_eq!(zipped.header_all("vary"), ["Accept-Encoding"]);
    assert!(zipped.body.len() < plain.body.len());
    assert_eq!(gunzip(&zipped.body), plain.body);

    // A small body stays plain, but still says it varies.
    let small = gzip_post("{\"version\": 0}".into(), "application/json");
    assert_eq!(small.status, 400);
    assert!(small.body.len() < 500);
    assert_eq!(small.header("content-encoding"), "");
    assert_eq!(small.header_all("vary"), ["Accept-Encoding"]);
    assert_eq!(small.error(), "version must be at least 1");
}

#[test]
fn health_warmup_and_unknown_routes() {
    let server = Server::fixture();
    let health = send(client().get(server.url("/healthz")));
    assert_eq!(health.status, 200);
    assert_eq!(health.json(), json!({"status": "ok"}));
    assert_eq!(health.header("content-type"), "application/json");
    let warmup = send(client().get(server.url("/_ah/warmup")));
    assert_eq!(warmup.status, 204);
    assert!(warmup.body.is_empty());
    // `/health` is an alias, as both names are common.
    let alias = send(client().get(server.url("/health")));
    assert_eq!(alias.status, 200);
    assert_eq!(alias.json(), json!({"status": "ok"}));
    for (reply, status) in [
        (send(client().put(server.url("/"))), 405),
        (send(client().delete(server.url("/healthz"))), 405),
        (send(client().post(server.url("/healthz"))), 405),
        (send(client().get(server.url("/nowhere"))), 404),
        (send(client().post(server.url("/query"))), 404),
        (send(client().get(server.url("/admin/reload"))), 405),
    ] {
        assert_eq!(reply.status, status);
        assert!(!reply.error().is_empty());
        assert_eq!(reply.header("content-type"), "application/json");
    }
}

#[test]
fn seeded_random_queries_repeat_and_stay_in_unit_range() {
    let dir = tempfile::tempdir().unwrap();
    let path = basis_library(dir.path(), "basis.json", 6, 6);
    let seeded = |seed| {
        Server::start(
            file_sources(&path),
            HostOptions {
                random_seed: Some(seed),
                ..HostOptions::default()
            },
        )
    };
    let random_args = json!({"version": 1, "query_embedding_model": "test:basis",
                             "count": -1, "count_type": "bit", "omit": "embedding"});
    let run = |server: &Server| -> Vec<Vec<(String, f64)>> {
        (0..3)
            .map(|_| {
                let reply = post_json(server, &random_args);
                assert_eq!(reply.status, 200, "{:?}", reply.json());
                reply.json()["bits"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| {
                        (
                            b["text"].as_str().unwrap().to_owned(),
                            b["similarity"].as_f64().unwrap(),
                        )
                    })
                    .collect()
            })
            .collect()
    };
    let a = run(&seeded(7));
    let b = run(&seeded(7));
    let c = run(&seeded(8));
    assert_eq!(a, b, "same seed, same queries");
    assert_ne!(a, c, "another seed, other queries");
    // With basis-vector bits, each similarity is one component of the random query vector.
    for query in &a {
        assert_eq!(query.len(), 5, "the team bit stays restricted");
        for (_, s) in query {
            assert!((0.0..1.0).contains(s), "{s}");
        }
    }
    // Random queries (`""` and `[]` too) do not disturb the stream of explicit ones.
    let server = seeded(7);
    let explicit = post_json(&server, &basis_args(6));
    assert_eq!(explicit.json()["bits"][0]["text"], "bit 0");
}

#[test]
fn directories_merge_and_tag_from_access_paths() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("libraries");
    std::fs::create_dir_all(root.join("access/secret")).unwrap();
    basis_library(&root, "a.json", 4, 3);
    // The same ids again (ignored) plus one more bit, all tagged `secret` by the path.
    basis_library(&root.join("access/secret"), "b.json", 4, 4);
    let server = Server::start(
        Sources {
            library: LibrarySource::Path(root),
            config: ConfigSource::Value(json!({
                "restricted": {"count": true},
                "tokens": {"x": {"token": "s3cret", "access_tags": ["secret"]}}
            })),
        },
        HostOptions::default(),
    );
    let texts = |args: &Value| -> Vec<String> {
        let reply = post_json(&server, args);
        assert_eq!(reply.status, 200, "{:?}", reply.json());
        reply.json()["bits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["text"].as_str().unwrap().to_owned())
            .collect()
    };
    let anonymous = basis_args(4);
    assert_eq!(texts(&anonymous), ["bit 0", "bit 2"]);
    let mut with_token = anonymous.clone();
    with_token["access_token"] = json!("s3cret");
    assert_eq!(texts(&with_token), ["bit 0", "bit 2", "bit 3"]);
}

#[test]
fn reload_swaps_the_library_without_dropping_requests() {
    let dir = tempfile::tempdir().unwrap();
    let path = basis_library(dir.path(), "lib.json", 8, 3);
    let server = Server::start(file_sources(&path), HostOptions::default());
    let count = |server: &Server| -> usize {
        let reply = post_json(server, &basis_args(8));
        assert_eq!(reply.status, 200, "{:?}", reply.json());
        reply.json()["details"]["counts"]["bits"].as_u64().unwrap() as usize
    };
    assert_eq!(count(&server), 2);

    // Hammer the host from other threads while the library is swapped ten times.
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| {
                    let mut served = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let n = count(&server);
                        assert!(n == 2 || n == 7, "{n}");
                        served += 1;
                    }
                    served
                })
            })
            .collect();
        for i in 0..10 {
            let bits = if i % 2 == 0 { 8 } else { 3 };
            basis_library(dir.path(), "next.json", 8, bits);
            std::fs::rename(dir.path().join("next.json"), &path).unwrap();
            let reply = send(client().post(server.url("/admin/reload")));
            assert_eq!(reply.status, 200, "{:?}", reply.json());
            assert_eq!(reply.json(), json!({"status": "reloaded", "bits": bits}));
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in workers {
            assert!(w.join().unwrap() > 0);
        }
    });
    assert_eq!(count(&server), 2);

    // A broken file leaves the previous library in service.
    std::fs::write(&path, b"{\"version\": 1, \"bits\": []}").unwrap();
    let reply = send(client().post(server.url("/admin/reload")));
    assert_eq!(reply.status, 500);
    assert!(
        reply.error().contains("Invalid model name"),
        "{}",
        reply.error()
    );
    assert_eq!(count(&server), 2);
    assert!(server.reload().is_err());

    // The handle reloads too.
    basis_library(dir.path(), "lib.json", 8, 8);
    assert_eq!(server.reload().unwrap().bits, 8);
    assert_eq!(count(&server), 7);
}

#[test]
fn admin_reload_can_be_disabled() {
    let server = Server::start(
        fixture_sources(),
        HostOptions {
            admin_reload: false,
            ..HostOptions::default()
        },
    );
    let reply = send(client().post(server.url("/admin/reload")));
    assert_eq!(reply.status, 404);
}

#[test]
fn shutdown_drains_a_request_in_flight() {
    let server = Server::fixture();
    let body = form_body(&case_args("bits_1_near_sail"));
    let (first, rest) = body.split_at(body.len() / 2);
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // `Expect: 100-continue`: the server's `100 Continue` says it is reading the body, so the
    // request is in flight on any machine before the stop is asked.
    write!(
        stream,
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.flush().unwrap();
    let mut interim = Vec::new();
    let mut byte = [0u8; 1];
    while !interim.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).unwrap(),
            1,
            "closed before 100 Continue"
        );
        interim.push(byte[0]);
    }
    let interim = String::from_utf8_lossy(&interim);
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");
    stream.write_all(first.as_bytes()).unwrap();
    stream.flush().unwrap();
    // Ask the server to stop while the body is half sent.
    let addr = server.addr;
    let stopper = std::thread::spawn(move || server.stop());
    std::thread::sleep(Duration::from_millis(200));
    stream.write_all(rest.as_bytes()).unwrap();
    let mut response = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
        }
        if response.windows(4).any(|w| w == b"\r\n\r\n") && response.ends_with(b"}") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"similarity\""), "{text}");
    stopper.join().unwrap().unwrap();
    assert!(
        TcpStream::connect(addr).is_err(),
        "still accepting after shutdown"
    );
}

#[test]
fn a_slow_query_does_not_stall_other_requests() {
    // One async worker: were queries run on it, /healthz would wait behind them.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.json");
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    mnemon_library::synthetic::write_synthetic(file, "test:big", 4000, 512, 1).unwrap();
    let server = Server::start_with(
        file_sources(&path),
        HostOptions::default(),
        1,
        StopBy::Channel,
    );
    // Every bit with its embedding: building and serialising the result is the slow part.
    let slow_args = json!({"version": 1, "query_embedding_model": "test:big",
                           "count": -1, "count_type": "bit", "omit": ""});
    let started = Instant::now();
    assert_eq!(post_json(&server, &slow_args).status, 200);
    let alone = started.elapsed();
    let health_client = client();
    std::thread::scope(|scope| {
        let slow: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let status = post_json(&server, &slow_args).status;
                    (status, Instant::now())
                })
            })
            .collect();
        std::thread::sleep(alone / 4);
        let health = send(health_client.get(server.url("/healthz")));
        let health_done = Instant::now();
        assert_eq!(health.status, 200);
        // Were /healthz queued behind the queries, it would end after one of them at least.
        for h in slow {
            let (status, done) = h.join().unwrap();
            assert_eq!(status, 200);
            assert!(
                health_done < done,
                "/healthz ended after a slow query it ran beside (one alone takes {alone:?})"
            );
        }
    });
}

#[test]
fn garbage_never_gets_a_500_and_the_host_keeps_serving() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let server = Server::fixture();
    let mut runner = TestRunner::new(Config {
        cases: 64,
        ..Config::default()
    });
    let value = prop_oneof![
        Just(json!(null)),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        prop::collection::vec(".{0,5}", 0..3).prop_map(Value::from),
    ];
    let keys = prop::sample::select(vec![
        "version",
        "count",
        "count_type",
        "omit",
        "query_embedding",
        "query_embedding_model",
        "access_token",
        "other",
    ]);
    let strategy = (
        prop::collection::vec((keys, value), 0..8),
        prop::collection::vec(any::<u8>(), 0..64),
        any::<bool>(),
    );
    runner
        .run(&strategy, |(pairs, bytes, as_form)| {
            let mut args = Map::new();
            args.insert("version".into(), json!(1));
            args.insert(
                "query_embedding_model".into(),
                json!("openai.com:text-embedding-ada-002"),
            );
            for (k, v) in pairs {
                args.insert(k.to_owned(), v);
            }
            let reply: Reply = if as_form {
                post_form(&server, &args)
            } else {
                post_json(&server, &Value::Object(args))
            };
            prop_assert!(
                reply.status == 200 || reply.status == 400,
                "{}",
                reply.status
            );
            let raw = post(&server, Some("application/json"), bytes.clone());
            prop_assert_eq!(raw.status, 400);
            let raw = post(&server, Some("application/x-www-form-urlencoded"), bytes);
            prop_assert!(raw.status == 200 || raw.status == 400);
            Ok(())
        })
        .unwrap();
    assert_eq!(send(client().get(server.url("/healthz"))).status, 200);
}

/// Reads from `stream` until the server closes it (or 20 s pass) and returns what it sent.
fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// A GET on a fresh connection; returns the status line and the rest of the response.
fn raw_get(server: &Server, path: &str, headers: &str) -> (String, String) {
    let mut stream = TcpStream::connect(server.addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {}\r\n{headers}Connection: close\r\n\r\n",
        server.addr
    )
    .unwrap();
    let text = String::from_utf8_lossy(&read_until_closed(&mut stream)).into_owned();
    let (status, rest) = text.split_once("\r\n").unwrap_or((&text, ""));
    (status.to_owned(), rest.to_owned())
}

/// A library whose model name holds markup, to check the page escapes it.
fn markup_library(dir: &std::path::Path) -> std::path::PathBuf {
    let mut lib = mnemon_library::Library::blank("<b>m&\"x\"</b>");
    for i in 0..3 {
        let mut v = vec![0f32; 4];
        v[i] = 1.0;
        lib.insert(&json!({"text": format!("bit {i}"),
                           "info": {"url": format!("https://example.com/{i}")},
                           "embedding": encode_embedding(&v), "token_count": 2}))
            .unwrap();
    }
    let path = dir.join("markup.json");
    lib.save(&path, false).unwrap();
    path
}

/// `(name, value)` of every `<input>` (hidden ones included), `<textarea>` and `<select>` (its
/// selected option) of the page's form, in order: what a browser submits.
fn form_fields(page: &str) -> Vec<(String, String)> {
    let attr = |tag: &str, name: &str| -> Option<String> {
        let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        let len = tag[start..].find('"')?;
        Some(tag[start..start + len].to_owned())
    };
    let unescape = |s: String| {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    };
    let mut fields = Vec::new();
    let mut rest = page;
    while let Some(open) = rest.find('<') {
        rest = &rest[open..];
        let end = rest.find('>').unwrap();
        let tag = &rest[..end];
        if tag.starts_with("<input") {
            fields.push((
                attr(tag, "name").unwrap(),
                unescape(attr(tag, "value").unwrap()),
            ));
        } else if tag.starts_with("<textarea") {
            let content = &rest[end + 1..rest.find("</textarea>").unwrap()];
            fields.push((attr(tag, "name").unwrap(), unescape(content.to_owned())));
        } else if tag.starts_with("<select") {
            let body = &rest[end + 1..rest.find("</select>").unwrap()];
            let selected = body
                .split("<option")
                .find(|o| o.contains(" selected"))
                .and_then(|o| attr(o, "value"))
                .unwrap();
            fields.push((attr(tag, "name").unwrap(), selected));
        }
        rest = &rest[1..];
    }
    fields
}

#[test]
fn get_root_is_a_query_page_whose_form_runs_a_query() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        file_sources(&markup_library(dir.path())),
        HostOptions::default(),
    );
    let page = send(
        client()
            .get(server.url("/"))
            .header("Accept", "text/html,application/xhtml+xml,*/*;q=0.8"),
    );
    assert_eq!(page.status, 200);
    assert_eq!(page.header("content-type"), "text/html; charset=utf-8");
    let html = String::from_utf8(page.body).unwrap();
    // The model is shown escaped, never as markup.
    assert!(!html.contains("<b>"), "{html}");
    assert!(
        html.contains("&lt;b&gt;m&amp;&quot;x&quot;&lt;/b&gt;"),
        "{html}"
    );
    // Self-contained: no scripts, styles or images from anywhere.
    assert!(!html.contains("src="), "{html}");
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "{html}"
    );
    assert!(html.contains(r#"<form method="post" action="/""#), "{html}");
    // What a browser submits from the untouched form is a working query.
    let fields = form_fields(&html);
    let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "version",
            "query_embedding_model",
            "query_embedding",
            "count",
            "count_type",
            "omit",
            "access_token"
        ]
    );
    let mut form = form_urlencoded::Serializer::new(String::new());
    for (name, value) in &fields {
        form.append_pair(name, value);
    }
    let reply = post(
        &server,
        Some("application/x-www-form-urlencoded"),
        form.finish(),
    );
    assert_eq!(reply.status, 200, "{:?}", reply.json());
    assert_eq!(reply.json()["bits"].as_array().unwrap().len(), 3);
    // Plain clients (curl, fetch) get the page too when nothing failed before.
    assert!(raw_get(&server, "/", "").0.starts_with("HTTP/1.1 200"));
}

#[test]
fn the_typescript_clients_discovery_request_gets_the_error_back() {
    // @polymath-ai/client answers a failed POST by fetching GET / to discover the endpoint,
    // and shows that response's status text when it fails too.
    let server = Server::fixture();
    let mut args = case_args("bits_1_near_sail");
    args.insert("count".into(), json!(0));
    let failed = send(
        client()
            .post(server.url("/"))
            .header("User-Agent", "node")
            .header("Content-Type", "application/json")
            .body(Value::Object(args).to_string()),
    );
    assert_eq!(failed.status, 400);
    let message = failed.error();
    assert_eq!(message, "count must be greater than 0");
    // Another client's discovery is not answered with it.
    let (other, _) = raw_get(&server, "/", "User-Agent: curl/8\r\nAccept: */*\r\n");
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    let (status, rest) = raw_get(&server, "/", "User-Agent: node\r\nAccept: */*\r\n");
    assert_eq!(status, format!("HTTP/1.1 400 {message}"));
    assert!(
        rest.contains(r#"{"error":"count must be greater than 0"}"#),
        "{rest}"
    );
    assert!(rest.contains("access-control-allow-origin: *"), "{rest}");
    // Answered once: the next GET is the page again.
    let (again, rest) = raw_get(&server, "/", "User-Agent: node\r\nAccept: */*\r\n");
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    assert!(rest.contains("text/html"), "{rest}");
}

#[test]
fn admin_routes_have_no_cors_and_refuse_other_origins() {
    let dir = tempfile::tempdir().unwrap();
    let path = basis_library(dir.path(), "lib.json", 4, 4);
    let server = Server::start(file_sources(&path), HostOptions::default());
    // A web page elsewhere: refused, without CORS and without the library's path.
    std::fs::write(&path, "{ not json").unwrap();
    let foreign = send(
        client()
            .post(server.url("/admin/reload"))
            .header("Origin", "https://evil.example"),
    );
    assert_eq!(foreign.status, 403);
    assert_eq!(foreign.header("access-control-allow-origin"), "");
    let text = String::from_utf8_lossy(&foreign.body).into_owned();
    assert!(!text.contains("lib.json"), "{text}");
    let cross_site = send(
        client()
            .post(server.url("/admin/reload"))
            .header("Sec-Fetch-Site", "cross-site"),
    );
    assert_eq!(cross_site.status, 403);
    // The operator's curl: the reason, still without CORS.
    let local = send(client().post(server.url("/admin/reload")));
    assert_eq!(local.status, 500);
    assert!(local.error().contains("lib.json"), "{}", local.error());
    assert_eq!(local.header("access-control-allow-origin"), "");
    let preflight = send(
        client()
            .request(reqwest::Method::OPTIONS, server.url("/admin/reload"))
            .header("Origin", "https://evil.example")
            .header("Access-Control-Request-Method", "POST"),
    );
    assert_eq!(preflight.header("access-control-allow-origin"), "");
    // Same origin (a page served by the host itself) passes.
    basis_library(dir.path(), "lib.json", 4, 5);
    let own = send(
        client()
            .post(server.url("/admin/reload"))
            .header("Origin", format!("http://{}", server.addr)),
    );
    assert_eq!(own.status, 200);
    assert_eq!(own.json()["bits"], 5);
}

/// A JSON query body padded with spaces to `len` bytes.
fn padded_query(len: usize) -> String {
    let mut body = Value::Object(case_args("bits_1_near_sail")).to_string();
    assert!(body.len() < len);
    body.extend(std::iter::repeat_n(' ', len - body.len()));
    body
}

/// A client that declared a large body and trickles it used to reserve the whole declared
/// length at its first byte, so a few slow clients took the shared budget from every other
/// body; the buffer now grows with what arrives.
#[test]
fn a_trickled_body_holds_what_it_sent_not_what_it_declared() {
    let server = Server::start(
        fixture_sources(),
        HostOptions {
            max_buffered_body_bytes: 256 * 1024,
            queue_timeout: Duration::from_millis(300),
            ..HostOptions::default()
        },
    );
    let mut tricklers = Vec::new();
    for _ in 0..2 {
        let mut slow = TcpStream::connect(server.addr).unwrap();
        write!(
            slow,
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n"
        )
        .unwrap();
        slow.write_all(&padded_query(200_000).as_bytes()[..100])
            .unwrap();
        tricklers.push(slow);
    }
    std::thread::sleep(Duration::from_millis(300));
    // Two declared 200,000 bytes, but sent 100 each: a 100,000-byte query still fits.
    let reply = post(&server, Some("application/json"), padded_query(100_000));
    assert_eq!(reply.status, 200, "{:?}", reply.json());
    drop(tricklers);
}

#[test]
fn the_body_budget_is_shared_and_refuses_with_503_when_full() {
    let server = Server::start(
        fixture_sources(),
        HostOptions {
            max_buffered_body_bytes: 192 * 1024,
            queue_timeout: Duration::from_millis(300),
            ..HostOptions::default()
        },
    );
    // A client holding a body of 100,000 declared bytes, 60,000 sent.
    let mut holder = TcpStream::connect(server.addr).unwrap();
    write!(
        holder,
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    )
    .unwrap();
    holder
        .write_all(&padded_query(100_000).as_bytes()[..60_000])
        .unwrap();
    // 150,000 more bytes do not fit in the 192 KiB budget: 503 after the queue timeout, once
    // the server holds what the holder sent (asked again until then, on a loaded machine).
    let big = padded_query(150_000);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (refused, started) = loop {
        let started = Instant::now();
        let answer = post(&server, Some("application/json"), big.clone());
        if answer.status != 200 || Instant::now() > deadline {
            break (answer, started);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(refused.status, 503, "{:?}", refused.json());
    assert_eq!(refused.header("retry-after"), "1");
    assert!(
        refused.error().contains("--max-buffered-body-bytes"),
        "{}",
        refused.error()
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // Small bodies still fit.
    assert_eq!(
        post(&server, Some("application/json"), padded_query(20_000)).status,
        200
    );
    // Once the holder is gone, its bytes are free again (as soon as the server sees it go).
    drop(holder);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = post(&server, Some("application/json"), big.clone()).status;
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {status} after the holder left"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn queries_beyond_the_concurrency_cap_queue_then_get_503() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.json");
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    mnemon_library::synthetic::write_synthetic(file, "test:big", 4000, 512, 1).unwrap();
    let server = Server::start(
        file_sources(&path),
        HostOptions {
            max_concurrent_queries: 1,
            queue_timeout: Duration::from_millis(100),
            ..HostOptions::default()
        },
    );
    let slow_args = json!({"version": 1, "query_embedding_model": "test:big",
                           "count": -1, "count_type": "bit", "omit": ""});
    let quick_args = json!({"version": 1, "query_embedding_model": "test:big",
                            "count": 1, "count_type": "bit"});
    // While a slow query holds the one slot, quick ones wait out the queue timeout and get
    // 503. Rounds repeat until one is seen (a machine fast enough to finish the slow query
    // within the queue timeout proves nothing), within a generous deadline.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut refused = None;
    while refused.is_none() && Instant::now() < deadline {
        let slow_done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            let slow = scope.spawn(|| {
                let status = post_json(&server, &slow_args).status;
                slow_done.store(true, std::sync::atomic::Ordering::SeqCst);
                status
            });
            while !slow_done.load(std::sync::atomic::Ordering::SeqCst) {
                let quick = post_json(&server, &quick_args);
                if quick.status == 503 {
                    // Arguments are parsed before the wait for a slot (a waiting request holds
                    // its typed request, never its body's JSON tree, up to 40 times the body's
                    // bytes): a bad one is refused at once, not after the queue timeout.
                    let bad = post_json(&server, &json!({"version": 1, "count": "many"}));
                    refused = Some((quick, bad));
                    break;
                }
                assert_eq!(quick.status, 200, "{:?}", quick.json());
            }
            assert_eq!(slow.join().unwrap(), 200);
        });
    }
    let Some((busy, bad)) = refused else {
        panic!("no quick query was refused while a slow one held the only slot, in 60 s");
    };
    assert_eq!(busy.header("retry-after"), "1");
    assert!(
        busy.error().contains("--max-concurrent-queries"),
        "{}",
        busy.error()
    );
    assert_eq!(bad.status, 400, "{:?}", bad.json());
    // The slot is free again.
    assert_eq!(post_json(&server, &quick_args).status, 200);
}

#[test]
fn results_over_the_size_cap_are_refused_with_advice() {
    let server = Server::start(
        fixture_sources(),
        HostOptions {
            max_result_bytes: 4000,
            ..HostOptions::default()
        },
    );
    let mut args = case_args("bits_5_near_cycle");
    args.insert("omit".into(), json!(""));
    let refused = post_json(&server, &Value::Object(args.clone()));
    assert_eq!(refused.status, 400);
    let message = refused.error();
    assert!(message.contains("--max-result-bytes"), "{message}");
    assert!(
        message.contains("count") && message.contains("omit"),
        "{message}"
    );
    // The same query without embeddings fits.
    args.insert("omit".into(), json!("embedding"));
    assert_eq!(post_json(&server, &Value::Object(args)).status, 200);
}

/// The cap is on the bytes sent, checked as they are written: a result of N bytes fits a cap
/// of N (with the same bytes as without a cap), not one of N - 1, which gets the documented
/// message (`docs/limits.md`).
#[test]
fn the_result_cap_counts_the_exact_bytes_sent() {
    let mut args = case_args("bits_5_near_cycle");
    args.insert("omit".into(), json!(""));
    let args = Value::Object(args);
    let capped = |max_result_bytes| {
        let server = Server::start(
            fixture_sources(),
            HostOptions {
                max_result_bytes,
                random_seed: Some(3),
                ..HostOptions::default()
            },
        );
        post_json(&server, &args)
    };
    let open = capped(usize::MAX);
    assert_eq!(open.status, 200);
    let len = open.body.len();
    assert!(len > 1000, "{len}");
    let at = capped(len);
    assert_eq!(at.status, 200, "{:?}", at.json());
    assert_eq!(at.body, open.body);
    let below = capped(len - 1);
    assert_eq!(below.status, 400);
    assert_eq!(
        below.error(),
        format!(
            "the result is larger than the host's limit of {} bytes (--max-result-bytes); ask \
             for fewer bits with a lower count, or leave fields out with omit (for example \
             omit=embedding)",
            len - 1
        )
    );
}

#[test]
fn idle_sockets_beyond_the_connection_limit_do_not_lock_out_healthz() {
    let server = Server::start(
        fixture_sources(),
        HostOptions {
            max_connections: 8,
            ..HostOptions::default()
        },
    );
    let idle: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    let health = send(client().get(server.url("/healthz")));
    assert_eq!(health.status, 200);
    // Without eviction it would wait for the idle timeout (60 s): well under it, with room
    // for a loaded machine.
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    // The oldest idle sockets were closed to make room.
    let mut first = idle.into_iter().next().unwrap();
    assert!(read_until_closed(&mut first).is_empty());
}

#[test]
fn a_trickled_header_is_cut_at_the_header_read_timeout() {
    let server = Server::start(
        fixture_sources(),
        HostOptions {
            header_read_timeout: Duration::from_millis(600),
            ..HostOptions::default()
        },
    );
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let started = Instant::now();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // One header byte every 100 ms, never the blank line.
    let mut cut_after = None;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        if stream.write_all(b"X").is_err() {
            cut_after = Some(started.elapsed());
            break;
        }
        stream
            .set_read_timeout(Some(Duration::from_millis(1)))
            .unwrap();
        let mut buf = [0u8; 64];
        if let Ok(0) = stream.read(&mut buf) {
            cut_after = Some(started.elapsed());
            break;
        }
    }
    let cut_after = cut_after.expect("the trickling connection was never closed");
    assert!(
        cut_after >= Duration::from_millis(500) && cut_after < Duration::from_millis(4500),
        "{cut_after:?}"
    );
}

/// A client that sent a query and stopped reading its answer used to hold its connection (and
/// the result, up to `--max-result-bytes`) for good: a busy connection had no deadline and was
/// never evicted, so enough of them locked every other client out. Now a response whose writes
/// make no progress for `send_timeout` has its connection closed.
#[test]
fn a_client_that_stops_reading_is_cut_at_the_send_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.json");
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    // About 27 MB of answer with every field: more than loopback's socket buffers hold.
    mnemon_library::synthetic::write_synthetic(file, "test:big", 8000, 512, 1).unwrap();
    let server = Server::start(
        file_sources(&path),
        HostOptions {
            // Long enough that the reading client is never cut on a loaded machine, well
            // under the stalled client's pause.
            send_timeout: Duration::from_secs(2),
            ..HostOptions::default()
        },
    );
    let body = json!({"version": 1, "query_embedding_model": "test:big", "count": -1,
                      "count_type": "bit", "omit": ""})
    .to_string();
    let request = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // A client that reads: the whole answer.
    let mut reader = TcpStream::connect(server.addr).unwrap();
    reader.write_all(request.as_bytes()).unwrap();
    let whole = read_until_closed(&mut reader);
    assert!(
        String::from_utf8_lossy(&whole[..12]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&whole[..200.min(whole.len())])
    );
    assert!(whole.len() > 20_000_000, "{} bytes", whole.len());
    // A client that takes the first bytes, then stops reading for a while.
    let mut staller = TcpStream::connect(server.addr).unwrap();
    staller.write_all(request.as_bytes()).unwrap();
    let mut first = [0u8; 1024];
    staller
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    staller.read_exact(&mut first).unwrap();
    std::thread::sleep(Duration::from_secs(6));
    let rest = read_until_closed(&mut staller);
    let got = first.len() + rest.len();
    assert!(
        got < whole.len(),
        "the stalled client still got the whole answer ({got} bytes)"
    );
    // The server still answers.
    assert_eq!(
        post_json(
            &server,
            &json!({"version": 1, "query_embedding_model": "test:big",
                                          "count": 1, "count_type": "bit"})
        )
        .status,
        200
    );
}

#[test]
fn idle_keep_alive_connections_close_after_the_idle_timeout() {
    let server = Server::start(
        fixture_sources(),
        HostOptions {
            idle_timeout: Duration::from_millis(1500),
            ..HostOptions::default()
        },
    );
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut buf = [0u8; 4096];
    for round in 0..3 {
        // Requests within the idle timeout keep the connection.
        if round > 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
        stream.write_all(request).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let n = stream.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    }
    // The clock starts when the last answer is in: the server's started as it sent it.
    let idle = Instant::now();
    assert!(read_until_closed(&mut stream).is_empty());
    let closed_after = idle.elapsed();
    assert!(
        closed_after >= Duration::from_millis(1000) && closed_after < Duration::from_secs(6),
        "{closed_after:?}"
    );
}
