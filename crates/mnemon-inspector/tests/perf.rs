//! The server time of the REST calls each inspector page makes, on a SQLite namespace of
//! 100,000 messages, on SQLite and on PostgreSQL (one session of 50,000 and 500 of 100), 1,000 assets and 300 artifacts:
//! the target is at most 100 ms per page. Ignored (it seeds for a while); run it with
//! `cargo test --release -p mnemon-inspector --test inspector -- --ignored --nocapture --test-threads 1 page_times`.
//! `status_counts` times `GET /v1/status` (whose sizes are counts) over 100,000 assets and
//! 100,000 artifact records.
//! Times are measured on the client over loopback, so they include the HTTP round trip.

use std::time::{Duration, Instant};

use mnemon_ops::Service;
use mnemon_ops::artifacts::ArtifactSaveInput;
use mnemon_ops::assets::{AssetBody, AssetPutInput};
use mnemon_ops::memory::{MemoryAddInput, MessageBody};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::start;

const BIG: usize = 50_000;
const SMALL_SESSIONS: usize = 500;
const SMALL: usize = 100;
const RUNS: usize = 10;

fn seed(service: &Service) {
    let message = |session: &str, i: usize| {
        MessageBody(
            json!({"name": if i.is_multiple_of(2) { "user" } else { "assistant" },
            "role": if i.is_multiple_of(2) { "user" } else { "assistant" },
            "content": format!("message {i} of {session}: the weather, the cat, the plan and step {}", i % 97)}),
        )
    };
    for start in (0..BIG).step_by(1_000) {
        service
            .memory_add(MemoryAddInput {
                session: "big".into(),
                messages: (start..start + 1_000).map(|i| message("big", i)).collect(),
                marks: vec![],
            })
            .unwrap();
    }
    for s in 0..SMALL_SESSIONS {
        let session = format!("s{s:04}");
        service
            .memory_add(MemoryAddInput {
                session: session.clone(),
                messages: (0..SMALL).map(|i| message(&session, i)).collect(),
                marks: vec![],
            })
            .unwrap();
    }
    for a in 0..1_000 {
        service
            .asset_put(AssetPutInput {
                asset: AssetBody {
                    asset_id: Some(format!("asset-{a:05}")),
                    asset_type: Some("table".into()),
                    content: Some(
                        json!({"rows": (0..20).collect::<Vec<_>>(), "title": format!("table {a}")}),
                    ),
                    asset_name: None,
                    description: None,
                    content_type: None,
                    content_base64: None,
                    extra: serde_json::Map::new(),
                },
            })
            .unwrap();
    }
    for a in 0..300 {
        service
            .artifact_save(ArtifactSaveInput {
                scope: "s0000".into(),
                key: format!("key-{}", a % 30),
                artifact_type: "plan".into(),
                name: format!("plan {a}"),
                description: None,
                content: json!({"steps": (0..10).collect::<Vec<_>>()}),
                storage: None,
                storage_id: None,
            })
            .unwrap();
    }
}

struct Timer {
    client: reqwest::blocking::Client,
    base: String,
}

impl Timer {
    fn once(&self, method: &Method, path: &str, body: Option<&Value>) -> Duration {
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(body);
        }
        let started = Instant::now();
        let response = request.send().unwrap();
        let status = response.status();
        let bytes = response.bytes().unwrap();
        let took = started.elapsed();
        assert!(
            status.is_success(),
            "{method} {path}: {status} {}",
            String::from_utf8_lossy(&bytes)
        );
        took
    }

    /// min / median / max of RUNS calls after one warm-up call, in ms.
    fn measure(&self, page: &str, method: Method, path: &str, body: Option<Value>) -> f64 {
        let first = self.once(&method, path, body.as_ref());
        let mut times: Vec<Duration> = (0..RUNS)
            .map(|_| self.once(&method, path, body.as_ref()))
            .collect();
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
        println!(
            "{page:<10} {method:<4} {path:<70} first {:>8.1}  min {:>7.1}  median {:>7.1}  max {:>7.1} ms",
            ms(first),
            ms(times[0]),
            ms(times[RUNS / 2]),
            ms(times[RUNS - 1])
        );
        ms(times[RUNS / 2])
    }
}

