//! The PostgreSQL backend: connecting from a URL, a bounded connection pool, schema versions
//! and migrations under an advisory lock, and detecting the `vector` extension (pgvector).
//!
//! **Connecting.** [`Pool::connect`] parses a `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`
//! URL (or `postgresql://`; the query parameters of libpq's URLs such as `connect_timeout` and
//! `application_name` are understood) and opens one connection at once, so that a wrong URL,
//! password, port or database name is reported when a store opens rather than at its first
//! call. Every failure is a [`DbError`] variant that says what to fix: [`DbError::BadUrl`],
//! [`DbError::AuthRefused`], [`DbError::Unreachable`], [`DbError::DatabaseMissing`], and later
//! [`DbError::ServerGone`] when the server stops or restarts. Messages name the database, host,
//! port and user, never the password. Connections are plain TCP (or a Unix socket): TLS is not
//! supported yet, so a URL with `sslmode=require` is refused when it connects.
//!
//! **Durability.** [`Durability::Full`] keeps PostgreSQL's default `synchronous_commit = on` (a
//! returned commit is flushed to the server's WAL on disk); [`Durability::Normal`] sets it
//! `off` for the pool's connections: a commit may then be lost if the *server* crashes within
//! a few hundred milliseconds of it, never corrupting the database. Either way a killed client
//! loses nothing it was told was committed.
//!
//! **The pool** ([`Pool`]) holds at most [`Settings::pool_size`] connections. A checkout waits
//! up to [`Settings::checkout_timeout`] for one to be returned, then fails with
//! [`DbError::PoolTimeout`]. A connection that was closed (the server restarted, the network
//! dropped it) is discarded when it is returned or checked out, and one idle for longer than
//! [`Settings::validate_after`] is pinged before it is handed out, so after a server restart
//! callers meet at most the error of the call that was running, then fresh connections. This
//! pool is written here rather than taken from `r2d2_postgres`: it is about 200 lines, it keeps
//! the [`DbError`] classification of a failed connect (r2d2 reduces it to a string after its
//! own retries), and it needs no background thread per pool.
//!
//! **Prepared statements.** Each pooled connection keeps a bounded cache of the statements
//! prepared on it ([`PooledClient::prepare_cached`], [`CachedTransaction::prepare_cached`]): a
//! store's hot statement is parsed and planned once per connection, then only bound and
//! executed. The cache lives and dies with its connection, so a connection replaced after a
//! server restart starts empty (see the `pool` module's docs).
//!
//! **Opening a store.** [`open`] is the one way the PostgreSQL stores open: connect (reporting
//! a bad URL, refused login, unreachable server or missing database), then migrate each of the
//! store's schemas under its lock (refusing a newer one), logging what it did.
//!
//! **Schema versions.** A component describes its PostgreSQL tables as a [`Schema`] (the same
//! type as SQLite's, with its own SQL: see [`crate::schema`]); [`migrate`] creates its one-row
//! version table, applies the steps the database has not seen and records the new version, all
//! in one transaction that first takes `pg_advisory_xact_lock` on a key derived from the
//! schema's table name ([`advisory_lock_key`]). Many processes starting at once on a new
//! database therefore queue on the lock, and each after the first finds the schema current. A
//! database whose version is newer than the build's is refused with [`DbError::PgSchemaTooNew`].
//! When the version is already current, [`migrate`] only reads it, taking no lock.
//!
//! **pgvector.** [`vector_support`] creates the `vector` extension if the server has it and
//! this user may create it, and reports [`VectorSupport::Available`] with its version, or
//! [`VectorSupport::Unavailable`] with the reason, so that a store can choose an HNSW index or
//! exact scoring and log which.
//!
//! ```no_run
//! use mnemon_db::postgres::{self, Pool, Settings, VectorSupport};
//! use mnemon_db::{Migration, Schema};
//!
//! static NOTES: Schema = Schema {
//!     component: "note",
//!     table: "note_schema",
//!     key_column: "singleton",
//!     migrations: &[Migration {
//!         version: 1,
//!         sql: "CREATE TABLE note_notes (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL);",
//!     }],
//! };
//!
//! let pool = Pool::connect("postgres://mnemon:secret@127.0.0.1:5432/mnemon", Settings::default())?;
//! pool.migrate(&NOTES)?; // the same as postgres::migrate(&mut pool.get()?, pool.target(), &NOTES)
//!
//! let mut conn = pool.get()?;
//! conn.execute("INSERT INTO note_notes (body) VALUES ($1)", &[&"hello"])
//!     .map_err(|e| postgres::error(&e, pool.target(), "adding a note"))?;
//! // Memory chooses its recall index from this and logs which.
//! let vector = postgres::vector_support(&mut conn, pool.target())?;
//! let scoring = if vector.is_available() { "HNSW index" } else { "exact scoring" };
//! println!("{vector}: {scoring}");
//! # Ok::<(), mnemon_db::DbError>(())
//! ```

