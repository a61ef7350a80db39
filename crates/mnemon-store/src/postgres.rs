//! The asset store in PostgreSQL (feature `postgres`): the same assets as the SQLite store
//! (`crate::sqlite`), in a database that processes on many machines share (docs/postgres.md).
//!
//! **Tables.** `asset_assets` (one row per asset: its skeleton, meta and `asset_type`, indexed
//! for listing by type) and `asset_leaves` (each bytes or object leaf as `bytea`), versioned in
//! `asset_schema` with the same numbering as SQLite's (1: the tables; 2: the namespace), so a
//! copy between the backends can rely on version `n` meaning the same tables on both. The
//! migrations run through `mnemon_db::postgres::migrate` under an advisory lock: processes
//! opening a new database at once never race. Ids, types, leaf paths and type names are
//! stored as their UTF-8 bytes (`bytea`): PostgreSQL's `text` cannot hold a NUL character,
//! which an asset id may contain, and `bytea` orders by bytes, so [`AssetStore::list_ids`] is in
//! ascending byte order (as the trait promises) whatever the database's collation. The skeleton
//! and meta are JSON text, in which serde_json escapes every control character.
//!
//! **Tenants.** A store is opened for one namespace ([`PostgresAssetOptions::namespace`]); the
//! namespace leads every key and every statement binds it, so no call through the handle reads,
//! lists, resolves or deletes another namespace's assets.
//!
//! **Expiry and filters** (schema version 3, as on SQLite): `created_at`, `updated_at` and
//! `expires_at` columns (milliseconds since the Unix epoch, from the store's clock; NULL for
//! assets stored before), every read bound to `(expires_at IS NULL OR expires_at > now)`, and
//! a `doc` `jsonb` column holding the meta as `jsonb`, which filters read
//! (docs/reference/assets.md#filters). `jsonb` cannot hold U+0000, so an asset whose meta holds
//! one has no `doc` (NULL): on PostgreSQL only its times can be filtered on.
//!
//! **Statements.** Every statement is a constant SQL text, prepared once per pooled connection
//! and kept in the connection's statement cache (`mnemon_db::postgres::PooledClient::
//! prepare_cached`): after a connection's first call, a put, get, delete, list or meta only
//! binds and executes, without the server parsing and planning the text again. Parameters are
//! always bound, never formatted into SQL text.
//!
//! **Writes.** A put or a batch is one transaction of three statements whatever its size: the
//! asset rows are upserted from arrays (`UNNEST`, in id order), which locks them, so that
//! concurrent writers of one id queue there; then the old leaves of those ids are deleted and
//! the new ones inserted from arrays. A delete likewise removes the asset row (locking it)
//! before its leaves. The call returns after `COMMIT`
//! (with `synchronous_commit = on` under [`Durability::Full`], the default): a batch is stored
//! whole or not at all, and a returned write survives a killed client. **Reads** of an asset
//! fetch its row and its leaves with one statement (a join), so they come from one commit.
//! A delete that finds no asset row deletes nothing else: the row lock is what keeps a
//! concurrent put of the id from losing its leaves.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mnemon_db::expiry::{Clock, Expiry, SystemClock, is_live};
use mnemon_db::postgres::{self as pg, Pool, Settings};
use mnemon_db::{DbError, Durability, Migration, Namespace, Schema};
use mnemon_filter::{Dialect, Filter, SqlParam};
use mnemon_types::Asset;
use postgres::types::{ToSql, Type};

use crate::codec::CodecRegistry;
use crate::encoding::{self, Encoded, StoredLeaf};
use crate::error::StoreError;
use crate::listing::{self, prefix_end};
use crate::store::{AssetMeta, AssetStore, check_storable};

/// The asset tables' schema on PostgreSQL: the same table and version numbers as SQLite's.
static SCHEMA: Schema = Schema {
    component: "asset",
    table: "asset_schema",
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
    ],
};

const SCHEMA_V1: &str = "
CREATE TABLE asset_assets (
  asset_id   BYTEA PRIMARY KEY NOT NULL,
  asset_type BYTEA,
  skeleton   TEXT NOT NULL,
  meta       TEXT NOT NULL,
  leaf_count BIGINT NOT NULL);
