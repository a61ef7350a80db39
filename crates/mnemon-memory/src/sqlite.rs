//! The durable SQLite memory (docs/reference/memory.md#sqlite-memory).
//!
//! One file holds many threads, each scoped by optional user, agent and session ids. The file
//! may be shared with other Mnemon components, so every table is prefixed `memory_` and the
//! schema version lives in `memory_schema` rather than the file-wide `user_version`.
//!
//! **Durability.** The journal is WAL, set up by `mnemon-db` like every Mnemon store. Every
//! mutating call is one `BEGIN IMMEDIATE` transaction that returns only after `COMMIT`. With
//! [`Durability::Full`] (the default, shared by all stores: see `mnemon_db`) the WAL is fsynced
//! at every commit, so a returned write survives a power loss. [`Durability::Normal`] fsyncs
//! only at checkpoints: a returned write survives the process being killed (`kill -9`) and is
//! lost only if the OS itself crashes or the power fails before the next sync.
//!
//! **Tenants.** A store is opened for one namespace ([`SqliteMemoryOptions::namespace`]); every
//! thread row carries its namespace (schema version 2), and messages and marks are reached only
//! through a thread id looked up with it, so no call through the store or its memories reads,
//! lists, counts, searches or deletes another namespace's threads. Files written before
//! namespaces hold the default namespace's threads.
//!
//! **Connections.** A writable store has one write connection, behind a mutex, which every
//! mutating call holds from `BEGIN IMMEDIATE` through `COMMIT` (the fsync included), and a few
//! read connections (`mnemon_db::sqlite::ReadPool`, opened on demand) for every call that only
//! reads: in WAL mode a read never waits for a write, and a read transaction begun after a
//! write committed sees it on any connection, so an acknowledged write is read back by every
//! later call of every handle. These connections belong to the file: every writable store on it
//! in the process with the same settings, whatever its namespace, shares them
//! (`sqlite/shared_file.rs`); a write waits for the write connection at most the busy timeout
//! (`sqlite/group_commit.rs`), and its turns are taken among the process's other writers to the
//! file (`mnemon_db::sqlite::WriteQueue`). A store opened read-only has its one connection,
//! which serves everything.
//!
//! **Read-only.** [`SqliteMemoryStore::open_read_only`] never takes the write lock and works on
//! a read-only directory or mount; a file without memory tables reads as empty.
//!
//! **Caching.** Each [`SqliteMemory`] mirrors its thread in memory (messages, marks, the
//! embedding matrix) and checks the thread's `rev` counter, which every write increments, at the
//! start of each call; writes by other handles or processes are therefore always seen. A cut to
//! `top_k` through a handle whose mirror is not current (a fresh handle, as each server request
//! opens) does not load the mirror: it scores the stored `f32` vectors as they stream past and
//! decodes only the winners' bodies (`retrieve_from_index` below).
//!
//! **Summaries and search.** Every write also keeps the thread's `live` count and
//! `last_active_ms` (schema version 3) for [`SqliteMemoryStore::thread_summaries`], and
//! [`SqliteMemoryStore::search`] recalls across the threads a `ScopeFilter` selects
//! (docs/reference/memory.md#thread-summaries, #search-across-sessions).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mnemon_db::sqlite::{self, Migration, Schema, Settings};
use mnemon_db::{DbError, Durability, Namespace};
use mnemon_filter::{Dialect, SqlParam};
use mnemon_types::{Embedder, Msg, MsgFactory, MsgKind};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde_json::Value;

use crate::activity::{
    Cursor, ThreadPage, ThreadSummary, created_page, decode_created, fetch_count, now_ms, page,
};
use crate::clock::default_factory;
use crate::document::LoadSource;
use crate::entry::Entry;
use crate::error::MemoryError;
use crate::exact;
use crate::load::decode_stream;
use crate::ops::{Backend, reembed_thread};
use crate::recall_index::{RecallIndexOptions, RecallIndexStatus, StoredIndexes};
use crate::report::AddReport;
use crate::retrieval::{Metric, RetrievalQuery, RetrieveOptions, Retrieved, query_vector};
pub use crate::scope::Scope;
use crate::search::{
    Candidate, KeywordRanking, MAX_KEYWORD_MATCHES, ScopeFilter, SearchHit, SearchRequest,
    SearchResults, TopK, by_mode, dimension_mismatch, filter_sql, fts5_query, keyword_terms,
};
use crate::sweep::Forgotten;
use crate::thread::{Change, ThreadState};
use crate::vector_scan::{self, Scored, ThreadVectors};

mod group_commit;
mod shared_file;

use group_commit::WriterGuard;
use shared_file::SharedFile;

/// The memory tables' schema: `memory_schema` holds the version (its key column is `id`, as in
/// files written before `mnemon-db`).
static SCHEMA: Schema = Schema {
    component: "memory",
    table: "memory_schema",
    key_column: "id",
    migrations: &[
        Migration {
            version: 1,
            sql: SCHEMA_V1,
        },
        Migration {
            version: 2,
            sql: SCHEMA_V2,
        },
        Migration {
            version: 3,
            sql: SCHEMA_V3,
        },
        Migration {
            version: 4,
            sql: SCHEMA_V4,
        },
        Migration {
            version: 5,
            sql: SCHEMA_V5,
        },
        Migration {
            version: 6,
            sql: SCHEMA_V6,
        },
        Migration {
            version: 7,
            sql: SCHEMA_V7,
        },
    ],
};

/// Version 7: the namespace's threads in creation order, a page at a time
/// ([`SqliteMemoryStore::threads_page`]), as one index range read from the last listed thread
/// on (the listing read every thread of the namespace for each page before).
const SCHEMA_V7: &str = "
CREATE INDEX memory_threads_created ON memory_threads (namespace, thread_id);
";

/// Version 6: embedding models (docs/reference/memory.md#embedding-models). A message's
/// `embedding_model` names the model that made its stored embedding (NULL: not known); the
/// partial index answers "has this thread an embedding of another model" with two index range
/// probes, without reading the thread. Existing embeddings are of unknown models.
const SCHEMA_V6: &str = "
ALTER TABLE memory_messages ADD COLUMN embedding_model TEXT;
CREATE INDEX memory_messages_model ON memory_messages (thread_id, embedding_model)
  WHERE embedding_model IS NOT NULL;
";

const SCHEMA_V1: &str = "
CREATE TABLE memory_threads (
  thread_id INTEGER PRIMARY KEY AUTOINCREMENT,
  user_id TEXT NOT NULL, agent_id TEXT NOT NULL, session_id TEXT NOT NULL,
  rev INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL,
  UNIQUE (user_id, agent_id, session_id));
CREATE TABLE memory_messages (
  thread_id INTEGER NOT NULL REFERENCES memory_threads ON DELETE CASCADE,
  seq INTEGER NOT NULL, msg_id TEXT NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
  embedding BLOB,
  PRIMARY KEY (thread_id, seq), UNIQUE (thread_id, msg_id));
CREATE TABLE memory_marks (
  thread_id INTEGER NOT NULL, msg_id TEXT NOT NULL, pos INTEGER NOT NULL, mark TEXT NOT NULL,
  PRIMARY KEY (thread_id, msg_id, mark),
  FOREIGN KEY (thread_id, msg_id) REFERENCES memory_messages (thread_id, msg_id)
    ON DELETE CASCADE);
";

/// Version 2: every thread belongs to a namespace (the tenant, `mnemon_db::Namespace`), and a
/// scope is unique within its namespace. SQLite cannot change a table's constraints in place,
/// so the three tables are rebuilt under new names and renamed back (renaming rewrites the
/// foreign keys that point at them; dropping the old parents first would cascade into the new
/// children). Existing threads get the default namespace, so a file written before namespaces
/// reads as before. The `AUTOINCREMENT` counter carries over: thread ids are never reused, which
/// is what keeps a mirror's `(thread_id, rev)` from matching a different thread.
const SCHEMA_V2: &str = "
CREATE TABLE memory_threads_v2 (
  thread_id INTEGER PRIMARY KEY AUTOINCREMENT,
  namespace TEXT NOT NULL,
  user_id TEXT NOT NULL, agent_id TEXT NOT NULL, session_id TEXT NOT NULL,
  rev INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL,
  UNIQUE (namespace, user_id, agent_id, session_id));
CREATE TABLE memory_messages_v2 (
  thread_id INTEGER NOT NULL REFERENCES memory_threads_v2 ON DELETE CASCADE,
  seq INTEGER NOT NULL, msg_id TEXT NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
  embedding BLOB,
  PRIMARY KEY (thread_id, seq), UNIQUE (thread_id, msg_id));
CREATE TABLE memory_marks_v2 (
  thread_id INTEGER NOT NULL, msg_id TEXT NOT NULL, pos INTEGER NOT NULL, mark TEXT NOT NULL,
  PRIMARY KEY (thread_id, msg_id, mark),
  FOREIGN KEY (thread_id, msg_id) REFERENCES memory_messages_v2 (thread_id, msg_id)
    ON DELETE CASCADE);
INSERT INTO memory_threads_v2
  SELECT thread_id, 'default', user_id, agent_id, session_id, rev, created_at
  FROM memory_threads;
INSERT INTO memory_messages_v2
  SELECT thread_id, seq, msg_id, kind, body, embedding FROM memory_messages;
INSERT INTO memory_marks_v2 SELECT thread_id, msg_id, pos, mark FROM memory_marks;
DELETE FROM sqlite_sequence WHERE name = 'memory_threads_v2';
INSERT INTO sqlite_sequence (name, seq)
  SELECT 'memory_threads_v2', seq FROM sqlite_sequence WHERE name = 'memory_threads';
DROP TABLE memory_marks;
DROP TABLE memory_messages;
DROP TABLE memory_threads;
ALTER TABLE memory_threads_v2 RENAME TO memory_threads;
ALTER TABLE memory_messages_v2 RENAME TO memory_messages;
ALTER TABLE memory_marks_v2 RENAME TO memory_marks;
";

/// Version 3: the thread summaries (docs/reference/memory.md#thread-summaries). Every thread
/// row keeps its `live` message count and its `last_active_ms` (milliseconds since the Unix
/// epoch), moved by every write in its own transaction, and the index lists a namespace's
/// threads by activity without reading any message. The migration counts each thread's
/// messages; it gives every existing thread the migration's time as its last activity (a
/// message's `timestamp` is free text in the writer's local time, not a reliable clock), so
/// those threads tie and list newest-created first until they are written again. PostgreSQL
/// has the same columns from its own versions 3 (`live`) and 5 (`last_active_ms`).
const SCHEMA_V3: &str = "
ALTER TABLE memory_threads ADD COLUMN live INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memory_threads ADD COLUMN last_active_ms INTEGER NOT NULL DEFAULT 0;
UPDATE memory_threads SET
  live = (SELECT COUNT(*) FROM memory_messages m WHERE m.thread_id = memory_threads.thread_id),
  last_active_ms = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER);
CREATE INDEX memory_threads_activity
  ON memory_threads (namespace, last_active_ms DESC, thread_id DESC);
";

/// Version 4: expiry (docs/reference/memory.md#expiry). A message's `expires_at`
/// (milliseconds since the Unix epoch by the store's clock; NULL: never) hides it from every read
/// from that instant on; a thread's `next_expiry` is at most the smallest `expires_at` of its
/// messages (lowered by every add, recomputed when expired messages are removed), so reads,
/// writes and `gc` know without looking at a message whether anything of the thread may have
/// expired. Both indexes are partial: rows that never expire cost nothing.
const SCHEMA_V4: &str = "
ALTER TABLE memory_messages ADD COLUMN expires_at INTEGER;
ALTER TABLE memory_threads ADD COLUMN next_expiry INTEGER;
CREATE INDEX memory_messages_expiry ON memory_messages (thread_id, expires_at)
  WHERE expires_at IS NOT NULL;
CREATE INDEX memory_threads_expiry ON memory_threads (namespace, next_expiry)
  WHERE next_expiry IS NOT NULL;
";

/// The text keyword search indexes for a message whose JSON body is `$body`: its content when
/// a string, the `text` of its blocks when a list, else the content's JSON (nothing for a body
/// that is not JSON, which only a damaged row has: the write must not fail on it).
macro_rules! message_text_sql {
    ($body:literal) => {
        concat!(
            "CASE WHEN NOT json_valid(",
            $body,
            ") THEN '' ELSE CASE json_type(",
            $body,
            ", '$.content') WHEN 'text' THEN json_extract(",
            $body,
            ", '$.content') WHEN 'array' THEN COALESCE((SELECT group_concat(json_extract(b.value,              '$.text'), ' ') FROM json_each(",
            $body,
            ", '$.content') b WHERE json_type(b.value, '$.text') = 'text'), '')              WHEN 'null' THEN '' ELSE COALESCE(CAST(json_extract(",
            $body,
            ", '$.content') AS TEXT), '') END END"
        )
    };
}