mod pool;

use std::error::Error as _;
use std::fmt;
use std::io;
use std::str::FromStr;
use std::time::Duration;

use ::postgres::config::Host;
use ::postgres::error::SqlState;
use ::postgres::{Client, Config, GenericClient, NoTls};

pub use pool::{CachedTransaction, Pool, PooledClient, STATEMENT_CACHE_SIZE};

pub use crate::schema::{Migration, Schema};
use crate::{DbError, Durability};

/// How a [`Pool`] connects and hands out connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How hard a commit works to survive crashes (see the module docs). Default:
    /// [`Durability::Full`].
    pub durability: Durability,
    /// The most connections the pool holds open at once. Default: 8. Zero is treated as one.
    pub pool_size: usize,
    /// How long a checkout waits for a connection when all are in use. Default: 5 s.
    pub checkout_timeout: Duration,
    /// How long opening one connection may take, unless the URL says (`connect_timeout`).
    /// Default: 5 s.
    pub connect_timeout: Duration,
    /// A connection idle for longer than this is checked with a round trip before it is handed
    /// out. Default: 5 s.
    pub validate_after: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            durability: Durability::default(),
            pool_size: 8,
            checkout_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            validate_after: Duration::from_secs(5),
        }
    }
}

/// Opens a store's pool: parses `url`, opens the first connection with `settings` (so a bad
/// URL, a refused login, an unreachable server or a missing database fails here, with the
/// [`DbError`] that names it), then brings each of `schemas` to its current version, in order,
/// under its advisory lock ([`migrate`]; a database from a newer build is refused with
/// [`DbError::PgSchemaTooNew`]). Each migration that changed something is logged at `info`
/// (target `mnemon_db::postgres`), one already current at `debug`. This is the one way the
/// PostgreSQL stores open (`docs/postgres.md`), so they agree on connecting, durability and
/// migrating.
///
/// ```no_run
/// use mnemon_db::postgres::{self, Settings};
/// use mnemon_db::{Migration, Schema};
///
/// static NOTES: Schema = Schema {
///     component: "note",
///     table: "note_schema",
///     key_column: "singleton",
///     migrations: &[Migration {
///         version: 1,
///         sql: "CREATE TABLE note_notes (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL);",
///     }],
/// };
///
/// let pool = postgres::open("postgres://mnemon@127.0.0.1/mnemon", Settings::default(), &[&NOTES])?;
/// # Ok::<(), mnemon_db::DbError>(())
/// ```
pub fn open(url: &str, settings: Settings, schemas: &[&Schema]) -> Result<Pool, DbError> {
    let pool = Pool::connect(url, settings)?;
    migrate_all(&pool, schemas)?;
    Ok(pool)
}

/// Brings each of `schemas` to its current version on `pool`, as [`open`] does: for a store
/// opened on a pool that other stores share (one pool for every store and namespace of a
/// process, docs/postgres.md#one-pool-per-database).
pub fn migrate_all(pool: &Pool, schemas: &[&Schema]) -> Result<(), DbError> {
    for schema in schemas {
        match pool.migrate(schema)? {
            Migrated::Current => tracing::debug!(
                target: "mnemon_db::postgres",
                database = pool.target(),
                component = schema.component,
                version = schema.version(),
                "schema current"
            ),
            Migrated::Applied { from, to } => tracing::info!(
                target: "mnemon_db::postgres",
                database = pool.target(),
                component = schema.component,
                "schema migrated from version {from} to {to}"
            ),
        }
    }
    Ok(())
}

/// The `synchronous_commit` setting for a durability.
pub fn synchronous_commit(durability: Durability) -> &'static str {
    match durability {
        Durability::Normal => "off",
        Durability::Full => "on",
    }
}

