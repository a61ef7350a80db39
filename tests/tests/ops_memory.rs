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