/// Version 5: keyword search (docs/reference/memory.md#keyword-and-hybrid-search). An FTS5
/// table holds each message's text (its content: the string, or the text blocks of a list, or
/// else its JSON), keyed by `thread_id * 2^32 + seq` (stable: a table without an integer primary
/// key may renumber its rowids in a `VACUUM`, so the messages' own rowids are not used). Triggers
/// keep it in step with every insert, delete (forget, gc, cascades included) and body update, so
/// no write path can miss it; the migration fills it from the stored messages. A thread's seqs
/// stay far below 2^32 (they count its messages).
const SCHEMA_V5: &str = concat!(
    "CREATE VIRTUAL TABLE memory_fts USING fts5(text);
     CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory_messages BEGIN
       INSERT INTO memory_fts (rowid, text)
         VALUES (NEW.thread_id * 4294967296 + NEW.seq, ",
    message_text_sql!("NEW.body"),
    ");
     END;
     CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory_messages BEGIN
       DELETE FROM memory_fts WHERE rowid = OLD.thread_id * 4294967296 + OLD.seq;
     END;
     CREATE TRIGGER memory_fts_update AFTER UPDATE OF thread_id, seq, body ON memory_messages
     BEGIN
       DELETE FROM memory_fts WHERE rowid = OLD.thread_id * 4294967296 + OLD.seq;
       INSERT INTO memory_fts (rowid, text)
         VALUES (NEW.thread_id * 4294967296 + NEW.seq, ",
    message_text_sql!("NEW.body"),
    ");
     END;
     INSERT INTO memory_fts (rowid, text)
       SELECT thread_id * 4294967296 + seq, ",
    message_text_sql!("body"),
    " FROM memory_messages;"
);

/// A message row is visible at `now` (the store's clock, bound as `?N`): the one rule of
/// `mnemon_db::expiry`, an expired row being one with `expires_at <= now`.
macro_rules! live_sql {
    ($alias:literal, $param:literal) => {
        concat!(
            "(",
            $alias,
            ".expires_at IS NULL OR ",
            $alias,
            ".expires_at > ",
            $param,
            ")"
        )
    };
}

/// The first model other than `?2` among the stored embeddings of thread `?1`'s messages live
/// at `?3` (the store clock's now), if any: two ranges of [`SCHEMA_V6`]'s index. An expired
/// message not yet removed is invisible to every read, so its embedding's model must not refuse
/// a recall either; the index finds the rows of other models and only those are checked for
/// expiry.
const OTHER_MODEL_SQL: &str = concat!(
    "SELECT m.embedding_model FROM memory_messages m
 WHERE m.thread_id = ?1 AND m.embedding_model IS NOT NULL
   AND (m.embedding_model < ?2 OR m.embedding_model > ?2) AND ",
    live_sql!("m", "?3"),
    " LIMIT 1"
);

/// A page of thread summaries after a cursor: `?1` namespace, `?2`/`?3` the cursor's time and
/// thread id, `?4` the row count, `?5` the store clock's now (a thread's count leaves out its
/// expired messages not yet removed: a probe of the partial expiry index, empty for a thread
/// whose messages never expire). One statement per case rather than one with `?2 IS NULL OR
/// …`, which would keep SQLite from starting the index range at the cursor.
const PAGE_AFTER_SQL: &str = "SELECT thread_id, user_id, agent_id, session_id,
   live - (SELECT COUNT(*) FROM memory_messages m
     WHERE m.thread_id = memory_threads.thread_id AND m.expires_at <= ?5),
   last_active_ms
 FROM memory_threads INDEXED BY memory_threads_activity
 WHERE namespace = ?1 AND (last_active_ms, thread_id) < (?2, ?3)
 ORDER BY last_active_ms DESC, thread_id DESC
 LIMIT ?4";

/// A thread summary row of [`PAGE_AFTER_SQL`], [`FIRST_PAGE_SQL`] or [`CREATED_PAGE_SQL`]
/// (`thread_id, user_id, agent_id, session_id, live, last_active_ms`), with its thread id.
fn summary_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(ThreadSummary, i64)> {
    let live: i64 = r.get(4)?;
    Ok((
        ThreadSummary {
            scope: Scope::from_columns(r.get(1)?, r.get(2)?, r.get(3)?),
            messages: u64::try_from(live).unwrap_or(0),
            last_active_ms: r.get(5)?,
        },
        r.get::<_, i64>(0)?,
    ))
}

/// A page of the namespace's threads in creation order, with their summaries as
/// [`PAGE_AFTER_SQL`] reads them: `?1` the namespace, `?2` the last listed thread's id (0 for
/// the first page: ids start at 1), `?3` the rows to read, `?4` the clock's now.
const CREATED_PAGE_SQL: &str = "SELECT thread_id, user_id, agent_id, session_id,
   live - (SELECT COUNT(*) FROM memory_messages m
     WHERE m.thread_id = memory_threads.thread_id AND m.expires_at <= ?4),
   last_active_ms
 FROM memory_threads
 WHERE namespace = ?1 AND thread_id > ?2
 ORDER BY thread_id
 LIMIT ?3";

/// The first page of thread summaries, with [`PAGE_AFTER_SQL`]'s parameters (`?2` and `?3`
/// NULL).
const FIRST_PAGE_SQL: &str = "SELECT thread_id, user_id, agent_id, session_id,
   live - (SELECT COUNT(*) FROM memory_messages m
     WHERE m.thread_id = memory_threads.thread_id AND m.expires_at <= ?5),
   last_active_ms
 FROM memory_threads INDEXED BY memory_threads_activity
 WHERE namespace = ?1 AND ?2 IS NULL AND ?3 IS NULL
 ORDER BY last_active_ms DESC, thread_id DESC
 LIMIT ?4";

/// Options of [`SqliteMemoryStore::open`].
#[derive(Debug, Clone)]
pub struct SqliteMemoryOptions {
    /// How hard a commit is pushed to disk: [`Durability`], `mnemon-db`'s one type and one
    /// default for every store.
    pub durability: Durability,
    /// How long to wait for another process's write lock before failing with `Storage`.
    pub busy_timeout: Duration,
    /// The tenant the store is opened for: every thread it creates, lists, reads or drops is
    /// this namespace's, and no call through it reaches another's. The default namespace holds
    /// everything written before namespaces existed.
    pub namespace: Namespace,
    /// How long a message added with [`Expiry::Default`](mnemon_db::Expiry::Default) (every
    /// plain add and load) lives: the default time-to-live of this handle's namespace.
    /// Default: `None`, forever.
    pub default_ttl: Option<Duration>,
    /// The clock that stamps expiries and decides what has expired
    /// (docs/reference/memory.md#expiry). Default: the system clock.
    pub clock: Arc<dyn mnemon_db::Clock>,
    /// When a large thread's recall uses the approximate index
    /// (docs/reference/memory.md#the-recall-index). Default: from 50,000 embeddings, built in
    /// the background.
    pub recall_index: RecallIndexOptions,
    /// The most bytes of stored vectors the store keeps in memory for the searches across
    /// sessions and the recalls through handles without a current mirror
    /// (docs/reference/memory.md#the-recall-index). A thread larger than this is read from
    /// the file at every such search. Default 256 MiB (100,000 vectors of 256 dimensions take
    /// about 108 MB; of 1,536 dimensions, about 620 MB). The handles on one file in one
    /// process opened with the same settings and budget share one cache, whatever their
    /// namespaces (`sqlite/shared_file.rs`): a server of many tenants holds one.
    pub vector_cache_bytes: usize,
}

impl SqliteMemoryOptions {
    fn settings(&self) -> Settings {
        Settings {
            durability: self.durability,
            busy_timeout: self.busy_timeout,
            foreign_keys: true,
        }
    }
}

impl Default for SqliteMemoryOptions {
    /// The defaults every Mnemon store shares (`mnemon_db::sqlite::Settings`).
    fn default() -> Self {
        let shared = Settings::default();
        SqliteMemoryOptions {
            durability: shared.durability,
            busy_timeout: shared.busy_timeout,
            namespace: Namespace::default(),
            default_ttl: None,
            clock: Arc::new(mnemon_db::SystemClock),
            recall_index: RecallIndexOptions::default(),
            vector_cache_bytes: crate::vector_scan::CACHE_BUDGET_BYTES,
        }
    }
}

/// An open SQLite file of memory threads: one write connection behind a mutex and a few read
/// connections (see the module docs); share it with `Arc`.
pub struct SqliteMemoryStore {
    /// The connections and the vector cache, shared with every handle on the file in this
    /// process that was opened with the same settings (`sqlite/shared_file.rs`): the write
    /// connection, where concurrent writes share transactions (`sqlite/group_commit.rs`; on a
    /// store opened read-only, the one connection, not shared), and the read connections of a
    /// writable store (`None` when opened read-only: its one connection may carry a temporary
    /// view over an older file, which a second connection would not have, and it never waits
    /// for a writer anyway). Connections are taken only with the thread's mirror lock already
    /// held, or with no mirror lock at all. The vector cache holds the threads' stored vectors
    /// for the exact scans (`crate::vector_scan`), keyed by thread id, unique in the file.
    file: Arc<SharedFile>,
    path: PathBuf,
    factory: MsgFactory,
    namespace: Namespace,
    /// The tables predate namespaces (a version-1 file opened read-only): every thread is the
    /// default namespace's.
    before_namespaces: bool,
    /// The tables predate thread summaries (a version-1 or -2 file opened read-only): no
    /// `live` or `last_active_ms` column.
    before_activity: bool,
    /// [`SqliteMemoryOptions::default_ttl`].
    default_ttl: Option<Duration>,
    /// [`SqliteMemoryOptions::clock`].
    clock: Arc<dyn mnemon_db::Clock>,
    /// [`SqliteMemoryOptions::recall_index`].
    recall_index: RecallIndexOptions,
    /// The recall indexes over the threads' stored vectors, for the exact scans' paths: a
    /// search across sessions, and a recall through a handle whose mirror is not current
    /// (`crate::recall_index`).
    indexes: StoredIndexes,
    /// The file has the keyword index (schema version 5): always, but for a reader of an
    /// older file.
    has_keywords: bool,
    /// This store among the stores sharing its file's [`MirrorCache`]: its mirrors are its
    /// own, keyed by this id and shared by its handles only.
    id: u64,
}

impl std::fmt::Debug for SqliteMemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteMemoryStore")
            .field("path", &self.path)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl SqliteMemoryStore {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(
        path: impl AsRef<Path>,
        options: SqliteMemoryOptions,
    ) -> Result<Arc<SqliteMemoryStore>, MemoryError> {
        SqliteMemoryStore::open_with_factory(path, options, default_factory())
    }

    /// As [`open`](Self::open), with the factory that fills in missing ids and timestamps.
    pub fn open_with_factory(
        path: impl AsRef<Path>,
        options: SqliteMemoryOptions,
        factory: MsgFactory,
    ) -> Result<Arc<SqliteMemoryStore>, MemoryError> {
        let path = path.as_ref().to_path_buf();
        let file = SharedFile::open(
            &path,
            &options.settings(),
            &SCHEMA,
            options.vector_cache_bytes,
        )
        .map_err(db_error)?;
        Ok(Arc::new(SqliteMemoryStore {
            id: next_store_id(),
            file,
            path,
            factory,
            namespace: options.namespace,
            before_namespaces: false,
            before_activity: false,
            default_ttl: options.default_ttl,
            clock: options.clock,
            indexes: StoredIndexes::new(options.recall_index.clone()),
            recall_index: options.recall_index,
            has_keywords: true,
        }))
    }

    /// Opens the database at `path` for reading only: no write lock is taken (readers keep
    /// working while another process writes), nothing is created, and a read-only directory
    /// or mount works. A missing file or one without memory tables reads as empty. Writes
    /// through the store fail.
    pub fn open_read_only(
        path: impl AsRef<Path>,
        options: SqliteMemoryOptions,
    ) -> Result<Arc<SqliteMemoryStore>, MemoryError> {
        let path = path.as_ref().to_path_buf();
        let settings = options.settings();
        // A file from an older version cannot be migrated without writing: it is read as it
        // is, with what its version has (before namespaces, all of it in the default
        // namespace).
        let (read, found) =
            sqlite::open_read_only_any_version(&path, &settings, &SCHEMA).map_err(db_error)?;
        let (before_namespaces, before_activity) = (found < 2, found < 3);
        // The message columns later versions added, read as NULL through a temporary view.
        let mut missing = Vec::new();
        for column in ["expires_at", "embedding_model"] {
            let absent = read
                .conn
                .query_row(
                    "SELECT COUNT(*) = 0 FROM pragma_table_info('memory_messages')
                     WHERE name = ?1",
                    [column],
                    |r| r.get::<_, bool>(0),
                )
                .unwrap_or(false);
            if absent {
                missing.push(format!("NULL AS {column}"));
            }
        }
        // A file without memory tables has no columns either; it reads as empty anyway.
        let has_tables = read
            .conn
            .query_row(
                "SELECT COUNT(*) > 0 FROM sqlite_master WHERE name = 'memory_messages'",
                [],
                |r| r.get::<_, bool>(0),
            )
            .unwrap_or(false);
        // An empty reader (no file, or no memory tables) has the current schema in memory.
        let has_keywords = read
            .conn
            .query_row(
                "SELECT COUNT(*) > 0 FROM sqlite_master WHERE name = 'memory_fts'",
                [],
                |r| r.get::<_, bool>(0),
            )
            .unwrap_or(false)
            || !has_tables;
        if has_tables && !missing.is_empty() {
            // `query_only` refuses even temporary objects; the file stays read-only.
            read.conn.execute_batch(&format!(
                "PRAGMA query_only = 0;
                 CREATE TEMP VIEW memory_messages AS
                   SELECT *, {} FROM main.memory_messages;
                 PRAGMA query_only = 1;",
                missing.join(", ")
            ))?;
        }
        Ok(Arc::new(SqliteMemoryStore {
            id: next_store_id(),
            file: SharedFile::read_only(read.conn, options.vector_cache_bytes),
            path,
            factory: default_factory(),
            namespace: options.namespace,
            before_namespaces,
            before_activity,
            default_ttl: options.default_ttl,
            clock: options.clock,
            indexes: StoredIndexes::new(options.recall_index.clone()),
            recall_index: options.recall_index,
            has_keywords,
        }))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The namespace (tenant) the store was opened for.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The write connection (on a store opened read-only, the one connection), for a
    /// transaction of the caller's own: any batch of writes open on it is committed first, and
    /// the connection is held during this store's turn to write among the process's writers to
    /// the file (`mnemon_db::sqlite::WriteQueue`).
    fn lock(&self) -> Result<WriterGuard<'_>, MemoryError> {
        self.file.writer.lock()
    }

    /// A connection for a call that only reads: one of the readers, which never wait for the
    /// writer's transaction (a store opened read-only has only its one connection). A caller
    /// that checks a mirror against the thread's `rev` holds the mirror's lock when its read
    /// transaction takes its snapshot (its first statement), as with the writer: every write
    /// through this store changes the mirror and commits under that lock, so the snapshot and
    /// the mirror cannot pass each other.
    fn reader(&self) -> Result<sqlite::ReadGuard<'_>, MemoryError> {
        self.file.reader().map_err(db_error)
    }

    /// The mirror of `scope`'s thread that every handle of this store shares.
    fn shared_mirror(&self, scope: &Scope) -> Arc<Mutex<Mirror>> {
        self.file
            .mirrors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(self.id, scope)
    }

    /// The memory of one thread, creating the thread if needed.
    pub fn memory(self: &Arc<Self>, scope: Scope) -> Result<SqliteMemory, MemoryError> {
        {
            let mut conn = self.lock()?;
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            thread_row(&tx, self, &scope, Some(&self.factory))?;
            tx.commit()?;
        }
        Ok(SqliteMemory {
            store: Arc::clone(self),
            mirror: self.shared_mirror(&scope),
            scope,
        })
    }

    /// The memory of one thread, without reading or creating it yet: the thread is created by
    /// the first write through the memory, inside that write's transaction. For writers that
    /// must leave nothing behind when they fail: a [`load`](crate::Memory::load) of a bad
    /// document into a new thread creates no empty thread (`mnemon memory import`).
    pub fn memory_created_on_write(
        self: &Arc<Self>,
        scope: Scope,
    ) -> Result<SqliteMemory, MemoryError> {
        // Checked now, so that a bad scope fails here as it does with `memory`.
        scope.columns()?;
        Ok(SqliteMemory {
            store: Arc::clone(self),
            mirror: self.shared_mirror(&scope),
            scope,
        })
    }

    /// The memory of one thread if the thread exists, without creating it: for readers that
    /// must not leave an empty thread behind (a mistyped session id should be an error, not a
    /// new session). A later write through the returned memory recreates the thread if it was
    /// dropped in the meantime, as [`memory`](Self::memory) would.
    pub fn existing_memory(
        self: &Arc<Self>,
        scope: Scope,
    ) -> Result<Option<SqliteMemory>, MemoryError> {
        let exists = {
            let mut conn = self.reader()?;
            let tx = conn.transaction()?;
            let found = thread_row(&tx, self, &scope, None)?.is_some();
            tx.commit()?;
            found
        };
        Ok(exists.then(|| SqliteMemory {
            store: Arc::clone(self),
            mirror: self.shared_mirror(&scope),
            scope,
        }))
    }

    /// As [`existing_memory`](Self::existing_memory), but the handle keeps a mirror of its own
    /// instead of the one the store's handles share: until its first full read it answers
    /// from the stored rows (bounded, streamed), as every fresh handle did before mirrors were
    /// shared. For one-off readers that should neither use nor fill the shared mirrors, and
    /// for tests of the streamed paths.
    pub fn existing_memory_unshared(
        self: &Arc<Self>,
        scope: Scope,
    ) -> Result<Option<SqliteMemory>, MemoryError> {
        Ok(self.existing_memory(scope)?.map(|mut memory| {
            memory.mirror = Arc::default();
            memory
        }))
    }

    /// Every thread's scope in the store's namespace, oldest first.
    pub fn threads(&self) -> Result<Vec<Scope>, MemoryError> {
        let conn = self.reader()?;
        let mut stmt = conn.prepare(if self.before_namespaces {
            "SELECT user_id, agent_id, session_id FROM memory_threads WHERE ?1 = 'default'
             ORDER BY thread_id"
        } else {
            "SELECT user_id, agent_id, session_id FROM memory_threads WHERE namespace = ?1
             ORDER BY thread_id"
        })?;
        let rows = stmt.query_map([self.namespace.as_str()], |r| {
            Ok(Scope::from_columns(r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// One page of the namespace's threads with their message counts and last activity,
    /// the most recently written first (ties: the newest-created first); at most `limit`,
    /// after the thread that `after` (a previous page's [`ThreadPage::next`]) points at, or
    /// from the start for `None`. Both numbers are kept in the thread's row by every write
    /// (schema version 3), so a page is one index range read, never a count or a scan of the
    /// messages, whatever the size of the namespace. A thread written while pages are being
    /// read moves to the front, so the pages that follow do not list it again (or at all, if
    /// it had not been listed yet). See docs/reference/memory.md#thread-summaries.
    ///
    /// A file opened read-only at schema version 1 or 2 (written before summaries, and not
    /// migrated since) fails with [`MemoryError::Storage`] saying so: open it writable once.
    /// A malformed `after` is [`MemoryError::InvalidCursor`].
    pub fn thread_summaries(
        &self,
        limit: usize,
        after: Option<&str>,
    ) -> Result<ThreadPage, MemoryError> {
        let after = after.map(Cursor::decode).transpose()?;
        self.require_summaries()?;
        let conn = self.reader()?;
        let mut stmt = conn.prepare_cached(if after.is_some() {
            PAGE_AFTER_SQL
        } else {
            FIRST_PAGE_SQL
        })?;
        let rows = stmt.query_map(
            params![
                self.namespace.as_str(),
                after.map(|c| c.last_active_ms),
                after.map(|c| c.thread_id),
                fetch_count(limit),
                self.now()
            ],
            summary_row,
        )?;
        Ok(page(rows.collect::<Result<Vec<_>, _>>()?, limit))
    }

    /// One page of the namespace's threads in creation order (oldest first, as
    /// [`threads`](Self::threads) lists them), each with its summary as
    /// [`thread_summaries`](Self::thread_summaries) gives it; at most `limit`, after the
    /// thread `after` (a previous page's [`ThreadPage::next`]) names, or from the start for
    /// `None`. One index range read per page (schema version 7), whatever the number of
    /// threads. A thread created while pages are read comes last.
    ///
    /// A file opened read-only before thread summaries (schema version 1 or 2) fails with
    /// [`MemoryError::Storage`] ([`keeps_thread_summaries`](Self::keeps_thread_summaries) says
    /// so beforehand); a malformed `after` is [`MemoryError::InvalidCursor`].
    pub fn threads_page(
        &self,
        limit: usize,
        after: Option<&str>,
    ) -> Result<ThreadPage, MemoryError> {
        let after = after.map(decode_created).transpose()?.unwrap_or(0);
        self.require_summaries()?;
        let conn = self.reader()?;
        let mut stmt = conn.prepare_cached(CREATED_PAGE_SQL)?;
        let rows = stmt.query_map(
            params![
                self.namespace.as_str(),
                after,
                fetch_count(limit),
                self.now()
            ],
            summary_row,
        )?;
        Ok(created_page(rows.collect::<Result<Vec<_>, _>>()?, limit))
    }

    /// [`MemoryError::Storage`] for a file opened read-only from before thread summaries.
    fn require_summaries(&self) -> Result<(), MemoryError> {
        if self.before_activity {
            return Err(MemoryError::Storage {
                detail: format!(
                    "{} predates thread summaries (memory schema version 3) and is open \
                     read-only: open it once with write access to migrate it",
                    self.path.display()
                ),
            });
        }
        Ok(())
    }

    /// Whether this store keeps thread summaries ([`thread_summaries`](Self::thread_summaries),
    /// [`threads_page`](Self::threads_page)): every file but one opened read-only from before
    /// them (memory schema version 3).
    pub fn keeps_thread_summaries(&self) -> bool {
        !self.before_activity
    }

    /// Search across sessions (docs/reference/memory.md#search-across-sessions): the `top_k`
    /// messages closest by cosine to `query` among every thread of the store's namespace that
    /// `within` selects, best first, each with its thread's scope and its index in the thread.
    ///
    /// Scores are the per-thread recall's exactly (`f64` cosine over the stored `f32`s); ties
    /// keep the lower index first within a thread, and otherwise follow the threads' scopes
    /// (user, agent, session ids, in byte order, an absent id first). Messages without an
    /// embedding are skipped (nothing is embedded or stored: `embedder` only embeds a text or
    /// message query); a stored embedding whose length differs from the query's is
    /// [`MemoryError::DimensionMismatch`], as in the per-thread recall. The scan reads each
    /// message's stored vector only, keeps `top_k` candidates in memory, and decodes the
    /// winners' bodies alone; it runs in one read transaction, a snapshot of every thread.
    pub fn search(
        &self,
        within: &ScopeFilter,
        query: RetrievalQuery,
        top_k: usize,
        embedder: Option<&dyn Embedder>,
    ) -> Result<Vec<SearchHit>, MemoryError> {
        self.search_with(&SearchRequest::new(within.clone(), query, top_k), embedder)
            .map(|results| results.hits)
    }

    /// [`search`](Self::search) with the whole request: a metadata filter
    /// ([`SearchRequest::filter`], docs/reference/memory.md#filters) is translated to SQL
    /// (JSON1 over the message's body, its id column and its marks) and evaluated on every
    /// candidate row before the top-k cut, so a filtered top `k` has `k` hits whenever `k`
    /// messages match, however many closer ones do not. A filter naming a field messages do
    /// not have is [`MemoryError::InvalidFilter`].
    ///
    /// [`SearchRequest::mode`] picks the ranking (docs/reference/memory.md#keyword-and-hybrid-search):
    /// by vector (above), by keyword (FTS5's BM25 over the messages' text, the words of the
    /// mode's text any of which may match; the score is BM25's relevance, higher better) or
    /// hybrid (reciprocal rank fusion of the two rankings). Scope, expiry and filter apply
    /// alike. A file opened read-only before keyword search (schema version 5) refuses the
    /// keyword and hybrid modes with [`MemoryError::Storage`] saying to open it writable once.
    pub fn search_with(
        &self,
        request: &SearchRequest,
        embedder: Option<&dyn Embedder>,
    ) -> Result<SearchResults, MemoryError> {
        by_mode(
            request,
            |request| self.vector_search(request, embedder),
            |text, k| self.keyword_search(request, text, k),
        )
    }

    /// Re-embeds with `embedder` every live message of the threads `within` selects whose
    /// embedding was not made by `embedder`'s model (none, another model, or one of unknown
    /// origin), `batch` messages at a time, each batch embedded outside any lock and stored in
    /// one transaction that records the model (docs/reference/memory.md#embedding-models).
    /// `progress(done, total)` follows every stored batch; `total` is counted at the start.
    /// Returns how many messages were re-embedded. Resumable: a run cut short (a kill, an
    /// embedder error, which is returned) keeps its stored batches, and the next run picks only
    /// the messages still without the model.
    pub fn reembed(
        self: &Arc<Self>,
        within: &ScopeFilter,
        embedder: &dyn Embedder,
        batch: usize,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<u64, MemoryError> {
        let model = embedder.model();
        let (scopes, total) = {
            let mut conn = self.reader()?;
            let tx = conn.transaction()?;
            let threads = self.selected_threads(&tx, within)?;
            let mut count = tx.prepare_cached(concat!(
                "SELECT COUNT(*) FROM memory_messages m WHERE m.thread_id = ?1
                   AND (m.embedding_model IS NULL OR m.embedding_model <> ?2) AND ",
                live_sql!("m", "?3")
            ))?;
            let mut total = 0u64;
            for (thread_id, _) in &threads {
                let n: i64 =
                    count.query_row(params![thread_id, model, self.now()], |r| r.get(0))?;
                total += u64::try_from(n).unwrap_or(0);
            }
            drop(count);
            tx.commit()?;
            let scopes: Vec<Scope> = threads
                .into_iter()
                .map(|(_, [user, agent, session])| Scope::from_columns(user, agent, session))
                .collect();
            (scopes, total)
        };
        let mut done = 0u64;
        for scope in scopes {
            let Some(memory) = self.existing_memory(scope)? else {
                continue;
            };
            reembed_thread(&memory, embedder, batch, &mut |n| {
                done += n;
                progress(done, total);
            })?;
        }
        Ok(done)
    }

    /// The threads of the namespace `within` selects, in the tie order of a search: by their
    /// scopes' columns (`''` for an absent id).
    fn selected_threads(
        &self,
        tx: &Connection,
        within: &ScopeFilter,
    ) -> Result<Vec<(i64, [String; 3])>, MemoryError> {
        let [user, agent, session] = within.columns()?;
        let mut stmt = tx.prepare_cached(if self.before_namespaces {
            "SELECT thread_id, user_id, agent_id, session_id FROM memory_threads
             WHERE ?1 = 'default' AND (?2 IS NULL OR user_id = ?2)
               AND (?3 IS NULL OR agent_id = ?3) AND (?4 IS NULL OR session_id = ?4)"
        } else {
            "SELECT thread_id, user_id, agent_id, session_id FROM memory_threads
             WHERE namespace = ?1 AND (?2 IS NULL OR user_id = ?2)
               AND (?3 IS NULL OR agent_id = ?3) AND (?4 IS NULL OR session_id = ?4)"
        })?;
        let rows = stmt.query_map(
            params![self.namespace.as_str(), user, agent, session],
            |r| Ok((r.get(0)?, [r.get(1)?, r.get(2)?, r.get(3)?])),
        )?;
        let mut threads: Vec<(i64, [String; 3])> = rows.collect::<Result<_, _>>()?;
        threads.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(threads)
    }

    /// The keyword ranking of [`search_with`](Self::search_with): the newest
    /// [`MAX_KEYWORD_MATCHES`] live messages of the selected threads whose text has one of the
    /// words (by FTS5 rowid, descending: the latest thread first, each its latest message
    /// first), of which those passing the filter are scored by FTS5's BM25 (negated: higher is
    /// better), the best `top_k`; ties follow the threads' order, then the index.
    fn keyword_search(
        &self,
        request: &SearchRequest,
        text: &str,
        top_k: usize,
    ) -> Result<KeywordRanking, MemoryError> {
        request.within.columns()?;
        let terms = keyword_terms(text)?;
        let now = self.now();
        // `?1` the FTS5 query, `?2` the clock's now, `?3` the selected threads (a JSON array),
        // `?4` how many matches to read; the filter's values follow.
        let mut filter_params = vec![
            SqlParam::Text(fts5_query(&terms)),
            SqlParam::Integer(now),
            SqlParam::Integer(0),
            SqlParam::Integer(0),
        ];
        let matches = match &request.filter {
            Some(filter) => filter_sql(filter, Dialect::Sqlite, &mut filter_params)?,
            None => "1".to_owned(),
        };
        if top_k == 0 {
            return Ok(KeywordRanking {
                hits: Vec::new(),
                complete: true,
            });
        }
        if !self.has_keywords {
            return Err(MemoryError::Storage {
                detail: format!(
                    "{} predates keyword search (memory schema version 5) and is open \
                     read-only: open it once with write access to migrate it",
                    self.path.display()
                ),
            });
        }
        let mut conn = self.reader()?;
        let tx = conn.transaction()?;
        let threads = self.selected_threads(&tx, &request.within)?;
        let ordinal: HashMap<i64, usize> = threads
            .iter()
            .enumerate()
            .map(|(i, (id, _))| (*id, i))
            .collect();
        let selected =
            serde_json::to_string(&threads.iter().map(|(id, _)| *id).collect::<Vec<_>>())
                .map_err(|e| corrupt(format!("thread ids as JSON: {e}")))?;
        if let Some(param) = filter_params.get_mut(2) {
            *param = SqlParam::Text(selected);
        }
        // One more than the bound: whether it is reached is whether more matched.
        let read_at_most = MAX_KEYWORD_MATCHES.saturating_add(1);
        if let Some(param) = filter_params.get_mut(3) {
            *param = SqlParam::Integer(i64::try_from(read_at_most).unwrap_or(i64::MAX));
        }
        let mut top = TopK::new(top_k);
        let mut read_rows = 0usize;
        {
            // FTS5 walks its doclists backwards for `ORDER BY rowid DESC` and stops at the
            // limit, so BM25 and the filter are computed for the rows read only; the filter is
            // a column, not a condition, so that rows it refuses count towards the bound too.
            let mut stmt = tx.prepare_cached(&format!(
                "SELECT m.thread_id, m.seq, -bm25(memory_fts), {matches}
                 FROM memory_fts JOIN memory_messages m
                   ON m.thread_id = memory_fts.rowid / 4294967296
                  AND m.seq = memory_fts.rowid % 4294967296
                 WHERE memory_fts MATCH ?1 AND {live}
                   AND m.thread_id IN (SELECT value FROM json_each(?3))
                 ORDER BY memory_fts.rowid DESC
                 LIMIT ?4",
                live = live_sql!("m", "?2")
            ))?;
            let values: Vec<rusqlite::types::Value> =
                filter_params.into_iter().map(sql_value).collect();
            let mut rows = stmt.query(rusqlite::params_from_iter(values.iter()))?;
            while let Some(row) = rows.next()? {
                read_rows += 1;
                if read_rows > MAX_KEYWORD_MATCHES {
                    break;
                }
                let thread_id: i64 = row.get(0)?;
                let Some(&thread) = ordinal.get(&thread_id) else {
                    continue;
                };
                if !row.get::<_, bool>(3)? {
                    continue;
                }
                let seq: i64 = row.get(1)?;
                top.offer(Candidate {
                    score: row.get(2)?,
                    thread,
                    // A thread's seqs are in its index order: the tie order until the
                    // winners' indices are counted.
                    index: usize::try_from(seq).unwrap_or(usize::MAX),
                    seq,
                });
            }
        }
        let mut read = tx.prepare_cached(
            "SELECT msg_id, kind, body FROM memory_messages WHERE thread_id = ?1 AND seq = ?2",
        )?;
        let mut position = tx.prepare_cached(concat!(
            "SELECT COUNT(*) FROM memory_messages m WHERE m.thread_id = ?1 AND m.seq < ?2 AND ",
            live_sql!("m", "?3")
        ))?;
        let mut hits = Vec::new();
        for winner in top.into_sorted() {
            let Some((thread_id, [user, agent, session])) = threads.get(winner.thread) else {
                return Err(corrupt(format!("no thread at {}", winner.thread)));
            };
            // The index from the thread's cached vectors when they are current (a hybrid
            // search's vector ranking has just read them), else counted: the count reads every
            // row before the winner, embeddings included.
            let cached = self
                .cached_thread_vectors(&tx, *thread_id)?
                .and_then(|v| v.index_of(winner.seq, now));
            let index = match cached {
                Some(index) => index,
                None => {
                    let index: i64 =
                        position.query_row(params![thread_id, winner.seq, now], |r| r.get(0))?;
                    usize::try_from(index).unwrap_or(0)
                }
            };
            let message = read
                .query_row(params![thread_id, winner.seq], |row| {
                    let id: String = row.get(0)?;
                    Ok(row_message(&self.factory, &id, row, index))
                })
                .optional()?
                .ok_or_else(|| corrupt(format!("no message at seq {}", winner.seq)))??;
            hits.push(SearchHit {
                scope: Scope::from_columns(user.clone(), agent.clone(), session.clone()),
                index,
                score: winner.score,
                message,
            });
        }
        drop((read, position));
        tx.commit()?;
        Ok(KeywordRanking {
            hits,
            complete: read_rows <= MAX_KEYWORD_MATCHES,
        })
    }

    /// The vector ranking of [`search_with`](Self::search_with).
    fn vector_search(
        &self,
        request: &SearchRequest,
        embedder: Option<&dyn Embedder>,
    ) -> Result<Vec<SearchHit>, MemoryError> {
        request.within.columns()?;
        let top_k = request.top_k;
        let now = self.now();
        // The filter's check of one row: `?1` its thread, `?2` its seq; the filter's values
        // follow.
        let mut filter_params = vec![SqlParam::Integer(0), SqlParam::Integer(0)];
        let matches = match &request.filter {
            Some(filter) => filter_sql(filter, Dialect::Sqlite, &mut filter_params)?,
            None => "1".to_owned(),
        };
        let query = query_vector(request.query.clone(), embedder)?;
        let query_norm = exact::norm(&query);
        if top_k == 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.reader()?;
        let tx = conn.transaction()?;
        let threads = self.selected_threads(&tx, &request.within)?;
        if let Some(embedder) = embedder {
            let mut probe = tx.prepare_cached(OTHER_MODEL_SQL)?;
            for (thread_id, _) in &threads {
                let other: Option<String> = probe
                    .query_row(params![thread_id, embedder.model(), now], |r| r.get(0))
                    .optional()?;
                model_mismatch(other, embedder.model())?;
            }
        }
        let mut top = TopK::new(top_k);
        {
            // Each thread's stored vectors come from the store's cache at the thread's rev
            // (`crate::vector_scan`), or are read into it; bodies are never read by the scan.
            // A filter is evaluated only for a row whose score would enter the top `k` as it
            // stands (one indexed lookup each; the bar only rises, so a row it keeps out would
            // never have been kept): the filter reads the body, and most rows never need it.
            // The result is the one of filtering every row before the cut.
            let mut check = match &request.filter {
                Some(_) => Some(tx.prepare_cached(&format!(
                    "SELECT {matches} FROM memory_messages m WHERE m.thread_id = ?1 AND m.seq = ?2"
                ))?),
                None => None,
            };
            let mut values: Vec<rusqlite::types::Value> =
                filter_params.into_iter().map(sql_value).collect();
            // Whether the filter selects row `seq` of `thread_id` (true without a filter).
            let mut selected = |thread_id: i64, seq: i64| {
                let Some(check) = check.as_mut() else {
                    return Ok::<bool, MemoryError>(true);
                };
                if let Some(first) = values.get_mut(0) {
                    *first = rusqlite::types::Value::Integer(thread_id);
                }
                if let Some(second) = values.get_mut(1) {
                    *second = rusqlite::types::Value::Integer(seq);
                }
                let matched: Option<bool> = check
                    .query_row(rusqlite::params_from_iter(values.iter()), |r| r.get(0))
                    .optional()?;
                Ok(matched.unwrap_or(false))
            };
            let scan_start = self.file.vectors.start();
            let score = vector_scan::cosine(&query, query_norm);
            // Without a filter, a large thread's recall index picks the rows to score
            // (`crate::recall_index`); a filter is checked on the rows entering the top `k`,
            // which only the whole scan can promise to fill.
            let indexed = request.filter.is_none() && !request.exact;
            for (ordinal, (thread_id, _)) in threads.iter().enumerate() {
                let thread_id = *thread_id;
                let vectors = self.thread_vectors(&tx, thread_id, scan_start)?;
                let rows = indexed
                    .then(|| {
                        self.indexes
                            .candidates(thread_id, &vectors, now, &query, top_k)
                    })
                    .flatten();
                let visit = |position, seq, found| {
                    match found {
                        Scored::Missing => {}
                        // A row the filter leaves out is no candidate, whatever its length.
                        Scored::Other(found) => {
                            if selected(thread_id, seq)? {
                                let id = message_id(&tx, thread_id, seq)?;
                                return Err(dimension_mismatch(id, query.len(), found));
                            }
                        }
                        Scored::Damaged(bytes) => {
                            if selected(thread_id, seq)? {
                                let id = message_id(&tx, thread_id, seq)?;
                                return Err(corrupt(format!(
                                    "message {id}: embedding of {bytes} bytes"
                                )));
                            }
                        }
                        Scored::Score(score) => {
                            let candidate = Candidate {
                                score,
                                thread: ordinal,
                                index: position,
                                seq,
                            };
                            if top.admits(&candidate) && selected(thread_id, seq)? {
                                top.offer(candidate);
                            }
                        }
                    }
                    Ok(())
                };
                match rows {
                    Some(rows) => vectors.scan_rows(now, query.len(), &rows, &score, visit)?,
                    None => vectors.scan(now, query.len(), &score, visit)?,
                }
            }
        }
        let mut read = tx.prepare_cached(
            "SELECT msg_id, kind, body FROM memory_messages WHERE thread_id = ?1 AND seq = ?2",
        )?;
        let mut hits = Vec::with_capacity(top_k.min(4096));
        for winner in top.into_sorted() {
            let Some((thread_id, [user, agent, session])) = threads.get(winner.thread) else {
                return Err(corrupt(format!("no thread at {}", winner.thread)));
            };
            let message = read
                .query_row(params![thread_id, winner.seq], |row| {
                    let id: String = row.get(0)?;
                    Ok(row_message(&self.factory, &id, row, winner.index))
                })
                .optional()?
                .ok_or_else(|| corrupt(format!("no message at seq {}", winner.seq)))??;
            hits.push(SearchHit {
                scope: Scope::from_columns(user.clone(), agent.clone(), session.clone()),
                index: winner.index,
                score: winner.score,
                message,
            });
        }
        drop(read);
        tx.commit()?;
        Ok(hits)
    }

    /// Deletes a thread of the store's namespace with its messages and marks; returns whether
    /// it existed.
    pub fn drop_thread(&self, scope: &Scope) -> Result<bool, MemoryError> {
        let [user, agent, session] = scope.columns()?;
        let conn = self.lock()?;
        if self.before_namespaces {
            // Read-only: the write fails as every write through a reader does.
            conn.execute("DELETE FROM memory_threads WHERE 0", [])?;
            return Ok(false);
        }
        let n = conn.execute(
            "DELETE FROM memory_threads
             WHERE namespace = ?1 AND user_id = ?2 AND agent_id = ?3 AND session_id = ?4",
            params![self.namespace.as_str(), user, agent, session],
        )?;
        Ok(n > 0)
    }

    /// The store clock's time: what decides which messages have expired.
    fn now(&self) -> i64 {
        self.clock.now_millis()
    }

    /// Removes every expired message of the store's namespace (docs/reference/memory.md#expiry)
    /// and returns how many. They were already invisible to every read; this reclaims their
    /// rows (marks included). One transaction; only the threads whose `next_expiry` has passed
    /// are visited (an index range), each with one delete over its expired rows.
    pub fn gc(&self) -> Result<u64, MemoryError> {
        let now = self.now();
        let mut conn = self.lock()?;
        if self.before_namespaces {
            conn.execute("DELETE FROM memory_threads WHERE 0", [])?;
            return Ok(0);
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let threads: Vec<i64> = {
            let mut stmt = tx.prepare_cached(
                "SELECT thread_id FROM memory_threads
                 WHERE namespace = ?1 AND next_expiry <= ?2",
            )?;
            let rows = stmt.query_map(params![self.namespace.as_str(), now], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        let mut removed = 0u64;
        for thread_id in threads {
            removed += purge_expired(&tx, thread_id, now)?;
        }
        tx.commit()?;
        Ok(removed)
    }

    /// Forgets a subject (docs/reference/memory.md#forget): deletes every thread of the store's
    /// namespace that `within` selects ([`ScopeFilter::all`]: the whole namespace, never
    /// another), with all their messages and marks, in one transaction; returns the counts.
    /// The deletes are set-based (one statement per table, reaching rows through the threads'
    /// keys), so 100,000 messages go in seconds. Nothing of it is readable afterwards: a handle
    /// already open on a forgotten thread finds the thread gone at its next call and reads an
    /// empty memory (a later write through it starts a new thread, with a new id).
    pub fn forget(&self, within: &ScopeFilter) -> Result<Forgotten, MemoryError> {
        let [user, agent, session] = within.columns()?;
        let mut conn = self.lock()?;
        if self.before_namespaces {
            // Read-only: the write fails as every write through a reader does.
            conn.execute("DELETE FROM memory_threads WHERE 0", [])?;
            return Ok(Forgotten::default());
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // The selected threads, kept for the transaction in a temporary table so that every
        // delete below is one join on a key.
        tx.execute_batch(
            "CREATE TEMP TABLE IF NOT EXISTS memory_forget (thread_id INTEGER PRIMARY KEY);
             DELETE FROM temp.memory_forget;",
        )?;
        let threads = tx
            .prepare_cached(
                "INSERT INTO temp.memory_forget (thread_id)
                 SELECT thread_id FROM memory_threads
                 WHERE namespace = ?1 AND (?2 IS NULL OR user_id = ?2)
                   AND (?3 IS NULL OR agent_id = ?3) AND (?4 IS NULL OR session_id = ?4)",
            )?
            .execute(params![self.namespace.as_str(), user, agent, session])?;
        let messages: i64 = tx
            .prepare_cached(
                "SELECT COUNT(*) FROM memory_messages
                 WHERE thread_id IN (SELECT thread_id FROM temp.memory_forget)",
            )?
            .query_row([], |r| r.get(0))?;
        for sql in FORGET_SQL {
            tx.prepare_cached(sql)?.execute([])?;
        }
        tx.execute("DELETE FROM temp.memory_forget", [])?;
        tx.commit()?;
        Ok(Forgotten {
            threads: u64::try_from(threads).unwrap_or(u64::MAX),
            messages: u64::try_from(messages).unwrap_or(0),
        })
    }
}

/// [`MemoryError::EmbeddingModelMismatch`] when another model than `requested` was found.
fn model_mismatch(other: Option<String>, requested: &str) -> Result<(), MemoryError> {
    match other {
        Some(stored) => Err(MemoryError::EmbeddingModelMismatch {
            stored,
            requested: requested.to_owned(),
        }),
        None => Ok(()),
    }
}

/// A filter's bound value as SQLite's.
fn sql_value(param: SqlParam) -> rusqlite::types::Value {
    match param {
        SqlParam::Text(text) => rusqlite::types::Value::Text(text),
        SqlParam::Integer(n) => rusqlite::types::Value::Integer(n),
        SqlParam::Real(x) => rusqlite::types::Value::Real(x),
    }
}

impl SqliteMemoryStore {
    /// The cached vectors of thread `thread_id` if they are its current ones, without reading
    /// the thread otherwise.
    fn cached_thread_vectors(
        &self,
        tx: &Connection,
        thread_id: i64,
    ) -> Result<Option<Arc<ThreadVectors>>, MemoryError> {
        let rev: i64 = tx
            .prepare_cached("SELECT rev FROM memory_threads WHERE thread_id = ?1")?
            .query_row([thread_id], |r| r.get(0))?;
        Ok(self.file.vectors.get(thread_id, rev))
    }

    /// The stored vectors of thread `thread_id` as `tx` sees them: from the cache when it holds
    /// the thread at its current rev, else read (every row, expired ones included: a scan
    /// judges expiry itself) and cached when it fits (`crate::vector_scan`).
    fn thread_vectors(
        &self,
        tx: &Connection,
        thread_id: i64,
        scan_start: u64,
    ) -> Result<Arc<ThreadVectors>, MemoryError> {
        let rev: i64 = tx
            .prepare_cached("SELECT rev FROM memory_threads WHERE thread_id = ?1")?
            .query_row([thread_id], |r| r.get(0))?;
        if let Some(vectors) = self.file.vectors.get(thread_id, rev) {
            return Ok(vectors);
        }
        let mut vectors = ThreadVectors::new(rev);
        let mut stmt = tx.prepare_cached(
            "SELECT seq, expires_at, embedding FROM memory_messages WHERE thread_id = ?1
             ORDER BY seq",
        )?;
        let mut rows = stmt.query([thread_id])?;
        while let Some(row) = rows.next()? {
            let seq: i64 = row.get(0)?;
            let blob = row
                .get_ref(2)?
                .as_blob_or_null()
                .map_err(|e| corrupt(format!("the embedding of the message at seq {seq}: {e}")))?;
            vectors.push_le_bytes(seq, row.get(1)?, blob);
        }
        Ok(self.file.vectors.insert(thread_id, vectors, scan_start))
    }
}

/// The id of the message at `seq` of thread `thread_id`, for an error naming it.
fn message_id(tx: &Connection, thread_id: i64, seq: i64) -> Result<String, MemoryError> {
    tx.prepare_cached("SELECT msg_id FROM memory_messages WHERE thread_id = ?1 AND seq = ?2")?
        .query_row([thread_id, seq], |r| r.get(0))
        .optional()?
        .ok_or_else(|| corrupt(format!("no message at seq {seq}")))
}

/// The deletes of [`SqliteMemoryStore::forget`], children first, each over the threads in
/// `temp.memory_forget`: the marks, the messages, the threads.
const FORGET_SQL: &[&str] = &[
    "DELETE FROM memory_marks WHERE thread_id IN (SELECT thread_id FROM temp.memory_forget)",
    "DELETE FROM memory_messages WHERE thread_id IN (SELECT thread_id FROM temp.memory_forget)",
    "DELETE FROM memory_threads WHERE thread_id IN (SELECT thread_id FROM temp.memory_forget)",
];

/// A new store's id in its file's [`MirrorCache`]: unique in the process.
fn next_store_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Drop for SqliteMemoryStore {
    /// The store's mirrors leave its file's cache: no handle of it is left to use them.
    fn drop(&mut self) {
        self.file
            .mirrors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .forget_store(self.id);
    }
}

/// The memory error for a setup failure: a newer schema keeps its own variant.
fn db_error(error: DbError) -> MemoryError {
    match error {
        DbError::SchemaTooNew {
            found, supported, ..
        } => MemoryError::SchemaVersion { found, supported },
        DbError::Open { path, detail } => MemoryError::Storage {
            detail: format!("cannot open {}: {detail}", path.display()),
        },
        DbError::Setup { detail, .. } | DbError::Migration { detail, .. } => {
            MemoryError::Storage { detail }
        }
        other => MemoryError::Storage {
            detail: other.to_string(),
        },
    }
}

/// The thread's `(thread_id, rev)` in `namespace`; created (with `factory`'s clock) when
/// missing and a factory is given. Every other statement reaches rows through the `thread_id`
/// found here, which is how a handle never sees another namespace's rows.
fn thread_row(
    tx: &Connection,
    store: &SqliteMemoryStore,
    scope: &Scope,
    create_with: Option<&MsgFactory>,
) -> Result<Option<(i64, i64)>, MemoryError> {
    let [user, agent, session] = scope.columns()?;
    let namespace = &store.namespace;
    let found = tx
        .prepare_cached(if store.before_namespaces {
            "SELECT thread_id, rev FROM memory_threads
             WHERE ?1 = 'default' AND user_id = ?2 AND agent_id = ?3 AND session_id = ?4"
        } else {
            "SELECT thread_id, rev FROM memory_threads
             WHERE namespace = ?1 AND user_id = ?2 AND agent_id = ?3 AND session_id = ?4"
        })?
        .query_row(params![namespace.as_str(), user, agent, session], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    match (found, create_with) {
        (Some(row), _) => Ok(Some(row)),
        (None, None) => Ok(None),
        (None, Some(factory)) => {
            if store.before_namespaces {
                // Only a reader has these tables, and its write fails as every write through a
                // reader does (rather than on the missing column).
                tx.execute(
                    "INSERT INTO memory_threads (user_id, agent_id, session_id, created_at)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![user, agent, session, factory.now()],
                )?;
            } else if store.before_activity {
                tx.execute(
                    "INSERT INTO memory_threads
                       (namespace, user_id, agent_id, session_id, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![namespace.as_str(), user, agent, session, factory.now()],
                )?;
            } else {
                // A new thread's creation is its first activity.
                tx.execute(
                    "INSERT INTO memory_threads
                       (namespace, user_id, agent_id, session_id, created_at, last_active_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        namespace.as_str(),
                        user,
                        agent,
                        session,
                        factory.now(),
                        now_ms()
                    ],
                )?;
            }
            Ok(Some((tx.last_insert_rowid(), 0)))
        }
    }
}

/// How many messages the mirrors no handle holds may keep in memory, together, for all the
/// stores on one file, before the least recently used are dropped ([`MirrorCache`]). At 256
/// dimensions a mirrored message takes about 3 KB, so about 150 MB; the mirrors that handles
/// hold are never dropped.
const CACHED_MESSAGES: usize = 50_000;

/// How many threads' mirrors are kept, at most, besides those that handles hold.
const CACHED_THREADS: usize = 1_024;

/// The thread mirrors of a store, shared by its handles, so that a handle opened per operation
/// (as the service opens one per request) starts from the thread as the last handle left it
/// instead of reading and decoding every message of the thread again: measured with
/// `examples/fresh_handles.rs` (8 workers, sessions of 50–500 messages). Sharing is correct
/// because a mirror is only read or changed under its own lock after its `(thread_id, rev)` is
/// checked against the committed thread in the same transaction, as a handle's own mirror
/// was; other processes' writes move `rev` and make it reload. Lock order: the mirror, then the
/// connection (the writer or a reader), everywhere, so that a long read of one thread's mirror
/// never holds up another thread's requests behind a connection. With readers, the check stays
/// sound because a read takes its snapshot (its first statement) with the mirror held, and a
/// write through this store holds the mirror from before its `BEGIN IMMEDIATE` until the
/// mirror has its change: a reader's snapshot is either before that write's commit (and the
/// mirror still without the change) or after it (and the mirror with it, or reloaded). Writes
/// that do not take the mirror (a load, `gc`, `forget`, `drop_thread`, other processes) move
/// the thread's `rev` or remove it, so a mirror they make stale is never taken as current.
///
/// One cache serves every store on a file (`sqlite/shared_file.rs`), so that its bounds hold
/// for a server's tenants together, but a store's mirrors are its own: each entry is keyed by
/// its store's id, and a store's entries leave the cache when the store closes.
#[derive(Debug, Default)]
struct MirrorCache {
    entries: HashMap<(u64, Scope), CachedMirror>,
    /// Counts [`MirrorCache::get`] calls: the recency of each entry.
    tick: u64,
}

#[derive(Debug)]
struct CachedMirror {
    mirror: Arc<Mutex<Mirror>>,
    used: u64,
}

impl MirrorCache {
    /// The mirror of `scope`, created empty when there is none; every 64th call (and when
    /// there are too many threads) drops least recently used mirrors that no handle holds
    /// until the rest are within [`CACHED_MESSAGES`] and [`CACHED_THREADS`].
    fn get(&mut self, store: u64, scope: &Scope) -> Arc<Mutex<Mirror>> {
        self.tick += 1;
        let tick = self.tick;
        let key = (store, scope.clone());
        let mirror = match self.entries.get_mut(&key) {
            Some(cached) => {
                cached.used = tick;
                Arc::clone(&cached.mirror)
            }
            None => {
                let mirror = Arc::new(Mutex::new(Mirror::default()));
                self.entries.insert(
                    key,
                    CachedMirror {
                        mirror: Arc::clone(&mirror),
                        used: tick,
                    },
                );
                mirror
            }
        };
        if tick.is_multiple_of(64) || self.entries.len() > CACHED_THREADS {
            self.evict();
        }
        mirror
    }

    /// Drops the mirrors of a store that closed.
    fn forget_store(&mut self, store: u64) {
        self.entries.retain(|(id, _), _| *id != store);
    }

    fn evict(&mut self) {
        let mut total = 0;
        let mut idle = Vec::new();
        for (key, cached) in &self.entries {
            // A locked mirror is in use: it is neither counted nor dropped.
            let Ok(mirror) = cached.mirror.try_lock() else {
                continue;
            };
            let len = mirror.state.len();
            total += len;
            if Arc::strong_count(&cached.mirror) == 1 {
                idle.push((cached.used, key.clone(), len));
            }
        }
        idle.sort_by_key(|(used, ..)| *used);
        let mut threads = self.entries.len();
        for (_, key, len) in idle {
            if total <= CACHED_MESSAGES && threads <= CACHED_THREADS {
                break;
            }
            self.entries.remove(&key);
            total -= len;
            threads -= 1;
        }
    }
}

/// The in-memory copy of a thread's live messages, valid for `(thread_id, rev)` until the
/// earliest expiry among them.
#[derive(Debug, Default)]
struct Mirror {
    thread_id: Option<i64>,
    rev: i64,
    state: ThreadState,
    /// The earliest `expires_at` of the mirrored messages: from then on the mirror holds an
    /// expired message and must be reloaded (no write moves `rev` when time passes).
    earliest: Option<i64>,
}

impl Mirror {
    /// Whether the mirror holds the committed thread `(thread_id, rev)` as it reads at `now`.
    fn current(&self, thread_id: i64, rev: i64, now: i64) -> bool {
        self.thread_id == Some(thread_id)
            && self.rev == rev
            && mnemon_db::expiry::is_live(self.earliest, now)
    }

    /// Brings the mirror up to date with the committed thread at `now`.
    fn sync(
        &mut self,
        tx: &Connection,
        thread: Option<(i64, i64)>,
        factory: &MsgFactory,
        now: i64,
    ) -> Result<(), MemoryError> {
        match thread {
            None => {
                if self.thread_id.is_some() || self.state.len() > 0 {
                    *self = Mirror::default();
                }
            }
            Some((id, rev)) => {
                if !self.current(id, rev, now) {
                    self.state = load_thread(tx, id, factory, now)?;
                    self.earliest = earliest_of(self.state.entries());
                    self.thread_id = Some(id);
                    self.rev = rev;
                }
            }
        }
        Ok(())
    }
}

fn corrupt(detail: String) -> MemoryError {
    MemoryError::Storage {
        detail: format!("corrupt memory row: {detail}"),
    }
}

/// The thread's messages live at `now`, with their marks and expiries.
fn load_thread(
    tx: &Connection,
    thread_id: i64,
    factory: &MsgFactory,
    now: i64,
) -> Result<ThreadState, MemoryError> {
    let mut marks: HashMap<String, Vec<String>> = HashMap::new();
    {
        let mut stmt = tx.prepare_cached(
            "SELECT msg_id, mark FROM memory_marks WHERE thread_id = ?1 ORDER BY msg_id, pos",
        )?;
        let mut rows = stmt.query([thread_id])?;
        while let Some(row) = rows.next()? {
            marks.entry(row.get(0)?).or_default().push(row.get(1)?);
        }
    }
    let mut stmt = tx.prepare_cached(concat!(
        "SELECT m.msg_id, m.kind, m.body, m.expires_at, m.embedding_model FROM memory_messages m
         WHERE m.thread_id = ?1 AND ",
        live_sql!("m", "?2"),
        " ORDER BY m.seq"
    ))?;
    let mut rows = stmt.query(params![thread_id, now])?;
    let mut entries = Vec::new();
    while let Some(row) = rows.next()? {
        let id: String = row.get(0)?;
        let msg = row_message(factory, &id, row, entries.len())?;
        let marks = marks.remove(&id).unwrap_or_default();
        entries.push(
            Entry::new(msg, marks)
                .expiring(row.get(3)?)
                .embedded_by(row.get(4)?),
        );
    }
    Ok(ThreadState::from_entries(entries))
}

/// The message of a `SELECT msg_id, kind, body …` row whose id is `id`; `p` is its position
/// in the result, for error messages.
fn row_message(
    factory: &MsgFactory,
    id: &str,
    row: &rusqlite::Row<'_>,
    p: usize,
) -> Result<Msg, MemoryError> {
    let kind: String = row.get(1)?;
    let body: String = row.get(2)?;
    let value: Value =
        serde_json::from_str(&body).map_err(|e| corrupt(format!("message {id}: {e}")))?;
    let object = value
        .as_object()
        .ok_or_else(|| corrupt(format!("message {id} is not an object")))?;
    factory
        .from_object(object, kind_from_str(&kind), p)
        .map_err(|e| corrupt(format!("message {id}: {e}")))
}

/// The marks of one message, in the order they were given.
fn message_marks(
    tx: &Connection,
    thread_id: i64,
    msg_id: &str,
) -> Result<Vec<String>, MemoryError> {
    let mut stmt = tx.prepare_cached(
        "SELECT mark FROM memory_marks WHERE thread_id = ?1 AND msg_id = ?2 ORDER BY pos",
    )?;
    let marks = stmt.query_map(params![thread_id, msg_id], |r| r.get(0))?;
    Ok(marks.collect::<Result<Vec<String>, _>>()?)
}

/// Calls `f` with every message of the thread, read from the rows in index order one at a
/// time (see `Backend::scan`); marks are read per message only when `with_marks`.
fn scan_rows(
    tx: &Connection,
    thread_id: i64,
    factory: &MsgFactory,
    with_marks: bool,
    now: i64,
    f: &mut dyn FnMut(&Entry) -> Result<(), MemoryError>,
) -> Result<usize, MemoryError> {
    let mut stmt = tx.prepare_cached(concat!(
        "SELECT m.msg_id, m.kind, m.body, m.expires_at, m.embedding_model FROM memory_messages m
         WHERE m.thread_id = ?1 AND ",
        live_sql!("m", "?2"),
        " ORDER BY m.seq"
    ))?;
    let mut rows = stmt.query(params![thread_id, now])?;
    let mut count = 0;
    while let Some(row) = rows.next()? {
        let id: String = row.get(0)?;
        let msg = row_message(factory, &id, row, count)?;
        let marks = if with_marks {
            message_marks(tx, thread_id, &id)?
        } else {
            Vec::new()
        };
        // The stored fields ride along, as the mirror's entries carry them, for the
        // `AgentScope00Stored` export.
        let entry = Entry::new(msg, marks)
            .expiring(row.get(3)?)
            .embedded_by(row.get(4)?);
        f(&entry)?;
        count += 1;
    }
    Ok(count)
}

/// The last `n` messages of the thread passing the mark filters, in index order, reading only
/// those rows (newest first, then reversed).
fn recent_rows(
    tx: &Connection,
    thread_id: i64,
    factory: &MsgFactory,
    mark: Option<&str>,
    exclude_mark: Option<&str>,
    n: usize,
    now: i64,
) -> Result<Vec<Msg>, MemoryError> {
    let mut stmt = tx.prepare_cached(concat!(
        "SELECT m.msg_id, m.kind, m.body FROM memory_messages m
         WHERE m.thread_id = ?1 AND ",
        live_sql!("m", "?5"),
        "
           AND (?2 IS NULL OR EXISTS (SELECT 1 FROM memory_marks k
                WHERE k.thread_id = m.thread_id AND k.msg_id = m.msg_id AND k.mark = ?2))
           AND (?3 IS NULL OR NOT EXISTS (SELECT 1 FROM memory_marks k
                WHERE k.thread_id = m.thread_id AND k.msg_id = m.msg_id AND k.mark = ?3))
         ORDER BY m.seq DESC LIMIT ?4"
    ))?;
    let limit = i64::try_from(n).unwrap_or(i64::MAX);
    let mut rows = stmt.query(params![thread_id, mark, exclude_mark, limit, now])?;
    let mut messages = Vec::new();
    while let Some(row) = rows.next()? {
        let id: String = row.get(0)?;
        messages.push(row_message(factory, &id, row, messages.len())?);
    }
    messages.reverse();
    Ok(messages)
}

fn embedding_blob(embedding: Option<Vec<f32>>) -> Option<Vec<u8>> {
    embedding.map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

/// The kind recorded for entries read back from storage.
fn kind_from_str(kind: &str) -> MsgKind {
    MsgKind::from_marker(kind).unwrap_or_default()
}

fn kind_str(kind: MsgKind) -> &'static str {
    kind.as_str()
}

fn insert_entries(tx: &Connection, thread_id: i64, entries: &[Entry]) -> Result<(), MemoryError> {
    let next: i64 = tx
        .prepare_cached(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM memory_messages WHERE thread_id = ?1",
        )?
        .query_row([thread_id], |r| r.get(0))?;
    insert_rows(tx, thread_id, next, entries)?;
    note_expiries(tx, thread_id, entries)
}

/// Inserts `entries` as the thread's rows from `seq` on, with their marks, in multi-row
/// statements ([`INSERT_CHUNK`]).
fn insert_rows(
    tx: &Connection,
    thread_id: i64,
    mut seq: i64,
    entries: &[Entry],
) -> Result<(), MemoryError> {
    let mut rest = entries;
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(insert_chunk_len(rest.len()));
        let mut insert = tx.prepare_cached(&insert_rows_sql(chunk.len()))?;
        let mut column = 0;
        let mut bind = |value: &dyn rusqlite::ToSql| -> rusqlite::Result<()> {
            column += 1;
            insert.raw_bind_parameter(column, value)
        };
        for entry in chunk {
            let body = serde_json::to_string(&*entry.full()).map_err(|e| corrupt(e.to_string()))?;
            bind(&thread_id)?;
            bind(&seq)?;
            bind(&entry.id())?;
            bind(&kind_str(entry.msg_without_embedding().kind()))?;
            bind(&body)?;
            bind(&embedding_blob(entry.embedding()))?;
            bind(&entry.expires_at)?;
            bind(&entry.embedding_model)?;
            seq += 1;
        }
        insert.raw_execute()?;
        rest = tail;
    }
    // After every row: a mark's foreign key names its message.
    for entry in entries {
        insert_marks(tx, thread_id, entry.id(), &entry.marks)?;
    }
    Ok(())
}

/// The most rows one insert statement of [`insert_rows`] takes. Each statement is one
/// savepoint, and FTS5 writes its pending keyword entries to disk at every savepoint (the
/// `memory_fts_insert` trigger of schema version 5 runs inside the statement): a statement per
/// row wrote a segment per message and then merged them, half of a batch add's time
/// (docs/reference/memory.md#keyword-and-hybrid-search). 64 rows of 8 columns stay far below
/// SQLite's limit on parameters.
const INSERT_CHUNK: usize = 64;

/// How many of `remaining` rows the next insert statement takes: [`INSERT_CHUNK`], or the
/// largest power of two that fits, so that every add uses at most seven prepared statements'
/// shapes (64, 32, …, 1), all kept in the connection's statement cache.
fn insert_chunk_len(remaining: usize) -> usize {
    if remaining >= INSERT_CHUNK {
        INSERT_CHUNK
    } else {
        // `remaining` is at least 1 here (the caller stops at 0).
        1 << remaining.max(1).ilog2()
    }
}

/// Messages of a document being loaded, gathered for one multi-row insert.
struct LoadChunk<'a> {
    tx: &'a Connection,
    thread_id: i64,
    /// The seq the next written message gets.
    seq: i64,
    entries: Vec<Entry>,
}

impl LoadChunk<'_> {
    /// Writes the gathered messages and empties the chunk. An id already stored, or earlier
    /// in the document (then stored by an earlier chunk, or earlier in this one), is skipped
    /// and reported, as `plan_add` does: the unique `(thread_id, msg_id)` index answers which
    /// are stored, instead of a set of every id read.
    fn write(
        &mut self,
        report: &mut AddReport,
        earliest: &mut Option<i64>,
    ) -> Result<(), MemoryError> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = self.entries.iter().map(Entry::id).collect();
        let ids = serde_json::to_string(&ids).map_err(|e| corrupt(e.to_string()))?;
        let mut stored: std::collections::HashSet<String> = self
            .tx
            .prepare_cached(
                "SELECT msg_id FROM memory_messages
                 WHERE thread_id = ?1 AND msg_id IN (SELECT value FROM json_each(?2))",
            )?
            .query_map(params![self.thread_id, ids], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut kept = Vec::with_capacity(self.entries.len());
        for entry in self.entries.drain(..) {
            // `insert` is false for an id seen before: stored, or earlier in this chunk.
            if stored.insert(entry.id().to_owned()) {
                kept.push(entry);
            } else {
                report.skipped_duplicates.push(entry.id().to_owned());
            }
        }
        insert_rows(self.tx, self.thread_id, self.seq, &kept)?;
        self.seq += count_i64(kept.len());
        report.added += kept.len();
        if let Some(first) = earliest_of(&kept) {
            *earliest = Some(earliest.map_or(first, |e| e.min(first)));
        }
        Ok(())
    }
}

/// `INSERT INTO memory_messages (…) VALUES (…), …` for `rows` rows of the eight columns
/// [`insert_rows`] binds, in that order.
fn insert_rows_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO memory_messages
           (thread_id, seq, msg_id, kind, body, embedding, expires_at, embedding_model)
         VALUES ",
    );
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str("(?, ?, ?, ?, ?, ?, ?, ?)");
    }
    sql
}

fn insert_marks(
    tx: &Connection,
    thread_id: i64,
    msg_id: &str,
    marks: &[String],
) -> Result<(), MemoryError> {
    if marks.is_empty() {
        return Ok(());
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO memory_marks (thread_id, msg_id, pos, mark) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (pos, mark) in marks.iter().enumerate() {
        insert.execute(params![thread_id, msg_id, pos as i64, mark])?;
    }
    Ok(())
}

/// Writes `change` (planned against `state`) into the open transaction.
fn persist(
    tx: &Connection,
    thread_id: i64,
    state: &ThreadState,
    change: &Change,
) -> Result<(), MemoryError> {
    let id_at = |i: usize| {
        state
            .entries()
            .get(i)
            .map(Entry::id)
            .ok_or_else(|| corrupt(format!("no message at index {i}")))
    };
    // The thread's count: set to `live_set` when given, else moved by `live_delta`.
    let mut live_delta: i64 = 0;
    let mut live_set: Option<i64> = None;
    match change {
        Change::Append(entries) => {
            insert_entries(tx, thread_id, entries)?;
            live_delta = count_i64(entries.len());
        }
        Change::Replace(entries) => {
            tx.execute(
                "DELETE FROM memory_messages WHERE thread_id = ?1",
                [thread_id],
            )?;
            insert_entries(tx, thread_id, entries)?;
            live_set = Some(count_i64(entries.len()));
        }
        Change::Remove(indices) => {
            let mut delete = tx.prepare_cached(
                "DELETE FROM memory_messages WHERE thread_id = ?1 AND msg_id = ?2",
            )?;
            for &i in indices {
                live_delta -= count_i64(delete.execute(params![thread_id, id_at(i)?])?);
            }
        }
        Change::SetMarks(updates) => {
            let mut clear =
                tx.prepare_cached("DELETE FROM memory_marks WHERE thread_id = ?1 AND msg_id = ?2")?;
            for (i, marks) in updates {
                let id = id_at(*i)?;
                clear.execute(params![thread_id, id])?;
                insert_marks(tx, thread_id, id, marks)?;
            }
        }
        Change::SetMessages(updates, model) => {
            let mut update = tx.prepare_cached(
                "UPDATE memory_messages SET body = ?3, embedding = ?4,
                   embedding_model = CASE WHEN ?4 IS NULL THEN NULL ELSE ?5 END
                 WHERE thread_id = ?1 AND msg_id = ?2",
            )?;
            for (i, msg) in updates {
                let body = serde_json::to_string(msg).map_err(|e| corrupt(e.to_string()))?;
                let blob = embedding_blob(msg.embedding());
                update.execute(params![thread_id, id_at(*i)?, body, blob, model])?;
            }
        }
    }
    bump(tx, thread_id, live_set, live_delta)
}

/// Removes the thread's expired messages (those with `expires_at <= now`) when its
/// `next_expiry` says some may have expired, with their marks; moves its count and `rev` (every
/// mirror of it reloads) and recomputes `next_expiry`. Returns how many went. Not activity:
/// `last_active_ms` stays. Every write of a thread starts here, so that an expired row never
/// holds an id a new message may take again.
fn purge_expired(tx: &Connection, thread_id: i64, now: i64) -> Result<u64, MemoryError> {
    let next: Option<i64> = tx
        .prepare_cached("SELECT next_expiry FROM memory_threads WHERE thread_id = ?1")?
        .query_row([thread_id], |r| r.get(0))
        .optional()?
        .flatten();
    if next.is_none_or(|t| t > now) {
        return Ok(0);
    }
    let removed = tx
        .prepare_cached("DELETE FROM memory_messages WHERE thread_id = ?1 AND expires_at <= ?2")?
        .execute(params![thread_id, now])?;
    tx.prepare_cached(
        "UPDATE memory_threads SET live = live - ?2, rev = rev + (?2 > 0),
           next_expiry = (SELECT MIN(expires_at) FROM memory_messages
                          WHERE thread_id = ?1 AND expires_at IS NOT NULL)
         WHERE thread_id = ?1",
    )?
    .execute(params![thread_id, count_i64(removed)])?;
    Ok(u64::try_from(removed).unwrap_or(u64::MAX))
}

/// Lowers the thread's `next_expiry` to the earliest of `entries`' expiries, if any.
fn note_expiries(tx: &Connection, thread_id: i64, entries: &[Entry]) -> Result<(), MemoryError> {
    if let Some(earliest) = entries.iter().filter_map(|e| e.expires_at).min() {
        tx.prepare_cached(
            "UPDATE memory_threads SET next_expiry = MIN(COALESCE(next_expiry, ?2), ?2)
             WHERE thread_id = ?1",
        )?
        .execute(params![thread_id, earliest])?;
    }
    Ok(())
}

/// The earliest expiry of `entries`, for a mirror holding them.
fn earliest_of<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Option<i64> {
    entries.into_iter().filter_map(|e| e.expires_at).min()
}

/// Ends a write of the thread (schema version 3): a new rev, the count set to `live_set` or
/// moved by `live_delta`, and the activity time, which a clock stepping back never lowers.
fn bump(
    tx: &Connection,
    thread_id: i64,
    live_set: Option<i64>,
    live_delta: i64,
) -> Result<(), MemoryError> {
    tx.prepare_cached(
        "UPDATE memory_threads SET rev = rev + 1, live = COALESCE(?2, live + ?3),
           last_active_ms = MAX(last_active_ms, ?4)
         WHERE thread_id = ?1",
    )?
    .execute(params![thread_id, live_set, live_delta, now_ms()])?;
    Ok(())
}

/// A row count as SQL's integer.
fn count_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One thread of a [`SqliteMemoryStore`]; implements [`Memory`](crate::Memory) with the same
/// semantics as [`InMemoryMemory`](crate::InMemoryMemory).
pub struct SqliteMemory {
    store: Arc<SqliteMemoryStore>,
    scope: Scope,
    /// Shared with the store's other handles of the thread ([`MirrorCache`]).
    mirror: Arc<Mutex<Mirror>>,
}

impl std::fmt::Debug for SqliteMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteMemory")
            .field("path", &self.store.path)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl SqliteMemory {
    /// The thread's scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The state of the recall index of the thread's mirror
    /// (docs/reference/memory.md#the-recall-index), brought up to date with the file first (so
    /// it loads the whole thread into this handle). Not the state of the store's own index of
    /// the thread, which recalls without a current mirror and searches across sessions use.
    pub fn recall_index_status(&self) -> Result<RecallIndexStatus, MemoryError> {
        self.read(|s| s.index_slot().status(&s.embedding_cache()))
    }

    /// The store holding the thread.
    pub fn store(&self) -> &Arc<SqliteMemoryStore> {
        &self.store
    }

    fn mirror(&self) -> MutexGuard<'_, Mirror> {
        self.mirror.lock().unwrap_or_else(|poisoned| {
            // A panic while the mirror was held may have left it half changed, and it is
            // shared: it is emptied, so the next read loads the committed thread.
            self.mirror.clear_poison();
            let mut mirror = poisoned.into_inner();
            *mirror = Mirror::default();
            mirror
        })
    }
}

impl Backend for SqliteMemory {
    fn factory(&self) -> &MsgFactory {
        &self.store.factory
    }

    fn recall_index(&self) -> Option<&RecallIndexOptions> {
        Some(&self.store.recall_index)
    }

    fn deadline(&self, expiry: mnemon_db::Expiry) -> Result<Option<i64>, MemoryError> {
        Ok(expiry.deadline(self.store.now(), self.store.default_ttl))
    }

    fn check_model(&self, model: &str) -> Result<(), MemoryError> {
        // Only live messages count (an expired one not yet removed is invisible to every
        // read), judged at the store clock's reading, as each read judges at its own.
        let now = self.store.now();
        let mut conn = self.store.reader()?;
        let tx = conn.transaction()?;
        let Some((thread_id, _)) = thread_row(&tx, &self.store, &self.scope, None)? else {
            return Ok(());
        };
        let other: Option<String> = tx
            .prepare_cached(OTHER_MODEL_SQL)?
            .query_row(params![thread_id, model, now], |r| r.get(0))
            .optional()?;
        tx.commit()?;
        model_mismatch(other, model)
    }

    fn read<R>(&self, f: impl FnOnce(&ThreadState) -> R) -> Result<R, MemoryError> {
        // The mirror first, then a reader ([`MirrorCache`]); the snapshot is taken by
        // `thread_row` with the mirror held.
        let mut mirror = self.mirror();
        let now = self.store.now();
        let mut conn = self.store.reader()?;
        let tx = conn.transaction()?;
        let thread = thread_row(&tx, &self.store, &self.scope, None)?;
        mirror.sync(&tx, thread, &self.store.factory, now)?;
        tx.commit()?;
        drop(conn);
        Ok(f(&mirror.state))
    }

    fn write<R>(
        &self,
        f: impl FnOnce(&ThreadState) -> Result<(Option<Change>, R), MemoryError>,
    ) -> Result<R, MemoryError> {
        // The mirror first, then the connection ([`MirrorCache`]). The mirror is held until
        // the write's batch committed (`sqlite/group_commit.rs`): no other write of the thread
        // through it can pass this one, and no read sees it changed before it is durable.
        let mut mirror = self.mirror();
        let member = self.store.file.writer.join()?;
        // The clock is read once the write has its place in a batch: a write that waited for
        // the mirror or the writer judges expiry at the instant it plans.
        let now = self.store.now();
        let planned = (|| {
            let tx = member.conn()?;
            let Some((thread_id, mut rev)) =
                thread_row(tx, &self.store, &self.scope, Some(&self.store.factory))?
            else {
                return Err(corrupt("the thread could not be created".into()));
            };
            if purge_expired(tx, thread_id, now)? > 0 {
                rev += 1;
            }
            mirror.sync(tx, Some((thread_id, rev)), &self.store.factory, now)?;
            let (change, result) = f(&mirror.state)?;
            if let Some(change) = &change {
                persist(tx, thread_id, &mirror.state, change)?;
            }
            Ok((rev, change, result))
        })();
        let committed = member.finish(planned.is_ok());
        let (rev, change, result) = match (planned, committed) {
            (Ok(planned), Ok(group_commit::Committed::Yes)) => planned,
            (planned, committed) => {
                // The sync may have read rows of other writes of the batch (handles with
                // mirrors of their own), which a batch that did not commit never stored: the
                // mirror reloads at its next use.
                *mirror = Mirror::default();
                planned?;
                committed?;
                return Err(corrupt("a write was undone although it succeeded".into()));
            }
        };
        if let Some(change) = change {
            let earliest = match &change {
                Change::Append(entries) => earliest_of(entries.iter())
                    .into_iter()
                    .chain(mirror.earliest)
                    .min(),
                Change::Replace(entries) => earliest_of(entries.iter()),
                _ => mirror.earliest,
            };
            mirror.state.apply(change);
            mirror.rev = rev + 1;
            mirror.earliest = earliest;
        }
        Ok(result)
    }
    fn scan(
        &self,
        with_marks: bool,
        f: &mut dyn FnMut(&Entry) -> Result<(), MemoryError>,
    ) -> Result<usize, MemoryError> {
        // The mirror first, then the connection ([`MirrorCache`]).
        let mirror = self.mirror();
        let now = self.store.now();
        let mut conn = self.store.reader()?;
        // One read transaction: the snapshot taken at its first read serves the whole scan,
        // while other processes go on writing.
        let tx = conn.transaction()?;
        let Some((thread_id, rev)) = thread_row(&tx, &self.store, &self.scope, None)? else {
            return Ok(0);
        };
        let count = if mirror.current(thread_id, rev, now) {
            // The mirror is current: no row needs reading.
            mirror.state.entries().iter().try_for_each(&mut *f)?;
            mirror.state.len()
        } else {
            // Rows are read one at a time and never mirrored, so the memory held stays
            // bounded whatever the thread's size.
            drop(mirror);
            scan_rows(&tx, thread_id, &self.store.factory, with_marks, now, f)?
        };
        tx.commit()?;
        Ok(count)
    }

    fn select_recent(
        &self,
        mark: Option<&str>,
        exclude_mark: Option<&str>,
        n: usize,
    ) -> Result<Vec<Msg>, MemoryError> {
        // The mirror first, then the connection ([`MirrorCache`]).
        let mirror = self.mirror();
        let now = self.store.now();
        let mut conn = self.store.reader()?;
        let tx = conn.transaction()?;
        let Some((thread_id, rev)) = thread_row(&tx, &self.store, &self.scope, None)? else {
            return Ok(Vec::new());
        };
        let selected = if mirror.current(thread_id, rev, now) {
            mirror.state.select(mark, exclude_mark, Some(n))
        } else {
            drop(mirror);
            recent_rows(
                &tx,
                thread_id,
                &self.store.factory,
                mark,
                exclude_mark,
                n,
                now,
            )?
        };
        tx.commit()?;
        Ok(selected)
    }

    /// A cut to `top_k` from the stored rows when the mirror is not current (a fresh handle,
    /// as every server request opens): each candidate's stored `f32` vector is scored exactly,
    /// streamed through a bounded top-k, and only the winners' bodies are decoded. Loading the
    /// mirror instead parses every body, embedding decimals included: 2.6–3.0 s for 50,000
    /// messages of 512 dimensions (`benches/memory.rs`, `sqlite_recall`). A candidate without
    /// a stored vector, or of another dimension, leaves the call to the mirror path, which
    /// embeds it or gives the error.
    ///
    /// When the mirror answers anyway (it is current, or the recall has no `top_k`) and every
    /// candidate has an embedding, it is scored here, in the same read that checked the
    /// mirror: the mirror path would read the thread twice more (for the missing embeddings,
    /// then to score) to the same result, since with nothing missing `score` and
    /// `score_embedded` agree. Anything missing leaves the call to that path.
    fn retrieve_from_index(
        &self,
        query: &[f32],
        options: &RetrieveOptions,
    ) -> Result<Option<Vec<Retrieved>>, MemoryError> {
        // The mirror first, then a reader ([`MirrorCache`]); the mirror is held for the check,
        // and to the end when it answers. A recall waits for a mirror an add of the thread
        // holds: scoring the stored vectors from the reader's snapshot instead was measured
        // slower under `cargo xtask bench server`'s mix (the vector cache is stale right after
        // an add, so each such recall read the thread's vectors again: docs/bench-server.md).
        let mut mirror = Some(self.mirror());
        let now = self.store.now();
        let mut conn = self.store.reader()?;
        let tx = conn.transaction()?;
        let thread = thread_row(&tx, &self.store, &self.scope, None)?;
        let current = match (&mirror, thread) {
            (Some(mirror), Some((id, rev))) => mirror.current(id, rev, now),
            _ => false,
        };
        let (k, thread_id) = match (options.top_k, thread, mirror.as_mut()) {
            (Some(k), Some((thread_id, _)), _) if !current => (k, thread_id),
            (_, _, Some(mirror)) => {
                // The mirror's matrix answers faster than the rows; a thread not there reads
                // as empty, as through the mirror path.
                mirror.sync(&tx, thread, &self.store.factory, now)?;
                tx.commit()?;
                drop(conn);
                if !crate::retrieval::missing_embeddings(&mirror.state, options.mark.as_deref())
                    .is_empty()
                {
                    return Ok(None);
                }
                return crate::retrieval::score(
                    &mirror.state,
                    query,
                    options,
                    Some(&self.store.recall_index),
                )
                .map(Some);
            }
            // No thread, and its mirror busy: the mirror path answers (empty).
            (_, _, None) => return Ok(None),
        };
        drop(mirror);
        let query_norm = exact::norm(query);
        let score = |row: &[f32]| match &options.metric {
            Metric::Cosine => {
                exact::cosine_with_norms(exact::dot(query, row), query_norm, exact::norm(row))
            }
            Metric::Dot => exact::dot(query, row),
            Metric::NegEuclidean => -exact::squared_l2(query, row).sqrt(),
            Metric::Custom(f) => f(query, row),
        };
        let mut top = TopK::new(k);
        if options.mark.is_none() {
            // Without a mark, the thread's stored vectors come from the store's cache at the
            // thread's rev, or are read into it (`crate::vector_scan`): a handle opened per
            // request scores a thread it has never read at the cost of the arithmetic.
            let vectors =
                self.store
                    .thread_vectors(&tx, thread_id, self.store.file.vectors.start())?;
            let scored = |row: &[f32], norm: f64| match &options.metric {
                Metric::Cosine => {
                    exact::cosine_with_norms(exact::dot(query, row), query_norm, norm)
                }
                _ => score(row),
            };
            let mut complete = true;
            let visit = |position, seq, found| {
                match found {
                    Scored::Score(score) => top.offer(Candidate {
                        score,
                        thread: 0,
                        index: position,
                        seq,
                    }),
                    // The mirror path embeds it or gives the error.
                    Scored::Missing | Scored::Other(_) | Scored::Damaged(_) => complete = false,
                }
                Ok::<(), MemoryError>(())
            };
            // A large thread's cosine recall: its recall index picks the rows to score.
            let rows = (matches!(options.metric, Metric::Cosine) && !options.exact)
                .then(|| {
                    self.store
                        .indexes
                        .candidates(thread_id, &vectors, now, query, k)
                })
                .flatten();
            match rows {
                Some(rows) => vectors.scan_rows(now, query.len(), &rows, scored, visit)?,
                None => vectors.scan(now, query.len(), scored, visit)?,
            }
            if !complete {
                return Ok(None);
            }
        } else {
            let mut stmt = tx.prepare_cached(concat!(
                "SELECT m.seq, m.embedding,
                   ?2 IS NULL OR EXISTS (SELECT 1 FROM memory_marks k
                     WHERE k.thread_id = m.thread_id AND k.msg_id = m.msg_id AND k.mark = ?2)
                 FROM memory_messages m WHERE m.thread_id = ?1 AND ",
                live_sql!("m", "?3"),
                " ORDER BY m.seq"
            ))?;
            let mut rows = stmt.query(params![thread_id, options.mark, now])?;
            let mut floats: Vec<f32> = Vec::with_capacity(query.len());
            let mut index = 0;
            while let Some(row) = rows.next()? {
                let position = index;
                index += 1;
                if !row.get::<_, bool>(2)? {
                    continue;
                }
                let Ok(Some(blob)) = row.get_ref(1)?.as_blob_or_null() else {
                    return Ok(None);
                };
                if blob.len() != query.len() * 4 {
                    return Ok(None);
                }
                floats.clear();
                floats.extend(
                    blob.chunks_exact(4)
                        .map(|b| <[u8; 4]>::try_from(b).map_or(f32::NAN, f32::from_le_bytes)),
                );
                top.offer(Candidate {
                    score: score(&floats),
                    thread: 0,
                    index: position,
                    seq: row.get(0)?,
                });
            }
        }
        let mut read = tx.prepare_cached(
            "SELECT msg_id, kind, body FROM memory_messages WHERE thread_id = ?1 AND seq = ?2",
        )?;
        let mut found = Vec::with_capacity(k.min(4096));
        for winner in top.into_sorted() {
            let message = read
                .query_row(params![thread_id, winner.seq], |row| {
                    let id: String = row.get(0)?;
                    Ok(row_message(&self.store.factory, &id, row, winner.index))
                })
                .optional()?
                .ok_or_else(|| corrupt(format!("no message at seq {}", winner.seq)))??;
            found.push(Retrieved {
                score: winner.score,
                index: winner.index,
                message: Entry::new(message, Vec::new()).message_for(options.with_embeddings),
            });
        }
        drop(read);
        tx.commit()?;
        if options.preserve_order {
            found.sort_by_key(|r| r.index);
        }
        Ok(Some(found))
    }

    fn load_document(&self, source: LoadSource, overwrite: bool) -> Result<AddReport, MemoryError> {
        let factory = &self.store.factory;
        let mut conn = self.store.lock()?;
        // One write transaction for the whole document, the thread's creation included: a
        // document that fails anywhere (or an I/O error) rolls all of it back, so a failed
        // import leaves neither rows nor an empty thread behind.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let Some((thread_id, _)) = thread_row(&tx, &self.store, &self.scope, Some(factory))? else {
            return Err(corrupt("the thread could not be created".into()));
        };
        let now = self.store.now();
        // Every loaded message gets the handle's default time-to-live.
        let deadline = mnemon_db::Expiry::Default.deadline(now, self.store.default_ttl);
        // An expired row must not keep a loaded message's id from being stored again.
        purge_expired(&tx, thread_id, now)?;
        if overwrite {
            tx.execute(
                "DELETE FROM memory_messages WHERE thread_id = ?1",
                [thread_id],
            )?;
        }
        let seq: i64 = tx
            .prepare_cached(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM memory_messages WHERE thread_id = ?1",
            )?
            .query_row([thread_id], |r| r.get(0))?;
        let mut report = AddReport::default();
        // The earliest expiry among the inserted rows, for the thread's `next_expiry`.
        let mut earliest: Option<i64> = None;
        {
            // The document is read as a stream and written [`INSERT_CHUNK`] messages at a
            // time (multi-row statements: see `insert_rows`), so memory stays bounded by a
            // chunk whatever the document's size.
            let mut chunk = LoadChunk {
                tx: &tx,
                thread_id,
                seq,
                entries: Vec::with_capacity(INSERT_CHUNK),
            };
            decode_stream(factory, source, &mut |mut entry| {
                // A document's own expiry (an `AgentScope00Stored` export; `null`: never) wins
                // over the handle's default.
                entry.expires_at = entry.loaded_expiry(deadline);
                chunk.entries.push(entry);
                if chunk.entries.len() >= INSERT_CHUNK {
                    chunk.write(&mut report, &mut earliest)?;
                }
                Ok(())
            })?;
            chunk.write(&mut report, &mut earliest)?;
        }
        if report.added > 0
            && let Some(deadline) = earliest
        {
            tx.prepare_cached(
                "UPDATE memory_threads SET next_expiry = MIN(COALESCE(next_expiry, ?2), ?2)
                 WHERE thread_id = ?1",
            )?
            .execute(params![thread_id, deadline])?;
        }
        if overwrite || report.added > 0 {
            // The new rev makes every mirror of the thread (this one included) reload.
            let added = count_i64(report.added);
            if overwrite {
                bump(&tx, thread_id, Some(added), 0)?;
            } else {
                bump(&tx, thread_id, None, added)?;
            }
        }
        tx.commit()?;
        Ok(report)
    }
}

#[cfg(test)]
mod open_tests {
    //! Opening under concurrency and read-only (docs/ARCHITECTURE.md, the stores).

    use super::*;
    use std::sync::Barrier;

    fn quick() -> SqliteMemoryOptions {
        SqliteMemoryOptions {
            busy_timeout: Duration::from_millis(300),
            ..SqliteMemoryOptions::default()
        }
    }

    /// Handles of different namespaces on one file share its connections and vector cache
    /// (`sqlite/shared_file.rs`), so their concurrent adds share commits; handles opened with
    /// other settings, or after every handle closed, get their own.
    #[test]
    fn namespaces_on_one_file_share_its_writer_and_their_adds_share_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let open = |namespace: &str, options: SqliteMemoryOptions| {
            SqliteMemoryStore::open(
                &path,
                SqliteMemoryOptions {
                    namespace: namespace.parse().unwrap(),
                    ..options
                },
            )
            .unwrap()
        };
        // The default busy timeout: a loaded machine must not fail an add here.
        let (a, b) = (
            open("a", SqliteMemoryOptions::default()),
            open("b", SqliteMemoryOptions::default()),
        );
        assert!(Arc::ptr_eq(&a.file, &b.file));
        let relaxed = SqliteMemoryOptions {
            durability: Durability::Normal,
            ..SqliteMemoryOptions::default()
        };
        assert!(!Arc::ptr_eq(&a.file, &open("c", relaxed).file));
        // One writer each: a thread's adds never share a commit with its own, so apart the
        // two would commit once per add.
        const ADDS: usize = 100;
        // Both start adding together, so that their adds overlap on any machine.
        let start = std::sync::Barrier::new(2);
        std::thread::scope(|scope| {
            for store in [&a, &b] {
                let start = &start;
                scope.spawn(move || {
                    let memory = store.memory(Scope::session("s")).unwrap();
                    start.wait();
                    for i in 0..ADDS {
                        let msg = crate::MsgInput::Json(serde_json::json!({
                            "id": format!("m{i}"), "name": "u", "content": "c"}));
                        crate::Memory::add(&memory, vec![msg]).unwrap();
                    }
                });
            }
        });
        let commits = a.file.writer.commits();
        assert!(
            commits < 2 * ADDS,
            "{commits} commits for {} adds",
            2 * ADDS
        );
        // Each namespace holds its own 100 messages.
        for store in [&a, &b] {
            let memory = store.existing_memory(Scope::session("s")).unwrap().unwrap();
            assert_eq!(crate::Memory::size(&memory).unwrap(), ADDS);
        }
        // One mirrors' cache, each store's mirrors its own; a closed store's leave it.
        let scope = Scope::session("s");
        let (mirror_a, mirror_b) = (a.shared_mirror(&scope), b.shared_mirror(&scope));
        assert!(!Arc::ptr_eq(&mirror_a, &mirror_b));
        drop((mirror_a, mirror_b));
        let entries = |store: &SqliteMemoryStore| store.file.mirrors.lock().unwrap().entries.len();
        let both = entries(&a);
        drop(b);
        assert!(
            entries(&a) < both,
            "a closed store's mirrors stay in the file's cache"
        );
        let weak = Arc::downgrade(&a.file);
        drop(a);
        assert!(
            weak.upgrade().is_none(),
            "the last handle closes the file's connections"
        );
    }

    /// One namespace's long transaction on the shared writer holds another namespace's add
    /// no longer than the busy timeout: it fails with an error that says to retry, nothing
    /// written, and succeeds once the writer is free (before, it waited as long as the
    /// transaction ran).
    #[test]
    fn a_write_waits_for_the_shared_writer_no_longer_than_the_busy_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let open = |namespace: &str| {
            let options = SqliteMemoryOptions {
                namespace: namespace.parse().unwrap(),
                ..quick()
            };
            SqliteMemoryStore::open(&path, options).unwrap()
        };
        let (long, other) = (open("importer"), open("other"));
        let memory = other.memory(Scope::session("s")).unwrap();
        let msg = || crate::MsgInput::Json(serde_json::json!({"name": "u", "content": "c"}));
        let held = long.lock().unwrap();
        let (sent, received) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            let (memory, sent) = (&memory, sent.clone());
            scope.spawn(move || {
                let started = std::time::Instant::now();
                let added = crate::Memory::add(memory, vec![msg()]);
                let _ = sent.send((added, started.elapsed()));
            });
            let answer = received.recv_timeout(Duration::from_secs(10));
            drop(held);
            let (added, waited) = answer.expect("the add waited for the writer without a bound");
            let error = added.expect_err("the writer was held").to_string();
            assert!(error.contains("retried"), "{error}");
            assert!(waited >= Duration::from_millis(250), "{waited:?}");
        });
        assert_eq!(crate::Memory::size(&memory).unwrap(), 0);
        crate::Memory::add(&memory, vec![msg()]).unwrap();
        assert_eq!(crate::Memory::size(&memory).unwrap(), 1);
    }

    /// `vector_cache_bytes` bounds the store's vector cache: a thread that does not fit is read
    /// from the file at each search (the same hits), one that fits is kept.
    #[test]
    fn the_vector_cache_takes_its_budget_from_the_options() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let open = |bytes: usize| {
            SqliteMemoryStore::open(
                &path,
                SqliteMemoryOptions {
                    vector_cache_bytes: bytes,
                    ..quick()
                },
            )
            .unwrap()
        };
        let writer = open(0);
        let memory = writer.memory(Scope::session("s")).unwrap();
        let batch: Vec<crate::MsgInput> = (0..20)
            .map(|i| {
                crate::MsgInput::Json(serde_json::json!({"id": format!("m{i}"), "name": "u",
                    "content": "c", "embedding": [i as f32, 1.0, 0.5]}))
            })
            .collect();
        crate::Memory::add(&memory, batch).unwrap();
        let request = SearchRequest::new(
            ScopeFilter::all(),
            RetrievalQuery::Vector(vec![1.0, 0.0, 0.0]),
            3,
        );
        let none = writer.search_with(&request, None).unwrap();
        assert_eq!(writer.file.vectors.len(), 0);
        let roomy = open(1 << 20);
        assert_eq!(roomy.search_with(&request, None).unwrap().hits, none.hits);
        assert_eq!(roomy.file.vectors.len(), 1);
    }

    #[test]
    fn concurrent_first_opens_all_succeed() {
        for round in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("db.sqlite3");
            let barrier = Arc::new(Barrier::new(8));
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let (path, barrier) = (path.clone(), Arc::clone(&barrier));
                    std::thread::spawn(move || {
                        barrier.wait();
                        SqliteMemoryStore::open(&path, SqliteMemoryOptions::default()).map(drop)
                    })
                })
                .collect();
            for handle in handles {
                let opened = handle.join().unwrap();
                assert!(opened.is_ok(), "round {round}: {opened:?}");
            }
        }
    }

    #[test]
    fn opening_a_current_schema_does_not_wait_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let store = SqliteMemoryStore::open(&path, quick()).unwrap();
        store.memory(Scope::session("s")).unwrap();
        drop(store);
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch("BEGIN IMMEDIATE; UPDATE memory_threads SET rev = rev + 1;")
            .unwrap();
        let store = SqliteMemoryStore::open(&path, quick()).unwrap();
        assert_eq!(store.threads().unwrap(), [Scope::session("s")]);
        let reader = SqliteMemoryStore::open_read_only(&path, quick()).unwrap();
        assert_eq!(reader.threads().unwrap(), [Scope::session("s")]);
        assert!(
            reader
                .existing_memory(Scope::session("s"))
                .unwrap()
                .is_some()
        );
        writer.execute_batch("COMMIT").unwrap();
    }

    #[test]
    fn read_only_open_of_a_missing_file_is_empty_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let reader = SqliteMemoryStore::open_read_only(&path, quick()).unwrap();
        assert!(reader.threads().unwrap().is_empty());
        assert!(
            reader
                .existing_memory(Scope::session("s"))
                .unwrap()
                .is_none()
        );
        assert!(reader.memory(Scope::session("s")).is_err());
        drop(reader);
        assert!(!path.exists());
    }
}

