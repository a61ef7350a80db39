//! A bounded pool of PostgreSQL connections (see the module docs of `postgres` for why it is
//! written here), each with its cache of prepared statements.
//!
//! **Prepared statements.** A store's hot statements are prepared once per connection with
//! [`PooledClient::prepare_cached`] (or [`CachedTransaction::prepare_cached`] inside a
//! transaction) and then only bound and executed: the server parses and plans the SQL text
//! once per connection instead of once per call, and after a few executions it may keep a
//! generic plan. The cache lives with the connection it was prepared on (a prepared statement
//! belongs to one server session): it goes back to the pool with the connection, and is
//! dropped with it when the connection is discarded (closed, failed its check, or
//! [`PooledClient::discard`]ed), so a replacement connection starts empty. It holds at most
//! [`STATEMENT_CACHE_SIZE`] statements, forgetting the least recently used one beyond that.
//! Protocol-level prepared statements are not transactional: one prepared inside a
//! transaction that rolls back stays valid. They belong to a server session, so a connection
//! pooler between Mnemon and the server that hands one client's statements to different server
//! sessions (PgBouncer in transaction mode) must track prepared statements itself (PgBouncer
//! 1.21 and later with `max_prepared_statements` set), or be run in session mode. The stores'
//! statements name the table columns they read rather than selecting `*` from a table, so the
//! server replans them after a migration instead of failing with "cached plan must not change
//! result type".

use std::collections::HashMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ::postgres::types::Type;
use ::postgres::{Client, IsolationLevel, Statement, Transaction};

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
    /// Checkouts waiting for a connection. A new checkout does not take a connection ahead
    /// of them: a thread that returns one and at once asks again (a worker moving batch after
    /// batch) would otherwise take it back before the woken waiter runs, and keep it.
    waiting: usize,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

/// The most prepared statements one connection's cache keeps (see the module docs); the least
/// recently used is closed beyond that. The stores use a few dozen distinct statements.
pub const STATEMENT_CACHE_SIZE: usize = 128;

/// One connection and the statements prepared on it.
struct Conn {
    client: Client,
    statements: StatementCache,
}

impl Conn {
    fn new(client: Client) -> Conn {
        Conn {
            client,
            statements: StatementCache::default(),
        }
    }
}

/// Closes `conns`. A `postgres::Client` says goodbye to its server with a blocking call into
/// the client's own runtime, which panics on a thread that drives a tokio runtime (an async
/// server drops its last store handles on one when it stops), so there they are closed on a
/// thread of their own, joined so that they are closed when this returns.
fn close(conns: Vec<Conn>) {
    if conns.is_empty() {
        return;
    }
    if tokio::runtime::Handle::try_current().is_ok() {
        let _ = std::thread::spawn(move || drop(conns)).join();
    } else {
        drop(conns);
    }
}

impl Drop for Inner {
    /// The last handle of the pool is gone: its idle connections close (see [`close`]).
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        close(
            std::mem::take(&mut state.idle)
                .into_iter()
                .map(|i| i.conn)
                .collect(),
        );
    }
}

/// Statements prepared on one connection, by SQL text.
#[derive(Default)]
struct StatementCache {
    entries: HashMap<&'static str, Cached>,
    /// A counter bumped on every lookup, for least-recently-used eviction.
    clock: u64,
    /// How many statements this cache has prepared, hits excluded.
    prepared: u64,
}

struct Cached {
    statement: Statement,
    used: u64,
}

impl StatementCache {
    /// The statement for `sql`, prepared with `prepare` when it is not cached (or was cached
    /// with other parameter types than `types`).
    fn get_or_prepare(
        &mut self,
        sql: &'static str,
        types: &[Type],
        prepare: impl FnOnce(&str, &[Type]) -> Result<Statement, ::postgres::Error>,
    ) -> Result<Statement, ::postgres::Error> {
        self.clock += 1;
        if let Some(cached) = self.entries.get_mut(sql)
            && cached.statement.params().get(..types.len()) == Some(types)
        {
            cached.used = self.clock;
            return Ok(cached.statement.clone());
        }
        let statement = prepare(sql, types)?;
        self.prepared += 1;
        if self.entries.len() >= STATEMENT_CACHE_SIZE && !self.entries.contains_key(sql) {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, cached)| cached.used)
                .map(|(sql, _)| *sql);
            if let Some(oldest) = oldest {
                self.entries.remove(oldest);
            }
        }
        self.entries.insert(
            sql,
            Cached {
                statement: statement.clone(),
                used: self.clock,
            },
        );
        Ok(statement)
    }
}

