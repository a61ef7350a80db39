//! The embedded default store: one SQLite database file in WAL mode.
//!
//! **Layout.** The file may be shared with other Mnemon components, so every table is prefixed
//! `asset_` and the schema version lives in `asset_schema`, not in the file-wide
//! `PRAGMA user_version`. `asset_assets` holds one row per asset: its id, its `asset_type`
//! (indexed, for listing by type), its JSON skeleton and its precomputed meta. `asset_leaves`
//! holds each bytes or object leaf as a BLOB with its path (see the `encoding` module).
//!
//! **Tenants.** A store is opened for one namespace ([`SqliteAssetOptions::namespace`]); the
//! namespace leads the key of every row (schema version 2) and every statement is bound to it,
//! so no call through the handle reads, lists, resolves or deletes another namespace's assets.
//! Version 2 moves the assets of a file written before namespaces into the default namespace; a
//! read-only open of such a file (which cannot migrate) reads it as it is, all of it the default
//! namespace's.
//!
//! **Migrations.** `MIGRATIONS` is an ordered list of numbered steps; opening a database
//! applies the ones it has not seen, in one transaction, and refuses a database written by a
//! newer build. Setup, durability and migrations are `mnemon-db`'s, shared by every store; a
//! database whose schema is current opens without taking the write lock.
//!
//! **Durability.** Every write is one `BEGIN IMMEDIATE … COMMIT` transaction, so it is atomic,
//! and returns only after the commit. With [`Durability::Full`] (the default of every Mnemon
//! store, explained in `mnemon_db`) SQLite fsyncs the
//! WAL at each commit: a returned put survives a killed process, an OS crash and a power loss.
//! [`Durability::Normal`] skips that fsync (the WAL is synced at checkpoints): a returned put
//! still survives `kill -9` of the process, because the commit is in the OS page cache, but an
//! OS crash or power loss may lose the last commits (never corrupt the file). Use Normal when
//! losing the last seconds of writes on power loss is acceptable; batch puts with
//! [`AssetStore::put_batch`] amortise the fsync either way.
//!
//! **Concurrency.** One connection writes and another reads, each behind a mutex; in WAL mode
//! reads do not wait for a write's fsync. Several processes may open the same file; a writer
//! waits up to the busy timeout for another. [`SqliteAssetStore::open_read_only`] serves readers: no
//! write lock, nothing created, and it works on a read-only directory or mount.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mnemon_db::sqlite::{self, Migration, Schema, Settings};
use mnemon_db::{DbError, Durability, Namespace};
use mnemon_types::Asset;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use crate::codec::CodecRegistry;
use crate::encoding::{self, Encoded, StoredLeaf};
use crate::error::StoreError;
use crate::store::{AssetMeta, AssetStore, check_storable};

/// The schema migrations, in order; the step numbered `v` takes the schema from `v - 1` to `v`.
const MIGRATIONS: &[Migration] = &[
    V1,
    // 2: every asset belongs to a namespace (tenant); existing assets get the default one.
    Migration {
        version: 2,
        sql: SCHEMA_V2,
    },
];

/// 1: assets with their skeleton and meta; bytes and object leaves as BLOBs.
const V1: Migration = Migration {
    version: 1,
    sql: "CREATE TABLE asset_assets (
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
};

