//! Issue 13, item 6: eight OS processes append to one session at once, on SQLite and on
//! PostgreSQL (pgvector), with the same test body. Nothing acknowledged is lost or stored twice,
//! every process's messages keep its own order, every batch is contiguous and appears at once,
//! and all readers (another process, a fresh handle, a reopened store, the export, recall
//! through the exact scan and through the HNSW index) see one total order with dense indices.
//!
//! The writers are this test binary run again as children ([`process_child`], which does
//! nothing without the parent's environment, so it passes in a normal run). Each opens its own
//! store, says `READY`, waits for the parent's go file so that all eight really overlap, then
//! appends its planned batches, printing `ACK <batch> <ids…>` after each add returns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mnemon_memory::{
    AddOptions, ExportOptions, ExportTarget, Exported, Memory, MemoryQuery, PostgresMemoryOptions,
    PostgresMemoryStore, RetrievalQuery, RetrieveOptions, Retrieved, Scope, SqliteMemoryOptions,
    SqliteMemoryStore,
};
use mnemon_tests::postgres::PgServer;
use serde_json::{Value, json};

/// Which store the child opens: `sqlite:<path>` or `postgres:<url>`.
const BACKEND_ENV: &str = "MNEMON_MEMORY_PROCS_BACKEND";
/// `writer-<n>` or `reader`.
const ROLE_ENV: &str = "MNEMON_MEMORY_PROCS_ROLE";
/// The file whose appearance starts the writers.
const GO_ENV: &str = "MNEMON_MEMORY_PROCS_GO";

/// How many writer processes.
const WRITERS: usize = 8;
/// The batch sizes a writer's adds cycle through (fourteen adds, fifty messages); each writer
/// starts at another place in the cycle, so that batches of different sizes meet.
const BATCH_SIZES: [usize; 14] = [1, 4, 2, 6, 1, 3, 8, 2, 5, 1, 7, 3, 4, 3];
/// The session every writer appends to.
const SESSION: &str = "eight-writers";
/// The mark of the messages that carry an embedding (every odd-numbered batch): recall over
/// them needs no embedder.
const EMBEDDED: &str = "embedded";
/// How long the children may take to start and open their stores.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the children may take from the go signal to their exit.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a child waits for the go file before giving up (the parent died).
const CHILD_WAIT: Duration = Duration::from_secs(60);

/// One planned message of a writer.
#[derive(Debug, Clone)]
struct Planned {
    id: String,
    embedding: Option<[f64; 3]>,
}

/// Writer `w`'s batches, in the order it adds them. Ids name the writer and the message's
/// sequence number within the writer (`w3-s07`); odd-numbered batches carry embeddings.
fn plan(writer: usize) -> Vec<Vec<Planned>> {
    let mut seq = 0;
    (0..BATCH_SIZES.len())
        .map(|b| {
            let size = BATCH_SIZES[(writer + b) % BATCH_SIZES.len()];
            (0..size)
                .map(|_| {
                    let id = format!("w{writer}-s{seq:02}");
                    // Distinct directions on a cone, never the zero vector.
                    let angle = (writer * 50 + seq) as f64 * 0.037;
                    let embedding = (b % 2 == 1).then(|| [angle.cos(), angle.sin(), 0.5]);
                    seq += 1;
                    Planned { id, embedding }
                })
                .collect()
        })
        .collect()
}

/// The store a process opens.
#[derive(Debug, Clone)]
enum Backend {
    Sqlite(PathBuf),
    Postgres(String),
}

/// An open store of either backend.
enum Store {
    Sqlite(Arc<SqliteMemoryStore>),
    Postgres(Arc<PostgresMemoryStore>),
}

impl Backend {
    fn to_env(&self) -> String {
        match self {
            Backend::Sqlite(path) => format!("sqlite:{}", path.display()),
            Backend::Postgres(url) => format!("postgres:{url}"),
        }
    }

    fn from_env(text: &str) -> Backend {
        match text.split_once(':') {
            Some(("sqlite", path)) => Backend::Sqlite(PathBuf::from(path)),
            Some(("postgres", url)) => Backend::Postgres(url.to_owned()),
            _ => panic!("{BACKEND_ENV}={text} names no backend"),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite(_) => "SQLite",
            Backend::Postgres(_) => "PostgreSQL",
        }
    }