CREATE INDEX asset_assets_by_type ON asset_assets (asset_type, asset_id);
CREATE TABLE asset_leaves (
  asset_id  BYTEA NOT NULL,
  seq       BIGINT NOT NULL,
  path      BYTEA NOT NULL,
  kind      TEXT NOT NULL CHECK (kind IN ('bytes', 'object')),
  type_name BYTEA,
  data      BYTEA NOT NULL,
  UNIQUE (asset_id, seq));
";

/// Version 2, as on SQLite: the namespace leads every key; existing assets get the default one.
const SCHEMA_V2: &str = "
ALTER TABLE asset_assets ADD COLUMN namespace TEXT NOT NULL DEFAULT 'default';
ALTER TABLE asset_assets ALTER COLUMN namespace DROP DEFAULT;
ALTER TABLE asset_assets DROP CONSTRAINT asset_assets_pkey;
ALTER TABLE asset_assets ADD CONSTRAINT asset_assets_pkey PRIMARY KEY (namespace, asset_id);
DROP INDEX asset_assets_by_type;
CREATE INDEX asset_assets_by_type ON asset_assets (namespace, asset_type, asset_id);
ALTER TABLE asset_leaves ADD COLUMN namespace TEXT NOT NULL DEFAULT 'default';
ALTER TABLE asset_leaves ALTER COLUMN namespace DROP DEFAULT;
ALTER TABLE asset_leaves DROP CONSTRAINT asset_leaves_asset_id_seq_key;
ALTER TABLE asset_leaves ADD CONSTRAINT asset_leaves_key UNIQUE (namespace, asset_id, seq);
";

/// Version 3, as on SQLite: the store's times, and the meta as `jsonb` for filters (NULL for a
/// meta holding U+0000, which `jsonb` refuses: the serialized meta then holds the escape
/// `\u0000`).
const SCHEMA_V3: &str = "
ALTER TABLE asset_assets ADD COLUMN created_at BIGINT, ADD COLUMN updated_at BIGINT,
  ADD COLUMN expires_at BIGINT, ADD COLUMN doc JSONB;
UPDATE asset_assets SET doc = meta::jsonb WHERE strpos(meta, '\\u0000') = 0;
CREATE INDEX asset_assets_by_expiry ON asset_assets (namespace, expires_at)
  WHERE expires_at IS NOT NULL;
";

/// Version 4: the documents version 3 and the writes before this one left out by mistake. A
/// meta was taken to hold U+0000 when its text held `\u0000` anywhere, also as a backslash
/// (escaped `\\`) followed by `u0000`, and such an asset was seen by no filter
/// (`mnemon_db::jsonb::holds_nul` reads the escapes as JSON does). Escaped backslashes are
/// removed before looking for the escape.
const SCHEMA_V4: &str = r"
UPDATE asset_assets SET doc = meta::jsonb
WHERE doc IS NULL AND strpos(replace(meta, '\\', ''), '\u0000') = 0;
";

/// Options for [`PostgresAssetStore::open`].
#[derive(Debug, Clone)]
pub struct PostgresAssetOptions {
    /// How hard a commit works to survive crashes. Default: [`Durability::Full`]
    /// (`synchronous_commit = on`).
    pub durability: Durability,
    /// The most connections the store holds open at once. Default: 8.
    pub pool_size: usize,
    /// The tenant the store is opened for: it reads and writes only this namespace's assets.
    /// Default: [`Namespace::default()`].
    pub namespace: Namespace,
    /// The codecs for in-process objects. Default: none, so objects are rejected.
    pub codecs: CodecRegistry,
    /// How long an asset written with [`Expiry::Default`] (every `put`) lives: the
    /// namespace's default time-to-live, for this handle. Default: `None`, forever.
    pub default_ttl: Option<Duration>,
    /// The clock that stamps writes and decides what has expired. Default: [`SystemClock`].
    pub clock: Arc<dyn Clock>,
}

