//! Crash test of the SQLite asset store: a child process putting assets is killed with SIGKILL
//! at a random moment, many times; after each kill every id it had reported is readable, intact,
//! and `PRAGMA integrity_check` is ok.
//!
//! The child is this test binary itself, re-run with [`CHILD_DB`] set so that only
//! [`crash_child`] does work.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mnemon_store::{AssetStore, SqliteAssetStore};
use mnemon_types::{Asset, Bytes, Map, Value};

/// Set in the child: the database to write to.
const CHILD_DB: &str = "MNEMON_ASSET_CRASH_CHILD_DB";
/// Set in the child: the first sequence number to use, so rounds never reuse ids.
const CHILD_START: &str = "MNEMON_ASSET_CRASH_CHILD_START";

fn crash_asset(n: u64) -> Asset {
    let mut content = Map::new();
    content.insert("n".into(), Value::from_json(serde_json::json!(n)));
    content.insert("text".into(), Value::String(format!("{n}").repeat(50)));
    content.insert(
        "blob".into(),
        Bytes::with_media_type(n.to_le_bytes().repeat(64), "application/x-test").into(),
    );
    Asset::new(Value::Map(content))
        .with_id(format!("crash-{n:08}"))
        .with_type("crash")
}

/// The child's work: put assets forever (single puts and batches of 5), printing each id as
/// soon as the call that stored it has returned.
#[test]
fn crash_child() {
    let Ok(db) = std::env::var(CHILD_DB) else {
        return;
    };
    let start: u64 = std::env::var(CHILD_START).unwrap().parse().unwrap();
    let store = SqliteAssetStore::open(db).unwrap();
    mnemon_tests::crash::say_ready();
    let mut out = std::io::stdout().lock();
    let mut n = start;
    loop {
        if n.is_multiple_of(3) {
            let batch: Vec<Asset> = (n..n + 5).map(crash_asset).collect();
            store.put_batch(&batch).unwrap();
            for a in &batch {
                writeln!(out, "PUT {}", a.asset_id).unwrap();
            }
            n += 5;
        } else {
            let a = crash_asset(n);
            store.put(&a).unwrap();
            writeln!(out, "PUT {}", a.asset_id).unwrap();
            n += 1;
        }
        out.flush().unwrap();
    }
}

