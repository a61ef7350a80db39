//! SqliteMemory beyond the shared suite: reopening, scopes, other handles' writes, schema versions,
//! and the kill -9 crash test (docs/reference/memory.md#sqlite-memory,
//! docs/reference/memory.md#conformance check 11).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use mnemon_memory::{
    ExportOptions, ExportTarget, Exported, LoadSource, Memory, MemoryError, MemoryQuery, Scope,
    SqliteMemoryOptions, SqliteMemoryStore,
};
use mnemon_tests::fixture;
use mnemon_tests::memory_conformance::test_factory;
use serde_json::json;

fn open(path: &std::path::Path) -> Arc<SqliteMemoryStore> {
    SqliteMemoryStore::open_with_factory(path, SqliteMemoryOptions::default(), test_factory())
        .unwrap()
}

fn export_text(memory: &dyn Memory) -> String {
    match memory
        .export(ExportTarget::Json, &ExportOptions::default())
        .unwrap()
    {
        Exported::Json(text) => text,
        other => panic!("{other:?}"),
    }
}

#[test]
fn reopen_gives_the_same_thread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mnemon.sqlite3");
    let (messages, marks) = {
        let store = open(&path);
        let memory = store.memory(Scope::session("s")).unwrap();
        memory
            .load(
                LoadSource::Path(fixture("agentscope/export_v004.json")),
                false,
            )
            .unwrap();
        memory
            .mark(&["a0000000000000000000000000000005"], "pin")
            .unwrap();
        (
            memory.get_memory(&MemoryQuery::default()).unwrap(),
            memory.marks_of("a0000000000000000000000000000005").unwrap(),
        )
    };
    // The last handle checkpoints the WAL away: one file at rest.
    let wal = dir.path().join("mnemon.sqlite3-wal");
    assert!(!wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0);
    let store = open(&path);
    let memory = store.memory(Scope::session("s")).unwrap();
    assert_eq!(
        memory.get_memory(&MemoryQuery::default()).unwrap(),
        messages
    );
    assert_eq!(
        memory.marks_of("a0000000000000000000000000000005").unwrap(),
        marks
    );
    let expected = std::fs::read_to_string(fixture("agentscope/export_v004.json")).unwrap();
    assert_eq!(export_text(&memory), expected);
}

#[test]
fn scopes_are_separate_threads() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("m.sqlite3"));
    let a = store
        .memory(Scope {
            user_id: Some("u".into()),
            agent_id: None,
            session_id: Some("1".into()),
        })
        .unwrap();
    let b = store.memory(Scope::session("1")).unwrap();
    let default = store.memory(Scope::default()).unwrap();
    a.add(vec![json!({"name": "n", "content": "a"}).into()])
        .unwrap();
    assert_eq!((a.size().unwrap(), b.size().unwrap()), (1, 0));
    assert_eq!(default.size().unwrap(), 0);
    assert_eq!(store.threads().unwrap().len(), 3);
    assert!(store.drop_thread(&Scope::session("1")).unwrap());
    assert!(!store.drop_thread(&Scope::session("1")).unwrap());
    assert_eq!(store.threads().unwrap().len(), 2);
    assert_eq!(
        store.memory(Scope::session("")).unwrap_err(),
        MemoryError::InvalidScope {
            field: "session_id".into()
        }
    );
}

#[test]
fn existing_memory_never_creates_a_thread() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("m.sqlite3"));
    assert!(
        store
            .existing_memory(Scope::session("s"))
            .unwrap()
            .is_none()
    );
    assert!(store.threads().unwrap().is_empty());
    store
        .memory(Scope::session("s"))
        .unwrap()
        .add(vec![json!({"id": "x", "name": "n", "content": "a"}).into()])
        .unwrap();
    let found = store.existing_memory(Scope::session("s")).unwrap().unwrap();
    assert_eq!(found.size().unwrap(), 1);
    assert!(
        store
            .existing_memory(Scope::session("t"))
            .unwrap()
            .is_none()
    );
    assert_eq!(store.threads().unwrap(), vec![Scope::session("s")]);
    assert_eq!(
        store.existing_memory(Scope::session("")).unwrap_err(),
        MemoryError::InvalidScope {
            field: "session_id".into()
        }
    );
}