impl Default for PostgresAssetOptions {
    fn default() -> Self {
        let shared = Settings::default();
        PostgresAssetOptions {
            durability: shared.durability,
            pool_size: shared.pool_size,
            namespace: Namespace::default(),
            codecs: CodecRegistry::new(),
            default_ttl: None,
            clock: Arc::new(SystemClock),
        }
    }
}

/// An [`AssetStore`] in a PostgreSQL database; see the module docs for the guarantees.
///
/// ```no_run
/// use mnemon_store::{AssetStore, PostgresAssetOptions, PostgresAssetStore};
/// use mnemon_types::Asset;
///
/// let store = PostgresAssetStore::open(
///     "postgres://mnemon:secret@127.0.0.1:5432/mnemon",
///     PostgresAssetOptions { namespace: "acme".parse()?, ..PostgresAssetOptions::default() },
/// )?;
/// store.put(&Asset::from_json(serde_json::json!({"asset_id": "a", "content": 1}))?)?;
/// assert!(store.get("a")?.is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PostgresAssetStore {
    pool: Pool,
    codecs: CodecRegistry,
    namespace: Namespace,
    default_ttl: Option<Duration>,
    clock: Arc<dyn Clock>,
}

impl PostgresAssetStore {
    /// Connects to the database at `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`)
    /// and brings the asset tables to the current version. A wrong URL, password or database,
    /// an unreachable server and a schema from a newer build are reported here.
    pub fn open(url: &str, options: PostgresAssetOptions) -> Result<Self, StoreError> {
        let settings = Settings {
            durability: options.durability,
            pool_size: options.pool_size,
            ..Settings::default()
        };
        let pool = Pool::connect(url, settings).map_err(db_error)?;
        PostgresAssetStore::open_on(&pool, options)
    }

    /// As [`open`](Self::open), on a pool other stores may share (one pool for every store
    /// and namespace of a process: docs/postgres.md#one-pool-per-database). The pool's
    /// settings apply: `options.durability` and `options.pool_size` are not used.
    pub fn open_on(pool: &Pool, options: PostgresAssetOptions) -> Result<Self, StoreError> {
        pg::migrate_all(pool, &[&SCHEMA]).map_err(db_error)?;
        Ok(PostgresAssetStore {
            pool: pool.clone(),
            codecs: options.codecs,
            namespace: options.namespace,
            default_ttl: options.default_ttl,
            clock: options.clock,
        })
    }

    /// The namespace (tenant) the store was opened for.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The database, server and user, for messages (never the password).
    pub fn target(&self) -> &str {
        self.pool.target()
    }

