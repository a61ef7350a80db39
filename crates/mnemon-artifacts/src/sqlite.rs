//! The embedded default artifact store: one SQLite file, WAL mode, durable when `save` returns.
//!
//! Connection setup, durability and the `artifact_schema` migrations are `mnemon-db`'s, shared
//! with the other stores.
//!
//! **Connections.** Saves and deletes go through one write connection, taking their turn among
//! the process's writers to the file (`mnemon_db::sqlite::WriteQueue`); reads go to a pool of
//! read connections (`mnemon_db::sqlite::ReadPool`), so they never wait for a save's content or
//! fsync. Every writable handle on one file with the same settings, whatever its namespace,
//! shares these connections (`mnemon_db::sqlite::Shared`): a server's open tenants cost none of
//! their own. A store in memory or opened read-only has its one connection for everything.
//!
//! **Expiry** (schema version 3): each record has an `expires_at` (milliseconds since the Unix
//! epoch; NULL, never, for records saved before), every read is bound to
//! `(expires_at IS NULL OR expires_at > now)`, and [`ArtifactStore::gc`] deletes expired
//! records through the partial index `artifact_records_by_expiry`. Content is removed after
//! the records' commit, one storage location at a time under the write lock (the exclusion a
//! save holds while it writes content), and only when no record points at it (index
//! `artifact_records_by_storage`): of any namespace, or of the store's own when the registry is
//! [private to the namespace](BackendRegistry::private_to_namespace). **Filters** are translated by `mnemon-filter`
//! onto the record's columns (`data` is JSON text).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mnemon_db::expiry::{Clock, Expiry, SystemClock, is_live};
use mnemon_db::sqlite::{
    self, ConnGuard, ConnMutex, Migration, ReadGuard, ReadPool, Schema, Settings, Shared,
    WriteQueue, WriteTurn,
};
use mnemon_db::{DbError, Durability, Namespace};
use mnemon_filter::{Dialect, Filter, SqlParam};
use mnemon_types::{Artifact, StorageLocation, artifact::Timestamp};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use crate::store::{
    ArtifactSweep, CONTENT_BATCH, ListedArtifact, Narrow, PageQuery, check_filter, check_required,
    prefix_end, sqlite_source,
};
use crate::{ArtifactError, ArtifactStore, BackendRegistry};

/// Every table is prefixed `artifact_`, because the database file is shared with other Mnemon
/// components.
static SCHEMA: Schema = Schema {
    component: "artifact",
    table: "artifact_schema",
    key_column: "singleton",
    migrations: &[
        V1,
        V2,
        Migration {
            version: 3,
            sql: SCHEMA_V3,
        },
        // Version 4 rebuilds documents PostgreSQL left out (its `SCHEMA_V4`); SQLite filters
        // the stored text itself and has none to rebuild. Kept so both number alike.
        Migration {
            version: 4,
            sql: "",
        },
        Migration {
            version: 5,
            sql: SCHEMA_V5,
        },
    ],
};

/// Version 5: a scope's records in save order, so a listing page reads only its own records
/// (`ArtifactStore::list_page`), as on PostgreSQL.
const SCHEMA_V5: &str =
    "CREATE INDEX artifact_records_by_scope ON artifact_records (namespace, scope, seq);";

const V2: Migration = Migration {
    version: 2,
    sql: SCHEMA_V2,
};

/// Version 3: when each record expires (NULL: never, as for every record saved before), a
/// partial index for the sweep, and an index on the storage location, which a sweep checks
/// before removing content.
const SCHEMA_V3: &str = "
ALTER TABLE artifact_records ADD COLUMN expires_at INTEGER;
CREATE INDEX artifact_records_by_expiry ON artifact_records (namespace, expires_at)
  WHERE expires_at IS NOT NULL;
CREATE INDEX artifact_records_by_storage ON artifact_records (storage_backend, storage_id)
  WHERE storage_backend IS NOT NULL;
";

/// Version 1 is written with `IF NOT EXISTS` because files from before `mnemon-db` may have its
/// tables without a version row.
const V1: Migration = Migration {
    version: 1,
    sql: "
CREATE TABLE IF NOT EXISTS artifact_records (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    scope           TEXT NOT NULL,
    key             TEXT NOT NULL,
    artifact_type   TEXT NOT NULL,
    name            TEXT NOT NULL,
    description     TEXT NOT NULL,
    storage_backend TEXT,
    storage_id      TEXT,
    data            TEXT,
    created_at      TEXT NOT NULL,
    CHECK ((storage_backend IS NULL) = (storage_id IS NULL))
);
CREATE INDEX IF NOT EXISTS artifact_records_by_key ON artifact_records (scope, key, seq);
CREATE INDEX IF NOT EXISTS artifact_records_by_type ON artifact_records (scope, artifact_type, seq);
",
};

/// Version 2: every record belongs to a namespace (`mnemon_db::Namespace`), and an id is unique
/// within its namespace. SQLite cannot change a table's constraints in place, so the table is
/// rebuilt: every record carries over with its sequence into the default namespace, and the
/// `AUTOINCREMENT` counter carries over too, so the values of deleted records are still never
/// reused (renaming the table renames its `sqlite_sequence` row).
const SCHEMA_V2: &str = "
CREATE TABLE artifact_records_v2 (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace       TEXT NOT NULL,
    id              TEXT NOT NULL,
    scope           TEXT NOT NULL,
    key             TEXT NOT NULL,
    artifact_type   TEXT NOT NULL,
    name            TEXT NOT NULL,
    description     TEXT NOT NULL,
    storage_backend TEXT,
    storage_id      TEXT,
    data            TEXT,
    created_at      TEXT NOT NULL,
    UNIQUE (namespace, id),
    CHECK ((storage_backend IS NULL) = (storage_id IS NULL))
);
INSERT INTO artifact_records_v2 (seq, namespace, id, scope, key, artifact_type, name,
    description, storage_backend, storage_id, data, created_at)
  SELECT seq, 'default', id, scope, key, artifact_type, name, description, storage_backend,
    storage_id, data, created_at FROM artifact_records;
DELETE FROM sqlite_sequence WHERE name = 'artifact_records_v2';
INSERT INTO sqlite_sequence (name, seq)
  SELECT 'artifact_records_v2', seq FROM sqlite_sequence WHERE name = 'artifact_records';
DROP TABLE artifact_records;
ALTER TABLE artifact_records_v2 RENAME TO artifact_records;
CREATE INDEX artifact_records_by_key ON artifact_records (namespace, scope, key, seq);
CREATE INDEX artifact_records_by_type ON artifact_records (namespace, scope, artifact_type, seq);
";

