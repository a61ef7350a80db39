//! The MCP server end to end through rmcp's own client: over streamable HTTP (axum on
//! 127.0.0.1:0) and over the byte-stream transport stdio uses (an in-process pipe; the spawned
//! `mnemon mcp` binary is tested in the CLI's tests). Every tool is listed and called, outputs
//! are checked against what the stores hold, and failures come back as tool errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use mnemon_library::Library;
use mnemon_mcp::mnemon_ops::{Service, Stores};
use mnemon_mcp::{HttpOptions, MnemonMcp};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

/// The sample library `mnemon serve` answers from by default (model mnemon:hashing-v1-512).
const SAMPLE: &[u8] = include_bytes!("../../mnemon/sample-library/library.json");
const MODEL: &str = "mnemon:hashing-v1-512";

/// Every tool the server offers, sorted.
const TOOLS: &[&str] = &[
    "describe_asset",
    "forget",
    "list_artifacts",
    "list_assets",
    "list_sessions",
    "load_artifacts",
    "put_asset",
    "recall",
    "remember",
    "resolve_asset",
    "save_artifact",
    "search_library",
];

fn server(dir: &std::path::Path) -> MnemonMcp {
    let embedder = mnemon_embed::embedder_for_model(MODEL).unwrap();
    let service = Service::new(Stores::open(dir).unwrap()).with_embedder(Arc::from(embedder));
    let library = Arc::new(Library::from_bytes(SAMPLE).unwrap());
    MnemonMcp::new(service).with_library(library)
}

async fn call(peer: &Peer<RoleClient>, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    peer.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|e| panic!("{tool}: protocol error {e}"))
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// A successful call's structured output, after checking that the text block carries the
/// same JSON after its summary line.
async fn ok(peer: &Peer<RoleClient>, tool: &str, arguments: Value) -> Value {
    let result = call(peer, tool, arguments).await;
    assert_ne!(
        result.is_error,
        Some(true),
        "{tool} failed: {}",
        text_of(&result)
    );
    let structured = result
        .structured_content
        .clone()
        .expect("structured content");
    let text = text_of(&result);
    let (summary, json) = text
        .split_once('\n')
        .expect("a summary line, then the JSON");
    assert!(!summary.is_empty() && summary.len() < 200, "{summary}");
    assert_eq!(serde_json::from_str::<Value>(json).unwrap(), structured);
    structured
}

/// A failed call's error code and message, after checking it is a tool error, not a protocol
/// error.
async fn tool_error(peer: &Peer<RoleClient>, tool: &str, arguments: Value) -> (String, String) {
    let result = call(peer, tool, arguments).await;
    assert_eq!(
        result.is_error,
        Some(true),
        "{tool} succeeded: {}",
        text_of(&result)
    );
    assert!(result.structured_content.is_none());
    let body: Value = serde_json::from_str(&text_of(&result)).unwrap();
    (
        body["error"]["code"].as_str().unwrap().to_owned(),
        body["error"]["message"].as_str().unwrap().to_owned(),
    )
}

