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
//! **Statements** are sent with their parameters and their types in one round trip (the
//! extended protocol's unnamed statement: `query_typed`), rather than prepared by name first,
//! which would cost a round trip more per call; parameters are always bound.
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
use postgres::types::{ToSql, Type};
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

const COLUMNS: &str = "id, key, artifact_type, name, description, storage_backend, storage_id, \
                       data, scope, created_at";

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
        let pool = Pool::connect(url, settings).map_err(db_error)?;
        pool.migrate(&SCHEMA).map_err(db_error)?;
        Ok(PostgresArtifactStore {
            pool,
            namespace: options.namespace,
        })
    }

    /// The namespace (tenant) the store was opened for.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// A statement's error, classified by `mnemon-db` (server gone, query error with its code).
    fn failed(&self, action: &'static str) -> impl FnOnce(postgres::Error) -> ArtifactError + '_ {
        move |e| db_error(pg::error(&e, self.pool.target(), action))
    }

    fn query_many(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
        action: &'static str,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        let mut client = self.pool.get().map_err(db_error)?;
        let rows = client
            .query_typed(sql, params)
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

/// The advisory lock key of a storage location: FNV-1a (64 bits) of the backend and id, so
/// that every build and process agrees on it (the server's `hashtext` is not promised stable).
fn storage_lock_key(location: &StorageLocation) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let bytes = b"mnemon-artifacts:"
        .iter()
        .chain(location.backend.as_bytes())
        .chain(&[0])
        .chain(location.id.as_bytes());
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
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
        let mut tx = client.transaction().map_err(self.failed(ACTION))?;
        if let Some(location) = &artifact.storage {
            // Held until the commit: see the module docs.
            tx.execute_typed(
                "SELECT pg_advisory_xact_lock($1)",
                &[(&storage_lock_key(location), Type::INT8)],
            )
            .map_err(self.failed("locking the artifact's storage id"))?;
        }
        // A failed write drops the transaction, which rolls it back: nothing is stored.
        write_content()?;
        let inserted = tx.query_typed_one(
            &format!(
                "INSERT INTO artifact_records ({COLUMNS}, namespace) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING seq"
            ),
            &[
                (&artifact.id.to_string(), Type::TEXT),
                (&artifact.key.as_bytes(), Type::BYTEA),
                (&artifact.artifact_type.as_bytes(), Type::BYTEA),
                (&artifact.name.as_bytes(), Type::BYTEA),
                (&artifact.description.as_bytes(), Type::BYTEA),
                (
                    &artifact.storage.as_ref().map(|s| s.backend.as_bytes()),
                    Type::BYTEA,
                ),
                (
                    &artifact.storage.as_ref().map(|s| s.id.as_bytes()),
                    Type::BYTEA,
                ),
                (&data, Type::TEXT),
                (&artifact.scope.as_bytes(), Type::BYTEA),
                (&artifact.created_at.to_string(), Type::TEXT),
                (&self.namespace.as_str(), Type::TEXT),
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
            &format!("SELECT {COLUMNS} FROM artifact_records WHERE namespace = $1 AND id = $2"),
            &[
                (&self.namespace.as_str(), Type::TEXT),
                (&id.to_string(), Type::TEXT),
            ],
            "reading an artifact",
        )?;
        Ok(found.pop())
    }

    fn latest(&self, scope: &str, key: &str) -> Result<Option<Artifact>, ArtifactError> {
        let mut found = self.query_many(
            &format!(
                "SELECT {COLUMNS} FROM artifact_records \
                 WHERE namespace = $1 AND scope = $2 AND key = $3 ORDER BY seq DESC LIMIT 1"
            ),
            &[
                (&self.namespace.as_str(), Type::TEXT),
                (&scope.as_bytes(), Type::BYTEA),
                (&key.as_bytes(), Type::BYTEA),
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
        match artifact_type {
            Some(t) => self.query_many(
                &format!(
                    "SELECT {COLUMNS} FROM artifact_records \
                     WHERE namespace = $1 AND scope = $2 AND artifact_type = $3 ORDER BY seq"
                ),
                &[
                    (&ns, Type::TEXT),
                    (&scope.as_bytes(), Type::BYTEA),
                    (&t.as_bytes(), Type::BYTEA),
                ],
                "listing artifacts",
            ),
            None => self.query_many(
                &format!(
                    "SELECT {COLUMNS} FROM artifact_records \
                     WHERE namespace = $1 AND scope = $2 ORDER BY seq"
                ),
                &[(&ns, Type::TEXT), (&scope.as_bytes(), Type::BYTEA)],
                "listing artifacts",
            ),
        }
    }

    fn delete(&self, id: Uuid) -> Result<bool, ArtifactError> {
        let mut client = self.pool.get().map_err(db_error)?;
        let removed = client
            .execute_typed(
                "DELETE FROM artifact_records WHERE namespace = $1 AND id = $2",
                &[
                    (&self.namespace.as_str(), Type::TEXT),
                    (&id.to_string(), Type::TEXT),
                ],
            )
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
    }

    #[test]
    fn a_bad_url_is_reported_at_open() {
        let err = PostgresArtifactStore::open("mysql://x/y", PostgresArtifactOptions::default())
            .unwrap_err();
        assert!(err.to_string().contains("postgres://"), "{err}");
    }
}
