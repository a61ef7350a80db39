//! The embedded default store: one SQLite database file in WAL mode.
//!
//! **Layout.** The file may be shared with other Mnemon components, so every table is prefixed
//! `asset_` and the schema version lives in `asset_schema`, not in the file-wide
//! `PRAGMA user_version`. `asset_assets` holds one row per asset: its id, its `asset_type`
//! (indexed, for listing by type), its JSON skeleton and its precomputed meta. `asset_leaves`
//! holds each bytes or object leaf as a BLOB with its path (see the `encoding` module).
//!
//! **Migrations.** [`MIGRATIONS`] is an ordered list; opening a database applies the ones it
//! has not seen, in one transaction, and refuses a database written by a newer build.
//!
//! **Durability.** Every write is one `BEGIN IMMEDIATE … COMMIT` transaction, so it is atomic,
//! and returns only after the commit. With [`Durability::Full`] (the default) SQLite fsyncs the
//! WAL at each commit: a returned put survives a killed process, an OS crash and a power loss.
//! [`Durability::Normal`] skips that fsync (the WAL is synced at checkpoints): a returned put
//! still survives `kill -9` of the process, because the commit is in the OS page cache, but an
//! OS crash or power loss may lose the last commits (never corrupt the file). Use Normal when
//! losing the last seconds of writes on power loss is acceptable; batch puts with
//! [`AssetStore::put_batch`] amortise the fsync either way.
//!
//! **Concurrency.** One connection writes and another reads, each behind a mutex; in WAL mode
//! reads do not wait for a write's fsync. Several processes may open the same file; a writer
//! waits up to the busy timeout for another.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mnemon_types::Asset;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use crate::codec::CodecRegistry;
use crate::encoding::{self, Encoded, StoredLeaf};
use crate::error::StoreError;
use crate::store::{AssetMeta, AssetStore, check_storable};

/// The schema migrations, in order; entry `i` takes the schema from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: assets with their skeleton and meta; bytes and object leaves as BLOBs.
    "CREATE TABLE asset_assets (
        asset_id   TEXT PRIMARY KEY NOT NULL,
        asset_type TEXT,
        skeleton   TEXT NOT NULL,
        meta       TEXT NOT NULL,
        leaf_count INTEGER NOT NULL
    );
    CREATE INDEX asset_assets_by_type ON asset_assets (asset_type, asset_id);
    CREATE TABLE asset_leaves (
        asset_id  TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        path      TEXT NOT NULL,
        kind      TEXT NOT NULL CHECK (kind IN ('bytes', 'object')),
        type_name TEXT,
        data      BLOB NOT NULL,
        UNIQUE (asset_id, seq)
    );",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// How hard a commit works to survive crashes; see the module docs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=NORMAL`: survives a killed process, not an OS crash or power loss.
    Normal,
    /// `synchronous=FULL`: every commit is fsynced; survives power loss too.
    #[default]
    Full,
}

/// Options for [`SqliteStore::open_with`].
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// How hard a commit works to survive crashes. Default: [`Durability::Full`].
    pub durability: Durability,
    /// The codecs for in-process objects. Default: none, so objects are rejected.
    pub codecs: CodecRegistry,
    /// How long a write waits for another process's write. Default: 5 s.
    pub busy_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            durability: Durability::default(),
            codecs: CodecRegistry::new(),
            busy_timeout: Duration::from_secs(5),
        }
    }
}