#[test]
fn other_handles_writes_are_seen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.sqlite3");
    let first = open(&path).memory(Scope::session("s")).unwrap();
    let second = open(&path).memory(Scope::session("s")).unwrap();
    first
        .add(vec![json!({"id": "x", "name": "n", "content": "a"}).into()])
        .unwrap();
    assert_eq!(second.size().unwrap(), 1);
    let report = second
        .add(vec![json!({"id": "x", "name": "n", "content": "a"}).into()])
        .unwrap();
    assert_eq!(report.skipped_duplicates, vec!["x"]);
    second.delete(&[0]).unwrap();
    assert_eq!(first.size().unwrap(), 0);
}

#[test]
fn newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.sqlite3");
    drop(open(&path));
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE memory_schema SET version = 99", [])
        .unwrap();
    drop(conn);
    let err = SqliteMemoryStore::open(&path, SqliteMemoryOptions::default()).unwrap_err();
    assert_eq!(
        err,
        MemoryError::SchemaVersion {
            found: 99,
            supported: 7
        }
    );
}

const CHILD_ENV: &str = "MNEMON_MEMORY_CRASH_CHILD_DB";
const RUN_ENV: &str = "MNEMON_MEMORY_CRASH_CHILD_RUN";
const BATCH: usize = 1000;

fn batch_id(run: usize, batch: usize, i: usize) -> String {
    format!("r{run:03}-b{batch:06}-m{i:04}")
}