/// Version 2: the namespace (`mnemon_db::Namespace`) leads every key. SQLite cannot change a
/// primary key in place, so both tables are rebuilt; every existing row carries over into the
/// default namespace, so a file written before namespaces keeps its assets.
const SCHEMA_V2: &str = "CREATE TABLE asset_assets_v2 (
        namespace  TEXT NOT NULL,
        asset_id   TEXT NOT NULL,
        asset_type TEXT,
        skeleton   TEXT NOT NULL,
        meta       TEXT NOT NULL,
        leaf_count INTEGER NOT NULL,
        PRIMARY KEY (namespace, asset_id)
    );
    INSERT INTO asset_assets_v2 (namespace, asset_id, asset_type, skeleton, meta, leaf_count)
        SELECT 'default', asset_id, asset_type, skeleton, meta, leaf_count FROM asset_assets;
    DROP TABLE asset_assets;
    ALTER TABLE asset_assets_v2 RENAME TO asset_assets;
    CREATE INDEX asset_assets_by_type ON asset_assets (namespace, asset_type, asset_id);
    CREATE TABLE asset_leaves_v2 (
        namespace TEXT NOT NULL,
        asset_id  TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        path      TEXT NOT NULL,
        kind      TEXT NOT NULL CHECK (kind IN ('bytes', 'object')),
        type_name TEXT,
        data      BLOB NOT NULL,
        UNIQUE (namespace, asset_id, seq)
    );
    INSERT INTO asset_leaves_v2 (namespace, asset_id, seq, path, kind, type_name, data)
        SELECT 'default', asset_id, seq, path, kind, type_name, data FROM asset_leaves;
    DROP TABLE asset_leaves;
    ALTER TABLE asset_leaves_v2 RENAME TO asset_leaves;";

/// The asset tables' schema; the version lives in `asset_schema`.
static SCHEMA: Schema = Schema {
    component: "asset",
    table: "asset_schema",
    key_column: "singleton",
    migrations: MIGRATIONS,
};

/// The schema as files written before namespaces have it: what a reader, which cannot migrate,
/// opens such a file with (see [`SqliteAssetStore::open_read_only`]).
static SCHEMA_BEFORE_NAMESPACES: Schema = Schema {
    component: "asset",
    table: "asset_schema",
    key_column: "singleton",
    migrations: &[V1],
};

/// Options for [`SqliteAssetStore::open_with`].
#[derive(Debug, Clone)]
pub struct SqliteAssetOptions {
    /// How hard a commit works to survive crashes. Default: [`Durability::Full`].
    pub durability: Durability,
    /// The codecs for in-process objects. Default: none, so objects are rejected.
    pub codecs: CodecRegistry,
    /// How long a write waits for another process's write. Default: 5 s.
    pub busy_timeout: Duration,
    /// The tenant the store is opened for: it reads and writes only this namespace's assets.
    /// Default: [`Namespace::default()`], which holds every asset written before namespaces.
    pub namespace: Namespace,
}

impl SqliteAssetOptions {
    fn settings(&self) -> Settings {
        Settings {
            durability: self.durability,
            busy_timeout: self.busy_timeout,
            foreign_keys: false,
        }
    }
}

impl Default for SqliteAssetOptions {
    fn default() -> Self {
        // The durability and busy timeout are every store's, decided once in `mnemon_db`.
        let shared = Settings::default();
        SqliteAssetOptions {
            durability: shared.durability,
            codecs: CodecRegistry::new(),
            busy_timeout: shared.busy_timeout,
            namespace: Namespace::default(),
        }
    }
}

/// An [`AssetStore`] in one SQLite database file; see the module docs for the guarantees.
///
/// ```
/// use mnemon_store::{AssetStore, SqliteAssetStore};
/// use mnemon_types::{Asset, Bytes, Map, Value};
///
/// let dir = tempfile::tempdir()?;
/// let store = SqliteAssetStore::open(dir.path().join("mnemon.sqlite3"))?;
/// let mut content = Map::new();
/// content.insert("png".into(), Bytes::with_media_type(vec![0x89, b'P'], "image/png").into());
/// store.put(&Asset::new(Value::Map(content)).with_id("img"))?;
/// let back = store.get("img")?.expect("stored");
/// assert_eq!(back.content.as_map().unwrap()["png"].as_bytes().unwrap().data(), [0x89, b'P']);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SqliteAssetStore {
    writer: Mutex<Connection>,
    reader: Mutex<Connection>,
    path: PathBuf,
    codecs: CodecRegistry,
    namespace: Namespace,
    /// The file predates namespaces (a version-1 file opened read-only): every asset is the
    /// default namespace's.
    before_namespaces: bool,
}