/// A connection checked out of a [`Pool`]; it goes back when dropped (or is discarded, if it
/// was closed). It dereferences to [`postgres::Client`](::postgres::Client).
///
/// Open transactions with [`Client::transaction`], which rolls back when dropped: a connection
/// returned inside a transaction begun with a plain `BEGIN` would hand that transaction to the
/// next caller (the pool cannot see it without a round trip). Session settings changed with
/// `SET` likewise stay with the connection; [`discard`](PooledClient::discard) it instead.
pub struct PooledClient {
    conn: Option<Conn>,
    pool: Arc<Inner>,
}

/// A transaction on a [`PooledClient`] that can prepare statements into the connection's cache
/// ([`prepare_cached`](Self::prepare_cached)). It dereferences to
/// [`postgres::Transaction`](::postgres::Transaction) and, like it, rolls back when dropped
/// without [`commit`](Self::commit).
pub struct CachedTransaction<'a> {
    tx: Transaction<'a>,
    statements: &'a mut StatementCache,
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
                conn: Conn::new(first),
                since: Instant::now(),
            });
        }
        Ok(pool)
    }

    /// A new pool to this pool's database, with its settings but at most `pool_size`
    /// connections, none of them open yet: for a worker that must not take this pool's
    /// connections (the memory store's background indexer). The URL is not parsed again.
    pub fn sibling(&self, pool_size: usize) -> Pool {
        let settings = Settings {
            pool_size,
            ..self.inner.settings
        };
        Pool {
            inner: Arc::new(Inner {
                endpoint: self.inner.endpoint.clone(),
                size: pool_size.max(1),
                settings,
                state: Mutex::new(State::default()),
                returned: Condvar::new(),
            }),
        }
    }

    /// The settings the pool connects with.
    pub fn settings(&self) -> Settings {
        self.inner.settings
    }

    /// Closes the connections that have been idle in the pool for at least `idle`, so that a
    /// worker with nothing to do gives its connections back to the server; a later
    /// [`get`](Self::get) opens new ones.
    pub fn close_idle(&self, idle: Duration) {
        let closed: Vec<Idle> = {
            let mut state = self.inner.lock();
            let (old, kept) = std::mem::take(&mut state.idle)
                .into_iter()
                .partition(|c| c.since.elapsed() >= idle);
            state.idle = kept;
            state.open = state.open.saturating_sub(old.len());
            old
        };
        if !closed.is_empty() {
            // Outside the lock: closing a connection is a round trip.
            close(closed.into_iter().map(|i| i.conn).collect());
            self.inner.returned.notify_all();
        }
    }

    /// A connection: an idle one if there is one (checked first if it was idle for long), a
    /// new one if fewer than [`Settings::pool_size`] are open, otherwise the first one returned
    /// within [`Settings::checkout_timeout`]; after that, [`DbError::PoolTimeout`]. While
    /// other checkouts wait, a new one waits behind them rather than taking a connection
    /// first.
    pub fn get(&self) -> Result<PooledClient, DbError> {
        let inner = &self.inner;
        let deadline = Instant::now() + inner.settings.checkout_timeout;
        let mut state = inner.lock();
        let mut waited = false;
        loop {
            let behind_others = state.waiting > 0 && !waited;
            if behind_others {
                // Fall through to the wait below.
            } else if let Some(mut idle) = state.idle.pop() {
                drop(state);
                let usable = !idle.conn.client.is_closed()
                    && (idle.since.elapsed() < inner.settings.validate_after
                        || idle
                            .conn
                            .client
                            .is_valid(inner.settings.connect_timeout)
                            .is_ok());
                if usable {
                    return Ok(self.wrap(idle.conn));
                }
                // A dead connection: forget it and try again (a new one fits now, for this
                // checkout or a waiting one).
                close(vec![idle.conn]);
                state = inner.lock();
                state.open = state.open.saturating_sub(1);
                inner.returned.notify_one();
                continue;
            } else if state.open < inner.size {
                state.open += 1;
                drop(state);
                return match inner.endpoint.connect(&inner.settings) {
                    Ok(client) => Ok(self.wrap(Conn::new(client))),
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
            state.waiting += 1;
            state = inner
                .returned
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            state.waiting = state.waiting.saturating_sub(1);
            waited = true;
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

    fn wrap(&self, conn: Conn) -> PooledClient {
        PooledClient {
            conn: Some(conn),
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
    /// leaves its session state unknown. Its prepared statements go with it.
    pub fn discard(mut self) {
        if let Some(conn) = self.conn.take() {
            close(vec![conn]);
        }
        self.pool.release_slot();
    }

    /// The statement for `sql`, prepared on this connection the first time and taken from the
    /// connection's cache after that (see the module docs). The server infers the parameter
    /// types; use [`prepare_typed_cached`](Self::prepare_typed_cached) to give them.
    pub fn prepare_cached(&mut self, sql: &'static str) -> Result<Statement, ::postgres::Error> {
        self.prepare_typed_cached(sql, &[])
    }

    /// As [`prepare_cached`](Self::prepare_cached), with the types of the first parameters
    /// given (as [`Client::prepare_typed`]).
    pub fn prepare_typed_cached(
        &mut self,
        sql: &'static str,
        types: &[Type],
    ) -> Result<Statement, ::postgres::Error> {
        let conn = self.conn_mut();
        let client = &mut conn.client;
        conn.statements
            .get_or_prepare(sql, types, |sql, types| client.prepare_typed(sql, types))
    }

    /// Begins a transaction in which statements can be prepared into this connection's cache;
    /// it rolls back when dropped without [`CachedTransaction::commit`].
    pub fn transaction_cached(&mut self) -> Result<CachedTransaction<'_>, ::postgres::Error> {
        let conn = self.conn_mut();
        let tx = conn.client.transaction()?;
        Ok(CachedTransaction {
            tx,
            statements: &mut conn.statements,
        })
    }

    /// As [`transaction_cached`](Self::transaction_cached), with the isolation level and access
    /// mode given (as [`Client::build_transaction`]): e.g. a read-only snapshot
    /// (`REPEATABLE READ`, read only) whose statements still come from the connection's cache.
    pub fn build_transaction_cached(
        &mut self,
        isolation: IsolationLevel,
        read_only: bool,
    ) -> Result<CachedTransaction<'_>, ::postgres::Error> {
        let conn = self.conn_mut();
        let tx = conn
            .client
            .build_transaction()
            .isolation_level(isolation)
            .read_only(read_only)
            .start()?;
        Ok(CachedTransaction {
            tx,
            statements: &mut conn.statements,
        })
    }

    /// How many statements are in this connection's cache now.
    pub fn cached_statements(&self) -> usize {
        self.conn_ref().statements.entries.len()
    }

    /// How many statements this connection's cache has prepared since the connection was
    /// opened (a cache hit prepares nothing): a measure of the cache's work, for tests and
    /// diagnostics.
    pub fn statements_prepared(&self) -> u64 {
        self.conn_ref().statements.prepared
    }

    fn conn_ref(&self) -> &Conn {
        // Some from construction until `discard` or `drop`, which consume it.
        self.conn.as_ref().unwrap_or_else(|| unreachable!())
    }

    fn conn_mut(&mut self) -> &mut Conn {
        self.conn.as_mut().unwrap_or_else(|| unreachable!())
    }
}

impl CachedTransaction<'_> {
    /// The statement for `sql` from the connection's cache, prepared within this transaction
    /// the first time (it stays valid after the transaction, committed or not).
    pub fn prepare_cached(&mut self, sql: &'static str) -> Result<Statement, ::postgres::Error> {
        self.prepare_typed_cached(sql, &[])
    }

    /// As [`prepare_cached`](Self::prepare_cached), with the types of the first parameters
    /// given.
    pub fn prepare_typed_cached(
        &mut self,
        sql: &'static str,
        types: &[Type],
    ) -> Result<Statement, ::postgres::Error> {
        let tx = &mut self.tx;
        self.statements
            .get_or_prepare(sql, types, |sql, types| tx.prepare_typed(sql, types))
    }

    /// Commits the transaction.
    pub fn commit(self) -> Result<(), ::postgres::Error> {
        self.tx.commit()
    }
}

impl<'a> Deref for CachedTransaction<'a> {
    type Target = Transaction<'a>;

    fn deref(&self) -> &Transaction<'a> {
        &self.tx
    }
}

impl DerefMut for CachedTransaction<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

impl fmt::Debug for CachedTransaction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedTransaction")
            .field("cached_statements", &self.statements.entries.len())
            .finish_non_exhaustive()
    }
}

impl Deref for PooledClient {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.conn_ref().client
    }
}

impl DerefMut for PooledClient {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.conn_mut().client
    }
}

impl Drop for PooledClient {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if conn.client.is_closed() {
            close(vec![conn]);
            self.pool.release_slot();
            return;
        }
        let mut state = self.pool.lock();
        state.idle.push(Idle {
            conn,
            since: Instant::now(),
        });
        drop(state);
        self.pool.returned.notify_one();
    }
}
