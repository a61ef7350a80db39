//! API keys on every route and every MCP tool (docs/reference/rest.md#authentication): the real
//! server on 127.0.0.1:0 with a key store, on SQLite and on PostgreSQL. Every route refuses no
//! key, a wrong, malformed or revoked key (401), a read key on a writing route (403), and a key
//! of another namespace sees only its own namespace.

use std::path::Path;

use mnemon_keys::{KeyStore, KeyStoreOptions, Namespace, Role as KeyRole};
use mnemon_ops::OpsError;
use mnemon_server::{KeyAuthenticator, Tenants};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::*;

/// A server with keys, and one key of each kind.
struct Keyed {
    running: Running,
    /// acme, admin.
    admin: String,
    /// acme, write.
    write: String,
    /// acme, read.
    read: String,
    /// globex, admin.
    other: String,
    /// acme, admin, revoked.
    revoked: String,
    /// acme's write key with a wrong secret.
    wrong: String,
}

/// Starts a keyed server whose stores live in `root` (SQLite) or at `postgres`.
fn keyed(root: &Path, postgres: Option<String>) -> Keyed {
    let options = KeyStoreOptions::default();
    let store = match &postgres {
        Some(url) => KeyStore::open_postgres(url, options),
        None => KeyStore::open_sqlite(root.join("mnemon.sqlite3"), options),
    }
    .unwrap();
    let acme: Namespace = "acme".parse().unwrap();
    let globex: Namespace = "globex".parse().unwrap();
    let key = |namespace: &Namespace, role| {
        store
            .create(namespace, role, "test")
            .unwrap()
            .key()
            .to_owned()
    };
    let admin = key(&acme, KeyRole::Admin);
    let write = key(&acme, KeyRole::Write);
    let read = key(&acme, KeyRole::Read);
    let other = key(&globex, KeyRole::Admin);
    let revoked = key(&acme, KeyRole::Admin);
    // The key's id: between `mnk_` and the second `_` (docs/reference/keys.md).
    store.revoke(&revoked[4..20]).unwrap();
    let last = if write.ends_with('0') { '1' } else { '0' };
    let wrong = format!("{}{last}", &write[..write.len() - 1]);
    assert!(!store.any_keys().unwrap() || store.authenticate(&wrong).is_err());

    let root = root.to_path_buf();
    let base = match postgres {
        Some(url) => OpenOptions::postgres(url),
        None => OpenOptions::default(),
    };
    let tenants = Tenants::new(move |namespace: &Namespace| {
        let options = base.clone().with_namespace(namespace.clone());
        let stores =
            Stores::open_with(&root, &options).map_err(|e| OpsError::invalid(e.to_string()))?;
        Ok(service_of(stores))
    });
    let config = ServerConfig {
        tenants,
        authenticator: Arc::new(KeyAuthenticator::new(Arc::new(store))),
        ready_namespace: acme,
        allowed_hosts: None,
        gc_interval: mnemon_server::DEFAULT_GC_INTERVAL,
    };
    Keyed {
        running: start_with(config, HostOptions::default()),
        admin,
        write,
        read,
        other,
        revoked,
        wrong,
    }
}

/// A client sending `Authorization: Bearer <key>` on every request.
fn api_with(running: &Running, key: &str) -> Api {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}").parse().unwrap(),
    );
    Api {
        client: Client::builder().default_headers(headers).build().unwrap(),
        base: running.base.clone(),
    }
}

/// Every documented route that needs a role, as (method, concrete path, role).
fn guarded_routes(api: &Api) -> Vec<(reqwest::Method, String, String)> {
    let document = ok(api.get("/v1/openapi.json"), StatusCode::OK);
    let mut routes = Vec::new();
    for (path, methods) in document["paths"].as_object().unwrap() {
        for (method, operation) in methods.as_object().unwrap() {
            let Some(role) = operation["x-mnemon-role"].as_str() else {
                continue;
            };
            assert_eq!(
                operation["security"],
                json!([{"bearer": []}]),
                "{method} {path} declares the bearer scheme"
            );
            let concrete = path
                .replace("{asset_id}", "a1")
                .replace("{id}", "m1")
                .replace("{session}", "s1");
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            routes.push((method, concrete, role.to_owned()));
        }
    }
    routes
}