/// A parsed database URL: the client configuration and how to name it in messages.
#[derive(Clone)]
pub(crate) struct Endpoint {
    config: Config,
    /// `database "x" on host:port as user "y"`: never the password.
    target: String,
    database: String,
}

impl fmt::Debug for Endpoint {
    /// The target only: `Config`'s own Debug would print the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// Parses `url`, refusing what is not a `postgres://` or `postgresql://` URL.
    pub(crate) fn parse(url: &str, settings: &Settings) -> Result<Endpoint, DbError> {
        let bad = |detail: &str| DbError::BadUrl {
            detail: detail.to_owned(),
        };
        let scheme_ok = ["postgres://", "postgresql://"].iter().any(|scheme| {
            url.get(..scheme.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
        });
        if !scheme_ok {
            return Err(bad("it does not start with postgres:// or postgresql://"));
        }
        let mut config =
            Config::from_str(url).map_err(|e| DbError::BadUrl { detail: chain(&e) })?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(bad("it names no host"));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(settings.connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("mnemon");
        }
        let user = config.get_user().unwrap_or("(the default user)").to_owned();
        let database = config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or("(the default database)")
            .to_owned();
        let ports = config.get_ports();
        let hosts: Vec<String> = config
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                match host {
                    Host::Tcp(name) => format!("{name}:{port}"),
                    Host::Unix(path) => format!("{} (port {port})", path.display()),
                }
            })
            .collect();
        let hosts = if hosts.is_empty() {
            config
                .get_hostaddrs()
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            hosts.join(", ")
        };
        Ok(Endpoint {
            target: format!("database {database:?} on {hosts} as user {user:?}"),
            config,
            database,
        })
    }

    /// Opens one connection and sets it up for `settings`.
    pub(crate) fn connect(&self, settings: &Settings) -> Result<Client, DbError> {
        let mut client = self
            .config
            .connect(NoTls)
            .map_err(|e| self.classify(&e, Stage::Connect, "connecting"))?;
        client
            .batch_execute(&format!(
                "SET synchronous_commit TO {}",
                synchronous_commit(settings.durability)
            ))
            .map_err(|e| self.classify(&e, Stage::Use, "setting synchronous_commit"))?;
        Ok(client)
    }

    pub(crate) fn target(&self) -> &str {
        &self.target
    }

    fn classify(&self, error: &::postgres::Error, stage: Stage, action: &'static str) -> DbError {
        classify(error, &self.target, Some(&self.database), stage, action)
    }
}

/// Whether an error happened while connecting (an I/O failure means unreachable) or on an
/// open connection (it means the server went away).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Connect,
    Use,
}

/// Maps a `postgres` error met while `action` on `target` (a [`Pool::target`]) into the
/// [`DbError`] that says what to fix: the server's SQLSTATE code first (auth refused, database
/// missing, server shutting down), then a lost connection, then [`DbError::Query`] with the
/// server's message and code. Store crates use it for the errors of their own statements.
pub fn error(error: &::postgres::Error, target: &str, action: &'static str) -> DbError {
    classify(error, target, None, Stage::Use, action)
}

fn classify(
    error: &::postgres::Error,
    target: &str,
    database: Option<&str>,
    stage: Stage,
    action: &'static str,
) -> DbError {
    let target = target.to_owned();
    let detail = chain(error);
    if let Some(db) = error.as_db_error() {
        let code = db.code();
        if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            return DbError::AuthRefused { target, detail };
        }
        if *code == SqlState::INVALID_CATALOG_NAME && stage == Stage::Connect {
            return DbError::DatabaseMissing {
                target,
                database: database.unwrap_or("(unknown)").to_owned(),
            };
        }
        if *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
        {
            return DbError::ServerGone { target, detail };
        }
        return DbError::Query {
            target,
            action,
            detail,
        };
    }
    let text = error.to_string();
    if text.starts_with("authentication error")
        || (text.starts_with("invalid configuration") && detail.contains("password"))
    {
        return DbError::AuthRefused { target, detail };
    }
    let io = has_io_error(error);
    match stage {
        Stage::Connect if io || text.starts_with("timeout") || error.is_closed() => {
            DbError::Unreachable { target, detail }
        }
        Stage::Use if io || error.is_closed() => DbError::ServerGone { target, detail },
        _ => DbError::Query {
            target,
            action,
            detail,
        },
    }
}