const COLUMNS: &str = "id, key, artifact_type, name, description, storage_backend, storage_id, data, scope, created_at";

/// [`COLUMNS`] with the inline content left out (`NULL`): what a listing page reads.
const LISTED_COLUMNS: &str = "id, key, artifact_type, name, description, storage_backend, storage_id, NULL, scope, created_at";

/// An [`ArtifactStore`] in a SQLite database file.
///
/// - WAL journal with the default [`Durability::Full`] (`synchronous = FULL`): when
///   [`save`](ArtifactStore::save) returns, the record is committed and synced, so it survives
///   a crash of the process or the machine. [`SqliteArtifactOptions`] chooses another.
/// - The sequence is SQLite's `AUTOINCREMENT` rowid, which never reuses a value, even after
///   deletes.
/// - Several processes may open the same file; writers wait for each other up to the busy
///   timeout (5 s by default).
///   [`save_with_content`](ArtifactStore::save_with_content) holds the write lock while the
///   content is written, so saves to one storage id from several processes are serialized.
///
/// A store is opened for one namespace ([`SqliteArtifactOptions::namespace`]): every record
/// carries it and every statement is bound to it, so no call through the handle reads, lists
/// or deletes another namespace's records (the same id may exist in two namespaces). Files
/// written before namespaces hold the default namespace's records.
#[derive(Debug)]
pub struct SqliteArtifactStore {
    connections: Arc<Connections>,
    busy_timeout: Duration,
    namespace: Namespace,
    /// The file predates namespaces (a version-1 file opened read-only): every record is the
    /// default namespace's.
    before_namespaces: bool,
    /// The file has version 3's `expires_at` (a version-1 or 2 file opened read-only has not:
    /// nothing in it expires).
    has_expiry: bool,
    default_ttl: Option<Duration>,
    clock: Arc<dyn Clock>,
}

/// Options for [`SqliteArtifactStore::open_with`]; the defaults are every store's
/// (`mnemon_db`).
#[derive(Debug, Clone)]
pub struct SqliteArtifactOptions {
    /// How hard a commit works to survive crashes. Default: [`Durability::Full`].
    pub durability: Durability,
    /// How long a write waits for another process's write. Default: 5 s.
    pub busy_timeout: Duration,
    /// The tenant the store is opened for. Default: [`Namespace::default()`], which holds every
    /// record written before namespaces.
    pub namespace: Namespace,
    /// How long a record saved with [`Expiry::Default`] (every `save`) lives: the
    /// namespace's default time-to-live, for this handle. Default: `None`, forever.
    pub default_ttl: Option<Duration>,
    /// The clock that decides what has expired. Default: [`SystemClock`].
    pub clock: Arc<dyn Clock>,
}

impl Default for SqliteArtifactOptions {
    fn default() -> Self {
        let shared = Settings::default();
        SqliteArtifactOptions {
            durability: shared.durability,
            busy_timeout: shared.busy_timeout,
            namespace: Namespace::default(),
            default_ttl: None,
            clock: Arc::new(SystemClock),
        }
    }
}

impl SqliteArtifactOptions {
    fn settings(&self) -> Settings {
        Settings {
            durability: self.durability,
            busy_timeout: self.busy_timeout,
            ..Settings::default()
        }
    }
}