    /// The store's connection pool: for diagnostics (open connections, each connection's
    /// prepared-statement cache: `mnemon_db::postgres::PooledClient::statements_prepared`) and
    /// for tools that read the tables directly.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    fn client(&self) -> Result<pg::PooledClient, StoreError> {
        self.pool.get().map_err(db_error)
    }

    /// A statement's error, classified by `mnemon-db` (server gone, query error with its code).
    fn failed(&self, action: &'static str) -> impl FnOnce(postgres::Error) -> StoreError + '_ {
        move |e| db_error(pg::error(&e, self.pool.target(), action))
    }

    fn encode(&self, asset: &Asset) -> Result<Encoded, StoreError> {
        check_storable(asset)?;
        encoding::encode(asset, &self.codecs)
    }

    fn now(&self) -> i64 {
        self.clock.now_millis()
    }

    /// `SELECT {what} FROM asset_assets` over the live assets matching `filter`, with its
    /// parameters (`$1` the namespace, `$2` the time).
    fn filtered(
        &self,
        what: &str,
        filter: Option<&Filter>,
        limit: Option<usize>,
    ) -> Result<(String, Vec<SqlParam>), StoreError> {
        let mut params = vec![
            SqlParam::Text(self.namespace.as_str().to_owned()),
            SqlParam::Integer(self.now()),
        ];
        let resolver = listing::resolver("doc", true, false);
        let condition = listing::where_sql(filter, Dialect::Postgres, &resolver, &mut params)?;
        let mut sql = format!(
            "SELECT {what} FROM asset_assets WHERE namespace = $1::text \
             AND (expires_at IS NULL OR expires_at > $2::int8) AND ({condition})"
        );
        if what == "asset_id" {
            sql.push_str(" ORDER BY asset_id");
        }
        if let Some(limit) = limit {
            params.push(SqlParam::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
            sql.push_str(&format!(" LIMIT ${}::int8", params.len()));
        }
        Ok((sql, params))
    }

    /// Deletes the assets (and their leaves) of the namespace that `condition` selects (`$1`
    /// the namespace, then `params`), in one transaction: the asset rows first, which locks
    /// them against a concurrent put, then the leaves of exactly those ids. Returns how many.
    fn remove_where(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
        action: &'static str,
    ) -> Result<u64, StoreError> {
        let ns = self.namespace.as_str();
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&ns];
        all.extend_from_slice(params);
        let mut client = self.client()?;
        let mut tx = client
            .transaction_cached()
            .map_err(self.failed("starting a delete"))?;
        let statement = tx.prepare_cached(sql).map_err(self.failed(action))?;
        let ids = tx
            .query(&statement, &all)
            .map_err(self.failed(action))?
            .iter()
            .map(|row| row.try_get::<_, Vec<u8>>(0))
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.failed(action))?;
        if !ids.is_empty() {
            let leaves = tx
                .prepare_cached(DELETE_LEAVES_OF)
                .map_err(self.failed(action))?;
            tx.execute(&leaves, &[&ns, &ids])
                .map_err(self.failed(action))?;
        }
        tx.commit().map_err(self.failed("committing"))?;
        Ok(ids.len() as u64)
    }

    /// The rows of a filtered statement (its text depends on the filter's shape, so it is
    /// prepared per call rather than cached).
    fn query_filtered(
        &self,
        sql: &str,
        params: &[SqlParam],
        action: &'static str,
    ) -> Result<Vec<postgres::Row>, StoreError> {
        let params: Vec<_> = params.iter().map(pg_param).collect();
        let mut client = self.client()?;
        client.query(sql, &params).map_err(self.failed(action))
    }

    /// Writes `assets` (later ones winning over earlier ones with the same id) in one
    /// transaction of three statements.
    fn write_all(&self, assets: &[(&Asset, Encoded)], expiry: Expiry) -> Result<(), StoreError> {
        if assets.is_empty() {
            return Ok(());
        }
        // An upsert may not touch a row twice, so only the last asset of each id is written.
        let mut last: HashMap<&str, usize> = HashMap::new();
        for (i, (asset, _)) in assets.iter().enumerate() {
            last.insert(asset.asset_id.as_str(), i);
        }
        let mut kept: Vec<&(&Asset, Encoded)> = assets
            .iter()
            .enumerate()
            .filter(|(i, (asset, _))| last.get(asset.asset_id.as_str()) == Some(i))
            .map(|(_, pair)| pair)
            .collect();
        // Every writer locks rows in id order, so two batches sharing ids cannot deadlock.
        kept.sort_unstable_by(|(a, _), (b, _)| a.asset_id.cmp(&b.asset_id));
        let ids: Vec<&[u8]> = kept.iter().map(|(a, _)| a.asset_id.as_bytes()).collect();
        let types: Vec<Option<&[u8]>> = kept
            .iter()
            .map(|(a, _)| a.asset_type.as_deref().map(str::as_bytes))
            .collect();
        let skeletons: Vec<&str> = kept.iter().map(|(_, e)| e.skeleton.as_str()).collect();
        let metas: Vec<&str> = kept.iter().map(|(_, e)| e.meta.as_str()).collect();
        let counts: Vec<i64> = kept.iter().map(|(_, e)| e.leaves.len() as i64).collect();
        // `jsonb` refuses U+0000, which serde_json writes as this escape (module docs).
        let docs: Vec<Option<&str>> = kept
            .iter()
            .map(|(_, e)| Some(e.meta.as_str()).filter(|m| !mnemon_db::jsonb::holds_nul(m)))
            .collect();
        let now = self.now();
        let expires_at = expiry.deadline(now, self.default_ttl);
        let mut leaf_ids = Vec::new();
        let mut seqs = Vec::new();
        let mut paths = Vec::new();
        let mut kinds = Vec::new();
        let mut type_names = Vec::new();
        let mut data = Vec::new();
        for (asset, encoded) in &kept {
            for (seq, leaf) in encoded.leaves.iter().enumerate() {
                leaf_ids.push(asset.asset_id.as_bytes());
                seqs.push(seq as i64);
                paths.push(leaf.path.as_bytes());
                kinds.push(leaf.kind.as_str());
                type_names.push(leaf.type_name.as_deref().map(str::as_bytes));
                data.push(leaf.data.as_slice());
            }
        }
        let ns = self.namespace.as_str();
        let mut client = self.client()?;
        let mut tx = client
            .transaction_cached()
            .map_err(self.failed("starting a write"))?;
        let upsert = tx
            .prepare_typed_cached(UPSERT_ASSETS, &[Type::TEXT])
            .map_err(self.failed("writing assets"))?;
        tx.execute(
            &upsert,
            &[
                &ns,
                &ids,
                &types,
                &skeletons,
                &metas,
                &counts,
                &docs,
                &now,
                &expires_at,
            ],
        )
        .map_err(self.failed("writing assets"))?;
        let delete = tx
            .prepare_cached(DELETE_LEAVES_OF)
            .map_err(self.failed("replacing an asset's leaves"))?;
        tx.execute(&delete, &[&ns, &ids])
            .map_err(self.failed("replacing an asset's leaves"))?;
        if !leaf_ids.is_empty() {
            let insert = tx
                .prepare_typed_cached(INSERT_LEAVES, &[Type::TEXT])
                .map_err(self.failed("writing asset leaves"))?;
            tx.execute(
                &insert,
                &[&ns, &leaf_ids, &seqs, &paths, &kinds, &type_names, &data],
            )
            .map_err(self.failed("writing asset leaves"))?;
        }
        tx.commit().map_err(self.failed("committing"))
    }
}

