//! The REST server end to end: the real server on 127.0.0.1:0, every route through reqwest, on
//! SQLite and on PostgreSQL (the harness of docs/postgres.md; `MNEMON_REQUIRE_POSTGRES=1` makes
//! it fail instead of skip without the binaries).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine as _;
use mnemon_embed::HashingEmbedder;
use mnemon_host::{ConfigSource, HostOptions, LibrarySource, Sources};
use mnemon_ops::{OpenOptions, Service, Stores};
use mnemon_server::{Server, ServerConfig};
use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use serde_json::{Value, json};

mod browsers;
mod keys;
mod status;

/// The sample library `mnemon serve` answers from by default.
const SAMPLE: &[u8] = include_bytes!("../../mnemon/sample-library/library.json");

/// A running server; stopped when dropped.
struct Running {
    base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn sample_model() -> String {
    let library: Value = serde_json::from_slice(SAMPLE).unwrap();
    library["embedding_model"].as_str().unwrap().to_owned()
}

/// The service of `stores`, with the sample library's embedder.
fn service_of(stores: Stores) -> Service {
    let embedder = HashingEmbedder::from_model_name(&sample_model()).unwrap();
    Service::new(stores).with_embedder(Arc::new(embedder))
}

fn start(stores: Stores, options: HostOptions) -> Running {
    start_with(ServerConfig::open(service_of(stores)), options)
}

/// The real server with `config` on 127.0.0.1:0, on a runtime of its own.
fn start_with(config: ServerConfig, options: HostOptions) -> Running {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<SocketAddr>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let sources = Sources {
                library: LibrarySource::bytes("sample", SAMPLE),
                config: ConfigSource::Defaults,
            };
            let server = Server::bind("127.0.0.1:0".parse().unwrap(), sources, options, config)
                .await
                .unwrap();
            addr_tx.send(server.local_addr().unwrap()).unwrap();
            server
                .run(async move {
                    let _ = stop_rx.await;
                })
                .await
                .unwrap();
        });
    });
    let addr = addr_rx.recv().unwrap();
    Running {
        base: format!("http://{addr}"),
        stop: Some(stop_tx),
        thread: Some(thread),
    }
}

struct Api {
    client: Client,
    base: String,
}