    /// Opens the store with the default options, except that PostgreSQL recall always takes
    /// the exact path (the HNSW path is checked against it separately).
    fn open(&self) -> Store {
        match self {
            Backend::Sqlite(path) => Store::Sqlite(
                SqliteMemoryStore::open(path, SqliteMemoryOptions::default())
                    .unwrap_or_else(|e| panic!("opening {}: {e}", path.display())),
            ),
            Backend::Postgres(url) => Store::Postgres(
                PostgresMemoryStore::open(
                    url,
                    PostgresMemoryOptions {
                        hnsw_min_messages: usize::MAX,
                        ..PostgresMemoryOptions::default()
                    },
                )
                .unwrap_or_else(|e| panic!("opening {url}: {e}")),
            ),
        }
    }
}

impl Store {
    /// The session's memory, creating the thread if needed.
    fn memory(&self) -> Box<dyn Memory> {
        let scope = Scope::session(SESSION);
        match self {
            Store::Sqlite(store) => Box::new(store.memory(scope).unwrap()),
            Store::Postgres(store) => Box::new(store.memory(scope).unwrap()),
        }
    }

    /// The session's memory if a writer created it already.
    fn existing(&self) -> Option<Box<dyn Memory>> {
        let scope = Scope::session(SESSION);
        match self {
            Store::Sqlite(store) => store
                .existing_memory(scope)
                .unwrap()
                .map(|m| Box::new(m) as Box<dyn Memory>),
            Store::Postgres(store) => store
                .existing_memory(scope)
                .unwrap()
                .map(|m| Box::new(m) as Box<dyn Memory>),
        }
    }
}

fn ids_of(memory: &dyn Memory) -> Vec<String> {
    memory
        .get_memory(&MemoryQuery::default())
        .unwrap()
        .iter()
        .map(|m| m.id().to_owned())
        .collect()
}

/// The child half: a writer or a reader, chosen by the parent's environment; without it, nothing.
#[test]
fn process_child() {
    let Ok(backend) = std::env::var(BACKEND_ENV) else {
        return;
    };
    let backend = Backend::from_env(&backend);
    let role = std::env::var(ROLE_ENV).unwrap();
    let mut out = std::io::stdout().lock();
    // The harness has printed `test … ... ` without a newline: the lines start on the next.
    writeln!(out).unwrap();
    if role == "reader" {
        let memory = backend
            .open()
            .existing()
            .expect("the reader found no session");
        for id in ids_of(memory.as_ref()) {
            writeln!(out, "ORDER {id}").unwrap();
        }
        writeln!(out, "DONE").unwrap();
        out.flush().unwrap();
        return;
    }
    let writer: usize = role
        .strip_prefix("writer-")
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("{ROLE_ENV}={role} is neither reader nor writer-<n>"));
    let go = PathBuf::from(std::env::var_os(GO_ENV).unwrap());
    let store = backend.open();
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    let deadline = Instant::now() + CHILD_WAIT;
    while !go.exists() {
        assert!(Instant::now() < deadline, "writer {writer}: no go signal");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Every writer creates (or finds) the thread at the same moment.
    let memory = store.memory();
    for (b, batch) in plan(writer).iter().enumerate() {
        let items = batch
            .iter()
            .map(|p| {
                let mut value = json!({"id": p.id, "name": format!("writer {writer}"),
                                       "role": "user",
                                       "content": format!("writer {writer} says {}", p.id)});
                if let Some(e) = p.embedding {
                    value["embedding"] = json!(e);
                }
                value.into()
            })
            .collect();
        let options = AddOptions {
            marks: if b % 2 == 1 {
                vec![EMBEDDED.to_owned()]
            } else {
                Vec::new()
            },
            ..AddOptions::default()
        };
        let report = memory
            .add_with(items, &options)
            .unwrap_or_else(|e| panic!("writer {writer}, batch {b}: {e}"));
        assert_eq!(
            report.added,
            batch.len(),
            "writer {writer}, batch {b}: skipped {:?}",
            report.skipped_duplicates
        );
        let ids: Vec<&str> = batch.iter().map(|p| p.id.as_str()).collect();
        writeln!(out, "ACK {b} {}", ids.join(" ")).unwrap();
        out.flush().unwrap();
        // A moment between adds, as an agent has: without it a SQLite writer that has just
        // committed takes the lock again before the others' busy handlers wake, and the
        // writers barely interleave.
        std::thread::sleep(Duration::from_millis(1 + ((writer + b) % 3) as u64));
    }
    writeln!(out, "DONE").unwrap();
    out.flush().unwrap();
}

