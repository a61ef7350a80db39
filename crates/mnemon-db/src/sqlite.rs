//! The SQLite backend: connection setup, schema versions and migrations, read-only opening.
//!
//! **Setup.** [`open`] and [`connect`] put the file in WAL mode (readers never wait for a
//! writer, and a writer waits only for another writer), set the busy timeout, and set
//! `synchronous` from the [`Durability`]. Steps that SQLite does not cover with its busy
//! handler, switching to WAL above all, are retried until the busy timeout, so that many
//! processes can open a new file at once.
//!
//! **Schema versions.** Each component records its version in its own one-row table
//! ([`Schema::table`], e.g. `asset_schema`) rather than the file-wide `PRAGMA user_version`,
//! because several components share the file. Its [`Migration`]s are numbered steps; [`open`]
//! applies the ones the file has not seen, in one `BEGIN IMMEDIATE` transaction, and refuses a
//! file written by a newer build. When the version is already current it reads it without
//! taking the write lock.
//!
//! **Prepared once.** Every connection keeps up to [`STATEMENT_CACHE`] prepared statements
//! (rusqlite keeps 16 by default, fewer than one store's working set: the memory store alone
//! prepares about 40, so a mixed load evicted and re-parsed them in turn), and plans without
//! looking at bound values (SQLite's query planner stability guarantee,
//! `SQLITE_DBCONFIG_ENABLE_QPSG`). Without it SQLite re-prepares a statement when a new value is
//! bound to a `LIMIT ?` (it compiles the limit in as a constant), or when a value compared with
//! `=` moves to or from 0 or 1 (a guess that the column is a flag): a store's thread ids and
//! page sizes do that all the time, and each re-prepare parses and plans the statement again.
//! The stores' statements never needed a value-dependent plan (no `LIKE` on a bound pattern, no
//! `STAT4`).
//!
//! **Checkpoints.** A read-write connection does not checkpoint the WAL inside the commit that
//! fills it, as SQLite does by default: a background thread per file does it while writers go
//! on (`sqlite/checkpointer.rs`).
//!
//! **Writers take turns.** The writers of one process wait for each other in a queue per file,
//! first come first served, before they ask SQLite for its write lock, whose busy handler
//! polls with growing sleeps and favours no one (`sqlite/write_queue.rs`).
//!
//! **Shared by handles.** Every writable store handle of a process on one file opened with the
//! same [`Settings`], whatever its namespace, shares that store's connections ([`Shared`],
//! `sqlite/shared.rs`), and reads go to a pool of read connections ([`ReadPool`]), not the
//! writer's. A shared write connection is waited for at most the busy timeout ([`ConnMutex`]).
//!
//! **Read-only.** [`open_read_only`] never writes and never creates anything: it opens the file
//! with `SQLITE_OPEN_READONLY`, and when SQLite cannot open the WAL's shared-memory file (a
//! read-only directory or mount, where the `-shm` file does not exist and cannot be created) it
//! opens the file as `immutable`. A database that does not exist yet, or that lacks the
//! component's tables, reads as empty.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension};

mod checkpointer;
mod per_file;
mod read_pool;
mod shared;
mod write_queue;

pub use crate::schema::{Migration, Schema};
use crate::{DbError, Durability};
use checkpointer::Checkpointer;
pub use read_pool::{ReadGuard, ReadPool};

/// A connection held through one of the stores' connection mutexes (`parking_lot`'s, for
/// their timed lock: a write waits for a shared write connection up to the busy timeout; and
/// never poisoned: a panic while one was held leaves the connection usable, its transaction
/// rolled back on drop).
pub type ConnGuard<'a> = parking_lot::MutexGuard<'a, Connection>;

/// The mutex every [`ConnGuard`] comes from.
pub type ConnMutex = parking_lot::Mutex<Connection>;
pub use shared::Shared;
pub use write_queue::{WriteConnection, WriteGuard, WriteQueue, WriteTurn};

