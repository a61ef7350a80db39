//! `GET /v1/status`, `GET /v1/artifacts/scopes` and the counts of `GET /v1/memory/sessions`
//! (docs/reference/rest.md#status, #artifacts, #memory) on SQLite and on PostgreSQL: the
//! version, the backend without a password, the namespace's sizes, the limits, a provoked error
//! in the recent errors (by route pattern, never the raw path), the artifact scopes a page at a
//! time, and each session's message count and last activity in both orders.

use super::*;

/// A password no status may show.
const PASSWORD: &str = "Sup3r-S3cret-pw";

fn save_artifact(api: &Api, scope: &str, key: &str) {
    ok(
        api.post(
            "/v1/artifacts",
            json!({"scope": scope, "key": key, "type": "plan", "name": "P", "content": "c"}),
        ),
        StatusCode::CREATED,
    );
}

/// The shared checks; `kind` is the backend's `kind`.
fn status_suite(api: &Api, kind: &str) -> Value {
    // Seed: one asset, three artifact records in two scopes, two sessions.
    ok(
        api.put(
            "/v1/assets/st1",
            json!({"asset_type": "labels", "content": {"labels": ["x"]}}),
        ),
        StatusCode::OK,
    );
    for (scope, key) in [
        ("scope-b", "plan"),
        ("scope-a", "plan"),
        ("scope-b", "code"),
    ] {
        save_artifact(api, scope, key);
    }
    for session in ["st-chat-1", "st-chat-2"] {
        ok(
            api.post(
                &format!("/v1/memory/sessions/{session}/messages"),
                json!({"messages": [{"name": "user", "content": "hello"}]}),
            ),
            StatusCode::OK,
        );
    }
    // Provoke an error whose path holds an id.
    expect_error(
        api.get("/v1/assets/no-such-asset-77"),
        StatusCode::NOT_FOUND,
        "asset_not_found",
    );

    let status = ok(api.get("/v1/status"), StatusCode::OK);
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"), "{status}");
    assert_eq!(status["backend"]["kind"], kind, "{status}");
    assert_eq!(
        status["sizes"]["assets"],
        json!({"count": 1, "more": false}),
        "{status}"
    );
    assert_eq!(
        status["sizes"]["memory_threads"],
        json!({"count": 2, "more": false}),
        "{status}"
    );
    assert_eq!(status["sizes"]["messages"], 2, "{status}");
    let defaults = HostOptions::default();
    assert_eq!(
        status["limits"]["max_body_bytes"], defaults.max_body_bytes as u64,
        "{status}"
    );
    assert_eq!(
        status["limits"]["max_concurrent_queries"], defaults.max_concurrent_queries as u64,
        "{status}"
    );
    assert_eq!(
        status["limits"]["body_timeout_ms"],
        defaults.body_timeout.as_millis() as u64,
        "{status}"
    );
    let newest = &status["recent_errors"][0];
    assert_eq!(newest["method"], "GET", "{status}");
    assert_eq!(newest["route"], "/v1/assets/{asset_id}", "{status}");
    assert_eq!(newest["status"], 404, "{status}");
    assert_eq!(newest["code"], "asset_not_found", "{status}");
    assert!(
        newest["message"]
            .as_str()
            .unwrap()
            .contains("no-such-asset-77"),
        "{status}"
    );
    assert!(newest["at_ms"].as_i64().unwrap() > 1_700_000_000_000);
    // A route no route serves is recorded under `unmatched`, a body error with its code.
    expect_error(api.get("/v1/nothing"), StatusCode::NOT_FOUND, "no_route");
    let bad = api
        .client
        .post(api.url("/v1/assets"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .unwrap();
    expect_error(bad, StatusCode::BAD_REQUEST, "invalid_json");
    let status = ok(api.get("/v1/status"), StatusCode::OK);
    let errors = status["recent_errors"].as_array().unwrap();
    assert_eq!(errors[0]["code"], "invalid_json", "{status}");
    assert_eq!(errors[0]["route"], "/v1/assets", "{status}");
    assert_eq!(errors[1]["code"], "no_route", "{status}");
    assert!(
        !errors
            .iter()
            .any(|e| e["route"].as_str().unwrap().contains("no-such-asset")),
        "raw paths in the routes: {status}"
    );
    // Bounded: 60 more errors, 50 kept.
    for i in 0..60 {
        expect_error(
            api.get(&format!("/v1/assets/gone-{i}")),
            StatusCode::NOT_FOUND,
            "asset_not_found",
        );
    }
    let status = ok(api.get("/v1/status"), StatusCode::OK);
    let errors = status["recent_errors"].as_array().unwrap();
    // The namespace's last 50, and the unknown route's (no namespace: an admin sees it too,
    // from its own ring, which the namespace's errors do not push out).
    assert_eq!(errors.len(), 51, "{status}");
    assert_eq!(errors[50]["code"], "no_route", "{status}");
    assert!(errors[0]["message"].as_str().unwrap().contains("gone-59"));

    // The artifact scopes, a page at a time.
    let first = ok(api.get("/v1/artifacts/scopes?limit=1"), StatusCode::OK);
    assert_eq!(first["scopes"], json!(["scope-a"]), "{first}");
    let cursor = first["next_cursor"].as_str().unwrap();
    let second = ok(
        api.get(&format!("/v1/artifacts/scopes?limit=1&cursor={cursor}")),
        StatusCode::OK,
    );
    assert_eq!(second["scopes"], json!(["scope-b"]), "{second}");
    assert!(second.get("next_cursor").is_none(), "{second}");
    let all = ok(api.get("/v1/artifacts/scopes"), StatusCode::OK);
    assert_eq!(all["scopes"], json!(["scope-a", "scope-b"]), "{all}");
    let message = expect_error(
        api.get("/v1/artifacts/scopes?limit=0"),
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert!(message.contains("limit"), "{message}");
    expect_error(
        api.get("/v1/artifacts/scopes?cursor=!!"),
        StatusCode::BAD_REQUEST,
        "invalid_cursor",
    );
    sessions_with_counts(api);
    status
}

fn add(api: &Api, session: &str, n: usize) {
    let messages: Vec<Value> = (0..n)
        .map(|i| json!({"name": "user", "content": format!("message {i}")}))
        .collect();
    ok(
        api.post(
            &format!("/v1/memory/sessions/{session}/messages"),
            json!({"messages": messages}),
        ),
        StatusCode::OK,
    );
    // Apart in time, so last activity orders them.
    std::thread::sleep(std::time::Duration::from_millis(5));
}

fn session_ids(page: &Value) -> Vec<String> {
    page["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect()
}

/// `GET /v1/memory/sessions`: counts and last activity on every row, oldest first by default,
/// most recently written first with `order=activity`, paged in both orders.
fn sessions_with_counts(api: &Api) {
    // After st-chat-1 and st-chat-2 (one message each, written by the suite above).
    add(api, "sc-a", 3);
    add(api, "sc-b", 1);
    add(api, "sc-c", 2);
    add(api, "sc-b", 1);
    let created = ok(api.get("/v1/memory/sessions"), StatusCode::OK);
    assert_eq!(
        session_ids(&created),
        ["st-chat-1", "st-chat-2", "sc-a", "sc-b", "sc-c"],
        "{created}"
    );
    let counts: Vec<u64> = created["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["messages"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [1, 1, 3, 2, 2], "{created}");
    for session in created["sessions"].as_array().unwrap() {
        assert!(session["last_active_ms"].as_i64().unwrap() > 1_700_000_000_000);
        assert!(session["last_active"].as_str().unwrap().ends_with('Z'));
    }
    let by_activity = ok(
        api.get("/v1/memory/sessions?order=activity"),
        StatusCode::OK,
    );
    assert_eq!(
        session_ids(&by_activity),
        ["sc-b", "sc-c", "sc-a", "st-chat-2", "st-chat-1"],
        "{by_activity}"
    );
    let first = ok(
        api.get("/v1/memory/sessions?order=activity&limit=2"),
        StatusCode::OK,
    );
    assert_eq!(session_ids(&first), ["sc-b", "sc-c"], "{first}");
    assert_eq!(first["sessions"][0]["messages"], 2, "{first}");
    let cursor = first["next_cursor"].as_str().unwrap();
    let second = ok(
        api.get(&format!(
            "/v1/memory/sessions?order=activity&limit=2&cursor={cursor}"
        )),
        StatusCode::OK,
    );
    assert_eq!(session_ids(&second), ["sc-a", "st-chat-2"], "{second}");
    expect_error(
        api.get("/v1/memory/sessions?order=activity&cursor=!!"),
        StatusCode::BAD_REQUEST,
        "invalid_cursor",
    );
    let message = expect_error(
        api.get("/v1/memory/sessions?order=newest"),
        StatusCode::BAD_REQUEST,
        "invalid_query",
    );
    assert!(message.contains("activity"), "{message}");
}

#[test]
fn status_and_artifact_scopes_on_sqlite() {
    crate::crypto();
    let dir = tempfile::tempdir().unwrap();
    let running = start(Stores::open(dir.path()).unwrap(), HostOptions::default());
    let api = Api::new(&running);
    let status = status_suite(&api, "sqlite");
    assert_eq!(
        status["backend"]["data_dir"],
        dir.path().display().to_string()
    );
    assert_eq!(status["backend"]["vector_search"]["mode"], "exact");
    assert_eq!(status["namespace"], "default");
}

#[test]
fn status_and_artifact_scopes_on_postgres_without_the_password() {
    crate::crypto();
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("server_status").unwrap();
    // The test server trusts loopback, so a password in the URL is accepted and unused.
    let with_password = url.replacen("postgres@", &format!("postgres:{PASSWORD}@"), 1);
    assert!(with_password.contains(PASSWORD));
    let database = url.rsplit('/').next().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let stores = Stores::open_with(dir.path(), &OpenOptions::postgres(with_password)).unwrap();
    let running = start(stores, HostOptions::default());
    let api = Api::new(&running);
    let status = status_suite(&api, "postgres");
    assert_eq!(status["backend"]["database"], database, "{status}");
    assert_eq!(
        status["backend"]["hosts"],
        json!([format!("127.0.0.1:{}", server.port())]),
        "{status}"
    );
    let mode = status["backend"]["vector_search"]["mode"].as_str().unwrap();
    assert!(mode == "pgvector" || mode == "exact", "{status}");
    let text = api.get("/v1/status").text().unwrap();
    assert!(!text.contains(PASSWORD), "the password is shown: {text}");
    assert!(!text.contains("postgres:"), "user info is shown: {text}");
}
