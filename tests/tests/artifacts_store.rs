//! The artifact store conformance suite, run against every implementation.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod in_memory {
    use mnemon_artifacts::InMemoryArtifactStore;

    mnemon_tests::artifact_store_conformance!((InMemoryArtifactStore::new(), ()));
}

mod sqlite_file {
    use mnemon_artifacts::SqliteArtifactStore;

    fn fresh() -> (SqliteArtifactStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteArtifactStore::open(dir.path().join("mnemon.sqlite3")).unwrap();
        (store, dir)
    }

    mnemon_tests::artifact_store_conformance!(fresh());
}

mod sqlite_in_memory {
    use mnemon_artifacts::SqliteArtifactStore;

    mnemon_tests::artifact_store_conformance!((SqliteArtifactStore::open_in_memory().unwrap(), ()));
}

/// Issue 14: expiry at the boundary instant, gc and the tenant checks of the new operations,
/// in memory and on SQLite (file and in-memory databases).
mod expiry {
    use std::sync::Arc;

    use mnemon_artifacts::{InMemoryArtifactStore, SqliteArtifactOptions, SqliteArtifactStore};
    use mnemon_tests::artifact_store_conformance as suite;

    #[test]
    fn in_memory_store_expires() {
        suite::expiry(&|clock, ttl| Box::new(InMemoryArtifactStore::with_expiry(clock, ttl)));
    }

    #[test]
    fn sqlite_store_expires() {
        let dir = tempfile::tempdir().unwrap();
        let counter = std::cell::Cell::new(0);
        suite::expiry(&|clock, default_ttl| {
            counter.set(counter.get() + 1);
            let path = dir.path().join(format!("db{}.sqlite3", counter.get()));
            let options = SqliteArtifactOptions {
                clock,
                default_ttl,
                ..SqliteArtifactOptions::default()
            };
            Box::new(SqliteArtifactStore::open_with(path, options).unwrap())
        });
        suite::expiry(&|clock, default_ttl| {
            let options = SqliteArtifactOptions {
                clock,
                default_ttl,
                ..SqliteArtifactOptions::default()
            };
            Box::new(SqliteArtifactStore::open_in_memory_with(options).unwrap())
        });
    }

    #[test]
    fn tenant_isolation_of_sweeps_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnemon.sqlite3");
        suite::tenant_isolation_of_sweeps(&|namespace, clock: Arc<dyn mnemon_artifacts::Clock>| {
            let options = SqliteArtifactOptions {
                namespace: namespace.parse().unwrap(),
                clock,
                ..SqliteArtifactOptions::default()
            };
            Box::new(SqliteArtifactStore::open_with(&path, options).unwrap())
        });
    }

    /// Issue 14, item 4: a file from before expiry (schema version 2) migrates: its records
    /// never expire, and filters see their fields at once.
    #[test]
    fn a_version_2_file_migrates_to_expiry() {
        use mnemon_artifacts::{ArtifactStore, Filter};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnemon.sqlite3");
        let a = mnemon_types::Artifact::new("s", "k", "t", "old")
            .with_data(serde_json::json!({"lang": "en"}));
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE artifact_schema (singleton INTEGER PRIMARY KEY
                    CHECK (singleton = 1), version INTEGER NOT NULL);
                 INSERT INTO artifact_schema VALUES (1, 2);
                 CREATE TABLE artifact_records (seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    namespace TEXT NOT NULL, id TEXT NOT NULL, scope TEXT NOT NULL,
                    key TEXT NOT NULL, artifact_type TEXT NOT NULL, name TEXT NOT NULL,
                    description TEXT NOT NULL, storage_backend TEXT, storage_id TEXT, data TEXT,
                    created_at TEXT NOT NULL, UNIQUE (namespace, id),
                    CHECK ((storage_backend IS NULL) = (storage_id IS NULL)));
                 CREATE INDEX artifact_records_by_key
                    ON artifact_records (namespace, scope, key, seq);
                 CREATE INDEX artifact_records_by_type
                    ON artifact_records (namespace, scope, artifact_type, seq);",
            )
            .unwrap();
            conn.execute(
                "INSERT INTO artifact_records (namespace, id, scope, key, artifact_type, name,
                    description, data, created_at) VALUES ('default', ?1, 's', 'k', 't', 'old',
                    '', '{\"lang\":\"en\"}', ?2)",
                [a.id.to_string(), a.created_at.to_string()],
            )
            .unwrap();
        }
        let en = Filter::from_json(r#"{"eq": {"path": "data.lang", "value": "en"}}"#).unwrap();
        let reader = SqliteArtifactStore::open_read_only(&path).unwrap();
        assert_eq!(
            reader.list_where(None, Some(&en), None).unwrap(),
            std::slice::from_ref(&a)
        );
        assert_eq!(reader.expires_at(a.id).unwrap(), Some(None));
        drop(reader);
        let store = SqliteArtifactStore::open(&path).unwrap();
        assert_eq!(
            store.list_where(Some("s"), Some(&en), None).unwrap(),
            std::slice::from_ref(&a)
        );
        assert_eq!(store.expires_at(a.id).unwrap(), Some(None));
        assert_eq!(store.latest("s", "k").unwrap(), Some(a));
    }
}