impl SqliteArtifactStore {
    /// Opens (creating if needed) the database at `path` and its `artifact_` tables, with the
    /// default options. The parent directory must exist.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ArtifactError> {
        Self::open_with(path, SqliteArtifactOptions::default())
    }

    /// As [`open`](Self::open), with `options`.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: SqliteArtifactOptions,
    ) -> Result<Self, ArtifactError> {
        let settings = options.settings();
        let path = path.as_ref();
        let connections = SHARED
            .get_or_open(path, settings, || {
                let conn = sqlite::open(path, &settings, &SCHEMA)?;
                // After `open`: the file exists, in WAL mode, with the current schema.
                Ok(Connections {
                    conn: ConnMutex::new(conn),
                    writers: Some(WriteQueue::for_file(path)),
                    readers: Some(ReadPool::open(path, &settings)?),
                })
            })
            .map_err(db_error)?;
        Ok(Self::with(
            connections,
            &settings,
            options,
            SCHEMA.version(),
        ))
    }

    /// Opens the database at `path` for reading only: no write lock is taken, nothing is
    /// created, and a read-only directory or mount works. A missing file, or one without
    /// artifact tables, reads as empty. Saves and deletes fail. The default namespace's
    /// records are read; [`open_read_only_with`](Self::open_read_only_with) chooses another.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, ArtifactError> {
        Self::open_read_only_with(path, SqliteArtifactOptions::default())
    }

    /// As [`open_read_only`](Self::open_read_only), with `options` (the durability does not
    /// matter to a reader). A file from before namespaces is read as it is, all of it the
    /// default namespace's: a reader cannot migrate it.
    pub fn open_read_only_with(
        path: impl AsRef<Path>,
        options: SqliteArtifactOptions,
    ) -> Result<Self, ArtifactError> {
        let settings = options.settings();
        let path = path.as_ref();
        // A file of an older version cannot be migrated without writing: it is read as it is,
        // with what its version has (before namespaces, all of it the default namespace's;
        // before expiry, nothing expires).
        let (read, found) =
            sqlite::open_read_only_any_version(path, &settings, &SCHEMA).map_err(db_error)?;
        Ok(Self::with(
            Connections::one(read.conn),
            &settings,
            options,
            found,
        ))
    }

    /// A private database in memory, for tests and short-lived programs; nothing is kept.
    pub fn open_in_memory() -> Result<Self, ArtifactError> {
        let settings = Settings::default();
        let conn = sqlite::open_in_memory(&settings, &SCHEMA).map_err(db_error)?;
        Ok(Self::with(
            Connections::one(conn),
            &settings,
            SqliteArtifactOptions::default(),
            SCHEMA.version(),
        ))
    }

    /// As [`open_in_memory`](Self::open_in_memory), with `options` (the namespace, default
    /// time-to-live and clock; the durability does not matter in memory).
    pub fn open_in_memory_with(options: SqliteArtifactOptions) -> Result<Self, ArtifactError> {
        let settings = options.settings();
        let conn = sqlite::open_in_memory(&settings, &SCHEMA).map_err(db_error)?;
        Ok(Self::with(
            Connections::one(conn),
            &settings,
            options,
            SCHEMA.version(),
        ))
    }

    /// A store on `connections`, whose artifact tables are at `schema`'s version.
    fn with(
        connections: Arc<Connections>,
        settings: &Settings,
        options: SqliteArtifactOptions,
        version: i64,
    ) -> Self {
        SqliteArtifactStore {
            connections,
            busy_timeout: settings.busy_timeout,
            namespace: options.namespace,
            // Version 2 brought namespaces, version 3 expiry.
            before_namespaces: version < 2,
            has_expiry: version >= 3,
            default_ttl: options.default_ttl,
            clock: options.clock,
        }
    }

    /// The condition that keeps a statement to live records, the time bound as `?{n}`: on a
    /// file from before expiry (read-only) every record is live, and the parameter is still
    /// referenced so that the statement's parameter count does not change.
    fn live(&self, n: usize) -> String {
        if self.has_expiry {
            format!("(expires_at IS NULL OR expires_at > ?{n})")
        } else {
            format!("(?{n} IS NOT NULL)")
        }
    }

    fn now(&self) -> i64 {
        self.clock.now_millis()
    }

    /// `SELECT {what} FROM artifact_records` over the live records of `scope` (all for
    /// `None`) matching `filter` and `narrow`, in save order, with its parameters.
    fn filtered(
        &self,
        what: &str,
        scope: Option<&str>,
        filter: Option<&Filter>,
        limit: Option<usize>,
        narrow: Narrow<'_>,
    ) -> Result<(String, Vec<SqlValue>), ArtifactError> {
        let mut params = vec![
            SqlParam::Text(self.namespace.as_str().to_owned()),
            SqlParam::Integer(self.now()),
        ];
        let mut sql = format!(
            "SELECT {what} FROM artifact_records WHERE {{ns}} AND {}",
            self.live(2)
        );
        if let Some(scope) = scope {
            params.push(SqlParam::Text(scope.to_owned()));
            sql.push_str(&format!(" AND scope = ?{}", params.len()));
        }
        if let Some(artifact_type) = narrow.artifact_type {
            params.push(SqlParam::Text(artifact_type.to_owned()));
            sql.push_str(&format!(" AND artifact_type = ?{}", params.len()));
        }
        if let Some(seq) = narrow.after_seq {
            params.push(SqlParam::Integer(seq));
            sql.push_str(&format!(" AND seq > ?{}", params.len()));
        }
        if let Some(filter) = filter {
            let has_expiry = self.has_expiry;
            let resolver = move |field: &str| sqlite_source(field, has_expiry);
            let condition = filter.to_sql(Dialect::Sqlite, &resolver, &mut params)?;
            sql.push_str(&format!(" AND ({condition})"));
        }
        sql.push_str(" ORDER BY seq");
        if let Some(limit) = limit {
            params.push(SqlParam::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
            sql.push_str(&format!(" LIMIT ?{}", params.len()));
        }
        let params = params
            .into_iter()
            .map(|p| match p {
                SqlParam::Text(t) => SqlValue::Text(t),
                SqlParam::Integer(i) => SqlValue::Integer(i),
                SqlParam::Real(r) => SqlValue::Real(r),
            })
            .collect();
        Ok((self.in_namespace(&sql), params))
    }

    /// The statement of a listing page after the record whose sequence value is `after_seq`,
    /// with its parameters: [`LISTED_COLUMNS`] and the expiry.
    fn page_statement(
        &self,
        query: &PageQuery<'_>,
        after_seq: Option<i64>,
    ) -> Result<(String, Vec<SqlValue>), ArtifactError> {
        let expires = if self.has_expiry {
            "expires_at"
        } else {
            "NULL"
        };
        self.filtered(
            &format!("{LISTED_COLUMNS}, {expires}"),
            query.scope,
            query.filter,
            Some(query.limit),
            Narrow::of_page(query, after_seq),
        )
    }

    /// Deletes the namespace's records that `condition` selects (`?1` the namespace, then
    /// `params`) in one transaction, then their content as the module docs say.
    fn remove_where(
        &self,
        condition: &str,
        params: &[&dyn rusqlite::ToSql],
        backends: &BackendRegistry,
        action: &'static str,
    ) -> Result<ArtifactSweep, ArtifactError> {
        let ns = self.namespace.as_str();
        let mut all: Vec<&dyn rusqlite::ToSql> = vec![&ns];
        all.extend_from_slice(params);
        let (private, namespace) = (backends.is_private_to_namespace(), ns);
        // The records' transaction holds the connection and a turn of its own, and so does
        // each content batch below, so that other writers to the file (other stores, other
        // namespaces' saves on this shared connection) go between them.
        let conn = self.writer(action)?;
        let turn = self.write_turn(action)?;
        sqlite::begin_immediate(&conn, self.busy_timeout)
            .map_err(|e| ArtifactError::database(action, e))?;
        let deleted = (|| {
            let mut statement = conn.prepare_cached(&format!(
                "DELETE FROM artifact_records WHERE namespace = ?1 AND {condition} \
                 RETURNING storage_backend, storage_id"
            ))?;
            let rows = statement.query_map(all.as_slice(), |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?,
                    r.get::<_, Option<String>>(1)?,
                ))
            })?;
            rows.collect::<Result<Vec<_>, _>>()
        })();
        let finish = if deleted.is_ok() {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        let finished = conn.execute_batch(finish);
        if finished.is_err() && !conn.is_autocommit() {
            // Best effort, as in a save: the error below says what failed.
            let _ = conn.execute_batch("ROLLBACK");
        }
        drop(turn);
        let deleted = deleted.map_err(|e| ArtifactError::database(action, e))?;
        finished.map_err(|e| ArtifactError::database(action, e))?;
        let mut sweep = ArtifactSweep {
            records: deleted.len() as u64,
            ..ArtifactSweep::default()
        };
        let locations: Vec<StorageLocation> = deleted
            .into_iter()
            .filter_map(|(backend, id)| Some((backend?, id?)))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(|(backend, id)| StorageLocation { backend, id })
            .collect();
        drop(conn);
        for batch in locations.chunks(CONTENT_BATCH) {
            // Under the write lock, as a save writes content: no save to these locations can
            // commit between the check and the removal.
            let held = self.writer(action).and_then(|conn| {
                let turn = self.write_turn(action)?;
                sqlite::begin_immediate(&conn, self.busy_timeout)
                    .map_err(|e| ArtifactError::database(action, e))?;
                Ok((conn, turn))
            });
            let (conn, turn) = match held {
                Ok(held) => held,
                Err(e) => {
                    for location in batch {
                        sweep
                            .content_errors
                            .push(format!("{}:{}: {e}", location.backend, location.id));
                    }
                    continue;
                }
            };
            let mut unshared = Vec::new();
            for location in batch {
                // A namespace-private registry's content is this namespace's alone: only its
                // records can share it (`?3`); otherwise any namespace's record may.
                let shared = conn
                    .prepare_cached(
                        "SELECT EXISTS (SELECT 1 FROM artifact_records \
                         WHERE storage_backend = ?1 AND storage_id = ?2 \
                           AND (?3 IS NULL OR namespace = ?3))",
                    )
                    .and_then(|mut s| {
                        s.query_row(
                            params![
                                &location.backend,
                                &location.id,
                                private.then_some(namespace)
                            ],
                            |r| r.get::<_, bool>(0),
                        )
                    });
                match shared {
                    Ok(true) => sweep.content_shared += 1,
                    Ok(false) => unshared.push(location.clone()),
                    Err(e) => sweep
                        .content_errors
                        .push(format!("{}:{}: {e}", location.backend, location.id)),
                }
            }
            sweep.remove_contents(&unshared, backends);
            // Nothing was written: ending the transaction releases the lock.
            let _ = conn.execute_batch("ROLLBACK");
            drop(conn);
            drop(turn);
        }
        Ok(sweep)
    }

    /// The namespace (tenant) the store was opened for.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// `sql` with `{ns}` replaced by the condition that keeps a statement inside the store's
    /// namespace (bound as `?1`): the column on a current file; on a file from before
    /// namespaces (read-only), everything belongs to the default namespace.
    fn in_namespace(&self, sql: &str) -> String {
        let condition = if self.before_namespaces {
            "?1 = 'default'"
        } else {
            "namespace = ?1"
        };
        sql.replace("{ns}", condition)
    }

    /// This store's turn to write among the process's writers to the file
    /// (`mnemon_db::sqlite::WriteQueue`), taken with the write connection already held (the
    /// handles of every namespace on the file share it, and a turn must never wait for it);
    /// `None` for a store in memory or opened read-only, which has no file to share.
    fn write_turn(&self, action: &'static str) -> Result<Option<WriteTurn>, ArtifactError> {
        self.connections
            .writers
            .as_ref()
            .map(|queue| queue.take_turn(self.busy_timeout))
            .transpose()
            .map_err(|e| ArtifactError::database(action, e))
    }

    /// The write connection (for a store in memory or opened read-only, its only one), however
    /// long it takes: for reads on that one connection.
    fn conn(&self) -> ConnGuard<'_> {
        // A panic while holding the lock cannot leave a half-applied change: SQLite rolls back
        // any statement or transaction that did not complete.
        self.connections.conn.lock()
    }

    /// The write connection for a write, waited for up to the busy timeout: the handles of
    /// every namespace on the file share it, and one namespace's long sweep must not hold the
    /// others' saves for as long as it runs.
    fn writer(&self, action: &'static str) -> Result<ConnGuard<'_>, ArtifactError> {
        self.connections
            .conn
            .try_lock_for(self.busy_timeout)
            .ok_or_else(|| {
                ArtifactError::database(
                    action,
                    format!(
                        "the artifact store's write connection stayed busy for {:?} (another \
                         save or sweep on the same database file held it); nothing was \
                         written, so it can be retried",
                        self.busy_timeout
                    ),
                )
            })
    }

    /// A connection for a read alone: one of the file's readers, which never wait for a save,
    /// or the store's only connection.
    fn reader(&self) -> Result<ReadGuard<'_>, ArtifactError> {
        Ok(match &self.connections.readers {
            Some(readers) => readers.take().map_err(db_error)?,
            None => self.conn().into(),
        })
    }

    fn query_many(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
        action: &'static str,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        let conn = self.reader()?;
        let mut stmt = conn
            .prepare_cached(&self.in_namespace(sql))
            .map_err(|e| ArtifactError::database(action, e))?;
        let rows = stmt
            .query_map(params, read_row)
            .map_err(|e| ArtifactError::database(action, e))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(|e| ArtifactError::database(action, e))??);
        }
        Ok(out)
    }
}