/// A refused key: 401, the error shape, `WWW-Authenticate: Bearer`.
fn expect_401(response: Response, what: &str) {
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    let (status, body) = json_of(response);
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {body}");
    assert_eq!(body["error"]["code"], "unauthorized", "{what}: {body}");
    assert!(body["error"]["message"].is_string(), "{what}: {body}");
    assert!(
        challenge.unwrap_or_default().starts_with("Bearer"),
        "{what}"
    );
}

fn every_route_refuses_bad_keys(keyed: &Keyed) {
    let anonymous = Api::new(&keyed.running);
    let routes = guarded_routes(&anonymous);
    // Every documented route but the document itself and `/readyz`.
    assert_eq!(routes.len(), 39, "{routes:?}");
    let wrong = api_with(&keyed.running, &keyed.wrong);
    let revoked = api_with(&keyed.running, &keyed.revoked);
    let malformed = api_with(&keyed.running, "mnk_not_a_key");
    let read = api_with(&keyed.running, &keyed.read);
    let write = api_with(&keyed.running, &keyed.write);
    let basic = {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            "Basic dTpw".parse().unwrap(),
        );
        Api {
            client: Client::builder().default_headers(headers).build().unwrap(),
            base: keyed.running.base.clone(),
        }
    };
    let mut writing = 0;
    for (method, path, role) in &routes {
        let what = |who: &str| format!("{method} {path} with {who}");
        for (who, api) in [
            ("no key", &anonymous),
            ("a wrong key", &wrong),
            ("a revoked key", &revoked),
            ("a malformed key", &malformed),
            ("Basic credentials", &basic),
        ] {
            let response = api
                .client
                .request(method.clone(), api.url(path))
                .json(&json!({}))
                .send()
                .unwrap();
            expect_401(response, &what(who));
        }
        if role != "read" {
            writing += 1;
            let response = read
                .client
                .request(method.clone(), read.url(path))
                .json(&json!({}))
                .send()
                .unwrap();
            let message = expect_error(response, StatusCode::FORBIDDEN, "forbidden");
            assert!(
                message.contains(role.as_str()),
                "{}: {message}",
                what("a read key")
            );
        }
        if role == "admin" {
            let response = write
                .client
                .request(method.clone(), write.url(path))
                .json(&json!({}))
                .send()
                .unwrap();
            expect_error(response, StatusCode::FORBIDDEN, "forbidden");
        }
    }
    assert!(writing >= 10, "{writing} writing routes");
    // Metrics: traffic of every namespace, for admin keys only; no key in them.
    expect_401(anonymous.get("/metrics"), "/metrics with no key");
    expect_error(write.get("/metrics"), StatusCode::FORBIDDEN, "forbidden");
    let metrics = api_with(&keyed.running, &keyed.admin).get("/metrics");
    assert_eq!(metrics.status(), StatusCode::OK);
    let text = metrics.text().unwrap();
    assert!(text.contains("status=\"401\""), "{text}");
    for key in [&keyed.admin, &keyed.write, &keyed.read, &keyed.wrong] {
        assert!(
            !text.contains(&key[4..20]),
            "a key id in the metrics: {text}"
        );
    }
    // The open routes stay open: liveness, readiness, the document.
    assert_eq!(anonymous.get("/healthz").status(), StatusCode::OK);
    assert_eq!(anonymous.get("/readyz").status(), StatusCode::OK);
}

