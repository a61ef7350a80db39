//! The service's memory writes on PostgreSQL (crates/mnemon-ops, `Service::writer`): handles
//! are kept open per recently written session so that an add does not reload its thread, but
//! never for a thread over 10,000 messages, so the kept handles' memory stays bounded. Reads
//! (recalls, listings of a session) go through the same kept handles.

use mnemon_ops::memory::{
    MemoryAddInput, MemoryGetInput, MemorySearchInput, MessageBody, MetricName, SearchQuery,
    SessionInput,
};
use mnemon_ops::{OpenOptions, Service, Stores};

fn add(service: &Service, session: &str, n: usize) {
    let messages = (0..n)
        .map(|i| MessageBody(serde_json::json!({"name": "u", "content": format!("m{i}")})))
        .collect();
    if let Err(error) = service.memory_add(MemoryAddInput {
        session: session.to_owned(),
        messages,
        marks: Vec::new(),
    }) {
        panic!("adding to {session}: {error}");
    }
}

#[test]
fn postgres_keeps_write_handles_for_small_threads_only() {
    let server = mnemon_tests::require_postgres!();
    let url = server
        .fresh_database("kept write handles")
        .unwrap_or_else(|error| panic!("{error}"));
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let stores = Stores::open_with(dir.path(), &OpenOptions::postgres(url))
        .unwrap_or_else(|error| panic!("{error}"));
    let service = Service::new(stores);
    add(&service, "a", 1);
    add(&service, "b", 1);
    add(&service, "a", 1);
    assert_eq!(service.kept_write_handles(), 2);
    // Past 10,000 messages the thread is written through fresh handles.
    add(&service, "big", 10_000);
    assert_eq!(service.kept_write_handles(), 3);
    add(&service, "big", 1);
    assert_eq!(service.kept_write_handles(), 2);
    add(&service, "big", 1);
    assert_eq!(service.kept_write_handles(), 2);
    // At most 64 sessions keep one.
    for i in 0..70 {
        add(&service, &format!("s{i}"), 1);
    }
    assert_eq!(service.kept_write_handles(), 64);
}

fn contents(service: &Service, session: &str) -> Result<Vec<String>, String> {
    service
        .memory_get(MemoryGetInput {
            session: session.to_owned(),
            recent: None,
            mark: None,
            exclude_mark: None,
            tokens: None,
            include_embeddings: false,
        })
        .map(|out| {
            out.messages
                .iter()
                .filter_map(|m| m.0["content"].as_str().map(str::to_owned))
                .collect()
        })
        .map_err(|error| error.code().to_owned())
}

