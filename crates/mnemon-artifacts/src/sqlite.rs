//! The embedded default artifact store: one SQLite file, WAL mode, durable when `save` returns.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mnemon_types::{Artifact, StorageLocation, artifact::Timestamp};
use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use crate::store::check_required;
use crate::{ArtifactError, ArtifactStore};

/// The schema version this build writes and reads.
const SCHEMA_VERSION: i64 = 1;

/// Every table is prefixed `artifact_`, because the database file is shared with other Mnemon
/// components.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS artifact_schema (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    version   INTEGER NOT NULL
);
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
";

const COLUMNS: &str = "id, key, artifact_type, name, description, storage_backend, storage_id, data, scope, created_at";

/// An [`ArtifactStore`] in a SQLite database file.
///
/// - WAL journal with `synchronous = FULL`: when [`save`](ArtifactStore::save) returns, the
///   record is committed and synced, so it survives a crash of the process or the machine.
/// - The sequence is SQLite's `AUTOINCREMENT` rowid, which never reuses a value, even after
///   deletes.
/// - Several processes may open the same file; writers wait up to five seconds for each other.
#[derive(Debug)]
pub struct SqliteArtifactStore {
    conn: Mutex<Connection>,
}

impl SqliteArtifactStore {
    /// Opens (creating if needed) the database at `path` and its `artifact_` tables. The
    /// parent directory must exist.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ArtifactError> {
        let conn = Connection::open(path.as_ref())
            .map_err(|e| ArtifactError::database("opening the database", e))?;
        Self::init(conn, true)
    }

    /// A private database in memory (for tests); nothing is kept.
    pub fn open_in_memory() -> Result<Self, ArtifactError> {
        let conn = Connection::open_in_memory()
            .map_err(|e| ArtifactError::database("opening an in-memory database", e))?;
        Self::init(conn, false)
    }

    fn init(mut conn: Connection, on_disk: bool) -> Result<Self, ArtifactError> {
        let setup = |e| ArtifactError::database("setting up the database", e);
        conn.busy_timeout(Duration::from_secs(5)).map_err(setup)?;
        if on_disk {
            let mode: String = conn
                .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
                .map_err(setup)?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(ArtifactError::database(
                    "setting up the database",
                    format!(
                        "the database refused WAL mode (it is in {mode:?} mode); \
                         put it on a local file system that supports shared memory"
                    ),
                ));
            }
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(setup)?;
        let tx = conn.transaction().map_err(setup)?;
        tx.execute_batch(SCHEMA).map_err(setup)?;
        let version: Option<i64> = tx
            .query_row(
                "SELECT version FROM artifact_schema WHERE singleton = 1",
                [],
                |row| row.get(0),
            )
            .optional()
            .map_err(setup)?;
        match version {
            None => {
                tx.execute(
                    "INSERT INTO artifact_schema (singleton, version) VALUES (1, ?1)",
                    [SCHEMA_VERSION],
                )
                .map_err(setup)?;
            }
            Some(found) if found > SCHEMA_VERSION => {
                return Err(ArtifactError::SchemaTooNew {
                    found,
                    supported: SCHEMA_VERSION,
                });
            }
            Some(_) => {}
        }
        tx.commit().map_err(setup)?;
        Ok(SqliteArtifactStore {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a half-applied change: SQLite rolls back
        // any statement or transaction that did not complete.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn query_many(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
        action: &'static str,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(sql)
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

impl ArtifactStore for SqliteArtifactStore {
    fn save(&self, artifact: &Artifact) -> Result<u64, ArtifactError> {
        const ACTION: &str = "saving an artifact";
        check_required(artifact)?;
        let data = artifact
            .data
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(ArtifactError::ContentEncoding)?;
        let conn = self.conn();
        let inserted = conn
            .prepare_cached(&format!(
                "INSERT INTO artifact_records ({COLUMNS}) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) RETURNING seq"
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
                    ],
                    |row| row.get::<_, i64>(0),
                )
            });
        match inserted {
            Ok(seq) => u64::try_from(seq).map_err(|_| {
                ArtifactError::database(
                    ACTION,
                    format!("SQLite returned a negative sequence {seq}"),
                )
            }),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE =>
            {
                Err(ArtifactError::DuplicateId { id: artifact.id })
            }
            Err(e) => Err(ArtifactError::database(ACTION, e)),
        }
    }

    fn get(&self, id: Uuid) -> Result<Option<Artifact>, ArtifactError> {
        let mut found = self.query_many(
            &format!("SELECT {COLUMNS} FROM artifact_records WHERE id = ?1"),
            &[&id.to_string()],
            "reading an artifact",
        )?;
        Ok(found.pop())
    }

    fn latest(&self, scope: &str, key: &str) -> Result<Option<Artifact>, ArtifactError> {
        let mut found = self.query_many(
            &format!(
                "SELECT {COLUMNS} FROM artifact_records WHERE scope = ?1 AND key = ?2 \
                 ORDER BY seq DESC LIMIT 1"
            ),
            &[&scope, &key],
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
                    "SELECT {COLUMNS} FROM artifact_records WHERE scope = ?1 AND artifact_type = ?2 \
                     ORDER BY seq"
                ),
                &[&scope, &t],
                "listing artifacts",
            ),
            None => self.query_many(
                &format!("SELECT {COLUMNS} FROM artifact_records WHERE scope = ?1 ORDER BY seq"),
                &[&scope],
                "listing artifacts",
            ),
        }
    }

    fn delete(&self, id: Uuid) -> Result<bool, ArtifactError> {
        let removed = self
            .conn()
            .execute(
                "DELETE FROM artifact_records WHERE id = ?1",
                [id.to_string()],
            )
            .map_err(|e| ArtifactError::database("deleting an artifact", e))?;
        Ok(removed > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