impl Api {
    fn new(running: &Running) -> Api {
        Api {
            client: Client::new(),
            base: running.base.clone(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn get(&self, path: &str) -> Response {
        self.client.get(self.url(path)).send().unwrap()
    }

    fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Response {
        let mut request = self.client.request(method, self.url(path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().unwrap()
    }

    fn post(&self, path: &str, body: Value) -> Response {
        self.send(reqwest::Method::POST, path, Some(body))
    }

    fn put(&self, path: &str, body: Value) -> Response {
        self.send(reqwest::Method::PUT, path, Some(body))
    }

    fn delete(&self, path: &str) -> Response {
        self.send(reqwest::Method::DELETE, path, None)
    }
}

/// The status and JSON body of a response.
fn json_of(response: Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text:?}: {e}"));
    (status, value)
}

/// Asserts an error answer: its status, its code, and a message.
fn expect_error(response: Response, status: StatusCode, code: &str) -> String {
    let (got, body) = json_of(response);
    assert_eq!(got, status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().unwrap().to_owned();
    assert!(!message.is_empty());
    message
}

fn ok(response: Response, status: StatusCode) -> Value {
    let (got, body) = json_of(response);
    assert_eq!(got, status, "{body}");
    body
}

/// Every route, its answers and its errors.
fn exercise_every_route(api: &Api) {
    service_routes(api);
    asset_routes(api);
    reference_routes(api);
    artifact_routes(api);
    memory_routes(api);
    library_routes(api);
    maintenance_routes(api);
}

/// `POST /v1/forget` and `POST /v1/gc` (admin routes; the open server's caller is admin).
fn maintenance_routes(api: &Api) {
    // Re-embedding: messages stored without an embedding become candidates of a search
    // across sessions; a second call has nothing left to do.
    ok(
        api.post(
            "/v1/memory/sessions/re-1/messages?embed=false",
            json!({"messages": [{"id": "r1", "name": "user", "content": "otters hold hands"},
                                {"id": "r2", "name": "user", "content": "otters sleep afloat"}]}),
        ),
        StatusCode::OK,
    );
    let search = json!({"query": {"text": "otters hold hands"}, "session_id": "re-1"});
    let before = ok(
        api.post("/v1/memory/search", search.clone()),
        StatusCode::OK,
    );
    assert_eq!(before["hits"], json!([]), "{before}");
    let pass = ok(
        api.post(
            "/v1/memory/reembed",
            json!({"session_id": "re-1", "batch": 1}),
        ),
        StatusCode::OK,
    );
    assert_eq!(pass["reembedded"], 2, "{pass}");
    assert_eq!(pass["remaining"], 0, "{pass}");
    assert_eq!(pass["complete"], true, "{pass}");
    assert!(pass["model"].is_string(), "{pass}");
    let after = ok(api.post("/v1/memory/search", search), StatusCode::OK);
    assert_eq!(after["hits"].as_array().unwrap().len(), 2, "{after}");
    assert_eq!(after["hits"][0]["message"]["id"], "r1", "{after}");
    let again = ok(
        api.post("/v1/memory/reembed", json!({"session_id": "re-1"})),
        StatusCode::OK,
    );
    assert_eq!(again["reembedded"], 0, "{again}");
    let message = expect_error(
        api.post("/v1/memory/reembed", json!({"batch": 0})),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert!(message.contains("batch"), "{message}");
    ok(api.delete("/v1/memory/sessions/re-1"), StatusCode::OK);
    for id in ["gone-1", "gone-2", "kept"] {
        ok(
            api.put(&format!("/v1/assets/{id}"), json!({"content": id})),
            StatusCode::OK,
        );
    }
    ok(
        api.post(
            "/v1/memory/sessions/forget-me/messages",
            json!({"messages": [{"name": "user", "content": "a"}, {"name": "user", "content": "b"}]}),
        ),
        StatusCode::OK,
    );
    ok(
        api.post(
            "/v1/artifacts",
            json!({"scope": "forget-scope", "key": "k", "type": "t", "name": "n", "content": 1}),
        ),
        StatusCode::CREATED,
    );
    let forgotten = ok(
        api.post(
            "/v1/forget",
            json!({"session_id": "forget-me", "asset_prefix": "gone-",
                   "artifact_scope_prefix": "forget-scope"}),
        ),
        StatusCode::OK,
    );
    assert_eq!(forgotten["memory"], json!({"threads": 1, "messages": 2}));
    assert_eq!(forgotten["assets"], 2);
    assert_eq!(forgotten["artifacts"]["records"], 1);
    expect_error(
        api.get("/v1/assets/gone-1"),
        StatusCode::NOT_FOUND,
        "asset_not_found",
    );
    expect_error(
        api.get("/v1/memory/sessions/forget-me/messages"),
        StatusCode::NOT_FOUND,
        "session_not_found",
    );
    ok(api.get("/v1/assets/kept"), StatusCode::OK);
    let message = expect_error(
        api.post("/v1/forget", json!({})),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert!(message.contains("name what to forget"), "{message}");
    let message = expect_error(
        api.post("/v1/forget", json!({"namespace": "someone-else"})),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert!(message.contains("give its own name"), "{message}");
    let (status, body) = json_of(api.post(
        "/v1/memory/sessions/forget-me/messages?ttl_seconds=0",
        json!({"messages": [{"name": "user", "content": "a"}]}),
    ));
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let swept = ok(api.post("/v1/gc", json!({})), StatusCode::OK);
    assert!(swept["namespace"].is_string(), "{swept}");
    assert!(swept["messages"].is_u64(), "{swept}");
    assert!(
        swept["assets"].is_u64() && swept["artifacts"]["records"].is_u64(),
        "{swept}"
    );
    ok(api.delete("/v1/assets/kept"), StatusCode::OK);
}

fn service_routes(api: &Api) {
    assert_eq!(ok(api.get("/readyz"), StatusCode::OK)["status"], "ready");
    assert_eq!(ok(api.get("/healthz"), StatusCode::OK)["status"], "ok");
    // The Polymath endpoint is unchanged beside /v1.
    let polymath = api
        .client
        .post(api.url("/"))
        .json(&json!({"version": 1, "query_embedding_model": sample_model(), "count": 2, "count_type": "bit"}))
        .send()
        .unwrap();
    let (status, body) = json_of(polymath);
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["bits"].as_array().unwrap().len(), 2);
    expect_error(
        api.get("/v1/nothing/here"),
        StatusCode::NOT_FOUND,
        "no_route",
    );
    expect_error(
        api.send(reqwest::Method::PATCH, "/v1/assets", None),
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
    // Malformed JSON.
    let bad = api
        .client
        .post(api.url("/v1/assets"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .unwrap();
    expect_error(bad, StatusCode::BAD_REQUEST, "invalid_json");
    // The host's body limit applies to /v1 too: refused on Content-Length.
    let big = api
        .client
        .put(api.url("/v1/assets/big/content"))
        .body(vec![0u8; 3 * 1024 * 1024])
        .send()
        .unwrap();
    expect_error(big, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
}

fn asset_routes(api: &Api) {
    let created = ok(
        api.post(
            "/v1/assets",
            json!({"asset_type": "labels", "content": {"labels": ["cat", "dog"]}}),
        ),
        StatusCode::CREATED,
    );
    let generated = created["asset_id"].as_str().unwrap().to_owned();
    assert_eq!(generated.len(), 36);
    let put = ok(
        api.put(
            "/v1/assets/a1",
            json!({"asset_type": "labels", "asset_name": "A", "content": {"labels": ["cat"]}, "extra_field": 7}),
        ),
        StatusCode::OK,
    );
    assert_eq!(put["asset_id"], "a1");
    expect_error(
        api.put("/v1/assets/a1", json!({"asset_id": "other", "content": 1})),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );

    // Read with an ETag; the same ETag gives 304.
    let response = api.get("/v1/assets/a1");
    let etag = response.headers()["etag"].to_str().unwrap().to_owned();
    let asset = ok(response, StatusCode::OK);
    assert_eq!(asset["asset"]["content"], json!({"labels": ["cat"]}));
    assert_eq!(asset["asset"]["extra_field"], 7);
    let again = api
        .client
        .get(api.url("/v1/assets/a1"))
        .header("if-none-match", &etag)
        .send()
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert!(again.text().unwrap().is_empty());
    expect_error(
        api.get("/v1/assets/nope"),
        StatusCode::NOT_FOUND,
        "asset_not_found",
    );
    // A segment that is not UTF-8 once decoded: the JSON error shape, as every failure (it was
    // axum's plain-text 400).
    for path in ["/v1/assets/%FF", "/v1/memory/sessions/%C3%28/messages"] {
        let message = expect_error(api.get(path), StatusCode::BAD_REQUEST, "invalid_input");
        assert!(message.contains("UTF-8"), "{message}");
    }

    // Binary content: base64 in JSON, and raw with its media type.
    let png = [0x89u8, b'P', b'N', b'G', 0, 1, 2, 255];
    let b64 = base64::engine::general_purpose::STANDARD.encode(png);
    ok(
        api.put(
            "/v1/assets/img",
            json!({"content_type": "image/png", "content_base64": b64}),
        ),
        StatusCode::OK,
    );
    let got = ok(api.get("/v1/assets/img"), StatusCode::OK);
    assert_eq!(got["asset"]["content_base64"], b64);
    assert!(got["asset"].get("content").is_none());
    let raw = api.get("/v1/assets/img/content");
    assert_eq!(raw.status(), StatusCode::OK);
    assert_eq!(raw.headers()["content-type"], "image/png");
    assert_eq!(raw.bytes().unwrap().as_ref(), png);
    let stored = api
        .client
        .put(api.url("/v1/assets/raw/content"))
        .header("content-type", "application/pdf")
        .body(b"%PDF-1.7 bytes".to_vec())
        .send()
        .unwrap();
    assert_eq!(ok(stored, StatusCode::OK)["asset_id"], "raw");
    let raw = api.get("/v1/assets/raw/content");
    assert_eq!(raw.headers()["content-type"], "application/pdf");
    let pdf_etag = raw.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(raw.bytes().unwrap().as_ref(), b"%PDF-1.7 bytes");
    // The same bytes stored again with another type: a new ETag (the tag used to hash the
    // bytes alone, so a cache holding the old type got 304).
    let retyped = api
        .client
        .put(api.url("/v1/assets/raw/content"))
        .header("content-type", "text/plain")
        .body(b"%PDF-1.7 bytes".to_vec())
        .send()
        .unwrap();
    ok(retyped, StatusCode::OK);
    let fresh = api
        .client
        .get(api.url("/v1/assets/raw/content"))
        .header("if-none-match", &pdf_etag)
        .send()
        .unwrap();
    assert_eq!(fresh.status(), StatusCode::OK);
    assert!(
        fresh.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    // JSON content through the content route is JSON.
    let content = ok(api.get("/v1/assets/a1/content"), StatusCode::OK);
    assert_eq!(content, json!({"labels": ["cat"]}));
    expect_error(
        api.put(
            "/v1/assets/x",
            json!({"content": 1, "content_base64": "AA=="}),
        ),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    expect_error(
        api.put("/v1/assets/x", json!({"content_base64": "not base64!"})),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );

    // Meta: the model's view, bytes as type strings.
    let meta = ok(api.get("/v1/assets/img/meta"), StatusCode::OK);
    assert_eq!(meta["meta"]["content"], "<class 'bytes'>");
    let meta = ok(
        api.get("/v1/assets/a1/meta?max_string_len=2"),
        StatusCode::OK,
    );
    assert_eq!(meta["meta"]["asset_id"], "a1");

    // Resolve.
    let value = ok(
        api.get("/v1/resolve?reference=asset://a1/content/labels/0"),
        StatusCode::OK,
    );
    assert_eq!(value["value"], "cat");
    expect_error(
        api.get("/v1/resolve?reference=asset://a1/content/missing"),
        StatusCode::UNPROCESSABLE_ENTITY,
        "reference_unresolved",
    );
    expect_error(
        api.get("/v1/resolve?reference=asset://gone/content"),
        StatusCode::NOT_FOUND,
        "asset_not_found",
    );
    expect_error(
        api.get("/v1/resolve?reference=http://x"),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    expect_error(
        api.get("/v1/resolve"),
        StatusCode::BAD_REQUEST,
        "invalid_query",
    );

    // List, a page at a time.
    let all = ok(api.get("/v1/assets"), StatusCode::OK);
    let mut ids: Vec<String> = vec![generated.clone(), "a1".into(), "img".into(), "raw".into()];
    ids.sort();
    assert_eq!(all["asset_ids"], json!(ids));
    assert!(all.get("next_cursor").is_none());
    let mut walked = Vec::new();
    let mut path = "/v1/assets?limit=1".to_owned();
    loop {
        let page = ok(api.get(&path), StatusCode::OK);
        walked.extend(page["asset_ids"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/assets?limit=1&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(json!(walked), json!(ids));
    let typed = ok(api.get("/v1/assets?asset_type=labels"), StatusCode::OK);
    assert_eq!(typed["asset_ids"].as_array().unwrap().len(), 2);
    expect_error(
        api.get("/v1/assets?limit=100000"),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    expect_error(
        api.get("/v1/assets?cursor=%21%21"),
        StatusCode::BAD_REQUEST,
        "invalid_cursor",
    );

    // Delete.
    assert_eq!(
        ok(
            api.delete(&format!("/v1/assets/{generated}")),
            StatusCode::OK
        )["deleted"],
        true
    );
    expect_error(
        api.delete(&format!("/v1/assets/{generated}")),
        StatusCode::NOT_FOUND,
        "asset_not_found",
    );
    asset_expiry_and_filters(api);
}

/// Expiry on every asset write (`ttl_seconds` / `expires_at_ms` in the query), shown on get and
/// in filtered listings; a filter that is not one is 400 `invalid_filter`.
fn asset_expiry_and_filters(api: &Api) {
    let put = ok(
        api.post(
            "/v1/assets?ttl_seconds=3600",
            json!({"asset_id": "ttl-1", "asset_type": "photo", "content": {"n": 1}}),
        ),
        StatusCode::CREATED,
    );
    assert_eq!(put["asset_id"], "ttl-1");
    let later = 4_000_000_000_000_i64;
    ok(
        api.put(
            &format!("/v1/assets/ttl-2?expires_at_ms={later}"),
            json!({"asset_type": "photo", "content": {"n": 2}}),
        ),
        StatusCode::OK,
    );
    ok(
        api.put(
            "/v1/assets/ttl-3",
            json!({"asset_type": "note", "content": "forever"}),
        ),
        StatusCode::OK,
    );
    let raw = api
        .client
        .put(api.url("/v1/assets/ttl-4/content?ttl_seconds=60"))
        .header("content-type", "image/png")
        .body(vec![1u8, 2, 3])
        .send()
        .unwrap();
    assert_eq!(raw.status(), StatusCode::OK);
    let got = ok(api.get("/v1/assets/ttl-1"), StatusCode::OK);
    let deadline = got["expires_at_ms"].as_i64().unwrap();
    assert!(deadline > 1_700_000_000_000, "{got}");
    let got = ok(api.get("/v1/assets/ttl-2"), StatusCode::OK);
    assert_eq!(got["expires_at_ms"], later);
    let got = ok(api.get("/v1/assets/ttl-3"), StatusCode::OK);
    assert!(got.get("expires_at_ms").is_none(), "{got}");

    let photos = ok(
        api.post(
            "/v1/query/assets",
            json!({"filter": {"eq": {"path": "asset_type", "value": "photo"}}}),
        ),
        StatusCode::OK,
    );
    assert_eq!(
        photos["assets"],
        json!([
            {"asset_id": "ttl-1", "expires_at_ms": deadline},
            {"asset_id": "ttl-2", "expires_at_ms": later}
        ])
    );
    // The filter applies before the page cut; the cursor pages on.
    let first = ok(
        api.post(
            "/v1/query/assets",
            json!({"filter": {"exists": "expires_at"}, "limit": 1}),
        ),
        StatusCode::OK,
    );
    assert_eq!(first["assets"][0]["asset_id"], "ttl-1", "{first}");
    let cursor = first["next_cursor"].as_str().unwrap();
    let second = ok(
        api.post(
            "/v1/query/assets",
            json!({"filter": {"exists": "expires_at"}, "cursor": cursor, "limit": 1}),
        ),
        StatusCode::OK,
    );
    assert_eq!(second["assets"][0]["asset_id"], "ttl-2", "{second}");

    let message = expect_error(
        api.post(
            "/v1/query/assets",
            json!({"filter": {"eq": {"path": "asset_type", "valeu": "photo"}}}),
        ),
        StatusCode::BAD_REQUEST,
        "invalid_filter",
    );
    assert!(message.contains("valeu"), "{message}");
    for bad in ["ttl_seconds=0", "ttl_seconds=soon", "expires_at_ms=5"] {
        let response = api.post(
            &format!("/v1/assets?{bad}"),
            json!({"asset_id": "ttl-x", "content": 1}),
        );
        let (status, body) = json_of(response);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    for id in ["ttl-1", "ttl-2", "ttl-3", "ttl-4"] {
        ok(api.delete(&format!("/v1/assets/{id}")), StatusCode::OK);
    }
}

fn reference_routes(api: &Api) {
    let spec = json!({"name": "show", "parameters": [
        {"name": "label", "asset_ref_acceptable": true}, {"name": "note"}]});
    let resolved = ok(
        api.post(
            "/v1/refs/params",
            json!({"spec": spec, "params": {"label": "<|asset://a1/content/labels/0|>", "note": "asset://a1"}}),
        ),
        StatusCode::OK,
    );
    assert_eq!(
        resolved["params"],
        json!({"label": "cat", "note": "asset://a1"})
    );
    expect_error(
        api.post(
            "/v1/refs/params",
            json!({"spec": spec, "params": {"note": "asset://a1"}, "strict": true}),
        ),
        StatusCode::BAD_REQUEST,
        "invalid_reference",
    );
    expect_error(
        api.post(
            "/v1/refs/params",
            json!({"spec": spec, "params": {"label": "asset://gone/content"}}),
        ),
        StatusCode::NOT_FOUND,
        "asset_not_found",
    );
    let rendered = ok(
        api.post(
            "/v1/refs/render",
            json!({"text": "a <|asset://a1/content/labels/0|> and <|asset://gone|>"}),
        ),
        StatusCode::OK,
    );
    assert_eq!(rendered["text"], "a cat and <|asset://gone|>");
    assert_eq!(rendered["unresolved"][0]["marker"], "<|asset://gone|>");
}

fn artifact_routes(api: &Api) {
    let saved = ok(
        api.post(
            "/v1/artifacts",
            json!({"scope": "chat-1", "key": "plan", "type": "plan", "name": "The plan",
                   "content": ["parse", "test"]}),
        ),
        StatusCode::CREATED,
    );
    let id = saved["artifact"]["id"].as_str().unwrap().to_owned();
    assert_eq!(saved["content"], json!(["parse", "test"]));
    let second = ok(
        api.post(
            "/v1/artifacts",
            json!({"scope": "chat-1", "key": "plan", "type": "plan", "name": "Plan v2",
                   "description": "newer", "content": "v2"}),
        ),
        StatusCode::CREATED,
    );
    let second_id = second["artifact"]["id"].as_str().unwrap().to_owned();
    expect_error(
        api.post(
            "/v1/artifacts",
            json!({"scope": "chat-1", "key": "", "type": "plan", "name": "x", "content": 1}),
        ),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_artifact",
    );
    let got = ok(api.get(&format!("/v1/artifacts/{id}")), StatusCode::OK);
    assert_eq!(got["artifact"]["name"], "The plan");
    expect_error(
        api.get("/v1/artifacts/not-a-uuid"),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    expect_error(
        api.get("/v1/artifacts/00000000-0000-7000-8000-000000000000"),
        StatusCode::NOT_FOUND,
        "artifact_not_found",
    );
    let latest = ok(
        api.get("/v1/artifacts/latest?scope=chat-1&key=plan"),
        StatusCode::OK,
    );
    assert_eq!(latest["artifact"]["id"], second_id.as_str());
    assert_eq!(latest["content"], "v2");
    expect_error(
        api.get("/v1/artifacts/latest?scope=chat-1&key=none"),
        StatusCode::NOT_FOUND,
        "artifact_not_found",
    );
    let page1 = ok(
        api.get("/v1/artifacts?scope=chat-1&limit=1"),
        StatusCode::OK,
    );
    assert_eq!(page1["artifacts"][0]["id"], id.as_str());
    // Content is not listed (it was, for inline content: a page had no bound but the
    // records' sizes); a get reads it.
    assert_eq!(page1["artifacts"][0]["data"], Value::Null, "{page1}");
    let cursor = page1["next_cursor"].as_str().unwrap();
    let page2 = ok(
        api.get(&format!(
            "/v1/artifacts?scope=chat-1&limit=1&cursor={cursor}"
        )),
        StatusCode::OK,
    );
    assert_eq!(page2["artifacts"][0]["id"], second_id.as_str());
    assert!(page2.get("next_cursor").is_none());
    let typed = ok(
        api.get("/v1/artifacts?scope=chat-1&type=other"),
        StatusCode::OK,
    );
    assert_eq!(typed["artifacts"], json!([]));
    let loaded = ok(
        api.post(
            "/v1/artifacts/load",
            json!({"scope": "chat-1", "text": "Use {plan} and {code}"}),
        ),
        StatusCode::OK,
    );
    assert!(
        loaded["text"]
            .as_str()
            .unwrap()
            .starts_with("RELATED ARTIFACTS")
    );
    assert_eq!(loaded["artifact_ids"], json!([second_id]));
    assert_eq!(loaded["missing_keys"], json!(["code"]));
    let by_keys = ok(
        api.post(
            "/v1/artifacts/load",
            json!({"scope": "chat-1", "keys": ["plan"]}),
        ),
        StatusCode::OK,
    );
    assert_eq!(by_keys["artifact_ids"], json!([second_id]));
    expect_error(
        api.post("/v1/artifacts/load", json!({"scope": "chat-1"})),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    ok(
        api.delete(&format!("/v1/artifacts/{second_id}")),
        StatusCode::OK,
    );
    expect_error(
        api.delete(&format!("/v1/artifacts/{second_id}")),
        StatusCode::NOT_FOUND,
        "artifact_not_found",
    );
    let latest = ok(
        api.get("/v1/artifacts/latest?scope=chat-1&key=plan"),
        StatusCode::OK,
    );
    assert_eq!(latest["artifact"]["id"], id.as_str());
    assert!(latest.get("expires_at_ms").is_none(), "{latest}");

    // Expiry on a save, shown on reads; filtered listings in one scope or all.
    let saved = ok(
        api.post(
            "/v1/artifacts?ttl_seconds=600",
            json!({"scope": "chat-ttl", "key": "draft", "type": "text", "name": "Draft",
                   "content": "soon gone"}),
        ),
        StatusCode::CREATED,
    );
    let deadline = saved["expires_at_ms"].as_i64().unwrap();
    assert!(deadline > 1_700_000_000_000, "{saved}");
    let saved_id = saved["artifact"]["id"].as_str().unwrap().to_owned();
    let got = ok(
        api.get(&format!("/v1/artifacts/{saved_id}")),
        StatusCode::OK,
    );
    assert_eq!(got["expires_at_ms"], deadline);
    let drafts = ok(
        api.post(
            "/v1/query/artifacts",
            json!({"filter": {"eq": {"path": "key", "value": "draft"}}}),
        ),
        StatusCode::OK,
    );
    assert_eq!(drafts["artifacts"].as_array().unwrap().len(), 1, "{drafts}");
    assert_eq!(drafts["artifacts"][0]["artifact"]["id"], saved_id.as_str());
    assert_eq!(drafts["artifacts"][0]["expires_at_ms"], deadline);
    let in_scope = ok(
        api.post(
            "/v1/query/artifacts",
            json!({"scope": "chat-1", "filter": {"eq": {"path": "key", "value": "draft"}}}),
        ),
        StatusCode::OK,
    );
    assert_eq!(in_scope["artifacts"], json!([]));
    let message = expect_error(
        api.post(
            "/v1/query/artifacts",
            json!({"filter": {"eq": {"path": "colour", "value": "red"}}}),
        ),
        StatusCode::BAD_REQUEST,
        "invalid_filter",
    );
    assert!(message.contains("colour"), "{message}");
    ok(
        api.delete(&format!("/v1/artifacts/{saved_id}")),
        StatusCode::OK,
    );
}

fn memory_routes(api: &Api) {
    let created = api.put("/v1/memory/sessions/s1", json!({}));
    assert_eq!(ok(created, StatusCode::CREATED)["created"], true);
    assert_eq!(
        ok(api.put("/v1/memory/sessions/s1", json!({})), StatusCode::OK)["created"],
        false
    );
    let added = ok(
        api.post(
            "/v1/memory/sessions/s1/messages",
            json!({"messages": [
                {"id": "m1", "name": "user", "role": "user", "content": "the bees cluster to keep warm in winter"},
                {"id": "m2", "name": "assistant", "content": "sourdough needs a starter", "embedding": null},
                {"id": "m3", "name": "user", "role": "user", "content": "how do bees survive the cold"}
            ], "marks": ["seen"]}),
        ),
        StatusCode::OK,
    );
    assert_eq!(added["added"], 3);
    let dup = ok(
        api.post(
            "/v1/memory/sessions/s1/messages",
            json!({"messages": [{"id": "m1", "name": "user", "content": "again"}]}),
        ),
        StatusCode::OK,
    );
    assert_eq!(dup["skipped_duplicates"], json!(["m1"]));
    expect_error(
        api.post(
            "/v1/memory/sessions/s1/messages",
            json!({"messages": [{"content": "no name"}]}),
        ),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_message",
    );

    let all = ok(api.get("/v1/memory/sessions/s1/messages"), StatusCode::OK);
    let ids: Vec<&str> = all["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m1", "m2", "m3"]);
    let recent = ok(
        api.get("/v1/memory/sessions/s1/messages?recent=1"),
        StatusCode::OK,
    );
    assert_eq!(recent["messages"][0]["id"], "m3");
    let budget = ok(
        api.get("/v1/memory/sessions/s1/messages?tokens=12"),
        StatusCode::OK,
    );
    assert!(budget["token_count"].as_u64().unwrap() <= 12);
    assert_eq!(
        budget["messages"].as_array().unwrap().last().unwrap()["id"],
        "m3"
    );
    expect_error(
        api.get("/v1/memory/sessions/nope/messages"),
        StatusCode::NOT_FOUND,
        "session_not_found",
    );

    // Search by text (the configured embedder) and by vector; embeddings only when asked.
    let hits = ok(
        api.post(
            "/v1/memory/sessions/s1/search",
            json!({"query": {"text": "bees in the cold winter"}, "top_k": 2}),
        ),
        StatusCode::OK,
    );
    let hit_ids: Vec<&str> = hits["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["message"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(hit_ids.len(), 2);
    assert!(!hit_ids.contains(&"m2"), "{hits}");
    assert!(hits["hits"][0]["message"].get("embedding").is_none());
    let with = ok(
        api.get("/v1/memory/sessions/s1/messages?include_embeddings=true"),
        StatusCode::OK,
    );
    let vector = with["messages"][0]["embedding"].clone();
    assert!(vector.is_array(), "{with}");
    let by_vector = ok(
        api.post(
            "/v1/memory/sessions/s1/search",
            json!({"query": {"vector": vector}, "top_k": 1, "metric": "cosine"}),
        ),
        StatusCode::OK,
    );
    assert_eq!(by_vector["hits"][0]["message"]["id"], "m1");
    expect_error(
        api.post(
            "/v1/memory/sessions/s1/search",
            json!({"query": {"vector": [1.0, 2.0]}}),
        ),
        StatusCode::UNPROCESSABLE_ENTITY,
        "dimension_mismatch",
    );

    // Search across sessions: one query over every session of the namespace, or those a
    // user, agent or session scope selects. `?embed=true` embeds messages as they are added
    // (a search across sessions never embeds stored messages).
    ok(
        api.post(
            "/v1/memory/sessions/s3/messages?embed=true",
            json!({"messages": [
                {"id": "x1", "name": "user", "content": "bees huddle in the cold winter hive"}
            ]}),
        ),
        StatusCode::OK,
    );
    let across = ok(
        api.post(
            "/v1/memory/search",
            json!({"query": {"text": "bees in the cold winter"}, "top_k": 3}),
        ),
        StatusCode::OK,
    );
    let hits = across["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 3, "{across}");
    let sessions: std::collections::HashSet<&str> = hits
        .iter()
        .map(|h| h["session_id"].as_str().unwrap())
        .collect();
    assert!(
        sessions.contains("s1") && sessions.contains("s3"),
        "{across}"
    );
    for hit in hits {
        assert!(hit["score"].is_number() && hit["index"].is_u64(), "{hit}");
        assert!(hit["message"]["id"].is_string(), "{hit}");
        assert!(hit["message"].get("embedding").is_none(), "{hit}");
    }
    let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{across}");
    let only_s3 = ok(
        api.post(
            "/v1/memory/search",
            json!({"query": {"text": "bees in the cold winter"}, "session_id": "s3"}),
        ),
        StatusCode::OK,
    );
    assert_eq!(only_s3["hits"].as_array().unwrap().len(), 1, "{only_s3}");
    assert_eq!(only_s3["hits"][0]["session_id"], "s3");
    assert_eq!(only_s3["hits"][0]["index"], 0);
    assert_eq!(only_s3["hits"][0]["message"]["id"], "x1");
    // Keyword and hybrid: by the words of the text (or `keywords`).
    let keyword = ok(
        api.post(
            "/v1/memory/search",
            json!({"query": {"text": "sourdough"}, "mode": "keyword"}),
        ),
        StatusCode::OK,
    );
    assert_eq!(keyword["hits"].as_array().unwrap().len(), 1, "{keyword}");
    assert_eq!(keyword["hits"][0]["message"]["id"], "m2");
    let hybrid = ok(
        api.post(
            "/v1/memory/search",
            json!({"query": {"text": "bees in the cold winter"}, "mode": "hybrid",
                   "keywords": "starter", "top_k": 5,
                   "hybrid": {"keyword_weight": 10.0}}),
        ),
        StatusCode::OK,
    );
    assert_eq!(hybrid["hits"][0]["message"]["id"], "m2", "{hybrid}");
    expect_error(
        api.post(
            "/v1/memory/search",
            json!({"query": {"text": "bees"}, "mode": "sideways"}),
        ),
        StatusCode::BAD_REQUEST,
        "invalid_json",
    );
    // A filter, applied before the top-k cut: m3 alone, even at top 1.
    let filtered = ok(
        api.post(
            "/v1/memory/search",
            json!({"query": {"text": "bees in the cold winter"}, "top_k": 1,
                   "filter": {"eq": {"path": "id", "value": "m3"}}}),
        ),
        StatusCode::OK,
    );
    assert_eq!(filtered["hits"].as_array().unwrap().len(), 1, "{filtered}");
    assert_eq!(filtered["hits"][0]["message"]["id"], "m3");
    let message = expect_error(
        api.post(
            "/v1/memory/search",
            json!({"query": {"text": "bees"}, "filter": {"exists": "embedding"}}),
        ),
        StatusCode::BAD_REQUEST,
        "invalid_filter",
    );
    assert!(message.contains("embedding"), "{message}");
    let message = expect_error(
        api.post(
            "/v1/memory/search",
            json!({"query": {"text": "bees"}, "user_id": ""}),
        ),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert!(message.contains("user_id"), "{message}");
    expect_error(
        api.post("/v1/memory/search", json!({"top_k": 1})),
        StatusCode::BAD_REQUEST,
        "invalid_json",
    );
    // Adds embed by default (the server has an embedder): a message added with no `embed`
    // query is found by a search across sessions at once; `?embed=false` opts out, and such a
    // message is no candidate for a vector search across sessions.
    ok(
        api.post(
            "/v1/memory/sessions/s4/messages",
            json!({"messages": [
                {"id": "d1", "name": "user", "content": "bees huddle in the cold winter hive"}
            ]}),
        ),
        StatusCode::OK,
    );
    let default_embedded = ok(
        api.post(
            "/v1/memory/search",
            json!({"query": {"text": "bees in the cold winter"}, "session_id": "s4"}),
        ),
        StatusCode::OK,
    );
    assert_eq!(
        default_embedded["hits"].as_array().unwrap().len(),
        1,
        "{default_embedded}"
    );
    assert_eq!(default_embedded["hits"][0]["message"]["id"], "d1");
    ok(
        api.post(
            "/v1/memory/sessions/s5/messages?embed=false",
            json!({"messages": [
                {"id": "n1", "name": "user", "content": "bees huddle in the cold winter hive"}
            ]}),
        ),
        StatusCode::OK,
    );
    let not_embedded = ok(
        api.post(
            "/v1/memory/search",
            json!({"query": {"text": "bees in the cold winter"}, "session_id": "s5"}),
        ),
        StatusCode::OK,
    );
    assert_eq!(
        not_embedded["hits"].as_array().unwrap().len(),
        0,
        "{not_embedded}"
    );
    let stored = ok(
        api.get("/v1/memory/sessions/s5/messages?include_embeddings=true"),
        StatusCode::OK,
    );
    assert!(
        stored["messages"][0]
            .get("embedding")
            .is_none_or(serde_json::Value::is_null),
        "{stored}"
    );
    ok(api.delete("/v1/memory/sessions/s4"), StatusCode::OK);
    ok(api.delete("/v1/memory/sessions/s5"), StatusCode::OK);
    ok(api.delete("/v1/memory/sessions/s3"), StatusCode::OK);

    // Marks.
    let marked = ok(
        api.post(
            "/v1/memory/sessions/s1/mark",
            json!({"mark": "important", "ids": ["m1", "m3"]}),
        ),
        StatusCode::OK,
    );
    assert_eq!(marked["changed"], 2);
    let marks = ok(
        api.get("/v1/memory/sessions/s1/messages/m1/marks"),
        StatusCode::OK,
    );
    assert_eq!(marks["marks"], json!(["seen", "important"]));
    let filtered = ok(
        api.get("/v1/memory/sessions/s1/messages?mark=important&exclude_mark=nothing"),
        StatusCode::OK,
    );
    assert_eq!(filtered["messages"].as_array().unwrap().len(), 2);
    let unmarked = ok(
        api.post(
            "/v1/memory/sessions/s1/unmark",
            json!({"mark": "important"}),
        ),
        StatusCode::OK,
    );
    assert_eq!(unmarked["changed"], 2);
    expect_error(
        api.get("/v1/memory/sessions/s1/messages/zz/marks"),
        StatusCode::NOT_FOUND,
        "message_not_found",
    );

    // Export, and import into another session.
    let exported = api.get("/v1/memory/sessions/s1/export?format=agentscope-0.0");
    assert_eq!(exported.status(), StatusCode::OK);
    let document = exported.text().unwrap();
    assert!(document.starts_with("[\n    {"), "{document}");
    let document: Value = serde_json::from_str(&document).unwrap();
    let imported = ok(
        api.post(
            "/v1/memory/sessions/s2/import",
            json!({"document": document}),
        ),
        StatusCode::OK,
    );
    assert_eq!(imported["added"], 3);
    let export01 =
        api.get("/v1/memory/sessions/s1/export?format=agentscope-0.1&include_marks=true");
    assert_eq!(export01.status(), StatusCode::OK);

    // Delete a message, list sessions, delete a session.
    ok(
        api.delete("/v1/memory/sessions/s1/messages/m2"),
        StatusCode::OK,
    );
    expect_error(
        api.delete("/v1/memory/sessions/s1/messages/m2"),
        StatusCode::NOT_FOUND,
        "message_not_found",
    );
    let sessions = ok(api.get("/v1/memory/sessions"), StatusCode::OK);
    let names: Vec<&str> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["session_id"].as_str())
        .collect();
    assert_eq!(names, ["s1", "s2"]);
    let first = ok(api.get("/v1/memory/sessions?limit=1"), StatusCode::OK);
    let cursor = first["next_cursor"].as_str().unwrap();
    let second = ok(
        api.get(&format!("/v1/memory/sessions?limit=1&cursor={cursor}")),
        StatusCode::OK,
    );
    assert_eq!(second["sessions"][0]["session_id"], "s2");
    ok(api.delete("/v1/memory/sessions/s2"), StatusCode::OK);
    expect_error(
        api.delete("/v1/memory/sessions/s2"),
        StatusCode::NOT_FOUND,
        "session_not_found",
    );
}

fn library_routes(api: &Api) {
    let page = ok(api.get("/v1/library/bits?limit=3"), StatusCode::OK);
    assert_eq!(page["bits"].as_array().unwrap().len(), 3);
    assert!(page["total"].as_u64().unwrap() >= 20);
    let cursor = page["next_cursor"].as_str().unwrap();
    let next = ok(
        api.get(&format!("/v1/library/bits?limit=3&cursor={cursor}")),
        StatusCode::OK,
    );
    assert_ne!(next["bits"][0]["id"], page["bits"][0]["id"]);
    let result = ok(
        api.post(
            "/v1/library/query",
            json!({"text": "how do bees keep warm in winter", "count": 1}),
        ),
        StatusCode::OK,
    );
    let text = result["bits"][0]["text"].as_str().unwrap();
    assert!(text.contains("bee"), "{text}");
    expect_error(
        api.post("/v1/library/query", json!({"embedding": [1.0], "count": 1})),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_query",
    );
    expect_error(
        api.post("/v1/library/query", json!({})),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
}

fn openapi_lists_every_route(api: &Api) {
    let response = api.get("/v1/openapi.json");
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().unwrap();
    let document: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().unwrap();
    // Every documented route is served: no 404 no_route and no 405 for it.
    let mut count = 0;
    for (path, methods) in paths {
        for method in methods.as_object().unwrap().keys() {
            count += 1;
            let concrete = path
                .replace("{asset_id}", "a1")
                .replace("{id}", "m1")
                .replace("{session}", "s1");
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let response = api
                .client
                .request(method.clone(), api.url(&concrete))
                .send()
                .unwrap();
            let status = response.status();
            let body = response.text().unwrap();
            // The answer's own error code (`/v1/status` quotes earlier errors' codes).
            let code = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|b| b["error"]["code"].as_str().map(str::to_owned));
            assert!(
                status != StatusCode::METHOD_NOT_ALLOWED && code.as_deref() != Some("no_route"),
                "{method} {concrete}: {status} {body}"
            );
        }
    }
    assert_eq!(count, 41);
}

#[test]
fn every_route_on_sqlite() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let running = start(Stores::open(dir.path()).unwrap(), HostOptions::default());
    let api = Api::new(&running);
    exercise_every_route(&api);
    openapi_lists_every_route(&api);
}

/// A server over a fresh data directory holding one artifact whose content is the file
/// `artifacts/plans/p.json`: the directory, the server, its client and the artifact's id.
fn a_saved_plan_file() -> (tempfile::TempDir, Running, Api, String) {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let running = start(Stores::open(dir.path()).unwrap(), HostOptions::default());
    let api = Api::new(&running);
    let saved = ok(
        api.post(
            "/v1/artifacts",
            json!({"scope": "chat-1", "key": "plan", "type": "plan", "name": "The plan",
                   "content": "steps", "storage": "write_to_file", "storage_id": "plans/p.json"}),
        ),
        StatusCode::CREATED,
    );
    let id = saved["artifact"]["id"].as_str().unwrap().to_owned();
    (dir, running, api, id)
}

/// An artifact whose file went missing is a fault of the service (500), but of a kind the
/// client can act on: the answer used to say `internal`, where rest.md promises
/// `artifact_content_missing` (the details, the storage id and backend, stay in the log).
#[test]
fn a_missing_artifact_file_keeps_its_code() {
    let (dir, _running, api, id) = a_saved_plan_file();
    std::fs::remove_file(dir.path().join("artifacts/plans/p.json")).unwrap();
    let message = expect_error(
        api.get(&format!("/v1/artifacts/{id}")),
        StatusCode::INTERNAL_SERVER_ERROR,
        "artifact_content_missing",
    );
    assert!(!message.contains("plans/p.json"), "{message}");
}

/// Content that is there but cannot be read as text is damaged: a 500 whose message names no
/// file (it was a 503 `storage_unavailable` that sent the file's absolute path to the caller,
/// and told it to retry what retrying cannot mend).
#[test]
fn damaged_artifact_content_is_a_500_that_names_no_path() {
    let (dir, _running, api, id) = a_saved_plan_file();
    std::fs::write(dir.path().join("artifacts/plans/p.json"), [0xff, 0xfe]).unwrap();
    let message = expect_error(
        api.get(&format!("/v1/artifacts/{id}")),
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
    );
    let root = dir.path().to_string_lossy().into_owned();
    assert!(
        !message.contains("p.json") && !message.contains(&root),
        "{message}"
    );
    // Nor does the ring of recent errors that every read key of the namespace sees.
    let status = ok(api.get("/v1/status"), StatusCode::OK).to_string();
    assert!(
        !status.contains("plans/p.json") && status.contains("internal"),
        "{status}"
    );
}

#[test]
fn every_route_on_postgres() {
    crypto();
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("server_routes").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let stores = Stores::open_with(dir.path(), &OpenOptions::postgres(url)).unwrap();
    let running = start(stores, HostOptions::default());
    let api = Api::new(&running);
    exercise_every_route(&api);
    openapi_lists_every_route(&api);
}

#[test]
fn the_served_document_equals_the_checked_in_file() {
    crypto();
    let checked_in = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/openapi.json"
    ))
    .expect("docs/openapi.json: run `cargo xtask codegen`");
    assert_eq!(
        checked_in,
        mnemon_server::openapi::document_text(),
        "docs/openapi.json is stale: run `cargo xtask codegen` and commit it"
    );
}

#[test]
fn the_server_sweeps_expired_records_periodically() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let stores = Stores::open(dir.path()).unwrap();
    let mut config = ServerConfig::open(service_of(stores.clone()));
    config.gc_interval = std::time::Duration::from_millis(200);
    let running = start_with(config, HostOptions::default());
    let api = Api::new(&running);
    ok(
        api.put("/v1/assets/brief?ttl_seconds=1", json!({"content": 1})),
        StatusCode::OK,
    );
    ok(
        api.put("/v1/assets/kept", json!({"content": 2})),
        StatusCode::OK,
    );
    ok(
        api.post(
            "/v1/memory/sessions/s/messages?ttl_seconds=1",
            json!({"messages": [{"name": "user", "content": "brief"}]}),
        ),
        StatusCode::OK,
    );
    // The server's sweep removes the expired rows (after 1 s, within a few sweeps): waited
    // for in the file, where rows are counted expired or not, then a sweep by hand finds
    // nothing.
    wait_for_rows(
        &dir.path().join("mnemon.sqlite3"),
        "SELECT (SELECT count(*) FROM asset_assets) + (SELECT count(*) FROM memory_messages)",
        1,
    );
    let by_hand = Service::new(stores).gc().unwrap();
    assert_eq!((by_hand.assets, by_hand.messages), (0, 0), "{by_hand:?}");
    ok(api.get("/v1/assets/kept"), StatusCode::OK);
}

#[test]
fn readiness_fails_when_the_database_is_gone() {
    crypto();
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("server_ready").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let stores = Stores::open_with(dir.path(), &OpenOptions::postgres(url.clone())).unwrap();
    let running = start(stores, HostOptions::default());
    let api = Api::new(&running);
    assert_eq!(api.get("/readyz").status(), StatusCode::OK);
    // Drop the database under the server: its connections are terminated.
    let mut admin = server.connect("postgres").unwrap();
    let name = url.rsplit('/').next().unwrap().to_owned();
    admin
        .batch_execute(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
        .unwrap();
    expect_error(
        api.get("/readyz"),
        StatusCode::SERVICE_UNAVAILABLE,
        "not_ready",
    );
    // A route's 503 says the storage is unavailable, and names neither the database nor its
    // user and host (it sent the driver's whole error, `database "…" on … as user "…"`).
    let message = expect_error(
        api.get("/v1/assets"),
        StatusCode::SERVICE_UNAVAILABLE,
        "storage_unavailable",
    );
    assert!(
        !message.contains(&name) && !message.contains("as user"),
        "{message}"
    );
    assert!(message.contains("storage is unavailable"), "{message}");
    // Nor does a marker that a render leaves because the storage failed (the answer is a 200
    // that lists it, and its message was the driver's whole error).
    let rendered = ok(
        api.post(
            "/v1/refs/render",
            json!({"text": "see <|asset://a/content|>"}),
        ),
        StatusCode::OK,
    );
    let left = rendered["unresolved"][0]["message"].as_str().unwrap();
    assert!(
        !left.contains(&name) && !left.contains("as user") && left.contains("could not be read"),
        "{rendered}"
    );
}

#[test]
fn a_busy_server_answers_503_with_retry_after() {
    crypto();
    // One request slot, a short queue: a second request while the first holds the slot is
    // refused (the host's --max-concurrent-queries applies to /v1 too).
    let dir = tempfile::tempdir().unwrap();
    let options = HostOptions {
        max_concurrent_queries: 1,
        queue_timeout: std::time::Duration::from_millis(50),
        ..HostOptions::default()
    };
    let running = start(Stores::open(dir.path()).unwrap(), options);
    let api = Api::new(&running);
    // A slow request: a body that trickles in holds nothing, so hold the slot with many
    // concurrent writes instead and look for at least one 503 among them.
    let messages: Vec<Value> = (0..2000)
        .map(|i| json!({"name": "u", "content": format!("message {i} with some words to store")}))
        .collect();
    // All eight are sent together, so they meet at the slot on any machine.
    let together = std::sync::Barrier::new(8);
    let statuses: Vec<(StatusCode, Option<String>, Value)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let (api, together) = (&api, &together);
                let messages = messages.clone();
                scope.spawn(move || {
                    together.wait();
                    let response = api.post(
                        &format!("/v1/memory/sessions/busy{t}/messages"),
                        json!({"messages": messages}),
                    );
                    let retry = response
                        .headers()
                        .get("retry-after")
                        .map(|v| v.to_str().unwrap().to_owned());
                    let (status, body) = json_of(response);
                    (status, retry, body)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let busy: Vec<_> = statuses
        .iter()
        .filter(|(s, _, _)| *s == StatusCode::SERVICE_UNAVAILABLE)
        .collect();
    assert!(!busy.is_empty(), "no request was refused: {statuses:?}");
    for (_, retry, body) in busy {
        assert_eq!(retry.as_deref(), Some("1"));
        assert_eq!(body["error"]["code"], "busy");
    }
    assert!(statuses.iter().any(|(s, _, _)| *s == StatusCode::OK));
}

#[test]
fn the_inspector_and_mcp_are_mounted_beside_the_library_host() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let running = start(Stores::open(dir.path()).unwrap(), HostOptions::default());
    let api = Api::new(&running);
    // A browser's GET / is still the host's query page, now with a link to the inspector.
    let page = api
        .client
        .get(api.url("/"))
        .header("accept", "text/html")
        .send()
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let text = page.text().unwrap();
    assert!(text.contains(r#"<form method="post" action="/""#), "{text}");
    assert!(text.contains(r#"<a href="/ui/">"#), "{text}");
    // The inspector.
    let ui = api.get("/ui/");
    assert_eq!(ui.status(), StatusCode::OK);
    assert!(
        ui.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(
        ui.text()
            .unwrap()
            .contains("<title>Mnemon inspector</title>")
    );
    assert_eq!(api.get("/ui/app.js").status(), StatusCode::OK);
    // The Polymath endpoint answers queries as before.
    let answer = ok(
        api.post(
            "/",
            json!({"version": 1, "query_embedding_model": sample_model(), "count": 2}),
        ),
        StatusCode::OK,
    );
    assert!(
        answer["bits"].as_array().is_some_and(|b| !b.is_empty()),
        "{answer}"
    );
    // MCP at /mcp: a real client lists the tools and searches the host's library.
    let base = running.base.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        use rmcp::ServiceExt as _;
        let client = ()
            .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
                format!("{base}/mcp"),
            ))
            .await
            .unwrap();
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        for tool in ["remember", "recall", "put_asset", "search_library"] {
            assert!(names.contains(&tool), "{names:?}");
        }
        let Value::Object(arguments) = json!({"text": "how do bees keep warm", "count": 1}) else {
            unreachable!()
        };
        let found = client
            .call_tool(
                rmcp::model::CallToolRequestParams::new("search_library").with_arguments(arguments),
            )
            .await
            .unwrap();
        assert_ne!(found.is_error, Some(true), "{found:?}");
        assert!(format!("{found:?}").contains("bee"), "{found:?}");
    });
}

/// A JSON-RPC request to `/mcp` with the headers an MCP client sends.
fn mcp_post(api: &Api, body: &Value) -> reqwest::blocking::RequestBuilder {
    api.client
        .post(api.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(body.to_string())
}

/// One JSON-RPC request to `/mcp` from a client that accepts gzip, as the MCP TypeScript SDK's
/// `fetch` does: the answer's `Content-Encoding` (if any) and its body.
fn mcp_post_accepting_gzip(api: &Api, body: Value) -> (Option<String>, Vec<u8>) {
    let response = mcp_post(api, &body)
        .header("accept-encoding", "gzip")
        .send()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let encoding = response
        .headers()
        .get("content-encoding")
        .map(|v| v.to_str().unwrap().to_owned());
    (encoding, response.bytes().unwrap().to_vec())
}

/// `remember` of `messages` in `session`, posted to `/mcp`: the HTTP status and body.
fn mcp_remember(api: &Api, session: &str, messages: &[Value]) -> (StatusCode, Value) {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "remember", "arguments": {"session": session, "messages": messages}}});
    let response = mcp_post(api, &call).send().unwrap();
    json_of(response)
}

/// `/mcp` is under the host's limits as the REST routes are: the body limit, and one request
/// slot per call. Before, the MCP transport read bodies under its own 4 MiB and calls held no
/// slot, so `--max-body-bytes` and `--max-concurrent-queries` did not bound MCP clients.
#[test]
fn mcp_calls_are_under_the_body_limit_and_the_request_slots() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let options = HostOptions {
        max_body_bytes: 64 * 1024,
        max_concurrent_queries: 1,
        queue_timeout: std::time::Duration::from_millis(50),
        ..HostOptions::default()
    };
    let running = start(Stores::open(dir.path()).unwrap(), options);
    let api = Api::new(&running);
    let messages = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"name": "u", "content": format!("message {i} with some words to store")}))
            .collect()
    };
    // About 100 KB: over the body limit.
    let (status, body) = mcp_remember(&api, "big", &messages(2_000));
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    // Under it, calls at once contend for the one slot: some wait past the queue timeout.
    let together = std::sync::Barrier::new(8);
    let statuses: Vec<(StatusCode, Value)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let (api, together) = (&api, &together);
                let messages = messages(800);
                scope.spawn(move || {
                    together.wait();
                    mcp_remember(api, &format!("busy{t}"), &messages)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let busy: Vec<_> = statuses
        .iter()
        .filter(|(s, _)| *s == StatusCode::SERVICE_UNAVAILABLE)
        .collect();
    assert!(!busy.is_empty(), "no call was refused: {statuses:?}");
    for (_, body) in busy {
        assert_eq!(body["error"]["code"], "busy", "{body}");
    }
    assert!(statuses.iter().any(|(s, body)| {
        *s == StatusCode::OK && body["result"]["structuredContent"]["added"] == 800
    }));
}

/// `/mcp` takes the bodies the host's limit allows: rmcp's own 4 MiB default refused larger
/// calls (413 in its plain-text form) that `--max-body-bytes` let through.
#[test]
fn mcp_takes_bodies_up_to_the_hosts_limit() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let options = HostOptions {
        max_body_bytes: 8 * 1024 * 1024,
        ..HostOptions::default()
    };
    let running = start(Stores::open(dir.path()).unwrap(), options);
    let api = Api::new(&running);
    let big = json!({"name": "u", "content": "word ".repeat(1024 * 1024)});
    let (status, body) = mcp_remember(&api, "big", &[big]);
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"]["structuredContent"]["added"], 1, "{body}");
}

#[test]
fn mcp_answers_are_not_compressed() {
    // A tool result is a few KB at most, and on loopback inflating it cost the TypeScript
    // SDK's fetch about 0.5 ms a call (docs/reference/mcp.md#http): /mcp answers plain JSON.
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let running = start(Stores::open(dir.path()).unwrap(), HostOptions::default());
    let api = Api::new(&running);
    let messages: Vec<Value> = (0..8)
        .map(|i| json!({"name": "user", "content": format!("note {i}: the build on host 3 took {i} s, and the cache was cold again")}))
        .collect();
    let (_, added) = mcp_post_accepting_gzip(
        &api,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "remember", "arguments": {"session": "s", "messages": messages}}}),
    );
    let added: Value = serde_json::from_slice(&added).unwrap();
    assert_eq!(added["result"]["structuredContent"]["added"], 8, "{added}");
    let (encoding, body) = mcp_post_accepting_gzip(
        &api,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "recall", "arguments": {"session": "s", "recent": 8}}}),
    );
    assert_eq!(encoding, None);
    // Large enough that the REST routes would compress it.
    assert!(body.len() > 1_000, "{}", body.len());
    let recalled: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        recalled["result"]["structuredContent"]["messages"]
            .as_array()
            .map(Vec::len),
        Some(8),
        "{recalled}"
    );
    // The REST routes still compress for a client that accepts it (so this test can tell).
    let openapi = api
        .client
        .get(api.url("/v1/openapi.json"))
        .header("accept-encoding", "gzip")
        .send()
        .unwrap();
    assert_eq!(
        openapi
            .headers()
            .get("content-encoding")
            .map(|v| v.to_str().unwrap()),
        Some("gzip")
    );
}

#[test]
fn metrics_count_requests_by_route_and_status() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let running = start(Stores::open(dir.path()).unwrap(), HostOptions::default());
    let api = Api::new(&running);
    assert_eq!(
        api.get("/v1/assets/secret-id-1").status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.get("/v1/assets/secret-id-2").status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(api.get("/v1/assets").status(), StatusCode::OK);
    // The Polymath endpoint (served by mnemon-host) is counted like the /v1 routes.
    ok(
        api.post(
            "/",
            json!({"version": 1, "query_embedding_model": sample_model(), "count": 2}),
        ),
        StatusCode::OK,
    );
    assert_eq!(api.get("/no/such/path").status(), StatusCode::NOT_FOUND);
    let response = api.get("/metrics");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = response.text().unwrap();
    assert!(
        text.contains(
            "mnemon_http_requests_total{method=\"GET\",route=\"/v1/assets/{asset_id}\",status=\"404\"} 2\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "mnemon_http_requests_total{method=\"GET\",route=\"/v1/assets\",status=\"200\"} 1\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "mnemon_http_request_duration_seconds_count{route=\"/v1/assets/{asset_id}\"} 2\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("mnemon_http_requests_total{method=\"POST\",route=\"/\",status=\"200\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("mnemon_http_request_duration_seconds_count{route=\"/\"} 1\n"),
        "{text}"
    );
    // A path no route serves is one bounded label, never the path.
    assert!(
        text.contains(
            "mnemon_http_requests_total{method=\"GET\",route=\"unmatched\",status=\"404\"} 1\n"
        ),
        "{text}"
    );
    assert!(!text.contains("no/such"), "{text}");
    assert!(text.contains("# TYPE mnemon_http_request_duration_seconds histogram"));
    // The /metrics request itself is in flight while it renders.
    assert!(
        text.contains("mnemon_http_requests_in_flight 1\n"),
        "{text}"
    );
    // Patterns, never concrete paths.
    assert!(!text.contains("secret-id"), "{text}");
}

/// Installs ring as the process-wide rustls provider if none is: the workspace builds reqwest
/// without a default provider (mnemon-embed's `rustls-no-provider`), and once a workspace build
/// unifies that feature every reqwest client (rmcp's too) needs one, even for `http://` URLs.
fn crypto() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Waits up to 30 s for `count` (a query counting rows of the SQLite file at `path`) to be
/// `expected`, then asserts it: for what a server does in the background.
pub(crate) fn wait_for_rows(path: &std::path::Path, count: &str, expected: i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut found: i64 = conn.query_row(count, [], |r| r.get(0)).unwrap();
    while found != expected && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        found = conn.query_row(count, [], |r| r.get(0)).unwrap();
    }
    assert_eq!(found, expected, "{count}");
}
