#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The asset store conformance suite and the concurrency test, on every store.

use std::sync::Arc;

use mnemon_store::{
    AssetStore, CodecRegistry, InMemoryStore, SqliteAssetOptions, SqliteAssetStore,
};
use mnemon_tests::asset_store_conformance::{self as suite, Capabilities};

fn sqlite_options() -> SqliteAssetOptions {
    SqliteAssetOptions {
        codecs: CodecRegistry::new().with(suite::point_codec()),
        ..SqliteAssetOptions::default()
    }
}

#[test]
fn in_memory_store_conforms() {
    suite::run(
        &|| Box::new(InMemoryStore::new()),
        Capabilities {
            objects_without_codec: true,
        },
    );
}

#[test]
fn sqlite_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let counter = std::cell::Cell::new(0);
    suite::run(
        &|| {
            counter.set(counter.get() + 1);
            let path = dir.path().join(format!("db{}.sqlite3", counter.get()));
            Box::new(SqliteAssetStore::open_with(path, sqlite_options()).unwrap())
        },
        Capabilities {
            objects_without_codec: false,
        },
    );
}

/// Issue 14, item 4: expiry at the boundary instant and the sweep, in memory.
#[test]
fn in_memory_store_expires() {
    suite::expiry(&|clock, ttl| Box::new(InMemoryStore::with_expiry(clock, ttl)));
}

fn sqlite_expiring(
    path: &std::path::Path,
    namespace: &str,
    clock: Arc<dyn mnemon_store::Clock>,
    default_ttl: Option<std::time::Duration>,
) -> SqliteAssetStore {
    SqliteAssetStore::open_with(
        path,
        SqliteAssetOptions {
            namespace: namespace.parse().unwrap(),
            clock,
            default_ttl,
            ..sqlite_options()
        },
    )
    .unwrap()
}

/// Issue 14, item 4: expiry at the boundary instant and the sweep, on SQLite.
#[test]
fn sqlite_store_expires() {
    let dir = tempfile::tempdir().unwrap();
    let counter = std::cell::Cell::new(0);
    suite::expiry(&|clock, ttl| {
        counter.set(counter.get() + 1);
        let path = dir.path().join(format!("db{}.sqlite3", counter.get()));
        Box::new(sqlite_expiring(&path, "default", clock, ttl))
    });
}

/// Issue 14: filters, sweeps and forgets stay inside their namespace, on SQLite.
#[test]
fn tenant_isolation_of_sweeps_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite3");
    suite::tenant_isolation_of_sweeps(&|namespace, clock| {
        Box::new(sqlite_expiring(&path, namespace, clock, None))
    });
}

/// Issue 14, items 4 and 5: after a gc and a forget, no row of the assets is left in either
/// table (bytes leaves included), not only nothing readable.
#[test]
fn sqlite_gc_and_forget_leave_no_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite3");
    let clock = Arc::new(mnemon_store::ManualClock::new(1_000));
    let store = sqlite_expiring(&path, "default", clock.clone(), None);
    let other = sqlite_expiring(&path, "other", clock.clone(), None);
    let with_bytes = |id: &str| {
        let mut content = mnemon_types::Map::new();
        content.insert("b".into(), mnemon_types::Bytes::new(vec![1, 2, 3]).into());
        mnemon_types::Asset::new(mnemon_types::Value::Map(content)).with_id(id)
    };
    let expiring = mnemon_store::Expiry::After(std::time::Duration::from_millis(1));
    store.put_expiring(&with_bytes("gone"), expiring).unwrap();
    store
        .put_batch(&[with_bytes("u/1"), with_bytes("u/2"), with_bytes("v")])
        .unwrap();
    other.put(&with_bytes("u/1")).unwrap();
    let rows = |id: &str| -> (i64, i64) {
        let conn = rusqlite::Connection::open(&path).unwrap();
        let count = |table: &str| {
            conn.query_row(
                &format!(
                    "SELECT count(*) FROM {table} WHERE namespace = 'default' AND asset_id = ?1"
                ),
                [id],
                |r| r.get(0),
            )
            .unwrap()
        };
        (count("asset_assets"), count("asset_leaves"))
    };
    assert_eq!(rows("gone"), (1, 1));
    clock.set(1_001);
    assert_eq!(store.gc().unwrap(), 1);
    assert_eq!(rows("gone"), (0, 0));
    assert_eq!(store.forget("u/").unwrap(), 2);
    assert_eq!(rows("u/1"), (0, 0));
    assert_eq!(rows("u/2"), (0, 0));
    assert_eq!(rows("v"), (1, 1));
    assert!(
        other.get("u/1").unwrap().is_some(),
        "another namespace keeps its asset"
    );
}