/// An [`AssetStore`] in one SQLite database file; see the module docs for the guarantees.
///
/// ```
/// use mnemon_store::{AssetStore, SqliteStore};
/// use mnemon_types::{Asset, Bytes, Map, Value};
///
/// let dir = tempfile::tempdir()?;
/// let store = SqliteStore::open(dir.path().join("mnemon.sqlite3"))?;
/// let mut content = Map::new();
/// content.insert("png".into(), Bytes::with_media_type(vec![0x89, b'P'], "image/png").into());
/// store.put(&Asset::new(Value::Map(content)).with_id("img"))?;
/// let back = store.get("img")?.expect("stored");
/// assert_eq!(back.content.as_map().unwrap()["png"].as_bytes().unwrap().data(), [0x89, b'P']);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SqliteStore {
    writer: Mutex<Connection>,
    reader: Mutex<Connection>,
    path: PathBuf,
    codecs: CodecRegistry,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with default options. The parent
    /// directory must exist.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens (creating if needed) the database at `path`.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let mut writer = connect(&path, &options)?;
        migrate(&mut writer, &path)?;
        let reader = connect(&path, &options)?;
        Ok(SqliteStore {
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
            path,
            codecs: options.codecs,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    // Transactions roll back when dropped, so a panic elsewhere leaves a connection usable.
    fn writer(&self) -> MutexGuard<'_, Connection> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn reader(&self) -> MutexGuard<'_, Connection> {
        self.reader.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn encode(&self, asset: &Asset) -> Result<Encoded, StoreError> {
        check_storable(asset)?;
        encoding::encode(asset, &self.codecs)
    }

    fn write_all(&self, assets: &[(&Asset, Encoded)]) -> Result<(), StoreError> {
        let mut conn = self.writer();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(StoreError::storage("starting a write"))?;
        for (asset, encoded) in assets {
            write_one(&tx, asset, encoded).map_err(StoreError::storage("writing an asset"))?;
        }
        tx.commit().map_err(StoreError::storage("committing"))
    }
}

fn connect(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|e| StoreError::Storage {
        action: "opening the database",
        error: format!("cannot open {}: {e}", path.display()).into(),
    })?;
    let setup = StoreError::storage;
    conn.busy_timeout(options.busy_timeout)
        .map_err(setup("setting the busy timeout"))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(setup("switching to WAL"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Storage {
            action: "switching to WAL",
            error: format!("{} cannot use WAL mode (got {mode})", path.display()).into(),
        });
    }
    let sync = match options.durability {
        Durability::Normal => "NORMAL",
        Durability::Full => "FULL",
    };
    conn.pragma_update(None, "synchronous", sync)
        .map_err(setup("setting synchronous"))?;
    Ok(conn)
}

fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let fail = StoreError::storage("migrating the asset schema");
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(StoreError::storage("migrating the asset schema"))?;
    let result = (|| {
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS asset_schema (
                singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
                version   INTEGER NOT NULL
            )",
        )?;
        let found: Option<i64> = tx
            .query_row(
                "SELECT version FROM asset_schema WHERE singleton = 1",
                [],
                |r| r.get(0),
            )
            .optional()?;
        Ok(found.unwrap_or(0))
    })();
    let found = result.map_err(fail)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            path: path.display().to_string(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let pending = MIGRATIONS.iter().skip(usize::try_from(found).unwrap_or(0));
    for migration in pending {
        tx.execute_batch(migration)
            .map_err(StoreError::storage("migrating the asset schema"))?;
    }
    if found < SCHEMA_VERSION {
        tx.execute(
            "INSERT INTO asset_schema (singleton, version) VALUES (1, ?1)
             ON CONFLICT (singleton) DO UPDATE SET version = excluded.version",
            [SCHEMA_VERSION],
        )
        .map_err(StoreError::storage("migrating the asset schema"))?;
    }
    tx.commit()
        .map_err(StoreError::storage("migrating the asset schema"))
}

fn write_one(tx: &Transaction<'_>, asset: &Asset, encoded: &Encoded) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO asset_assets (asset_id, asset_type, skeleton, meta, leaf_count)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (asset_id) DO UPDATE SET asset_type = excluded.asset_type,
           skeleton = excluded.skeleton, meta = excluded.meta, leaf_count = excluded.leaf_count",
    )?
    .execute(params![
        asset.asset_id,
        asset.asset_type,
        encoded.skeleton,
        encoded.meta,
        encoded.leaves.len() as i64
    ])?;
    tx.prepare_cached("DELETE FROM asset_leaves WHERE asset_id = ?1")?
        .execute([&asset.asset_id])?;
    if !encoded.leaves.is_empty() {
        let mut insert = tx.prepare_cached(
            "INSERT INTO asset_leaves (asset_id, seq, path, kind, type_name, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for (seq, leaf) in encoded.leaves.iter().enumerate() {
            insert.execute(params![
                asset.asset_id,
                seq as i64,
                leaf.path,
                leaf.kind.as_str(),
                leaf.type_name,
                leaf.data.as_slice()
            ])?;
        }
    }
    Ok(())
}

impl AssetStore for SqliteStore {
    fn put(&self, asset: &Asset) -> Result<(), StoreError> {
        let encoded = self.encode(asset)?;
        self.write_all(&[(asset, encoded)])
    }