/// The statement deleting the namespace's (`$1`) assets that a condition selects, returning
/// their ids: a constant text per condition, so it is cached like the others. The asset rows
/// go first, which locks them against a concurrent put of the same ids; their leaves go in a
/// second statement ([`DELETE_LEAVES_OF`]), whose snapshot is taken after this one's waits.
/// Not in the same statement: every part of one statement reads one snapshot, taken before it
/// waited for a concurrent put's row lock, so the leaves that put committed were invisible to
/// it and stayed behind their deleted asset (read committed takes a new snapshot per
/// statement).
/// A sweep's delete of the asset rows `$condition` selects (`$1` the namespace), returning
/// their ids. The rows are locked first, in id order (`ORDER BY … FOR UPDATE`), as every
/// writer locks them: a delete visiting them in its scan's order (the heap's, or the expiry
/// index's) could hold `b` and wait for `a` while a batch put held `a` and waited for `b`, and
/// PostgreSQL then aborted one of the two (a deadlock).
macro_rules! remove_where {
    ($condition:literal) => {
        concat!(
            "DELETE FROM asset_assets a USING (SELECT asset_id FROM asset_assets
               WHERE namespace = $1::text AND ",
            $condition,
            " ORDER BY asset_id FOR UPDATE) l
             WHERE a.namespace = $1::text AND a.asset_id = l.asset_id RETURNING a.asset_id"
        )
    };
}

/// Upserts the asset rows of a write, from arrays (`$1` the namespace; then ids, types,
/// skeletons, metas, leaf counts and filter documents; `$8` the time, `$9` the expiry). A
/// replaced live asset keeps its creation time; one that had expired is a new asset.
const UPSERT_ASSETS: &str = "
INSERT INTO asset_assets (namespace, asset_id, asset_type, skeleton, meta, leaf_count, doc,
  created_at, updated_at, expires_at)
SELECT $1, u.*, $8::int8, $8::int8, $9::int8
FROM UNNEST($2::bytea[], $3::bytea[], $4::text[], $5::text[], $6::int8[], $7::text[]::jsonb[])
  AS u
ON CONFLICT (namespace, asset_id) DO UPDATE SET asset_type = excluded.asset_type,
  skeleton = excluded.skeleton, meta = excluded.meta, leaf_count = excluded.leaf_count,
  doc = excluded.doc,
  created_at = CASE WHEN asset_assets.expires_at <= excluded.updated_at
    THEN excluded.created_at ELSE asset_assets.created_at END,
  updated_at = excluded.updated_at, expires_at = excluded.expires_at";