/// Issue 11, item 14: exports, `recent_n` reads and loads of a durable memory stream instead
/// of mirroring the whole thread.
#[cfg(test)]
mod stream_tests {
    use super::*;
    use crate::clock::test_factory;
    use crate::{
        ExportFormat, ExportOptions, ExportTarget, Exported, InMemoryMemory, Memory, MemoryQuery,
    };
    use serde_json::json;

    /// A store in `dir` with the tests' clock (shared with `reader_tests`).
    pub(super) fn store(dir: &tempfile::TempDir) -> Arc<SqliteMemoryStore> {
        SqliteMemoryStore::open_with_factory(
            dir.path().join("m.sqlite3"),
            SqliteMemoryOptions::default(),
            test_factory(),
        )
        .unwrap()
    }

    /// `n` messages, some with embeddings, non-ASCII text and marks.
    fn document(n: usize) -> String {
        let items: Vec<Value> = (0..n)
            .map(|i| {
                let mut m = json!({"id": format!("m{i:04}"), "name": "Élodie",
                                   "content": format!("line {i} 🚢"), "role": "user",
                                   "timestamp": "2024-03-05 08:15:00"});
                if i % 3 == 0 {
                    m["embedding"] = json!([0.12, -0.5, i as f64 / 7.0]);
                }
                if i % 4 == 0 {
                    m["__marks"] = json!(["pin"]);
                }
                m
            })
            .collect();
        serde_json::to_string(&items).unwrap()
    }