#[test]
#[ignore = "seeds 100,000 messages; run with --ignored --nocapture (release build)"]
fn page_times_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    page_times(mnemon_ops::Stores::open(dir.path()).unwrap(), None);
}

#[test]
#[ignore = "seeds 100,000 messages; run with --ignored --nocapture (release build)"]
fn page_times_postgres() {
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("inspector_page_times").unwrap();
    let database = url.rsplit('/').next().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let options = mnemon_ops::OpenOptions::postgres(url);
    // The searches run right after the seeding, before autovacuum's first `ANALYZE` of the
    // 100,000 rows (its naptime is a minute): then once more after one, the steady state.
    let analyze = || {
        server
            .connect(&database)
            .unwrap()
            .batch_execute("ANALYZE")
            .unwrap();
    };
    page_times(
        mnemon_ops::Stores::open_with(dir.path(), &options).unwrap(),
        Some(&analyze),
    );
}

fn page_times(stores: mnemon_ops::Stores, analyze: Option<&dyn Fn()>) {
    let started = Instant::now();
    seed(&Service::new(stores.clone()));
    println!(
        "seeded {} messages in {:.1} s",
        BIG + SMALL_SESSIONS * SMALL,
        started.elapsed().as_secs_f64()
    );
    let running = start(stores);
    crate::support::crypto();
    let t = Timer {
        client: reqwest::blocking::Client::new(),
        base: running.rest.clone(),
    };
    let get = Method::GET;
    let post = Method::POST;
    t.measure(
        "sessions",
        get.clone(),
        "/v1/memory/sessions?limit=25&order=activity",
        None,
    );
    let page: Value = t
        .client
        .get(format!(
            "{}/v1/memory/sessions?limit=250&order=activity",
            t.base
        ))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    t.measure(
        "sessions",
        get.clone(),
        &format!("/v1/memory/sessions?limit=25&order=activity&cursor={cursor}"),
        None,
    );
    t.measure(
        "sessions",
        get.clone(),
        "/v1/memory/sessions/s0001/messages?recent=1",
        None,
    );
    t.measure(
        "sessions",
        get.clone(),
        "/v1/memory/sessions/big/messages?recent=1",
        None,
    );
    t.measure(
        "session",
        get.clone(),
        "/v1/memory/sessions/s0001/messages?recent=50",
        None,
    );
    t.measure(
        "session",
        get.clone(),
        "/v1/memory/sessions/big/messages?recent=50",
        None,
    );
    t.measure(
        "session",
        get.clone(),
        "/v1/memory/sessions/big/messages?recent=50&tokens=1000",
        None,
    );
    let search = json!({"query": {"text": "the cat and the plan"}, "top_k": 5});
    t.measure(
        "session",
        post.clone(),
        "/v1/memory/sessions/s0001/search",
        Some(search.clone()),
    );
    t.measure(
        "session",
        post.clone(),
        "/v1/memory/sessions/big/search",
        Some(search),
    );
    // Search across sessions (the Sessions page), over all 100,000 messages: the two searches
    // above stored the embeddings of 50,100 of them; keyword and hybrid read every one.
    let across = |after: &str| {
        for (mode, filter) in [
            ("vector", None),
            ("keyword", None),
            ("hybrid", None),
            (
                "hybrid",
                Some(json!({"eq": {"path": "role", "value": "user"}})),
            ),
        ] {
            let mut body =
                json!({"query": {"text": "the cat and the plan"}, "mode": mode, "top_k": 10});
            if let Some(filter) = filter {
                body["filter"] = filter;
            }
            let page = if body.get("filter").is_some() {
                format!("{mode}+f{after}")
            } else {
                format!("{mode}{after}")
            };
            t.measure(&page, post.clone(), "/v1/memory/search", Some(body));
        }
    };
    across("");
    if let Some(analyze) = analyze {
        analyze();
        across(" (A)");
    }
    t.measure("assets", get.clone(), "/v1/assets?limit=50", None);
    t.measure(
        "assets",
        get.clone(),
        "/v1/assets?limit=50&asset_type=table",
        None,
    );
    t.measure("asset", get.clone(), "/v1/assets/asset-00500/meta", None);
    t.measure("asset", get.clone(), "/v1/assets/asset-00500/content", None);
    t.measure(
        "asset",
        get.clone(),
        "/v1/resolve?reference=asset://asset-00500/content/title",
        None,
    );
    t.measure(
        "artifacts",
        get.clone(),
        "/v1/artifacts?scope=s0000&limit=200",
        None,
    );
    t.measure(
        "artifacts",
        post.clone(),
        "/v1/artifacts/load",
        Some(json!({"scope": "s0000", "keys": ["key-1", "key-2", "key-3"]})),
    );
    t.measure("library", get.clone(), "/v1/library/bits?limit=1", None);
    t.measure(
        "library",
        post.clone(),
        "/v1/library/query",
        Some(json!({"text": "how do bees keep warm in winter", "count": 5})),
    );
    t.measure(
        "artifacts",
        get.clone(),
        "/v1/artifacts/scopes?limit=50",
        None,
    );
    t.measure("status", get.clone(), "/v1/status", None);
    t.measure("status", get.clone(), "/readyz", None);
    t.measure("status", get, "/v1/library/bits?limit=1", None);
}

