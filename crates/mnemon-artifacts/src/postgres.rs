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

use mnemon_db::postgres::{self as pg, Pool, Settings};
use mnemon_db::{DbError, Durability, Migration, Namespace, Schema};
use mnemon_types::{Artifact, StorageLocation, artifact::Timestamp};
use postgres::Row;
use postgres::error::SqlState;
use postgres::types::ToSql;
use uuid::Uuid;

use crate::store::check_required;
use crate::{ArtifactError, ArtifactStore};

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
    ],
};

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
    ", namespace) VALUES ($1::text, $2::bytea, $3::bytea, $4::bytea, $5::bytea, $6::bytea, \
     $7::bytea, $8::text, $9::bytea, $10::text, $11::text) RETURNING seq"
);

const LOCK_STORAGE: &str = "SELECT pg_advisory_xact_lock($1::int8)";

const GET: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM artifact_records WHERE namespace = $1::text AND id = $2::text"
);

const LATEST: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM artifact_records WHERE namespace = $1::text AND scope = $2::bytea \
     AND key = $3::bytea ORDER BY seq DESC LIMIT 1"
);

const LIST: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM artifact_records WHERE namespace = $1::text AND scope = $2::bytea ORDER BY seq"
);

const LIST_OF_TYPE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM artifact_records WHERE namespace = $1::text AND scope = $2::bytea \
     AND artifact_type = $3::bytea ORDER BY seq"
);

/// The namespace's scopes, by a loose index scan: one probe of `artifact_records_by_key`
/// (namespace, scope, …) per scope for the next greater one, rather than reading every record.
const SCOPES: &str = "
WITH RECURSIVE s(scope) AS (
  (SELECT scope FROM artifact_records WHERE namespace = $1::text ORDER BY scope LIMIT 1)
  UNION ALL
  SELECT (SELECT r.scope FROM artifact_records r
          WHERE r.namespace = $1::text AND r.scope > s.scope ORDER BY r.scope LIMIT 1)
  FROM s WHERE s.scope IS NOT NULL)
SELECT scope FROM s WHERE scope IS NOT NULL";

const DELETE: &str = "DELETE FROM artifact_records WHERE namespace = $1::text AND id = $2::text";

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
}

impl Default for PostgresArtifactOptions {
    fn default() -> Self {
        let shared = Settings::default();
        PostgresArtifactOptions {
            durability: shared.durability,
            pool_size: shared.pool_size,
            namespace: Namespace::default(),
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
        let pool = pg::open(url, settings, &[&SCHEMA]).map_err(db_error)?;
        Ok(PostgresArtifactStore {
            pool,
            namespace: options.namespace,
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
        const ACTION: &str = "saving an artifact";
        check_required(artifact)?;
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

    fn get(&self, id: Uuid) -> Result<Option<Artifact>, ArtifactError> {
        let mut found = self.query_many(
            GET,
            &[&self.namespace.as_str(), &id.to_string()],
            "reading an artifact",
        )?;
        Ok(found.pop())
    }

    fn latest(&self, scope: &str, key: &str) -> Result<Option<Artifact>, ArtifactError> {
        let mut found = self.query_many(
            LATEST,
            &[&self.namespace.as_str(), &scope.as_bytes(), &key.as_bytes()],
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
        match artifact_type {
            Some(t) => self.query_many(
                LIST_OF_TYPE,
                &[&ns, &scope.as_bytes(), &t.as_bytes()],
                "listing artifacts",
            ),
            None => self.query_many(LIST, &[&ns, &scope.as_bytes()], "listing artifacts"),
        }
    }

    fn scopes(&self) -> Result<Vec<String>, ArtifactError> {
        const ACTION: &str = "listing the artifact scopes";
        let mut client = self.pool.get().map_err(db_error)?;
        let rows = client
            .prepare_cached(SCOPES)
            .and_then(|statement| client.query(&statement, &[&self.namespace.as_str()]))
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
        let mut client = self.pool.get().map_err(db_error)?;
        let removed = client
            .prepare_cached(DELETE)
            .and_then(|statement| {
                client.execute(&statement, &[&self.namespace.as_str(), &id.to_string()])
            })
            .map_err(self.failed("deleting an artifact"))?;
        Ok(removed > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_numbers_its_steps_as_sqlite_does() {
        assert_eq!(SCHEMA.version(), 2);
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