mod sqlite_durability {
    use mnemon_artifacts::{ArtifactStore, SqliteArtifactStore};
    use mnemon_types::Artifact;

    /// A record saved through one handle is there for a new handle, as after a restart, and the
    /// sequence goes on from where it was.
    #[test]
    fn records_and_sequence_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnemon.sqlite3");
        let first = Artifact::new("s", "plan", "plan", "before restart");
        let seq = {
            let store = SqliteArtifactStore::open(&path).unwrap();
            store.save(&first).unwrap()
        };
        let store = SqliteArtifactStore::open(&path).unwrap();
        assert_eq!(store.get(first.id).unwrap(), Some(first));
        let later = store
            .save(&Artifact::new("s", "plan", "plan", "after restart"))
            .unwrap();
        assert!(later > seq);
        assert_eq!(
            store.latest("s", "plan").unwrap().unwrap().name,
            "after restart"
        );
    }

    /// The environment variable that turns `kill9_child` into the child process.
    const CHILD_DB: &str = "MNEMON_ARTIFACTS_KILL9_CHILD_DB";

    /// The child side of `an_acknowledged_save_survives_kill_9`: saves in a loop and prints
    /// each id once `save` has returned. Does nothing in a normal test run.
    #[test]
    fn kill9_child() {
        let Some(db) = std::env::var_os(CHILD_DB) else {
            return;
        };
        use std::io::Write;
        let store = SqliteArtifactStore::open(db).unwrap();
        for i in 0.. {
            let a = Artifact::new("s", "k", "t", format!("{i}"));
            store.save(&a).unwrap();
            let mut out = std::io::stdout().lock();
            writeln!(out, "SAVED {}", a.id).unwrap();
            out.flush().unwrap();
        }
    }

    /// Every save acknowledged before a SIGKILL is there afterwards, and the latest record is
    /// the last acknowledged one or one saved after it.
    #[cfg(unix)]
    #[test]
    fn an_acknowledged_save_survives_kill_9() {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};

        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("mnemon.sqlite3");
        for round in 0..3 {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .arg(crate::harness_name(module_path!(), "kill9_child"))
                .args(["--exact", "--nocapture"])
                .env(CHILD_DB, &db)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let mut acknowledged = Vec::new();
            for line in BufReader::new(stdout).lines() {
                if let Some(id) = line.unwrap().strip_prefix("SAVED ") {
                    acknowledged.push(id.parse::<uuid::Uuid>().unwrap());
                    if acknowledged.len() == 40 + 20 * round {
                        break;
                    }
                }
            }
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            let store = SqliteArtifactStore::open(&db).unwrap();
            for id in &acknowledged {
                assert!(store.get(*id).unwrap().is_some(), "acknowledged {id} lost");
            }
            let last = store.get(*acknowledged.last().unwrap()).unwrap().unwrap();
            let latest = store.latest("s", "k").unwrap().unwrap();
            let listed = store.list("s", None).unwrap();
            let position = |id| listed.iter().position(|a| a.id == id).unwrap();
            assert!(position(latest.id) >= position(last.id));
            assert_eq!(listed.last().unwrap().id, latest.id);
        }
    }

    /// Two handles on one file (two processes, say) share one sequence.
    #[test]
    fn two_handles_share_one_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnemon.sqlite3");
        let a = SqliteArtifactStore::open(&path).unwrap();
        let b = SqliteArtifactStore::open(&path).unwrap();
        let mut last = 0;
        for i in 0..10 {
            let store = if i % 2 == 0 { &a } else { &b };
            let seq = store
                .save(&Artifact::new("s", "k", "t", format!("{i}")))
                .unwrap();
            assert!(seq > last);
            last = seq;
            assert_eq!(a.latest("s", "k").unwrap().unwrap().name, format!("{i}"));
            assert_eq!(b.latest("s", "k").unwrap().unwrap().name, format!("{i}"));
        }
    }

    /// The tables of other components in the same database file are left alone.
    #[test]
    fn tables_are_prefixed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnemon.sqlite3");
        drop(SqliteArtifactStore::open(&path).unwrap());
        let conn = rusqlite::Connection::open(&path).unwrap();
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%'")
            .unwrap();
        let names: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(!names.is_empty());
        for name in names {
            assert!(name.starts_with("artifact_"), "{name}");
        }
    }
}

mod tenants {
    use mnemon_artifacts::{SqliteArtifactOptions, SqliteArtifactStore};