/// The connections of a store handle: those of every writable handle on the same file with
/// the same settings ([`SHARED`]), or the one connection of a store in memory or opened
/// read-only.
#[derive(Debug)]
struct Connections {
    /// Saves and deletes (and everything, without `readers`).
    conn: ConnMutex,
    /// The process's writers to the file: a write takes its turn here once it holds `conn`.
    writers: Option<Arc<WriteQueue>>,
    readers: Option<ReadPool>,
}

impl Connections {
    /// `conn` alone, for reads and writes, taking no turns: a store in memory or read-only.
    fn one(conn: Connection) -> Arc<Connections> {
        Arc::new(Connections {
            conn: ConnMutex::new(conn),
            writers: None,
            readers: None,
        })
    }
}

/// The writable stores' connections alive in this process, per file and settings.
static SHARED: Shared<Settings, Connections> = Shared::new();

/// The raw columns of one row, decoded into a record outside rusqlite's error type so that a
/// damaged row gets a [`ArtifactError::CorruptRecord`] naming it.
fn read_row(row: &Row<'_>) -> rusqlite::Result<Result<Artifact, ArtifactError>> {
    let id: String = row.get(0)?;
    let storage_backend: Option<String> = row.get(5)?;
    let storage_id: Option<String> = row.get(6)?;
    let data: Option<String> = row.get(7)?;
    let created_at: String = row.get(9)?;
    let corrupt = |reason: String| ArtifactError::CorruptRecord {
        id: id.clone(),
        reason,
    };
    let decoded = (|| {
        let uuid = Uuid::parse_str(&id).map_err(|e| corrupt(format!("bad id: {e}")))?;
        let data = data
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|e| corrupt(format!("bad data JSON: {e}")))?;
        let created_at: Timestamp = created_at
            .parse()
            .map_err(|e| corrupt(format!("bad created_at: {e}")))?;
        let storage = match (storage_backend, storage_id) {
            (Some(backend), Some(id)) => Some(StorageLocation { backend, id }),
            _ => None,
        };
        Ok(Artifact {
            id: uuid,
            key: row.get(1).map_err(|e| corrupt(e.to_string()))?,
            artifact_type: row.get(2).map_err(|e| corrupt(e.to_string()))?,
            name: row.get(3).map_err(|e| corrupt(e.to_string()))?,
            description: row.get(4).map_err(|e| corrupt(e.to_string()))?,
            storage,
            data,
            scope: row.get(8).map_err(|e| corrupt(e.to_string()))?,
            created_at,
        })
    })();
    Ok(decoded)
}

