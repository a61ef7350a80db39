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
//! **Expiry and filters** (schema version 3). Each asset row carries `created_at`,
//! `updated_at` and `expires_at` (milliseconds since the Unix epoch, from the store's clock;
//! NULL for assets stored before version 3, which never expire). Every read adds
//! `(expires_at IS NULL OR expires_at > now)`, so an expired asset is invisible at once;
//! [`AssetStore::gc`] deletes them through the partial index `asset_assets_by_expiry`.
//! Filters ([`AssetStore::list_where`]) are translated by `mnemon-filter`: the id, type and
//! times are columns, every other field a member of the `meta` JSON.
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
//! **Concurrency.** One connection writes, behind a mutex and the file's queue of writers
//! (`mnemon_db::sqlite::WriteQueue`), and reads go to a pool of up to four read connections
//! (`mnemon_db::sqlite::ReadPool`); in WAL mode reads do not wait for a write's fsync. These
//! connections belong to the file: every writable handle on it in the process with the same
//! settings, whatever its namespace, shares them (`mnemon_db::sqlite::Shared`), so a server's
//! open tenants cost no connections of their own. Several processes may open the same file; a
//! writer waits up to the busy timeout for another. [`SqliteAssetStore::open_read_only`] serves readers: no
//! write lock, nothing created, and it works on a read-only directory or mount.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mnemon_db::expiry::{Clock, Expiry, SystemClock, is_live};
use mnemon_db::sqlite::{
    self, Migration, ReadGuard, ReadPool, Schema, Settings, Shared, WriteConnection, WriteGuard,
};
use mnemon_db::{DbError, Durability, Namespace};
use mnemon_filter::{Dialect, Filter, SqlParam};
use mnemon_types::Asset;
use rusqlite::types::Value as SqlValue;
use rusqlite::{OptionalExtension, Transaction, TransactionBehavior, params};

use crate::codec::CodecRegistry;
use crate::encoding::{self, Encoded, StoredLeaf};
use crate::error::StoreError;
use crate::listing::{self, prefix_end};
use crate::store::{AssetMeta, AssetStore, check_storable};

/// The schema migrations, in order; the step numbered `v` takes the schema from `v - 1` to `v`.
const MIGRATIONS: &[Migration] = &[
    V1,
    // 2: every asset belongs to a namespace (tenant); existing assets get the default one.
    V2,
    // 3: when each asset was stored and when it expires.
    Migration {
        version: 3,
        sql: SCHEMA_V3,
    },
    // 4 rebuilds documents PostgreSQL left out (its `SCHEMA_V4`); SQLite filters the stored
    // meta itself and has none to rebuild. Kept so both number alike.
    Migration {
        version: 4,
        sql: "",
    },
];

/// 2: every asset belongs to a namespace (tenant); existing assets get the default one.
const V2: Migration = Migration {
    version: 2,
    sql: SCHEMA_V2,
};