    #[test]
    fn tenant_isolation_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnemon.sqlite3");
        mnemon_tests::artifact_store_conformance::tenant_isolation(&|namespace| {
            let options = SqliteArtifactOptions {
                namespace: namespace.parse().unwrap(),
                ..SqliteArtifactOptions::default()
            };
            Box::new(SqliteArtifactStore::open_with(&path, options).unwrap())
        });
    }
}

/// The same suite, tenants, concurrency and crash checks against the tests' own PostgreSQL
/// server (issue 13; docs/postgres.md), a fresh database per test.
mod postgres {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use mnemon_artifacts::{
        ArtifactError, ArtifactStore, PostgresArtifactOptions, PostgresArtifactStore,
    };
    use mnemon_types::{Artifact, StorageLocation};

    fn options(namespace: &str) -> PostgresArtifactOptions {
        PostgresArtifactOptions {
            namespace: namespace.parse().unwrap(),
            ..PostgresArtifactOptions::default()
        }
    }

    fn open(url: &str, namespace: &str) -> PostgresArtifactStore {
        PostgresArtifactStore::open(url, options(namespace)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A store on a new database.
    fn fresh(server: &mnemon_tests::postgres::PgServer) -> (PostgresArtifactStore, ()) {
        (
            open(&server.fresh_database("artifact").unwrap(), "default"),
            (),
        )
    }

    fn open_expiring(
        url: &str,
        namespace: &str,
        clock: std::sync::Arc<dyn mnemon_artifacts::Clock>,
        default_ttl: Option<Duration>,
    ) -> PostgresArtifactStore {
        let options = PostgresArtifactOptions {
            clock,
            default_ttl,
            ..options(namespace)
        };
        PostgresArtifactStore::open(url, options).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Issue 14, item 4: expiry at the boundary instant and gc with files, on PostgreSQL.
    #[test]
    fn postgres_store_expires() {
        let server = mnemon_tests::require_postgres!();
        mnemon_tests::artifact_store_conformance::expiry(&|clock, ttl| {
            let url = server.fresh_database("artifact_expiry").unwrap();
            Box::new(open_expiring(&url, "default", clock, ttl))
        });
    }

    /// Issue 14: filters, sweeps and forgets stay inside their namespace, on PostgreSQL.
    #[test]
    fn tenant_isolation_of_sweeps_postgres() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_sweep_tenants").unwrap();
        mnemon_tests::artifact_store_conformance::tenant_isolation_of_sweeps(
            &|namespace, clock| Box::new(open_expiring(&url, namespace, clock, None)),
        );
    }

    mod conformance {
        // Every generated test first asks for the server: a skipped run says why, loudly.
        mnemon_tests::artifact_store_conformance!({
            let server = mnemon_tests::require_postgres!();
            super::fresh(server)
        });
    }

    /// Every statement of a save (with and without a storage lock), get, latest, list, scopes
    /// and delete is prepared once on a connection and reused by every later call.
    #[test]
    fn hot_statements_are_prepared_once_per_connection() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_prepared").unwrap();
        let store = PostgresArtifactStore::open(
            &url,
            PostgresArtifactOptions {
                pool_size: 1,
                ..options("default")
            },
        )
        .unwrap();
        let calls = |from: usize, to: usize| {
            for i in from..to {
                let mut a = Artifact::new("s", "k", "t", format!("n{i}"));
                if i % 2 == 0 {
                    a.storage = Some(StorageLocation {
                        backend: "write_to_file".into(),
                        id: format!("{i}.json"),
                    });
                }
                store.save(&a).unwrap();
                assert_eq!(store.get(a.id).unwrap().as_ref(), Some(&a));
                assert_eq!(store.latest("s", "k").unwrap().as_ref(), Some(&a));
                assert_eq!(store.list("s", None).unwrap().len(), i + 1);
                assert_eq!(store.list("s", Some("t")).unwrap().len(), i + 1);
                assert_eq!(store.scopes().unwrap(), ["s"]);
                assert!(!store.delete(uuid::Uuid::now_v7()).unwrap());
            }
        };
        // 9 statements: the storage lock, the save turn, insert, get, latest, two lists,
        // scopes, delete.
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
        calls(4, 30);
        assert_eq!(prepared(), (9, 9));
    }

    /// A connection killed under the store is replaced by one with an empty statement cache:
    /// after at most the one failed call, every call works again and prepares afresh.
    #[test]
    fn a_killed_connection_is_replaced_with_a_fresh_statement_cache() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_killed").unwrap();
        let store = PostgresArtifactStore::open(
            &url,
            PostgresArtifactOptions {
                pool_size: 1,
                ..options("default")
            },
        )
        .unwrap();
        let first = Artifact::new("s", "k", "t", "first");
        store.save(&first).unwrap();
        assert_eq!(store.get(first.id).unwrap().as_ref(), Some(&first));
        let pid: i32 = {
            let mut client = store.pool().get().unwrap();
            // The save turn, the insert, the get.
            assert_eq!(client.statements_prepared(), 3);
            client
                .query_one("SELECT pg_backend_pid()", &[])
                .unwrap()
                .get(0)
        };
        let mut admin = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
        let killed: bool = admin
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .unwrap()
            .get(0);
        assert!(killed);
        std::thread::sleep(Duration::from_millis(100));

        // The call on the dead connection may fail, saying the server went away; then the
        // pool opens a new connection and the calls work.
        if let Err(error) = store.get(first.id) {
            assert!(error.to_string().contains("retry"), "{error}");
        }
        let second = Artifact::new("s", "k", "t", "second");
        store.save(&second).unwrap();
        assert_eq!(store.get(first.id).unwrap().as_ref(), Some(&first));
        assert_eq!(store.latest("s", "k").unwrap().as_ref(), Some(&second));
        let mut client = store.pool().get().unwrap();
        let new_pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        assert_ne!(new_pid, pid);
        // The save turn, insert, get and latest, each prepared once on the new connection.
        assert_eq!(client.statements_prepared(), 4);
    }