fn has_io_error(error: &::postgres::Error) -> bool {
    let mut source = error.source();
    while let Some(e) = source {
        if e.is::<io::Error>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// An error and its sources, `: `-separated; a server error is its message, detail and hint
/// with its SQLSTATE code (the client's "db error: ERROR:" prefix says nothing).
fn chain(error: &::postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        let mut text = db.message().to_owned();
        if let Some(detail) = db.detail() {
            text.push_str(&format!("; detail: {detail}"));
        }
        if let Some(hint) = db.hint() {
            text.push_str(&format!("; hint: {hint}"));
        }
        text.push_str(&format!(" (SQLSTATE {})", db.code().code()));
        return text;
    }
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// The `pg_advisory_xact_lock` key under which `schema` migrates: FNV-1a (64 bits) of
/// `mnemon-db:` and the schema's table name. It is computed here rather than by the server's
/// `hashtext`, whose values PostgreSQL does not promise to keep across versions, so two
/// builds always agree on it.
pub fn advisory_lock_key(schema: &Schema) -> i64 {
    lock_key(schema.table)
}

fn lock_key(name: &str) -> i64 {
    stable_lock_key(b"mnemon-db:".iter().chain(name.as_bytes()))
}

/// An advisory lock key for `bytes` that every build and process agrees on: FNV-1a (64 bits),
/// rather than the server's `hashtext`, whose values PostgreSQL does not promise to keep across
/// versions. Callers prefix the bytes with their crate's name so their keys never meet.
pub fn stable_lock_key<'a>(bytes: impl IntoIterator<Item = &'a u8>) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// What [`migrate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Migrated {
    /// The schema was already current: nothing was locked or written.
    Current,
    /// This call applied the steps from version `from` (0 for a new database) to `to`.
    Applied {
        /// The version found under the lock.
        from: i64,
        /// The version written.
        to: i64,
    },
}

/// Brings `schema` to its current version in the database `client` is connected to; `target`
/// names it in errors ([`Pool::target`]). See the module docs for the lock; a database from a
/// newer build is refused with [`DbError::PgSchemaTooNew`] and left unchanged.
pub fn migrate(client: &mut Client, target: &str, schema: &Schema) -> Result<Migrated, DbError> {
    schema.check()?;
    let supported = schema.version();
    let failed = |version: i64| {
        move |e: ::postgres::Error| match error(&e, target, "migrating") {
            DbError::Query { detail, .. } => DbError::PgMigration {
                component: schema.component,
                target: target.to_owned(),
                version,
                detail,
            },
            other => other,
        }
    };
    let too_new = |found: i64| DbError::PgSchemaTooNew {
        component: schema.component,
        target: target.to_owned(),
        found,
        supported,
    };
    // The common case, the schema already current, is settled by a read without the lock.
    match read_version(client, schema).map_err(failed(supported))? {
        Some(found) if found == supported => return Ok(Migrated::Current),
        Some(found) if found > supported => return Err(too_new(found)),
        _ => {}
    }
    // Dropping the transaction on an early return rolls it back, releasing the lock.
    let mut tx = client.transaction().map_err(failed(supported))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&advisory_lock_key(schema)],
    )
    .map_err(failed(supported))?;
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (
            {key} INTEGER PRIMARY KEY CHECK ({key} = 1),
            version BIGINT NOT NULL
        )",
        table = schema.table,
        key = schema.key_column
    ))
    .map_err(failed(supported))?;
    // Another process may have migrated while this one waited for the lock.
    let found = read_version(&mut tx, schema)
        .map_err(failed(supported))?
        .unwrap_or(0);
    if found > supported {
        return Err(too_new(found));
    }
    if found == supported {
        tx.commit().map_err(failed(supported))?;
        return Ok(Migrated::Current);
    }
    for step in schema.migrations.iter().filter(|m| m.version > found) {
        tx.batch_execute(step.sql).map_err(failed(step.version))?;
    }
    tx.execute(
        &format!(
            "INSERT INTO {table} ({key}, version) VALUES (1, $1)
             ON CONFLICT ({key}) DO UPDATE SET version = excluded.version",
            table = schema.table,
            key = schema.key_column
        ),
        &[&supported],
    )
    .map_err(failed(supported))?;
    tx.commit().map_err(failed(supported))?;
    Ok(Migrated::Applied {
        from: found,
        to: supported,
    })
}