fn nearest(service: &Service, session: &str, vector: [f32; 2]) -> String {
    let out = service
        .memory_search(MemorySearchInput {
            session: session.to_owned(),
            query: SearchQuery::Vector(vector.to_vec()),
            top_k: Some(1),
            metric: MetricName::Cosine,
            mark: None,
            exact: false,
            include_embeddings: false,
        })
        .unwrap_or_else(|error| panic!("searching {session}: {error}"));
    out.hits
        .first()
        .and_then(|hit| hit.message.0["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

fn say(service: &Service, session: &str, text: &str, embedding: [f32; 2]) {
    if let Err(error) = service.memory_add(MemoryAddInput {
        session: session.to_owned(),
        messages: vec![MessageBody(
            serde_json::json!({"name": "u", "content": text, "embedding": embedding}),
        )],
        marks: Vec::new(),
    }) {
        panic!("adding to {session}: {error}");
    }
}

/// A recall on PostgreSQL went through a fresh handle, which loaded and parsed the whole
/// thread first; it now goes through the session's kept write handle when there is one, which
/// must still see other servers' writes and deletes. Reads never open or keep a handle
/// themselves (a large session only read is never mirrored).
#[test]
fn postgres_reads_go_through_kept_handles_and_see_other_servers() {
    let server = mnemon_tests::require_postgres!();
    let url = server
        .fresh_database("kept read handles")
        .unwrap_or_else(|error| panic!("{error}"));
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let open = || {
        Stores::open_with(dir.path(), &OpenOptions::postgres(url.clone()))
            .unwrap_or_else(|error| panic!("{error}"))
    };
    let service = Service::new(open());
    let other = Service::new(open());
    say(&service, "r", "east", [1.0, 0.0]);
    assert_eq!(service.kept_write_handles(), 1);
    assert_eq!(nearest(&service, "r", [1.0, 0.1]), "east");
    // Another server writes: the kept handle's next read sees it.
    say(&other, "r", "north", [0.0, 1.0]);
    assert_eq!(nearest(&service, "r", [0.1, 1.0]), "north");
    assert_eq!(
        contents(&service, "r").as_deref(),
        Ok(&["east".to_owned(), "north".to_owned()][..])
    );
    // Another server deletes the session: reported missing, not read as empty.
    if let Err(error) = other.memory_session_delete(SessionInput {
        session: "r".to_owned(),
    }) {
        panic!("{error}");
    }
    assert_eq!(contents(&service, "r"), Err("session_not_found".to_owned()));
    // A missing session is neither created nor kept by a read.
    assert_eq!(
        contents(&service, "nope"),
        Err("session_not_found".to_owned())
    );
    assert!(other.stores().threads().unwrap_or_default().is_empty());
    // A session only read here is read through fresh handles, and not kept.
    let before = service.kept_write_handles();
    say(&other, "elsewhere", "west", [-1.0, 0.0]);
    assert_eq!(nearest(&service, "elsewhere", [-1.0, 0.1]), "west");
    assert_eq!(service.kept_write_handles(), before);
}

#[test]
fn postgres_recall_takes_its_hnsw_shortlist_from_the_recall_options() {
    let server = mnemon_tests::require_postgres!();
    let url = server
        .fresh_database("recall ef_search")
        .unwrap_or_else(|error| panic!("{error}"));
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let ef_search = |options: OpenOptions| {
        Stores::open_with(dir.path(), &options)
            .unwrap_or_else(|error| panic!("{error}"))
            .vector_search()
            .ef_search
    };
    // pgvector's own default, unless the server is told otherwise (`--recall-index-ef`).
    assert_eq!(ef_search(OpenOptions::postgres(url.clone())), Some(40));
    let recall = mnemon_ops::RecallOptions {
        index: mnemon_memory::RecallIndexOptions {
            ef: Some(120),
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(
        ef_search(OpenOptions::postgres(url.clone()).with_recall(recall)),
        Some(120)
    );
    // pgvector takes at most 1,000: the status says what a recall uses.
    let wide = mnemon_ops::RecallOptions {
        index: mnemon_memory::RecallIndexOptions {
            ef: Some(5_000),
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(
        ef_search(OpenOptions::postgres(url).with_recall(wide)),
        Some(1_000)
    );
}

/// Handles opened for many namespaces from clones of one `OpenOptions` (what a server does
/// for its tenants) share one pool for their stores and one for their memory stores'
/// background indexers (crates/mnemon-ops/src/pools.rs, docs/postgres.md#one-pool-per-database):
/// with thirty tenants open, each having written an asset, an artifact and messages whose
/// embeddings wait for the HNSW index, the process holds at most
/// `STORE_CONNECTIONS + INDEXER_CONNECTIONS` connections to the database (three pools a
/// tenant held at least ninety), the shared indexers index every tenant's messages, and each
/// tenant still sees only its own records.
#[test]
fn postgres_namespaces_share_one_pool() {
    let server = mnemon_tests::require_postgres!();
    let url = server
        .fresh_database("shared pools")
        .unwrap_or_else(|error| panic!("{error}"));
    let database = url.rsplit('/').next().unwrap_or_default().to_owned();
    let mut admin = server
        .connect(&database)
        .unwrap_or_else(|error| panic!("{error}"));
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let base = OpenOptions::postgres(url.clone());
    let message = |i: usize, n: usize| -> mnemon_memory::MsgInput {
        serde_json::json!({"id": format!("t{i}-{n}"), "name": "u", "content": "c",
                           "embedding": [1.0, i as f64 + n as f64]})
        .into()
    };
    let tenants: Vec<Stores> = (0..30)
        .map(|i| {
            let namespace = format!("tenant-{i}").parse().unwrap();
            let stores = Stores::open_with(dir.path(), &base.clone().with_namespace(namespace))
                .unwrap_or_else(|error| panic!("{error}"));
            let asset =
                mnemon_types::Asset::from_json(serde_json::json!({"asset_id": "a", "content": i}))
                    .unwrap();
            stores.assets().put(&asset).unwrap();
            stores
                .artifacts()
                .save(&mnemon_types::Artifact::new(
                    "chat",
                    "plan",
                    "plan",
                    format!("plan {i}"),
                ))
                .unwrap();
            let session = stores.session("s").unwrap();
            // The first creates the HNSW index of the dimension; later ones wait for the
            // background indexer.
            session.add(vec![message(i, 0)]).unwrap();
            session.add(vec![message(i, 1), message(i, 2)]).unwrap();
            stores
        })
        .collect();
    let connections = server
        .mnemon_connections(&url)
        .unwrap_or_else(|error| panic!("{error}"));
    let most = mnemon_ops::STORE_CONNECTIONS + mnemon_ops::INDEXER_CONNECTIONS;
    assert!(
        connections <= most as i64,
        "30 tenants hold {connections} connections, more than the {most} shared"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let pending: i64 = admin
            .query_one(
                "SELECT count(*) FROM memory_messages WHERE pending_dim IS NOT NULL",
                &[],
            )
            .unwrap()
            .get(0);
        if pending == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{pending} messages never left the shared indexers' queue"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for (i, stores) in tenants.iter().enumerate() {
        let ids: Vec<String> = stores
            .session("s")
            .unwrap()
            .get_memory(&mnemon_memory::MemoryQuery::default())
            .unwrap()
            .iter()
            .map(|m| m.id().to_owned())
            .collect();
        assert_eq!(ids, [0, 1, 2].map(|n| format!("t{i}-{n}")));
        let asset = stores.assets().get("a").unwrap().unwrap();
        assert_eq!(asset.content.to_json(), Some(serde_json::json!(i)));
        let artifact = stores.artifacts().latest("chat", "plan").unwrap().unwrap();
        assert_eq!(artifact.name, format!("plan {i}"));
    }
}

/// `PostgresPools::with_store_connections` bounds the stores' shared pool (`mnemon serve`
/// passes its `--max-concurrent-queries`): eight threads writing at once through four
/// namespaces hold at most its 3 connections, where the default pool (16) would open one per
/// thread.
#[test]
fn postgres_store_connections_follow_the_pool_size_asked() {
    let server = mnemon_tests::require_postgres!();
    let url = server
        .fresh_database("sized pool")
        .unwrap_or_else(|error| panic!("{error}"));
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let mut base = OpenOptions::postgres(url.clone());
    base.postgres_pools = mnemon_ops::PostgresPools::with_store_connections(3);
    let tenants: Vec<Stores> = (0..4)
        .map(|i| {
            let namespace = format!("sized-{i}").parse().unwrap();
            Stores::open_with(dir.path(), &base.clone().with_namespace(namespace))
                .unwrap_or_else(|error| panic!("{error}"))
        })
        .collect();
    std::thread::scope(|scope| {
        for t in 0..8 {
            let stores = &tenants[t % tenants.len()];
            scope.spawn(move || {
                for n in 0..20 {
                    let asset = mnemon_types::Asset::from_json(
                        serde_json::json!({"asset_id": format!("a{t}-{n}"), "content": n}),
                    )
                    .unwrap_or_else(|error| panic!("{error}"));
                    stores
                        .assets()
                        .put(&asset)
                        .unwrap_or_else(|error| panic!("{error}"));
                }
            });
        }
    });
    let connections = server
        .mnemon_connections(&url)
        .unwrap_or_else(|error| panic!("{error}"));
    // The stores' 3 and the indexers' 2 (no messages here: the indexers connect lazily).
    assert!(
        connections <= 3 + mnemon_ops::INDEXER_CONNECTIONS as i64,
        "{connections} connections for a stores' pool of 3"
    );
    for stores in &tenants {
        assert_eq!(
            stores
                .assets()
                .count_where(None)
                .unwrap_or_else(|error| panic!("{error}")),
            40
        );
    }
}