    fn mirrored(memory: &SqliteMemory) -> bool {
        memory.mirror().thread_id.is_some()
    }

    #[test]
    fn recent_reads_only_the_last_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let memory = store.memory(Scope::session("s")).unwrap();
        memory.load(LoadSource::Json(document(50)), false).unwrap();
        // Damage the oldest rows: a read of every row fails, a read of the last ten does not.
        store
            .lock()
            .unwrap()
            .execute(
                "UPDATE memory_messages SET body = 'not json' WHERE seq <= 10",
                [],
            )
            .unwrap();
        let fresh = store
            .existing_memory_unshared(Scope::session("s"))
            .unwrap()
            .unwrap();
        assert!(fresh.get_memory(&MemoryQuery::default()).is_err());
        let fresh = store
            .existing_memory_unshared(Scope::session("s"))
            .unwrap()
            .unwrap();
        let recent = fresh
            .get_memory(&MemoryQuery {
                recent_n: Some(10),
                ..MemoryQuery::default()
            })
            .unwrap();
        let ids: Vec<&str> = recent.iter().map(Msg::id).collect();
        let want: Vec<String> = (40..50).map(|i| format!("m{i:04}")).collect();
        assert_eq!(ids, want);
        assert!(!mirrored(&fresh));
        // With mark filters the bound applies after them, as in memory.
        let pinned = fresh
            .get_memory(&MemoryQuery {
                recent_n: Some(2),
                mark: Some("pin"),
                ..MemoryQuery::default()
            })
            .unwrap();
        let ids: Vec<&str> = pinned.iter().map(Msg::id).collect();
        assert_eq!(ids, ["m0044", "m0048"]);
        let unpinned = fresh
            .get_memory(&MemoryQuery {
                recent_n: Some(2),
                exclude_mark: Some("pin"),
                ..MemoryQuery::default()
            })
            .unwrap();
        let ids: Vec<&str> = unpinned.iter().map(Msg::id).collect();
        assert_eq!(ids, ["m0047", "m0049"]);
        let none = fresh
            .get_memory(&MemoryQuery {
                recent_n: Some(0),
                ..MemoryQuery::default()
            })
            .unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn streamed_load_and_export_equal_the_in_memory_ones_without_mirroring() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let text = document(120);
        let memory = store.memory_created_on_write(Scope::session("s")).unwrap();
        let reference = InMemoryMemory::with_factory(test_factory());
        for overwrite in [false, true, false] {
            // Appending the same document again skips every id.
            assert_eq!(
                memory
                    .load(LoadSource::Json(text.clone()), overwrite)
                    .unwrap(),
                reference
                    .load(LoadSource::Json(text.clone()), overwrite)
                    .unwrap()
            );
        }
        assert!(!mirrored(&memory));
        let file = dir.path().join("out.json");
        for format in [ExportFormat::AgentScope00, ExportFormat::AgentScope01] {
            for include_marks in [false, true] {
                let options = ExportOptions {
                    include_marks,
                    format,
                };
                let Exported::Json(want) = reference.export(ExportTarget::Json, &options).unwrap()
                else {
                    panic!("text expected")
                };
                let fresh = store
                    .existing_memory_unshared(Scope::session("s"))
                    .unwrap()
                    .unwrap();
                let exported = fresh
                    .export(ExportTarget::File(file.clone()), &options)
                    .unwrap();
                assert_eq!(
                    exported,
                    Exported::File {
                        path: file.clone(),
                        count: 120
                    }
                );
                assert_eq!(std::fs::read_to_string(&file).unwrap(), want);
                assert!(!mirrored(&fresh));
                // From a current mirror, the same bytes.
                assert_eq!(fresh.size().unwrap(), 120);
                assert!(mirrored(&fresh));
                assert_eq!(
                    fresh.export(ExportTarget::Json, &options).unwrap(),
                    Exported::Json(want)
                );
            }
        }
    }

    /// A fresh handle (every server request opens one) recalls from the stored vectors: no
    /// mirror is loaded and no other message's body is decoded (a damaged one does not
    /// matter), and the hits equal the mirror's for every metric, mark and order.
    /// The server's pattern: a fresh handle per operation starts from the mirror the last
    /// handle left (no read of the thread), sees every write of the other handles, and a write
    /// through another store on the same file (another process) makes it reload.
    #[test]
    fn fresh_handles_share_the_thread_mirror() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let first = store.memory(Scope::session("s")).unwrap();
        first.load(LoadSource::Json(document(30)), false).unwrap();
        assert_eq!(first.size().unwrap(), 30);
        // Damage every row: only a handle that reads them fails.
        store
            .lock()
            .unwrap()
            .execute("UPDATE memory_messages SET body = 'not json'", [])
            .unwrap();
        let fresh = store.existing_memory(Scope::session("s")).unwrap().unwrap();
        assert!(mirrored(&fresh));
        assert_eq!(fresh.get_memory(&MemoryQuery::default()).unwrap().len(), 30);
        let unshared = store
            .existing_memory_unshared(Scope::session("s"))
            .unwrap()
            .unwrap();
        assert!(!mirrored(&unshared));
        assert!(unshared.get_memory(&MemoryQuery::default()).is_err());
        fresh
            .add(vec![
                json!({"id": "new", "name": "n", "content": "c"}).into(),
            ])
            .unwrap();
        let ids = |m: &SqliteMemory| -> Vec<String> {
            m.get_memory(&MemoryQuery::default())
                .unwrap()
                .iter()
                .map(|m| m.id().to_owned())
                .collect()
        };
        assert_eq!(ids(&first).len(), 31);
        assert_eq!(ids(&first).last().map(String::as_str), Some("new"));

        // Another store on the same file writes: the shared mirror reloads (and meets the
        // damaged rows), as a handle's own mirror did.
        let other = SqliteMemoryStore::open_with_factory(
            dir.path().join("m.sqlite3"),
            SqliteMemoryOptions::default(),
            test_factory(),
        )
        .unwrap();
        store
            .lock()
            .unwrap()
            .execute(
                "UPDATE memory_messages SET body = json_object('id', msg_id, 'name', 'n', \
                 'content', 'repaired') WHERE body = 'not json'",
                [],
            )
            .unwrap();
        other
            .existing_memory(Scope::session("s"))
            .unwrap()
            .unwrap()
            .add(vec![
                json!({"id": "elsewhere", "name": "n", "content": "c"}).into(),
            ])
            .unwrap();
        let again = store.existing_memory(Scope::session("s")).unwrap().unwrap();
        let seen = ids(&again);
        assert_eq!(seen.len(), 32);
        assert_eq!(seen.last().map(String::as_str), Some("elsewhere"));
        assert_eq!(
            again.get_memory(&MemoryQuery::default()).unwrap()[0].content(),
            &Value::String("repaired".into())
        );
    }

    /// A panic while a shared mirror is held (a caller's closure, say) empties it rather than
    /// leave a half-changed copy to the next handle.
    #[test]
    fn a_poisoned_shared_mirror_is_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let memory = store.memory(Scope::session("s")).unwrap();
        memory.load(LoadSource::Json(document(5)), false).unwrap();
        assert_eq!(memory.size().unwrap(), 5);
        let shared = Arc::clone(&memory.mirror);
        let _ = std::thread::spawn(move || {
            let mut mirror = shared.lock().unwrap();
            mirror.state = ThreadState::default();
            panic!("a panic while the mirror is half changed");
        })
        .join();
        let fresh = store.existing_memory(Scope::session("s")).unwrap().unwrap();
        assert_eq!(fresh.size().unwrap(), 5);
        assert_eq!(memory.get_memory(&MemoryQuery::default()).unwrap().len(), 5);
    }

    /// The shared mirrors are bounded: past the thread limit the least recently used that no
    /// handle holds are dropped; held ones stay.
    #[test]
    fn the_shared_mirrors_are_bounded() {
        let mut cache = MirrorCache::default();
        // Two stores' mirrors, bounded together.
        let held: Vec<_> = (0..10)
            .map(|i| cache.get(i % 2, &Scope::session(format!("held{i}"))))
            .collect();
        for i in 0..CACHED_THREADS * 2 {
            drop(cache.get(i as u64 % 2, &Scope::session(format!("t{i}"))));
            assert!(cache.entries.len() <= CACHED_THREADS + 1);
        }
        let has = |cache: &MirrorCache, store: u64, name: &str| {
            cache.entries.contains_key(&(store, Scope::session(name)))
        };
        for i in 0..10 {
            assert!(has(&cache, i % 2, &format!("held{i}")));
        }
        // The most recent idle ones are kept.
        let last = CACHED_THREADS * 2 - 1;
        assert!(has(&cache, last as u64 % 2, &format!("t{last}")));
        assert!(!has(&cache, 0, "t0"));
        // And by messages: an idle mirror past the message bound goes at the next sweep.
        {
            let big = cache.get(0, &Scope::session("big"));
            let mut mirror = big.lock().unwrap();
            let factory = test_factory();
            let entries = (0..CACHED_MESSAGES + 1)
                .map(|i| {
                    let msg = factory.msg("n", "c").id(format!("b{i}")).build().unwrap();
                    Entry::new(msg, Vec::new())
                })
                .collect();
            mirror.state = ThreadState::from_entries(entries);
        }
        for _ in 0..64 {
            drop(cache.get(1, &Scope::session("other")));
        }
        assert!(!has(&cache, 0, "big"));
        drop(held);
        // A closed store's mirrors go with it.
        cache.forget_store(1);
        assert!(cache.entries.keys().all(|(store, _)| *store == 0));
    }

    #[test]
    fn recall_through_a_fresh_handle_reads_only_the_winners() {
        use crate::{Metric, RetrievalQuery, RetrieveOptions};
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let memory = store.memory(Scope::session("s")).unwrap();
        let items: Vec<crate::MsgInput> = (0..200)
            .map(|i| {
                let x = i as f64;
                let mut m = json!({"id": format!("m{i:03}"), "name": "n",
                                   "content": format!("line {i}"),
                                   "embedding": [(x * 0.37).sin(), (x * 0.11).cos(), x / 200.0,
                                                 if i % 17 == 0 { 0.5 } else { -0.25 }]});
                if i % 3 == 0 {
                    m["__marks"] = json!(["pin"]);
                }
                m.into()
            })
            .collect();
        memory.add(items).unwrap();
        memory.delete(&[5, 6, 100]).unwrap();
        let query = vec![0.2f32, -0.7, 0.4, 0.1];
        let metrics = [
            Metric::Cosine,
            Metric::Dot,
            Metric::NegEuclidean,
            Metric::Custom(Arc::new(|q: &[f32], e: &[f32]| {
                f64::from(q[0] * e[1] - e[0])
            })),
        ];
        for metric in metrics {
            for mark in [None, Some("pin".to_owned()), Some("none".to_owned())] {
                for preserve_order in [false, true] {
                    for top_k in [Some(0), Some(1), Some(7), Some(500), None] {
                        let options = RetrieveOptions {
                            metric: metric.clone(),
                            top_k,
                            preserve_order,
                            mark: mark.clone(),
                            exact: false,
                            with_embeddings: true,
                        };
                        let recall = |m: &SqliteMemory| {
                            m.retrieve_by_embedding(
                                RetrievalQuery::Vector(query.clone()),
                                &options,
                                None,
                            )
                            .unwrap()
                        };
                        let fresh = store
                            .existing_memory_unshared(Scope::session("s"))
                            .unwrap()
                            .unwrap();
                        let streamed = recall(&fresh);
                        assert_eq!(mirrored(&fresh), top_k.is_none());
                        // The mirror path, on a handle whose mirror is current.
                        assert_eq!(memory.size().unwrap(), 197);
                        assert!(mirrored(&memory));
                        assert_eq!(streamed, recall(&memory), "{options:?}");
                    }
                }
            }
        }
        // Damage every body but the best one's: a fresh handle's top 1 still reads.
        let options = RetrieveOptions::default();
        let best = memory
            .retrieve_by_embedding(RetrievalQuery::Vector(query.clone()), &options, None)
            .unwrap();
        store
            .lock()
            .unwrap()
            .execute(
                "UPDATE memory_messages SET body = 'not json' WHERE msg_id != ?1",
                [best[0].message.id()],
            )
            .unwrap();
        let fresh = store
            .existing_memory_unshared(Scope::session("s"))
            .unwrap()
            .unwrap();
        let streamed = fresh
            .retrieve_by_embedding(RetrievalQuery::Vector(query), &options, None)
            .unwrap();
        assert_eq!(streamed, best);
        assert!(!mirrored(&fresh));
    }

    /// A message without a stored vector, or of another dimension, among the candidates: the
    /// mirror path answers, with its error (or the embedder).
    #[test]
    fn recall_with_a_missing_or_other_dimension_keeps_its_errors() {
        use crate::{RetrievalQuery, RetrieveOptions};
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let memory = store.memory(Scope::session("s")).unwrap();
        memory
            .add(vec![
                json!({"id": "a", "name": "n", "content": "c", "embedding": [1.0, 0.0]}).into(),
                json!({"id": "b", "name": "n", "content": "c"}).into(),
            ])
            .unwrap();
        let recall = || {
            let fresh = store
                .existing_memory_unshared(Scope::session("s"))
                .unwrap()
                .unwrap();
            fresh.retrieve_by_embedding(
                RetrievalQuery::Vector(vec![1.0, 0.0]),
                &RetrieveOptions::default(),
                None,
            )
        };
        assert!(matches!(
            recall(),
            Err(MemoryError::MissingEmbedding { missing: 1, .. })
        ));
        memory.delete_by_id(&["b"]).unwrap();
        memory
            .add(vec![
                json!({"id": "c", "name": "n", "content": "c", "embedding": [1.0, 0.0, 0.0]})
                    .into(),
            ])
            .unwrap();
        assert!(matches!(
            recall(),
            Err(MemoryError::DimensionMismatch {
                expected: 2,
                found: 3,
                ..
            })
        ));
    }

    #[test]
    fn a_failed_load_rolls_back_the_thread_and_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let mut items: Vec<Value> = serde_json::from_str(&document(30)).unwrap();
        items[20] = json!({"name": "no content"});
        let bad = serde_json::to_string(&items).unwrap();
        let memory = store
            .memory_created_on_write(Scope::session("new"))
            .unwrap();
        assert!(matches!(
            memory.load(LoadSource::Json(bad.clone()), false),
            Err(MemoryError::MissingField { p: 20, .. })
        ));
        assert!(store.threads().unwrap().is_empty());
        let count: i64 = store
            .lock()
            .unwrap()
            .query_row("SELECT COUNT(*) FROM memory_messages", [], |r| r.get(0))
            .unwrap();
        assert_eq!(count, 0);
        // Into an existing thread: unchanged, overwrite or not.
        let kept = store.memory(Scope::session("kept")).unwrap();
        kept.load(LoadSource::Json(document(5)), false).unwrap();
        let before = kept.export(ExportTarget::Json, &ExportOptions::default());
        for overwrite in [false, true] {
            assert!(kept.load(LoadSource::Json(bad.clone()), overwrite).is_err());
            assert_eq!(
                kept.export(ExportTarget::Json, &ExportOptions::default()),
                before
            );
        }
        assert_eq!(store.threads().unwrap(), vec![Scope::session("kept")]);
    }
}