/// How connections are set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How hard a commit works to survive crashes. Default: [`Durability::Full`].
    pub durability: Durability,
    /// How long a connection waits for another process's lock, opening included. Default: 5 s.
    pub busy_timeout: Duration,
    /// Whether SQLite enforces `FOREIGN KEY` clauses (off by SQLite's default). Default: off.
    pub foreign_keys: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            durability: Durability::default(),
            busy_timeout: Duration::from_secs(5),
            foreign_keys: false,
        }
    }
}

/// The `synchronous` setting for a durability in WAL mode.
pub fn synchronous(durability: Durability) -> &'static str {
    match durability {
        Durability::Normal => "NORMAL",
        Durability::Full => "FULL",
    }
}

/// Opens (creating if needed) the database at `path` for reading and writing, sets it up and
/// brings `schema` to its current version. The parent directory must exist.
pub fn open(path: &Path, settings: &Settings, schema: &Schema) -> Result<Connection, DbError> {
    schema.check()?;
    let mut conn = connect(path, settings)?;
    migrate(&mut conn, path, settings, schema)?;
    Ok(conn)
}

/// Opens (creating if needed) the database at `path` for reading and writing and sets it up,
/// without touching any schema: for a component's second connection after [`open`].
pub fn connect(path: &Path, settings: &Settings) -> Result<Connection, DbError> {
    let mut conn = Connection::open(path).map_err(|e| DbError::Open {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    let deadline = Instant::now() + settings.busy_timeout;
    let setup = |action: &'static str| {
        move |e: rusqlite::Error| DbError::Setup {
            path: path.to_path_buf(),
            action,
            detail: e.to_string(),
        }
    };
    conn.busy_timeout(settings.busy_timeout)
        .map_err(setup("setting the busy timeout"))?;
    // On a file already in WAL this changes nothing and takes no lock. Switching a new file
    // needs an exclusive lock that SQLite's busy handler does not wait for: another process
    // opening the new file at the same moment makes it fail at once with "database is locked".
    let mode = retry_busy(deadline, || {
        journal_mode(&conn, "PRAGMA journal_mode = WAL")
    })
    .map_err(setup("switching to WAL"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(DbError::NoWal {
            path: path.to_path_buf(),
            mode,
        });
    }
    configure(&conn, settings).map_err(setup(
        "setting synchronous, foreign_keys and the query planner",
    ))?;
    Checkpointer::for_file(path)
        .attach(&mut conn)
        .map_err(setup("installing the checkpoint hook"))?;
    Ok(conn)
}

/// A private database in memory with `schema` at its current version: nothing is kept.
pub fn open_in_memory(settings: &Settings, schema: &Schema) -> Result<Connection, DbError> {
    schema.check()?;
    let path = PathBuf::from(":memory:");
    let mut conn = Connection::open_in_memory().map_err(|e| DbError::Open {
        path: path.clone(),
        detail: e.to_string(),
    })?;
    configure(&conn, settings).map_err(|e| DbError::Setup {
        path: path.clone(),
        action: "setting synchronous, foreign_keys and the query planner",
        detail: e.to_string(),
    })?;
    migrate(&mut conn, &path, settings, schema)?;
    Ok(conn)
}

/// Where a read-only connection reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadSource {
    /// The database file, opened read-only; writes by other processes are seen.
    File,
    /// The database file, opened `immutable` because its WAL index could not be opened (a
    /// read-only directory or mount). SQLite then assumes nobody changes the file; on a
    /// read-only mount nobody can.
    Immutable,
    /// The file or the component's tables do not exist yet: an empty database in memory with
    /// the current schema, so that reads find nothing rather than fail.
    Empty,
}

/// A connection from [`open_read_only`]. Every write through it fails (`PRAGMA query_only`).
#[derive(Debug)]
pub struct ReadOnly {
    /// The connection.
    pub conn: Connection,
    /// What it reads.
    pub source: ReadSource,
}

/// Opens the database at `path` for reading only: it never takes a write lock, never creates
/// the file or its `-wal`/`-shm` companions when they cannot be created, and works on a
/// read-only directory or mount. See the module docs for how.
///
/// Fails with [`DbError::NeedsUpgrade`] when the component's tables are older than this build
/// (migrating needs write access) and [`DbError::SchemaTooNew`] when they are newer.
pub fn open_read_only(
    path: &Path,
    settings: &Settings,
    schema: &Schema,
) -> Result<ReadOnly, DbError> {
    schema.check()?;
    if !path.exists() {
        return empty(settings, schema);
    }
    let (conn, source, version) = match open_file_read_only(path, settings, schema, false) {
        Ok(found) => found,
        Err(e) if needs_immutable(&e) => open_file_read_only(path, settings, schema, true)
            .map_err(|e| DbError::Open {
                path: path.to_path_buf(),
                detail: e.to_string(),
            })?,
        Err(e) => {
            return Err(DbError::Open {
                path: path.to_path_buf(),
                detail: e.to_string(),
            });
        }
    };
    let supported = schema.version();
    match version {
        None => empty(settings, schema),
        Some(found) if found > supported => Err(DbError::SchemaTooNew {
            component: schema.component,
            path: path.to_path_buf(),
            found,
            supported,
        }),
        Some(found) if found < supported => Err(DbError::NeedsUpgrade {
            component: schema.component,
            path: path.to_path_buf(),
            found,
            supported,
        }),
        Some(_) => Ok(ReadOnly { conn, source }),
    }
}

/// As [`open_read_only`], reading tables of an older version as they are, since a reader
/// cannot migrate them: returns the connection and the version found, whose tables and columns
/// are those of [`Schema::up_to`] that version (the caller reads what they have). A missing
/// file, or one without the component's tables, reads as the current version.
pub fn open_read_only_any_version(
    path: &Path,
    settings: &Settings,
    schema: &Schema,
) -> Result<(ReadOnly, i64), DbError> {
    match open_read_only(path, settings, schema) {
        Ok(read) => Ok((read, schema.version())),
        Err(DbError::NeedsUpgrade {
            component,
            path: file,
            found,
            supported,
        }) => match schema.up_to(found) {
            Some(older) => Ok((open_read_only(path, settings, &older)?, found)),
            None => Err(DbError::NeedsUpgrade {
                component,
                path: file,
                found,
                supported,
            }),
        },
        Err(e) => Err(e),
    }
}

/// Brings `schema` to its current version. Takes the write lock only when a step is pending.
pub fn migrate(
    conn: &mut Connection,
    path: &Path,
    settings: &Settings,
    schema: &Schema,
) -> Result<(), DbError> {
    schema.check()?;
    let supported = schema.version();
    let deadline = Instant::now() + settings.busy_timeout;
    let failed = |version: i64| {
        move |e: rusqlite::Error| DbError::Migration {
            component: schema.component,
            path: path.to_path_buf(),
            version,
            detail: e.to_string(),
        }
    };
    let too_new = |found: i64| DbError::SchemaTooNew {
        component: schema.component,
        path: path.to_path_buf(),
        found,
        supported,
    };
    // The common case, the schema already current, is settled by a read: readers must not
    // queue behind another process's write transaction.
    match retry_busy(deadline, || read_version(conn, schema)).map_err(failed(supported))? {
        Some(found) if found == supported => return Ok(()),
        Some(found) if found > supported => return Err(too_new(found)),
        _ => {}
    }
    retry_busy(deadline, || conn.execute_batch("BEGIN IMMEDIATE")).map_err(failed(supported))?;
    let result = (|| {
        conn.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (
                {key} INTEGER PRIMARY KEY CHECK ({key} = 1),
                version INTEGER NOT NULL
            )",
            table = schema.table,
            key = schema.key_column
        ))
        .map_err(failed(supported))?;
        // Another process may have migrated while this one waited for the lock.
        let found = read_version(conn, schema)
            .map_err(failed(supported))?
            .unwrap_or(0);
        if found > supported {
            return Err(too_new(found));
        }
        for step in schema.migrations.iter().filter(|m| m.version > found) {
            conn.execute_batch(step.sql).map_err(failed(step.version))?;
        }
        if found < supported {
            conn.execute(
                &format!(
                    "INSERT INTO {table} ({key}, version) VALUES (1, ?1)
                     ON CONFLICT ({key}) DO UPDATE SET version = excluded.version",
                    table = schema.table,
                    key = schema.key_column
                ),
                [supported],
            )
            .map_err(failed(supported))?;
        }
        conn.execute_batch("COMMIT").map_err(failed(supported))
    })();
    if result.is_err() && !conn.is_autocommit() {
        // Best effort: the error being returned says what failed; a failed rollback leaves the
        // transaction to be rolled back when the connection closes.
        let _ = conn.execute_batch("ROLLBACK");
    }
    result
}