/// Issue 14, item 4: a file from before expiry (schema version 2) migrates: its assets never
/// expire, have no times, and filters and sweeps work on it at once.
#[test]
fn sqlite_version_2_file_migrates_to_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite3");
    {
        // The version-2 tables, as the build before expiry created them.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE asset_schema (singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
                version INTEGER NOT NULL);
             INSERT INTO asset_schema VALUES (1, 2);
             CREATE TABLE asset_assets (namespace TEXT NOT NULL, asset_id TEXT NOT NULL,
                asset_type TEXT, skeleton TEXT NOT NULL, meta TEXT NOT NULL,
                leaf_count INTEGER NOT NULL, PRIMARY KEY (namespace, asset_id));
             CREATE INDEX asset_assets_by_type ON asset_assets (namespace, asset_type, asset_id);
             CREATE TABLE asset_leaves (namespace TEXT NOT NULL, asset_id TEXT NOT NULL,
                seq INTEGER NOT NULL, path TEXT NOT NULL,
                kind TEXT NOT NULL CHECK (kind IN ('bytes', 'object')), type_name TEXT,
                data BLOB NOT NULL, UNIQUE (namespace, asset_id, seq));
             INSERT INTO asset_assets VALUES ('default', 'old', 't',
                '{\"asset_type\":\"t\",\"asset_id\":\"old\",\"content\":{\"n\":1}}',
                '{\"asset_type\":\"t\",\"asset_id\":\"old\",\"content\":{\"n\":1}}', 0);",
        )
        .unwrap();
    }
    // A reader cannot migrate: it reads the file as it is, nothing expiring.
    let reader = SqliteAssetStore::open_read_only(&path, sqlite_options()).unwrap();
    assert_eq!(reader.list_ids(None).unwrap(), ["old"]);
    assert_eq!(reader.expires_at("old").unwrap(), Some(None));
    let n1 =
        mnemon_store::Filter::from_json(r#"{"eq": {"path": "content.n", "value": 1}}"#).unwrap();
    assert_eq!(reader.list_where(Some(&n1), None).unwrap(), ["old"]);
    drop(reader);
    let store = SqliteAssetStore::open_with(&path, sqlite_options()).unwrap();
    assert_eq!(store.list_where(Some(&n1), None).unwrap(), ["old"]);
    assert_eq!(store.expires_at("old").unwrap(), Some(None));
    let timed = mnemon_store::Filter::from_json(r#"{"exists": "created_at"}"#).unwrap();
    assert_eq!(
        store.count_where(Some(&timed)).unwrap(),
        0,
        "times unknown before version 3"
    );
    assert_eq!(store.gc().unwrap(), 0);
    assert_eq!(store.get("old").unwrap().unwrap().asset_id, "old");
}

#[test]
fn in_memory_store_under_four_threads() {
    suite::concurrent_mixed(Arc::new(InMemoryStore::new()), 4, 1_000);
}

#[test]
fn sqlite_store_under_four_threads() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteAssetStore::open_with(
        dir.path().join("db.sqlite3"),
        SqliteAssetOptions {
            // The check is about isolation, not fsync speed.
            durability: mnemon_db::Durability::Normal,
            ..sqlite_options()
        },
    )
    .unwrap();
    suite::concurrent_mixed(Arc::new(store), 4, 1_000);
}

#[test]
fn sqlite_store_is_shared_by_two_handles() {
    // Two handles on one file (as two processes would have) see each other's writes.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite3");
    let a: Arc<dyn AssetStore> =
        Arc::new(SqliteAssetStore::open_with(&path, sqlite_options()).unwrap());
    let b: Arc<dyn AssetStore> =
        Arc::new(SqliteAssetStore::open_with(&path, sqlite_options()).unwrap());
    let asset =
        mnemon_types::Asset::from_json(serde_json::json!({"asset_id": "x", "content": 1})).unwrap();
    a.put(&asset).unwrap();
    assert_eq!(b.get("x").unwrap(), Some(asset));
    assert!(b.delete("x").unwrap());
    assert!(a.get("x").unwrap().is_none());
}