    fn put_batch(&self, assets: &[Asset]) -> Result<(), StoreError> {
        // Encode everything first, so that a bad asset fails the batch before anything is
        // written.
        let encoded = assets
            .iter()
            .map(|a| Ok((a, self.encode(a)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.write_all(&encoded)
    }

    fn get(&self, asset_id: &str) -> Result<Option<Asset>, StoreError> {
        let read = StoreError::storage("reading an asset");
        let mut conn = self.reader();
        // One read transaction, so the skeleton and its leaves come from the same commit.
        let tx = conn
            .transaction()
            .map_err(StoreError::storage("reading an asset"))?;
        let row: Option<(String, i64)> = tx
            .prepare_cached("SELECT skeleton, leaf_count FROM asset_assets WHERE asset_id = ?1")
            .and_then(|mut s| {
                s.query_row([asset_id], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(StoreError::storage("reading an asset"))?;
        let Some((skeleton, leaf_count)) = row else {
            return Ok(None);
        };
        let leaves = if leaf_count == 0 {
            Vec::new()
        } else {
            tx.prepare_cached(
                "SELECT path, kind, type_name, data FROM asset_leaves
                 WHERE asset_id = ?1 ORDER BY seq",
            )
            .and_then(|mut s| {
                s.query_map([asset_id], |r| {
                    Ok(StoredLeaf {
                        path: r.get(0)?,
                        kind: r.get(1)?,
                        type_name: r.get(2)?,
                        data: r.get(3)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(read)?
        };
        drop(tx);
        drop(conn);
        encoding::decode(asset_id, &skeleton, leaves, &self.codecs).map(Some)
    }

    fn delete(&self, asset_id: &str) -> Result<bool, StoreError> {
        let mut conn = self.writer();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(StoreError::storage("starting a delete"))?;
        let removed = (|| {
            tx.prepare_cached("DELETE FROM asset_leaves WHERE asset_id = ?1")?
                .execute([asset_id])?;
            tx.prepare_cached("DELETE FROM asset_assets WHERE asset_id = ?1")?
                .execute([asset_id])
        })()
        .map_err(StoreError::storage("deleting an asset"))?;
        tx.commit().map_err(StoreError::storage("committing"))?;
        Ok(removed > 0)
    }

    fn list_ids(&self, asset_type: Option<&str>) -> Result<Vec<String>, StoreError> {
        let conn = self.reader();
        let result = match asset_type {
            None => conn
                .prepare_cached("SELECT asset_id FROM asset_assets ORDER BY asset_id")
                .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect()),
            Some(t) => conn
                .prepare_cached(
                    "SELECT asset_id FROM asset_assets WHERE asset_type = ?1 ORDER BY asset_id",
                )
                .and_then(|mut s| s.query_map([t], |r| r.get(0))?.collect()),
        };
        result.map_err(StoreError::storage("listing assets"))
    }

    fn meta(&self, asset_id: &str) -> Result<Option<AssetMeta>, StoreError> {
        let conn = self.reader();
        let text: Option<String> = conn
            .prepare_cached("SELECT meta FROM asset_assets WHERE asset_id = ?1")
            .and_then(|mut s| s.query_row([asset_id], |r| r.get(0)).optional())
            .map_err(StoreError::storage("reading a meta"))?;
        text.map(|t| {
            serde_json::from_str(&t).map_err(|e| StoreError::Corrupt {
                asset_id: asset_id.to_owned(),
                detail: format!("the stored meta does not parse: {e}"),
            })
        })
        .transpose()
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Folds the WAL back into the main file so that one file is left at rest. A failure
        // (another process reading) only leaves the WAL, which SQLite replays on the next open.
        let conn = self
            .writer
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fresh_database_is_at_the_current_version_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        {
            let store = SqliteStore::open(&path).unwrap();
            store
                .put(&Asset::from_json(json!({"asset_id": "a", "content": 1})).unwrap())
                .unwrap();
        }
        let conn = Connection::open(&path).unwrap();
        let version: i64 = conn
            .query_row("SELECT version FROM asset_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        drop(conn);
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.list_ids(None).unwrap(), ["a"]);
    }

    #[test]
    fn a_newer_schema_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        drop(SqliteStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.execute("UPDATE asset_schema SET version = 99", [])
            .unwrap();
        drop(conn);
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(
            matches!(err, StoreError::SchemaTooNew { found: 99, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("upgrade Mnemon"));
    }

    #[test]
    fn shares_the_file_with_other_tables_and_user_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA user_version = 7; CREATE TABLE other_x (a INTEGER);")
            .unwrap();
        drop(conn);
        let store = SqliteStore::open(&path).unwrap();
        store
            .put(&Asset::from_json(json!({"asset_id": "a"})).unwrap())
            .unwrap();
        drop(store);
        let conn = Connection::open(&path).unwrap();
        let uv: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(uv, 7);
    }

    #[test]
    fn durability_sets_synchronous() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        for (durability, expected) in [(Durability::Full, 2), (Durability::Normal, 1)] {
            let store = SqliteStore::open_with(
                &path,
                SqliteOptions {
                    durability,
                    ..SqliteOptions::default()
                },
            )
            .unwrap();
            let sync: i64 = store
                .writer()
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap();
            assert_eq!(sync, expected);
        }
    }

    #[test]
    fn bytes_are_blobs_not_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let store = SqliteStore::open(&path).unwrap();
        let mut content = mnemon_types::Map::new();
        content.insert(
            "b".into(),
            mnemon_types::Bytes::new(vec![0u8, 255, 7]).into(),
        );
        store
            .put(&Asset::new(mnemon_types::Value::Map(content)).with_id("a"))
            .unwrap();
        let conn = Connection::open(&path).unwrap();
        let (ty, len): (String, i64) = conn
            .query_row(
                "SELECT typeof(data), length(data) FROM asset_leaves WHERE asset_id = 'a'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((ty.as_str(), len), ("blob", 3));
    }
}