/// The artifact error for a setup failure: a newer schema keeps its own variant.
fn db_error(error: DbError) -> ArtifactError {
    match error {
        DbError::SchemaTooNew {
            found, supported, ..
        } => ArtifactError::SchemaTooNew { found, supported },
        DbError::Open { path, detail } => ArtifactError::database(
            "opening the database",
            format!("cannot open {}: {detail}", path.display()),
        ),
        DbError::Setup { detail, .. } | DbError::Migration { detail, .. } => {
            ArtifactError::database("setting up the database", detail)
        }
        other => ArtifactError::database("opening the database", other),
    }
}

/// Inserts one record inside the caller's transaction and returns its sequence.
fn insert(
    conn: &Connection,
    namespace: &Namespace,
    artifact: &Artifact,
    data: Option<String>,
    expires_at: Option<i64>,
) -> Result<u64, ArtifactError> {
    const ACTION: &str = "saving an artifact";
    let inserted = conn
        .prepare_cached(&format!(
            "INSERT INTO artifact_records ({COLUMNS}, namespace, expires_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) RETURNING seq"
        ))
        .and_then(|mut stmt| {
            stmt.query_row(
                params![
                    artifact.id.to_string(),
                    artifact.key,
                    artifact.artifact_type,
                    artifact.name,
                    artifact.description,
                    artifact.storage.as_ref().map(|s| s.backend.as_str()),
                    artifact.storage.as_ref().map(|s| s.id.as_str()),
                    data,
                    artifact.scope,
                    artifact.created_at.to_string(),
                    namespace.as_str(),
                    expires_at,
                ],
                |row| row.get::<_, i64>(0),
            )
        });
    match inserted {
        Ok(seq) => u64::try_from(seq).map_err(|_| {
            ArtifactError::database(ACTION, format!("SQLite returned a negative sequence {seq}"))
        }),
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE =>
        {
            Err(ArtifactError::DuplicateId { id: artifact.id })
        }
        Err(e) => Err(ArtifactError::database(ACTION, e)),
    }
}

/// The namespace's scopes (`{ns}`: see `in_namespace`; `{live}`: see `live`, the time bound
/// as `?2`), by a loose index scan: one seek of an index led by (namespace, scope) per scope
/// for the next greater one holding a live record, rather than a read of every record.
const SCOPES: &str = "WITH RECURSIVE s(scope) AS (
    SELECT (SELECT scope FROM artifact_records WHERE {ns} AND {live}
            ORDER BY scope LIMIT 1)
    UNION ALL
    SELECT (SELECT scope FROM artifact_records WHERE {ns} AND scope > s.scope AND {live}
            ORDER BY scope LIMIT 1)
    FROM s WHERE s.scope IS NOT NULL)
  SELECT scope FROM s WHERE scope IS NOT NULL";

impl ArtifactStore for SqliteArtifactStore {
    fn save(&self, artifact: &Artifact) -> Result<u64, ArtifactError> {
        self.save_with_content(artifact, &mut || Ok(()))
    }

    fn save_with_content(
        &self,
        artifact: &Artifact,
        write_content: &mut dyn FnMut() -> Result<(), ArtifactError>,
    ) -> Result<u64, ArtifactError> {
        self.save_expiring(artifact, Expiry::Default, write_content)
    }

    fn save_expiring(
        &self,
        artifact: &Artifact,
        expiry: Expiry,
        write_content: &mut dyn FnMut() -> Result<(), ArtifactError>,
    ) -> Result<u64, ArtifactError> {
        const ACTION: &str = "saving an artifact";
        check_required(artifact)?;
        let expires_at = expiry.deadline(self.now(), self.default_ttl);
        let data = artifact
            .data
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(ArtifactError::ContentEncoding)?;
        // The connection before the turn: a writer holding the file's turn must never wait
        // for this connection (held by the other namespaces' saves waiting for their turn).
        let conn = self.writer(ACTION)?;
        let _turn = self.write_turn(ACTION)?;
        // The write lock is taken before the content is written and released after the record
        // is committed: another save (in this process or another) cannot write the same
        // storage id in between, so the newest record always points at its own content.
        sqlite::begin_immediate(&conn, self.busy_timeout)
            .map_err(|e| ArtifactError::database(ACTION, e))?;
        let result = write_content()
            .and_then(|()| insert(&conn, &self.namespace, artifact, data, expires_at));
        let finish = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        let finished = conn.execute_batch(finish);
        if finished.is_err() && !conn.is_autocommit() {
            // Best effort: the error returned below says what failed, and a transaction left
            // open would be rolled back when the connection closes anyway.
            let _ = conn.execute_batch("ROLLBACK");
        }
        let seq = result?;
        finished.map_err(|e| ArtifactError::database(ACTION, e))?;
        Ok(seq)
    }

    fn expires_at(&self, id: Uuid) -> Result<Option<Option<i64>>, ArtifactError> {
        let expires = if self.has_expiry {
            "expires_at"
        } else {
            "NULL"
        };
        let sql = self.in_namespace(&format!(
            "SELECT {expires} FROM artifact_records WHERE {{ns}} AND id = ?2 AND {}",
            self.live(3)
        ));
        let conn = self.reader()?;
        conn.prepare_cached(&sql)
            .and_then(|mut s| {
                s.query_row(
                    params![self.namespace.as_str(), id.to_string(), self.now()],
                    |r| r.get(0),
                )
                .optional()
            })
            .map_err(|e| ArtifactError::database("reading an expiry", e))
    }

    fn list_where(
        &self,
        scope: Option<&str>,
        filter: Option<&Filter>,
        limit: Option<usize>,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        let (sql, params) = self.filtered(COLUMNS, scope, filter, limit, Narrow::default())?;
        let params: Vec<&dyn rusqlite::ToSql> =
            params.iter().map(|p| p as &dyn rusqlite::ToSql).collect();
        // `sql` is already in the namespace; `query_many` finds no `{ns}` in it.
        self.query_many(&sql, &params, "listing artifacts")
    }

    fn count_where(
        &self,
        scope: Option<&str>,
        filter: Option<&Filter>,
    ) -> Result<u64, ArtifactError> {
        const ACTION: &str = "counting artifacts";
        let (sql, params) = self.filtered("count(*)", scope, filter, None, Narrow::default())?;
        let conn = self.reader()?;
        let n: i64 = conn
            .prepare_cached(&sql)
            .and_then(|mut s| s.query_row(rusqlite::params_from_iter(params), |r| r.get(0)))
            .map_err(|e| ArtifactError::database(ACTION, e))?;
        Ok(n.max(0) as u64)
    }