/// A child process and what it printed.
struct Proc {
    name: String,
    child: Child,
    status: Option<ExitStatus>,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

/// The children of one test; Drop kills those still running, so that a failing parent leaves
/// none behind.
#[derive(Default)]
struct Procs(Vec<Proc>);

impl Procs {
    fn spawn(&mut self, backend: &Backend, role: &str, go: &Path) {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .arg(crate::harness_name(module_path!(), "process_child"))
            .args(["--exact", "--nocapture", "--test-threads=1"])
            .env(BACKEND_ENV, backend.to_env())
            .env(ROLE_ENV, role)
            .env(GO_ENV, go)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let out_pipe = child.stdout.take().unwrap();
        let mut err_pipe = child.stderr.take().unwrap();
        let lines = Arc::clone(&stdout);
        let text = Arc::clone(&stderr);
        let readers = vec![
            std::thread::spawn(move || {
                for line in BufReader::new(out_pipe).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            }),
            std::thread::spawn(move || {
                let mut all = String::new();
                let _ = err_pipe.read_to_string(&mut all);
                *text.lock().unwrap() = all;
            }),
        ];
        self.0.push(Proc {
            name: role.to_owned(),
            child,
            status: None,
            stdout,
            stderr,
            readers,
        });
    }

    /// What every child printed last and its exit, for failure messages.
    fn report(&self) -> String {
        let mut text = String::new();
        for p in &self.0 {
            let lines = p.stdout.lock().unwrap();
            let stderr = p.stderr.lock().unwrap();
            let tail: String = {
                let start = stderr.len().saturating_sub(1500);
                let start = (start..=stderr.len())
                    .find(|&i| stderr.is_char_boundary(i))
                    .unwrap_or(stderr.len());
                stderr[start..].to_owned()
            };
            text.push_str(&format!(
                "--- {}: {}, last line printed {:?}, stderr tail:\n{tail}\n",
                p.name,
                p.status
                    .map_or("still running".to_owned(), |s| s.to_string()),
                lines.iter().rev().find(|l| !l.is_empty()),
            ));
        }
        text
    }

    fn poll_exits(&mut self) {
        for p in self.0.iter_mut().filter(|p| p.status.is_none()) {
            p.status = p.child.try_wait().unwrap();
        }
    }