fn namespaces_are_isolated(keyed: &Keyed) {
    let acme = api_with(&keyed.running, &keyed.write);
    let globex = api_with(&keyed.running, &keyed.other);
    ok(
        acme.put(
            "/v1/assets/iso1",
            json!({"asset_type": "labels", "content": {"labels": ["acme secret"]}}),
        ),
        StatusCode::OK,
    );
    // Stored without an embedding (adds embed by default now): iso-m2 alone is a candidate.
    ok(
        acme.post(
            "/v1/memory/sessions/iso/messages?embed=false",
            json!({"messages": [{"id": "iso-m1", "name": "user", "content": "acme's plans"}]}),
        ),
        StatusCode::OK,
    );
    ok(
        acme.post(
            "/v1/memory/sessions/iso-embedded/messages?embed=true",
            json!({"messages": [{"id": "iso-m2", "name": "user", "content": "acme's plans"}]}),
        ),
        StatusCode::OK,
    );
    let search = json!({"query": {"text": "acme's plans"}, "top_k": 10});
    let found = ok(
        acme.post("/v1/memory/search", search.clone()),
        StatusCode::OK,
    );
    assert_eq!(found["hits"][0]["message"]["id"], "iso-m2", "{found}");
    // globex sees none of it.
    let theirs = ok(globex.post("/v1/memory/search", search), StatusCode::OK);
    assert_eq!(
        theirs["hits"],
        json!([]),
        "a search across sessions left its namespace"
    );
    expect_error(
        globex.get("/v1/assets/iso1"),
        StatusCode::NOT_FOUND,
        "asset_not_found",
    );
    for path in [
        "/v1/assets",
        "/v1/memory/sessions",
        "/v1/memory/sessions/iso/messages",
    ] {
        let response = globex.get(path);
        let text = response.text().unwrap();
        assert!(
            !text.contains("acme"),
            "{path} shows acme's data to globex: {text}"
        );
    }
    // Its own asset of the same id is its own.
    ok(
        globex.put(
            "/v1/assets/iso1",
            json!({"asset_type": "labels", "content": {"labels": ["globex"]}}),
        ),
        StatusCode::OK,
    );
    let mine = ok(acme.get("/v1/assets/iso1"), StatusCode::OK);
    assert_eq!(mine["asset"]["content"], json!({"labels": ["acme secret"]}));
    let theirs = ok(globex.get("/v1/assets/iso1"), StatusCode::OK);
    assert_eq!(theirs["asset"]["content"], json!({"labels": ["globex"]}));
    // A read key reads its namespace.
    let read = api_with(&keyed.running, &keyed.read);
    ok(read.get("/v1/assets/iso1"), StatusCode::OK);

    // The status: a read key reads it, with its namespace's errors only; the errors of
    // requests without an accepted key are for admin keys.
    expect_error(
        read.get("/v1/assets/acme-missing-1"),
        StatusCode::NOT_FOUND,
        "asset_not_found",
    );
    expect_error(
        globex.get("/v1/assets/globex-missing-1"),
        StatusCode::NOT_FOUND,
        "asset_not_found",
    );
    expect_401(
        Api::new(&keyed.running).get("/v1/status"),
        "/v1/status with no key",
    );
    // Answers of no namespace (no route, no such method): the admins of every namespace see
    // them, so their messages, which quote the path, are not kept.
    expect_error(
        globex.get("/v1/nothing/globex-secret-path"),
        StatusCode::NOT_FOUND,
        "no_route",
    );
    let wrong_method = globex.send(reqwest::Method::PATCH, "/v1/assets/globex-secret-id", None);
    expect_error(
        wrong_method,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
    let mine = ok(read.get("/v1/status"), StatusCode::OK);
    assert_eq!(mine["namespace"], "acme", "{mine}");
    let text = mine["recent_errors"].to_string();
    assert!(text.contains("acme-missing-1"), "{mine}");
    assert!(!text.contains("globex-missing-1"), "{mine}");
    assert!(!text.contains("\"status\":401"), "{mine}");
    let theirs = ok(globex.get("/v1/status"), StatusCode::OK).to_string();
    assert!(theirs.contains("globex-missing-1"), "{theirs}");
    assert!(!theirs.contains("acme-missing-1"), "{theirs}");
    let admin = ok(
        api_with(&keyed.running, &keyed.admin).get("/v1/status"),
        StatusCode::OK,
    );
    assert!(
        admin["recent_errors"]
            .to_string()
            .contains("\"status\":401"),
        "{admin}"
    );
    let unmatched = admin["recent_errors"].to_string();
    assert!(unmatched.contains("\"no_route\""), "{admin}");
    assert!(unmatched.contains("\"method_not_allowed\""), "{admin}");
    assert!(!unmatched.contains("globex-secret"), "{admin}");
    for key in [&keyed.admin, &keyed.write, &keyed.read, &keyed.wrong] {
        assert!(
            !admin.to_string().contains(&key[4..]),
            "a key in the status: {admin}"
        );
    }
}

async fn call(peer: &Peer<RoleClient>, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    peer.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|e| panic!("{tool}: protocol error {e}"))
}

