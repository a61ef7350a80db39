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
//! one reader. Each reader is `query_only`: a write routed to a reader by mistake fails instead
//! of bypassing the writer's `BEGIN IMMEDIATE`. A pool of one given connection
//! ([`ReadPool::of`]) serves a store opened read-only, whose connection may carry views over an
//! older file and so cannot be copied.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
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
    /// The store's connection settings (busy timeout, durability), for the same.
    settings: Settings,
    /// The connection every read can fall back to waiting for.
    first: Mutex<Connection>,
    /// The connections opened on demand; slot `i` is filled only after every slot before it.
    more: [OnceLock<Mutex<Connection>>; MAX_READERS - 1],
    /// How many connections are open: 1 + the filled prefix of `more`.
    opened: AtomicUsize,
    /// Serialises the opening of new connections, so that two busy readers never both open
    /// one for the same slot.
    growing: Mutex<()>,
    /// Where the next [`ReadPool::take`] starts looking: consecutive reads spread over the
    /// connections instead of all trying the first.
    next: AtomicUsize,
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
        Ok(ReadPool {
            path: Some(path.to_path_buf()),
            settings: *settings,
            first: Mutex::new(connect(path, settings)?),
            more: Default::default(),
            opened: AtomicUsize::new(1),
            growing: Mutex::new(()),
            next: AtomicUsize::new(0),
        })
    }

    /// A pool of `conn` alone, which never grows: for a store opened read-only.
    pub fn of(conn: Connection) -> ReadPool {
        ReadPool {
            path: None,
            settings: Settings::default(),
            first: Mutex::new(conn),
            more: Default::default(),
            opened: AtomicUsize::new(1),
            growing: Mutex::new(()),
            next: AtomicUsize::new(0),
        }
    }

    /// A read connection, for the caller alone until the guard drops: a free one if there is
    /// one (tried round-robin), else a new one while fewer than [`ReadPool::MAX`] are open,
    /// else the first one tried, waited for.
    pub fn take(&self) -> ConnGuard<'_> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        if let Some(free) = self.free(start) {
            return free;
        }
        // Every open connection is busy: one more, if the pool may grow. A connection that
        // cannot be opened (say, too many open files) is not an error: an open one serves the
        // read once it is free.
        if let Ok(true) = self.grow()
            && let Some(free) = self.free(start)
        {
            return free;
        }
        let opened = self.opened.load(Ordering::Acquire).max(1);
        // A panic during a read leaves the connection as usable as ever (the transaction it
        // held rolled back when it was dropped): `parking_lot`'s mutexes are not poisoned.
        self.slot(start % opened).unwrap_or(&self.first).lock()
    }

    /// An open connection nobody holds, trying them from `start` (modulo how many are open).
    fn free(&self, start: usize) -> Option<ConnGuard<'_>> {
        let opened = self.opened.load(Ordering::Acquire).max(1);
        (0..opened).find_map(|i| self.slot((start + i) % opened)?.try_lock())
    }

    /// Opens one more connection into the next empty slot; `Ok(false)` when every slot is
    /// filled.
    fn grow(&self) -> Result<bool, DbError> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        let _growing = self.growing.lock();
        let opened = self.opened.load(Ordering::Acquire);
        let Some(slot) = opened.checked_sub(1).and_then(|i| self.more.get(i)) else {
            return Ok(false);
        };
        let conn = connect(path, &self.settings)?;
        // Only a thread holding `growing` fills a slot, and `opened` says this one is empty.
        let _ = slot.set(Mutex::new(conn));
        self.opened.store(opened + 1, Ordering::Release);
        Ok(true)
    }

    /// Connection `i`, if it is open.
    fn slot(&self, i: usize) -> Option<&Mutex<Connection>> {
        match i.checked_sub(1) {
            None => Some(&self.first),
            Some(more) => self.more.get(more).and_then(OnceLock::get),
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

    /// The pool opens a connection only when every open one is busy, never more than
    /// [`MAX_READERS`], each refusing writes; past the bound a read waits for a free one.
    #[test]
    fn the_pool_grows_on_demand_up_to_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.sqlite3");
        drop(sqlite::connect(&path, &Settings::default()).unwrap());
        let readers = ReadPool::open(&path, &Settings::default()).unwrap();
        let opened = || readers.opened.load(Ordering::Acquire);
        assert_eq!(opened(), 1);
        // One at a time: the first connection serves every read.
        for _ in 0..10 {
            drop(readers.take());
        }
        assert_eq!(opened(), 1);
        let held: Vec<_> = (0..MAX_READERS).map(|_| readers.take()).collect();
        assert_eq!(opened(), MAX_READERS);
        let mut distinct: Vec<*const Connection> = held
            .iter()
            .map(|conn| &**conn as *const Connection)
            .collect();
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
                let conn = pool.take();
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
}
