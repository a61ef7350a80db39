//! The artifact store in PostgreSQL (feature `postgres`): the same records as the SQLite store
//! (`crate::sqlite`), in a database that processes on many machines share (docs/postgres.md).
//!
//! **Tables.** `artifact_records`, versioned in `artifact_schema` with the same numbering as
//! SQLite's (1: the table; 2: the namespace), migrated through `mnemon_db::postgres::migrate`
//! under an advisory lock. The caller's strings (scope, key, type, name, description, storage)
//! are stored as their UTF-8 bytes (`bytea`), because PostgreSQL's `text` cannot hold a NUL
//! character and the SQLite store keeps them: a copy between the backends loses nothing. The
//! id and timestamp are ours, and `data` is JSON text, in which serde_json escapes NUL. The sequence is a `BIGSERIAL`, which never hands out a value twice,
//! even after deletes or rolled-back saves.
//!
//! **Content.** A record's inline content (the `inline` backend) is its `data` column, so it is
//! in the database with the record. Content kept by another backend (`write_to_file`) is
//! written by [`ArtifactStore::save_with_content`]'s callback: that root must then be one
//! directory every machine shares, or records saved on one machine point at files the others
//! cannot read.
//!
//! **Tenants.** A store is opened for one namespace ([`PostgresArtifactOptions::namespace`]);
//! every record carries it and every statement binds it, so no call through the handle reads,
//! lists or deletes another namespace's records, and the same id may exist in two namespaces.
//!
//! **Expiry and filters** (schema version 3, as on SQLite): an `expires_at` column
//! (milliseconds since the Unix epoch; NULL, never, for records saved before) that every read
//! binds against the store's clock, and a `doc` `jsonb` column holding the record's filterable
//! document ([`crate::document`], without `expires_at`, which filters read from its column).
//! `jsonb` cannot hold U+0000, so a record with one in a field has no `doc` (NULL): on
//! PostgreSQL only its expiry can be filtered on. A sweep ([`ArtifactStore::gc`],
//! [`ArtifactStore::forget`]) deletes the records in one transaction, then removes each storage
//! location they pointed at under the same advisory lock a save of it takes, when no record
//! points at it any more: of any namespace, or of the store's own when the registry is
//! [private to the namespace](BackendRegistry::private_to_namespace).
//!
//! **Statements** are constant SQL texts, prepared once per pooled connection and kept in the
//! connection's statement cache (`mnemon_db::postgres::PooledClient::prepare_cached`): after a
//! connection's first call, a save, get, latest, list or delete only binds and executes.
//! Parameters are always bound, never formatted into SQL text.
//!
//! **Saves.** A save is one transaction that returns after `COMMIT`. A save with content in a
//! backend first takes a transaction-scoped advisory lock on its backend and storage id
//! (`pg_advisory_xact_lock`), then writes the content, then inserts the record: a second save to
//! the same storage id, in any process, waits until the first has committed, so the newest
//! record always points at its own content, and a record is only committed after its content
//! was written.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use mnemon_db::expiry::{Clock, Expiry, SystemClock, is_live};
use mnemon_db::postgres::{self as pg, Pool, Settings};
use mnemon_db::{DbError, Durability, Migration, Namespace, Schema};
use mnemon_filter::{ColumnKind, Dialect, Filter, Source, SqlParam};
use mnemon_types::{Artifact, StorageLocation, artifact::Timestamp};
use postgres::Row;
use postgres::error::SqlState;
use postgres::types::ToSql;
use uuid::Uuid;

use crate::store::{
    ArtifactSweep, CONTENT_BATCH, FILTER_FIELDS, ListedArtifact, Narrow, PageQuery, check_filter,
    check_required, document, prefix_end,
};
use crate::{ArtifactError, ArtifactStore, BackendRegistry};

/// The artifact tables' schema on PostgreSQL: the same table and version numbers as SQLite's.
static SCHEMA: Schema = Schema {
    component: "artifact",
    table: "artifact_schema",
    key_column: "singleton",
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
    ],
};

/// Version 5, as on SQLite: a scope's records in save order, so a listing page reads only its
/// own records (`ArtifactStore::list_page`).
const SCHEMA_V5: &str =
    "CREATE INDEX artifact_records_by_scope ON artifact_records (namespace, scope, seq);";