/// Records for [`status_counts`]: 100,000 assets and 100,000 artifact records.
const COUNTED: usize = 100_000;

#[test]
#[ignore = "seeds 200,000 records; run with --ignored --nocapture (release build)"]
fn status_counts_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    status_counts(mnemon_ops::Stores::open(dir.path()).unwrap());
}

#[test]
#[ignore = "seeds 200,000 records; run with --ignored --nocapture (release build)"]
fn status_counts_postgres() {
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("inspector_status_counts").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = mnemon_ops::OpenOptions::postgres(url);
    status_counts(mnemon_ops::Stores::open_with(dir.path(), &options).unwrap());
}

/// The time of `GET /v1/status` over 100,000 assets and 100,000 artifact records: its sizes
/// are bounded reads (docs/reference/rest.md#status), so it stays as fast as on a small
/// namespace.
fn status_counts(stores: mnemon_ops::Stores) {
    let started = Instant::now();
    for start in (0..COUNTED).step_by(1_000) {
        let batch: Vec<mnemon_types::Asset> = (start..start + 1_000)
            .map(|i| {
                mnemon_types::Asset::new(json!({"title": format!("asset {i}")}))
                    .with_id(format!("asset-{i:06}"))
            })
            .collect();
        stores.assets().put_batch(&batch).unwrap();
    }
    let artifacts = stores.artifacts();
    for i in 0..COUNTED {
        let record = mnemon_types::Artifact::new(
            format!("scope-{:04}", i % 1_000),
            format!("key-{}", i % 7),
            "plan",
            "P",
        )
        .with_data(json!("c"));
        artifacts.save(&record).unwrap();
    }
    println!(
        "seeded {COUNTED} assets and {COUNTED} artifacts in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let running = start(stores);
    crate::support::crypto();
    let t = Timer {
        client: reqwest::blocking::Client::new(),
        base: running.rest.clone(),
    };
    let status: Value = t
        .client
        .get(format!("{}/v1/status", t.base))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        status["sizes"]["assets"],
        json!({"count": 1_000, "more": true}),
        "{status}"
    );
    t.measure("status", Method::GET, "/v1/status", None);
    t.measure(
        "artifacts",
        Method::GET,
        "/v1/artifacts/scopes?limit=50",
        None,
    );
}