impl SqliteAssetStore {
    /// Opens (creating if needed) the database at `path` with default options. The parent
    /// directory must exist.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteAssetOptions::default())
    }

    /// Opens (creating if needed) the database at `path`.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: SqliteAssetOptions,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let settings = options.settings();
        let writer = sqlite::open(&path, &settings, &SCHEMA).map_err(db_error)?;
        let reader = sqlite::connect(&path, &settings).map_err(db_error)?;
        Ok(SqliteAssetStore {
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
            path,
            codecs: options.codecs,
            namespace: options.namespace,
            before_namespaces: false,
        })
    }

    /// Opens the database at `path` for reading only: no write lock is taken, so reads work
    /// while another process holds a write transaction; nothing is created; a read-only
    /// directory or mount works. A missing file, or one without asset tables, reads as empty.
    /// Writes through the store fail.
    pub fn open_read_only(
        path: impl AsRef<Path>,
        options: SqliteAssetOptions,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let settings = options.settings();
        // A file from before namespaces cannot be migrated without writing: it is read as it
        // is, all of it the default namespace's.
        let open = |schema: &Schema| sqlite::open_read_only(&path, &settings, schema);
        let (writer, before_namespaces) = match open(&SCHEMA) {
            Ok(read) => (read, false),
            Err(DbError::NeedsUpgrade { found: 1, .. }) => {
                (open(&SCHEMA_BEFORE_NAMESPACES).map_err(db_error)?, true)
            }
            Err(e) => return Err(db_error(e)),
        };
        let schema = if before_namespaces {
            &SCHEMA_BEFORE_NAMESPACES
        } else {
            &SCHEMA
        };
        let reader = open(schema).map_err(db_error)?;
        Ok(SqliteAssetStore {
            writer: Mutex::new(writer.conn),
            reader: Mutex::new(reader.conn),
            path,
            codecs: options.codecs,
            namespace: options.namespace,
            before_namespaces,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
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
            write_one(&tx, &self.namespace, asset, encoded)
                .map_err(StoreError::storage("writing an asset"))?;
        }
        tx.commit().map_err(StoreError::storage("committing"))
    }
}

/// The store error for a setup failure: a newer schema keeps its own variant, and engine
/// failures name the step that failed, as the store's own messages do.
fn db_error(error: DbError) -> StoreError {
    match error {
        DbError::SchemaTooNew {
            path,
            found,
            supported,
            ..
        } => StoreError::SchemaTooNew {
            path: path.display().to_string(),
            found,
            supported,
        },
        DbError::Open { path, detail } => StoreError::Storage {
            action: "opening the database",
            error: format!("cannot open {}: {detail}", path.display()).into(),
        },
        DbError::Setup { action, detail, .. } => StoreError::Storage {
            action,
            error: detail.into(),
        },
        DbError::Migration { detail, .. } => StoreError::Storage {
            action: "migrating the asset schema",
            error: detail.into(),
        },
        other => StoreError::Storage {
            action: "opening the database",
            error: Box::new(other),
        },
    }
}

