//! Storage plumbing shared by the Mnemon stores, for both backends: how a connection is set
//! up, how hard a commit works to survive crashes, how a component's schema is versioned and
//! migrated, which tenant a record belongs to, how a database is opened read-only, and how a
//! whole file is replaced atomically.
//!
//! The asset store (`mnemon-store`), the artifact store (`mnemon-artifacts`) and the memory
//! store (`mnemon-memory`) share one database per data directory (`docs/ARCHITECTURE.md`): one
//! SQLite file by default, or one PostgreSQL database named by a `postgres://` URL. Each keeps
//! its own tables behind a prefix (`asset_`, `artifact_`, `memory_`) and its own schema table
//! (`asset_schema`, `artifact_schema`, `memory_schema`); everything else about the connection
//! is decided here, once:
//!
//! - Backend-neutral, always available: [`Durability`], one type and one default for every
//!   store and backend (see below); [`Schema`] and [`Migration`] ([`schema`]), a component's
//!   numbered steps and version table, one `Schema` value per backend since the SQL differs;
//!   [`Namespace`] ([`namespace`]), the validated tenant name every record carries, whose
//!   default (`default`) keeps a data directory's behaviour from before namespaces; [`DbError`],
//!   every failure with what to fix.
//! - `sqlite` (feature `sqlite`, on by default): WAL journal, busy timeout, `synchronous`,
//!   migrations in a `BEGIN IMMEDIATE` transaction, and read-only opening for read commands
//!   and read-only media.
//! - `postgres` (feature `postgres`, off by default): a bounded connection pool opened from a
//!   `postgres://` URL, with errors for a malformed URL, a refused login, an unreachable server,
//!   a missing database and a lost connection; migrations applied once under
//!   `pg_advisory_xact_lock`, so that many processes may start at once; detection of the
//!   `vector` extension (pgvector), so memory can choose an HNSW index or exact scoring; a
//!   cache of prepared statements per pooled connection; and `postgres::open`, the one way a
//!   store opens (connect, migrate its schemas, log). The tests run it against a real server
//!   (`docs/postgres.md`).
//! - [`atomic_file`] (always available): [`write_atomic`](atomic_file::write_atomic) replaces a
//!   file atomically and durably (temporary file, fsync, rename, directory fsync), streaming.
//!   Artifact content, library sidecars, imported libraries and memory exports all use it.
//!
//! # The default durability: `Full`
//!
//! [`Durability::default()`] is [`Durability::Full`]: a write that returned survives a killed
//! process, an operating-system crash and a power loss. The three stores share one file, so a
//! per-store default would only be a per-connection setting on the same data, and the asset
//! and artifact stores already promised this (artifacts hard-coded it). Memory used to default
//! to `Normal`; an agent's conversation is as much the user's data as an asset, and the cost of
//! the extra fsync per commit is paid once per batch by the stores' batch writes. Programs that
//! prefer speed over the last seconds of writes on power loss choose [`Durability::Normal`].
//! On PostgreSQL, `Full` keeps `synchronous_commit = on` and `Normal` turns
//! it off (a server crash may lose the last commits, never corrupting the database).
//!
//! # Concurrency
//!
//! Opening is safe when many processes start at once on a new data directory: every step that
//! can meet `SQLITE_BUSY` outside SQLite's busy handler (switching to WAL in particular) is
//! retried until the busy timeout. A database whose schema is current is opened without taking
//! the write lock, so readers keep working while another process holds a write transaction.
//! On PostgreSQL the migration takes an advisory lock per schema inside its transaction; a
//! current schema is read without it.
//!
//! ```
//! use mnemon_db::Durability;
//! use mnemon_db::sqlite::{self, Migration, Schema, Settings};
//!
//! static NOTES: Schema = Schema {
//!     component: "note",
//!     table: "note_schema",
//!     key_column: "singleton",
//!     migrations: &[Migration {
//!         version: 1,
//!         sql: "CREATE TABLE note_notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);",
//!     }],
//! };
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("db.sqlite3");
//! let settings = Settings { durability: Durability::Full, ..Settings::default() };
//! let conn = sqlite::open(&path, &settings, &NOTES)?;
//! conn.execute("INSERT INTO note_notes (body) VALUES ('hello')", [])?;
//! drop(conn);
//!
//! let reader = sqlite::open_read_only(&path, &settings, &NOTES)?;
//! let body: String = reader.conn.query_row("SELECT body FROM note_notes", [], |r| r.get(0))?;
//! assert_eq!(body, "hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod atomic_file;
mod durability;
mod error;
pub mod expiry;
pub mod jsonb;
pub mod namespace;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod prefix;
pub mod schema;
#[cfg(feature = "sqlite")]
pub mod sqlite;

pub use durability::Durability;
pub use error::DbError;
pub use expiry::{Clock, Expiry, ManualClock, SystemClock};
pub use namespace::{Namespace, NamespaceError};
pub use schema::{Migration, Schema};