const SCHEMA_V1: &str = "
CREATE TABLE artifact_records (
    seq             BIGSERIAL PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    scope           BYTEA NOT NULL,
    key             BYTEA NOT NULL,
    artifact_type   BYTEA NOT NULL,
    name            BYTEA NOT NULL,
    description     BYTEA NOT NULL,
    storage_backend BYTEA,
    storage_id      BYTEA,
    data            TEXT,
    created_at      TEXT NOT NULL,
    CHECK ((storage_backend IS NULL) = (storage_id IS NULL))
);
CREATE INDEX artifact_records_by_key ON artifact_records (scope, key, seq);
CREATE INDEX artifact_records_by_type ON artifact_records (scope, artifact_type, seq);
";

/// Version 2, as on SQLite: every record belongs to a namespace, an id is unique within it;
/// existing records get the default namespace.
const SCHEMA_V2: &str = "
ALTER TABLE artifact_records ADD COLUMN namespace TEXT NOT NULL DEFAULT 'default';
ALTER TABLE artifact_records ALTER COLUMN namespace DROP DEFAULT;
ALTER TABLE artifact_records DROP CONSTRAINT artifact_records_id_key;
ALTER TABLE artifact_records ADD CONSTRAINT artifact_records_id_key UNIQUE (namespace, id);
DROP INDEX artifact_records_by_key;
DROP INDEX artifact_records_by_type;
CREATE INDEX artifact_records_by_key ON artifact_records (namespace, scope, key, seq);
CREATE INDEX artifact_records_by_type ON artifact_records (namespace, scope, artifact_type, seq);
";

/// Version 3, as on SQLite: `expires_at` and its sweep index, an index on the storage
/// location, and the filterable document as `jsonb`, built here for existing records (NULL for
/// one holding a NUL byte or a `\u0000` escape, which `jsonb` refuses).
const SCHEMA_V3: &str = r"
ALTER TABLE artifact_records ADD COLUMN expires_at BIGINT, ADD COLUMN doc JSONB;
CREATE INDEX artifact_records_by_expiry ON artifact_records (namespace, expires_at)
  WHERE expires_at IS NOT NULL;
CREATE INDEX artifact_records_by_storage ON artifact_records (storage_backend, storage_id)
  WHERE storage_backend IS NOT NULL;
UPDATE artifact_records SET doc = jsonb_build_object(
    'id', id, 'key', convert_from(key, 'UTF8'), 'type', convert_from(artifact_type, 'UTF8'),
    'name', convert_from(name, 'UTF8'), 'description', convert_from(description, 'UTF8'),
    'scope', convert_from(scope, 'UTF8'), 'created_at', created_at)
  || CASE WHEN storage_backend IS NULL THEN '{}'::jsonb ELSE jsonb_build_object(
       'storage', convert_from(storage_backend, 'UTF8'),
       'storage_id', convert_from(storage_id, 'UTF8')) END
  || CASE WHEN data IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('data', data::jsonb) END
WHERE position('\x00'::bytea IN key || artifact_type || name || description || scope
    || coalesce(storage_backend, ''::bytea) || coalesce(storage_id, ''::bytea)) = 0
  AND (data IS NULL OR strpos(data, '\u0000') = 0);
";

/// Version 4: the documents version 3 and the saves before this one left out by mistake. A
/// record was taken to hold U+0000 when its data's text held `\u0000` anywhere, also as a
/// backslash (escaped `\\`) followed by `u0000`, and such a record was seen by no filter
/// (`mnemon_db::jsonb::holds_nul` reads the escapes as JSON does). Built as version 3 builds
/// them, escaped backslashes removed before looking for the escape.
const SCHEMA_V4: &str = r"
UPDATE artifact_records SET doc = jsonb_build_object(
    'id', id, 'key', convert_from(key, 'UTF8'), 'type', convert_from(artifact_type, 'UTF8'),
    'name', convert_from(name, 'UTF8'), 'description', convert_from(description, 'UTF8'),
    'scope', convert_from(scope, 'UTF8'), 'created_at', created_at)
  || CASE WHEN storage_backend IS NULL THEN '{}'::jsonb ELSE jsonb_build_object(
       'storage', convert_from(storage_backend, 'UTF8'),
       'storage_id', convert_from(storage_id, 'UTF8')) END
  || CASE WHEN data IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('data', data::jsonb) END
WHERE doc IS NULL
  AND position('\x00'::bytea IN key || artifact_type || name || description || scope
    || coalesce(storage_backend, ''::bytea) || coalesce(storage_id, ''::bytea)) = 0
  AND (data IS NULL OR strpos(replace(data, '\\', ''), '\u0000') = 0);
";

/// The columns [`read_row`] decodes, in its order: a macro so that the statements below are
/// constant texts (`concat!`), which the statement cache keys on.
macro_rules! columns {
    () => {
        "id, key, artifact_type, name, description, storage_backend, storage_id, data, scope, \
         created_at"
    };
}