/// The child half of the crash test: adds batches forever, printing `ACK <last id>` after
/// each `add` returns, until the parent kills it. Without the parent's environment it does
/// nothing.
#[test]
fn crash_child() {
    let (Ok(path), Ok(run)) = (std::env::var(CHILD_ENV), std::env::var(RUN_ENV)) else {
        return;
    };
    let run: usize = run.parse().unwrap();
    let store = SqliteMemoryStore::open(&path, SqliteMemoryOptions::default()).unwrap();
    let memory = store.memory(Scope::session("crash")).unwrap();
    mnemon_tests::crash::say_ready();
    let mut out = std::io::stdout().lock();
    for batch in 0.. {
        let items = (0..BATCH)
            .map(|i| {
                json!({"id": batch_id(run, batch, i), "name": "n",
                       "content": "a message of about eighty characters, give or take a few"})
                .into()
            })
            .collect();
        memory.add(items).unwrap();
        writeln!(out, "ACK {}", batch_id(run, batch, BATCH - 1)).unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn acknowledged_adds_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mnemon.sqlite3");
    let exe = std::env::current_exe().unwrap();
    let mut acknowledged: Vec<String> = Vec::new();
    // A fixed LCG keeps the kill moments varied but reproducible.
    let mut seed: u64 = 0x5eed_1234;
    for run in 0..20 {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let delay = Duration::from_millis(60 + (seed >> 33) % 400);
        acknowledged.extend(mnemon_tests::crash::kill_after_ready(
            Command::new(&exe)
                .arg(crate::harness_name(module_path!(), "crash_child"))
                .args(["--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, &path)
                .env(RUN_ENV, run.to_string()),
            delay,
            "ACK ",
        ));
    }
    assert!(
        !acknowledged.is_empty(),
        "the child never acknowledged a batch; the test proves nothing"
    );

    let conn = rusqlite::Connection::open(&path).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);

    let store = SqliteMemoryStore::open(&path, SqliteMemoryOptions::default()).unwrap();
    let memory = store.memory(Scope::session("crash")).unwrap();
    let stored: Vec<String> = memory
        .get_memory(&MemoryQuery::default())
        .unwrap()
        .iter()
        .map(|m| m.id().to_owned())
        .collect();
    // No partial batch, and insertion order is the order the ids were generated in.
    assert_eq!(stored.len() % BATCH, 0, "a batch was partially stored");
    assert!(stored.windows(2).all(|w| w[0] < w[1]), "order was not kept");
    for chunk in stored.chunks(BATCH) {
        let prefix = &chunk[0][..12];
        assert!(chunk.iter().all(|id| id.starts_with(prefix)));
    }
    let present: std::collections::HashSet<&str> = stored.iter().map(String::as_str).collect();
    for last in &acknowledged {
        let prefix = &last[..12];
        for i in 0..BATCH {
            let id = format!("{prefix}-m{i:04}");
            assert!(present.contains(id.as_str()), "acknowledged {id} was lost");
        }
    }
    eprintln!(
        "crash test: {} acknowledged batches, {} messages stored",
        acknowledged.len(),
        stored.len()
    );
}

/// A recall through handles whose mirror is not current streams the stored vectors through
/// the store's recall index (docs/reference/memory.md#the-recall-index): with a beam covering
/// the thread, each answer is the exact scan's, across appends, deletes and re-reads by
/// other stores, and a handle's own mirror (the other path) agrees.
#[test]
fn streamed_recalls_through_the_recall_index_are_the_exact_scans() {
    use mnemon_memory::{RecallIndexOptions, RetrievalQuery, RetrieveOptions, Retrieved};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mnemon.sqlite3");
    let indexed = SqliteMemoryStore::open_with_factory(
        &path,
        SqliteMemoryOptions {
            recall_index: RecallIndexOptions {
                min_messages: 0,
                ef: Some(100_000),
                background: false,
            },
            ..SqliteMemoryOptions::default()
        },
        test_factory(),
    )
    .unwrap();
    let writer = open(&path);
    let scope = Scope::session("long");
    let memory = writer.memory(scope.clone()).unwrap();
    let vector = |i: u64| -> Vec<f32> {
        let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..16)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 2000) as f32 / 1000.0 - 1.0
            })
            .collect()
    };
    let add = |range: std::ops::Range<u64>| {
        let batch: Vec<mnemon_memory::MsgInput> = range
            .map(|i| {
                mnemon_memory::MsgInput::Json(json!({"id": format!("m{i}"), "name": "u",
                    "content": format!("message {i}"), "embedding": vector(i)}))
            })
            .collect();
        memory.add(batch).unwrap();
    };
    let key = |r: Vec<Retrieved>| -> Vec<(usize, u64, String)> {
        r.into_iter()
            .map(|r| (r.index, r.score.to_bits(), r.message.id().to_owned()))
            .collect()
    };
    let check = |round: &str| {
        for q in 0..5u64 {
            let query = RetrievalQuery::Vector(vector(10_000 + q));
            let options = RetrieveOptions {
                top_k: Some(7),
                preserve_order: false,
                ..RetrieveOptions::default()
            };
            let exact = RetrieveOptions {
                exact: true,
                ..options.clone()
            };
            let fresh = indexed
                .existing_memory_unshared(scope.clone())
                .unwrap()
                .unwrap();
            let got = key(fresh
                .retrieve_by_embedding(query.clone(), &options, None)
                .unwrap());
            let want = key(fresh
                .retrieve_by_embedding(query.clone(), &exact, None)
                .unwrap());
            let mirrored = key(memory.retrieve_by_embedding(query, &options, None).unwrap());
            assert_eq!(got, want, "{round}, query {q}");
            assert_eq!(got, mirrored, "{round}, query {q}");
        }
    };
    add(0..300);
    check("first");
    add(300..340);
    check("after an append");
    memory.delete_by_id(&["m3", "m150", "m339"]).unwrap();
    check("after deletes");
    add(340..500);
    check("after an append past a quarter of the index");
}

/// `Memory::for_each_message` through handles that have not read the thread: the rows are
/// streamed (not mirrored), each query gives what `get_memory` gives, and a stop decodes no
/// message past it (mnemon_tests::memory_conformance::streams_unread_threads).
#[test]
fn whole_thread_reads_stream_from_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("memory.sqlite3"));
    let scope = Scope::session("streamed");
    let memory = store.memory(scope.clone()).unwrap();
    mnemon_tests::memory_conformance::streams_unread_threads(&memory, &|| {
        Box::new(
            store
                .existing_memory_unshared(scope.clone())
                .unwrap()
                .unwrap(),
        )
    });
}