    #[test]
    fn tenant_isolation_postgres() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_tenants").unwrap();
        mnemon_tests::artifact_store_conformance::tenant_isolation(&|namespace| {
            Box::new(open(&url, namespace))
        });
    }

    #[test]
    fn postgres_newer_schema_is_refused() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_newer").unwrap();
        drop(open(&url, "default"));
        let mut client = server.connect(url.rsplit('/').next().unwrap()).unwrap();
        client
            .execute("UPDATE artifact_schema SET version = 99", &[])
            .unwrap();
        let err = PostgresArtifactStore::open(&url, options("default")).unwrap_err();
        assert!(
            matches!(
                err,
                ArtifactError::SchemaTooNew {
                    found: 99,
                    supported: 5
                }
            ),
            "{err}"
        );
    }

    /// Saves to one storage id through two handles (two processes, say) never overlap: while
    /// one is writing its content, the other waits, so the newest record points at its own
    /// content. A failed content write stores no record.
    #[test]
    fn saves_to_one_storage_id_are_serialized() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_storage_lock").unwrap();
        let stores = [open(&url, "default"), open(&url, "default")];
        let writing = AtomicBool::new(false);
        let overlaps = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for store in &stores {
                let (writing, overlaps) = (&writing, &overlaps);
                s.spawn(move || {
                    for i in 0..10 {
                        let mut a = Artifact::new("s", "k", "t", format!("{i}"));
                        a.storage = Some(StorageLocation {
                            backend: "write_to_file".into(),
                            id: "shared.json".into(),
                        });
                        store
                            .save_with_content(&a, &mut || {
                                if writing.swap(true, Ordering::SeqCst) {
                                    overlaps.fetch_add(1, Ordering::SeqCst);
                                }
                                std::thread::sleep(Duration::from_millis(5));
                                writing.store(false, Ordering::SeqCst);
                                Ok(())
                            })
                            .unwrap();
                    }
                });
            }
        });
        assert_eq!(overlaps.load(Ordering::SeqCst), 0);
        assert_eq!(stores[0].list("s", None).unwrap().len(), 20);
        let failed = Artifact::new("s", "k", "t", "failed");
        let err = stores[0]
            .save_with_content(&failed, &mut || {
                Err(ArtifactError::database("writing content", "disk full"))
            })
            .unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
        assert!(stores[1].get(failed.id).unwrap().is_none());
    }

    /// The environment variable that turns `kill9_child` into the child process: the URL.
    const CHILD_URL: &str = "MNEMON_ARTIFACTS_PG_KILL9_CHILD_URL";

    /// The child side of `an_acknowledged_save_survives_kill_9`: saves in a loop and prints
    /// each id once `save` has returned. Does nothing in a normal test run.
    #[test]
    fn kill9_child() {
        let Ok(url) = std::env::var(CHILD_URL) else {
            return;
        };
        use std::io::Write;
        let store = open(&url, "default");
        for i in 0.. {
            let a = Artifact::new("s", "k", "t", format!("{i}"));
            store.save(&a).unwrap();
            let mut out = std::io::stdout().lock();
            writeln!(out, "SAVED {}", a.id).unwrap();
            out.flush().unwrap();
        }
    }

    /// Every save acknowledged before a SIGKILL of the client is in the database afterwards,
    /// and the latest record is the last acknowledged one or one saved after it.
    #[cfg(unix)]
    #[test]
    fn an_acknowledged_save_survives_kill_9() {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};

        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_kill9").unwrap();
        for round in 0..3 {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .arg(crate::harness_name(module_path!(), "kill9_child"))
                .args(["--exact", "--nocapture"])
                .env(CHILD_URL, &url)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let mut acknowledged = Vec::new();
            for line in BufReader::new(stdout).lines() {
                if let Some(id) = line.unwrap().strip_prefix("SAVED ") {
                    acknowledged.push(id.parse::<uuid::Uuid>().unwrap());
                    if acknowledged.len() == 40 + 20 * round {
                        break;
                    }
                }
            }
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            let store = open(&url, "default");
            for id in &acknowledged {
                assert!(store.get(*id).unwrap().is_some(), "acknowledged {id} lost");
            }
            let last = store.get(*acknowledged.last().unwrap()).unwrap().unwrap();
            let latest = store.latest("s", "k").unwrap().unwrap();
            let listed = store.list("s", None).unwrap();
            let position = |id| listed.iter().position(|a| a.id == id).unwrap();
            assert!(position(latest.id) >= position(last.id));
            assert_eq!(listed.last().unwrap().id, latest.id);
        }
    }
}