/// The text of a tool result.
fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// A tool error's code.
fn tool_error_code(result: &CallToolResult, what: &str) -> String {
    assert_eq!(result.is_error, Some(true), "{what}: {}", text_of(result));
    let body: Value = serde_json::from_str(&text_of(result)).unwrap();
    body["error"]["code"].as_str().unwrap().to_owned()
}

fn mcp_tools_obey_keys(keyed: &Keyed) {
    let base = keyed.running.base.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use rmcp::ServiceExt as _;
        let connect = |key: &str| {
            let config = StreamableHttpClientTransportConfig::with_uri(format!("{base}/mcp"))
                .auth_header(key.to_owned());
            ().serve(StreamableHttpClientTransport::from_config(config))
        };
        // Refused keys never reach MCP: the HTTP answer is the REST 401.
        let http = reqwest::Client::new();
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}});
        for (who, key) in [
            ("no key", None),
            ("a wrong key", Some(&keyed.wrong)),
            ("a revoked key", Some(&keyed.revoked)),
        ] {
            let mut request = http
                .post(format!("{base}/mcp"))
                .header("accept", "application/json, text/event-stream")
                .json(&initialize);
            if let Some(key) = key {
                request = request.bearer_auth(key);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{who}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], "unauthorized", "{who}");
            assert!(
                connect(key.map_or("", String::as_str)).await.is_err(),
                "{who}"
            );
        }

        let writer = connect(&keyed.write).await.unwrap();
        let reader = connect(&keyed.read).await.unwrap();
        let stranger = connect(&keyed.other).await.unwrap();
        let remembered = call(
            &writer,
            "remember",
            json!({"session": "chat", "messages": [{"name": "user", "content": "acme only"}]}),
        )
        .await;
        assert_ne!(remembered.is_error, Some(true), "{}", text_of(&remembered));
        let put = call(
            &writer,
            "put_asset",
            json!({"asset": {"asset_id": "report", "content": {"n": 1}}}),
        )
        .await;
        assert_ne!(put.is_error, Some(true), "{}", text_of(&put));

        // A read key: every writing tool is a `forbidden` tool error; reading tools work.
        for (tool, arguments) in [
            (
                "remember",
                json!({"session": "chat", "messages": [{"name": "user", "content": "no"}]}),
            ),
            ("forget", json!({"session": "chat"})),
            (
                "put_asset",
                json!({"asset": {"asset_id": "x", "content": {"n": 2}}}),
            ),
            (
                "save_artifact",
                json!({"scope": "s", "key": "k", "type": "plan", "name": "P", "content": "c"}),
            ),
        ] {
            let result = call(&reader, tool, arguments).await;
            assert_eq!(tool_error_code(&result, tool), "forbidden", "{tool}");
        }
        let sessions = call(&reader, "list_sessions", json!({})).await;
        assert_ne!(sessions.is_error, Some(true), "{}", text_of(&sessions));
        assert!(text_of(&sessions).contains("chat"));

        // Another namespace's key sees only its own (empty) namespace.
        let theirs = call(&stranger, "list_sessions", json!({})).await;
        assert_eq!(
            theirs.structured_content.as_ref().unwrap()["sessions"],
            json!([])
        );
        let recalled = call(&stranger, "recall", json!({"session": "chat"})).await;
        assert_eq!(tool_error_code(&recalled, "recall"), "session_not_found");
        let described = call(&stranger, "describe_asset", json!({"asset_id": "report"})).await;
        assert_eq!(
            tool_error_code(&described, "describe_asset"),
            "asset_not_found"
        );
        let listed = call(&stranger, "list_assets", json!({})).await;
        assert!(!text_of(&listed).contains("report"), "{}", text_of(&listed));
    });
}

