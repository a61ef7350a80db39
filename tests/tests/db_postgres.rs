//! The PostgreSQL half of `mnemon-db` (`mnemon_db::postgres`) against the real test server
//! (docs/postgres.md): the pool's bounds, timeout and replacement of broken connections,
//! migrations under concurrent openers, refusal of a newer schema, the errors for a bad URL, a
//! wrong password, a closed port and a missing database, and pgvector detection.

use std::net::TcpListener;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use mnemon_db::postgres::{self, Migrated, Pool, Settings, VectorSupport};
use mnemon_db::{DbError, Durability, Migration, Schema};
use mnemon_tests::postgres::PgServer;
use mnemon_tests::require_postgres;

/// Three steps; step 2 records that it ran in `note_log`, so a step applied twice shows.
static NOTES_V3: Schema = Schema {
    component: "note",
    table: "note_schema",
    key_column: "singleton",
    migrations: &[
        Migration {
            version: 1,
            sql: "CREATE TABLE note_notes (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL);
                  CREATE TABLE note_log (step BIGINT NOT NULL, at TIMESTAMPTZ DEFAULT now());",
        },
        Migration {
            version: 2,
            sql: "INSERT INTO note_log (step) VALUES (2);
                  ALTER TABLE note_notes ADD COLUMN namespace TEXT NOT NULL DEFAULT 'default';",
        },
        Migration {
            version: 3,
            sql: "CREATE INDEX note_notes_namespace ON note_notes (namespace, id);",
        },
    ],
};

fn prefix(migrations: usize) -> Schema {
    Schema {
        migrations: NOTES_V3.migrations.get(..migrations).unwrap_or_default(),
        ..NOTES_V3
    }
}

fn fresh(server: &PgServer, name: &str) -> String {
    server
        .fresh_database(name)
        .unwrap_or_else(|error| panic!("fresh database {name}: {error}"))
}

fn pool(url: &str, settings: Settings) -> Pool {
    Pool::connect(url, settings).unwrap_or_else(|error| panic!("{error}"))
}

fn refused(url: &str) -> DbError {
    let settings = Settings {
        connect_timeout: Duration::from_secs(3),
        ..Settings::default()
    };
    match Pool::connect(url, settings) {
        Ok(pool) => panic!("{url} connected: {pool:?}"),
        Err(error) => error,
    }
}

fn backend_pid(client: &mut ::postgres::Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap_or_else(|error| panic!("{error}"))
        .get(0)
}

#[test]
fn the_pool_is_bounded_and_a_checkout_times_out_with_a_clear_error() {
    let server = require_postgres!();
    let url = fresh(server, "pool bounded");
    let settings = Settings {
        pool_size: 2,
        checkout_timeout: Duration::from_millis(300),
        ..Settings::default()
    };
    let pool = pool(&url, settings);
    assert_eq!((pool.size(), pool.open_connections()), (2, 1));
    let mut a = pool.get().unwrap();
    let mut b = pool.get().unwrap();
    assert_ne!(backend_pid(&mut a), backend_pid(&mut b));
    assert_eq!(pool.open_connections(), 2);

    let started = Instant::now();
    let error = pool.get().unwrap_err();
    let waited = started.elapsed();
    assert!(
        matches!(error, DbError::PoolTimeout { size: 2, .. }),
        "{error}"
    );
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    // Bounded by the checkout timeout, with room for a loaded machine.
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    let message = error.to_string();
    assert!(message.contains("all 2 connections"), "{message}");
    assert!(message.contains("raise the pool size"), "{message}");

    // A returned connection is reused, not a new one opened.
    let pid_a = backend_pid(&mut a);
    drop(a);
    assert_eq!(pool.idle_connections(), 1);
    let mut c = pool.get().unwrap();
    assert_eq!(backend_pid(&mut c), pid_a);
    assert_eq!(pool.open_connections(), 2);
    drop((b, c));
    assert_eq!((pool.open_connections(), pool.idle_connections()), (2, 2));

    // The server sees no more than the pool's size of our connections.
    assert_eq!(server_connections(server, &url), 2);
}