/// The version recorded in `schema`'s table, `None` when the table or its row does not exist.
pub fn schema_version(
    client: &mut Client,
    target: &str,
    schema: &Schema,
) -> Result<Option<i64>, DbError> {
    schema.check()?;
    read_version(client, schema).map_err(|e| error(&e, target, "reading the schema version"))
}

fn read_version(
    client: &mut impl GenericClient,
    schema: &Schema,
) -> Result<Option<i64>, ::postgres::Error> {
    let exists = client.query_one("SELECT to_regclass($1) IS NOT NULL", &[&schema.table])?;
    if !exists.try_get::<_, bool>(0)? {
        return Ok(None);
    }
    let row = client.query_opt(
        &format!(
            "SELECT version FROM {} WHERE {} = 1",
            schema.table, schema.key_column
        ),
        &[],
    )?;
    row.map(|r| r.try_get::<_, i64>(0)).transpose()
}

/// Whether the `vector` extension (pgvector) can be used in a database.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VectorSupport {
    /// The extension is installed in the database (it was, or [`vector_support`] created it).
    Available {
        /// Its version, e.g. `0.6.2`.
        version: String,
    },
    /// It is not, and could not be created.
    Unavailable {
        /// Why, in words for a log line: not on the server, or not allowed.
        reason: String,
    },
}

impl VectorSupport {
    /// Whether the extension is there.
    pub fn is_available(&self) -> bool {
        matches!(self, VectorSupport::Available { .. })
    }
}

impl fmt::Display for VectorSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VectorSupport::Available { version } => {
                write!(f, "the vector extension {version} is available")
            }
            VectorSupport::Unavailable { reason } => {
                write!(f, "the vector extension is unavailable: {reason}")
            }
        }
    }
}

/// Reports whether the `vector` extension can be used, creating it (`CREATE EXTENSION IF NOT
/// EXISTS vector`, under an advisory lock so that concurrent openers do not race) when the
/// server has it and it is not yet in the database. A server without the extension's files,
/// or a user without the privilege to create it, gives [`VectorSupport::Unavailable`] with the
/// reason, not an error; an error is returned only when the server cannot be asked at all.
pub fn vector_support(client: &mut Client, target: &str) -> Result<VectorSupport, DbError> {
    let query = |e: ::postgres::Error| error(&e, target, "detecting the vector extension");
    if let Some(version) = installed_vector(client).map_err(query)? {
        return Ok(VectorSupport::Available { version });
    }
    let offered = client
        .query_opt(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'",
            &[],
        )
        .map_err(query)?;
    if offered.is_none() {
        return Ok(VectorSupport::Unavailable {
            reason: "the server does not have it installed (install pgvector on the server, \
                     e.g. the postgresql-16-pgvector package)"
                .to_owned(),
        });
    }
    let mut tx = client.transaction().map_err(query)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&lock_key("extension vector")],
    )
    .map_err(query)?;
    match tx.batch_execute("CREATE EXTENSION IF NOT EXISTS vector") {
        Ok(()) => {}
        Err(e) => {
            let reason = match e.code() {
                Some(code) if *code == SqlState::INSUFFICIENT_PRIVILEGE => format!(
                    "this user may not create it ({}); have a superuser or the database owner \
                     run CREATE EXTENSION vector once",
                    chain(&e)
                ),
                Some(_) => format!("creating it failed: {}", chain(&e)),
                None => return Err(query(e)),
            };
            // The failed transaction rolls back when dropped.
            drop(tx);
            return Ok(VectorSupport::Unavailable { reason });
        }
    }
    tx.commit().map_err(query)?;
    match installed_vector(client).map_err(query)? {
        Some(version) => Ok(VectorSupport::Available { version }),
        None => Ok(VectorSupport::Unavailable {
            reason: "CREATE EXTENSION succeeded but the extension is not listed in pg_extension"
                .to_owned(),
        }),
    }
}