    fn gc(&self, backends: &BackendRegistry) -> Result<ArtifactSweep, ArtifactError> {
        self.remove_where(
            "expires_at <= ?2",
            &[&self.now()],
            backends,
            "removing expired artifacts",
        )
    }

    fn forget(
        &self,
        scope_prefix: &str,
        backends: &BackendRegistry,
    ) -> Result<ArtifactSweep, ArtifactError> {
        const ACTION: &str = "forgetting artifacts";
        match (scope_prefix, prefix_end(scope_prefix)) {
            ("", _) => self.remove_where("TRUE", &[], backends, ACTION),
            (_, Some(end)) => self.remove_where(
                "scope >= ?2 AND scope < ?3",
                &[&scope_prefix, &end],
                backends,
                ACTION,
            ),
            (_, None) => self.remove_where("scope >= ?2", &[&scope_prefix], backends, ACTION),
        }
    }

    fn get(&self, id: Uuid) -> Result<Option<Artifact>, ArtifactError> {
        let mut found = self.query_many(
            &format!(
                "SELECT {COLUMNS} FROM artifact_records WHERE {{ns}} AND id = ?2 AND {}",
                self.live(3)
            ),
            &[&self.namespace.as_str(), &id.to_string(), &self.now()],
            "reading an artifact",
        )?;
        Ok(found.pop())
    }

    fn latest(&self, scope: &str, key: &str) -> Result<Option<Artifact>, ArtifactError> {
        let mut found = self.query_many(
            &format!(
                "SELECT {COLUMNS} FROM artifact_records WHERE {{ns}} AND scope = ?2 AND key = ?3 \
                 AND {} ORDER BY seq DESC LIMIT 1",
                self.live(4)
            ),
            &[&self.namespace.as_str(), &scope, &key, &self.now()],
            "looking up the latest artifact",
        )?;
        Ok(found.pop())
    }

    fn list(
        &self,
        scope: &str,
        artifact_type: Option<&str>,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        match artifact_type {
            Some(t) => self.query_many(
                &format!(
                    "SELECT {COLUMNS} FROM artifact_records \
                     WHERE {{ns}} AND scope = ?2 AND artifact_type = ?3 AND {} ORDER BY seq",
                    self.live(4)
                ),
                &[&self.namespace.as_str(), &scope, &t, &self.now()],
                "listing artifacts",
            ),
            None => self.query_many(
                &format!(
                    "SELECT {COLUMNS} FROM artifact_records WHERE {{ns}} AND scope = ?2 \
                     AND {} ORDER BY seq",
                    self.live(3)
                ),
                &[&self.namespace.as_str(), &scope, &self.now()],
                "listing artifacts",
            ),
        }
    }

    fn scopes(&self) -> Result<Vec<String>, ArtifactError> {
        const ACTION: &str = "listing the artifact scopes";
        // One index probe per scope (`artifact_records_by_key` leads with namespace and
        // scope: `min` of the next scope is a seek), not a read of every record.
        let sql = self.in_namespace(&SCOPES.replace("{live}", &self.live(2)));
        let conn = self.reader()?;
        let mut stmt = conn
            .prepare_cached(&sql)
            .map_err(|e| ArtifactError::database(ACTION, e))?;
        let rows = stmt
            .query_map(params![self.namespace.as_str(), self.now()], |row| {
                row.get::<_, String>(0)
            })
            .map_err(|e| ArtifactError::database(ACTION, e))?;
        rows.map(|row| row.map_err(|e| ArtifactError::database(ACTION, e)))
            .collect()
    }

