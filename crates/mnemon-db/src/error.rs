//! Why a database could not be opened, set up or migrated.

use std::path::PathBuf;
use std::time::Duration;

/// Why a database could not be opened, set up or migrated.
///
/// Each message is complete on its own (it includes the engine's text), so the engine's error
/// is not also exposed as `source()`: reporters that walk the chain (`anyhow`'s `{:#}`) would
/// print it twice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DbError {
    /// The database file could not be opened or created.
    #[error(
        "cannot open the database {}: {detail}; check that its directory exists and that this \
         user may read it (and write it, for commands that change data)",
        .path.display()
    )]
    Open {
        /// The database file.
        path: PathBuf,
        /// The engine's message.
        detail: String,
    },
    /// A setup step (busy timeout, journal mode, `synchronous`, reading the schema version)
    /// failed.
    #[error(
        "cannot set up the database {} while {action}: {detail}; if another program holds a \
         lock on it, retry when it is done",
        .path.display()
    )]
    Setup {
        /// The database file.
        path: PathBuf,
        /// The step, e.g. `switching to WAL`.
        action: &'static str,
        /// The engine's message.
        detail: String,
    },
    /// The file system refused WAL mode.
    #[error(
        "{} cannot use WAL mode (it stays in {mode:?} mode); put the database on a local file \
         system that supports shared memory",
        .path.display()
    )]
    NoWal {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite reported instead.
        mode: String,
    },
    /// A component's tables were written by a newer build.
    #[error(
        "the {component} tables in {} have schema version {found}, but this build knows \
         versions up to {supported}; upgrade Mnemon to open it",
        .path.display()
    )]
    SchemaTooNew {
        /// The component (`asset`, `artifact`, `memory`).
        component: &'static str,
        /// The database file.
        path: PathBuf,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A read-only open met tables that need a migration, which would need write access.
    #[error(
        "the {component} tables in {} have schema version {found} and this build needs \
         {supported}; run any command that writes (with write access to the data directory) \
         once to upgrade them",
        .path.display()
    )]
    NeedsUpgrade {
        /// The component (`asset`, `artifact`, `memory`).
        component: &'static str,
        /// The database file.
        path: PathBuf,
        /// The version found.
        found: i64,
        /// The version this build needs.
        supported: i64,
    },
    /// A migration step failed; the transaction was rolled back, so the file is unchanged.
    #[error(
        "cannot migrate the {component} tables in {} to schema version {version}: {detail}; \
         the database was left unchanged",
        .path.display()
    )]
    Migration {
        /// The component (`asset`, `artifact`, `memory`).
        component: &'static str,
        /// The database file.
        path: PathBuf,
        /// The version being applied (or the target version, when the step is bookkeeping).
        version: i64,
        /// The engine's message.
        detail: String,
    },
    /// The schema definition itself is wrong: a programming error of the component.
    #[error("the {component} schema is misdefined: {detail}; fix the component's migration list")]
    BadSchema {
        /// The component.
        component: &'static str,
        /// What is wrong.
        detail: String,
    },

    /// A PostgreSQL database URL that cannot be parsed.
    #[error(
        "the database URL is malformed ({detail}); write it as \
         postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (percent-encode special characters \
         in the password)"
    )]
    BadUrl {
        /// What the parser refused (never the password).
        detail: String,
    },
    /// The PostgreSQL server refused the login.
    #[error(
        "the PostgreSQL server refused the login to {target}: {detail}; check the user name \
         and password in the database URL (and the server's pg_hba.conf rules for this host)"
    )]
    AuthRefused {
        /// The database, server and user (never the password).
        target: String,
        /// The server's or the client's message.
        detail: String,
    },
    /// The PostgreSQL server could not be reached.
    #[error(
        "cannot reach the PostgreSQL server for {target}: {detail}; check the host and port in \
         the database URL and that the server is running and accepts TCP connections"
    )]
    Unreachable {
        /// The database, server and user.
        target: String,
        /// The operating system's or the client's message.
        detail: String,
    },
    /// The PostgreSQL server has no database of that name.
    #[error(
        "the PostgreSQL server has no database {database:?} ({target}); create it (`createdb \
         {database}` or CREATE DATABASE) or fix the database name in the URL"
    )]
    DatabaseMissing {
        /// The database, server and user.
        target: String,
        /// The database name.
        database: String,
    },
    /// The connection to the PostgreSQL server was lost, or the server is shutting down or
    /// starting up.
    #[error(
        "the connection to the PostgreSQL server for {target} was lost: {detail}; the server \
         stopped, restarted or dropped the connection: retry once it is back (the pool opens a \
         new connection)"
    )]
    ServerGone {
        /// The database, server and user.
        target: String,
        /// The client's or the server's message.
        detail: String,
    },
    /// Every connection of a pool stayed in use for the whole checkout timeout.
    #[error(
        "all {size} connections to {target} stayed in use for {waited:?}; raise the pool size \
         or the checkout timeout, or find the caller that holds a connection too long"
    )]
    PoolTimeout {
        /// The database, server and user.
        target: String,
        /// The pool's size.
        size: usize,
        /// How long the checkout waited.
        waited: Duration,
    },
    /// A PostgreSQL statement failed for a reason none of the variants above covers.
    #[error("PostgreSQL ({target}) failed while {action}: {detail}")]
    Query {
        /// The database, server and user.
        target: String,
        /// The step, e.g. `reading the schema version`.
        action: &'static str,
        /// The server's message, with its SQLSTATE code.
        detail: String,
    },
    /// A component's PostgreSQL tables were written by a newer build.
    #[error(
        "the {component} tables in {target} have schema version {found}, but this build knows \
         versions up to {supported}; upgrade Mnemon to use this database"
    )]
    PgSchemaTooNew {
        /// The component (`asset`, `artifact`, `memory`).
        component: &'static str,
        /// The database, server and user.
        target: String,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A PostgreSQL migration step failed; its transaction was rolled back, so the database is
    /// unchanged.
    #[error(
        "cannot migrate the {component} tables in {target} to schema version {version}: \
         {detail}; the database was left unchanged"
    )]
    PgMigration {
        /// The component (`asset`, `artifact`, `memory`).
        component: &'static str,
        /// The database, server and user.
        target: String,
        /// The version being applied (or the target version, when the step is bookkeeping).
        version: i64,
        /// The server's message.
        detail: String,
    },
}
