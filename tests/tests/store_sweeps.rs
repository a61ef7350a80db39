//! Issue 14, item 5: forgetting (and sweeping) 100,000 records takes seconds, not minutes, on
//! SQLite and PostgreSQL, for assets (with a bytes leaf each) and artifacts (1,000 of them
//! with a content file). Bounded measurements, run on demand:
//!
//! ```text
//! MNEMON_REQUIRE_POSTGRES=1 cargo test -p mnemon-tests --test integration store_sweeps \
//!     -- --ignored --nocapture --test-threads 1
//! ```
//!
//! Each prints the time of the timed call and fails above [`BOUND`]. The records are written
//! first (not timed), in batches, and the timed call runs through a handle with the default
//! durability (`Full`: one fsync per commit).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemon_artifacts::{ArtifactStore, BackendRegistry, StorageBackend, WriteToFile};
use mnemon_store::{AssetStore, Expiry, ManualClock};
use mnemon_types::{Artifact, Asset, Bytes, Map, StorageLocation, Value};

/// Records per measurement.
const N: usize = 100_000;

/// The most a measured call may take: "seconds, not minutes".
const BOUND: Duration = Duration::from_secs(60);

/// Artifacts that keep their content in a file.
const WITH_FILES: usize = 1_000;

fn asset(i: usize) -> Asset {
    let mut content = Map::new();
    content.insert("n".into(), Value::from_json(serde_json::json!(i)));
    content.insert("b".into(), Bytes::new(vec![7u8; 64]).into());
    Asset::new(Value::Map(content)).with_id(format!("user-1/{i:06}"))
}

fn timed<T>(what: &str, call: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = call();
    let took = started.elapsed();
    println!("{what}: {:.2} s", took.as_secs_f64());
    assert!(took < BOUND, "{what} took {took:?}");
    out
}

/// Writes `N` assets (half expiring at 1,001 ms) through `store`, in batches of 1,000.
fn fill_assets(store: &dyn AssetStore) {
    let assets: Vec<Asset> = (0..N).map(asset).collect();
    for (k, chunk) in assets.chunks(1_000).enumerate() {
        let expiry = if k % 2 == 0 {
            Expiry::At(1_001)
        } else {
            Expiry::Never
        };
        store.put_batch_expiring(chunk, expiry).unwrap();
    }
}

/// Saves `N` artifacts in scopes under `user-1/`, the first [`WITH_FILES`] with a file each,
/// half of them expiring at 1,001 ms.
fn fill_artifacts(store: &dyn ArtifactStore, files: &WriteToFile) {
    fill_artifacts_upto(store, files, N);
}

/// As [`fill_artifacts`], the first `upto` records.
fn fill_artifacts_upto(store: &dyn ArtifactStore, files: &WriteToFile, upto: usize) {
    for i in 0..upto {
        let mut a = Artifact::new(format!("user-1/session-{}", i % 100), "k", "t", "n");
        let expiry = if i % 2 == 0 {
            Expiry::At(1_001)
        } else {
            Expiry::Never
        };
        if i < WITH_FILES {
            let id = format!("f{i}.json");
            a.storage = Some(StorageLocation::new("write_to_file", id.clone()));
            store
                .save_expiring(&a, expiry, &mut || files.write(&id, &serde_json::json!(i)))
                .unwrap();
        } else {
            store.save_expiring(&a, expiry, &mut || Ok(())).unwrap();
        }
    }
}

fn files_left(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

mod sqlite {
    use super::*;
    use mnemon_artifacts::{SqliteArtifactOptions, SqliteArtifactStore};
    use mnemon_db::Durability;
    use mnemon_store::{SqliteAssetOptions, SqliteAssetStore};

    fn assets(path: &std::path::Path, durability: Durability) -> SqliteAssetStore {
        let options = SqliteAssetOptions {
            durability,
            clock: Arc::new(ManualClock::new(1_000)),
            ..SqliteAssetOptions::default()
        };
        SqliteAssetStore::open_with(path, options).unwrap()
    }

    #[test]
    #[ignore = "a measurement: run with --ignored --nocapture"]
    fn forget_and_gc_100k_assets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        fill_assets(&assets(&path, Durability::Normal));
        let clock = Arc::new(ManualClock::new(1_001));
        let store = SqliteAssetStore::open_with(
            &path,
            SqliteAssetOptions {
                clock,
                ..SqliteAssetOptions::default()
            },
        )
        .unwrap();
        let swept = timed("sqlite assets gc 50,000 of 100,000", || store.gc().unwrap());
        assert_eq!(swept, (N / 2) as u64);
        let forgotten = timed("sqlite assets forget 50,000", || {
            store.forget("user-1/").unwrap()
        });
        assert_eq!(forgotten, (N / 2) as u64);
        fill_assets(&assets(&path, Durability::Normal));
        let store = assets(&path, Durability::Full);
        let forgotten = timed("sqlite assets forget 100,000", || store.forget("").unwrap());
        assert_eq!(forgotten, N as u64);
        assert_eq!(store.count_where(None).unwrap(), 0);
    }

    #[test]
    #[ignore = "a measurement: run with --ignored --nocapture"]
    fn forget_100k_artifacts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let root = dir.path().join("files");
        let files = WriteToFile::new(&root);
        let open = |durability, now| {
            let options = SqliteArtifactOptions {
                durability,
                clock: Arc::new(ManualClock::new(now)),
                ..SqliteArtifactOptions::default()
            };
            SqliteArtifactStore::open_with(&path, options).unwrap()
        };
        fill_artifacts(&open(Durability::Normal, 1_000), &files);
        let registry = BackendRegistry::with_defaults(&root);
        let store = open(Durability::Full, 1_001);
        let swept = timed("sqlite artifacts gc 50,000 of 100,000 (500 files)", || {
            store.gc(&registry).unwrap()
        });
        assert_eq!(
            (swept.records, swept.content_removed),
            ((N / 2) as u64, 500)
        );
        let swept = timed("sqlite artifacts forget 50,000 (500 files)", || {
            store.forget("user-1/", &registry).unwrap()
        });
        assert_eq!(
            (swept.records, swept.content_removed),
            ((N / 2) as u64, 500)
        );
        assert_eq!(files_left(&root), 0);
        fill_artifacts(&open(Durability::Normal, 1_000), &files);
        let swept = timed("sqlite artifacts forget 100,000 (1,000 files)", || {
            store.forget("", &registry).unwrap()
        });
        assert_eq!(swept.records, N as u64);
        assert_eq!(files_left(&root), 0);
        // The records alone: every file removal syncs its directory (WriteToFile::delete).
        let inline = open(Durability::Normal, 1_000);
        for i in 0..N {
            inline
                .save(&Artifact::new(
                    format!("user-1/s{}", i % 100),
                    "k",
                    "t",
                    "n",
                ))
                .unwrap();
        }
        let swept = timed("sqlite artifacts forget 100,000 (no files)", || {
            store.forget("", &registry).unwrap()
        });
        assert_eq!(swept.records, N as u64);
    }
}