/// SIGKILL of a client saving artifacts whose content goes to `write_to_file` (issue 13, item
/// 6): every acknowledged save is there, and no record, acknowledged or not, points at content
/// that is missing.
mod postgres_content_crash {
    use mnemon_artifacts::{
        ArtifactStore, PostgresArtifactOptions, PostgresArtifactStore, StorageBackend,
        WRITE_TO_FILE, WriteToFile,
    };
    use mnemon_types::{Artifact, StorageLocation};

    /// Set in the child: the database URL and the content root, separated by a newline.
    const CHILD_ENV: &str = "MNEMON_ARTIFACTS_PG_CONTENT_KILL9_CHILD";

    fn open(url: &str) -> PostgresArtifactStore {
        PostgresArtifactStore::open(url, PostgresArtifactOptions::default())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The child: saves with content in a loop, printing each id once the save returned.
    #[test]
    fn content_kill9_child() {
        let Ok(env) = std::env::var(CHILD_ENV) else {
            return;
        };
        use std::io::Write;
        let (url, root) = env.split_once('\n').unwrap();
        let store = open(url);
        let files = WriteToFile::new(root);
        for i in 0.. {
            let mut a = Artifact::new("s", "k", "t", format!("{i}"));
            let storage_id = format!("c-{}.json", a.id);
            a.storage = Some(StorageLocation {
                backend: WRITE_TO_FILE.into(),
                id: storage_id.clone(),
            });
            store
                .save_with_content(&a, &mut || {
                    files.write(&storage_id, &serde_json::json!({ "i": i }))
                })
                .unwrap();
            let mut out = std::io::stdout().lock();
            writeln!(out, "SAVED {}", a.id).unwrap();
            out.flush().unwrap();
        }
    }

    #[cfg(unix)]
    #[test]
    fn no_record_points_at_missing_content_after_kill_9() {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};

        if std::env::var_os(CHILD_ENV).is_some() {
            return;
        }
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_content_kill9").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let files = WriteToFile::new(dir.path());
        let mut acknowledged = Vec::new();
        for round in 0..5 {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .arg(crate::harness_name(module_path!(), "content_kill9_child"))
                .args(["--exact", "--nocapture"])
                .env(CHILD_ENV, format!("{url}\n{}", dir.path().display()))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            for line in BufReader::new(stdout).lines() {
                if let Some(id) = line.unwrap().strip_prefix("SAVED ") {
                    acknowledged.push(id.parse::<uuid::Uuid>().unwrap());
                    if acknowledged.len() == 30 * (round + 1) {
                        break;
                    }
                }
            }
            child.kill().unwrap(); // SIGKILL, mid-save most likely
            child.wait().unwrap();
            let store = open(&url);
            for id in &acknowledged {
                assert!(store.get(*id).unwrap().is_some(), "acknowledged {id} lost");
            }
            let records = store.list("s", None).unwrap();
            assert!(records.len() >= acknowledged.len());
            for record in records {
                let storage = record.storage.as_ref().expect("every save had storage");
                let content = files.read(&storage.id);
                assert!(
                    content.is_ok(),
                    "round {round}: record {} points at missing content: {content:?}",
                    record.id
                );
            }
        }
    }
}

/// A PostgreSQL database at artifact schema version 1 (before namespaces) keeps its records
/// and its sequence, in the default namespace, when a current build opens it.
mod postgres_version_1 {
    use mnemon_artifacts::{ArtifactStore, PostgresArtifactOptions, PostgresArtifactStore};
    use mnemon_types::Artifact;