fn keys_suite(keyed: &Keyed) {
    // With the namespace's admin key, every route works as without keys.
    exercise_every_route(&api_with(&keyed.running, &keyed.admin));
    every_route_refuses_bad_keys(keyed);
    namespaces_are_isolated(keyed);
    mcp_tools_obey_keys(keyed);
}

#[test]
fn keys_guard_every_route_and_tool_on_sqlite() {
    crate::crypto();
    let dir = tempfile::tempdir().unwrap();
    let keyed = keyed(dir.path(), None);
    keys_suite(&keyed);
}

#[test]
fn keys_guard_every_route_and_tool_on_postgres() {
    crate::crypto();
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("server_keys").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let keyed = keyed(dir.path(), Some(url));
    keys_suite(&keyed);
}

/// The periodic sweep covers the namespace of every valid key, even one no request has used
/// since the server started.
#[test]
fn the_sweep_covers_the_namespaces_of_keys_never_served() {
    crate::crypto();
    let dir = tempfile::tempdir().unwrap();
    let store = KeyStore::open_sqlite(
        dir.path().join("mnemon.sqlite3"),
        KeyStoreOptions::default(),
    )
    .unwrap();
    let acme: Namespace = "acme".parse().unwrap();
    let quiet: Namespace = "quiet".parse().unwrap();
    store.create(&quiet, KeyRole::Read, "never used").unwrap();
    let root = dir.path().to_path_buf();
    let open = move |namespace: &Namespace| {
        let options = OpenOptions::default().with_namespace(namespace.clone());
        Stores::open_with(&root, &options).map_err(|e| OpsError::invalid(e.to_string()))
    };
    // An expiring asset in `quiet`, written behind the server's back.
    let quiet_stores = open(&quiet).unwrap();
    let asset = serde_json::json!({"content": 1});
    Service::new(quiet_stores.clone())
        .asset_put_at_expiring(
            "brief",
            serde_json::from_value(asset).unwrap(),
            mnemon_ops::expiry::ExpiryInput::after(std::time::Duration::from_secs(1)),
        )
        .unwrap();
    let opener = open.clone();
    let config = ServerConfig {
        tenants: Tenants::new(move |namespace: &Namespace| Ok(Service::new(opener(namespace)?))),
        authenticator: Arc::new(KeyAuthenticator::new(Arc::new(store))),
        ready_namespace: acme,
        allowed_hosts: None,
        gc_interval: std::time::Duration::from_millis(200),
    };
    let _running = start_with(config, HostOptions::default());
    // The server's sweep removes it (after 1 s, within a few sweeps): then a sweep by hand
    // finds nothing.
    crate::wait_for_rows(
        &dir.path().join("mnemon.sqlite3"),
        "SELECT count(*) FROM asset_assets WHERE namespace = 'quiet'",
        0,
    );
    let by_hand = Service::new(quiet_stores).gc().unwrap();
    assert_eq!(by_hand.assets, 0, "{by_hand:?}");
}