#[test]
fn tenant_isolation_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite3");
    suite::tenant_isolation(&|namespace| {
        Box::new(
            SqliteAssetStore::open_with(
                &path,
                SqliteAssetOptions {
                    namespace: namespace.parse().unwrap(),
                    ..sqlite_options()
                },
            )
            .unwrap(),
        )
    });
}

/// The same suite and tenant check against the tests' own PostgreSQL server (issue 13;
/// docs/postgres.md), a fresh database per test.
mod postgres {
    use super::*;
    use mnemon_store::{PostgresAssetOptions, PostgresAssetStore};

    fn options(namespace: &str) -> PostgresAssetOptions {
        PostgresAssetOptions {
            codecs: CodecRegistry::new().with(suite::point_codec()),
            namespace: namespace.parse().unwrap(),
            // The checks are about behaviour, not fsync speed.
            durability: mnemon_db::Durability::Normal,
            ..PostgresAssetOptions::default()
        }
    }

    fn open(url: &str, namespace: &str) -> PostgresAssetStore {
        PostgresAssetStore::open(url, options(namespace)).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn postgres_store_conforms() {
        let server = mnemon_tests::require_postgres!();
        suite::run(
            &|| Box::new(open(&server.fresh_database("asset").unwrap(), "default")),
            Capabilities {
                objects_without_codec: false,
            },
        );
    }

    /// Every statement of a put, get, meta, list and delete is prepared once on a connection
    /// and reused by every later call (issue 13: prepared statements), with unchanged results.
    #[test]
    fn hot_statements_are_prepared_once_per_connection() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("asset_prepared").unwrap();
        let store = PostgresAssetStore::open(
            &url,
            PostgresAssetOptions {
                pool_size: 1,
                ..options("default")
            },
        )
        .unwrap();
        let with_bytes = |i: usize| {
            let mut content = mnemon_types::Map::new();
            content.insert("n".into(), mnemon_types::Value::String(i.to_string()));
            content.insert("b".into(), mnemon_types::Bytes::new(vec![0u8, 1, 2]).into());
            mnemon_types::Asset::new(mnemon_types::Value::Map(content))
                .with_id(format!("a{i}"))
                .with_type("t")
        };
        let calls = |from: usize, to: usize| {
            for i in from..to {
                let asset = with_bytes(i);
                store.put(&asset).unwrap();
                assert_eq!(store.get(&asset.asset_id).unwrap().as_ref(), Some(&asset));
                assert!(store.meta(&asset.asset_id).unwrap().is_some());
                assert_eq!(store.list_ids(None).unwrap().len(), i.div_ceil(2) + 1);
                assert_eq!(store.list_ids(Some("t")).unwrap().len(), i.div_ceil(2) + 1);
                if i % 2 == 1 {
                    assert!(store.delete(&asset.asset_id).unwrap());
                }
            }
        };
        // 9 statements: upsert, delete leaves, insert leaves, get, meta, two lists, and the
        // delete's two.
        calls(0, 4);
        let prepared = || {
            let mut client = store.pool().get().unwrap();
            let on_server: i64 = client
                // This query is itself prepared (and closed after) by the client.
                .query_one(
                    "SELECT count(*) FROM pg_prepared_statements \
                     WHERE statement NOT LIKE '%pg_prepared_statements%'",
                    &[],
                )
                .unwrap()
                .get(0);
            (client.statements_prepared(), on_server)
        };
        assert_eq!(prepared(), (9, 9));
        calls(4, 40);
        assert_eq!(prepared(), (9, 9));
    }