/// Issue 13, item 3: version 2 gives every thread a namespace; a file written before it keeps
/// its threads, messages, marks and thread-id counter, all in the default namespace.
#[cfg(test)]
mod namespace_tests {
    use super::*;
    use crate::{Memory, MemoryQuery};

    /// A file at version 1, as written before namespaces, with one thread `s` holding message
    /// `a` marked `pin`, and a dropped thread 7.
    fn version_1_file(path: &Path) {
        let v1 = Schema {
            migrations: &SCHEMA.migrations[..1],
            ..SCHEMA
        };
        let conn = sqlite::open(path, &SqliteMemoryOptions::default().settings(), &v1).unwrap();
        conn.execute_batch(
            "INSERT INTO memory_threads (thread_id, user_id, agent_id, session_id, rev,
               created_at) VALUES (1, '', '', 's', 3, 't'), (7, 'u', '', 'gone', 1, 't');
             DELETE FROM memory_threads WHERE thread_id = 7;
             INSERT INTO memory_messages (thread_id, seq, msg_id, kind, body) VALUES
               (1, 1, 'a', 'msg', '{\"id\":\"a\",\"name\":\"n\",\"content\":\"one\",\"role\":\"user\",\"metadata\":null,\"timestamp\":\"t\"}');
             INSERT INTO memory_marks (thread_id, msg_id, pos, mark) VALUES (1, 'a', 0, 'pin');",
        )
        .unwrap();
    }

    /// A reader (a read-only mount, `mnemon memory` listing commands) cannot migrate a file;
    /// a version-1 file still reads as the default namespace's threads, and as nothing for
    /// another namespace.
    #[test]
    fn a_version_1_file_reads_read_only_as_the_default_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.sqlite3");
        version_1_file(&path);
        let reader =
            SqliteMemoryStore::open_read_only(&path, SqliteMemoryOptions::default()).unwrap();
        assert_eq!(reader.threads().unwrap(), [Scope::session("s")]);
        let memory = reader
            .existing_memory(Scope::session("s"))
            .unwrap()
            .unwrap();
        let all = memory.get_memory(&MemoryQuery::default()).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(memory.marks_of("a").unwrap(), Some(vec!["pin".to_owned()]));
        assert!(
            memory
                .add(vec![
                    serde_json::json!({"name": "n", "content": "c"}).into()
                ])
                .is_err()
        );
        let acme = SqliteMemoryStore::open_read_only(
            &path,
            SqliteMemoryOptions {
                namespace: Namespace::new("acme").unwrap(),
                ..SqliteMemoryOptions::default()
            },
        )
        .unwrap();
        assert!(acme.threads().unwrap().is_empty());
        assert!(acme.existing_memory(Scope::session("s")).unwrap().is_none());
        drop((reader, acme));
        // The file is unchanged: still version 1.
        let conn = Connection::open(&path).unwrap();
        let version: i64 = conn
            .query_row("SELECT version FROM memory_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 1);
    }

    #[test]
    fn a_version_1_file_migrates_into_the_default_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.sqlite3");
        version_1_file(&path);
        let store = SqliteMemoryStore::open(&path, SqliteMemoryOptions::default()).unwrap();
        assert_eq!(store.threads().unwrap(), [Scope::session("s")]);
        let memory = store.existing_memory(Scope::session("s")).unwrap().unwrap();
        let all = memory.get_memory(&MemoryQuery::default()).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].id(), "a");
        assert_eq!(memory.marks_of("a").unwrap(), Some(vec!["pin".to_owned()]));
        // Thread ids are never reused: the counter had reached 7.
        store.memory(Scope::session("new")).unwrap();
        let id: i64 = store
            .lock()
            .unwrap()
            .query_row(
                "SELECT thread_id FROM memory_threads WHERE session_id = 'new'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(id, 8);
        drop(store);
        // Another namespace sees none of it, and may use the same scope.
        let acme = SqliteMemoryStore::open(
            &path,
            SqliteMemoryOptions {
                namespace: Namespace::new("acme").unwrap(),
                ..SqliteMemoryOptions::default()
            },
        )
        .unwrap();
        assert!(acme.threads().unwrap().is_empty());
        assert!(acme.existing_memory(Scope::session("s")).unwrap().is_none());
        assert!(!acme.drop_thread(&Scope::session("s")).unwrap());
        let theirs = acme.memory(Scope::session("s")).unwrap();
        assert_eq!(theirs.size().unwrap(), 0);
        assert_eq!(acme.threads().unwrap(), [Scope::session("s")]);
    }
}