const INSERT: &str = concat!(
    "INSERT INTO artifact_records (",
    columns!(),
    ", namespace, doc, expires_at) VALUES ($1::text, $2::bytea, $3::bytea, $4::bytea, \
     $5::bytea, $6::bytea, $7::bytea, $8::text, $9::bytea, $10::text, $11::text, \
     $12::text::jsonb, $13::int8) RETURNING seq"
);

const LOCK_STORAGE: &str = "SELECT pg_advisory_xact_lock($1::int8)";

/// Takes the namespace's save turn (`$1` the namespace) until the transaction ends: a
/// transaction-scoped advisory lock of the two-key form (never the same lock as
/// [`LOCK_STORAGE`]'s one-key form), class [`SAVE_TURN_CLASS`], keyed by the namespace's hash.
/// A save takes it just before its insert draws the record's `seq`, so that the saves of a
/// namespace commit in `seq` order: otherwise a save could draw `seq` 10, another 11 and
/// commit first, and a reader paging by `seq` (the REST listing's cursor, `mnemon migrate`)
/// that saw 11 would never see 10 (docs/postgres.md#artifact-saves-commit-in-order).
const TAKE_SAVE_TURN: &str = "SELECT pg_advisory_xact_lock($2::int4, hashtext($1::text))";

/// The class of [`TAKE_SAVE_TURN`]'s lock ("mnar").
const SAVE_TURN_CLASS: i32 = 0x6d6e_6172;

/// A record is live while `expires_at` is after the time bound as `$n`
/// (docs/reference/artifacts.md#expiry).
macro_rules! live {
    ($n:literal) => {
        concat!("(expires_at IS NULL OR expires_at > $", $n, "::int8)")
    };
}

const GET: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM artifact_records WHERE namespace = $1::text AND id = $2::text AND ",
    live!(3)
);

const LATEST: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM artifact_records WHERE namespace = $1::text AND scope = $2::bytea \
     AND key = $3::bytea AND ",
    live!(4),
    " ORDER BY seq DESC LIMIT 1"
);

const LIST: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM artifact_records WHERE namespace = $1::text AND scope = $2::bytea AND ",
    live!(3),
    " ORDER BY seq"
);

const LIST_OF_TYPE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM artifact_records WHERE namespace = $1::text AND scope = $2::bytea \
     AND artifact_type = $3::bytea AND ",
    live!(4),
    " ORDER BY seq"
);

/// The sequence value of a record of the namespace, live or not: where a listing page after
/// it starts.
const SEQ_OF: &str =
    "SELECT seq FROM artifact_records WHERE namespace = $1::text AND id = $2::text";

const EXPIRES_AT: &str = concat!(
    "SELECT expires_at FROM artifact_records WHERE namespace = $1::text AND id = $2::text AND ",
    live!(3)
);