/// Deletes the leaves of the assets `$2` (an array of ids) in namespace `$1`.
const DELETE_LEAVES_OF: &str =
    "DELETE FROM asset_leaves WHERE namespace = $1 AND asset_id = ANY($2::bytea[])";

/// Inserts the leaves of a write, from arrays (`$1` the namespace).
const INSERT_LEAVES: &str = "
INSERT INTO asset_leaves (namespace, asset_id, seq, path, kind, type_name, data)
SELECT $1, * FROM UNNEST($2::bytea[], $3::int8[], $4::bytea[], $5::text[], $6::bytea[],
  $7::bytea[])";

/// An asset's skeleton and leaves in one statement: the asset's row first (its skeleton and
/// leaf count), then a row per leaf in order, each without the skeleton. A join repeating the
/// skeleton on every leaf's row sent it once per leaf, and the skeleton grows with the leaves
/// (a placeholder each): 2,000 leaves sent 68 MB for one read.
const GET: &str = "
SELECT a.skeleton, NULL::bytea, NULL::text, NULL::bytea, NULL::bytea, a.leaf_count, -1::int8
FROM asset_assets a
WHERE a.namespace = $1::text AND a.asset_id = $2::bytea
  AND (a.expires_at IS NULL OR a.expires_at > $3::int8)
UNION ALL
SELECT NULL, l.path, l.kind, l.type_name, l.data, NULL, l.seq
FROM asset_assets a JOIN asset_leaves l
  ON l.namespace = a.namespace AND l.asset_id = a.asset_id
WHERE a.namespace = $1::text AND a.asset_id = $2::bytea
  AND (a.expires_at IS NULL OR a.expires_at > $3::int8)
ORDER BY 7";

/// Deletes an asset row, expired or not, returning its expiry (an expired asset is reported
/// absent, as reads report it).
const DELETE_ASSET: &str = "DELETE FROM asset_assets WHERE namespace = $1::text \
     AND asset_id = $2::bytea RETURNING expires_at";

const DELETE_LEAVES: &str =
    "DELETE FROM asset_leaves WHERE namespace = $1::text AND asset_id = $2::bytea";

const LIST_IDS: &str = "SELECT asset_id FROM asset_assets WHERE namespace = $1::text \
     AND (expires_at IS NULL OR expires_at > $2::int8) ORDER BY asset_id";

const LIST_IDS_OF_TYPE: &str = "SELECT asset_id FROM asset_assets \
     WHERE namespace = $1::text AND asset_type = $2::bytea \
     AND (expires_at IS NULL OR expires_at > $3::int8) ORDER BY asset_id";

const META: &str = "SELECT meta FROM asset_assets WHERE namespace = $1::text \
     AND asset_id = $2::bytea AND (expires_at IS NULL OR expires_at > $3::int8)";

const EXPIRES_AT: &str = "SELECT expires_at FROM asset_assets WHERE namespace = $1::text \
     AND asset_id = $2::bytea AND (expires_at IS NULL OR expires_at > $3::int8)";

/// A filter parameter as the driver binds it.
fn pg_param(param: &SqlParam) -> &(dyn ToSql + Sync) {
    match param {
        SqlParam::Text(t) => t,
        SqlParam::Integer(i) => i,
        SqlParam::Real(r) => r,
    }
}

/// An id column's bytes as the id.
fn id_text(bytes: Vec<u8>) -> Result<String, StoreError> {
    String::from_utf8(bytes).map_err(|e| StoreError::Corrupt {
        asset_id: String::from_utf8_lossy(e.as_bytes()).into_owned(),
        detail: "the stored id is not UTF-8".into(),
    })
}

/// The store error for a `mnemon-db` failure: a newer schema keeps its own variant; the rest
/// carry `mnemon-db`'s message, which says what to fix (bad URL, auth refused, server gone).
fn db_error(error: DbError) -> StoreError {
    match error {
        DbError::PgSchemaTooNew {
            target,
            found,
            supported,
            ..
        } => StoreError::SchemaTooNew {
            path: target,
            found,
            supported,
        },
        other => StoreError::Storage {
            action: "using the PostgreSQL asset store",
            error: Box::new(other),
        },
    }
}