    fn delete(&self, id: Uuid) -> Result<bool, ArtifactError> {
        const ACTION: &str = "deleting an artifact";
        // An expired record is removed too, but reported absent, as reads report it.
        let conn = self.writer(ACTION)?;
        let _turn = self.write_turn(ACTION)?;
        let removed: Option<Option<i64>> = conn
            .prepare_cached(
                "DELETE FROM artifact_records WHERE namespace = ?1 AND id = ?2 \
                 RETURNING expires_at",
            )
            .and_then(|mut s| {
                s.query_row([self.namespace.as_str(), &id.to_string()], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| ArtifactError::database(ACTION, e))?;
        Ok(removed.is_some_and(|at| is_live(at, self.now())))
    }

    fn list_page(
        &self,
        query: &PageQuery<'_>,
    ) -> Result<Option<Vec<ListedArtifact>>, ArtifactError> {
        const ACTION: &str = "listing a page of artifacts";
        // A bad filter is refused before the cursor is looked up, as on every backend.
        if let Some(filter) = query.filter {
            check_filter(filter)?;
        }
        let conn = self.reader()?;
        let after_seq =
            match query.after {
                None => None,
                // The cursor's record holds its place while it is stored, live or not.
                Some(after) => {
                    let seq: Option<i64> = conn
                        .prepare_cached(&self.in_namespace(
                            "SELECT seq FROM artifact_records WHERE {ns} AND id = ?2",
                        ))
                        .and_then(|mut s| {
                            s.query_row(params![self.namespace.as_str(), after.to_string()], |r| {
                                r.get(0)
                            })
                            .optional()
                        })
                        .map_err(|e| ArtifactError::database(ACTION, e))?;
                    match seq {
                        Some(seq) => Some(seq),
                        None => return Ok(None),
                    }
                }
            };
        let (sql, params) = self.page_statement(query, after_seq)?;
        let mut stmt = conn
            .prepare_cached(&sql)
            .map_err(|e| ArtifactError::database(ACTION, e))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(params), |row| {
                Ok((read_row(row)?, row.get::<_, Option<i64>>(10)?))
            })
            .map_err(|e| ArtifactError::database(ACTION, e))?;
        let mut page = Vec::new();
        for row in rows {
            let (artifact, expires_at) = row.map_err(|e| ArtifactError::database(ACTION, e))?;
            page.push(ListedArtifact {
                artifact: artifact?,
                expires_at,
            });
        }
        Ok(Some(page))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listing page costs steps for its own records, not for those before it: ten records
    /// of one scope after its 900th, among 4,000 records in four scopes (and 2,000 of another
    /// namespace), take under 300 steps, where reading the scope from its start takes
    /// thousands.
    #[test]
    fn a_page_steps_over_its_own_records_only() {
        let store = SqliteArtifactStore::open_in_memory().unwrap();
        let mut cursor = None;
        {
            let conn = store.conn();
            let tx = conn.unchecked_transaction().unwrap();
            for i in 0..6000 {
                let namespace = if i < 4000 { "default" } else { "other" };
                let mut artifact = Artifact::new(format!("s{}", i % 4), format!("k{i}"), "t", "n");
                artifact.id = Uuid::now_v7();
                insert(&tx, &namespace.parse().unwrap(), &artifact, None, None).unwrap();
                if i == 4 * 900 + 1 {
                    cursor = Some(artifact.id);
                }
            }
            tx.commit().unwrap();
        }
        let query = PageQuery {
            scope: Some("s1"),
            after: cursor,
            limit: 10,
            ..PageQuery::default()
        };
        let page = store.list_page(&query).unwrap().unwrap();
        let keys: Vec<String> = page.into_iter().map(|l| l.artifact.key).collect();
        let expected: Vec<String> = (901..911).map(|n| format!("k{}", 4 * n + 1)).collect();
        assert_eq!(keys, expected);
        let conn = store.conn();
        let seq: i64 = conn
            .query_row(
                "SELECT seq FROM artifact_records WHERE id = ?1",
                [cursor.unwrap().to_string()],
                |r| r.get(0),
            )
            .unwrap();
        let (sql, params) = store.page_statement(&query, Some(seq)).unwrap();
        let mut statement = conn.prepare(&sql).unwrap();
        let rows = statement
            .query_map(rusqlite::params_from_iter(params), |_| Ok(()))
            .unwrap()
            .count();
        assert_eq!(rows, 10);
        let steps = statement.get_status(rusqlite::StatementStatus::VmStep);
        assert!(
            steps < 300,
            "{steps} steps for a page of 10 after 900 records"
        );
    }

    /// Listing the scopes costs a few virtual-machine steps per scope, not per record: 4,000
    /// records in four scopes (and 2,000 of another namespace) take under 200 steps, where a
    /// `SELECT DISTINCT` over the records takes thousands.
    #[test]
    fn scopes_step_per_scope_not_per_record() {
        let store = SqliteArtifactStore::open_in_memory().unwrap();
        {
            let conn = store.conn();
            let tx = conn.unchecked_transaction().unwrap();
            for i in 0..6000 {
                let namespace = if i < 4000 { "default" } else { "other" };
                let mut artifact = Artifact::new(format!("s{}", i % 4), "k", "t", "n");
                artifact.id = Uuid::now_v7();
                insert(&tx, &namespace.parse().unwrap(), &artifact, None, None).unwrap();
            }
            tx.commit().unwrap();
        }
        assert_eq!(store.scopes().unwrap(), ["s0", "s1", "s2", "s3"]);
        let conn = store.conn();
        let sql = store.in_namespace(&SCOPES.replace("{live}", &store.live(2)));
        let mut statement = conn.prepare(&sql).unwrap();
        let scopes: Vec<String> = statement
            .query_map(params!["default", store.now()], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(scopes.len(), 4);
        let steps = statement.get_status(rusqlite::StatementStatus::VmStep);
        assert!(steps < 200, "{steps} steps for 4 scopes of 4,000 records");
    }

    #[test]
    fn refuses_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        drop(SqliteArtifactStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.execute("UPDATE artifact_schema SET version = 99", [])
            .unwrap();
        drop(conn);
        let err = SqliteArtifactStore::open(&path).unwrap_err();
        assert!(
            matches!(err, ArtifactError::SchemaTooNew { found: 99, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("upgrade mnemon"));
    }

    /// The handles of every namespace on one file share its connections and still see only
    /// their own records; reads go to the file's readers, never the write connection.
    #[test]
    fn namespaces_on_one_file_share_its_connections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let open = |namespace: &str| {
            let options = SqliteArtifactOptions {
                namespace: Namespace::new(namespace).unwrap(),
                busy_timeout: Duration::from_millis(200),
                ..SqliteArtifactOptions::default()
            };
            SqliteArtifactStore::open_with(&path, options).unwrap()
        };
        let (a, b) = (open("a"), open("b"));
        assert!(Arc::ptr_eq(&a.connections, &b.connections));
        let reader = SqliteArtifactStore::open_read_only(&path).unwrap();
        assert!(!Arc::ptr_eq(&a.connections, &reader.connections));
        a.save(&Artifact::new("s", "k", "t", "n")).unwrap();
        // While another namespace's handle holds the write connection (a long sweep), reads
        // are served by the readers, and a save waits no longer than the busy timeout, then
        // fails with an error that says to retry.
        let held = b.writer("sweeping").unwrap();
        assert_eq!(a.list("s", None).unwrap().len(), 1);
        assert!(b.list("s", None).unwrap().is_empty());
        let started = std::time::Instant::now();
        let error = a.save(&Artifact::new("s", "k2", "t", "n")).unwrap_err();
        assert!(error.to_string().contains("retried"), "{error}");
        assert!(started.elapsed() >= Duration::from_millis(150));
        drop(held);
        a.save(&Artifact::new("s", "k2", "t", "n")).unwrap();
        assert_eq!(a.list("s", None).unwrap().len(), 2);
    }

    #[test]
    fn file_database_is_in_wal_mode_with_full_sync() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteArtifactStore::open(dir.path().join("db.sqlite3")).unwrap();
        let conn = store.conn();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let sync: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 2, "synchronous must be FULL");
    }

    #[test]
    fn options_choose_the_durability() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteArtifactOptions {
            durability: Durability::Normal,
            ..SqliteArtifactOptions::default()
        };
        let store = SqliteArtifactStore::open_with(dir.path().join("db.sqlite3"), options).unwrap();
        let sync: i64 = store
            .conn()
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 1, "synchronous must be NORMAL");
    }

