//! A bounded pool of PostgreSQL connections (see the module docs of `postgres` for why it is
//! written here).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use ::postgres::Client;

use super::{Endpoint, Migrated, Settings, VectorSupport};
use crate::DbError;
use crate::Schema;

/// A bounded pool of connections to one PostgreSQL database. Cloning it is cheap and shares
/// the connections. See the module docs for its rules.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: Endpoint,
    settings: Settings,
    size: usize,
    state: Mutex<State>,
    returned: Condvar,
}

#[derive(Default)]
struct State {
    idle: Vec<Idle>,
    /// Connections open or being opened, idle ones included: never more than `size`.
    open: usize,
}

struct Idle {
    client: Client,
    since: Instant,
}

/// A connection checked out of a [`Pool`]; it goes back when dropped (or is discarded, if it
/// was closed). It dereferences to [`postgres::Client`](::postgres::Client).
///
/// Open transactions with [`Client::transaction`], which rolls back when dropped: a connection
/// returned inside a transaction begun with a plain `BEGIN` would hand that transaction to the
/// next caller (the pool cannot see it without a round trip). Session settings changed with
/// `SET` likewise stay with the connection; [`discard`](PooledClient::discard) it instead.
pub struct PooledClient {
    client: Option<Client>,
    pool: Arc<Inner>,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.lock();
        f.debug_struct("Pool")
            .field("target", &self.inner.endpoint.target())
            .field("size", &self.inner.size)
            .field("open", &state.open)
            .field("idle", &state.idle.len())
            .finish()
    }
}

impl fmt::Debug for PooledClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledClient")
            .field("target", &self.pool.endpoint.target())
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// Parses `url` and opens the first connection, so that a wrong URL, password, host, port
    /// or database name fails here with the [`DbError`] that names it.
    pub fn connect(url: &str, settings: Settings) -> Result<Pool, DbError> {
        let endpoint = Endpoint::parse(url, &settings)?;
        let first = endpoint.connect(&settings)?;
        let pool = Pool {
            inner: Arc::new(Inner {
                endpoint,
                size: settings.pool_size.max(1),
                settings,
                state: Mutex::new(State::default()),
                returned: Condvar::new(),
            }),
        };
        {
            let mut state = pool.inner.lock();
            state.open = 1;
            state.idle.push(Idle {
                client: first,
                since: Instant::now(),
            });
        }
        Ok(pool)
    }

    /// A connection: an idle one if there is one (checked first if it was idle for long), a
    /// new one if fewer than [`Settings::pool_size`] are open, otherwise the first one returned
    /// within [`Settings::checkout_timeout`]; after that, [`DbError::PoolTimeout`].
    pub fn get(&self) -> Result<PooledClient, DbError> {
        let inner = &self.inner;
        let deadline = Instant::now() + inner.settings.checkout_timeout;
        let mut state = inner.lock();
        loop {
            if let Some(mut idle) = state.idle.pop() {
                drop(state);
                let usable = !idle.client.is_closed()
                    && (idle.since.elapsed() < inner.settings.validate_after
                        || idle.client.is_valid(inner.settings.connect_timeout).is_ok());
                if usable {
                    return Ok(self.wrap(idle.client));
                }
                // A dead connection: forget it and try again (a new one fits now).
                state = inner.lock();
                state.open = state.open.saturating_sub(1);
                continue;
            }
            if state.open < inner.size {
                state.open += 1;
                drop(state);
                return match inner.endpoint.connect(&inner.settings) {
                    Ok(client) => Ok(self.wrap(client)),
                    Err(e) => {
                        inner.release_slot();
                        Err(e)
                    }
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(DbError::PoolTimeout {
                    target: inner.endpoint.target().to_owned(),
                    size: inner.size,
                    waited: inner.settings.checkout_timeout,
                });
            }
            state = inner
                .returned
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Brings `schema` to its current version with one of the pool's connections: see
    /// [`migrate`](super::migrate).
    pub fn migrate(&self, schema: &Schema) -> Result<Migrated, DbError> {
        let mut client = self.get()?;
        super::migrate(&mut client, self.target(), schema)
    }

    /// Whether the `vector` extension can be used, creating it if possible, with one of the
    /// pool's connections: see [`vector_support`](super::vector_support).
    pub fn vector_support(&self) -> Result<VectorSupport, DbError> {
        let mut client = self.get()?;
        super::vector_support(&mut client, self.target())
    }

    /// The database, server and user this pool connects to, for messages (never the
    /// password); store crates pass it to [`migrate`](super::migrate) and
    /// [`error`](super::error).
    pub fn target(&self) -> &str {
        self.inner.endpoint.target()
    }

    /// The most connections this pool holds open at once.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// How many connections are open now (idle or checked out).
    pub fn open_connections(&self) -> usize {
        self.inner.lock().open
    }

    /// How many open connections are idle in the pool now.
    pub fn idle_connections(&self) -> usize {
        self.inner.lock().idle.len()
    }

    fn wrap(&self, client: Client) -> PooledClient {
        PooledClient {
            client: Some(client),
            pool: Arc::clone(&self.inner),
        }
    }
}

impl Inner {
    /// The state stays consistent across a panic elsewhere (no code panics while holding the
    /// lock), so a poisoned lock is used as it is.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One connection fewer is open: a waiter may open a new one.
    fn release_slot(&self) {
        let mut state = self.lock();
        state.open = state.open.saturating_sub(1);
        drop(state);
        self.returned.notify_one();
    }
}

impl PooledClient {
    /// Closes this connection instead of returning it to the pool, e.g. after an error that
    /// leaves its session state unknown.
    pub fn discard(mut self) {
        self.client = None;
        self.pool.release_slot();
    }
}

impl Deref for PooledClient {
    type Target = Client;

    fn deref(&self) -> &Client {
        // Some from construction until `discard` or `drop`, which consume it.
        self.client.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl DerefMut for PooledClient {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().unwrap_or_else(|| unreachable!())
    }
}

impl Drop for PooledClient {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if client.is_closed() {
            drop(client);
            self.pool.release_slot();
            return;
        }
        let mut state = self.pool.lock();
        state.idle.push(Idle {
            client,
            since: Instant::now(),
        });
        drop(state);
        self.pool.returned.notify_one();
    }
}