/// A stored string column (`what`) of `asset_id`, from its UTF-8 bytes.
fn text(asset_id: &str, what: &str, bytes: Vec<u8>) -> Result<String, StoreError> {
    String::from_utf8(bytes).map_err(|_| StoreError::Corrupt {
        asset_id: asset_id.to_owned(),
        detail: format!("{what} is not UTF-8"),
    })
}

impl AssetStore for PostgresAssetStore {
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
        const READ: &str = "reading an expiry";
        let ns = self.namespace.as_str();
        let mut client = self.client()?;
        let row = client
            .prepare_cached(EXPIRES_AT)
            .and_then(|statement| {
                client.query_opt(&statement, &[&ns, &asset_id.as_bytes(), &self.now()])
            })
            .map_err(self.failed(READ))?;
        row.map(|r| r.try_get(0).map_err(self.failed(READ)))
            .transpose()
    }

    fn list_where(
        &self,
        filter: Option<&Filter>,
        limit: Option<usize>,
    ) -> Result<Vec<String>, StoreError> {
        const LIST: &str = "listing assets";
        let (sql, params) = self.filtered("asset_id", filter, limit)?;
        let rows = self.query_filtered(&sql, &params, LIST)?;
        rows.iter()
            .map(|r| id_text(r.try_get(0).map_err(self.failed(LIST))?))
            .collect()
    }

    fn count_where(&self, filter: Option<&Filter>) -> Result<u64, StoreError> {
        const COUNT: &str = "counting assets";
        let (sql, params) = self.filtered("count(*)", filter, None)?;
        let rows = self.query_filtered(&sql, &params, COUNT)?;
        let n: i64 = match rows.first() {
            Some(row) => row.try_get(0).map_err(self.failed(COUNT))?,
            None => 0,
        };
        Ok(n.max(0) as u64)
    }

    fn gc(&self) -> Result<u64, StoreError> {
        self.remove_where(
            remove_where!("expires_at <= $2::int8"),
            &[&self.now()],
            "removing expired assets",
        )
    }

    fn forget(&self, id_prefix: &str) -> Result<u64, StoreError> {
        const ACTION: &str = "forgetting assets";
        let start = id_prefix.as_bytes();
        match (id_prefix, prefix_end(id_prefix)) {
            ("", _) => self.remove_where(remove_where!("TRUE"), &[], ACTION),
            (_, Some(end)) => self.remove_where(
                remove_where!("asset_id >= $2::bytea AND asset_id < $3::bytea"),
                &[&start, &end.as_bytes()],
                ACTION,
            ),
            (_, None) => {
                self.remove_where(remove_where!("asset_id >= $2::bytea"), &[&start], ACTION)
            }
        }
    }

    fn get(&self, asset_id: &str) -> Result<Option<Asset>, StoreError> {
        const READ: &str = "reading an asset";
        let ns = self.namespace.as_str();
        let id = asset_id.as_bytes();
        // One statement, so the skeleton and its leaves come from one snapshot without a
        // transaction's extra round trips: the asset's row, then a row per leaf, in order.
        let mut client = self.client()?;
        let statement = client.prepare_cached(GET).map_err(self.failed(READ))?;
        let rows = client
            .query(&statement, &[&ns, &id, &self.now()])
            .map_err(self.failed(READ))?;
        let Some((first, leaf_rows)) = rows.split_first() else {
            return Ok(None);
        };
        let skeleton: Option<String> = first.try_get(0).map_err(self.failed(READ))?;
        let leaf_count: Option<i64> = first.try_get(5).map_err(self.failed(READ))?;
        let (Some(skeleton), Some(leaf_count)) = (skeleton, leaf_count) else {
            return Err(StoreError::Corrupt {
                asset_id: asset_id.to_owned(),
                detail: "its leaves were read without its row".into(),
            });
        };
        let mut leaves = Vec::with_capacity(leaf_rows.len());
        for row in leaf_rows {
            let path: Option<Vec<u8>> = row.try_get(1).map_err(self.failed(READ))?;
            let Some(path) = path else {
                continue;
            };
            let kind: Option<String> = row.try_get(2).map_err(self.failed(READ))?;
            let type_name: Option<Vec<u8>> = row.try_get(3).map_err(self.failed(READ))?;
            let data: Option<Vec<u8>> = row.try_get(4).map_err(self.failed(READ))?;
            leaves.push(StoredLeaf {
                path: text(asset_id, "a leaf path", path)?,
                kind: kind.unwrap_or_default(),
                type_name: type_name
                    .map(|t| text(asset_id, "a leaf type name", t))
                    .transpose()?,
                data: data.unwrap_or_default(),
            });
        }
        encoding::check_leaf_count(asset_id, leaf_count, leaves.len())?;
        encoding::decode(asset_id, &skeleton, leaves, &self.codecs).map(Some)
    }

    fn delete(&self, asset_id: &str) -> Result<bool, StoreError> {
        let ns = self.namespace.as_str();
        let id = asset_id.as_bytes();
        let mut client = self.client()?;
        let mut tx = client
            .transaction_cached()
            .map_err(self.failed("starting a delete"))?;
        // The asset row first: deleting it locks it, so a concurrent put of the id waits.
        let delete_asset = tx
            .prepare_cached(DELETE_ASSET)
            .map_err(self.failed("deleting an asset"))?;
        let found = tx
            .query_opt(&delete_asset, &[&ns, &id])
            .map_err(self.failed("deleting an asset"))?;
        let found: Option<Option<i64>> = found
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(self.failed("deleting an asset"))?;
        let removed = u64::from(found.is_some());
        // Only when the row was there, and is now locked by this transaction. A delete that
        // found no row must not touch leaves: a put of the id committing after the statement
        // above would otherwise lose its leaves to the statement below (a torn asset).
        if removed > 0 {
            let delete_leaves = tx
                .prepare_cached(DELETE_LEAVES)
                .map_err(self.failed("deleting an asset"))?;
            tx.execute(&delete_leaves, &[&ns, &id])
                .map_err(self.failed("deleting an asset"))?;
        }
        tx.commit().map_err(self.failed("committing"))?;
        Ok(found.is_some_and(|at| is_live(at, self.now())))
    }

    fn list_ids(&self, asset_type: Option<&str>) -> Result<Vec<String>, StoreError> {
        let ns = self.namespace.as_str();
        let mut client = self.client()?;
        let now = self.now();
        let rows = match asset_type {
            None => client
                .prepare_cached(LIST_IDS)
                .and_then(|statement| client.query(&statement, &[&ns, &now])),
            Some(t) => client
                .prepare_cached(LIST_IDS_OF_TYPE)
                .and_then(|statement| client.query(&statement, &[&ns, &t.as_bytes(), &now])),
        }
        .map_err(self.failed("listing assets"))?;
        rows.iter()
            .map(|r| id_text(r.try_get(0).map_err(self.failed("listing assets"))?))
            .collect()
    }

    fn meta(&self, asset_id: &str) -> Result<Option<AssetMeta>, StoreError> {
        let ns = self.namespace.as_str();
        let mut client = self.client()?;
        let row = client
            .prepare_cached(META)
            .and_then(|statement| {
                client.query_opt(&statement, &[&ns, &asset_id.as_bytes(), &self.now()])
            })
            .map_err(self.failed("reading a meta"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let text: String = row.try_get(0).map_err(self.failed("reading a meta"))?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                asset_id: asset_id.to_owned(),
                detail: format!("the stored meta does not parse: {e}"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_numbers_its_steps_as_sqlite_does() {
        assert_eq!(SCHEMA.version(), 4);
        assert_eq!(SCHEMA.table, "asset_schema");
    }

    #[test]
    fn an_unreachable_url_is_reported_at_open() {
        let err =
            PostgresAssetStore::open("mysql://x/y", PostgresAssetOptions::default()).unwrap_err();
        assert!(err.to_string().contains("postgres://"), "{err}");
    }
}
