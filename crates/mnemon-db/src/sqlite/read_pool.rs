//! A pool of read connections to one database file, which the writable handles of one store on
//! that file, opened with the same settings, share whatever their namespace (through each
//! store's registry, a [`Shared`](super::Shared): `mnemon-store`'s and `mnemon-artifacts`'
//! `Connections`, `mnemon-memory`'s `sqlite/shared_file.rs`).
//!
//! A store's write connection is held from `BEGIN IMMEDIATE` to `COMMIT`, the commit's WAL
//! fsync included (`Durability::Full`). Reads that took that same connection queued behind
//! every write (the SQLite mix of docs/bench-server.md). In WAL mode a read transaction on
//! another connection never waits for the writer and sees every transaction committed before it
//! began, so reads go to connections of their own: a committed (acknowledged) write is seen by
//! every later read, on whichever connection it runs.
//!
//! The pool grows on demand, up to [`ReadPool::MAX`]: the first connection is opened with the
//! pool (a file that cannot be read fails the open, not the first read), the others only when
//! every open one is busy, so a store used by one thread at a time (the CLI, most tests) keeps
//! one reader. Past the bound a read takes whichever connection comes back first: the readers
//! serve every namespace of the file, and one waiting for a connection chosen in advance could
//! wait for another tenant's long read while the others came back. It waits at most the busy
//! timeout, then fails ([`DbError::PoolTimeout`]). Each reader is `query_only`: a write routed
//! to a reader by mistake fails instead of bypassing the writer's `BEGIN IMMEDIATE`. A pool of
//! one given connection
//! ([`ReadPool::of`]) serves a store opened read-only, whose connection may carry views over an
//! older file and so cannot be copied.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use rusqlite::Connection;

use crate::DbError;
use crate::sqlite::{self, ConnGuard, Settings};

/// How many read connections a pool opens at most.
const MAX_READERS: usize = 4;

/// Read connections to one database file: the first, opened with the pool, and up to
/// [`ReadPool::MAX`]` - 1` more opened on demand.
#[derive(Debug)]
pub struct ReadPool {
    /// The database file, for the connections opened later; `None` for a pool of one given
    /// connection, which never grows.
    path: Option<PathBuf>,
    /// The store's connection settings (busy timeout, durability), for the same; a read waits
    /// for a connection up to the busy timeout.
    settings: Settings,
    state: Mutex<State>,
    /// Signalled when a connection comes back while reads wait.
    returned: Condvar,
}

#[derive(Debug)]
struct State {
    /// The connections nobody holds, the most recently returned last (taken first: its page
    /// cache is the warmest).
    idle: Vec<Connection>,
    /// Connections open or being opened, held or idle.
    opened: usize,
    /// Reads waiting for a connection to come back.
    waiting: usize,
}

impl ReadPool {
    /// How many read connections a pool opens at most. Reads are short (an asset's rows, a
    /// thread's row, the winners' bodies of a recall), so a few connections serve many
    /// concurrent requests; each holds its own page cache (SQLite's default, about 2 MB) and
    /// file descriptors.
    pub const MAX: usize = MAX_READERS;

    /// The pool of the database at `path`, with its first connection open (`query_only`, set
    /// up with `settings`). The file must exist.
    pub fn open(path: &Path, settings: &Settings) -> Result<ReadPool, DbError> {
        let first = connect(path, settings)?;
        Ok(ReadPool::with(Some(path.to_path_buf()), *settings, first))
    }

    /// A pool of `conn` alone, which never grows: for a store opened read-only.
    pub fn of(conn: Connection) -> ReadPool {
        ReadPool::with(None, Settings::default(), conn)
    }

