//! The keys in SQLite: the data directory's `mnemon.sqlite3`, shared with the other stores.
//!
//! **Layout.** One table, `keys_keys`, versioned in `keys_schema` (the `keys_` prefix keeps it
//! apart from the other stores' tables in the shared file); setup, durability and migrations
//! are `mnemon-db`'s. The id is the primary key, so authenticating reads one row by its key.
//!
//! **Connections.** A writer (create, revoke), a reader (authenticate, list) and a third
//! connection for last-use times whose busy timeout is zero: recording a use never makes a
//! request wait for another process's write, it is skipped instead.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mnemon_db::Namespace;
use mnemon_db::sqlite::{self, Migration, Schema, Settings, WriteConnection, WriteGuard};
use rusqlite::{Connection, OptionalExtension, params};

use crate::KeyError;
use crate::backend::{Backend, RawRow, Revoked, Row};
use crate::store::KeyStoreOptions;

/// The key tables' schema on SQLite; the same table and version numbers as PostgreSQL's.
static SCHEMA: Schema = Schema {
    component: "keys",
    table: "keys_schema",
    key_column: "singleton",
    migrations: &[Migration {
        version: 1,
        sql: "CREATE TABLE keys_keys (
            key_id       TEXT PRIMARY KEY NOT NULL,
            secret_hash  BLOB NOT NULL,
            namespace    TEXT NOT NULL,
            role         TEXT NOT NULL CHECK (role IN ('read', 'write', 'admin')),
            label        TEXT NOT NULL,
            created_ms   INTEGER NOT NULL,
            last_used_ms INTEGER,
            revoked_ms   INTEGER
        );
        CREATE INDEX keys_keys_by_namespace ON keys_keys (namespace, created_ms, key_id);",
    }],
};

const COLUMNS: &str =
    "key_id, secret_hash, namespace, role, label, created_ms, last_used_ms, revoked_ms";

/// The key rows in one SQLite file.
#[derive(Debug)]
pub(crate) struct SqliteBackend {
    path: PathBuf,
    /// `None` when opened read-only. Like every write connection, it takes its turn among the
    /// process's writers to the file first (`mnemon_db::sqlite::WriteQueue`).
    writer: Option<WriteConnection>,
    reader: Mutex<Connection>,
    /// Last-use times, never waiting for a lock or a turn; `None` when opened read-only.
    toucher: Option<WriteConnection>,
}

fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    conn.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SqliteBackend {
    pub(crate) fn open(path: &Path, options: &KeyStoreOptions) -> Result<Self, KeyError> {
        let settings = settings(options);
        let writer = sqlite::open(path, &settings, &SCHEMA)?;
        let reader = sqlite::connect(path, &settings)?;
        let never_wait = Settings {
            busy_timeout: Duration::ZERO,
            ..settings
        };
        let toucher = sqlite::connect(path, &never_wait)?;
        Ok(SqliteBackend {
            path: path.to_path_buf(),
            writer: Some(WriteConnection::new(writer, path, &settings)),
            reader: Mutex::new(reader),
            toucher: Some(WriteConnection::new(toucher, path, &never_wait)),
        })
    }

    pub(crate) fn open_read_only(path: &Path, options: &KeyStoreOptions) -> Result<Self, KeyError> {
        let read_only = sqlite::open_read_only(path, &settings(options), &SCHEMA)?;
        Ok(SqliteBackend {
            path: path.to_path_buf(),
            writer: None,
            reader: Mutex::new(read_only.conn),
            toucher: None,
        })
    }

    fn failed(&self, action: &'static str) -> impl Fn(rusqlite::Error) -> KeyError + '_ {
        move |e| KeyError::Sqlite {
            action,
            path: self.path.display().to_string(),
            detail: e.to_string(),
        }
    }

    /// The write connection during this store's turn to write, for `action`.
    fn writer(&self, action: &'static str) -> Result<WriteGuard<'_>, KeyError> {
        self.writer
            .as_ref()
            .ok_or(KeyError::ReadOnly)?
            .lock()
            .map_err(self.failed(action))
    }
}

fn settings(options: &KeyStoreOptions) -> Settings {
    Settings {
        durability: options.durability,
        busy_timeout: options.busy_timeout,
        foreign_keys: false,
    }
}

fn raw(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok(RawRow {
        id: row.get(0)?,
        hash: row.get(1)?,
        namespace: row.get(2)?,
        role: row.get(3)?,
        label: row.get(4)?,
        created_ms: row.get(5)?,
        last_used_ms: row.get(6)?,
        revoked_ms: row.get(7)?,
    })
}

impl Backend for SqliteBackend {
    fn insert(&self, row: &Row) -> Result<bool, KeyError> {
        let conn = self.writer("create a key")?;
        let changed = conn
            .prepare_cached(
                "INSERT INTO keys_keys (key_id, secret_hash, namespace, role, label, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (key_id) DO NOTHING",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    row.id,
                    row.hash.as_slice(),
                    row.namespace.as_str(),
                    row.role.as_str(),
                    row.label,
                    row.created_ms
                ])
            })
            .map_err(self.failed("create a key"))?;
        Ok(changed == 1)
    }

    fn fetch(&self, id: &str) -> Result<Option<Row>, KeyError> {
        let conn = lock(&self.reader);
        let raw = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM keys_keys WHERE key_id = ?1"
            ))
            .and_then(|mut stmt| stmt.query_row([id], raw).optional())
            .map_err(self.failed("read a key"))?;
        raw.map(RawRow::check).transpose()
    }

    fn list(&self, namespace: Option<&Namespace>) -> Result<Vec<Row>, KeyError> {
        let conn = lock(&self.reader);
        let failed = self.failed("list the keys");
        let raws: Vec<RawRow> = match namespace {
            Some(namespace) => conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM keys_keys WHERE namespace = ?1
                     ORDER BY created_ms, key_id"
                ))
                .and_then(|mut stmt| {
                    stmt.query_map([namespace.as_str()], raw)?
                        .collect::<rusqlite::Result<_>>()
                }),
            None => conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM keys_keys ORDER BY namespace, created_ms, key_id"
                ))
                .and_then(|mut stmt| stmt.query_map([], raw)?.collect::<rusqlite::Result<_>>()),
        }
        .map_err(failed)?;
        raws.into_iter().map(RawRow::check).collect()
    }

    fn revoke(&self, id: &str, now_ms: i64) -> Result<Revoked, KeyError> {
        let conn = self.writer("revoke a key")?;
        let failed = self.failed("revoke a key");
        let changed = conn
            .execute(
                "UPDATE keys_keys SET revoked_ms = ?2 WHERE key_id = ?1 AND revoked_ms IS NULL",
                params![id, now_ms],
            )
            .map_err(&failed)?;
        if changed == 1 {
            return Ok(Revoked::Now);
        }
        let exists: Option<i64> = conn
            .query_row("SELECT 1 FROM keys_keys WHERE key_id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(&failed)?;
        Ok(if exists.is_some() {
            Revoked::Already
        } else {
            Revoked::Missing
        })
    }

    fn touch(&self, id: &str, now_ms: i64) -> Result<(), KeyError> {
        let Some(toucher) = &self.toucher else {
            return Ok(());
        };
        toucher
            .lock()
            .and_then(|conn| {
                conn.prepare_cached("UPDATE keys_keys SET last_used_ms = ?2 WHERE key_id = ?1")?
                    .execute(params![id, now_ms])
            })
            .map_err(self.failed("record a key's use"))?;
        Ok(())
    }

    fn location(&self) -> String {
        // Canonical, so that two spellings of one file share the counter.
        let path = std::fs::canonicalize(&self.path).unwrap_or_else(|_| self.path.clone());
        format!("sqlite:{}", path.display())
    }

    fn any_key(&self, active_only: bool) -> Result<bool, KeyError> {
        let sql = if active_only {
            "SELECT EXISTS (SELECT 1 FROM keys_keys WHERE revoked_ms IS NULL)"
        } else {
            "SELECT EXISTS (SELECT 1 FROM keys_keys)"
        };
        lock(&self.reader)
            .query_row(sql, [], |r| r.get(0))
            .map_err(self.failed("count the keys"))
    }
}

impl Drop for SqliteBackend {
    fn drop(&mut self) {
        if let Some(writer) = &mut self.writer {
            writer.checkpoint_on_close();
        }
    }
}