fn installed_vector(client: &mut Client) -> Result<Option<String>, ::postgres::Error> {
    client
        .query_opt(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'",
            &[],
        )?
        .map(|row| row.try_get::<_, String>(0))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(url: &str) -> Result<Endpoint, DbError> {
        Endpoint::parse(url, &Settings::default())
    }

    #[test]
    fn a_url_names_database_host_and_user_but_not_the_password() {
        let endpoint = parse("postgres://alice:s3cret@db.example:6543/notes").unwrap();
        assert_eq!(
            endpoint.target(),
            "database \"notes\" on db.example:6543 as user \"alice\""
        );
        assert!(!format!("{endpoint:?}").contains("s3cret"));
        let endpoint = parse("postgresql://bob@localhost").unwrap();
        assert_eq!(
            endpoint.target(),
            "database \"bob\" on localhost:5432 as user \"bob\""
        );
    }

    #[test]
    fn malformed_urls_are_bad_urls() {
        for url in [
            "",
            "mysql://u@h/db",
            "127.0.0.1:5432/db",
            "host=localhost user=x",
            "postgres://u:s3cret@h:notaport/db",
            "postgres://u:s3cret@h/db?nonsense_option=1",
            "postgres:///db",
        ] {
            let err = parse(url).unwrap_err();
            assert!(matches!(err, DbError::BadUrl { .. }), "{url:?}: {err}");
            let text = err.to_string();
            assert!(text.contains("postgres://USER"), "{text}");
            assert!(
                !text.contains("s3cret"),
                "{url:?} leaks the password: {text}"
            );
        }
    }

    #[test]
    fn settings_default_to_full_durability_and_a_bounded_pool() {
        let settings = Settings::default();
        assert_eq!(settings.durability, Durability::Full);
        assert_eq!(synchronous_commit(settings.durability), "on");
        assert_eq!(synchronous_commit(Durability::Normal), "off");
        assert_eq!(settings.pool_size, 8);
    }

    #[test]
    fn lock_keys_differ_per_schema_and_are_stable() {
        // FNV-1a is fixed: the key of a table never changes between builds.
        assert_eq!(lock_key(""), lock_key(""));
        // Pinned: processes of different builds must agree on every key.
        assert_eq!(lock_key("asset_schema"), 673_123_735_713_518_170);
        assert_ne!(lock_key("asset_schema"), lock_key("memory_schema"));
        assert_ne!(lock_key("asset_schema"), lock_key("artifact_schema"));
        // FNV-1a of "mnemon-db:" computed independently (offset basis, prime 0x100000001b3).
        let mut expected: u64 = 14695981039346656037;
        for b in "mnemon-db:".bytes() {
            expected = (expected ^ u64::from(b)).wrapping_mul(1099511628211);
        }
        assert_eq!(lock_key(""), expected as i64);
    }

    #[test]
    fn pools_and_connections_cross_threads() {
        fn shared<T: Send + Sync + Clone>() {}
        fn sent<T: Send>() {}
        shared::<Pool>();
        sent::<PooledClient>();
    }

    #[test]
    fn vector_support_reads_as_a_log_line() {
        let yes = VectorSupport::Available {
            version: "0.6.2".into(),
        };
        assert!(yes.is_available());
        assert_eq!(yes.to_string(), "the vector extension 0.6.2 is available");
        let no = VectorSupport::Unavailable {
            reason: "not installed".into(),
        };
        assert!(!no.is_available());
        assert!(no.to_string().ends_with("unavailable: not installed"));
    }

    proptest! {
        /// Any string: the parser never panics, and a refusal never quotes a password.
        #[test]
        fn parsing_any_url_is_safe(rest in "\\PC{0,60}") {
            let url = format!("postgres://user:pw_SECRET_pw@{rest}");
            match parse(&url) {
                Ok(endpoint) => prop_assert!(!endpoint.target().contains("pw_SECRET_pw")),
                Err(e) => prop_assert!(!e.to_string().contains("pw_SECRET_pw"), "{}", e),
            }
        }

        /// Well-formed URLs parse, and their parts are what the target names.
        #[test]
        fn well_formed_urls_parse(
            user in "[a-z][a-z0-9_]{0,10}",
            host in "[a-z][a-z0-9.-]{0,20}",
            port in 1u16..,
            db in "[a-z][a-z0-9_]{0,10}",
        ) {
            let endpoint = parse(&format!("postgres://{user}:pw@{host}:{port}/{db}")).unwrap();
            prop_assert_eq!(
                endpoint.target(),
                format!("database {db:?} on {host}:{port} as user {user:?}")
            );
        }
    }
}
