//! The PostgreSQL test server itself (`mnemon_tests::postgres`, docs/postgres.md): it starts,
//! gives isolated databases, has pgvector with HNSW, keeps committed data across a restart, and
//! leaves no process behind.

use std::path::Path;

use mnemon_tests::postgres::PgServer;
use mnemon_tests::require_postgres;
use pgvector::Vector;
use postgres::{Client, NoTls};

fn connect(url: &str) -> Client {
    match Client::connect(url, NoTls) {
        Ok(client) => client,
        Err(error) => panic!("connecting to {url}: {error}"),
    }
}

fn fresh(server: &PgServer, name: &str) -> Client {
    match server.fresh_database(name) {
        Ok(url) => connect(&url),
        Err(error) => panic!("fresh database {name}: {error}"),
    }
}

fn own_server() -> Option<PgServer> {
    // These tests restart or drop a server, so they start their own instead of disturbing the
    // shared one.
    if !mnemon_tests::postgres::require_binaries() {
        return None;
    }
    match PgServer::start() {
        Ok(server) => Some(server),
        Err(error) => panic!("starting a second PostgreSQL server: {error}"),
    }
}

#[test]
fn the_server_is_postgresql_16_and_a_fresh_database_accepts_connections() {
    let server = require_postgres!();
    let url = server
        .fresh_database("accepts connections")
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(url.starts_with("postgres://postgres@127.0.0.1:"), "{url}");
    let mut client = connect(&url);
    let row = client
        .query_one(
            "SELECT current_database(), current_setting('server_version_num')::int, \
             current_setting('fsync'), inet_server_addr()::text",
            &[],
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let database: String = row.get(0);
    let version: i32 = row.get(1);
    let fsync: String = row.get(2);
    let address: String = row.get(3);
    assert!(
        url.ends_with(&format!("/{database}")),
        "{url} vs {database}"
    );
    assert!(database.starts_with("accepts_connections_"), "{database}");
    assert!(
        (160_000..170_000).contains(&version),
        "server_version_num {version}"
    );
    assert_eq!(fsync, "on");
    assert_eq!(address, "127.0.0.1/32");
}

/// Cosine distance as pgvector defines it (`<=>`): 1 − cos, in f64 over the stored f32 values.
fn cosine_distance(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    1.0 - dot / (norm(a) * norm(b))
}

/// Deterministic pseudo-random vectors (a 64-bit LCG), so the test data needs no crate.
fn vectors(count: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        // The top 24 bits as a float in [-1, 1).
        ((state >> 40) as f32 / (1u64 << 23) as f32) - 1.0
    };
    (0..count)
        .map(|_| (0..dim).map(|_| next()).collect())
        .collect()
}