/// Thread summaries (schema version 3): a file at version 2 migrates with exact counts, and a
/// page is an index range from the cursor, never a scan of the namespace.
#[cfg(test)]
mod summary_tests {
    use super::*;
    use crate::Memory;

    /// A file at version 2 with threads `a` (3 messages, one removed) and `b` (none) in the
    /// default namespace, and `a` (1 message) in `acme`.
    fn version_2_file(path: &Path) {
        let v2 = Schema {
            migrations: &SCHEMA.migrations[..2],
            ..SCHEMA
        };
        let conn = sqlite::open(path, &SqliteMemoryOptions::default().settings(), &v2).unwrap();
        let body = |id: &str| {
            format!(
                "{{\"id\":\"{id}\",\"name\":\"n\",\"content\":\"c\",\"role\":\"user\",\
                 \"metadata\":null,\"timestamp\":\"t\"}}"
            )
        };
        conn.execute_batch(
            "INSERT INTO memory_threads (thread_id, namespace, user_id, agent_id, session_id,
               rev, created_at) VALUES (1, 'default', '', '', 'a', 4, 't'),
               (2, 'default', '', '', 'b', 0, 't'), (3, 'acme', '', '', 'a', 1, 't');",
        )
        .unwrap();
        for (thread, seq, id) in [(1, 1, "x"), (1, 3, "y"), (1, 4, "z"), (3, 1, "w")] {
            conn.execute(
                "INSERT INTO memory_messages (thread_id, seq, msg_id, kind, body)
                 VALUES (?1, ?2, ?3, 'msg', ?4)",
                params![thread, seq, id, body(id)],
            )
            .unwrap();
        }
    }

    #[test]
    fn a_version_2_file_migrates_with_counts_and_the_migration_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v2.sqlite3");
        version_2_file(&path);
        // Read-only, the file cannot migrate: summaries say so, everything else still reads.
        let reader =
            SqliteMemoryStore::open_read_only(&path, SqliteMemoryOptions::default()).unwrap();
        let error = reader.thread_summaries(10, None).unwrap_err();
        assert!(
            matches!(&error, MemoryError::Storage { detail } if detail.contains("write access")),
            "{error:?}"
        );
        assert_eq!(
            reader.threads().unwrap(),
            [Scope::session("a"), Scope::session("b")]
        );
        let a = reader
            .existing_memory(Scope::session("a"))
            .unwrap()
            .unwrap();
        assert_eq!(a.size().unwrap(), 3);
        assert!(reader.memory(Scope::session("new")).is_err());
        drop((a, reader));

        let before = now_ms();
        let store = SqliteMemoryStore::open(&path, SqliteMemoryOptions::default()).unwrap();
        let after = now_ms();
        let page = store.thread_summaries(10, None).unwrap();
        // Equal times: the newest-created thread first.
        let listed: Vec<(Scope, u64)> = page
            .threads
            .iter()
            .map(|s| (s.scope.clone(), s.messages))
            .collect();
        assert_eq!(listed, [(Scope::session("b"), 0), (Scope::session("a"), 3)]);
        for summary in &page.threads {
            // julianday's resolution: allow a millisecond either side.
            assert!(
                (before - 1..=after + 1).contains(&summary.last_active_ms),
                "{summary:?} not within {before}..={after}"
            );
        }
        assert_eq!(
            page.threads[0].last_active_ms,
            page.threads[1].last_active_ms
        );
        let acme = SqliteMemoryStore::open(
            &path,
            SqliteMemoryOptions {
                namespace: Namespace::new("acme").unwrap(),
                ..SqliteMemoryOptions::default()
            },
        )
        .unwrap();
        let theirs = acme.thread_summaries(10, None).unwrap();
        assert_eq!(theirs.threads.len(), 1);
        assert_eq!(theirs.threads[0].messages, 1);
        // The counts move with writes from there.
        let a = store.existing_memory(Scope::session("a")).unwrap().unwrap();
        a.delete(&[1]).unwrap();
        let first = &store.thread_summaries(1, None).unwrap().threads[0];
        assert_eq!(
            (first.scope.clone(), first.messages),
            (Scope::session("a"), 2)
        );
    }

    /// The plan of each page statement: a search of the activity index bounded by the
    /// namespace (and the cursor), in the index's order, with no sort and no scan.
    #[test]
    fn pages_are_index_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            SqliteMemoryStore::open(dir.path().join("m.sqlite3"), SqliteMemoryOptions::default())
                .unwrap();
        for i in 0..50 {
            store.memory(Scope::session(format!("s{i}"))).unwrap();
        }
        let conn = store.lock().unwrap();
        let plan = |sql: &str| -> String {
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let rows = stmt
                .query_map(params!["default", 5_i64, 3_i64, 11_i64, 0_i64], |r| {
                    r.get::<_, String>(3)
                })
                .unwrap();
            rows.collect::<Result<Vec<_>, _>>().unwrap().join("; ")
        };
        let with_cursor = plan(PAGE_AFTER_SQL);
        assert!(
            with_cursor.contains("SEARCH memory_threads USING INDEX memory_threads_activity")
                && with_cursor.contains("namespace=?")
                && with_cursor.contains("<?")
                && !with_cursor.contains("TEMP B-TREE"),
            "{with_cursor}"
        );
        let first = plan(FIRST_PAGE_SQL);
        assert!(
            first.contains("SEARCH memory_threads USING INDEX memory_threads_activity")
                && first.contains("namespace=?")
                && !first.contains("TEMP B-TREE"),
            "{first}"
        );
        drop(conn);
        // And the statements `thread_summaries` runs are those: a cursor far into a namespace
        // of 50 threads returns the rest.
        let first = store.thread_summaries(45, None).unwrap();
        let rest = store.thread_summaries(45, first.next.as_deref()).unwrap();
        assert_eq!(rest.threads.len(), 5);
        assert_eq!(rest.next, None);
    }

    /// The creation-order listing reads a page as a range of its index (schema version 7),
    /// and walks every thread of the namespace once, oldest first, with its summary; another
    /// namespace's threads are not in it. Before, each page read every thread.
    #[test]
    fn creation_order_pages_are_index_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.sqlite3");
        let store = SqliteMemoryStore::open(&path, SqliteMemoryOptions::default()).unwrap();
        let acme = SqliteMemoryStore::open(
            &path,
            SqliteMemoryOptions {
                namespace: Namespace::new("acme").unwrap(),
                ..SqliteMemoryOptions::default()
            },
        )
        .unwrap();
        for i in 0..50 {
            store.memory(Scope::session(format!("s{i:02}"))).unwrap();
            acme.memory(Scope::session(format!("a{i:02}"))).unwrap();
        }
        store
            .memory(Scope::session("s07"))
            .unwrap()
            .add(vec![
                serde_json::json!({"name": "n", "content": "one"}).into(),
            ])
            .unwrap();
        let conn = store.lock().unwrap();
        let mut stmt = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {CREATED_PAGE_SQL}"))
            .unwrap();
        let plan = stmt
            .query_map(params!["default", 5_i64, 11_i64, 0_i64], |r| {
                r.get::<_, String>(3)
            })
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
            .join("; ");
        assert!(
            plan.contains("SEARCH memory_threads USING COVERING INDEX memory_threads_created")
                || plan.contains("SEARCH memory_threads USING INDEX memory_threads_created"),
            "{plan}"
        );
        assert!(
            plan.contains("namespace=?") && !plan.contains("TEMP B-TREE"),
            "{plan}"
        );
        drop(stmt);
        drop(conn);
        let mut listed = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = store.threads_page(15, after.as_deref()).unwrap();
            assert!(page.threads.len() <= 15);
            listed.extend(page.threads);
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        let scopes: Vec<Scope> = listed.iter().map(|s| s.scope.clone()).collect();
        let expected: Vec<Scope> = (0..50)
            .map(|i| Scope::session(format!("s{i:02}")))
            .collect();
        assert_eq!(scopes, expected);
        assert_eq!(scopes, store.threads().unwrap());
        assert_eq!(listed[7].messages, 1);
        assert!(matches!(
            store.threads_page(10, Some("not a cursor")),
            Err(MemoryError::InvalidCursor { .. })
        ));
    }
}