mod postgres {
    use super::*;
    use mnemon_artifacts::{PostgresArtifactOptions, PostgresArtifactStore};
    use mnemon_db::Durability;
    use mnemon_store::{PostgresAssetOptions, PostgresAssetStore};

    fn assets(url: &str, durability: Durability, now: i64) -> PostgresAssetStore {
        let options = PostgresAssetOptions {
            durability,
            clock: Arc::new(ManualClock::new(now)),
            ..PostgresAssetOptions::default()
        };
        PostgresAssetStore::open(url, options).unwrap()
    }

    #[test]
    #[ignore = "a measurement: run with --ignored --nocapture"]
    fn forget_and_gc_100k_assets() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("sweep_bench_assets").unwrap();
        fill_assets(&assets(&url, Durability::Normal, 1_000));
        let store = assets(&url, Durability::Full, 1_001);
        let swept = timed("postgres assets gc 50,000 of 100,000", || {
            store.gc().unwrap()
        });
        assert_eq!(swept, (N / 2) as u64);
        let forgotten = timed("postgres assets forget 50,000", || {
            store.forget("user-1/").unwrap()
        });
        assert_eq!(forgotten, (N / 2) as u64);
        fill_assets(&assets(&url, Durability::Normal, 1_000));
        let forgotten = timed("postgres assets forget 100,000", || {
            store.forget("").unwrap()
        });
        assert_eq!(forgotten, N as u64);
        assert_eq!(store.count_where(None).unwrap(), 0);
    }

    #[test]
    #[ignore = "a measurement: run with --ignored --nocapture"]
    fn forget_100k_artifacts() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("sweep_bench_artifacts").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("files");
        let files = WriteToFile::new(&root);
        let open = |durability, now| {
            let options = PostgresArtifactOptions {
                durability,
                clock: Arc::new(ManualClock::new(now)),
                ..PostgresArtifactOptions::default()
            };
            PostgresArtifactStore::open(&url, options).unwrap()
        };
        // The records with files through the store, the rest (one save each would take
        // minutes on a round trip per save) in one statement, as the store writes them.
        let mut client = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
        let fill = |client: &mut ::postgres::Client| {
            fill_artifacts_upto(&open(Durability::Normal, 1_000), &files, WITH_FILES);
            client
                .batch_execute(
                    "INSERT INTO artifact_records (id, scope, key, artifact_type, name,
                       description, created_at, namespace, expires_at)
                     SELECT gen_random_uuid()::text,
                       convert_to('user-1/session-' || (i % 100), 'UTF8'), 'k', 't', 'n', '',
                       '2026-01-01T00:00:00.000000Z', 'default',
                       CASE WHEN i % 2 = 0 THEN 1001 END
                     FROM generate_series(1000, 99999) AS i",
                )
                .unwrap();
        };
        fill(&mut client);
        let registry = BackendRegistry::with_defaults(&root);
        let store = open(Durability::Full, 1_001);
        let swept = timed(
            "postgres artifacts gc 50,000 of 100,000 (500 files)",
            || store.gc(&registry).unwrap(),
        );
        assert_eq!(
            (swept.records, swept.content_removed),
            ((N / 2) as u64, 500)
        );
        let swept = timed("postgres artifacts forget 50,000 (500 files)", || {
            store.forget("user-1/", &registry).unwrap()
        });
        assert_eq!(
            (swept.records, swept.content_removed),
            ((N / 2) as u64, 500)
        );
        assert_eq!(files_left(&root), 0);
        fill(&mut client);
        let swept = timed("postgres artifacts forget 100,000 (1,000 files)", || {
            store.forget("", &registry).unwrap()
        });
        assert_eq!(swept.records, N as u64);
        assert_eq!(files_left(&root), 0);
        // The records alone: every file removal syncs its directory (WriteToFile::delete).
        client
            .batch_execute(
                "INSERT INTO artifact_records (id, scope, key, artifact_type, name,
                   description, created_at, namespace)
                 SELECT gen_random_uuid()::text,
                   convert_to('user-1/session-' || (i % 100), 'UTF8'), 'k', 't', 'n', '',
                   '2026-01-01T00:00:00.000000Z', 'default'
                 FROM generate_series(0, 99999) AS i",
            )
            .unwrap();
        let swept = timed("postgres artifacts forget 100,000 (no files)", || {
            store.forget("", &registry).unwrap()
        });
        assert_eq!(swept.records, N as u64);
    }
}