    #[test]
    fn records_move_into_the_default_namespace() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_v1").unwrap();
        let mut client = server.connect(url.rsplit('/').next().unwrap()).unwrap();
        client
            .batch_execute(
                "CREATE TABLE artifact_schema (singleton INTEGER PRIMARY KEY
                   CHECK (singleton = 1), version BIGINT NOT NULL);
                 INSERT INTO artifact_schema VALUES (1, 1);
                 CREATE TABLE artifact_records (seq BIGSERIAL PRIMARY KEY,
                   id TEXT NOT NULL UNIQUE, scope BYTEA NOT NULL, key BYTEA NOT NULL,
                   artifact_type BYTEA NOT NULL, name BYTEA NOT NULL,
                   description BYTEA NOT NULL, storage_backend BYTEA, storage_id BYTEA,
                   data TEXT, created_at TEXT NOT NULL,
                   CHECK ((storage_backend IS NULL) = (storage_id IS NULL)));
                 CREATE INDEX artifact_records_by_key ON artifact_records (scope, key, seq);
                 CREATE INDEX artifact_records_by_type
                   ON artifact_records (scope, artifact_type, seq);",
            )
            .unwrap();
        let old = Artifact::new("s", "k", "t", "old").with_data(serde_json::json!({"a": [1]}));
        let seq: i64 = client
            .query_one(
                "INSERT INTO artifact_records (id, scope, key, artifact_type, name, description,
                   data, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING seq",
                &[
                    &old.id.to_string(),
                    &old.scope.as_bytes(),
                    &old.key.as_bytes(),
                    &old.artifact_type.as_bytes(),
                    &old.name.as_bytes(),
                    &old.description.as_bytes(),
                    &old.data.as_ref().map(|d| d.to_string()),
                    &old.created_at.to_string(),
                ],
            )
            .unwrap()
            .get(0);
        // A record jsonb cannot hold (a NUL in its name): the migration must still succeed.
        let nul = Artifact::new("s", "k0", "t", "a\u{0}b").with_storage(
            mnemon_types::StorageLocation::new("write_to_file", "f.json"),
        );
        client
            .execute(
                "INSERT INTO artifact_records (id, scope, key, artifact_type, name, description,
                   storage_backend, storage_id, created_at)
                 VALUES ($1, $2, $3, $4, $5, '', $6, $7, $8)",
                &[
                    &nul.id.to_string(),
                    &nul.scope.as_bytes(),
                    &nul.key.as_bytes(),
                    &nul.artifact_type.as_bytes(),
                    &nul.name.as_bytes(),
                    &b"write_to_file".as_slice(),
                    &b"f.json".as_slice(),
                    &nul.created_at.to_string(),
                ],
            )
            .unwrap();
        let store = PostgresArtifactStore::open(&url, PostgresArtifactOptions::default()).unwrap();
        assert_eq!(store.get(old.id).unwrap().as_ref(), Some(&old));
        assert_eq!(store.latest("s", "k").unwrap().as_ref(), Some(&old));
        assert_eq!(store.get(nul.id).unwrap().as_ref(), Some(&nul));
        // Issue 14: version 3 built each record's filterable document, exactly the one a save
        // writes (`mnemon_artifacts::document`); none for the record jsonb cannot hold.
        let same: Option<bool> = client
            .query_one(
                "SELECT doc = $2::text::jsonb FROM artifact_records WHERE id = $1",
                &[
                    &old.id.to_string(),
                    &mnemon_artifacts::document(&old, None).to_string(),
                ],
            )
            .unwrap()
            .get(0);
        assert_eq!(same, Some(true));
        let filter =
            mnemon_artifacts::Filter::from_json(r#"{"contains": {"path": "data.a", "value": 1}}"#)
                .unwrap();
        assert_eq!(
            store.list_where(None, Some(&filter), None).unwrap(),
            std::slice::from_ref(&old)
        );
        let stored = mnemon_artifacts::Filter::from_json(r#"{"exists": "storage"}"#).unwrap();
        assert_eq!(store.count_where(None, Some(&stored)).unwrap(), 0);
        assert!(store.delete(nul.id).unwrap());
        let next = store.save(&Artifact::new("s", "k", "t", "new")).unwrap();
        assert!(next > u64::try_from(seq).unwrap());
        let other = PostgresArtifactStore::open(
            &url,
            PostgresArtifactOptions {
                namespace: "acme".parse().unwrap(),
                ..PostgresArtifactOptions::default()
            },
        )
        .unwrap();
        assert!(other.get(old.id).unwrap().is_none());
        assert!(other.list("s", None).unwrap().is_empty());
        // The same id in another namespace is another record.
        other.save(&old).unwrap();
        assert!(other.delete(old.id).unwrap());
        assert!(store.get(old.id).unwrap().is_some());
    }
}

/// Text the SQLite store keeps, NUL characters included, round-trips through PostgreSQL too
/// (whose `text` cannot hold NUL), so that a copy between the backends loses nothing.
mod postgres_nul {
    use mnemon_artifacts::{ArtifactStore, PostgresArtifactOptions, PostgresArtifactStore};
    use mnemon_types::{Artifact, StorageLocation};