/// Lists the tools and calls each one, checking the outputs; the scenario both transports run.
pub(crate) async fn exercise(peer: &Peer<RoleClient>) {
    let tools = peer.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(names, TOOLS);
    for tool in &tools {
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(description.len() > 80, "{}: {description}", tool.name);
        assert_eq!(tool.input_schema.get("type"), Some(&json!("object")));
        assert!(
            tool.output_schema.is_some(),
            "{} has no output schema",
            tool.name
        );
    }
    let remember = tools.iter().find(|t| t.name == "remember").unwrap();
    let required = remember.input_schema.get("required").unwrap();
    assert_eq!(required, &json!(["session", "messages"]));

    // Memory: remember, recall (latest, by query in a session, across sessions), sessions.
    let added = ok(
        peer,
        "remember",
        json!({"session": "chat-1", "messages": [
            {"name": "user", "role": "user", "content": "my cat is called Miso and likes tuna"},
            {"name": "assistant", "role": "assistant", "content": "noted: Miso likes tuna"},
            {"name": "user", "role": "user", "content": "the meeting moved to Thursday at noon"}
        ]}),
    )
    .await;
    assert_eq!(added, json!({"added": 3, "skipped_duplicates": []}));
    ok(
        peer,
        "remember",
        json!({"session": "chat-2", "marks": ["travel"], "messages": [
            {"name": "user", "content": "book a train to Lyon for Thursday"}
        ]}),
    )
    .await;

    let latest = ok(peer, "recall", json!({"session": "chat-1", "recent": 2})).await;
    let contents: Vec<&str> = latest["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents,
        [
            "noted: Miso likes tuna",
            "the meeting moved to Thursday at noon"
        ]
    );
    assert!(latest["messages"][0].get("score").is_none());

    let found = ok(
        peer,
        "recall",
        json!({"session": "chat-1", "query": "what does Miso the cat like", "top_k": 1}),
    )
    .await;
    let hits = found["messages"].as_array().unwrap();
    assert_eq!(hits.len(), 1);
    assert!(
        hits[0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("Miso")
    );
    assert!(hits[0]["score"].as_f64().is_some());
    assert!(hits[0]["message"].get("embedding").is_none());

    let everywhere = ok(
        peer,
        "recall",
        json!({"query": "train to Lyon", "top_k": 2}),
    )
    .await;
    let hits = everywhere["messages"].as_array().unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0]["session"], "chat-2");
    assert!(hits[0]["score"].as_f64().unwrap() >= hits[1]["score"].as_f64().unwrap());
    // A time-to-live: gone from every read once it passes.
    ok(
        peer,
        "remember",
        json!({"session": "chat-3", "ttl_seconds": 1,
               "messages": [{"name": "user", "content": "a train to Lyon, briefly"}]}),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let expired = ok(peer, "recall", json!({"session": "chat-3"})).await;
    assert_eq!(expired["messages"], json!([]), "{expired}");
    ok(peer, "forget", json!({"session": "chat-3"})).await;
    // Narrowed to a user: these sessions have none, so nothing.
    let nobody = ok(
        peer,
        "recall",
        json!({"query": "train to Lyon", "user_id": "nobody"}),
    )
    .await;
    assert_eq!(nobody["messages"], json!([]));
    let narrowed = ok(
        peer,
        "recall",
        json!({"session": "chat-1", "query": "Lyon", "user_id": "u1"}),
    )
    .await;
    assert_eq!(narrowed["messages"], json!([]));
    // By exact words: the one message naming Miso's food.
    let words = ok(peer, "recall", json!({"query": "tuna", "mode": "keyword"})).await;
    let hits = words["messages"].as_array().unwrap();
    assert_eq!(hits.len(), 2, "{words}");
    assert!(
        hits.iter()
            .all(|h| h["message"]["content"].as_str().unwrap().contains("tuna")),
        "{words}"
    );
    // A filter, before the top-k cut: only the assistant's message, even at top 1.
    let by_role = ok(
        peer,
        "recall",
        json!({"query": "train to Lyon", "top_k": 1,
               "filter": {"eq": {"path": "role", "value": "assistant"}}}),
    )
    .await;
    let hits = by_role["messages"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{by_role}");
    assert_eq!(hits[0]["message"]["role"], "assistant");
    let (code, message) = tool_error(
        peer,
        "recall",
        json!({"query": "Lyon", "filter": {"eq": {"path": "role"}}}),
    )
    .await;
    assert_eq!(code, "invalid_filter");
    assert!(message.contains("value"), "{message}");
    let marked = ok(
        peer,
        "recall",
        json!({"query": "Thursday", "mark": "travel"}),
    )
    .await;
    assert_eq!(marked["messages"].as_array().unwrap().len(), 1);

    let sessions = ok(peer, "list_sessions", json!({})).await;
    assert_eq!(
        sessions["sessions"],
        json!([{"session_id": "chat-1"}, {"session_id": "chat-2"}])
    );
    let first = ok(peer, "list_sessions", json!({"limit": 1})).await;
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let second = ok(peer, "list_sessions", json!({"cursor": cursor})).await;
    assert_eq!(second["sessions"], json!([{"session_id": "chat-2"}]));

    // Forget: one message, then a whole session.
    let id = latest["messages"][0]["message"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let forgot = ok(
        peer,
        "forget",
        json!({"session": "chat-1", "message_ids": [id, "nope"]}),
    )
    .await;
    assert_eq!(
        forgot,
        json!({"session": "chat-1", "session_deleted": false,
               "deleted_message_ids": [id], "not_found": ["nope"]})
    );
    let left = ok(peer, "recall", json!({"session": "chat-1"})).await;
    assert_eq!(left["messages"].as_array().unwrap().len(), 2);
    let dropped = ok(peer, "forget", json!({"session": "chat-2"})).await;
    assert_eq!(dropped["session_deleted"], true);
    let (code, message) = tool_error(peer, "recall", json!({"session": "chat-2"})).await;
    assert_eq!(code, "session_not_found");
    assert!(message.contains("list_sessions"), "{message}");

    // Assets: the model sees meta, resolves one part.
    let put = ok(
        peer,
        "put_asset",
        json!({"asset": {"asset_id": "report", "asset_type": "table",
            "description": "quarterly numbers",
            "content": {"rows": [{"q": 1, "revenue": 10}, {"q": 2, "revenue": 12}]}}}),
    )
    .await;
    assert_eq!(put["asset_id"], "report");
    assert_eq!(put["meta"]["asset_type"], "table");
    let binary = ok(
        peer,
        "put_asset",
        json!({"asset": {"asset_id": "logo", "content_type": "image/png",
            "content_base64": "iVBORw0KGgo="}}),
    )
    .await;
    let meta = ok(peer, "describe_asset", json!({"asset_id": "logo"})).await;
    assert_eq!(meta["meta"], binary["meta"]);
    assert!(
        !meta.to_string().contains("iVBORw0KGgo"),
        "meta shows the payload: {meta}"
    );
    let value = ok(
        peer,
        "resolve_asset",
        json!({"reference": "asset://report/content/rows/1/revenue"}),
    )
    .await;
    assert_eq!(value, json!({"value": 12}));
    let listed = ok(peer, "list_assets", json!({"asset_type": "table"})).await;
    assert_eq!(listed, json!({"asset_ids": ["report"]}));
    // A time-to-live, and a filter over meta fields and expiry.
    ok(
        peer,
        "put_asset",
        json!({"asset": {"asset_id": "scratch", "asset_type": "note", "content": "tmp"},
               "ttl_seconds": 3600}),
    )
    .await;
    let expiring = ok(
        peer,
        "list_assets",
        json!({"filter": {"exists": "expires_at"}}),
    )
    .await;
    assert_eq!(expiring, json!({"asset_ids": ["scratch"]}));
    let (code, message) = tool_error(
        peer,
        "list_assets",
        json!({"filter": {"eq": {"path": "asset_type"}}}),
    )
    .await;
    assert_eq!(code, "invalid_filter");
    assert!(message.contains("value"), "{message}");
    let (code, message) = tool_error(peer, "describe_asset", json!({"asset_id": "ghost"})).await;
    assert_eq!(code, "asset_not_found");
    assert!(message.contains("list_assets"), "{message}");
    let (code, _) = tool_error(peer, "resolve_asset", json!({"reference": "not a ref"})).await;
    assert_eq!(code, "invalid_input");

    // Artifacts: save twice under one key, load the newest into a prompt block.
    let saved = ok(
        peer,
        "save_artifact",
        json!({"scope": "task-7", "key": "plan", "type": "plan", "name": "Plan v1",
               "content": "1. collect 2. analyse"}),
    )
    .await;
    assert_eq!(saved["artifact"]["key"], "plan");
    assert_eq!(saved["content"], "1. collect 2. analyse");
    assert!(saved.get("expires_at_ms").is_none(), "{saved}");
    let brief = ok(
        peer,
        "save_artifact",
        json!({"scope": "task-8", "key": "note", "type": "note", "name": "Note",
               "content": "short-lived", "ttl_seconds": 60}),
    )
    .await;
    assert!(
        brief["expires_at_ms"].as_i64().unwrap() > 1_700_000_000_000,
        "{brief}"
    );
    ok(
        peer,
        "save_artifact",
        json!({"scope": "task-7", "key": "plan", "type": "plan", "name": "Plan v2",
               "content": "1. collect 2. analyse 3. report"}),
    )
    .await;
    let loaded = ok(
        peer,
        "load_artifacts",
        json!({"scope": "task-7", "text": "follow {plan} and {budget}"}),
    )
    .await;
    let block = loaded["text"].as_str().unwrap();
    assert!(
        block.contains("3. report") && !block.contains("Plan v1"),
        "{block}"
    );
    assert_eq!(loaded["missing_keys"], json!(["budget"]));
    let (code, _) = tool_error(peer, "load_artifacts", json!({"scope": "task-7"})).await;
    assert_eq!(code, "invalid_input");
    // Listing artifacts: the records of a scope (every version, in save order) without their
    // content; across scopes with a filter, each with its expiry.
    let listed = ok(peer, "list_artifacts", json!({"scope": "task-7"})).await;
    let records = listed["artifacts"].as_array().unwrap();
    let names: Vec<&str> = records
        .iter()
        .map(|r| r["artifact"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Plan v1", "Plan v2"], "{listed}");
    assert!(
        !listed.to_string().contains("1. collect"),
        "the listing carries content: {listed}"
    );
    assert!(listed.get("next_cursor").is_none(), "{listed}");
    let page = ok(
        peer,
        "list_artifacts",
        json!({"scope": "task-7", "limit": 1}),
    )
    .await;
    assert_eq!(page["artifacts"].as_array().unwrap().len(), 1, "{page}");
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let rest = ok(
        peer,
        "list_artifacts",
        json!({"scope": "task-7", "limit": 1, "cursor": cursor}),
    )
    .await;
    assert_eq!(
        rest["artifacts"][0]["artifact"]["name"], "Plan v2",
        "{rest}"
    );
    let notes = ok(
        peer,
        "list_artifacts",
        json!({"filter": {"eq": {"path": "type", "value": "note"}}}),
    )
    .await;
    assert_eq!(notes["artifacts"].as_array().unwrap().len(), 1, "{notes}");
    assert_eq!(notes["artifacts"][0]["artifact"]["scope"], "task-8");
    assert_eq!(
        notes["artifacts"][0]["expires_at_ms"],
        brief["expires_at_ms"]
    );
    let (code, message) = tool_error(
        peer,
        "list_artifacts",
        json!({"filter": {"eq": {"path": "nmae", "value": "x"}}}),
    )
    .await;
    assert_eq!(code, "invalid_filter");
    assert!(message.contains("nmae"), "{message}");

    // The library.
    let bits = ok(
        peer,
        "search_library",
        json!({"text": "how do bees keep warm in winter", "count": 2}),
    )
    .await;
    let bits = bits["bits"].as_array().unwrap();
    assert_eq!(bits.len(), 2);
    assert!(
        bits[0]["text"].as_str().unwrap().contains("bee"),
        "{}",
        bits[0]
    );
    assert!(bits[0].get("embedding").is_none());

    // Arguments that do not match the schema are a tool error too (rmcp's own text), so the
    // model can correct them.
    let wrong = call(peer, "remember", json!({"session": 3, "messages": []})).await;
    assert_eq!(wrong.is_error, Some(true));
    assert!(text_of(&wrong).contains("expected a string"), "{wrong:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_over_streamable_http() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(mnemon_mcp::serve_http(
        listener,
        server(dir.path()),
        HttpOptions::default(),
        async move {
            let _ = stopped.await;
        },
    ));
    let client = ()
        .serve(StreamableHttpClientTransport::from_uri(format!(
            "http://{addr}/mcp"
        )))
        .await
        .unwrap();
    exercise(&client).await;
    client.cancel().await.unwrap();
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_over_the_stdio_transport() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let running = tokio::spawn(async move {
        let served = server(dir.path()).serve(server_end).await.unwrap();
        served.waiting().await.unwrap();
    });
    let client = ().serve(client_end).await.unwrap();
    exercise(&client).await;
    client.cancel().await.unwrap();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_header_is_refused_by_default() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(mnemon_mcp::serve_http(
        listener,
        server(dir.path()),
        HttpOptions::default(),
        std::future::pending(),
    ));
    let answer = tokio::task::spawn_blocking(move || {
        reqwest::blocking::Client::new()
            .post(format!("http://{addr}/mcp"))
            .header("Host", "attacker.example")
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
            .send()
            .unwrap()
            .status()
    })
    .await
    .unwrap();
    assert_eq!(answer.as_u16(), 403);
}

/// A resolver as keys will use it: the bearer token picks the namespace; an unknown token is
/// denied. The hook of docs/reference/mcp.md#namespaces.
struct ByToken {
    a: Service,
    b: Service,
}

impl mnemon_mcp::ServiceResolver for ByToken {
    fn resolve(&self, call: &mnemon_mcp::Call<'_>) -> Result<Service, mnemon_mcp::Denied> {
        let token = call
            .request
            .and_then(|r| r.headers.get("authorization"))
            .and_then(|v| v.to_str().ok());
        match token {
            Some("Bearer key-a") => Ok(self.a.clone()),
            // key-b may only read.
            Some("Bearer key-b") if call.access == mnemon_mcp::Access::Read => Ok(self.b.clone()),
            Some("Bearer key-b") => Err(mnemon_mcp::Denied {
                code: "forbidden".into(),
                message: format!("{} writes, and this key may only read", call.tool),
            }),
            _ => Err(mnemon_mcp::Denied {
                code: "unauthorized".into(),
                message: "this key is not valid; ask for a key with `mnemon keys create`".into(),
            }),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resolver_picks_each_requests_namespace() {
    crypto();
    use mnemon_mcp::mnemon_ops::OpenOptions;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let dir = tempfile::tempdir().unwrap();
    let open = |ns: &str| {
        let options = OpenOptions::default().with_namespace(ns.parse().unwrap());
        Service::new(Stores::open_with(dir.path(), &options).unwrap())
    };
    let resolver = ByToken {
        a: open("tenant-a"),
        b: open("tenant-b"),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(mnemon_mcp::serve_http(
        listener,
        MnemonMcp::new(resolver),
        HttpOptions::default(),
        std::future::pending(),
    ));
    let connect = |token: &str| {
        let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
            .auth_header(token.to_owned());
        ().serve(StreamableHttpClientTransport::from_config(config))
    };
    let a = connect("key-a").await.unwrap();
    let b = connect("key-b").await.unwrap();
    let stranger = connect("key-x").await.unwrap();
    ok(
        &a,
        "remember",
        json!({"session": "s", "messages": [{"name": "user", "content": "only in a"}]}),
    )
    .await;
    let seen_by_a = ok(&a, "list_sessions", json!({})).await;
    assert_eq!(seen_by_a["sessions"], json!([{"session_id": "s"}]));
    let seen_by_b = ok(&b, "list_sessions", json!({})).await;
    assert_eq!(seen_by_b["sessions"], json!([]));
    let (code, _) = tool_error(&b, "recall", json!({"session": "s"})).await;
    assert_eq!(code, "session_not_found");
    let (code, message) = tool_error(
        &b,
        "remember",
        json!({"session": "s", "messages": [{"name": "user", "content": "no"}]}),
    )
    .await;
    assert_eq!(
        (code.as_str(), message.as_str()),
        ("forbidden", "remember writes, and this key may only read")
    );
    let (code, message) = tool_error(&stranger, "list_sessions", json!({})).await;
    assert_eq!(code, "unauthorized");
    assert!(message.contains("mnemon keys create"));
}

/// The endpoint mounted on the library host beside `POST /`, as mnemon-server composes its
/// routes (`Host::with_routes`), searching the host's library snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounted_on_the_library_host_it_searches_the_served_library() {
    crypto();
    use mnemon_host::{ConfigSource, Host, HostOptions, LibrarySource as Served, Sources};

    let dir = tempfile::tempdir().unwrap();
    let embedder = mnemon_embed::embedder_for_model(MODEL).unwrap();
    let service =
        Service::new(Stores::open(dir.path()).unwrap()).with_embedder(Arc::from(embedder));
    let sources = Sources {
        library: Served::bytes("sample", SAMPLE),
        config: ConfigSource::Defaults,
    };
    let host = Host::bind(
        "127.0.0.1:0".parse().unwrap(),
        sources,
        HostOptions::default(),
    )
    .await
    .unwrap();
    let handle = host.handle();
    let mcp = MnemonMcp::new(service)
        .with_library(move || Some(Box::new(handle.library()) as mnemon_mcp::LibraryGuard));
    let host = host.with_routes(mnemon_mcp::router(mcp, HttpOptions::default()));
    let addr = host.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(host.run(async move {
        let _ = stopped.await;
    }));
    let client = ()
        .serve(StreamableHttpClientTransport::from_uri(format!(
            "http://{addr}/mcp"
        )))
        .await
        .unwrap();
    let bits = ok(
        &client,
        "search_library",
        json!({"text": "how do bees keep warm in winter", "count": 1}),
    )
    .await;
    assert!(
        bits["bits"][0]["text"].as_str().unwrap().contains("bee"),
        "{bits}"
    );
    ok(
        &client,
        "remember",
        json!({"session": "s", "messages": [{"name": "user", "content": "hi"}]}),
    )
    .await;
    client.cancel().await.unwrap();
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

/// Installs ring as the process-wide rustls provider if none is: the workspace builds reqwest
/// without a default provider (mnemon-embed's `rustls-no-provider`), and once a workspace build
/// unifies that feature every reqwest client (rmcp's too) needs one, even for `http://` URLs.
fn crypto() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