    /// Waits until every child printed `line`; fails when one exits first or time runs out.
    fn wait_for_line(&mut self, line: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll_exits();
            let missing: Vec<&str> = self
                .0
                .iter()
                .filter(|p| !p.stdout.lock().unwrap().iter().any(|l| l == line))
                .map(|p| p.name.as_str())
                .collect();
            if missing.is_empty() {
                return;
            }
            let exited = self
                .0
                .iter()
                .any(|p| p.status.is_some() && missing.contains(&p.name.as_str()));
            if exited || Instant::now() >= deadline {
                let missing = missing.join(", ");
                self.kill();
                panic!(
                    "{missing} did not say {line} within {timeout:?}:\n{}",
                    self.report()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for every child to exit successfully (all its output read); kills them all and
    /// fails when time runs out or one fails.
    fn wait_for_exit(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll_exits();
            if self.0.iter().all(|p| p.status.is_some()) {
                break;
            }
            if Instant::now() >= deadline {
                self.kill();
                panic!(
                    "the children did not finish within {timeout:?}:\n{}",
                    self.report()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for p in &mut self.0 {
            for reader in p.readers.drain(..) {
                reader.join().unwrap();
            }
        }
        if self
            .0
            .iter()
            .any(|p| p.status.is_some_and(|s| !s.success()))
        {
            panic!("a child failed:\n{}", self.report());
        }
    }

    fn kill(&mut self) {
        for p in self.0.iter_mut().filter(|p| p.status.is_none()) {
            let _ = p.child.kill();
            p.status = p.child.wait().ok();
        }
    }

    /// The lines child `i` printed.
    fn lines(&self, i: usize) -> Vec<String> {
        self.0[i].stdout.lock().unwrap().clone()
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One acknowledged add.
#[derive(Debug, Clone)]
struct Ack {
    writer: usize,
    batch: usize,
    ids: Vec<String>,
}

/// The acknowledged adds of writer `writer`, in the order it acknowledged them, checked against
/// its plan: a writer that exited successfully acknowledged all of it.
fn acks_of(writer: usize, lines: &[String]) -> Vec<Ack> {
    let acks: Vec<Ack> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("ACK "))
        .map(|rest| {
            let mut words = rest.split(' ');
            let batch = words.next().and_then(|b| b.parse().ok()).unwrap();
            Ack {
                writer,
                batch,
                ids: words.map(str::to_owned).collect(),
            }
        })
        .collect();
    let planned: Vec<Vec<String>> = plan(writer)
        .iter()
        .map(|b| b.iter().map(|p| p.id.clone()).collect())
        .collect();
    let acked: Vec<Vec<String>> = acks.iter().map(|a| a.ids.clone()).collect();
    assert_eq!(
        acked, planned,
        "writer {writer} exited successfully without acknowledging its plan"
    );
    assert!(
        lines.iter().any(|l| l == "DONE"),
        "writer {writer} never said DONE"
    );
    acks
}

/// Everything wrong with `stored` (ids in memory order) against the acknowledged adds:
/// duplicates, lost or unacknowledged messages, a writer's messages out of its order, a batch
/// not contiguous.
fn order_problems(stored: &[String], acks: &[Ack]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut position: HashMap<&str, usize> = HashMap::new();
    for (i, id) in stored.iter().enumerate() {
        if let Some(first) = position.insert(id.as_str(), i) {
            problems.push(format!("{id} is stored twice, at indices {first} and {i}"));
        }
    }
    let mut acked: HashMap<&str, (usize, usize)> = HashMap::new();
    for ack in acks {
        for id in &ack.ids {
            acked.insert(id.as_str(), (ack.writer, ack.batch));
        }
    }
    for (i, id) in stored.iter().enumerate() {
        if !acked.contains_key(id.as_str()) {
            problems.push(format!(
                "{id} at index {i} was never acknowledged by any writer"
            ));
        }
    }
    let total: usize = acks.iter().map(|a| a.ids.len()).sum();
    if stored.len() != total {
        problems.push(format!(
            "{} messages stored, {total} acknowledged",
            stored.len()
        ));
    }
    let mut last: HashMap<usize, (usize, &str)> = HashMap::new();
    for ack in acks {
        let at: Vec<Option<usize>> = ack
            .ids
            .iter()
            .map(|id| position.get(id.as_str()).copied())
            .collect();
        for (id, found) in ack.ids.iter().zip(&at) {
            let Some(i) = *found else {
                problems.push(format!(
                    "writer {}'s acknowledged {id} (batch {}) is missing",
                    ack.writer, ack.batch
                ));
                continue;
            };
            if let Some(&(before, earlier)) = last.get(&ack.writer)
                && before >= i
            {
                problems.push(format!(
                    "writer {}'s {id} is at index {i}, not after its earlier {earlier} at {before}",
                    ack.writer
                ));
            }
            last.insert(ack.writer, (i, id));
        }
        if let Some(Some(first)) = at.first()
            && at.iter().enumerate().any(|(k, i)| *i != Some(first + k))
        {
            problems.push(format!(
                "writer {}'s batch {} is not contiguous: {:?} at {at:?}",
                ack.writer, ack.batch, ack.ids
            ));
        }
    }
    problems
}

fn assert_no_problems(backend: &Backend, reader: &str, stored: &[String], acks: &[Ack]) {
    let problems = order_problems(stored, acks);
    assert!(
        problems.is_empty(),
        "{}: {} problems in the order {reader} read ({} messages):\n{}",
        backend.name(),
        problems.len(),
        stored.len(),
        problems
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// How many times consecutive messages come from different writers (seven when the writers
/// did not overlap at all).
fn writer_switches(stored: &[String]) -> usize {
    let writer = |id: &str| id.split('-').next().unwrap_or("").to_owned();
    stored
        .windows(2)
        .filter(|w| writer(&w[0]) != writer(&w[1]))
        .count()
}

/// Every retrieved message's index is its position in `stored` (the one total order).
fn check_indices(backend: &Backend, what: &str, got: &[Retrieved], stored: &[String]) {
    for r in got {
        let at = stored.iter().position(|id| id == r.message.id());
        assert_eq!(
            at,
            Some(r.index),
            "{}: {what} reports {} at index {}, get_memory has it at {at:?}",
            backend.name(),
            r.message.id(),
            r.index
        );
    }
}

/// The test body over either backend: eight writer processes, then every check. `postgres`
/// is the server and database of a PostgreSQL backend.
fn eight_processes_append(backend: &Backend, postgres: Option<(&PgServer, &str)>) {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    // Migrated before the children start (the race under test is the appends, and the creation
    // of the thread, which the writers do at the same moment).
    drop(backend.open());
    let mut procs = Procs::default();
    for w in 0..WRITERS {
        procs.spawn(backend, &format!("writer-{w}"), &go);
    }
    procs.wait_for_line("READY", START_TIMEOUT);
    let ready = started.elapsed();

    // A reader polling while the writers run: every snapshot it sees must be a prefix of the
    // final order that ends between two batches (adds become visible whole, in order).
    let done = Arc::new(AtomicBool::new(false));
    let snapshots = {
        let (backend, done) = (backend.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            let store = backend.open();
            let mut memory = None;
            let mut snapshots = Vec::new();
            while !done.load(Ordering::SeqCst) {
                if memory.is_none() {
                    memory = store.existing();
                }
                if let Some(memory) = &memory {
                    snapshots.push(ids_of(memory.as_ref()));
                }
                std::thread::sleep(Duration::from_millis(3));
            }
            snapshots
        })
    };
    std::fs::write(&go, b"go").unwrap();
    let went = Instant::now();
    procs.wait_for_exit(RUN_TIMEOUT);
    let writing = went.elapsed();
    done.store(true, Ordering::SeqCst);
    let snapshots = snapshots.join().unwrap();

    let acks: Vec<Ack> = (0..WRITERS)
        .flat_map(|w| acks_of(w, &procs.lines(w)))
        .collect();
    let store = backend.open();
    let memory = store.existing().expect("no writer created the session");
    let stored = ids_of(memory.as_ref());
    assert_no_problems(backend, "a fresh handle", &stored, &acks);
    let switches = writer_switches(&stored);

    // The same order from another process, and from the store reopened.
    let mut reader = Procs::default();
    reader.spawn(backend, "reader", &go);
    reader.wait_for_exit(RUN_TIMEOUT);
    let lines = reader.lines(0);
    assert!(lines.iter().any(|l| l == "DONE"), "{}", reader.report());
    let other: Vec<String> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("ORDER "))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        other,
        stored,
        "{}: another process reads another order",
        backend.name()
    );
    drop(memory);
    drop(store);
    let store = backend.open();
    let memory = store.existing().unwrap();
    assert_eq!(
        ids_of(memory.as_ref()),
        stored,
        "{}: the reopened store reads another order",
        backend.name()
    );

    // Snapshots taken while the writers ran.
    let boundaries: std::collections::HashSet<usize> = {
        let mut ends = std::collections::HashSet::from([0]);
        for ack in &acks {
            if let Some(i) = stored
                .iter()
                .position(|id| *id == ack.ids[ack.ids.len() - 1])
            {
                ends.insert(i + 1);
            }
        }
        ends
    };
    for (n, snapshot) in snapshots.iter().enumerate() {
        assert!(
            stored.starts_with(snapshot),
            "{}: snapshot {n} taken while writing ({} messages) is not a prefix of the final \
             order; first difference at {:?}",
            backend.name(),
            snapshot.len(),
            snapshot.iter().zip(&stored).position(|(a, b)| a != b)
        );
        assert!(
            boundaries.contains(&snapshot.len()),
            "{}: snapshot {n} taken while writing ends inside a batch (after {})",
            backend.name(),
            snapshot[snapshot.len() - 1]
        );
    }

    // Indices as the API reports them: the filter's positions, the recent tail, the export,
    // and recall over the embedded messages.
    let seen = Mutex::new(Vec::new());
    let filter = |i: usize, m: &mnemon_types::Msg| {
        seen.lock().unwrap().push((i, m.id().to_owned()));
        true
    };
    memory
        .get_memory(&MemoryQuery {
            filter: Some(&filter),
            ..MemoryQuery::default()
        })
        .unwrap();
    let seen = seen.into_inner().unwrap();
    assert_eq!(
        seen,
        stored.iter().cloned().enumerate().collect::<Vec<_>>(),
        "{}: the filter's positions are not dense 0..n in order",
        backend.name()
    );
    let tail: Vec<String> = memory
        .get_memory(&MemoryQuery {
            recent_n: Some(17),
            ..MemoryQuery::default()
        })
        .unwrap()
        .iter()
        .map(|m| m.id().to_owned())
        .collect();
    assert_eq!(tail, stored[stored.len() - 17..]);
    let Exported::Json(text) = memory
        .export(ExportTarget::Json, &ExportOptions::default())
        .unwrap()
    else {
        panic!("a JSON export gave something else")
    };
    let exported: Vec<String> = match serde_json::from_str::<Value>(&text).unwrap() {
        Value::Array(items) => items
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect(),
        other => panic!("the export is not an array: {other}"),
    };
    assert_eq!(
        exported,
        stored,
        "{}: the export's order differs",
        backend.name()
    );
    let embedded: Vec<String> = acks
        .iter()
        .filter(|a| a.batch % 2 == 1)
        .flat_map(|a| a.ids.clone())
        .collect();
    let query = vec![0.3_f32, 0.9, 0.5];
    let all_embedded = RetrieveOptions {
        top_k: None,
        mark: Some(EMBEDDED.to_owned()),
        ..RetrieveOptions::default()
    };
    let exact = memory
        .retrieve_by_embedding(RetrievalQuery::Vector(query.clone()), &all_embedded, None)
        .unwrap();
    check_indices(backend, "exact recall", &exact, &stored);
    let in_order: Vec<String> = stored
        .iter()
        .filter(|id| embedded.contains(id))
        .cloned()
        .collect();
    assert_eq!(
        exact
            .iter()
            .map(|r| r.message.id().to_owned())
            .collect::<Vec<_>>(),
        in_order,
        "{}: recall over the embedded messages does not return them all in memory order",
        backend.name()
    );
    let best = memory
        .retrieve_by_embedding(
            RetrievalQuery::Vector(query.clone()),
            &RetrieveOptions {
                top_k: Some(10),
                preserve_order: false,
                ..all_embedded.clone()
            },
            None,
        )
        .unwrap();
    assert_eq!(best.len(), 10);
    check_indices(backend, "exact recall of the best 10", &best, &stored);

    // The sequence numbers underneath: dense from 1.
    let n = i64::try_from(stored.len()).unwrap();
    let sql = "SELECT count(*), min(seq), max(seq) FROM memory_messages";
    let seqs: (i64, i64, i64) = match (backend, postgres) {
        (Backend::Sqlite(path), _) => rusqlite::Connection::open(path)
            .unwrap()
            .query_row(sql, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap(),
        (Backend::Postgres(_), Some((server, database))) => {
            let row = server
                .connect(database)
                .unwrap()
                .query_one(sql, &[])
                .unwrap();
            (row.get(0), row.get(1), row.get(2))
        }
        (Backend::Postgres(_), None) => panic!("a PostgreSQL backend without its server"),
    };
    assert_eq!(
        seqs,
        (n, 1, n),
        "{}: sequence numbers (count, min, max) are not dense",
        backend.name()
    );

    if let (Backend::Postgres(url), Some((server, database))) = (backend, postgres) {
        hnsw_agrees_with_exact(url, server, database, &exact, &stored);
    }
    eprintln!(
        "{}: {WRITERS} processes, {} messages; ready after {ready:?}, writing {writing:?}, \
         {switches} writer switches in the order, {} snapshots while writing; total {:?}",
        backend.name(),
        stored.len(),
        snapshots.len(),
        started.elapsed()
    );
    assert!(
        switches > WRITERS - 1,
        "{}: the writers never overlapped ({switches} switches): the test proved nothing",
        backend.name()
    );
}

/// Recall through the HNSW index (which the eight writers filled concurrently) reports the
/// same index and score for every message as the exact scan.
fn hnsw_agrees_with_exact(
    url: &str,
    server: &PgServer,
    database: &str,
    exact: &[Retrieved],
    stored: &[String],
) {
    // Current statistics, and new sessions that avoid scans and sorts wherever an index can
    // serve: with a few hundred rows the planner would otherwise sort the candidates, and the
    // index would not be exercised.
    let indexed = PostgresMemoryStore::open(
        url,
        PostgresMemoryOptions {
            hnsw_min_messages: 1,
            ..PostgresMemoryOptions::default()
        },
    )
    .unwrap();
    // Every row in the index first: the writers exited with their background indexers, which
    // may have left rows pending outside the partial index, and enough of them make the
    // planner's estimate small enough for a scan (as in memory_postgres's HNSW test).
    indexed.flush_index().unwrap();
    let mut client = server.connect(database).unwrap();
    client
        .batch_execute(&format!(
            "ANALYZE memory_messages, memory_marks;
             ALTER DATABASE \"{database}\" SET enable_seqscan = off;
             ALTER DATABASE \"{database}\" SET enable_sort = off"
        ))
        .unwrap();
    let mut client = server.connect(database).unwrap();
    let thread_id: i64 = client
        .query_one("SELECT thread_id FROM memory_threads", &[])
        .unwrap()
        .get(0);
    let plan: Vec<String> = client
        .query(
            &format!(
                "EXPLAIN SELECT m.seq, m.embedding FROM memory_messages m
                 WHERE m.thread_id = {thread_id} AND m.embedding_dim = 3
                   AND EXISTS (SELECT 1 FROM memory_marks k WHERE k.thread_id = m.thread_id
                               AND k.msg_id = m.msg_id AND k.mark = '{EMBEDDED}')
                 ORDER BY m.embedding_v::vector(3) <=> '[0.3,0.9,0.5]'::vector(3) LIMIT 100"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        plan.iter().any(|l| l.contains("memory_messages_hnsw_3")),
        "the recall query does not use the HNSW index: {plan:#?}"
    );
    let memory = indexed
        .existing_memory(Scope::session(SESSION))
        .unwrap()
        .unwrap();
    for (round, query) in [[0.3_f32, 0.9, 0.5], [1.0, 0.0, 0.5], [-0.6, 0.2, 0.5]]
        .iter()
        .enumerate()
    {
        let options = RetrieveOptions {
            top_k: Some(10),
            preserve_order: round % 2 == 0,
            mark: Some(EMBEDDED.to_owned()),
            ..RetrieveOptions::default()
        };
        let before = indexed.index_recalls();
        let got = memory
            .retrieve_by_embedding(RetrievalQuery::Vector(query.to_vec()), &options, None)
            .unwrap();
        assert_eq!(
            indexed.index_recalls(),
            before + 1,
            "the HNSW path did not answer"
        );
        assert_eq!(got.len(), 10);
        let want = PostgresMemoryStore::open(
            url,
            PostgresMemoryOptions {
                hnsw_min_messages: usize::MAX,
                ..PostgresMemoryOptions::default()
            },
        )
        .unwrap()
        .existing_memory(Scope::session(SESSION))
        .unwrap()
        .unwrap()
        .retrieve_by_embedding(
            RetrievalQuery::Vector(query.to_vec()),
            &RetrieveOptions {
                top_k: None,
                ..options.clone()
            },
            None,
        )
        .unwrap();
        assert_eq!(want.len(), exact.len());
        for r in &got {
            let same = want
                .iter()
                .find(|w| w.message.id() == r.message.id())
                .unwrap_or_else(|| panic!("HNSW recall returned {}, unknown", r.message.id()));
            assert_eq!(
                (r.index, r.score),
                (same.index, same.score),
                "HNSW and exact recall disagree on {}",
                r.message.id()
            );
        }
        check_indices(
            &Backend::Postgres(url.to_owned()),
            "HNSW recall",
            &got,
            stored,
        );
    }
}

#[test]
fn eight_processes_append_to_one_session_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    eight_processes_append(&Backend::Sqlite(dir.path().join("memory.sqlite3")), None);
}

#[test]
fn eight_processes_append_to_one_session_postgres() {
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("memory_processes").unwrap();
    let database = url.rsplit('/').next().unwrap().to_owned();
    eight_processes_append(&Backend::Postgres(url.clone()), Some((server, &database)));
}