/// Expiry (schema version 4): a file at version 3 reads read-only as before (nothing expires)
/// and migrates, its messages never expiring, new ones expiring by the store's clock.
#[cfg(test)]
mod expiry_tests {
    use super::*;
    use crate::{AddOptions, Memory};

    fn version_3_file(path: &Path) {
        let v3 = Schema {
            migrations: &SCHEMA.migrations[..3],
            ..SCHEMA
        };
        let conn = sqlite::open(path, &SqliteMemoryOptions::default().settings(), &v3).unwrap();
        conn.execute_batch(
            "INSERT INTO memory_threads (thread_id, namespace, user_id, agent_id, session_id,
               rev, created_at, live) VALUES (1, 'default', '', '', 's', 1, 't', 1);
             INSERT INTO memory_messages (thread_id, seq, msg_id, kind, body) VALUES
               (1, 1, 'a', 'msg', '{\"id\":\"a\",\"name\":\"n\",\"content\":\"one\",\"role\":\"user\",\"metadata\":null,\"timestamp\":\"t\"}');
             INSERT INTO memory_marks (thread_id, msg_id, pos, mark) VALUES (1, 'a', 0, 'pin');",
        )
        .unwrap();
    }

    #[test]
    fn a_version_3_file_reads_read_only_and_migrates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v3.sqlite3");
        version_3_file(&path);
        let reader =
            SqliteMemoryStore::open_read_only(&path, SqliteMemoryOptions::default()).unwrap();
        let a = reader
            .existing_memory(Scope::session("s"))
            .unwrap()
            .unwrap();
        assert_eq!(a.size().unwrap(), 1);
        assert_eq!(
            reader.thread_summaries(10, None).unwrap().threads[0].messages,
            1
        );
        let hits = reader
            .search(
                &ScopeFilter::all(),
                RetrievalQuery::Vector(vec![1.0]),
                3,
                None,
            )
            .unwrap();
        assert!(hits.is_empty());
        assert!(
            a.add(vec![
                serde_json::json!({"name": "n", "content": "c"}).into()
            ])
            .is_err()
        );
        assert!(reader.gc().is_err());
        drop((a, reader));
        let version = || -> i64 {
            Connection::open(&path)
                .unwrap()
                .query_row("SELECT version FROM memory_schema", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(version(), 3);

        let clock = Arc::new(mnemon_db::ManualClock::new(1_000));
        let store = SqliteMemoryStore::open(
            &path,
            SqliteMemoryOptions {
                clock: clock.clone(),
                ..SqliteMemoryOptions::default()
            },
        )
        .unwrap();
        assert_eq!(version(), SCHEMA.version());
        let a = store.existing_memory(Scope::session("s")).unwrap().unwrap();
        a.add_with(
            vec![serde_json::json!({"id": "b", "name": "n", "content": "c"}).into()],
            &AddOptions {
                expiry: mnemon_db::Expiry::At(1_010),
                ..AddOptions::default()
            },
        )
        .unwrap();
        assert_eq!(a.size().unwrap(), 2);
        clock.set(1_010);
        assert_eq!(a.size().unwrap(), 1);
        assert_eq!(a.marks_of("a").unwrap(), Some(vec!["pin".to_owned()]));
        assert_eq!(store.gc().unwrap(), 1);
        assert_eq!(store.gc().unwrap(), 0);
    }

    /// `gc` visits only the threads whose `next_expiry` has passed: an index range.
    #[test]
    fn gc_finds_threads_through_the_expiry_index() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            SqliteMemoryStore::open(dir.path().join("m.sqlite3"), SqliteMemoryOptions::default())
                .unwrap();
        let conn = store.lock().unwrap();
        let mut stmt = conn
            .prepare(
                "EXPLAIN QUERY PLAN SELECT thread_id FROM memory_threads
                 WHERE namespace = ?1 AND next_expiry <= ?2",
            )
            .unwrap();
        let plan: Vec<String> = stmt
            .query_map(params!["default", 5_i64], |r| r.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join("; ");
        assert!(plan.contains("INDEX memory_threads_expiry"), "{plan}");
    }
}