#[test]
fn pgvector_hnsw_cosine_search_returns_the_nearest_rows() {
    let server = require_postgres!();
    let mut client = fresh(server, "hnsw");
    client
        .batch_execute(
            "CREATE EXTENSION vector;
             CREATE TABLE items (id int PRIMARY KEY, embedding vector(8) NOT NULL);",
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let rows = vectors(300, 8, 7);
    let mut tx = client
        .transaction()
        .unwrap_or_else(|error| panic!("{error}"));
    let insert = tx
        .prepare("INSERT INTO items (id, embedding) VALUES ($1, $2)")
        .unwrap_or_else(|error| panic!("{error}"));
    for (id, row) in (0i32..).zip(&rows) {
        tx.execute(&insert, &[&id, &Vector::from(row.clone())])
            .unwrap_or_else(|error| panic!("{error}"));
    }
    tx.commit().unwrap_or_else(|error| panic!("{error}"));
    client
        .batch_execute(
            "CREATE INDEX items_embedding_hnsw ON items USING hnsw (embedding vector_cosine_ops);
             SET enable_seqscan = off;
             SET hnsw.ef_search = 200;",
        )
        .unwrap_or_else(|error| panic!("{error}"));

    // HNSW is approximate and its graph random; a candidate list of 200 over 300 rows makes the
    // top 5 exact in every build, so the comparison with the exact ranking cannot flake.
    const K: usize = 5;
    let search =
        "SELECT id, (embedding <=> $1)::float8 FROM items ORDER BY embedding <=> $1 LIMIT 5";
    // The plan uses the index: otherwise this would test the exact scan, not HNSW.
    let plan: Vec<String> = client
        .query(
            &format!("EXPLAIN {search}"),
            &[&Vector::from(rows[0].clone())],
        )
        .unwrap_or_else(|error| panic!("{error}"))
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(
        plan.iter()
            .any(|line| line.contains("items_embedding_hnsw")),
        "the search does not use the HNSW index: {plan:#?}"
    );

    for query in vectors(10, 8, 99) {
        let mut exact: Vec<(i32, f64)> = (0i32..)
            .zip(&rows)
            .map(|(id, row)| (id, cosine_distance(row, &query)))
            .collect();
        exact.sort_by(|a, b| a.1.total_cmp(&b.1));
        exact.truncate(K);
        let found: Vec<(i32, f64)> = client
            .query(search, &[&Vector::from(query.clone())])
            .unwrap_or_else(|error| panic!("{error}"))
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let found_ids: Vec<i32> = found.iter().map(|(id, _)| *id).collect();
        let exact_ids: Vec<i32> = exact.iter().map(|(id, _)| *id).collect();
        assert_eq!(found_ids, exact_ids, "query {query:?}");
        for ((_, got), (_, want)) in found.iter().zip(&exact) {
            assert!((got - want).abs() < 1e-5, "distance {got} vs exact {want}");
        }
    }

    // A small table whose answer is plain to see.
    client
        .batch_execute(
            "CREATE TABLE small (id int PRIMARY KEY, embedding vector(3) NOT NULL);
             INSERT INTO small VALUES (1, '[1,0,0]'), (2, '[0,1,0]'), (3, '[0,0,1]'),
                                      (4, '[1,1,0]'), (5, '[-1,0,0]');
             CREATE INDEX ON small USING hnsw (embedding vector_cosine_ops);",
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let ids: Vec<i32> = client
        .query(
            "SELECT id FROM small ORDER BY embedding <=> $1 LIMIT 3",
            &[&Vector::from(vec![1.0, 0.1, 0.0])],
        )
        .unwrap_or_else(|error| panic!("{error}"))
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(ids, [1, 4, 2]);
}

#[test]
fn two_fresh_databases_are_isolated() {
    let server = require_postgres!();
    let mut first = fresh(server, "isolated");
    let mut second = fresh(server, "isolated");
    let name = |client: &mut Client| -> String {
        client
            .query_one("SELECT current_database()", &[])
            .unwrap_or_else(|error| panic!("{error}"))
            .get(0)
    };
    assert_ne!(name(&mut first), name(&mut second));
    first
        .batch_execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('first');")
        .unwrap_or_else(|error| panic!("{error}"));
    let missing = second
        .query("SELECT v FROM t", &[])
        .expect_err("the second database must not see the first one's table");
    assert_eq!(
        missing.code(),
        Some(&postgres::error::SqlState::UNDEFINED_TABLE),
        "{missing}"
    );
    second
        .batch_execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('second'), ('second');")
        .unwrap_or_else(|error| panic!("{error}"));
    let values = |client: &mut Client| -> Vec<String> {
        client
            .query("SELECT v FROM t", &[])
            .unwrap_or_else(|error| panic!("{error}"))
            .iter()
            .map(|row| row.get(0))
            .collect()
    };
    assert_eq!(values(&mut first), ["first"]);
    assert_eq!(values(&mut second), ["second", "second"]);
}

#[test]
fn a_restart_keeps_committed_data_on_the_same_port() {
    let Some(server) = own_server() else { return };
    let url = server
        .fresh_database("restart")
        .unwrap_or_else(|error| panic!("{error}"));
    let mut client = connect(&url);
    client
        .batch_execute(
            "CREATE TABLE t (n int);
             INSERT INTO t SELECT generate_series(1, 1000);",
        )
        .unwrap_or_else(|error| panic!("{error}"));
    // Begun but never committed: must be gone after the restart.
    let mut open = connect(&url);
    open.batch_execute("BEGIN; INSERT INTO t VALUES (-1);")
        .unwrap_or_else(|error| panic!("{error}"));
    let port = server.port();
    let before = server.pid();

    server.restart().unwrap_or_else(|error| panic!("{error}"));

    assert_eq!(server.port(), port);
    assert!(server.pid().is_some() && server.pid() != before);
    assert!(
        client.query("SELECT 1", &[]).is_err(),
        "a connection from before the restart must fail, not hang or succeed"
    );
    let mut client = connect(&url);
    let row = client
        .query_one("SELECT count(*), min(n), max(n) FROM t", &[])
        .unwrap_or_else(|error| panic!("{error}"));
    let (count, min, max): (i64, i32, i32) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((count, min, max), (1000, 1, 1000));
}

/// Whether process `pid` exists and is a PostgreSQL process (a reused pid would not be).
fn is_postgres_process(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|cmdline| String::from_utf8_lossy(&cmdline).contains("postgres"))
        .unwrap_or(false)
}

/// The children of `parent`: the postmaster's backends and background workers.
fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = stat.rsplit_once(") ")?.1;
                    after.split(' ').nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

#[test]
fn drop_stops_the_server_and_removes_its_directory() {
    let Some(server) = own_server() else { return };
    let pid = server
        .pid()
        .unwrap_or_else(|| panic!("a started server has a pid"));
    let dir = server.dir().to_path_buf();
    let _connected = connect(
        &server
            .fresh_database("drop")
            .unwrap_or_else(|error| panic!("{error}")),
    );
    let workers = children(pid);
    assert!(is_postgres_process(pid));
    assert!(
        !workers.is_empty(),
        "a running postmaster has background processes"
    );
    assert!(dir.join("data/PG_VERSION").is_file());

    drop(server);

    // Backends notice the postmaster's exit on their own; give them a bounded moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let left = |pids: &[u32]| -> Vec<u32> {
        pids.iter()
            .copied()
            .filter(|pid| is_postgres_process(*pid))
            .collect()
    };
    let mut all = workers.clone();
    all.push(pid);
    while !left(&all).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        left(&all),
        Vec::<u32>::new(),
        "postgres processes left behind"
    );
    assert!(!Path::new(&dir).exists(), "{} left behind", dir.display());
}