/// Folds the WAL back into the main file when a store closes, so that one file is left at rest
/// (a read-only reader then needs no `-wal`/`-shm` file). Best effort and never waiting: it is
/// skipped on read-only connections, and a checkpoint that would have to wait for another
/// process's writer or reader is abandoned, leaving the WAL for SQLite to use or replay later.
pub fn checkpoint_on_close(conn: &Connection) {
    if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(true) {
        return;
    }
    // `TRUNCATE` waits for writers through the busy handler; a closing store must not stall
    // for the busy timeout behind another process's transaction.
    if conn.busy_timeout(Duration::ZERO).is_ok() {
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }
}

/// Prepared statements each connection keeps (see the module documentation).
pub const STATEMENT_CACHE: usize = 128;

/// Plans that never depend on bound values, and a statement cache that holds a store's
/// working set (see the module documentation).
fn prepare_once(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map(|_| ())
}

fn configure(conn: &Connection, settings: &Settings) -> rusqlite::Result<()> {
    prepare_once(conn)?;
    conn.pragma_update(None, "synchronous", synchronous(settings.durability))?;
    conn.pragma_update(
        None,
        "foreign_keys",
        if settings.foreign_keys { "ON" } else { "OFF" },
    )
}

fn journal_mode(conn: &Connection, sql: &str) -> rusqlite::Result<String> {
    conn.query_row(sql, [], |r| r.get(0))
}