/// Keyword search (schema version 5): a file at version 4 is refused keyword searches while
/// read-only, and migrates with every stored message indexed.
#[cfg(test)]
mod keyword_tests {
    use super::*;
    use crate::{SearchMode, SearchRequest};

    #[test]
    fn a_version_4_file_migrates_with_its_messages_indexed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v4.sqlite3");
        let v4 = Schema {
            migrations: &SCHEMA.migrations[..4],
            ..SCHEMA
        };
        let conn = sqlite::open(&path, &SqliteMemoryOptions::default().settings(), &v4).unwrap();
        conn.execute_batch(
            "INSERT INTO memory_threads (thread_id, namespace, user_id, agent_id, session_id,
               rev, created_at, live) VALUES (1, 'default', '', '', 's', 1, 't', 2);
             INSERT INTO memory_messages (thread_id, seq, msg_id, kind, body) VALUES
               (1, 1, 'a', 'msg', '{\"id\":\"a\",\"name\":\"n\",\"content\":\"the ferry\",\"role\":\"user\",\"metadata\":null,\"timestamp\":\"t\"}'),
               (1, 2, 'b', 'msg', '{\"id\":\"b\",\"name\":\"n\",\"content\":[{\"type\":\"text\",\"text\":\"tides\"}],\"role\":\"user\",\"metadata\":null,\"timestamp\":\"t\"}');",
        )
        .unwrap();
        drop(conn);
        let keyword = |text: &str| SearchRequest {
            mode: SearchMode::Keyword { text: text.into() },
            ..SearchRequest::new(ScopeFilter::all(), RetrievalQuery::Vector(vec![1.0]), 5)
        };
        let reader =
            SqliteMemoryStore::open_read_only(&path, SqliteMemoryOptions::default()).unwrap();
        let error = reader.search_with(&keyword("ferry"), None).unwrap_err();
        assert!(
            matches!(&error, MemoryError::Storage { detail } if detail.contains("write access")),
            "{error:?}"
        );
        drop(reader);
        let store = SqliteMemoryStore::open(&path, SqliteMemoryOptions::default()).unwrap();
        for (text, id, index) in [("ferry", "a", 0), ("TIDES", "b", 1)] {
            let hits = store.search_with(&keyword(text), None).unwrap().hits;
            assert_eq!(hits.len(), 1);
            assert_eq!((hits[0].message.id(), hits[0].index), (id, index));
        }
    }
}

/// Reads on their own connections (the module docs, **Connections**): a read never waits for
/// the writer's open transaction, and every acknowledged write is read back by every later
/// read, whichever handle and connection it goes through.
#[cfg(test)]
mod reader_tests {
    use super::stream_tests::store;
    use super::*;
    use crate::{ExportOptions, ExportTarget, Memory, MemoryQuery, SearchMode, SearchRequest};
    use mnemon_types::EmbedError;
    use serde_json::json;
    use std::sync::mpsc;
    use std::time::Instant;

    /// A real embedder, small and deterministic: four byte sums of the text.
    struct ByteSums;

    impl Embedder for ByteSums {
        fn model(&self) -> &str {
            "test:byte-sums"
        }

        fn dimension(&self) -> usize {
            4
        }

        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            Ok(texts
                .iter()
                .map(|text| {
                    let mut v = [1.0f32; 4];
                    for (i, b) in text.bytes().enumerate() {
                        v[i % 4] += f32::from(b) / 255.0;
                    }
                    v.to_vec()
                })
                .collect())
        }
    }

    /// The message `id` with an embedding made of `seed`.
    fn message(id: &str, seed: f32) -> crate::MsgInput {
        json!({"id": id, "name": "n", "content": format!("the ferry {id}"),
               "embedding": [seed, 1.0 - seed, 0.5, seed * seed]})
        .into()
    }

    /// Every read path of the store and its handles, as a request would run them.
    fn every_read(store: &Arc<SqliteMemoryStore>) -> Result<Vec<usize>, MemoryError> {
        let scope = Scope::session("s");
        let missing = || corrupt("the thread is missing".into());
        let shared = store.existing_memory(scope.clone())?.ok_or_else(missing)?;
        let unshared = store
            .existing_memory_unshared(scope.clone())?
            .ok_or_else(missing)?;
        let top = RetrieveOptions {
            top_k: Some(2),
            ..RetrieveOptions::default()
        };
        let query = || RetrievalQuery::Vector(vec![0.3, 0.7, 0.5, 0.09]);
        let recent = MemoryQuery {
            recent_n: Some(2),
            ..MemoryQuery::default()
        };
        let keyword = SearchRequest {
            mode: SearchMode::Keyword {
                text: "ferry".into(),
            },
            ..SearchRequest::new(ScopeFilter::all(), query(), 5)
        };
        Ok(vec![
            // The REST recall: a text query through the embedder (its model checked).
            shared
                .retrieve_by_embedding(RetrievalQuery::Text("ferry".into()), &top, Some(&ByteSums))?
                .len(),
            // From the shared mirror, and from the stored vectors.
            shared.retrieve_by_embedding(query(), &top, None)?.len(),
            unshared.retrieve_by_embedding(query(), &top, None)?.len(),
            shared.size()?,
            unshared.get_memory(&recent)?.len(),
            match unshared.export(ExportTarget::Messages, &ExportOptions::default())? {
                crate::Exported::Messages(messages) => messages.len(),
                other => return Err(corrupt(format!("not messages: {other:?}"))),
            },
            store.threads()?.len(),
            store.thread_summaries(10, None)?.threads.len(),
            store.search(&ScopeFilter::all(), query(), 5, None)?.len(),
            store.search_with(&keyword, None)?.hits.len(),
        ])
    }

    /// The bug: reads took the one connection that writes hold through their commit, so a
    /// recall waited for every add of every session. Here the writer's transaction stays open
    /// while every read path runs; on the old code the reads never got the connection and the
    /// bounded wait failed.
    #[test]
    fn reads_do_not_wait_for_an_open_write_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let memory = store.memory(Scope::session("s")).unwrap();
        memory
            .add_with_model(
                vec![message("a", 0.1), message("b", 0.5), message("c", 0.9)],
                &crate::AddOptions::default(),
                "test:byte-sums",
            )
            .unwrap();
        let want = every_read(&store).unwrap();
        assert_eq!(want, [2, 2, 2, 3, 2, 3, 1, 1, 3, 3]);

        // The write lock held mid-transaction, as an add holds it through its commit's fsync;
        // its change is not committed, so no read may see it.
        let writer = store.lock().unwrap();
        writer
            .execute_batch(
                "BEGIN IMMEDIATE;
                 UPDATE memory_threads SET rev = rev + 1, live = live + 100;",
            )
            .unwrap();
        let (sent, received) = mpsc::channel();
        let reading = Arc::clone(&store);
        std::thread::spawn(move || {
            let _ = sent.send(every_read(&reading));
        });
        let got = received.recv_timeout(Duration::from_secs(5));
        // Released whatever happened, so that a waiting reader finishes rather than hangs.
        writer.execute_batch("ROLLBACK").unwrap();
        drop(writer);
        let got = got.expect("a read waited for the writer's open transaction");
        assert_eq!(got.unwrap(), want);
    }

    /// Read-your-writes across handles and connections, under concurrency: every add is read
    /// back right after it is acknowledged (through a fresh handle sharing the mirror, one with
    /// a mirror of its own, a recall and a search), and readers of a session written by others
    /// never see it shrink.
    #[test]
    fn acknowledged_writes_are_read_by_every_later_read() {
        const WRITERS: usize = 4;
        const ADDS: usize = 25;
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        store.memory(Scope::session("shared")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for i in 0..ADDS {
                        assert!(Instant::now() < deadline, "writer {w} too slow");
                        let own = Scope::session(format!("w{w}"));
                        let id = format!("w{w}-{i}");
                        let seed = (w * ADDS + i) as f32 / (WRITERS * ADDS) as f32;
                        store
                            .memory(own.clone())
                            .unwrap()
                            .add(vec![message(&id, seed)])
                            .unwrap();
                        store
                            .existing_memory(Scope::session("shared"))
                            .unwrap()
                            .unwrap()
                            .add(vec![message(&format!("s-{id}"), seed)])
                            .unwrap();
                        let fresh = store.existing_memory(own.clone()).unwrap().unwrap();
                        assert_eq!(fresh.size().unwrap(), i + 1, "{id}");
                        let unshared = store.existing_memory_unshared(own.clone()).unwrap();
                        let last = unshared
                            .unwrap()
                            .get_memory(&MemoryQuery {
                                recent_n: Some(1),
                                ..MemoryQuery::default()
                            })
                            .unwrap();
                        assert_eq!(last[0].id(), id);
                        // Its own vector is its best match.
                        let query =
                            RetrievalQuery::Vector(vec![seed, 1.0 - seed, 0.5, seed * seed]);
                        let best = store
                            .existing_memory_unshared(own.clone())
                            .unwrap()
                            .unwrap()
                            .retrieve_by_embedding(query.clone(), &RetrieveOptions::default(), None)
                            .unwrap();
                        assert!((best[0].score - 1.0).abs() < 1e-6, "{id}: {best:?}");
                        let within = ScopeFilter::all().session(format!("w{w}"));
                        let hits = store.search(&within, query, 1, None).unwrap();
                        assert!((hits[0].score - 1.0).abs() < 1e-6, "{id}: {hits:?}");
                        let shared = store.existing_memory(Scope::session("shared")).unwrap();
                        let ids: Vec<String> = shared
                            .unwrap()
                            .get_memory(&MemoryQuery::default())
                            .unwrap()
                            .iter()
                            .map(|m| m.id().to_owned())
                            .collect();
                        assert!(ids.contains(&format!("s-{id}")), "{id}");
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    let mut seen = 0;
                    while seen < WRITERS * ADDS {
                        assert!(Instant::now() < deadline, "the readers never saw every add");
                        let shared = store.existing_memory(Scope::session("shared")).unwrap();
                        let size = shared.unwrap().size().unwrap();
                        assert!(
                            size >= seen,
                            "the shared session shrank from {seen} to {size}"
                        );
                        seen = size;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        for handle in writers.into_iter().chain(readers) {
            handle.join().unwrap();
        }
        let shared = store.existing_memory(Scope::session("shared")).unwrap();
        assert_eq!(shared.unwrap().size().unwrap(), WRITERS * ADDS);
    }
}

#[cfg(test)]
mod batch_insert_tests {
    use super::*;
    use crate::{AddOptions, Memory};

    /// A store in `dir` and the memory of its session `s`.
    fn session(dir: &Path) -> (Arc<SqliteMemoryStore>, SqliteMemory) {
        let store =
            SqliteMemoryStore::open(dir.join("m.sqlite3"), SqliteMemoryOptions::default()).unwrap();
        let memory = store.memory(Scope::session("s")).unwrap();
        (store, memory)
    }

    /// Every stored message's seq and id, in seq order.
    fn seqs_and_ids(conn: &Connection) -> Vec<(i64, String)> {
        conn.prepare("SELECT seq, msg_id FROM memory_messages ORDER BY seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn chunks_cover_any_batch_with_few_statement_shapes() {
        for n in 1..=300_usize {
            let (mut left, mut statements) = (n, 0);
            while left > 0 {
                let chunk = insert_chunk_len(left);
                assert!(chunk.is_power_of_two() && chunk <= INSERT_CHUNK && chunk <= left);
                left -= chunk;
                statements += 1;
            }
            assert!(
                statements <= n.div_ceil(INSERT_CHUNK) + 6,
                "{n}: {statements}"
            );
        }
        assert_eq!(
            insert_rows_sql(2)
                .matches("(?, ?, ?, ?, ?, ?, ?, ?)")
                .count(),
            2
        );
    }

    /// A batch written in multi-row statements (64, 64, 16, 4, 2 rows) keeps its order, its
    /// keyword rows (the FTS5 trigger runs per row inside each statement) and its marks.
    #[test]
    fn a_batch_in_chunks_keeps_order_keywords_and_marks() {
        let dir = tempfile::tempdir().unwrap();
        let (store, memory) = session(dir.path());
        memory
            .add(vec![
                serde_json::json!({"id": "first", "name": "n", "content": "x"}).into(),
            ])
            .unwrap();
        let batch: Vec<_> = (0..150)
            .map(|i| serde_json::json!({"id": format!("m{i}"), "name": "n", "content": format!("word{i} shared")}).into())
            .collect();
        let options = AddOptions {
            marks: vec!["pin".into()],
            ..AddOptions::default()
        };
        assert_eq!(memory.add_with(batch, &options).unwrap().added, 150);
        let conn = store.lock().unwrap();
        let ids = seqs_and_ids(&conn);
        let mut expected = vec![(1, "first".to_owned())];
        expected.extend((0..150).map(|i| (i + 2, format!("m{i}"))));
        assert_eq!(ids, expected);
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(
            count("SELECT count(*) FROM memory_fts WHERE memory_fts MATCH 'shared'"),
            150
        );
        assert_eq!(
            count("SELECT count(*) FROM memory_fts WHERE memory_fts MATCH 'word149'"),
            1
        );
        assert_eq!(
            count(
                "SELECT count(*) FROM memory_fts f JOIN memory_messages m
                   ON f.rowid = m.thread_id * 4294967296 + m.seq
                 WHERE m.msg_id = 'm149' AND memory_fts MATCH 'word149'"
            ),
            1
        );
        assert_eq!(
            count("SELECT count(*) FROM memory_marks WHERE mark = 'pin'"),
            150
        );
    }

    /// A loaded document is written in chunks; an id already stored, repeated within one
    /// chunk or repeated in a later chunk is skipped and reported in document order, and the
    /// kept messages get dense seqs, keyword rows and marks.
    #[test]
    fn a_loaded_document_in_chunks_skips_every_kind_of_duplicate() {
        use crate::LoadSource;
        let dir = tempfile::tempdir().unwrap();
        let (store, memory) = session(dir.path());
        memory
            .add(vec![
                serde_json::json!({"id": "old", "name": "n", "content": "x"}).into(),
            ])
            .unwrap();
        // 150 ids: m0..m139, with "old" at 5, m3 again at 10 (same chunk), m7 again at 100
        // (a later chunk) and m139 again at the very end (the last, partial chunk).
        let mut ids: Vec<String> = (0..140).map(|i| format!("m{i}")).collect();
        ids.insert(5, "old".into());
        ids.insert(10, "m3".into());
        ids.insert(100, "m7".into());
        ids.push("m139".into());
        let document: Vec<Value> = ids
            .iter()
            .map(|id| {
                serde_json::json!({"id": id, "name": "n", "content": format!("{id} said"),
                                         "__marks": ["pin"]})
            })
            .collect();
        let report = memory
            .load(
                LoadSource::Json(serde_json::to_string(&document).unwrap()),
                false,
            )
            .unwrap();
        assert_eq!(report.added, 140);
        assert_eq!(report.skipped_duplicates, ["old", "m3", "m7", "m139"]);
        let conn = store.lock().unwrap();
        let stored = seqs_and_ids(&conn);
        let mut expected = vec![(1, "old".to_owned())];
        expected.extend((0..140).map(|i| (i + 2, format!("m{i}"))));
        assert_eq!(stored, expected);
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(
            count("SELECT count(*) FROM memory_fts WHERE memory_fts MATCH 'said'"),
            140
        );
        assert_eq!(
            count("SELECT count(*) FROM memory_marks WHERE mark = 'pin'"),
            140
        );
        assert_eq!(count("SELECT live FROM memory_threads"), 141);
    }
}