    #[test]
    fn nul_characters_round_trip() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_nul").unwrap();
        let store = PostgresArtifactStore::open(&url, PostgresArtifactOptions::default()).unwrap();
        let mut a = Artifact::new("s\0cope", "k\0ey", "t\0ype", "n\0ame");
        a.description = "d\0".into();
        a.storage = Some(StorageLocation {
            backend: "b\0".into(),
            id: "i\0d".into(),
        });
        store.save(&a).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.get(a.id).unwrap().as_ref(), Some(&a));
        assert_eq!(store.latest("s\0cope", "k\0ey").unwrap().as_ref(), Some(&a));
        assert_eq!(store.list("s\0cope", Some("t\0ype")).unwrap(), [a.clone()]);
        // The filtered listings and counts bound the scope and type as `text`, which refused
        // the NUL ("invalid byte sequence for encoding UTF8: 0x00"): what `GET
        // /v1/artifacts?scope=…` calls. Found by a review.
        assert_eq!(
            store.list_where(Some("s\0cope"), None, None).unwrap(),
            [a.clone()]
        );
        assert_eq!(store.count_where(Some("s\0cope"), None).unwrap(), 1);
        assert_eq!(store.count_where(Some("s"), None).unwrap(), 0);
        let page = store
            .list_page(&mnemon_artifacts::PageQuery {
                scope: Some("s\0cope"),
                artifact_type: Some("t\0ype"),
                limit: 10,
                ..mnemon_artifacts::PageQuery::default()
            })
            .unwrap()
            .expect("a first page");
        assert_eq!(page.len(), 1);
    }
}

/// The saves of a namespace commit in `seq` order. A save drew its `seq` at its insert and
/// committed later: one that drew 1 and was slow to commit (here a trigger sleeps in its
/// insert) was passed by one that drew 2 and committed, and a reader paging by `seq` (the
/// REST listing's cursor, `mnemon migrate`) that saw 2 would never come back for 1. Found by a
/// review; docs/postgres.md#artifact-saves-commit-in-order.
mod postgres_save_order {
    use std::time::Duration;

    use mnemon_artifacts::{ArtifactStore, PostgresArtifactOptions, PostgresArtifactStore};
    use mnemon_types::Artifact;

    #[test]
    fn a_save_that_draws_a_later_seq_commits_later() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_save_order").unwrap();
        let store = PostgresArtifactStore::open(&url, PostgresArtifactOptions::default()).unwrap();
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        admin
            .batch_execute(
                "CREATE FUNCTION slow_save() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                   IF NEW.key = convert_to('slow', 'UTF8') THEN PERFORM pg_sleep(1); END IF;
                   RETURN NEW;
                 END $$;
                 CREATE TRIGGER slow_save AFTER INSERT ON artifact_records
                   FOR EACH ROW EXECUTE FUNCTION slow_save();",
            )
            .unwrap();
        let slow = Artifact::new("s", "slow", "t", "n");
        let fast = Artifact::new("s", "fast", "t", "n");
        std::thread::scope(|threads| {
            let saving = threads.spawn(|| store.save(&slow).unwrap());
            // The slow save is in its insert (it has drawn its seq) before the fast one starts.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let sleeping: i64 = admin
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity
                         WHERE wait_event = 'PgSleep' AND datname = current_database()",
                        &[],
                    )
                    .unwrap()
                    .get(0);
                if sleeping > 0 {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "the slow save never started"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            let fast_seq = store.save(&fast).unwrap();
            // Once the fast save is acknowledged, every save with a smaller seq is visible.
            let listed: Vec<String> = store
                .list_where(Some("s"), None, None)
                .unwrap()
                .into_iter()
                .map(|a| a.key)
                .collect();
            let slow_seq = saving.join().unwrap();
            assert!(slow_seq < fast_seq, "seqs {slow_seq} and {fast_seq}");
            assert_eq!(
                listed,
                ["slow", "fast"],
                "the fast save (seq {fast_seq}) was listed before the slow one (seq \
                 {slow_seq}) had committed"
            );
        });
    }
}

/// `scopes` on PostgreSQL costs one index probe per scope, not a read of every record, and a
/// listing page reads its own records: store-wide listings must not grow with the number of
/// records (issue 13, hot paths).
mod postgres_scopes_cost {
    use mnemon_artifacts::{
        ArtifactStore, PageQuery, PostgresArtifactOptions, PostgresArtifactStore,
    };
    use mnemon_types::Artifact;