fn read_version(conn: &Connection, schema: &Schema) -> rusqlite::Result<Option<i64>> {
    let exists: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [schema.table],
            |r| r.get(0),
        )
        .optional()?;
    if exists.is_none() {
        return Ok(None);
    }
    conn.query_row(
        &format!(
            "SELECT version FROM {} WHERE {} = 1",
            schema.table, schema.key_column
        ),
        [],
        |r| r.get(0),
    )
    .optional()
}

/// Starts a write transaction (`BEGIN IMMEDIATE`), waiting up to `timeout` for another
/// writer. SQLite's busy handler covers most waits; the retry also covers the locks it does not
/// wait for, such as the one met while another connection switches journal modes. Stores that
/// must hold the write lock across work outside the database (the artifact store writes content
/// files inside it) call this and finish with `COMMIT` or `ROLLBACK` themselves.
pub fn begin_immediate(conn: &Connection, timeout: Duration) -> rusqlite::Result<()> {
    retry_busy(Instant::now() + timeout, || {
        conn.execute_batch("BEGIN IMMEDIATE")
    })
}

/// Whether `error` is a lock held by another connection.
fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Runs `step` until it does not fail with a lock, or `deadline` passes.
fn retry_busy<T>(
    deadline: Instant,
    mut step: impl FnMut() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let mut pause = Duration::from_millis(1);
    loop {
        match step() {
            Err(e) if is_busy(&e) => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(e);
                }
                thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            done => return done,
        }
    }
}

/// Whether a read-only open failed because the WAL index (`-shm`) cannot be opened or created.
fn needs_immutable(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly)
    )
}

type Opened = (Connection, ReadSource, Option<i64>);

fn open_file_read_only(
    path: &Path,
    settings: &Settings,
    schema: &Schema,
    immutable: bool,
) -> rusqlite::Result<Opened> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let (conn, source) = if immutable {
        let uri = immutable_uri(path)?;
        (
            Connection::open_with_flags(uri, flags)?,
            ReadSource::Immutable,
        )
    } else {
        (Connection::open_with_flags(path, flags)?, ReadSource::File)
    };
    conn.busy_timeout(settings.busy_timeout)?;
    prepare_once(&conn)?;
    conn.pragma_update(None, "query_only", "ON")?;
    let deadline = Instant::now() + settings.busy_timeout;
    let version = retry_busy(deadline, || read_version(&conn, schema))?;
    Ok((conn, source, version))
}