fn write_one(
    tx: &Transaction<'_>,
    namespace: &Namespace,
    asset: &Asset,
    encoded: &Encoded,
) -> rusqlite::Result<()> {
    let ns = namespace.as_str();
    tx.prepare_cached(
        "INSERT INTO asset_assets (namespace, asset_id, asset_type, skeleton, meta, leaf_count)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (namespace, asset_id) DO UPDATE SET asset_type = excluded.asset_type,
           skeleton = excluded.skeleton, meta = excluded.meta, leaf_count = excluded.leaf_count",
    )?
    .execute(params![
        ns,
        asset.asset_id,
        asset.asset_type,
        encoded.skeleton,
        encoded.meta,
        encoded.leaves.len() as i64
    ])?;
    tx.prepare_cached("DELETE FROM asset_leaves WHERE namespace = ?1 AND asset_id = ?2")?
        .execute([ns, &asset.asset_id])?;
    if !encoded.leaves.is_empty() {
        let mut insert = tx.prepare_cached(
            "INSERT INTO asset_leaves (namespace, asset_id, seq, path, kind, type_name, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        for (seq, leaf) in encoded.leaves.iter().enumerate() {
            insert.execute(params![
                ns,
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

impl AssetStore for SqliteAssetStore {
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
        let ns = self.namespace.as_str();
        let mut conn = self.reader();
        // One read transaction, so the skeleton and its leaves come from the same commit.
        let tx = conn
            .transaction()
            .map_err(StoreError::storage("reading an asset"))?;
        let row: Option<(String, i64)> = tx
            .prepare_cached(&self.in_namespace(
                "SELECT skeleton, leaf_count FROM asset_assets WHERE {ns} AND asset_id = ?2",
            ))
            .and_then(|mut s| {
                s.query_row([ns, asset_id], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(StoreError::storage("reading an asset"))?;
        let Some((skeleton, leaf_count)) = row else {
            return Ok(None);
        };
        let leaves = if leaf_count == 0 {
            Vec::new()
        } else {
            tx.prepare_cached(&self.in_namespace(
                "SELECT path, kind, type_name, data FROM asset_leaves
                 WHERE {ns} AND asset_id = ?2 ORDER BY seq",
            ))
            .and_then(|mut s| {
                s.query_map([ns, asset_id], |r| {
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
        encoding::check_leaf_count(asset_id, leaf_count, leaves.len())?;
        encoding::decode(asset_id, &skeleton, leaves, &self.codecs).map(Some)
    }

    fn delete(&self, asset_id: &str) -> Result<bool, StoreError> {
        let mut conn = self.writer();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(StoreError::storage("starting a delete"))?;
        let ns = self.namespace.as_str();
        let removed = (|| {
            tx.prepare_cached("DELETE FROM asset_leaves WHERE namespace = ?1 AND asset_id = ?2")?
                .execute([ns, asset_id])?;
            tx.prepare_cached("DELETE FROM asset_assets WHERE namespace = ?1 AND asset_id = ?2")?
                .execute([ns, asset_id])
        })()
        .map_err(StoreError::storage("deleting an asset"))?;
        tx.commit().map_err(StoreError::storage("committing"))?;
        Ok(removed > 0)
    }

    fn list_ids(&self, asset_type: Option<&str>) -> Result<Vec<String>, StoreError> {
        let ns = self.namespace.as_str();
        let conn = self.reader();
        let result =
            match asset_type {
                None => conn
                    .prepare_cached(&self.in_namespace(
                        "SELECT asset_id FROM asset_assets WHERE {ns} ORDER BY asset_id",
                    ))
                    .and_then(|mut s| s.query_map([ns], |r| r.get(0))?.collect()),
                Some(t) => conn
                    .prepare_cached(&self.in_namespace(
                        "SELECT asset_id FROM asset_assets WHERE {ns} AND asset_type = ?2
                     ORDER BY asset_id",
                    ))
                    .and_then(|mut s| s.query_map([ns, t], |r| r.get(0))?.collect()),
            };
        result.map_err(StoreError::storage("listing assets"))
    }

    fn meta(&self, asset_id: &str) -> Result<Option<AssetMeta>, StoreError> {
        let ns = self.namespace.as_str();
        let conn = self.reader();
        let text: Option<String> = conn
            .prepare_cached(
                &self.in_namespace("SELECT meta FROM asset_assets WHERE {ns} AND asset_id = ?2"),
            )
            .and_then(|mut s| s.query_row([ns, asset_id], |r| r.get(0)).optional())
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

impl Drop for SqliteAssetStore {
    fn drop(&mut self) {
        // Folds the WAL back into the main file so that one file is left at rest; never waits.
        let conn = self
            .writer
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        sqlite::checkpoint_on_close(conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A leaf lost behind the store's back is reported as corruption, not read back as null.
    #[test]
    fn a_missing_leaf_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let store = SqliteAssetStore::open(&path).unwrap();
        let mut content = mnemon_types::Map::new();
        content.insert("b".into(), mnemon_types::Bytes::new(vec![1, 2]).into());
        let asset = Asset::new(mnemon_types::Value::Map(content)).with_id("a");
        store.put(&asset).unwrap();
        assert_eq!(store.get("a").unwrap().as_ref(), Some(&asset));
        Connection::open(&path)
            .unwrap()
            .execute("DELETE FROM asset_leaves", [])
            .unwrap();
        let err = store.get("a").unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(
            err.to_string().contains("1 bytes/object leaves but 0"),
            "{err}"
        );
    }

    #[test]
    fn fresh_database_is_at_the_current_version_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        {
            let store = SqliteAssetStore::open(&path).unwrap();
            store
                .put(&Asset::from_json(json!({"asset_id": "a", "content": 1})).unwrap())
                .unwrap();
        }
        let conn = Connection::open(&path).unwrap();
        let version: i64 = conn
            .query_row("SELECT version FROM asset_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA.version());
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        drop(conn);
        let store = SqliteAssetStore::open(&path).unwrap();
        assert_eq!(store.list_ids(None).unwrap(), ["a"]);
    }

    #[test]
    fn a_newer_schema_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        drop(SqliteAssetStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.execute("UPDATE asset_schema SET version = 99", [])
            .unwrap();
        drop(conn);
        let err = SqliteAssetStore::open(&path).unwrap_err();
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
        let store = SqliteAssetStore::open(&path).unwrap();
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
            let store = SqliteAssetStore::open_with(
                &path,
                SqliteAssetOptions {
                    durability,
                    ..SqliteAssetOptions::default()
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

    fn quick() -> SqliteAssetOptions {
        SqliteAssetOptions {
            busy_timeout: Duration::from_millis(300),
            ..SqliteAssetOptions::default()
        }
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
                        SqliteAssetStore::open(&path).map(drop)
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
    fn readers_open_while_another_connection_holds_a_write_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let store = SqliteAssetStore::open(&path).unwrap();
        store
            .put(&Asset::from_json(json!({"asset_id": "a", "content": 1})).unwrap())
            .unwrap();
        drop(store);
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch("BEGIN IMMEDIATE; DELETE FROM asset_leaves WHERE 0;")
            .unwrap();
        let store = SqliteAssetStore::open_with(&path, quick()).unwrap();
        assert_eq!(store.list_ids(None).unwrap(), ["a"]);
        let reader = SqliteAssetStore::open_read_only(&path, quick()).unwrap();
        assert_eq!(reader.list_ids(None).unwrap(), ["a"]);
        assert!(reader.get("a").unwrap().is_some());
        writer.execute_batch("COMMIT").unwrap();
    }

    #[test]
    fn read_only_open_of_a_missing_file_is_empty_creates_nothing_and_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let reader = SqliteAssetStore::open_read_only(&path, quick()).unwrap();
        assert!(reader.list_ids(None).unwrap().is_empty());
        assert!(reader.get("a").unwrap().is_none());
        assert!(reader.meta("a").unwrap().is_none());
        let put = reader.put(&Asset::from_json(json!({"asset_id": "a"})).unwrap());
        assert!(matches!(put, Err(StoreError::Storage { .. })), "{put:?}");
        drop(reader);
        assert!(!path.exists());
    }

    #[test]
    fn read_only_open_refuses_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        drop(SqliteAssetStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.execute("UPDATE asset_schema SET version = 99", [])
            .unwrap();
        drop(conn);
        let err = SqliteAssetStore::open_read_only(&path, quick()).unwrap_err();
        assert!(
            matches!(err, StoreError::SchemaTooNew { found: 99, .. }),
            "{err}"
        );
    }

    /// A file as a build from before namespaces wrote it: schema version 1, one asset with a
    /// bytes leaf.
    fn version_1_file(path: &Path) {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(V1.sql).unwrap();
        conn.execute_batch(
            "CREATE TABLE asset_schema (singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
                version INTEGER NOT NULL);
             INSERT INTO asset_schema VALUES (1, 1);",
        )
        .unwrap();
        let store_one = |conn: &Connection| {
            let asset = Asset::from_json(json!({"asset_id": "old", "asset_type": "t"})).unwrap();
            let mut content = mnemon_types::Map::new();
            content.insert("b".into(), mnemon_types::Bytes::new(vec![1, 2]).into());
            let asset = Asset {
                content: mnemon_types::Value::Map(content),
                ..asset
            };
            let encoded = encoding::encode(&asset, &CodecRegistry::new()).unwrap();
            conn.execute(
                "INSERT INTO asset_assets VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    asset.asset_id,
                    asset.asset_type,
                    encoded.skeleton,
                    encoded.meta,
                    1
                ],
            )
            .unwrap();
            let leaf = &encoded.leaves[0];
            conn.execute(
                "INSERT INTO asset_leaves VALUES ('old', 0, ?1, ?2, ?3, ?4)",
                params![
                    leaf.path,
                    leaf.kind.as_str(),
                    leaf.type_name,
                    leaf.data.as_slice()
                ],
            )
            .unwrap();
            asset
        };
        store_one(&conn);
    }

    fn in_namespace(name: &str) -> SqliteAssetOptions {
        SqliteAssetOptions {
            namespace: name.parse().unwrap(),
            ..quick()
        }
    }

    /// Issue 13, item 3: a file from before namespaces opens read-only as it is (a reader
    /// cannot migrate), all of it the default namespace's.
    #[test]
    fn a_version_1_file_reads_read_only_as_the_default_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        version_1_file(&path);
        let reader = SqliteAssetStore::open_read_only(&path, quick()).unwrap();
        assert_eq!(reader.list_ids(None).unwrap(), ["old"]);
        assert_eq!(reader.list_ids(Some("t")).unwrap(), ["old"]);
        assert!(reader.get("old").unwrap().is_some());
        assert!(reader.meta("old").unwrap().is_some());
        let other = SqliteAssetStore::open_read_only(&path, in_namespace("acme")).unwrap();
        assert!(other.list_ids(None).unwrap().is_empty());
        assert!(other.get("old").unwrap().is_none());
        assert!(other.meta("old").unwrap().is_none());
    }

    /// Issue 13, item 3: opening a version-1 file to write migrates it to version 2, every
    /// asset (with its leaves) in the default namespace and none in another.
    #[test]
    fn a_version_1_file_migrates_into_the_default_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        version_1_file(&path);
        let store = SqliteAssetStore::open_with(&path, quick()).unwrap();
        let back = store.get("old").unwrap().unwrap();
        let bytes = back.content.as_map().unwrap()["b"].as_bytes().unwrap();
        assert_eq!(bytes.data(), [1, 2]);
        assert_eq!(store.list_ids(Some("t")).unwrap(), ["old"]);
        drop(store);
        let other = SqliteAssetStore::open_with(&path, in_namespace("acme")).unwrap();
        assert!(other.get("old").unwrap().is_none());
        assert!(!other.delete("old").unwrap());
        let conn = Connection::open(&path).unwrap();
        let version: i64 = conn
            .query_row("SELECT version FROM asset_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 2);
    }

    #[test]
    fn bytes_are_blobs_not_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let store = SqliteAssetStore::open(&path).unwrap();
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