#[test]
fn acknowledged_puts_survive_sigkill() {
    if std::env::var_os(CHILD_DB).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mnemon.sqlite3");
    let mut seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("seed {seed}");
    let mut random = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let exe = std::env::current_exe().unwrap();
    let mut acknowledged: Vec<String> = Vec::new();
    let started = Instant::now();
    let rounds = 25;
    for round in 0..rounds {
        let reported = mnemon_tests::crash::kill_after_ready(
            Command::new(&exe)
                .arg(crate::harness_name(module_path!(), "crash_child"))
                .args(["--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD_DB, &db)
                .env(CHILD_START, (round * 1_000_000).to_string()),
            Duration::from_millis(30 + random() % 400),
            "PUT ",
        );

        let conn = rusqlite::Connection::open(&db).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok", "round {round}");
        drop(conn);
        let store = SqliteAssetStore::open(&db).unwrap();
        for id in &reported {
            let n: u64 = id.trim_start_matches("crash-").parse().unwrap();
            let got = store
                .get(id)
                .unwrap()
                .unwrap_or_else(|| panic!("round {round}: acknowledged {id} is missing"));
            assert_eq!(got, crash_asset(n), "round {round}: {id} is damaged");
        }
        acknowledged.extend(reported);
    }
    // Later rounds never undo earlier ones.
    acknowledged.sort();
    let store = SqliteAssetStore::open(&db).unwrap();
    let mut stored = store.list_ids(Some("crash")).unwrap();
    stored.retain(|id| acknowledged.binary_search(id).is_ok());
    assert_eq!(stored.len(), acknowledged.len());
    println!(
        "{rounds} kills, {} acknowledged puts verified in {:?}",
        acknowledged.len(),
        started.elapsed()
    );
    assert!(
        acknowledged.len() > rounds as usize,
        "the child should have stored assets before most kills"
    );
}

/// The same crash test against the PostgreSQL asset store (issue 13; docs/postgres.md): the
/// child gets the database URL by environment variable, and after each SIGKILL every
/// acknowledged put is there, intact, and no batch is partly stored.
mod postgres {
    use super::*;
    use mnemon_store::{PostgresAssetOptions, PostgresAssetStore};

    /// Set in the child: the database URL to write to.
    const CHILD_URL: &str = "MNEMON_ASSET_PG_CRASH_CHILD_URL";

    fn open(url: &str) -> PostgresAssetStore {
        PostgresAssetStore::open(url, PostgresAssetOptions::default())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The ids the child's loop (see [`crash_child_postgres`]) writes from `start`, grouped as
    /// it writes them (a batch of 5, or a single put), until one reaches `end`.
    fn writes(start: u64, end: u64) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let mut n = start;
        while n < end {
            let len = if n.is_multiple_of(3) { 5 } else { 1 };
            out.push(
                (n..n + len)
                    .map(|i| crash_asset(i).asset_id)
                    .collect::<Vec<_>>(),
            );
            n += len;
        }
        out
    }

    /// The child: the same loop as [`crash_child`], against PostgreSQL.
    #[test]
    fn crash_child_postgres() {
        let Ok(url) = std::env::var(CHILD_URL) else {
            return;
        };
        let start: u64 = std::env::var(CHILD_START).unwrap().parse().unwrap();
        let store = open(&url);
        mnemon_tests::crash::say_ready();
        let mut out = std::io::stdout().lock();
        let mut n = start;
        loop {
            let len = if n.is_multiple_of(3) { 5 } else { 1 };
            let assets: Vec<Asset> = (n..n + len).map(crash_asset).collect();
            if len == 1 {
                store.put(&assets[0]).unwrap();
            } else {
                store.put_batch(&assets).unwrap();
            }
            for a in &assets {
                writeln!(out, "PUT {}", a.asset_id).unwrap();
            }
            out.flush().unwrap();
            n += len;
        }
    }

    #[test]
    fn acknowledged_puts_survive_sigkill_postgres() {
        if std::env::var_os(CHILD_URL).is_some() {
            return;
        }
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("asset_crash").unwrap();
        let mut seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        println!("seed {seed}");
        let mut random = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let exe = std::env::current_exe().unwrap();
        let mut acknowledged = 0;
        let rounds = 10;
        for round in 0..rounds {
            let start = round * 1_000_000;
            let reported = mnemon_tests::crash::kill_after_ready(
                Command::new(&exe)
                    .arg(crate::harness_name(module_path!(), "crash_child_postgres"))
                    .args(["--exact", "--nocapture", "--test-threads=1"])
                    .env(CHILD_URL, &url)
                    .env(CHILD_START, start.to_string()),
                Duration::from_millis(100 + random() % 400),
                "PUT ",
            );

            let store = open(&url);
            for id in &reported {
                let n: u64 = id.trim_start_matches("crash-").parse().unwrap();
                let got = store
                    .get(id)
                    .unwrap()
                    .unwrap_or_else(|| panic!("round {round}: acknowledged {id} is missing"));
                assert_eq!(got, crash_asset(n), "round {round}: {id} is damaged");
            }
            // Every group the child may have started is stored whole or not at all.
            let stored = store.list_ids(Some("crash")).unwrap();
            let this_round = |id: &String| {
                let n: u64 = id.trim_start_matches("crash-").parse().unwrap();
                (start..start + 1_000_000).contains(&n)
            };
            let end = stored
                .iter()
                .filter(|id| this_round(id))
                .map(|id| id.trim_start_matches("crash-").parse::<u64>().unwrap() + 1)
                .max()
                .unwrap_or(start);
            for group in writes(start, end) {
                let present = group
                    .iter()
                    .filter(|id| stored.binary_search(id).is_ok())
                    .count();
                assert!(
                    present == 0 || present == group.len(),
                    "round {round}: {present} of the batch {group:?} stored"
                );
            }
            acknowledged += reported.len();
        }
        println!("{rounds} kills, {acknowledged} acknowledged puts verified");
        assert!(
            acknowledged > rounds as usize,
            "the child should have stored assets before most kills"
        );
    }
}