    /// A delete that finds no asset row must not delete leaves a put committed meanwhile: that
    /// left the put's asset without its leaves (a torn asset, seen once by
    /// `postgres_store_under_four_threads`). The interleaving is forced with a trigger that
    /// holds the delete after its row statement found nothing (its transaction has written
    /// nothing yet) until the put has committed.
    #[test]
    fn a_delete_that_found_nothing_leaves_a_concurrent_put_whole() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("asset_delete_race").unwrap();
        let store = Arc::new(open(&url, "default"));
        let mut admin = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
        const GATE: i64 = 4242;
        admin
            .batch_execute(&format!(
                "CREATE FUNCTION gate() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                   IF txid_current_if_assigned() IS NULL THEN
                     PERFORM pg_advisory_xact_lock_shared({GATE});
                   END IF;
                   RETURN NULL;
                 END $$;
                 CREATE TRIGGER gate AFTER DELETE ON asset_assets
                   FOR EACH STATEMENT EXECUTE FUNCTION gate();
                 SELECT pg_advisory_lock({GATE});"
            ))
            .unwrap();
        let asset = {
            let mut content = mnemon_types::Map::new();
            content.insert("b".into(), mnemon_types::Bytes::new(vec![7u8; 3]).into());
            mnemon_types::Asset::new(mnemon_types::Value::Map(content)).with_id("x")
        };
        let deleter = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || store.delete("x").unwrap())
        };
        // Until the delete waits at the gate, or finished without reaching it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let waiting: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                    &[],
                )
                .unwrap()
                .get(0);
            if waiting > 0 || deleter.is_finished() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the delete never ran");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        store.put(&asset).unwrap();
        admin
            .batch_execute(&format!("SELECT pg_advisory_unlock({GATE})"))
            .unwrap();
        assert!(!deleter.join().unwrap(), "there was no asset to delete");
        assert_eq!(store.get("x").unwrap().as_ref(), Some(&asset));
    }

    /// A leaf lost behind the store's back is reported as corruption, not read back as null.
    #[test]
    fn a_missing_leaf_is_corrupt() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("asset_missing_leaf").unwrap();
        let store = open(&url, "default");
        let mut content = mnemon_types::Map::new();
        content.insert("b".into(), mnemon_types::Bytes::new(vec![1, 2]).into());
        let asset = mnemon_types::Asset::new(mnemon_types::Value::Map(content)).with_id("a");
        store.put(&asset).unwrap();
        assert_eq!(store.get("a").unwrap().as_ref(), Some(&asset));
        let mut admin = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
        admin.batch_execute("DELETE FROM asset_leaves").unwrap();
        let err = store.get("a").unwrap_err();
        assert!(
            matches!(err, mnemon_store::StoreError::Corrupt { .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("1 bytes/object leaves but 0"),
            "{err}"
        );
    }

    /// A sweep (`gc`, `forget`) deleted the rows it selected in its scan's order while a batch
    /// put locks them in id order: the sweep held `b` and waited for `a`, the put held `a` and
    /// waited for `b`, and PostgreSQL aborted one of them ("deadlock detected", a storage
    /// error to the caller). Forced here: a sequential scan (so heap order, `b` first), and a
    /// trigger holding the sweep after it took `b` until the put waits. Found by a review.
    #[test]
    fn a_sweep_and_a_batch_put_take_their_locks_in_one_order() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("asset_sweep_order").unwrap();
        let database = url.rsplit('/').next().unwrap().to_owned();
        let mut admin = server.connect(&database).unwrap();
        const GATE: i64 = 4243;
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {database} SET enable_indexscan = off;
                 ALTER DATABASE {database} SET enable_bitmapscan = off;
                 ALTER DATABASE {database} SET enable_indexonlyscan = off;"
            ))
            .unwrap();
        let store = Arc::new(open(&url, "default"));
        let asset = |id: &str| {
            let mut content = mnemon_types::Map::new();
            content.insert(
                "v".into(),
                mnemon_types::Bytes::new(id.as_bytes().to_vec()).into(),
            );
            mnemon_types::Asset::new(mnemon_types::Value::Map(content)).with_id(id)
        };
        // `b` first in the heap.
        store.put(&asset("b")).unwrap();
        store.put(&asset("a")).unwrap();
        admin
            .batch_execute(&format!(
                "CREATE FUNCTION gate() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                   IF OLD.asset_id = convert_to('b', 'UTF8') THEN
                     PERFORM pg_advisory_xact_lock_shared({GATE});
                   END IF;
                   RETURN OLD;
                 END $$;
                 CREATE TRIGGER gate BEFORE DELETE ON asset_assets
                   FOR EACH ROW EXECUTE FUNCTION gate();
                 SELECT pg_advisory_lock({GATE});"
            ))
            .unwrap();
        let waiting = |admin: &mut ::postgres::Client, locktype: &str| -> bool {
            admin
                .query_one(
                    "SELECT count(*) FROM pg_locks WHERE locktype = $1 AND NOT granted",
                    &[&locktype],
                )
                .unwrap()
                .get::<_, i64>(0)
                > 0
        };
        let wait_for = |admin: &mut ::postgres::Client, locktype: &str, what: &str| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !waiting(admin, locktype) {
                assert!(std::time::Instant::now() < deadline, "{what} never waited");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        };
        let sweeper = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || store.forget(""))
        };
        // The sweep holds `b` (and, locking in order, `a`), waiting at the gate.
        wait_for(&mut admin, "advisory", "the sweep");
        let putter = {
            let store = Arc::clone(&store);
            let batch = [asset("a"), asset("b")];
            std::thread::spawn(move || store.put_batch(&batch))
        };
        // The put waits for a row the sweep holds.
        wait_for(&mut admin, "transactionid", "the put");
        admin
            .batch_execute(&format!("SELECT pg_advisory_unlock({GATE})"))
            .unwrap();
        let swept = sweeper.join().unwrap();
        let put = putter.join().unwrap();
        assert!(swept.is_ok() && put.is_ok(), "sweep {swept:?}, put {put:?}");
        assert_eq!(swept.unwrap(), 2);
        assert_eq!(store.get("a").unwrap(), Some(asset("a")));
        assert_eq!(store.get("b").unwrap(), Some(asset("b")));
    }

    /// A loopback proxy to `server`'s port that counts the bytes the server sends: a URL of
    /// database `database` through it, and the count.
    fn counting_proxy(
        server: &mnemon_tests::postgres::PgServer,
        database: &str,
    ) -> (String, Arc<std::sync::atomic::AtomicU64>) {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::{AtomicU64, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let upstream_port = server.port();
        let received = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&received);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let upstream = TcpStream::connect(("127.0.0.1", upstream_port)).unwrap();
                let (mut to_server, mut from_client) =
                    (upstream.try_clone().unwrap(), client.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut from_client, &mut to_server));
                let (mut from_server, mut to_client) = (upstream, client);
                let counter = Arc::clone(&counter);
                std::thread::spawn(move || {
                    let mut buffer = vec![0; 64 * 1024];
                    loop {
                        let n = match from_server.read(&mut buffer) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        counter.fetch_add(n as u64, Ordering::SeqCst);
                        if to_client.write_all(&buffer[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (
            format!("postgres://postgres@127.0.0.1:{port}/{database}"),
            received,
        )
    }

    /// A read sent the asset's skeleton with every leaf's row (a join), and the skeleton holds
    /// a placeholder per leaf: 2,000 leaves sent 2,000 copies of a 34 kB skeleton, 68 MB for
    /// one read (found by a review). It is sent once now.
    #[test]
    fn a_read_sends_the_skeleton_once() {
        use std::sync::atomic::Ordering;
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("asset_read_bytes").unwrap();
        let database = url.rsplit('/').next().unwrap().to_owned();
        let store = open(&url, "default");
        let mut content = mnemon_types::Map::new();
        for i in 0..2_000_u32 {
            content.insert(
                format!("leaf{i:05}"),
                mnemon_types::Bytes::new(i.to_le_bytes().to_vec()).into(),
            );
        }
        let asset = mnemon_types::Asset::new(mnemon_types::Value::Map(content)).with_id("wide");
        store.put(&asset).unwrap();
        let mut admin = server.connect(&database).unwrap();
        let skeleton: i64 = admin
            .query_one("SELECT octet_length(skeleton)::int8 FROM asset_assets", &[])
            .unwrap()
            .get(0);
        assert!(skeleton > 30_000, "skeleton of {skeleton} bytes");
        let (proxied, received) = counting_proxy(server, &database);
        let reader = open(&proxied, "default");
        // Twice: the first read also prepares its statement.
        assert_eq!(reader.get("wide").unwrap().as_ref(), Some(&asset));
        let before = received.load(Ordering::SeqCst);
        assert_eq!(reader.get("wide").unwrap().as_ref(), Some(&asset));
        let sent = i64::try_from(received.load(Ordering::SeqCst) - before).unwrap();
        // The skeleton once, and a row of at most ~100 bytes per leaf (path, kind, 4 bytes).
        let bound = skeleton + 2_000 * 100;
        assert!(
            sent < bound,
            "one read received {sent} bytes, more than {bound} (skeleton {skeleton})"
        );
    }

    #[test]
    fn postgres_store_under_four_threads() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("asset_threads").unwrap();
        suite::concurrent_mixed(Arc::new(open(&url, "default")), 4, 1_000);
    }

    fn open_expiring(
        url: &str,
        namespace: &str,
        clock: Arc<dyn mnemon_store::Clock>,
        default_ttl: Option<std::time::Duration>,
    ) -> PostgresAssetStore {
        PostgresAssetStore::open(
            url,
            PostgresAssetOptions {
                clock,
                default_ttl,
                ..options(namespace)
            },
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Issue 14, item 4: expiry at the boundary instant and the sweep, on PostgreSQL.
    #[test]
    fn postgres_store_expires() {
        let server = mnemon_tests::require_postgres!();
        suite::expiry(&|clock, ttl| {
            let url = server.fresh_database("asset_expiry").unwrap();
            Box::new(open_expiring(&url, "default", clock, ttl))
        });
    }

    /// Issue 14: filters, sweeps and forgets stay inside their namespace, on PostgreSQL.
    #[test]
    fn tenant_isolation_of_sweeps_postgres() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("asset_sweep_tenants").unwrap();
        suite::tenant_isolation_of_sweeps(&|namespace, clock| {
            Box::new(open_expiring(&url, namespace, clock, None))
        });
    }

    /// Issue 14, items 4 and 5: after a gc and a forget, no row of the assets is left in
    /// either table (bytes leaves included).
    /// A forget that waits for a concurrent put of an asset it selects removes that put's
    /// leaves too. Its one statement read the leaves from the snapshot it took before waiting
    /// for the put's row lock, so the leaves the put committed were invisible to it and stayed
    /// behind the deleted asset: a forgotten user's bytes left in the database.
    #[test]
    fn a_forget_racing_a_put_leaves_no_leaf_behind() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("asset_forget_race").unwrap();
        let store = Arc::new(open(&url, "default"));
        let mut content = mnemon_types::Map::new();
        content.insert("b".into(), mnemon_types::Bytes::new(vec![1, 2, 3]).into());
        let asset = mnemon_types::Asset::new(mnemon_types::Value::Map(content)).with_id("u/x");
        store.put(&asset).unwrap();
        // A put of the same id in flight, as a put writes: its asset row locked, its leaves
        // replaced by new rows, not committed yet.
        let mut writer = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
        let mut put = writer.transaction().unwrap();
        let id: &[u8] = b"u/x";
        put.execute(
            "UPDATE asset_assets SET updated_at = updated_at + 1
             WHERE namespace = 'default' AND asset_id = $1::bytea",
            &[&id],
        )
        .unwrap();
        put.batch_execute(
            "CREATE TEMP TABLE kept AS SELECT * FROM asset_leaves WHERE namespace = 'default';
             DELETE FROM asset_leaves WHERE namespace = 'default';
             INSERT INTO asset_leaves SELECT * FROM kept;",
        )
        .unwrap();
        let forgetting = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || store.forget("u/"))
        };
        // Until the forget waits for the put's row lock.
        let mut watcher = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
        let started = std::time::Instant::now();
        loop {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    &[],
                )
                .unwrap()
                .get(0);
            if waiting > 0 {
                break;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "the forget never waited for the put"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        put.commit().unwrap();
        assert_eq!(forgetting.join().unwrap().unwrap(), 1);
        let left: i64 = watcher
            .query_one("SELECT count(*) FROM asset_leaves", &[])
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "leaves left behind a forgotten asset");
    }

    #[test]
    fn postgres_gc_and_forget_leave_no_row() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("asset_no_row").unwrap();
        let clock = Arc::new(mnemon_store::ManualClock::new(1_000));
        let store = open_expiring(&url, "default", clock.clone(), None);
        let other = open_expiring(&url, "other", clock.clone(), None);
        let with_bytes = |id: &str| {
            let mut content = mnemon_types::Map::new();
            content.insert("b".into(), mnemon_types::Bytes::new(vec![1, 2, 3]).into());
            mnemon_types::Asset::new(mnemon_types::Value::Map(content)).with_id(id)
        };
        let expiring = mnemon_store::Expiry::After(std::time::Duration::from_millis(1));
        store.put_expiring(&with_bytes("gone"), expiring).unwrap();
        store
            .put_batch(&[with_bytes("u/1"), with_bytes("u/2"), with_bytes("v")])
            .unwrap();
        other.put(&with_bytes("u/1")).unwrap();
        let mut client = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
        let mut rows = |id: &str| -> (i64, i64) {
            let mut count = |table: &str| -> i64 {
                client
                    .query_one(
                        &format!(
                            "SELECT count(*) FROM {table}                              WHERE namespace = 'default' AND asset_id = $1::bytea"
                        ),
                        &[&id.as_bytes()],
                    )
                    .unwrap()
                    .get(0)
            };
            (count("asset_assets"), count("asset_leaves"))
        };
        assert_eq!(rows("gone"), (1, 1));
        clock.set(1_001);
        assert_eq!(store.gc().unwrap(), 1);
        assert_eq!(rows("gone"), (0, 0));
        assert_eq!(store.forget("u/").unwrap(), 2);
        assert_eq!(rows("u/1"), (0, 0));
        assert_eq!(rows("u/2"), (0, 0));
        assert_eq!(rows("v"), (1, 1));
        assert!(other.get("u/1").unwrap().is_some());
    }

    #[test]
    fn tenant_isolation_postgres() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("asset_tenants").unwrap();
        suite::tenant_isolation(&|namespace| Box::new(open(&url, namespace)));
    }

    #[test]
    fn postgres_newer_schema_is_refused() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("asset_newer").unwrap();
        drop(open(&url, "default"));
        let database = url.rsplit('/').next().unwrap();
        let mut client = server.connect(database).unwrap();
        client
            .execute("UPDATE asset_schema SET version = 99", &[])
            .unwrap();
        let err = PostgresAssetStore::open(&url, options("default")).unwrap_err();
        assert!(
            matches!(
                err,
                mnemon_store::StoreError::SchemaTooNew {
                    found: 99,
                    supported: 4,
                    ..
                }
            ),
            "{err}"
        );
    }

    /// A server restart under load (issue 13, item 6): writers meet errors that say the server
    /// went away (or could not be reached, or kept every connection busy) and nothing else;
    /// they go on writing once it is back, and every acknowledged put is there.
    #[test]
    fn a_server_restart_under_load_loses_nothing_acknowledged() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::Duration;

        use mnemon_db::DbError;
        use mnemon_store::StoreError;
        use mnemon_tests::postgres::PgServer;

        // The restart would disturb every other test on the shared server: a server of its own.
        if !mnemon_tests::postgres::require_binaries() {
            return;
        }
        let server = PgServer::start().unwrap_or_else(|error| panic!("{error}"));
        let url = server.fresh_database("asset_restart").unwrap();
        let store = PostgresAssetStore::open(
            &url,
            PostgresAssetOptions {
                durability: mnemon_db::Durability::Full,
                ..options("default")
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let stop = AtomicBool::new(false);
        let (acknowledged, errors) = std::thread::scope(|s| {
            let writers: Vec<_> = (0..4)
                .map(|t| {
                    let (store, stop) = (&store, &stop);
                    s.spawn(move || {
                        let mut acknowledged = Vec::new();
                        let mut errors = Vec::new();
                        for i in 0.. {
                            if stop.load(Ordering::SeqCst) {
                                break;
                            }
                            let batch: Vec<mnemon_types::Asset> = (0..5)
                                .map(|j| {
                                    mnemon_types::Asset::from_json(serde_json::json!({
                                        "asset_id": format!("w{t}-{i}-{j}"),
                                        "content": [t, i, j],
                                    }))
                                    .unwrap()
                                })
                                .collect();
                            match store.put_batch(&batch) {
                                Ok(()) => acknowledged.extend(batch),
                                Err(e) => {
                                    errors.push(e);
                                    std::thread::sleep(Duration::from_millis(20));
                                }
                            }
                        }
                        (acknowledged, errors)
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(300));
            server.restart().unwrap_or_else(|error| panic!("{error}"));
            std::thread::sleep(Duration::from_millis(700));
            stop.store(true, Ordering::SeqCst);
            let mut acknowledged = Vec::new();
            let mut errors = Vec::new();
            for writer in writers {
                let (a, e) = writer.join().unwrap();
                acknowledged.extend(a);
                errors.extend(e);
            }
            (acknowledged, errors)
        });
        for error in &errors {
            let StoreError::Storage { error: inner, .. } = error else {
                panic!("not a storage error: {error}");
            };
            let db = inner.downcast_ref::<DbError>();
            assert!(
                matches!(
                    db,
                    Some(
                        DbError::ServerGone { .. }
                            | DbError::Unreachable { .. }
                            | DbError::PoolTimeout { .. }
                    )
                ),
                "an unclear error during the restart: {error}"
            );
        }
        // Writes go on after the restart, and nothing acknowledged was lost.
        let after = mnemon_types::Asset::from_json(serde_json::json!({"asset_id": "after"}));
        store.put(&after.unwrap()).unwrap_or_else(|e| panic!("{e}"));
        let reopened = open(&url, "default");
        for asset in &acknowledged {
            assert_eq!(
                reopened.get(&asset.asset_id).unwrap().as_ref(),
                Some(asset),
                "acknowledged {} lost",
                asset.asset_id
            );
        }
        println!(
            "{} acknowledged puts kept, {} errors during the restart",
            acknowledged.len(),
            errors.len()
        );
        assert!(!acknowledged.is_empty());
    }

    #[test]
    fn postgres_ids_list_in_byte_order() {
        // Whatever the database's collation: "B" < "a" < "é" in bytes.
        let server = mnemon_tests::require_postgres!();
        let store = open(&server.fresh_database("asset_order").unwrap(), "default");
        for id in ["é", "a", "B", "a b", "a-b"] {
            store
                .put(&mnemon_types::Asset::from_json(serde_json::json!({"asset_id": id})).unwrap())
                .unwrap();
        }
        let mut want = vec!["é", "a", "B", "a b", "a-b"];
        want.sort_unstable();
        assert_eq!(store.list_ids(None).unwrap(), want);
    }
}

/// A PostgreSQL database at asset schema version 1 (before namespaces) keeps its assets, in
/// the default namespace, when a current build opens it.
#[test]
fn postgres_version_1_assets_move_into_the_default_namespace() {
    use mnemon_store::{PostgresAssetOptions, PostgresAssetStore};
    let server = mnemon_tests::require_postgres!();
    let with_bytes = |id: &str| {
        let mut content = mnemon_types::Map::new();
        content.insert("b".into(), mnemon_types::Bytes::new(vec![0u8, 1, 2]).into());
        mnemon_types::Asset::new(mnemon_types::Value::Map(content))
            .with_id(id)
            .with_type("t")
    };
    // The rows a current build writes for the asset, to copy into the version-1 tables.
    let donor_url = server.fresh_database("asset_v1_donor").unwrap();
    let donor = PostgresAssetStore::open(&donor_url, PostgresAssetOptions::default()).unwrap();
    donor.put(&with_bytes("old")).unwrap();
    let mut donor_db = server
        .connect(donor_url.rsplit('/').next().unwrap())
        .unwrap();
    let asset_row = donor_db
        .query_one("SELECT skeleton, meta FROM asset_assets", &[])
        .unwrap();
    let leaf_row = donor_db
        .query_one("SELECT path, kind, data FROM asset_leaves", &[])
        .unwrap();
    let (skeleton, meta): (String, String) = (asset_row.get(0), asset_row.get(1));
    let (path, kind, data): (Vec<u8>, String, Vec<u8>) =
        (leaf_row.get(0), leaf_row.get(1), leaf_row.get(2));

    let url = server.fresh_database("asset_v1").unwrap();
    let mut client = server.connect(url.rsplit('/').next().unwrap()).unwrap();
    client
        .batch_execute(
            "CREATE TABLE asset_schema (singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
               version BIGINT NOT NULL);
             INSERT INTO asset_schema VALUES (1, 1);
             CREATE TABLE asset_assets (asset_id BYTEA PRIMARY KEY NOT NULL, asset_type BYTEA,
               skeleton TEXT NOT NULL, meta TEXT NOT NULL, leaf_count BIGINT NOT NULL);
             CREATE INDEX asset_assets_by_type ON asset_assets (asset_type, asset_id);
             CREATE TABLE asset_leaves (asset_id BYTEA NOT NULL, seq BIGINT NOT NULL,
               path BYTEA NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('bytes', 'object')),
               type_name BYTEA, data BYTEA NOT NULL, UNIQUE (asset_id, seq));",
        )
        .unwrap();
    client
        .execute(
            "INSERT INTO asset_assets VALUES ('old'::bytea, 't'::bytea, $1, $2, 1)",
            &[&skeleton, &meta],
        )
        .unwrap();
    client
        .execute(
            "INSERT INTO asset_leaves VALUES ('old'::bytea, 0, $1, $2, NULL, $3)",
            &[&path, &kind, &data],
        )
        .unwrap();

    let store = PostgresAssetStore::open(&url, PostgresAssetOptions::default()).unwrap();
    assert_eq!(store.get("old").unwrap(), Some(with_bytes("old")));
    assert_eq!(store.list_ids(Some("t")).unwrap(), ["old"]);
    let other = PostgresAssetStore::open(
        &url,
        PostgresAssetOptions {
            namespace: "acme".parse().unwrap(),
            ..PostgresAssetOptions::default()
        },
    )
    .unwrap();
    assert!(other.get("old").unwrap().is_none());
    // The same id in another namespace is another asset.
    other.put(&with_bytes("old")).unwrap();
    assert!(other.delete("old").unwrap());
    assert!(store.get("old").unwrap().is_some());
    let version: i64 = client
        .query_one("SELECT version FROM asset_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, 4);
}