    fn with(path: Option<PathBuf>, settings: Settings, first: Connection) -> ReadPool {
        ReadPool {
            path,
            settings,
            state: Mutex::new(State {
                idle: vec![first],
                opened: 1,
                waiting: 0,
            }),
            returned: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing in `State` is left half-changed by a panic: every change is one statement.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A read connection, for the caller alone until the guard drops: an idle one, else a new
    /// one while fewer than [`ReadPool::MAX`] are open, else the first one to come back,
    /// waited for up to the busy timeout (then [`DbError::PoolTimeout`]: every connection
    /// stayed in use by other reads, of any namespace, for that long).
    pub fn take(&self) -> Result<ReadGuard<'_>, DbError> {
        let started = Instant::now();
        let mut state = self.state();
        // A connection that cannot be opened (say, too many open files) is not an error while
        // another is open: that one serves the read once it comes back.
        let mut may_grow = self.path.is_some();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(ReadGuard::pooled(conn, self));
            }
            if let Some(path) = self.path.as_ref().filter(|_| may_grow)
                && state.opened < MAX_READERS
            {
                // Opened outside the lock: other reads take and return connections meanwhile.
                state.opened += 1;
                drop(state);
                let opened = connect(path, &self.settings);
                state = self.state();
                match opened {
                    Ok(conn) => return Ok(ReadGuard::pooled(conn, self)),
                    Err(error) => {
                        state.opened -= 1;
                        if state.opened == 0 {
                            return Err(error);
                        }
                        may_grow = false;
                        continue;
                    }
                }
            }
            let left = self
                .settings
                .busy_timeout
                .checked_sub(started.elapsed())
                .filter(|left| !left.is_zero());
            let Some(left) = left else {
                return Err(DbError::PoolTimeout {
                    target: self.path.as_ref().map_or_else(
                        || "the database opened read-only".to_owned(),
                        |path| format!("SQLite {} (read connections)", path.display()),
                    ),
                    size: state.opened,
                    waited: started.elapsed(),
                });
            };
            state.waiting += 1;
            let (next, _) = self
                .returned
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner);
            state = next;
            state.waiting -= 1;
        }
    }

    /// Takes `conn` back and wakes a read waiting for one.
    fn give_back(&self, conn: Connection) {
        let mut state = self.state();
        state.idle.push(conn);
        if state.waiting > 0 {
            self.returned.notify_one();
        }
    }
}

/// A read connection held: one of a [`ReadPool`]'s, given back when the guard drops, or a
/// store's only connection held through its mutex ([`ReadGuard::from`] a [`ConnGuard`]).
#[derive(Debug)]
pub struct ReadGuard<'a>(Held<'a>);

#[derive(Debug)]
enum Held<'a> {
    /// `Some` until the guard drops.
    Pooled(Option<Connection>, &'a ReadPool),
    Locked(ConnGuard<'a>),
}

impl<'a> ReadGuard<'a> {
    fn pooled(conn: Connection, pool: &'a ReadPool) -> ReadGuard<'a> {
        ReadGuard(Held::Pooled(Some(conn), pool))
    }
}

impl<'a> From<ConnGuard<'a>> for ReadGuard<'a> {
    fn from(conn: ConnGuard<'a>) -> ReadGuard<'a> {
        ReadGuard(Held::Locked(conn))
    }
}

impl Deref for ReadGuard<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        match &self.0 {
            Held::Pooled(Some(conn), _) => conn,
            Held::Locked(conn) => conn,
            Held::Pooled(None, _) => unreachable!("a read guard's connection is taken on drop"),
        }
    }
}

impl DerefMut for ReadGuard<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        match &mut self.0 {
            Held::Pooled(Some(conn), _) => conn,
            Held::Locked(conn) => conn,
            Held::Pooled(None, _) => unreachable!("a read guard's connection is taken on drop"),
        }
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        if let Held::Pooled(conn, pool) = &mut self.0
            && let Some(conn) = conn.take()
        {
            // A read that panicked left its transaction to roll back when its statements and
            // transaction were dropped: the connection is as usable as ever.
            pool.give_back(conn);
        }
    }
}