    /// The rows the scan nodes on `artifact_records` produced, summed over their loops, in
    /// the text of `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF)`.
    fn rows_read(plan: &[String]) -> u64 {
        let number_after = |line: &str, label: &str| -> u64 {
            let Some(at) = line.find(label) else {
                return 0;
            };
            let digits: String = line[at + label.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().unwrap()
        };
        plan.iter()
            .filter(|line| line.contains(" on artifact_records"))
            .map(|line| number_after(line, "rows=") * number_after(line, "loops="))
            .sum()
    }

    #[test]
    fn scopes_reads_one_index_entry_per_scope_not_every_record() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_scopes_cost").unwrap();
        let store = PostgresArtifactStore::open(&url, PostgresArtifactOptions::default()).unwrap();
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        // 4,000 records in four scopes of the store's namespace, 2,000 in another namespace.
        admin
            .batch_execute(
                "INSERT INTO artifact_records (id, scope, key, artifact_type, name, description,
                   created_at, namespace)
                 SELECT gen_random_uuid()::text, convert_to('s' || (i % 4), 'UTF8'), 'k', 't',
                   'n', '', '2026-01-01T00:00:00.000000Z',
                   CASE WHEN i <= 4000 THEN 'default' ELSE 'other' END
                 FROM generate_series(1, 6000) AS i;
                 ANALYZE artifact_records;",
            )
            .unwrap();
        assert_eq!(store.scopes().unwrap(), ["s0", "s1", "s2", "s3"]);

        // The statement the store ran, as the server saw it, planned and run again here.
        let sql: String = admin
            .query_one(
                "SELECT query FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND query LIKE '%artifact_records%'",
                &[],
            )
            .unwrap()
            .get(0);
        admin
            .batch_execute(&format!("PREPARE scopes_probe(text, int8) AS {sql}"))
            .unwrap();
        // Both the custom and the generic plan (the server switches after five runs).
        for run in 0..7 {
            let plan: Vec<String> = admin
                .query(
                    "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) \
                     EXECUTE scopes_probe('default', 1700000000000)",
                    &[],
                )
                .unwrap()
                .iter()
                .map(|row| row.get(0))
                .collect();
            let read = rows_read(&plan);
            assert!(
                read > 0,
                "no scan of artifact_records in:\n{}",
                plan.join("\n")
            );
            assert!(
                read <= 20,
                "run {run}: {read} rows read for 4 scopes of 4,000 records:\n{}",
                plan.join("\n")
            );
        }
    }

    /// A listing page reads its own records, not those before it: ten records of one scope
    /// after its 900th, among 4,000 records in four scopes and 2,000 of another namespace.
    #[test]
    fn a_page_reads_its_own_records_not_those_before_it() {
        let server = mnemon_tests::require_postgres!();
        let url = server.fresh_database("artifact_page_cost").unwrap();
        let store = PostgresArtifactStore::open(&url, PostgresArtifactOptions::default()).unwrap();
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        admin
            .batch_execute(
                "INSERT INTO artifact_records (id, scope, key, artifact_type, name, description,
                   created_at, namespace)
                 SELECT 'id-' || i,
                   convert_to(CASE WHEN i <= 1000 OR i > 3990 THEN 's1'
                                   ELSE 's' || (i % 3 * 2) END, 'UTF8'),
                   convert_to('k' || i, 'UTF8'), 't', 'n', '', '2026-01-01T00:00:00.000000Z',
                   CASE WHEN i <= 4000 THEN 'default' ELSE 'other' END
                 FROM generate_series(1, 6000) AS i;
                 ANALYZE artifact_records;",
            )
            .unwrap();
        // The statement a page runs, as the store builds it: caught from the server after a
        // page through the store, then planned and run here after record 1000, the last of
        // scope s1 before 2,990 records of other scopes (and ten more of s1).
        let cursor = Artifact::new("s1", "cursor", "t", "n");
        store.save(&cursor).unwrap();
        let page = store
            .list_page(&PageQuery {
                scope: Some("s1"),
                after: Some(cursor.id),
                limit: 10,
                ..PageQuery::default()
            })
            .unwrap()
            .unwrap();
        assert!(page.is_empty(), "nothing was saved after the cursor");
        let sql: String = admin
            .query_one(
                "SELECT query FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND query LIKE '%seq >%'",
                &[],
            )
            .unwrap()
            .get(0);
        admin
            .batch_execute(&format!(
                "PREPARE page_probe(text, int8, text, int8, int8) AS {sql}"
            ))
            .unwrap();
        let after: i64 = admin
            .query_one("SELECT seq FROM artifact_records WHERE id = 'id-1000'", &[])
            .unwrap()
            .get(0);
        for run in 0..7 {
            let plan: Vec<String> = admin
                .query(
                    &format!(
                        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) \
                         EXECUTE page_probe('default', 1700000000000, '7331', {after}, 11)" // '7331': "s1" in hex, as the store binds it
                    ),
                    &[],
                )
                .unwrap()
                .iter()
                .map(|row| row.get(0))
                .collect();
            // Rows a scan produced, and those it read and dropped.
            let dropped: u64 = plan
                .iter()
                .filter_map(|line| line.trim().strip_prefix("Rows Removed by Filter: "))
                .map(|n| n.parse::<u64>().unwrap())
                .sum();
            let read = rows_read(&plan) + dropped;
            assert!(
                (10..=30).contains(&read),
                "run {run}: {read} rows read for a page of 11 after 1,000 records:\n{}",
                plan.join("\n")
            );
        }
    }
}
