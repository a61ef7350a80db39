//! The embedded default artifact store: one SQLite file, WAL mode, durable when `save` returns.
//!
//! Connection setup, durability and the `artifact_schema` migrations are `mnemon-db`'s, shared
//! with the other stores.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mnemon_db::sqlite::{self, Migration, Schema, Settings};
use mnemon_db::{DbError, Durability};
use mnemon_types::{Artifact, StorageLocation, artifact::Timestamp};
use rusqlite::{Connection, Row, params};
use uuid::Uuid;

use crate::store::check_required;
use crate::{ArtifactError, ArtifactStore};

/// Every table is prefixed `artifact_`, because the database file is shared with other Mnemon
/// components. Version 1 is written with `IF NOT EXISTS` because files from before `mnemon-db`
/// may have its tables without a version row.
static SCHEMA: Schema = Schema {
    component: "artifact",
    table: "artifact_schema",
    key_column: "singleton",
    migrations: &[Migration {
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
    }],
};

const COLUMNS: &str = "id, key, artifact_type, name, description, storage_backend, storage_id, data, scope, created_at";

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
#[derive(Debug)]
pub struct SqliteArtifactStore {
    conn: Mutex<Connection>,
    busy_timeout: Duration,
}

/// Options for [`SqliteArtifactStore::open_with`]; the defaults are every store's
/// (`mnemon_db`).
#[derive(Debug, Clone, Copy)]
pub struct SqliteArtifactOptions {
    /// How hard a commit works to survive crashes. Default: [`Durability::Full`].
    pub durability: Durability,
    /// How long a write waits for another process's write. Default: 5 s.
    pub busy_timeout: Duration,
}

impl Default for SqliteArtifactOptions {
    fn default() -> Self {
        let shared = Settings::default();
        SqliteArtifactOptions {
            durability: shared.durability,
            busy_timeout: shared.busy_timeout,
        }
    }
}

impl SqliteArtifactOptions {
    fn settings(self) -> Settings {
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
        let conn = sqlite::open(path.as_ref(), &settings, &SCHEMA).map_err(db_error)?;
        Ok(Self::with(conn, &settings))
    }

    /// Opens the database at `path` for reading only: no write lock is taken, nothing is
    /// created, and a read-only directory or mount works. A missing file, or one without
    /// artifact tables, reads as empty. Saves and deletes fail.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, ArtifactError> {
        let settings = Settings::default();
        let read = sqlite::open_read_only(path.as_ref(), &settings, &SCHEMA).map_err(db_error)?;
        Ok(Self::with(read.conn, &settings))
    }

    /// A private database in memory, for tests and short-lived programs; nothing is kept.
    pub fn open_in_memory() -> Result<Self, ArtifactError> {
        let settings = Settings::default();
        let conn = sqlite::open_in_memory(&settings, &SCHEMA).map_err(db_error)?;
        Ok(Self::with(conn, &settings))
    }

    fn with(conn: Connection, settings: &Settings) -> Self {
        SqliteArtifactStore {
            conn: Mutex::new(conn),
            busy_timeout: settings.busy_timeout,
        }
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
    artifact: &Artifact,
    data: Option<String>,
) -> Result<u64, ArtifactError> {
    const ACTION: &str = "saving an artifact";
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

impl ArtifactStore for SqliteArtifactStore {
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
        let conn = self.conn();
        // The write lock is taken before the content is written and released after the record
        // is committed: another save (in this process or another) cannot write the same
        // storage id in between, so the newest record always points at its own content.
        sqlite::begin_immediate(&conn, self.busy_timeout)
            .map_err(|e| ArtifactError::database(ACTION, e))?;
        let result = write_content().and_then(|()| insert(&conn, artifact, data));
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
        assert!(started.elapsed() < Duration::from_secs(2));
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
