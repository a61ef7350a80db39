//! [`PostgresPools`]: the PostgreSQL connections that every handle opened from one
//! [`OpenOptions`](crate::OpenOptions), or a clone of it, shares (docs/postgres.md#one-pool-per-database).
//!
//! A handle is opened per namespace, and a server opens one for every tenant it serves. Were
//! each handle's three stores to keep a pool of their own, every tenant ever served would hold
//! at least three idle connections for the life of the process, and PostgreSQL's
//! `max_connections` (100 by default) would refuse new tenants after a few dozen. The stores
//! of every namespace therefore share one pool per database and durability, and the memory
//! stores' background indexers share a second, small one: however many tenants a process
//! serves, its stores hold at most [`STORE_CONNECTIONS`] + [`INDEXER_CONNECTIONS`] (18)
//! connections (a server with keys adds its key store's own pool).

use std::sync::{Arc, Mutex, PoisonError};

use mnemon_db::postgres::{Pool, Settings};
use mnemon_db::{DbError, Durability};

/// The connections every store of every namespace shares by default: as many as `mnemon serve`
/// runs operations at once by default (`--max-concurrent-queries`, 16), so that no operation of
/// a server with default limits waits for a connection, and each of its three stores may still
/// use as many as it did with a pool of its own (8). A checkout waits for one when all are
/// busy, up to 5 s. A server started with another `--max-concurrent-queries` sizes its pool
/// to it ([`PostgresPools::with_store_connections`]).
pub const STORE_CONNECTIONS: usize = 16;

/// The connections the memory stores' background indexers share. Each mover (a store's lead,
/// and its helpers while it has a backlog) checks one out per batch it moves (32 rows, a
/// fraction of a second), so those of many namespaces take turns (a checkout waits behind the
/// ones already waiting, so one namespace's backlog cannot keep both); two let two batches run
/// at once, one per core of the 2-core machine the HNSW insertions were measured on
/// (docs/postgres.md#moving-pending-rows).
pub const INDEXER_CONNECTIONS: usize = 2;

/// The pools opened so far for one [`OpenOptions`](crate::OpenOptions) and its clones: one
/// entry per database URL and durability. Cloning shares them; `Default` starts empty, with
/// stores' pools of [`STORE_CONNECTIONS`].
#[derive(Clone)]
pub struct PostgresPools {
    open: Arc<Mutex<Vec<Open>>>,
    /// The size of each stores' pool.
    store_connections: usize,
}

impl Default for PostgresPools {
    fn default() -> Self {
        PostgresPools::with_store_connections(STORE_CONNECTIONS)
    }
}

/// The pools of one database and durability.
struct Open {
    url: String,
    durability: Durability,
    stores: Pool,
    indexers: Pool,
}

impl std::fmt::Debug for PostgresPools {
    /// Never prints the URLs: they may hold passwords.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresPools")
            .field("databases", &self.lock().len())
            .field("store_connections", &self.store_connections)
            .finish()
    }
}

impl PostgresPools {
    /// None open yet; each database's stores' pool will hold up to `connections` (at least 1)
    /// connections, opened as they are needed. `mnemon serve` passes its
    /// `--max-concurrent-queries`, so that no operation it admits waits for a connection; mind
    /// the server's `max_connections` (100 by default), which every process shares.
    pub fn with_store_connections(connections: usize) -> PostgresPools {
        PostgresPools {
            open: Arc::default(),
            store_connections: connections.max(1),
        }
    }

    /// The stores' pool and the indexers' pool of the database at `url` with `durability`,
    /// connecting the first time (a failure is not remembered: the next call tries again).
    pub(crate) fn get(&self, url: &str, durability: Durability) -> Result<(Pool, Pool), DbError> {
        if let Some(found) = find(&self.lock(), url, durability) {
            return Ok(found);
        }
        // Connected without the lock held: with the server down, tenants opening at once each
        // wait out their own connect timeout instead of one after another.
        let stores = Pool::connect(
            url,
            Settings {
                durability,
                pool_size: self.store_connections,
                ..Settings::default()
            },
        )?;
        let indexers = stores.sibling(INDEXER_CONNECTIONS);
        let mut open = self.lock();
        if let Some(first) = find(&open, url, durability) {
            // Another handle connected meanwhile: use its pools (this one's connection closes).
            return Ok(first);
        }
        open.push(Open {
            url: url.to_owned(),
            durability,
            stores: stores.clone(),
            indexers: indexers.clone(),
        });
        Ok((stores, indexers))
    }

    /// The list; a panic elsewhere leaves it consistent (nothing panics while holding it).
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Open>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The pools in `open` for `url` and `durability`, if any.
fn find(open: &[Open], url: &str, durability: Durability) -> Option<(Pool, Pool)> {
    open.iter()
        .find(|o| o.url == url && o.durability == durability)
        .map(|o| (o.stores.clone(), o.indexers.clone()))
}