/// The namespace's scopes holding a live record, by a loose index scan: one probe of
/// `artifact_records_by_key` (namespace, scope, …) per scope for the next greater one, rather
/// than reading every record.
const SCOPES: &str = concat!(
    "WITH RECURSIVE s(scope) AS (
  (SELECT scope FROM artifact_records WHERE namespace = $1::text AND ",
    live!(2),
    " ORDER BY scope LIMIT 1)
  UNION ALL
  SELECT (SELECT r.scope FROM artifact_records r
          WHERE r.namespace = $1::text AND r.scope > s.scope AND ",
    live!(2),
    " ORDER BY r.scope LIMIT 1)
  FROM s WHERE s.scope IS NOT NULL)
SELECT scope FROM s WHERE scope IS NOT NULL"
);

/// Deletes a record, expired or not, returning its expiry (an expired record is reported
/// absent, as reads report it).
const DELETE: &str = "DELETE FROM artifact_records WHERE namespace = $1::text AND id = $2::text \
     RETURNING expires_at";

/// Deletes the namespace's (`$1`) records a condition selects, returning where their content
/// was: a constant text per condition, so the statement cache keeps it.
macro_rules! remove_where {
    ($condition:literal) => {
        concat!(
            "DELETE FROM artifact_records WHERE namespace = $1::text AND ",
            $condition,
            " RETURNING storage_backend, storage_id"
        )
    };
}

/// Whether a record points at the storage location: of any namespace, or (`$3` given, for a
/// registry [private to the namespace](BackendRegistry::private_to_namespace)) of that one.
const STORAGE_IN_USE: &str = "SELECT EXISTS (SELECT 1 FROM artifact_records \
     WHERE storage_backend = $1::bytea AND storage_id = $2::bytea \
       AND ($3::text IS NULL OR namespace = $3::text))";

/// Where the PostgreSQL store keeps each field of the document: `expires_at` in its column,
/// every other field in `doc`.
fn pg_source(field: &str) -> Option<Source> {
    match field {
        "expires_at" => Some(Source::Column {
            expr: "expires_at".to_owned(),
            kind: ColumnKind::Integer,
        }),
        _ if FILTER_FIELDS.contains(&field) => Some(Source::Member("doc".to_owned())),
        _ => None,
    }
}

/// A filter parameter as the driver binds it.
fn pg_param(param: &SqlParam) -> &(dyn ToSql + Sync) {
    match param {
        SqlParam::Text(t) => t,
        SqlParam::Integer(i) => i,
        SqlParam::Real(r) => r,
    }
}

/// Options for [`PostgresArtifactStore::open`].
#[derive(Debug, Clone)]
pub struct PostgresArtifactOptions {
    /// How hard a commit works to survive crashes. Default: [`Durability::Full`]
    /// (`synchronous_commit = on`).
    pub durability: Durability,
    /// The most connections the store holds open at once. Default: 8.
    pub pool_size: usize,
    /// The tenant the store is opened for. Default: [`Namespace::default()`].
    pub namespace: Namespace,
    /// How long a record saved with [`Expiry::Default`] (every `save`) lives: the
    /// namespace's default time-to-live, for this handle. Default: `None`, forever.
    pub default_ttl: Option<Duration>,
    /// The clock that decides what has expired. Default: [`SystemClock`].
    pub clock: Arc<dyn Clock>,
}

impl Default for PostgresArtifactOptions {
    fn default() -> Self {
        let shared = Settings::default();
        PostgresArtifactOptions {
            durability: shared.durability,
            pool_size: shared.pool_size,
            namespace: Namespace::default(),
            default_ttl: None,
            clock: Arc::new(SystemClock),
        }
    }
}

/// An [`ArtifactStore`] in a PostgreSQL database; see the module docs for the guarantees.
///
/// ```no_run
/// use mnemon_artifacts::{ArtifactStore, PostgresArtifactOptions, PostgresArtifactStore};
/// use mnemon_types::Artifact;
///
/// let store = PostgresArtifactStore::open(
///     "postgres://mnemon:secret@127.0.0.1:5432/mnemon",
///     PostgresArtifactOptions::default(),
/// )?;
/// store.save(&Artifact::new("chat-1", "plan", "plan", "First plan"))?;
/// assert!(store.latest("chat-1", "plan")?.is_some());
/// # Ok::<(), mnemon_artifacts::ArtifactError>(())
/// ```
#[derive(Debug)]
pub struct PostgresArtifactStore {
    pool: Pool,
    namespace: Namespace,
    default_ttl: Option<Duration>,
    clock: Arc<dyn Clock>,
}

impl PostgresArtifactStore {
    /// Connects to the database at `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`)
    /// and brings the artifact tables to the current version. A wrong URL, password or
    /// database, an unreachable server and a schema from a newer build are reported here.
    pub fn open(url: &str, options: PostgresArtifactOptions) -> Result<Self, ArtifactError> {
        let settings = Settings {
            durability: options.durability,
            pool_size: options.pool_size,
            ..Settings::default()
        };
        let pool = Pool::connect(url, settings).map_err(db_error)?;
        PostgresArtifactStore::open_on(&pool, options)
    }

    /// As [`open`](Self::open), on a pool other stores may share (one pool for every store
    /// and namespace of a process: docs/postgres.md#one-pool-per-database). The pool's
    /// settings apply: `options.durability` and `options.pool_size` are not used.
    pub fn open_on(pool: &Pool, options: PostgresArtifactOptions) -> Result<Self, ArtifactError> {
        pg::migrate_all(pool, &[&SCHEMA]).map_err(db_error)?;
        Ok(PostgresArtifactStore {
            pool: pool.clone(),
            namespace: options.namespace,
            default_ttl: options.default_ttl,
            clock: options.clock,
        })
    }

    /// The namespace (tenant) the store was opened for.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The store's connection pool: for diagnostics (open connections, each connection's
    /// prepared-statement cache: `mnemon_db::postgres::PooledClient::statements_prepared`) and
    /// for tools that read the tables directly.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// A statement's error, classified by `mnemon-db` (server gone, query error with its code).
    fn failed(&self, action: &'static str) -> impl FnOnce(postgres::Error) -> ArtifactError + '_ {
        move |e| db_error(pg::error(&e, self.pool.target(), action))
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
    ) -> Result<(String, Vec<SqlParam>), ArtifactError> {
        let mut params = vec![
            SqlParam::Text(self.namespace.as_str().to_owned()),
            SqlParam::Integer(self.now()),
        ];
        let mut sql = format!(
            "SELECT {what} FROM artifact_records WHERE namespace = $1::text AND {}",
            live!(2)
        );
        // The scope and type columns hold the text's UTF-8 bytes, bound in hex: a `text`
        // parameter cannot hold U+0000, which a saved scope or type may.
        if let Some(scope) = scope {
            params.push(SqlParam::Text(hex(scope)));
            sql.push_str(&format!(
                " AND scope = decode(${}::text, 'hex')",
                params.len()
            ));
        }
        if let Some(artifact_type) = narrow.artifact_type {
            params.push(SqlParam::Text(hex(artifact_type)));
            sql.push_str(&format!(
                " AND artifact_type = decode(${}::text, 'hex')",
                params.len()
            ));
        }
        if let Some(seq) = narrow.after_seq {
            params.push(SqlParam::Integer(seq));
            sql.push_str(&format!(" AND seq > ${}::int8", params.len()));
        }
        if let Some(filter) = filter {
            let condition = filter.to_sql(Dialect::Postgres, &pg_source, &mut params)?;
            sql.push_str(&format!(" AND ({condition})"));
        }
        if what != "count(*)" {
            sql.push_str(" ORDER BY seq");
        }
        if let Some(limit) = limit {
            params.push(SqlParam::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
            sql.push_str(&format!(" LIMIT ${}::int8", params.len()));
        }
        Ok((sql, params))
    }

    /// Deletes the namespace's records that `sql` (a `remove_where!` statement) selects in
    /// one transaction, then their content as the module docs say.
    fn remove_where(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
        backends: &BackendRegistry,
        action: &'static str,
    ) -> Result<ArtifactSweep, ArtifactError> {
        let ns = self.namespace.as_str();
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&ns];
        all.extend_from_slice(params);
        let mut client = self.pool.get().map_err(db_error)?;
        let mut tx = client.transaction_cached().map_err(self.failed(action))?;
        let statement = tx.prepare_cached(sql).map_err(self.failed(action))?;
        let rows = tx.query(&statement, &all).map_err(self.failed(action))?;
        tx.commit().map_err(self.failed(action))?;
        let mut sweep = ArtifactSweep {
            records: rows.len() as u64,
            ..ArtifactSweep::default()
        };
        let mut locations = BTreeSet::new();
        for row in &rows {
            let backend: Option<Vec<u8>> = row.try_get(0).map_err(self.failed(action))?;
            let id: Option<Vec<u8>> = row.try_get(1).map_err(self.failed(action))?;
            if let (Some(backend), Some(id)) = (backend, id) {
                locations.insert((backend, id));
            }
        }
        let mut valid = Vec::new();
        for (backend, id) in locations {
            match (String::from_utf8(backend), String::from_utf8(id)) {
                (Ok(backend), Ok(id)) => valid.push(StorageLocation { backend, id }),
                _ => sweep
                    .content_errors
                    .push("a stored storage location is not UTF-8".to_owned()),
            }
        }
        for batch in valid.chunks(CONTENT_BATCH) {
            if let Err(e) = self.remove_contents(&mut client, batch, &mut sweep, backends) {
                for location in batch {
                    sweep
                        .content_errors
                        .push(format!("{}:{}: {e}", location.backend, location.id));
                }
            }
        }
        Ok(sweep)
    }

    /// Removes the content at each of `batch` (in a stable order) that no record points at
    /// any more, holding the advisory lock a save of each location takes, so that no save of
    /// them commits in between.
    fn remove_contents(
        &self,
        client: &mut pg::PooledClient,
        batch: &[StorageLocation],
        sweep: &mut ArtifactSweep,
        backends: &BackendRegistry,
    ) -> Result<(), ArtifactError> {
        const ACTION: &str = "removing artifact content";
        let mut tx = client.transaction_cached().map_err(self.failed(ACTION))?;
        let lock = tx
            .prepare_cached(LOCK_STORAGE)
            .map_err(self.failed(ACTION))?;
        let in_use = tx
            .prepare_cached(STORAGE_IN_USE)
            .map_err(self.failed(ACTION))?;
        let mut unshared = Vec::new();
        for location in batch {
            tx.execute(&lock, &[&storage_lock_key(location)])
                .map_err(self.failed(ACTION))?;
            let shared: bool = tx
                .query_one(
                    &in_use,
                    &[
                        &location.backend.as_bytes(),
                        &location.id.as_bytes(),
                        &backends
                            .is_private_to_namespace()
                            .then_some(self.namespace.as_str()),
                    ],
                )
                .and_then(|row| row.try_get(0))
                .map_err(self.failed(ACTION))?;
            if shared {
                sweep.content_shared += 1;
            } else {
                unshared.push(location.clone());
            }
        }
        sweep.remove_contents(&unshared, backends);
        tx.commit().map_err(self.failed(ACTION))
    }

    /// The records `sql` (a cached statement) selects with `params`.
    fn query_many(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
        action: &'static str,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        let mut client = self.pool.get().map_err(db_error)?;
        let rows = client
            .prepare_cached(sql)
            .and_then(|statement| client.query(&statement, params))
            .map_err(self.failed(action))?;
        rows.iter().map(read_row).collect()
    }
}

/// The artifact error for a `mnemon-db` failure: a newer schema keeps its own variant; the
/// rest carry `mnemon-db`'s message, which says what to fix.
fn db_error(error: DbError) -> ArtifactError {
    match error {
        DbError::PgSchemaTooNew {
            found, supported, ..
        } => ArtifactError::SchemaTooNew { found, supported },
        other => ArtifactError::database("using the PostgreSQL artifact store", other),
    }
}

/// One row, decoded into a record; a damaged row is an [`ArtifactError::CorruptRecord`] naming
/// it.
fn read_row(row: &Row) -> Result<Artifact, ArtifactError> {
    let id: String = row
        .try_get(0)
        .map_err(|e| ArtifactError::database("reading an artifact", e))?;
    let corrupt = |reason: String| ArtifactError::CorruptRecord {
        id: id.clone(),
        reason,
    };
    // A `bytea` column holding one of the caller's strings.
    let optional = |i: usize| -> Result<Option<String>, ArtifactError> {
        let bytes: Option<Vec<u8>> = row.try_get(i).map_err(|e| corrupt(e.to_string()))?;
        bytes
            .map(|b| String::from_utf8(b).map_err(|_| corrupt(format!("column {i} is not UTF-8"))))
            .transpose()
    };
    let text = |i: usize| -> Result<String, ArtifactError> {
        optional(i)?.ok_or_else(|| corrupt(format!("column {i} is NULL")))
    };
    let uuid = Uuid::parse_str(&id).map_err(|e| corrupt(format!("bad id: {e}")))?;
    let data: Option<String> = row.try_get(7).map_err(|e| corrupt(e.to_string()))?;
    let data = data
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| corrupt(format!("bad data JSON: {e}")))?;
    let created_at: String = row.try_get(9).map_err(|e| corrupt(e.to_string()))?;
    let created_at: Timestamp = created_at
        .parse()
        .map_err(|e| corrupt(format!("bad created_at: {e}")))?;
    let storage = match (optional(5)?, optional(6)?) {
        (Some(backend), Some(id)) => Some(StorageLocation { backend, id }),
        _ => None,
    };
    Ok(Artifact {
        id: uuid,
        key: text(1)?,
        artifact_type: text(2)?,
        name: text(3)?,
        description: text(4)?,
        storage,
        data,
        scope: text(8)?,
        created_at,
    })
}

/// `text`'s UTF-8 bytes in hex, for `decode(…, 'hex')`.
fn hex(text: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len() * 2);
    for byte in text.bytes() {
        // Writing to a `String` cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// The advisory lock key of a storage location: a stable hash of the backend and id, so that
/// every build and process agrees on it.
fn storage_lock_key(location: &StorageLocation) -> i64 {
    pg::stable_lock_key(
        b"mnemon-artifacts:"
            .iter()
            .chain(location.backend.as_bytes())
            .chain(&[0])
            .chain(location.id.as_bytes()),
    )
}

impl ArtifactStore for PostgresArtifactStore {
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
        // The filterable document; `jsonb` refuses U+0000, which serde_json writes as this
        // escape (module docs).
        let doc = Some(document(artifact, None).to_string())
            .filter(|doc| !mnemon_db::jsonb::holds_nul(doc));
        let data = artifact
            .data
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(ArtifactError::ContentEncoding)?;
        let mut client = self.pool.get().map_err(db_error)?;
        let mut tx = client.transaction_cached().map_err(self.failed(ACTION))?;
        if let Some(location) = &artifact.storage {
            // Held until the commit: see the module docs.
            const LOCKING: &str = "locking the artifact's storage id";
            let lock = tx
                .prepare_cached(LOCK_STORAGE)
                .map_err(self.failed(LOCKING))?;
            tx.execute(&lock, &[&storage_lock_key(location)])
                .map_err(self.failed(LOCKING))?;
        }
        // A failed write drops the transaction, which rolls it back: nothing is stored.
        write_content()?;
        // After the content's write, so that a slow write holds up no other save.
        const TURN: &str = "waiting for the namespace's save turn";
        let turn = tx
            .prepare_cached(TAKE_SAVE_TURN)
            .map_err(self.failed(TURN))?;
        tx.execute(&turn, &[&self.namespace.as_str(), &SAVE_TURN_CLASS])
            .map_err(self.failed(TURN))?;
        let insert = tx.prepare_cached(INSERT).map_err(self.failed(ACTION))?;
        let inserted = tx.query_one(
            &insert,
            &[
                &artifact.id.to_string(),
                &artifact.key.as_bytes(),
                &artifact.artifact_type.as_bytes(),
                &artifact.name.as_bytes(),
                &artifact.description.as_bytes(),
                &artifact.storage.as_ref().map(|s| s.backend.as_bytes()),
                &artifact.storage.as_ref().map(|s| s.id.as_bytes()),
                &data,
                &artifact.scope.as_bytes(),
                &artifact.created_at.to_string(),
                &self.namespace.as_str(),
                &doc,
                &expires_at,
            ],
        );
        let seq: i64 = match inserted {
            Ok(row) => row.try_get(0).map_err(self.failed(ACTION))?,
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                return Err(ArtifactError::DuplicateId { id: artifact.id });
            }
            Err(e) => return Err(self.failed(ACTION)(e)),
        };
        tx.commit().map_err(self.failed(ACTION))?;
        u64::try_from(seq).map_err(|_| {
            ArtifactError::database(
                ACTION,
                format!("PostgreSQL returned a negative sequence {seq}"),
            )
        })
    }

    fn expires_at(&self, id: Uuid) -> Result<Option<Option<i64>>, ArtifactError> {
        const ACTION: &str = "reading an expiry";
        let mut client = self.pool.get().map_err(db_error)?;
        let row = client
            .prepare_cached(EXPIRES_AT)
            .and_then(|statement| {
                client.query_opt(
                    &statement,
                    &[&self.namespace.as_str(), &id.to_string(), &self.now()],
                )
            })
            .map_err(self.failed(ACTION))?;
        row.map(|r| r.try_get(0).map_err(self.failed(ACTION)))
            .transpose()
    }

    fn list_where(
        &self,
        scope: Option<&str>,
        filter: Option<&Filter>,
        limit: Option<usize>,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        let (sql, params) = self.filtered(columns!(), scope, filter, limit, Narrow::default())?;
        let params: Vec<_> = params.iter().map(pg_param).collect();
        let mut client = self.pool.get().map_err(db_error)?;
        // The text depends on the filter's shape, so it is prepared per call, not cached.
        let rows = client
            .query(sql.as_str(), &params)
            .map_err(self.failed("listing artifacts"))?;
        rows.iter().map(read_row).collect()
    }

    fn count_where(
        &self,
        scope: Option<&str>,
        filter: Option<&Filter>,
    ) -> Result<u64, ArtifactError> {
        const ACTION: &str = "counting artifacts";
        let (sql, params) = self.filtered("count(*)", scope, filter, None, Narrow::default())?;
        let params: Vec<_> = params.iter().map(pg_param).collect();
        let mut client = self.pool.get().map_err(db_error)?;
        let row = client
            .query_one(sql.as_str(), &params)
            .map_err(self.failed(ACTION))?;
        let n: i64 = row.try_get(0).map_err(self.failed(ACTION))?;
        Ok(n.max(0) as u64)
    }

    fn gc(&self, backends: &BackendRegistry) -> Result<ArtifactSweep, ArtifactError> {
        self.remove_where(
            remove_where!("expires_at <= $2::int8"),
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
        let start = scope_prefix.as_bytes();
        match (scope_prefix, prefix_end(scope_prefix)) {
            ("", _) => self.remove_where(remove_where!("TRUE"), &[], backends, ACTION),
            (_, Some(end)) => self.remove_where(
                remove_where!("scope >= $2::bytea AND scope < $3::bytea"),
                &[&start, &end.as_bytes()],
                backends,
                ACTION,
            ),
            (_, None) => self.remove_where(
                remove_where!("scope >= $2::bytea"),
                &[&start],
                backends,
                ACTION,
            ),
        }
    }

    fn get(&self, id: Uuid) -> Result<Option<Artifact>, ArtifactError> {
        let mut found = self.query_many(
            GET,
            &[&self.namespace.as_str(), &id.to_string(), &self.now()],
            "reading an artifact",
        )?;
        Ok(found.pop())
    }

    fn latest(&self, scope: &str, key: &str) -> Result<Option<Artifact>, ArtifactError> {
        let mut found = self.query_many(
            LATEST,
            &[
                &self.namespace.as_str(),
                &scope.as_bytes(),
                &key.as_bytes(),
                &self.now(),
            ],
            "looking up the latest artifact",
        )?;
        Ok(found.pop())
    }

    fn list(
        &self,
        scope: &str,
        artifact_type: Option<&str>,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        let ns = self.namespace.as_str();
        let now = self.now();
        match artifact_type {
            Some(t) => self.query_many(
                LIST_OF_TYPE,
                &[&ns, &scope.as_bytes(), &t.as_bytes(), &now],
                "listing artifacts",
            ),
            None => self.query_many(LIST, &[&ns, &scope.as_bytes(), &now], "listing artifacts"),
        }
    }

    fn scopes(&self) -> Result<Vec<String>, ArtifactError> {
        const ACTION: &str = "listing the artifact scopes";
        let mut client = self.pool.get().map_err(db_error)?;
        let rows = client
            .prepare_cached(SCOPES)
            .and_then(|statement| {
                client.query(&statement, &[&self.namespace.as_str(), &self.now()])
            })
            .map_err(self.failed(ACTION))?;
        rows.iter()
            .map(|row| {
                let bytes: Vec<u8> = row.try_get(0).map_err(self.failed(ACTION))?;
                String::from_utf8(bytes).map_err(|e| {
                    ArtifactError::database(
                        ACTION,
                        format!(
                            "a stored scope is not UTF-8: {:?}",
                            String::from_utf8_lossy(e.as_bytes())
                        ),
                    )
                })
            })
            .collect()
    }

    fn delete(&self, id: Uuid) -> Result<bool, ArtifactError> {
        const ACTION: &str = "deleting an artifact";
        let mut client = self.pool.get().map_err(db_error)?;
        let row = client
            .prepare_cached(DELETE)
            .and_then(|statement| {
                client.query_opt(&statement, &[&self.namespace.as_str(), &id.to_string()])
            })
            .map_err(self.failed(ACTION))?;
        let found: Option<Option<i64>> = row
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(self.failed(ACTION))?;
        Ok(found.is_some_and(|at| is_live(at, self.now())))
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
        let mut client = self.pool.get().map_err(db_error)?;
        let after_seq = match query.after {
            None => None,
            // The cursor's record holds its place while it is stored, live or not.
            Some(after) => {
                let row = client
                    .prepare_cached(SEQ_OF)
                    .and_then(|statement| {
                        client
                            .query_opt(&statement, &[&self.namespace.as_str(), &after.to_string()])
                    })
                    .map_err(self.failed(ACTION))?;
                match row {
                    Some(row) => Some(row.try_get::<_, i64>(0).map_err(self.failed(ACTION))?),
                    None => return Ok(None),
                }
            }
        };
        let (sql, params) = self.filtered(
            concat!(
                "id, key, artifact_type, name, description, storage_backend, storage_id, ",
                "NULL::text, scope, created_at, expires_at"
            ),
            query.scope,
            query.filter,
            Some(query.limit),
            Narrow::of_page(query, after_seq),
        )?;
        let params: Vec<_> = params.iter().map(pg_param).collect();
        // The text depends on the filter's shape, so it is prepared per call, as in
        // `list_where`.
        let rows = client
            .query(sql.as_str(), &params)
            .map_err(self.failed(ACTION))?;
        let mut page = Vec::with_capacity(rows.len());
        for row in &rows {
            page.push(ListedArtifact {
                artifact: read_row(row)?,
                expires_at: row.try_get(10).map_err(self.failed(ACTION))?,
            });
        }
        Ok(Some(page))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_numbers_its_steps_as_sqlite_does() {
        assert_eq!(SCHEMA.version(), 5);
        assert_eq!(SCHEMA.table, "artifact_schema");
    }

    #[test]
    fn storage_lock_keys_tell_backend_and_id_apart() {
        let at = |backend: &str, id: &str| {
            storage_lock_key(&StorageLocation {
                backend: backend.into(),
                id: id.into(),
            })
        };
        assert_eq!(at("write_to_file", "a.json"), at("write_to_file", "a.json"));
        assert_ne!(at("write_to_file", "a.json"), at("write_to_file", "b.json"));
        assert_ne!(at("ab", "c"), at("a", "bc"));
        // Pinned: processes of different builds must agree on every key.
        assert_eq!(at("file", "report.json"), -3_208_744_763_953_080_113);
    }

    #[test]
    fn a_bad_url_is_reported_at_open() {
        let err = PostgresArtifactStore::open("mysql://x/y", PostgresArtifactOptions::default())
            .unwrap_err();
        assert!(err.to_string().contains("postgres://"), "{err}");
    }
}