/// Version 3: the store's times (milliseconds since the Unix epoch). Assets stored before
/// keep NULL: their times are unknown and they never expire. The partial index serves the
/// sweep, which looks only at assets that expire.
const SCHEMA_V3: &str = "ALTER TABLE asset_assets ADD COLUMN created_at INTEGER;
    ALTER TABLE asset_assets ADD COLUMN updated_at INTEGER;
    ALTER TABLE asset_assets ADD COLUMN expires_at INTEGER;
    CREATE INDEX asset_assets_by_expiry ON asset_assets (namespace, expires_at)
        WHERE expires_at IS NOT NULL;";

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
    /// How long an asset written with [`Expiry::Default`] (every `put`) lives: the
    /// namespace's default time-to-live, for this handle. Default: `None`, forever.
    pub default_ttl: Option<Duration>,
    /// The clock that stamps writes and decides what has expired. Default: [`SystemClock`].
    pub clock: Arc<dyn Clock>,
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
            default_ttl: None,
            clock: Arc::new(SystemClock),
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
    connections: Arc<Connections>,
    path: PathBuf,
    codecs: CodecRegistry,
    namespace: Namespace,
    /// The file predates namespaces (a version-1 file opened read-only): every asset is the
    /// default namespace's.
    before_namespaces: bool,
    /// The file has the times of version 3 (a version-1 or 2 file opened read-only has not:
    /// nothing in it expires).
    has_times: bool,
    default_ttl: Option<Duration>,
    clock: Arc<dyn Clock>,
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
        let connections = SHARED
            .get_or_open(&path, settings, || {
                let writer = sqlite::open(&path, &settings, &SCHEMA)?;
                // After `open`: the file exists, in WAL mode, with the current schema.
                Ok(Connections {
                    writer: WriteConnection::new(writer, &path, &settings),
                    readers: ReadPool::open(&path, &settings)?,
                })
            })
            .map_err(db_error)?;
        Ok(SqliteAssetStore {
            connections,
            path,
            codecs: options.codecs,
            namespace: options.namespace,
            before_namespaces: false,
            has_times: true,
            default_ttl: options.default_ttl,
            clock: options.clock,
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
        // A file of an older version cannot be migrated without writing: it is read as it is,
        // with what its version has (before namespaces, all of it the default namespace's;
        // before expiry, nothing expires).
        let (writer, found) =
            sqlite::open_read_only_any_version(&path, &settings, &SCHEMA).map_err(db_error)?;
        let schema = SCHEMA.up_to(found).unwrap_or(SCHEMA);
        // Version 2 brought namespaces, version 3 the times and expiry.
        let (before_namespaces, has_times) = (found < 2, found >= 3);
        let reader = sqlite::open_read_only(&path, &settings, &schema).map_err(db_error)?;
        // The store's own: its connections may carry views over an older file.
        let connections = Arc::new(Connections {
            writer: WriteConnection::new(writer.conn, &path, &settings),
            readers: ReadPool::of(reader.conn),
        });
        Ok(SqliteAssetStore {
            connections,
            path,
            codecs: options.codecs,
            namespace: options.namespace,
            before_namespaces,
            has_times,
            default_ttl: options.default_ttl,
            clock: options.clock,
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

    /// The condition that keeps a statement to live assets, the time bound as `?{n}`: on a
    /// file from before expiry (read-only) every asset is live, and the parameter is still
    /// referenced so that the statement's parameter count does not change.
    fn live(&self, n: usize) -> String {
        if self.has_times {
            format!("(expires_at IS NULL OR expires_at > ?{n})")
        } else {
            format!("(?{n} IS NOT NULL)")
        }
    }

    fn now(&self) -> i64 {
        self.clock.now_millis()
    }

    /// `SELECT {what} FROM asset_assets` over the live assets matching `filter`, in id order,
    /// with its parameters (the namespace is `?1`, the time `?2`).
    fn filtered(
        &self,
        what: &str,
        filter: Option<&Filter>,
        limit: Option<usize>,
    ) -> Result<(String, Vec<SqlValue>), StoreError> {
        let mut params = vec![
            SqlParam::Text(self.namespace.as_str().to_owned()),
            SqlParam::Integer(self.now()),
        ];
        let resolver = listing::resolver("meta", self.has_times, true);
        let condition = listing::where_sql(filter, Dialect::Sqlite, &resolver, &mut params)?;
        let mut sql = self.in_namespace(&format!(
            "SELECT {what} FROM asset_assets WHERE {{ns}} AND {} AND ({condition})",
            self.live(2)
        ));
        if what == "asset_id" {
            sql.push_str(" ORDER BY asset_id");
        }
        if let Some(limit) = limit {
            params.push(SqlParam::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
            sql.push_str(&format!(" LIMIT ?{}", params.len()));
        }
        Ok((sql, params.into_iter().map(sql_value).collect()))
    }

    /// Deletes the assets (and their leaves) of the namespace that `condition` selects
    /// (`?1` the namespace, then `params`), in one transaction; returns how many.
    fn remove_where(
        &self,
        condition: &str,
        params: &[&dyn rusqlite::ToSql],
        action: &'static str,
    ) -> Result<u64, StoreError> {
        let mut conn = self
            .writer()
            .map_err(StoreError::storage("starting a delete"))?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(StoreError::storage("starting a delete"))?;
        let ns = self.namespace.as_str();
        let mut all: Vec<&dyn rusqlite::ToSql> = vec![&ns];
        all.extend_from_slice(params);
        let removed = (|| {
            tx.prepare_cached(&format!(
                "DELETE FROM asset_leaves WHERE namespace = ?1 AND asset_id IN \
                 (SELECT asset_id FROM asset_assets WHERE namespace = ?1 AND {condition})"
            ))?
            .execute(all.as_slice())?;
            tx.prepare_cached(&format!(
                "DELETE FROM asset_assets WHERE namespace = ?1 AND {condition}"
            ))?
            .execute(all.as_slice())
        })()
        .map_err(StoreError::storage(action))?;
        tx.commit().map_err(StoreError::storage("committing"))?;
        Ok(removed as u64)
    }

    /// The write connection, once it is this store's turn to write among the process's
    /// writers to the file (`mnemon_db::sqlite::WriteQueue`).
    fn writer(&self) -> rusqlite::Result<WriteGuard<'_>> {
        self.connections.writer.lock()
    }

    /// A read connection, for this read alone: never the writer's, so it waits for no write.
    fn reader(&self) -> Result<ReadGuard<'_>, StoreError> {
        self.connections.readers.take().map_err(db_error)
    }

    fn encode(&self, asset: &Asset) -> Result<Encoded, StoreError> {
        check_storable(asset)?;
        encoding::encode(asset, &self.codecs)
    }

    fn write_all(&self, assets: &[(&Asset, Encoded)], expiry: Expiry) -> Result<(), StoreError> {
        let now = self.now();
        let times = Stamp {
            now,
            expires_at: expiry.deadline(now, self.default_ttl),
        };
        let mut conn = self
            .writer()
            .map_err(StoreError::storage("starting a write"))?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(StoreError::storage("starting a write"))?;
        for (asset, encoded) in assets {
            write_one(&tx, &self.namespace, asset, encoded, times)
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

/// The times a write stamps on its assets.
#[derive(Debug, Clone, Copy)]
struct Stamp {
    now: i64,
    expires_at: Option<i64>,
}

/// A filter parameter as rusqlite binds it.
fn sql_value(param: SqlParam) -> SqlValue {
    match param {
        SqlParam::Text(t) => SqlValue::Text(t),
        SqlParam::Integer(i) => SqlValue::Integer(i),
        SqlParam::Real(r) => SqlValue::Real(r),
    }
}

fn write_one(
    tx: &Transaction<'_>,
    namespace: &Namespace,
    asset: &Asset,
    encoded: &Encoded,
    stamp: Stamp,
) -> rusqlite::Result<()> {
    let ns = namespace.as_str();
    // A replaced live asset keeps its creation time; one that had expired is a new asset.
    tx.prepare_cached(
        "INSERT INTO asset_assets (namespace, asset_id, asset_type, skeleton, meta, leaf_count,
           created_at, updated_at, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)
         ON CONFLICT (namespace, asset_id) DO UPDATE SET asset_type = excluded.asset_type,
           skeleton = excluded.skeleton, meta = excluded.meta, leaf_count = excluded.leaf_count,
           created_at = CASE WHEN asset_assets.expires_at <= excluded.updated_at
             THEN excluded.created_at ELSE asset_assets.created_at END,
           updated_at = excluded.updated_at, expires_at = excluded.expires_at",
    )?
    .execute(params![
        ns,
        asset.asset_id,
        asset.asset_type,
        encoded.skeleton,
        encoded.meta,
        encoded.leaves.len() as i64,
        stamp.now,
        stamp.expires_at
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
        self.write_all(&[(asset, encoded)], Expiry::Default)
    }

    fn put_batch(&self, assets: &[Asset]) -> Result<(), StoreError> {
        self.put_batch_expiring(assets, Expiry::Default)
    }

    fn put_batch_expiring(&self, assets: &[Asset], expiry: Expiry) -> Result<(), StoreError> {
        // Encode everything first, so that a bad asset fails the batch before anything is
        // written.
        let encoded = assets
            .iter()
            .map(|a| Ok((a, self.encode(a)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.write_all(&encoded, expiry)
    }

    fn expires_at(&self, asset_id: &str) -> Result<Option<Option<i64>>, StoreError> {
        let ns = self.namespace.as_str();
        let expires = if self.has_times { "expires_at" } else { "NULL" };
        let sql = self.in_namespace(&format!(
            "SELECT {expires} FROM asset_assets WHERE {{ns}} AND asset_id = ?2 AND {}",
            self.live(3)
        ));
        let conn = self.reader()?;
        conn.prepare_cached(&sql)
            .and_then(|mut s| {
                s.query_row(params![ns, asset_id, self.now()], |r| r.get(0))
                    .optional()
            })
            .map_err(StoreError::storage("reading an expiry"))
    }

    fn list_where(
        &self,
        filter: Option<&Filter>,
        limit: Option<usize>,
    ) -> Result<Vec<String>, StoreError> {
        let (sql, params) = self.filtered("asset_id", filter, limit)?;
        let conn = self.reader()?;
        conn.prepare_cached(&sql)
            .and_then(|mut s| {
                s.query_map(rusqlite::params_from_iter(params), |r| r.get(0))?
                    .collect()
            })
            .map_err(StoreError::storage("listing assets"))
    }

    fn count_where(&self, filter: Option<&Filter>) -> Result<u64, StoreError> {
        let (sql, params) = self.filtered("count(*)", filter, None)?;
        let conn = self.reader()?;
        let n: i64 = conn
            .prepare_cached(&sql)
            .and_then(|mut s| s.query_row(rusqlite::params_from_iter(params), |r| r.get(0)))
            .map_err(StoreError::storage("counting assets"))?;
        Ok(n.max(0) as u64)
    }

    fn gc(&self) -> Result<u64, StoreError> {
        self.remove_where(
            "expires_at <= ?2",
            &[&self.now()],
            "removing expired assets",
        )
    }

    fn forget(&self, id_prefix: &str) -> Result<u64, StoreError> {
        const ACTION: &str = "forgetting assets";
        match (id_prefix, prefix_end(id_prefix)) {
            ("", _) => self.remove_where("TRUE", &[], ACTION),
            (_, Some(end)) => self.remove_where(
                "asset_id >= ?2 AND asset_id < ?3",
                &[&id_prefix, &end],
                ACTION,
            ),
            (_, None) => self.remove_where("asset_id >= ?2", &[&id_prefix], ACTION),
        }
    }

    fn get(&self, asset_id: &str) -> Result<Option<Asset>, StoreError> {
        let read = StoreError::storage("reading an asset");
        let ns = self.namespace.as_str();
        let mut conn = self.reader()?;
        // One read transaction, so the skeleton and its leaves come from the same commit.
        let tx = conn
            .transaction()
            .map_err(StoreError::storage("reading an asset"))?;
        let row: Option<(String, i64)> = tx
            .prepare_cached(&self.in_namespace(&format!(
                "SELECT skeleton, leaf_count FROM asset_assets
                 WHERE {{ns}} AND asset_id = ?2 AND {}",
                self.live(3)
            )))
            .and_then(|mut s| {
                s.query_row(params![ns, asset_id, self.now()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
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
        let mut conn = self
            .writer()
            .map_err(StoreError::storage("starting a delete"))?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(StoreError::storage("starting a delete"))?;
        let ns = self.namespace.as_str();
        // An expired asset is removed too (it is garbage), but reported absent, as reads
        // report it.
        let removed: Option<Option<i64>> = (|| {
            tx.prepare_cached("DELETE FROM asset_leaves WHERE namespace = ?1 AND asset_id = ?2")?
                .execute([ns, asset_id])?;
            tx.prepare_cached(
                "DELETE FROM asset_assets WHERE namespace = ?1 AND asset_id = ?2
                 RETURNING expires_at",
            )?
            .query_row([ns, asset_id], |r| r.get(0))
            .optional()
        })()
        .map_err(StoreError::storage("deleting an asset"))?;
        tx.commit().map_err(StoreError::storage("committing"))?;
        Ok(removed.is_some_and(|at| is_live(at, self.now())))
    }

    fn list_ids(&self, asset_type: Option<&str>) -> Result<Vec<String>, StoreError> {
        let ns = self.namespace.as_str();
        let now = self.now();
        let conn = self.reader()?;
        let result = match asset_type {
            None => conn
                .prepare_cached(&self.in_namespace(&format!(
                    "SELECT asset_id FROM asset_assets WHERE {{ns}} AND {} ORDER BY asset_id",
                    self.live(2)
                )))
                .and_then(|mut s| s.query_map(params![ns, now], |r| r.get(0))?.collect()),
            Some(t) => conn
                .prepare_cached(&self.in_namespace(&format!(
                    "SELECT asset_id FROM asset_assets WHERE {{ns}} AND asset_type = ?2
                     AND {} ORDER BY asset_id",
                    self.live(3)
                )))
                .and_then(|mut s| s.query_map(params![ns, t, now], |r| r.get(0))?.collect()),
        };
        result.map_err(StoreError::storage("listing assets"))
    }

    fn meta(&self, asset_id: &str) -> Result<Option<AssetMeta>, StoreError> {
        let ns = self.namespace.as_str();
        let conn = self.reader()?;
        let text: Option<String> = conn
            .prepare_cached(&self.in_namespace(&format!(
                "SELECT meta FROM asset_assets WHERE {{ns}} AND asset_id = ?2 AND {}",
                self.live(3)
            )))
            .and_then(|mut s| {
                s.query_row(params![ns, asset_id, self.now()], |r| r.get(0))
                    .optional()
            })
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

/// The connections of a store handle: those of every writable handle on the same file with
/// the same settings ([`SHARED`]), or a read-only store's own.
#[derive(Debug)]
struct Connections {
    writer: WriteConnection,
    readers: ReadPool,
}

/// The writable stores' connections alive in this process, per file and settings.
static SHARED: Shared<Settings, Connections> = Shared::new();

impl Drop for Connections {
    fn drop(&mut self) {
        // The last handle on the file is gone. Folds the WAL back into the main file so that
        // one file is left at rest; never waits.
        self.writer.checkpoint_on_close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;
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
                .unwrap()
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap();
            assert_eq!(sync, expected);
        }
    }

    /// The handles of every namespace on one file share its connections (a server's open
    /// tenants cost none of their own) and still see only their own assets; other settings, or
    /// a read-only open, get connections of their own; the last handle leaves one file.
    #[test]
    fn namespaces_on_one_file_share_its_connections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        let open = |namespace: &str, durability| {
            SqliteAssetStore::open_with(
                &path,
                SqliteAssetOptions {
                    namespace: Namespace::new(namespace).unwrap(),
                    durability,
                    ..SqliteAssetOptions::default()
                },
            )
            .unwrap()
        };
        let a = open("a", Durability::Full);
        let b = open("b", Durability::Full);
        assert!(Arc::ptr_eq(&a.connections, &b.connections));
        let normal = open("a", Durability::Normal);
        assert!(!Arc::ptr_eq(&a.connections, &normal.connections));
        let reader = SqliteAssetStore::open_read_only(&path, SqliteAssetOptions::default());
        assert!(!Arc::ptr_eq(&a.connections, &reader.unwrap().connections));
        let one = Asset::from_json(json!({"asset_id": "x", "content": {"n": 1}})).unwrap();
        let two = Asset::from_json(json!({"asset_id": "x", "content": {"n": 2}})).unwrap();
        a.put(&one).unwrap();
        b.put(&two).unwrap();
        let content = |store: &SqliteAssetStore| store.get("x").unwrap().map(|got| got.content);
        assert_eq!(content(&a), Some(one.content.clone()));
        assert_eq!(content(&b), Some(two.content.clone()));
        assert!(b.delete("x").unwrap());
        assert_eq!(content(&b), None);
        assert_eq!(content(&a), Some(one.content.clone()));
        drop((a, b, normal));
        // The last handle checkpointed as it closed: the WAL is empty or gone.
        let wal = dir.path().join("db.sqlite3-wal");
        assert!(std::fs::metadata(&wal).map_or(true, |m| m.len() == 0));
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

    /// A file of every earlier version with times opens read-only, as it is: the previous
    /// release's files (version 3) stay readable by `mnemon asset list`, `get` and the other
    /// read-only paths until a writer migrates them.
    #[test]
    fn files_of_earlier_versions_open_read_only() {
        for version in 3..SCHEMA.version() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("db.sqlite3");
            let asset =
                Asset::from_json(serde_json::json!({"asset_id": "kept", "content": 1})).unwrap();
            SqliteAssetStore::open_with(&path, quick())
                .unwrap()
                .put(&asset)
                .unwrap();
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute("UPDATE asset_schema SET version = ?1", [version])
                .unwrap();
            drop(conn);
            let reader = SqliteAssetStore::open_read_only(&path, quick())
                .unwrap_or_else(|e| panic!("version {version}: {e}"));
            assert_eq!(reader.list_ids(None).unwrap(), ["kept"]);
            assert!(reader.get("kept").unwrap().is_some());
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
        assert_eq!(version, SCHEMA.version());
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
