//! The keys in PostgreSQL (feature `postgres`): one table that every server using the database
//! shares, so a key created once works on all of them (docs/reference/keys.md).
//!
//! **Tables.** `keys_keys`, versioned in `keys_schema` with the same numbering as SQLite's and
//! migrated by `mnemon_db::postgres::open` under its advisory lock, so servers starting at once
//! on a new database never race. Every statement is a constant text prepared once per pooled
//! connection; parameters are always bound.

use mnemon_db::Namespace;
use mnemon_db::postgres::{self as pg, Migration, Pool, Schema, Settings};

use crate::KeyError;
use crate::backend::{Backend, RawRow, Revoked, Row};
use crate::store::KeyStoreOptions;

/// The key tables' schema on PostgreSQL: the same table and version numbers as SQLite's.
static SCHEMA: Schema = Schema {
    component: "keys",
    table: "keys_schema",
    key_column: "singleton",
    migrations: &[Migration {
        version: 1,
        sql: "
CREATE TABLE keys_keys (
  key_id       TEXT PRIMARY KEY NOT NULL,
  secret_hash  BYTEA NOT NULL,
  namespace    TEXT NOT NULL,
  role         TEXT NOT NULL CHECK (role IN ('read', 'write', 'admin')),
  label        TEXT NOT NULL,
  created_ms   BIGINT NOT NULL,
  last_used_ms BIGINT,
  revoked_ms   BIGINT);
CREATE INDEX keys_keys_by_namespace ON keys_keys (namespace, created_ms, key_id);
",
    }],
};

const INSERT: &str =
    "INSERT INTO keys_keys (key_id, secret_hash, namespace, role, label, created_ms)
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (key_id) DO NOTHING";
const FETCH: &str = "SELECT key_id, secret_hash, namespace, role, label, created_ms, last_used_ms,
     revoked_ms FROM keys_keys WHERE key_id = $1";
// `COLLATE "C"`: the same byte order as SQLite's, whatever the database's collation.
const LIST_ALL: &str = "SELECT key_id, secret_hash, namespace, role, label, created_ms,
     last_used_ms, revoked_ms FROM keys_keys
     ORDER BY namespace COLLATE \"C\", created_ms, key_id COLLATE \"C\"";
const LIST_ONE: &str = "SELECT key_id, secret_hash, namespace, role, label, created_ms,
     last_used_ms, revoked_ms FROM keys_keys WHERE namespace = $1
     ORDER BY created_ms, key_id COLLATE \"C\"";
const REVOKE: &str =
    "UPDATE keys_keys SET revoked_ms = $2 WHERE key_id = $1 AND revoked_ms IS NULL";
const EXISTS: &str = "SELECT 1 FROM keys_keys WHERE key_id = $1";
const TOUCH: &str = "UPDATE keys_keys SET last_used_ms = $2 WHERE key_id = $1";
const ANY_ACTIVE: &str = "SELECT EXISTS (SELECT 1 FROM keys_keys WHERE revoked_ms IS NULL)";
const ANY_CREATED: &str = "SELECT EXISTS (SELECT 1 FROM keys_keys)";

/// The key rows in one PostgreSQL database.
#[derive(Debug)]
pub(crate) struct PostgresBackend {
    pool: Pool,
}

impl PostgresBackend {
    pub(crate) fn open(url: &str, options: &KeyStoreOptions) -> Result<Self, KeyError> {
        let settings = Settings {
            durability: options.durability,
            pool_size: options.pool_size,
            ..Settings::default()
        };
        Ok(PostgresBackend {
            pool: pg::open(url, settings, &[&SCHEMA])?,
        })
    }

    fn client(&self) -> Result<pg::PooledClient, KeyError> {
        Ok(self.pool.get()?)
    }

    fn failed(&self, action: &'static str) -> impl Fn(postgres::Error) -> KeyError + '_ {
        move |e| KeyError::Db(pg::error(&e, self.pool.target(), action))
    }
}

fn raw(row: &postgres::Row) -> Result<RawRow, postgres::Error> {
    Ok(RawRow {
        id: row.try_get(0)?,
        hash: row.try_get(1)?,
        namespace: row.try_get(2)?,
        role: row.try_get(3)?,
        label: row.try_get(4)?,
        created_ms: row.try_get(5)?,
        last_used_ms: row.try_get(6)?,
        revoked_ms: row.try_get(7)?,
    })
}

impl Backend for PostgresBackend {
    fn insert(&self, row: &Row) -> Result<bool, KeyError> {
        let mut client = self.client()?;
        let failed = self.failed("creating a key");
        let stmt = client.prepare_cached(INSERT).map_err(&failed)?;
        let changed = client
            .execute(
                &stmt,
                &[
                    &row.id,
                    &row.hash.as_slice(),
                    &row.namespace.as_str(),
                    &row.role.as_str(),
                    &row.label,
                    &row.created_ms,
                ],
            )
            .map_err(&failed)?;
        Ok(changed == 1)
    }

    fn fetch(&self, id: &str) -> Result<Option<Row>, KeyError> {
        let mut client = self.client()?;
        let failed = self.failed("reading a key");
        let stmt = client.prepare_cached(FETCH).map_err(&failed)?;
        let row = client.query_opt(&stmt, &[&id]).map_err(&failed)?;
        row.map(|row| raw(&row).map_err(&failed)?.check())
            .transpose()
    }

    fn list(&self, namespace: Option<&Namespace>) -> Result<Vec<Row>, KeyError> {
        let mut client = self.client()?;
        let failed = self.failed("listing the keys");
        let rows = match namespace {
            Some(namespace) => {
                let stmt = client.prepare_cached(LIST_ONE).map_err(&failed)?;
                client.query(&stmt, &[&namespace.as_str()])
            }
            None => {
                let stmt = client.prepare_cached(LIST_ALL).map_err(&failed)?;
                client.query(&stmt, &[])
            }
        }
        .map_err(&failed)?;
        rows.iter()
            .map(|row| raw(row).map_err(&failed)?.check())
            .collect()
    }

    fn revoke(&self, id: &str, now_ms: i64) -> Result<Revoked, KeyError> {
        let mut client = self.client()?;
        let failed = self.failed("revoking a key");
        let stmt = client.prepare_cached(REVOKE).map_err(&failed)?;
        if client.execute(&stmt, &[&id, &now_ms]).map_err(&failed)? == 1 {
            return Ok(Revoked::Now);
        }
        let stmt = client.prepare_cached(EXISTS).map_err(&failed)?;
        let exists = client.query_opt(&stmt, &[&id]).map_err(&failed)?;
        Ok(if exists.is_some() {
            Revoked::Already
        } else {
            Revoked::Missing
        })
    }

    fn touch(&self, id: &str, now_ms: i64) -> Result<(), KeyError> {
        let mut client = self.client()?;
        let failed = self.failed("recording a key's use");
        let stmt = client.prepare_cached(TOUCH).map_err(&failed)?;
        client.execute(&stmt, &[&id, &now_ms]).map_err(&failed)?;
        Ok(())
    }

    fn location(&self) -> String {
        format!("postgres:{}", self.pool.target())
    }

    fn any_key(&self, active_only: bool) -> Result<bool, KeyError> {
        let mut client = self.client()?;
        let failed = self.failed("counting the keys");
        let sql = if active_only { ANY_ACTIVE } else { ANY_CREATED };
        let stmt = client.prepare_cached(sql).map_err(&failed)?;
        let row = client.query_one(&stmt, &[]).map_err(&failed)?;
        row.try_get(0).map_err(&failed)
    }
}