    #[test]
    fn concurrent_first_opens_all_succeed() {
        for round in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("db.sqlite3");
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let (path, barrier) = (path.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        SqliteArtifactStore::open(&path).map(drop)
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
    fn readers_work_while_another_connection_holds_a_write_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let a = Artifact::new("s", "k", "t", "n");
        SqliteArtifactStore::open(&path).unwrap().save(&a).unwrap();
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch("BEGIN IMMEDIATE; DELETE FROM artifact_records WHERE 0;")
            .unwrap();
        let started = std::time::Instant::now();
        let store = SqliteArtifactStore::open(&path).unwrap();
        assert_eq!(store.latest("s", "k").unwrap().map(|r| r.id), Some(a.id));
        let reader = SqliteArtifactStore::open_read_only(&path).unwrap();
        assert_eq!(reader.list("s", None).unwrap().len(), 1);
        // Under the 5 s busy timeout a reader queued behind the writer would wait out.
        assert!(started.elapsed() < Duration::from_millis(4500));
        writer.execute_batch("COMMIT").unwrap();
    }

    #[test]
    fn read_only_open_of_a_missing_file_is_empty_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let reader = SqliteArtifactStore::open_read_only(&path).unwrap();
        assert!(reader.list("s", None).unwrap().is_empty());
        assert!(reader.latest("s", "k").unwrap().is_none());
        let saved = reader.save(&Artifact::new("s", "k", "t", "n"));
        assert!(
            matches!(saved, Err(ArtifactError::Database { .. })),
            "{saved:?}"
        );
        drop(reader);
        assert!(!path.exists());
    }

    /// A file as a build from before namespaces wrote it (schema version 1) with two records,
    /// the later one deleted: returns the kept record and the deleted record's sequence.
    fn version_1_file(path: &Path) -> (Artifact, u64) {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(V1.sql).unwrap();
        conn.execute_batch(
            "CREATE TABLE artifact_schema (singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
                version INTEGER NOT NULL);
             INSERT INTO artifact_schema VALUES (1, 1);",
        )
        .unwrap();
        let kept = Artifact::new("s", "k", "t", "old").with_data(serde_json::json!({"a": 1}));
        let gone = Artifact::new("s", "k", "t", "deleted");
        let mut last = 0;
        for a in [&kept, &gone] {
            last = conn
                .query_row(
                    &format!(
                        "INSERT INTO artifact_records ({COLUMNS}) \
                         VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL, ?6, ?7, ?8) RETURNING seq"
                    ),
                    params![
                        a.id.to_string(),
                        a.key,
                        a.artifact_type,
                        a.name,
                        a.description,
                        a.data.as_ref().map(|d| d.to_string()),
                        a.scope,
                        a.created_at.to_string()
                    ],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap();
        }
        conn.execute(
            "DELETE FROM artifact_records WHERE id = ?1",
            [gone.id.to_string()],
        )
        .unwrap();
        (kept, u64::try_from(last).unwrap())
    }

    fn in_namespace(name: &str) -> SqliteArtifactOptions {
        SqliteArtifactOptions {
            namespace: name.parse().unwrap(),
            ..SqliteArtifactOptions::default()
        }
    }

    /// A file of every earlier version opens read-only, as it is (a reader cannot migrate):
    /// the previous release's files stay readable by `mnemon artifact list` and the other
    /// read-only paths until a writer migrates them.
    #[test]
    fn files_of_earlier_versions_open_read_only() {
        for version in 3..SCHEMA.version() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("db.sqlite3");
            let saved = Artifact::new("s", "k", "t", "kept").with_data(serde_json::json!(1));
            {
                let store = SqliteArtifactStore::open(&path).unwrap();
                store.save(&saved).unwrap();
            }
            let conn = Connection::open(&path).unwrap();
            // Back to `version`: what the later steps added is gone, as in such a file.
            if version < 5 {
                conn.execute_batch("DROP INDEX artifact_records_by_scope")
                    .unwrap();
            }
            conn.execute("UPDATE artifact_schema SET version = ?1", [version])
                .unwrap();
            drop(conn);
            let reader = SqliteArtifactStore::open_read_only(&path)
                .unwrap_or_else(|e| panic!("version {version}: {e}"));
            assert_eq!(reader.get(saved.id).unwrap().as_ref(), Some(&saved));
            let page = reader
                .list_page(&PageQuery {
                    scope: Some("s"),
                    limit: 10,
                    ..PageQuery::default()
                })
                .unwrap()
                .unwrap();
            assert_eq!(page.len(), 1, "version {version}");
        }
    }

    /// Issue 13, item 3: version 2 moves a file's records into the default namespace, and the
    /// sequence goes on above the deleted record's value (never reused).
    #[test]
    fn a_version_1_file_migrates_into_the_default_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let (kept, deleted_seq) = version_1_file(&path);
        let store = SqliteArtifactStore::open(&path).unwrap();
        assert_eq!(store.get(kept.id).unwrap().as_ref(), Some(&kept));
        assert_eq!(store.latest("s", "k").unwrap().as_ref(), Some(&kept));
        let next = store.save(&Artifact::new("s", "k", "t", "new")).unwrap();
        assert!(next > deleted_seq, "{next} <= {deleted_seq}");
        let other = SqliteArtifactStore::open_with(&path, in_namespace("acme")).unwrap();
        assert!(other.get(kept.id).unwrap().is_none());
        assert!(other.list("s", None).unwrap().is_empty());
        assert!(!other.delete(kept.id).unwrap());
        let version: i64 = store
            .conn()
            .query_row("SELECT version FROM artifact_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA.version());
    }

    /// Issue 13, item 3: a reader, which cannot migrate, reads a version-1 file as it is, all
    /// of it the default namespace's.
    #[test]
    fn a_version_1_file_reads_read_only_as_the_default_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let (kept, _) = version_1_file(&path);
        let reader = SqliteArtifactStore::open_read_only(&path).unwrap();
        assert_eq!(reader.get(kept.id).unwrap().as_ref(), Some(&kept));
        assert_eq!(reader.list("s", Some("t")).unwrap().len(), 1);
        assert_eq!(reader.scopes().unwrap(), ["s"]);
        let other = SqliteArtifactStore::open_read_only_with(&path, in_namespace("acme")).unwrap();
        assert!(other.get(kept.id).unwrap().is_none());
        assert!(other.latest("s", "k").unwrap().is_none());
        assert!(other.scopes().unwrap().is_empty());
    }

    #[test]
    fn database_errors_are_printed_once() {
        let e = ArtifactError::database("reading", rusqlite::Error::InvalidQuery);
        assert!(std::error::Error::source(&e).is_none());
    }

    #[test]
    fn damaged_row_is_reported_as_corrupt() {
        let store = SqliteArtifactStore::open_in_memory().unwrap();
        let a = Artifact::new("s", "k", "t", "n");
        store.save(&a).unwrap();
        store
            .conn()
            .execute("UPDATE artifact_records SET data = '{not json'", [])
            .unwrap();
        let err = store.get(a.id).unwrap_err();
        assert!(matches!(err, ArtifactError::CorruptRecord { .. }), "{err}");
    }
}