/// How many connections named `mnemon` the server has to `url`'s database.
fn server_connections(server: &PgServer, url: &str) -> i64 {
    server
        .mnemon_connections(url)
        .unwrap_or_else(|error| panic!("{error}"))
}

/// A sibling pool (what a memory store's background indexer uses) reaches the same database
/// with the same settings and its own bound, opening nothing until asked; `close_idle` closes
/// the connections idle for at least its argument, and the pool opens new ones afterwards.
#[test]
fn a_sibling_pool_connects_lazily_and_closes_its_idle_connections() {
    let server = require_postgres!();
    let url = fresh(server, "pool sibling");
    let pool = pool(
        &url,
        Settings {
            durability: Durability::Normal,
            checkout_timeout: Duration::from_millis(300),
            ..Settings::default()
        },
    );
    let sibling = pool.sibling(2);
    assert_eq!((sibling.size(), sibling.open_connections()), (2, 0));
    assert_eq!(sibling.settings().durability, Durability::Normal);
    let mut a = sibling.get().unwrap();
    let b = sibling.get().unwrap();
    let commit: String = a.query_one("SHOW synchronous_commit", &[]).unwrap().get(0);
    assert_eq!(commit, "off", "the sibling keeps the pool's durability");
    assert!(matches!(
        sibling.get().unwrap_err(),
        DbError::PoolTimeout { size: 2, .. }
    ));
    assert_eq!(server_connections(server, &url), 3);
    drop((a, b));
    sibling.close_idle(Duration::from_secs(3600));
    assert_eq!(sibling.idle_connections(), 2, "not idle long enough");
    sibling.close_idle(Duration::ZERO);
    assert_eq!(
        (sibling.open_connections(), sibling.idle_connections()),
        (0, 0)
    );
    assert_eq!(pool.open_connections(), 1, "the first pool's stay");
    let deadline = Instant::now() + Duration::from_secs(10);
    while server_connections(server, &url) != 1 {
        assert!(Instant::now() < deadline, "the closed connections stayed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = sibling.get().unwrap();
    assert_eq!(
        c.query_one("SELECT 1", &[]).unwrap().get::<_, i32>(0),
        1,
        "a closed pool opens again"
    );
}

/// Connections are closed without a panic on a thread that drives a tokio runtime (where an
/// async server drops its last store handles when it stops): the client's goodbye is a
/// blocking call, which tokio refuses there, so the pool closes them on a thread of its own.
/// Every way a pool closes connections is taken: `close_idle`, `discard`, and the pool's last
/// handle dropped with idle connections.
#[test]
fn a_pool_closes_its_connections_on_an_async_thread() {
    let server = require_postgres!();
    let url = fresh(server, "pool async close");
    let pool = pool(&url, Settings::default());
    let sibling = pool.sibling(2);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // Opened here: every call of the synchronous client panics on such a thread; closing
    // must not.
    let (a, b) = (sibling.get().unwrap(), sibling.get().unwrap());
    drop(pool.get().unwrap());
    runtime.block_on(async move {
        drop(a);
        sibling.close_idle(Duration::ZERO);
        b.discard();
        assert_eq!(sibling.open_connections(), 0);
        assert_eq!(pool.idle_connections(), 1);
        drop(pool);
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while server_connections(server, &url) != 0 {
        assert!(Instant::now() < deadline, "connections stayed open");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_waiting_checkout_gets_the_connection_returned_meanwhile() {
    let server = require_postgres!();
    let url = fresh(server, "pool waiting");
    let settings = Settings {
        pool_size: 1,
        checkout_timeout: Duration::from_secs(10),
        ..Settings::default()
    };
    let pool = pool(&url, settings);
    let held = pool.get().unwrap();
    // Taken before the releaser starts: its 200 ms run from here at the earliest.
    let started = Instant::now();
    let releaser = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        drop(held);
    });
    let mut client = pool.get().unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(150), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    backend_pid(&mut client);
    releaser.join().unwrap();
    assert_eq!(pool.open_connections(), 1);
}

#[test]
fn broken_connections_are_replaced() {
    let server = require_postgres!();
    let url = fresh(server, "pool broken");
    let settings = Settings {
        pool_size: 1,
        checkout_timeout: Duration::from_secs(2),
        validate_after: Duration::ZERO,
        ..Settings::default()
    };
    let pool = pool(&url, settings);
    let mut admin = server.connect("postgres").unwrap();
    let terminate = |admin: &mut ::postgres::Client, pid: i32| {
        let done: bool = admin
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .unwrap()
            .get(0);
        assert!(done);
    };

    // Killed while checked out: the next statement fails as ServerGone, and the connection is
    // discarded when returned.
    let mut client = pool.get().unwrap();
    let first = backend_pid(&mut client);
    terminate(&mut admin, first);
    let failure = loop {
        match client.query_one("SELECT 1", &[]) {
            Ok(_) => thread::sleep(Duration::from_millis(20)),
            Err(error) => break error,
        }
    };
    let error = postgres::error(&failure, pool.target(), "selecting 1");
    assert!(matches!(error, DbError::ServerGone { .. }), "{error}");
    assert!(error.to_string().contains("retry"), "{error}");
    drop(client);
    assert_eq!(pool.open_connections(), 0);
    let mut client = pool.get().unwrap();
    let second = backend_pid(&mut client);
    assert_ne!(first, second);
    drop(client);

    // Killed while idle in the pool: the checkout notices and opens a new one.
    terminate(&mut admin, second);
    thread::sleep(Duration::from_millis(100));
    let mut client = pool.get().unwrap();
    let third = backend_pid(&mut client);
    assert_ne!(third, second);
    assert_eq!(pool.open_connections(), 1);
}

#[test]
fn durability_sets_synchronous_commit() {
    let server = require_postgres!();
    let url = fresh(server, "pool durability");
    for (durability, expected) in [(Durability::Full, "on"), (Durability::Normal, "off")] {
        let settings = Settings {
            durability,
            ..Settings::default()
        };
        let pool = pool(&url, settings);
        let mut client = pool.get().unwrap();
        let value: String = client
            .query_one("SHOW synchronous_commit", &[])
            .unwrap()
            .get(0);
        assert_eq!(value, expected, "{durability:?}");
    }
}

#[test]
fn eight_concurrent_openers_migrate_a_fresh_database_once() {
    let server = require_postgres!();
    for round in 0..3 {
        let url = fresh(server, "migrate concurrently");
        let openers = 8;
        let start = Arc::new(Barrier::new(openers));
        let handles: Vec<_> = (0..openers)
            .map(|_| {
                let url = url.clone();
                let start = Arc::clone(&start);
                thread::spawn(move || {
                    // Each opener is a pool of its own, as a separate process would be.
                    let pool = Pool::connect(&url, Settings::default())?;
                    start.wait();
                    let started = Instant::now();
                    let migrated = pool.migrate(&NOTES_V3)?;
                    let elapsed = started.elapsed();
                    // Creating the extension races the same way without its lock.
                    let vector = pool.vector_support()?;
                    assert!(vector.is_available(), "{vector}");
                    Ok::<_, DbError>((migrated, elapsed))
                })
            })
            .collect();
        let results: Vec<(Migrated, Duration)> = handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let applied = results
            .iter()
            .filter(|(m, _)| *m == Migrated::Applied { from: 0, to: 3 })
            .count();
        assert_eq!(applied, 1, "{results:?}");
        assert!(
            results
                .iter()
                .all(|(m, _)| matches!(m, Migrated::Applied { .. } | Migrated::Current)),
            "{results:?}"
        );
        let slowest = results.iter().map(|(_, d)| *d).max().unwrap_or_default();
        eprintln!("round {round}: 8 concurrent migrations, slowest {slowest:?}");

        let pool = pool(&url, Settings::default());
        let mut client = pool.get().unwrap();
        assert_eq!(
            postgres::schema_version(&mut client, pool.target(), &NOTES_V3).unwrap(),
            Some(3)
        );
        let logged: i64 = client
            .query_one("SELECT count(*) FROM note_log", &[])
            .unwrap()
            .get(0);
        assert_eq!(logged, 1, "step 2 ran {logged} times");
        // Once current, migrating again is a read.
        assert_eq!(pool.migrate(&NOTES_V3).unwrap(), Migrated::Current);
    }
}

#[test]
fn migrations_apply_in_steps_and_a_newer_database_is_refused() {
    let server = require_postgres!();
    let url = fresh(server, "migrate newer");
    let pool = pool(&url, Settings::default());
    assert_eq!(
        pool.migrate(&prefix(1)).unwrap(),
        Migrated::Applied { from: 0, to: 1 }
    );
    assert_eq!(
        pool.migrate(&NOTES_V3).unwrap(),
        Migrated::Applied { from: 1, to: 3 }
    );

    let error = pool.migrate(&prefix(2)).unwrap_err();
    match &error {
        DbError::PgSchemaTooNew {
            component,
            found,
            supported,
            ..
        } => assert_eq!((*component, *found, *supported), ("note", 3, 2)),
        other => panic!("{other}"),
    }
    let message = error.to_string();
    assert!(message.contains("schema version 3"), "{message}");
    assert!(message.contains("upgrade Mnemon"), "{message}");
    assert!(!message.contains("postgres://"), "{message}");
    let mut client = pool.get().unwrap();
    assert_eq!(
        postgres::schema_version(&mut client, pool.target(), &NOTES_V3).unwrap(),
        Some(3)
    );
}

#[test]
fn a_failing_step_leaves_the_database_unchanged() {
    let server = require_postgres!();
    let url = fresh(server, "migrate failing");
    let pool = pool(&url, Settings::default());
    static BROKEN: Schema = Schema {
        component: "note",
        table: "note_schema",
        key_column: "singleton",
        migrations: &[
            Migration {
                version: 1,
                sql: "CREATE TABLE note_notes (id BIGINT PRIMARY KEY);",
            },
            Migration {
                version: 2,
                sql: "ALTER TABLE note_missing ADD COLUMN x INT;",
            },
        ],
    };
    let error = pool.migrate(&BROKEN).unwrap_err();
    match &error {
        DbError::PgMigration {
            version, detail, ..
        } => {
            assert_eq!(*version, 2);
            assert!(detail.contains("42P01"), "{detail}");
        }
        other => panic!("{other}"),
    }
    assert!(error.to_string().contains("left unchanged"), "{error}");
    let mut client = pool.get().unwrap();
    assert_eq!(
        postgres::schema_version(&mut client, pool.target(), &BROKEN).unwrap(),
        None
    );
    let exists: bool = client
        .query_one("SELECT to_regclass('note_notes') IS NOT NULL", &[])
        .unwrap()
        .get(0);
    assert!(!exists, "step 1 was kept although step 2 failed");
}

#[test]
fn a_malformed_url_is_a_bad_url() {
    for url in [
        "postgres://postgres@127.0.0.1:99999/db",
        "http://127.0.0.1/db",
        "postgres://u:s3cret@127.0.0.1/db?sslmode=sometimes",
    ] {
        let error = refused(url);
        assert!(matches!(error, DbError::BadUrl { .. }), "{url}: {error}");
        assert!(!error.to_string().contains("s3cret"), "{error}");
    }
}

#[test]
fn a_closed_port_is_unreachable() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let error = refused(&format!("postgres://postgres:s3cret@127.0.0.1:{port}/db"));
    assert!(matches!(error, DbError::Unreachable { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(message.contains("check the host and port"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
}

#[test]
fn a_missing_database_is_named() {
    let server = require_postgres!();
    let error = refused(&server.url("no_such_database"));
    match &error {
        DbError::DatabaseMissing { database, .. } => assert_eq!(database, "no_such_database"),
        other => panic!("{other}"),
    }
    assert!(
        error.to_string().contains("createdb no_such_database"),
        "{error}"
    );
}

#[test]
fn a_wrong_or_missing_password_is_auth_refused_and_a_restart_is_server_gone() {
    // This test changes pg_hba.conf and restarts the server: a server of its own.
    if !mnemon_tests::postgres::require_binaries() {
        return;
    }
    let server = PgServer::start().unwrap_or_else(|error| panic!("{error}"));
    let mut admin = server.connect("postgres").unwrap();
    admin
        .batch_execute("CREATE ROLE mnemon_pw LOGIN PASSWORD 'right-pw'")
        .unwrap();
    let hba: String = admin.query_one("SHOW hba_file", &[]).unwrap().get(0);
    let rules = std::fs::read_to_string(&hba).unwrap();
    // First match wins: this role must authenticate with a password, everyone else is trusted.
    std::fs::write(
        &hba,
        format!("host all mnemon_pw 127.0.0.1/32 scram-sha-256\n{rules}"),
    )
    .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let port = server.port();
    let url = |password: &str| format!("postgres://mnemon_pw{password}@127.0.0.1:{port}/postgres");

    // The reload is asynchronous: wait until the rule is in force.
    let deadline = Instant::now() + Duration::from_secs(10);
    let wrong = loop {
        match Pool::connect(&url(":wrong-pw"), Settings::default()) {
            Err(error) => break error,
            Ok(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            Ok(_) => panic!("pg_hba.conf rule not in force after 10 s"),
        }
    };
    assert!(matches!(wrong, DbError::AuthRefused { .. }), "{wrong}");
    let message = wrong.to_string();
    assert!(message.contains("28P01"), "{message}");
    assert!(
        message.contains("check the user name and password"),
        "{message}"
    );
    assert!(!message.contains("wrong-pw"), "{message}");

    let missing = refused(&url(""));
    assert!(matches!(missing, DbError::AuthRefused { .. }), "{missing}");
    assert!(missing.to_string().contains("password"), "{missing}");

    let pool = pool(&url(":right-pw"), Settings::default());
    let mut client = pool.get().unwrap();
    backend_pid(&mut client);

    // A restart: the connection in hand reports ServerGone; the pool then opens a new one.
    server.restart().unwrap_or_else(|error| panic!("{error}"));
    let error = client
        .query_one("SELECT 1", &[])
        .map(|_| ())
        .map_err(|e| postgres::error(&e, pool.target(), "selecting 1"))
        .unwrap_err();
    assert!(matches!(error, DbError::ServerGone { .. }), "{error}");
    drop(client);
    let mut client = pool.get().unwrap();
    backend_pid(&mut client);
}

#[test]
fn the_vector_extension_is_detected_and_created() {
    let server = require_postgres!();
    let url = fresh(server, "vector detect");
    let pool = pool(&url, Settings::default());
    let mut client = pool.get().unwrap();
    let first = postgres::vector_support(&mut client, pool.target()).unwrap();
    match &first {
        VectorSupport::Available { version } => assert_eq!(version, "0.6.2"),
        other => panic!("{other}"),
    }
    // Created in the database: a vector column now works, and asking again finds it.
    client
        .batch_execute("CREATE TABLE v (e vector(3)); INSERT INTO v VALUES ('[1,2,3]')")
        .unwrap();
    assert_eq!(
        postgres::vector_support(&mut client, pool.target()).unwrap(),
        first
    );
}

#[test]
fn the_vector_extension_is_unavailable_to_a_user_who_may_not_create_it() {
    let server = require_postgres!();
    let url = fresh(server, "vector unprivileged");
    let database = url.rsplit('/').next().unwrap_or_default().to_owned();
    let mut admin = server.connect(&database).unwrap();
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN CREATE ROLE mnemon_plain LOGIN; \
             EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
             GRANT CREATE ON DATABASE \"{database}\" TO mnemon_plain"
        ))
        .unwrap();
    let pool = pool(
        &format!(
            "postgres://mnemon_plain@127.0.0.1:{}/{database}",
            server.port()
        ),
        Settings::default(),
    );
    let mut client = pool.get().unwrap();
    let support = postgres::vector_support(&mut client, pool.target()).unwrap();
    match &support {
        VectorSupport::Unavailable { reason } => {
            assert!(reason.contains("may not create it"), "{reason}");
            assert!(reason.contains("42501"), "{reason}");
        }
        other => panic!("{other}"),
    }
    // Nothing half-done: the connection is usable, and once a superuser creates it, it is seen.
    backend_pid(&mut client);
    admin.batch_execute("CREATE EXTENSION vector").unwrap();
    assert!(
        postgres::vector_support(&mut client, pool.target())
            .unwrap()
            .is_available()
    );
}

/// `postgres::open`, the one way the stores open: it connects, migrates every schema given (in
/// order), is idempotent, and refuses a database from a newer build with the error that says so.
#[test]
fn open_connects_and_migrates_every_schema() {
    static OTHER: Schema = Schema {
        component: "other",
        table: "other_schema",
        key_column: "singleton",
        migrations: &[Migration {
            version: 1,
            sql: "CREATE TABLE other_things (id BIGINT PRIMARY KEY);",
        }],
    };
    let server = require_postgres!();
    let url = fresh(server, "open helper");
    let pool = postgres::open(&url, Settings::default(), &[&NOTES_V3, &OTHER])
        .unwrap_or_else(|error| panic!("{error}"));
    let mut client = pool.get().unwrap();
    for schema in [&NOTES_V3, &OTHER] {
        let version = postgres::schema_version(&mut client, pool.target(), schema).unwrap();
        assert_eq!(version, Some(schema.version()), "{}", schema.component);
    }
    drop(client);
    // Again: nothing to do.
    let again = postgres::open(&url, Settings::default(), &[&NOTES_V3, &OTHER]).unwrap();
    assert_eq!(again.migrate(&NOTES_V3).unwrap(), Migrated::Current);
    // An older build meets the newer database.
    let error = postgres::open(&url, Settings::default(), &[&prefix(2)]).unwrap_err();
    assert!(matches!(error, DbError::PgSchemaTooNew { .. }), "{error}");
    let error = postgres::open("mysql://u@h/db", Settings::default(), &[&NOTES_V3]).unwrap_err();
    assert!(matches!(error, DbError::BadUrl { .. }), "{error}");
}

/// How many statements with exactly `sql` the server holds prepared in `client`'s session.
fn prepared_on_server(client: &mut ::postgres::Client, sql: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1",
            &[&sql],
        )
        .unwrap_or_else(|error| panic!("{error}"))
        .get(0)
}

/// A cached statement is prepared once per connection, whatever the number of checkouts and
/// transactions, and gives the same results as the SQL sent as text.
#[test]
fn statements_are_prepared_once_per_connection() {
    const ADD: &str = "SELECT $1::int8 + 1";
    const TWICE: &str = "SELECT $1::int8 * 2";
    let server = require_postgres!();
    let url = fresh(server, "statement cache");
    let pool = pool(
        &url,
        Settings {
            pool_size: 1,
            ..Settings::default()
        },
    );
    for i in 0..5_i64 {
        let mut client = pool.get().unwrap();
        let statement = client.prepare_cached(ADD).unwrap();
        let cached: i64 = client.query_one(&statement, &[&i]).unwrap().get(0);
        let text: i64 = client.query_one(ADD, &[&i]).unwrap().get(0);
        assert_eq!((cached, text), (i + 1, i + 1));
        assert_eq!(client.statements_prepared(), 1, "checkout {i}");
        assert_eq!(client.cached_statements(), 1);
    }
    let mut client = pool.get().unwrap();
    assert_eq!(prepared_on_server(&mut client, ADD), 1);

    // Inside a transaction: a cached statement is reused, and one prepared in a transaction
    // that rolls back stays valid (protocol-level statements are not transactional).
    {
        let mut tx = client.transaction_cached().unwrap();
        let add = tx.prepare_cached(ADD).unwrap();
        let twice = tx.prepare_cached(TWICE).unwrap();
        let sum: i64 = tx.query_one(&add, &[&20_i64]).unwrap().get(0);
        let product: i64 = tx.query_one(&twice, &[&20_i64]).unwrap().get(0);
        assert_eq!((sum, product), (21, 40));
        // Dropped: rolled back.
    }
    assert_eq!(client.statements_prepared(), 2);
    let twice = client.prepare_cached(TWICE).unwrap();
    let product: i64 = client.query_one(&twice, &[&7_i64]).unwrap().get(0);
    assert_eq!(product, 14);
    assert_eq!(client.statements_prepared(), 2);
    assert_eq!(prepared_on_server(&mut client, TWICE), 1);
}

/// A connection that broke is discarded with its statements: the one replacing it starts with
/// an empty cache and prepares afresh (the old statements would not exist in its session).
#[test]
fn a_replaced_connection_gets_a_fresh_statement_cache() {
    const SQL: &str = "SELECT $1::text || '!'";
    let server = require_postgres!();
    let url = fresh(server, "statement cache broken");
    let pool = pool(
        &url,
        Settings {
            pool_size: 1,
            validate_after: Duration::ZERO,
            ..Settings::default()
        },
    );
    let mut admin = server.connect("postgres").unwrap();
    let mut client = pool.get().unwrap();
    let statement = client.prepare_cached(SQL).unwrap();
    let shout: String = client.query_one(&statement, &[&"hi"]).unwrap().get(0);
    assert_eq!(shout, "hi!");
    let first = backend_pid(&mut client);
    drop(client);
    let _: bool = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&first])
        .unwrap()
        .get(0);
    thread::sleep(Duration::from_millis(100));

    let mut client = pool.get().unwrap();
    assert_ne!(backend_pid(&mut client), first);
    assert_eq!(client.cached_statements(), 0);
    assert_eq!(client.statements_prepared(), 0);
    let statement = client.prepare_cached(SQL).unwrap();
    let shout: String = client.query_one(&statement, &[&"again"]).unwrap().get(0);
    assert_eq!(shout, "again!");
    assert_eq!(client.statements_prepared(), 1);
    assert_eq!(prepared_on_server(&mut client, SQL), 1);
}

/// The cache holds at most `STATEMENT_CACHE_SIZE` statements; the least recently used one is
/// closed on the server beyond that, and one still in use survives.
#[test]
fn the_statement_cache_is_bounded() {
    let server = require_postgres!();
    let url = fresh(server, "statement cache bound");
    let pool = pool(&url, Settings::default());
    let mut client = pool.get().unwrap();
    let extra = 5;
    let sqls: Vec<&'static str> = (0..postgres::STATEMENT_CACHE_SIZE + extra)
        .map(|i| &*Box::leak(format!("SELECT {i}::int8 + $1::int8").into_boxed_str()))
        .collect();
    let kept = sqls.first().copied().unwrap();
    for sql in &sqls {
        client.prepare_cached(sql).unwrap();
        // The first statement is used again and again: never the least recently used.
        client.prepare_cached(kept).unwrap();
    }
    assert_eq!(client.cached_statements(), postgres::STATEMENT_CACHE_SIZE);
    assert_eq!(
        client.statements_prepared(),
        (postgres::STATEMENT_CACHE_SIZE + extra) as u64
    );
    let on_server: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'SELECT % + $1::int8'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(on_server, postgres::STATEMENT_CACHE_SIZE as i64);
    assert_eq!(prepared_on_server(&mut client, kept), 1);
    // The evicted ones are the oldest others.
    for sql in sqls.get(1..=extra).unwrap() {
        assert_eq!(prepared_on_server(&mut client, sql), 0, "{sql}");
    }
    let statement = client.prepare_cached(kept).unwrap();
    let value: i64 = client.query_one(&statement, &[&1_i64]).unwrap().get(0);
    assert_eq!(value, 1);
}