/// A read connection to the database at `path`: set up as every Mnemon connection (WAL, busy
/// timeout), and `query_only`.
fn connect(path: &Path, settings: &Settings) -> Result<Connection, DbError> {
    let conn = sqlite::connect(path, settings)?;
    conn.pragma_update(None, "query_only", "ON")
        .map_err(|e| DbError::Setup {
            path: path.to_path_buf(),
            action: "making a read connection query-only",
            detail: e.to_string(),
        })?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// The SQLite handle under `conn`, which stays the same while the connection moves in and
    /// out of the pool: its identity.
    fn id(conn: &Connection) -> usize {
        // SAFETY: only the handle's address is read; nothing is done through it.
        unsafe { conn.handle() as usize }
    }

    fn pool(busy_timeout: Duration) -> (tempfile::TempDir, ReadPool) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.sqlite3");
        drop(sqlite::connect(&path, &Settings::default()).unwrap());
        let settings = Settings {
            busy_timeout,
            ..Settings::default()
        };
        let readers = ReadPool::open(&path, &settings).unwrap();
        (dir, readers)
    }

    /// The pool opens a connection only when every open one is busy, never more than
    /// [`MAX_READERS`], each refusing writes; past the bound a read waits for a free one.
    #[test]
    fn the_pool_grows_on_demand_up_to_its_bound() {
        let (_dir, readers) = pool(Duration::from_secs(5));
        let opened = || readers.state().opened;
        assert_eq!(opened(), 1);
        // One at a time: the first connection serves every read.
        for _ in 0..10 {
            drop(readers.take().unwrap());
        }
        assert_eq!(opened(), 1);
        let held: Vec<_> = (0..MAX_READERS).map(|_| readers.take().unwrap()).collect();
        assert_eq!(opened(), MAX_READERS);
        let mut distinct: Vec<usize> = held.iter().map(|conn| id(conn)).collect();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), MAX_READERS);
        for conn in &held {
            assert!(conn.execute_batch("CREATE TABLE t (x)").is_err());
            let one: i64 = conn.query_row("SELECT 1", [], |r| r.get(0)).unwrap();
            assert_eq!(one, 1);
        }
        std::thread::scope(|scope| {
            let (sent, received) = mpsc::channel();
            let pool = &readers;
            scope.spawn(move || {
                let conn = pool.take().unwrap();
                let _ = sent.send(conn.query_row("SELECT 2", [], |r| r.get::<_, i64>(0)));
            });
            // Every connection is held and the pool is full: the read waits…
            assert!(received.recv_timeout(Duration::from_millis(200)).is_err());
            assert_eq!(opened(), MAX_READERS);
            // …until the connections are released.
            drop(held);
            let got = received.recv_timeout(Duration::from_secs(5));
            assert_eq!(
                got.expect("the read never got a free connection").unwrap(),
                2
            );
        });
    }

    /// A read that finds every connection held takes whichever comes back first (before, it
    /// waited for one chosen in advance, which a long read could hold while the others came
    /// back), and gives up at the busy timeout with an error that says why.
    #[test]
    fn a_waiting_read_takes_the_first_connection_back_or_times_out() {
        let (_dir, readers) = pool(Duration::from_millis(300));
        let held: Vec<_> = (0..MAX_READERS).map(|_| readers.take().unwrap()).collect();
        let started = Instant::now();
        let error = readers.take().map(|_| ()).unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(250));
        assert!(
            matches!(
                error,
                DbError::PoolTimeout {
                    size: MAX_READERS,
                    ..
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("stayed in use"), "{error}");
        // Every connection but one stays held for long; the one given back serves the read.
        // A pool with a long timeout, so that a stall of this thread cannot fail the read.
        drop(held);
        let (_dir, readers) = pool(Duration::from_secs(30));
        let mut held: Vec<_> = (0..MAX_READERS).map(|_| readers.take().unwrap()).collect();
        for returned in 0..MAX_READERS {
            std::thread::scope(|scope| {
                let (sent, received) = mpsc::channel();
                let pool = &readers;
                scope.spawn(move || {
                    let _ = sent.send(pool.take().map(|conn| id(&conn)));
                });
                std::thread::sleep(Duration::from_millis(20));
                let back = held.remove(returned);
                let expected = id(&back);
                drop(back);
                let got = received.recv_timeout(Duration::from_secs(20));
                let got = got
                    .expect("the read waited for another connection")
                    .unwrap();
                assert_eq!(got, expected);
                held.insert(returned, readers.take().unwrap());
            });
        }
    }

    /// A pool of one given connection never grows: a read past it waits for that one.
    #[test]
    fn a_pool_of_one_connection_never_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.sqlite3");
        let readers = ReadPool::of(sqlite::connect(&path, &Settings::default()).unwrap());
        let first = readers.take().unwrap();
        std::thread::scope(|scope| {
            let pool = &readers;
            let waiting = scope.spawn(move || pool.take().map(|_| ()));
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(readers.state().opened, 1);
            drop(first);
            waiting.join().unwrap().unwrap();
        });
    }
}