/// `file:<path>?immutable=1`, with the path percent-encoded as SQLite's URI parser expects.
fn immutable_uri(path: &Path) -> rusqlite::Result<String> {
    let Some(text) = path.to_str() else {
        return Err(rusqlite::Error::InvalidPath(path.to_path_buf()));
    };
    let mut uri = String::from("file:");
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    Ok(uri)
}

fn empty(settings: &Settings, schema: &Schema) -> Result<ReadOnly, DbError> {
    let conn = open_in_memory(settings, schema)?;
    conn.pragma_update(None, "query_only", "ON")
        .map_err(|e| DbError::Setup {
            path: PathBuf::from(":memory:"),
            action: "making the empty database read-only",
            detail: e.to_string(),
        })?;
    Ok(ReadOnly {
        conn,
        source: ReadSource::Empty,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    static NOTES: Schema = Schema {
        component: "note",
        table: "note_schema",
        key_column: "singleton",
        migrations: &[Migration {
            version: 1,
            sql: "CREATE TABLE note_notes (id INTEGER PRIMARY KEY);",
        }],
    };

    /// How often SQLite re-prepared `sql` while it ran once per set of bound values.
    fn reprepares(conn: &Connection, sql: &str, bindings: &[&[i64]]) -> i32 {
        let mut statement = conn.prepare_cached(sql).unwrap();
        for values in bindings {
            let mut rows = statement
                .query(rusqlite::params_from_iter(values.iter()))
                .unwrap();
            while rows.next().unwrap().is_some() {}
        }
        statement.get_status(rusqlite::StatementStatus::RePrepare)
    }

    #[test]
    fn statements_are_not_reprepared_for_new_bound_values() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(
            &dir.path().join("plans.sqlite"),
            &Settings::default(),
            &NOTES,
        )
        .unwrap();
        conn.execute_batch(
            "CREATE TABLE note_rows (thread_id INTEGER, seq INTEGER, flag INTEGER,
               PRIMARY KEY (thread_id, seq));
             INSERT INTO note_rows VALUES (1, 1, 0), (1, 2, 1), (2, 1, 0), (3, 1, 1);",
        )
        .unwrap();
        // A new `LIMIT` value: before, a re-prepare at every change.
        let limit = "SELECT seq FROM note_rows WHERE thread_id = ?1 ORDER BY seq LIMIT ?2";
        let bindings: &[&[i64]] = &[&[1, 1], &[1, 2], &[1, 5], &[1, 1]];
        assert_eq!(reprepares(&conn, limit, bindings), 0);
        // A value compared with `=` moving to and from 0 or 1, in a statement the planner
        // orders (here `MAX`, planned as the last row in `seq` order): before, a re-prepare at
        // each crossing. The memory store's next `seq` is this statement.
        let next = "SELECT COALESCE(MAX(seq), 0) + 1 FROM note_rows WHERE thread_id = ?1";
        assert_eq!(reprepares(&conn, next, &[&[1], &[2], &[1], &[3], &[0]]), 0);
        // More statements than rusqlite's default cache of 16 stay prepared.
        for round in 0..2 {
            for i in 0..40 {
                let sql = format!("SELECT {i} FROM note_rows WHERE thread_id = ?1 LIMIT ?2");
                let statement = conn.prepare_cached(&sql).unwrap();
                // A statement taken from the cache has run before (its VM step counter
                // survives between runs); a freshly prepared one has not.
                let ran_before = statement.get_status(rusqlite::StatementStatus::VmStep) > 0;
                assert_eq!(ran_before, round == 1, "statement {i}, round {round}");
                drop(statement);
                reprepares(&conn, &sql, &[&[1, 1]]);
            }
        }
    }

    /// Where [`commit_once_for_strace`] writes, when it runs under strace.
    const STRACE_DIR: &str = "MNEMON_DB_STRACE_DIR";

    /// One durable commit on a fresh file: run alone, under strace, by
    /// [`a_durable_commit_syncs_with_fdatasync`]; without its directory it does nothing.
    #[test]
    #[ignore = "run under strace by a_durable_commit_syncs_with_fdatasync"]
    fn commit_once_for_strace() {
        let Some(dir) = std::env::var_os(STRACE_DIR) else {
            return;
        };
        let conn = open(
            &Path::new(&dir).join("db.sqlite3"),
            &Settings::default(),
            &NOTES,
        )
        .unwrap();
        conn.execute_batch("INSERT INTO note_notes DEFAULT VALUES")
            .unwrap();
    }

    /// The bundled SQLite syncs with `fdatasync`, never `fsync` (which also writes the inode, a
    /// second synchronous write per commit): the workspace builds it with `HAVE_FDATASYNC`
    /// (`.cargo/config.toml`, docs/reference/config.md#durability). Traced with strace: without
    /// it, or where tracing is refused, the test says so in one `SKIPPED:` line, and fails when
    /// `MNEMON_REQUIRE_STRACE=1` (`cargo xtask test`, CI).
    #[test]
    fn a_durable_commit_syncs_with_fdatasync() {
        let skip = |why: String| {
            if std::env::var("MNEMON_REQUIRE_STRACE").is_ok_and(|v| v == "1") {
                panic!("MNEMON_REQUIRE_STRACE=1 but {why}");
            }
            eprintln!("SKIPPED: the sync-call check of the bundled SQLite: {why}");
        };
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("trace");
        let run = std::process::Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=fsync,fdatasync", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sqlite::tests::commit_once_for_strace",
                "--ignored",
                "--test-threads=1",
            ])
            .env(STRACE_DIR, dir.path())
            .output();
        let output = match run {
            Ok(output) => output,
            Err(e) => {
                return skip(format!(
                    "cannot run strace ({e}); install it (apt-get install strace)"
                ));
            }
        };
        if !output.status.success() {
            return skip(format!(
                "strace failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let calls = std::fs::read_to_string(&trace).unwrap();
        // Each line: the thread's id, then the call (`fdatasync(3) = 0`).
        let named = |name: &str| {
            calls
                .lines()
                .filter(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .is_some_and(|c| c.starts_with(name))
                })
                .count()
        };
        let (datasyncs, fsyncs) = (named("fdatasync("), named("fsync("));
        assert!(datasyncs > 0, "no fdatasync traced: {calls}");
        assert_eq!(fsyncs, 0, "SQLite synced with fsync: {calls}");
    }

    #[test]
    fn begin_immediate_waits_for_another_writer_then_gives_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let settings = Settings {
            busy_timeout: Duration::from_millis(50),
            ..Settings::default()
        };
        let holder = open(&path, &settings, &NOTES).unwrap();
        let waiter = open(&path, &settings, &NOTES).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let started = Instant::now();
        let err = begin_immediate(&waiter, Duration::from_millis(200)).unwrap_err();
        assert!(is_busy(&err), "{err}");
        assert!(started.elapsed() >= Duration::from_millis(200));
        holder.execute_batch("COMMIT").unwrap();
        begin_immediate(&waiter, Duration::from_millis(200)).unwrap();
        waiter
            .execute_batch("INSERT INTO note_notes DEFAULT VALUES; COMMIT")
            .unwrap();
    }

    #[test]
    fn begin_immediate_succeeds_once_the_other_writer_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let settings = Settings {
            busy_timeout: Duration::from_millis(10),
            ..Settings::default()
        };
        let holder = open(&path, &settings, &NOTES).unwrap();
        let waiter = open(&path, &settings, &NOTES).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let release = thread::spawn(move || {
            thread::sleep(Duration::from_millis(100));
            holder.execute_batch("COMMIT").unwrap();
        });
        // The busy handler alone (10 ms) would give up; the retry waits for the commit.
        begin_immediate(&waiter, Duration::from_secs(5)).unwrap();
        waiter.execute_batch("COMMIT").unwrap();
        release.join().unwrap();
    }
}
