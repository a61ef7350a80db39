//! Writers of one process take turns at a database file, in the order they came.
//!
//! SQLite lets one connection write to a file at a time. Another connection that wants to write
//! waits in SQLite's busy handler, which polls the lock with sleeps growing from 1 ms to 100 ms
//! and favours no one: a writer that finds the lock free takes it, however long others have
//! been polling. Within one process the stores' write connections to one file (the asset,
//! artifact, memory and key stores, and each namespace's handle of each) met there. Under a
//! steady stream of memory adds, whose group commit begins its next batch microseconds after
//! committing the last, an asset put polled past every gap and waited up to a third of a
//! second; writers of four namespaces, one each, lost half the throughput of one namespace's
//! four and saw stalls of 60–230 ms (docs/ARCHITECTURE.md, mnemon-db).
//!
//! So every write of this process first takes its turn at the file here ([`WriteQueue`]): a
//! writer that finds the file busy waits on a condition variable, writers are served in the
//! order they asked, and the next is woken the moment the last is done. Once it has its turn,
//! a writer meets SQLite's lock only when another process holds it, and SQLite's busy handler
//! still covers that. A turn is a value ([`WriteTurn`]), not a guard tied to a thread, so a
//! transaction that one thread begins and another commits (the memory store's group commit)
//! holds one turn throughout. [`WriteConnection`] is a write connection that takes its turn
//! before every use.

use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::Settings;
use super::per_file::PerFile;

/// The writers of this process to one database file, served one at a time in the order they
/// asked. Shared by every connection to the file ([`WriteQueue::for_file`]).
#[derive(Debug)]
pub struct WriteQueue {
    /// The file, as registered.
    path: PathBuf,
    state: Mutex<State>,
    /// Signalled when a turn ends or a waiter gives up.
    turn_over: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// A writer has the turn.
    taken: bool,
    /// The writers waiting, first come first: their tickets.
    waiting: VecDeque<u64>,
    /// The next ticket.
    next_ticket: u64,
}

/// The queues alive in this process, by database file.
static QUEUES: PerFile<WriteQueue> = PerFile::new();

impl WriteQueue {
    /// The queue of the file at `path`, shared with every other connection to the same file in
    /// this process (one file reached by two spellings shares one queue when it exists).
    pub fn for_file(path: &Path) -> Arc<WriteQueue> {
        QUEUES.get(path, |path| WriteQueue {
            path,
            state: Mutex::default(),
            turn_over: Condvar::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for this writer's turn, behind every writer that asked before, for at most
    /// `timeout`. The turn ends when the [`WriteTurn`] is dropped.
    ///
    /// Fails with SQLite's own "database is locked" (`SQLITE_BUSY`) when the turn does not come
    /// within `timeout`, as SQLite's busy handler would have after its busy timeout: the
    /// stores already report that error as the database being busy.
    pub fn take_turn(self: &Arc<Self>, timeout: Duration) -> rusqlite::Result<WriteTurn> {
        let mut state = self.state();
        if !state.taken && state.waiting.is_empty() {
            state.taken = true;
            return Ok(WriteTurn {
                queue: Arc::clone(self),
            });
        }
        let ticket = state.next_ticket;
        state.next_ticket = state.next_ticket.wrapping_add(1);
        state.waiting.push_back(ticket);
        let deadline = Instant::now() + timeout;
        loop {
            if !state.taken && state.waiting.front() == Some(&ticket) {
                state.waiting.pop_front();
                state.taken = true;
                return Ok(WriteTurn {
                    queue: Arc::clone(self),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                state.waiting.retain(|t| *t != ticket);
                drop(state);
                // The writer behind this one may be first now.
                self.turn_over.notify_all();
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                    Some(format!(
                        "database is locked: other writers of this process held {} for longer \
                         than the busy timeout ({} ms)",
                        self.path.display(),
                        timeout.as_millis()
                    )),
                ));
            }
            state = self
                .turn_over
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl WriteQueue {
    /// Folds the WAL back into the main file as `conn`, a write connection to this queue's
    /// file, closes ([`checkpoint_on_close`](super::checkpoint_on_close)), during a turn and
    /// only if no other writer of this process is at work or waiting: the checkpoint takes
    /// SQLite's write lock, and a writer of this process meeting it there would fall back to
    /// the busy handler's sleeps. Skipped otherwise; a later close, or SQLite, does it.
    pub fn checkpoint_on_close(self: &Arc<Self>, conn: &Connection) {
        if let Ok(_turn) = self.take_turn(Duration::ZERO) {
            super::checkpoint_on_close(conn);
        }
    }
}

/// One writer's turn at a database file: no other writer of this process writes to the file
/// until it is dropped. It may be moved to another thread and dropped there.
#[derive(Debug)]
#[must_use = "the turn ends when it is dropped"]
pub struct WriteTurn {
    queue: Arc<WriteQueue>,
}

impl Drop for WriteTurn {
    fn drop(&mut self) {
        self.queue.state().taken = false;
        // Every waiter checks whether it is first; there are as many as the process has
        // writers to this file at once, a handful.
        self.queue.turn_over.notify_all();
    }
}

/// A read-write connection that takes its turn at its file ([`WriteQueue`]) before every use:
/// the write connection of a store whose writes are each one transaction on it.
#[derive(Debug)]
pub struct WriteConnection {
    conn: Mutex<Connection>,
    queue: Arc<WriteQueue>,
    timeout: Duration,
}

impl WriteConnection {
    /// `conn`, a connection to the file at `path` set up with `settings`: turns are waited for
    /// up to `settings.busy_timeout`, as SQLite's lock is.
    pub fn new(conn: Connection, path: &Path, settings: &Settings) -> WriteConnection {
        WriteConnection {
            conn: Mutex::new(conn),
            queue: WriteQueue::for_file(path),
            timeout: settings.busy_timeout,
        }
    }

    /// The connection, once it is this caller's turn at the file (see
    /// [`WriteQueue::take_turn`] for the error).
    pub fn lock(&self) -> rusqlite::Result<WriteGuard<'_>> {
        // The turn first: whoever holds the connection holds the turn, so a caller waiting for
        // the connection never holds a turn another needs.
        let turn = self.queue.take_turn(self.timeout)?;
        // A panic while the connection was held leaves it usable: transactions roll back on
        // drop.
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(WriteGuard { conn, _turn: turn })
    }

    /// The connection without waiting for a turn: for what neither writes nor waits for
    /// SQLite's write lock (reading a setting, a read on a store opened read-only).
    pub fn lock_without_turn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Folds the WAL back into the main file as the store closes, when no other writer of
    /// this process is at work ([`WriteQueue::checkpoint_on_close`]).
    pub fn checkpoint_on_close(&mut self) {
        let conn = self.conn.get_mut().unwrap_or_else(PoisonError::into_inner);
        self.queue.checkpoint_on_close(conn);
    }
}

/// The connection of a [`WriteConnection`] during its holder's turn.
#[derive(Debug)]
pub struct WriteGuard<'a> {
    // Dropped in this order: the connection is free before the next writer is woken.
    conn: MutexGuard<'a, Connection>,
    _turn: WriteTurn,
}

impl Deref for WriteGuard<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl DerefMut for WriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn writers_are_served_in_the_order_they_asked() {
        let dir = tempfile::tempdir().unwrap();
        let queue = WriteQueue::for_file(&dir.path().join("queue.db"));
        let first = queue.take_turn(Duration::from_secs(5)).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..4 {
            let (queue2, order2) = (Arc::clone(&queue), Arc::clone(&order));
            waiters.push(std::thread::spawn(move || {
                let turn = queue2.take_turn(Duration::from_secs(5)).unwrap();
                order2.lock().unwrap().push(i);
                drop(turn);
            }));
            // The next asks only once this one is queued.
            while queue.state().waiting.len() < i + 1 {
                std::thread::yield_now();
            }
        }
        drop(first);
        for waiter in waiters {
            waiter.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
    }

    #[test]
    fn a_writer_that_asked_first_is_not_overtaken_by_one_that_finds_the_file_free() {
        let dir = tempfile::tempdir().unwrap();
        let queue = WriteQueue::for_file(&dir.path().join("queue.db"));
        let held = queue.take_turn(Duration::from_secs(5)).unwrap();
        let served = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (queue, served) = (Arc::clone(&queue), Arc::clone(&served));
            std::thread::spawn(move || {
                let turn = queue.take_turn(Duration::from_secs(5)).unwrap();
                served.store(true, Ordering::SeqCst);
                drop(turn);
            })
        };
        while queue.state().waiting.is_empty() {
            std::thread::yield_now();
        }
        // The holder's turn ends and it asks again at once, likely before the woken waiter
        // runs: it queues behind the waiter instead of taking the free file.
        drop(held);
        let again = queue.take_turn(Duration::from_secs(5)).unwrap();
        assert!(served.load(Ordering::SeqCst), "the waiter was overtaken");
        drop(again);
        waiter.join().unwrap();
    }

    #[test]
    fn a_turn_that_does_not_come_in_time_is_a_busy_error_and_leaves_the_queue() {
        let dir = tempfile::tempdir().unwrap();
        let queue = WriteQueue::for_file(&dir.path().join("queue.db"));
        let held = queue.take_turn(Duration::from_secs(5)).unwrap();
        let err = queue.take_turn(Duration::from_millis(20)).unwrap_err();
        assert_eq!(
            err.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy)
        );
        assert!(err.to_string().contains("busy timeout"), "{err}");
        assert!(queue.state().waiting.is_empty());
        drop(held);
        drop(queue.take_turn(Duration::from_millis(20)).unwrap());
    }

    #[test]
    fn connections_to_one_file_share_its_queue_and_others_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        std::fs::write(&path, b"").unwrap();
        let a = WriteQueue::for_file(&path);
        let again = WriteQueue::for_file(&dir.path().join(".").join("a.db"));
        assert!(Arc::ptr_eq(&a, &again));
        let other = WriteQueue::for_file(&dir.path().join("b.db"));
        assert!(!Arc::ptr_eq(&a, &other));
        // Released with the last connection: a later open starts a new queue.
        let weak = Arc::downgrade(&a);
        drop((a, again));
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn a_turn_can_end_on_another_thread() {
        let dir = tempfile::tempdir().unwrap();
        let queue = WriteQueue::for_file(&dir.path().join("q.db"));
        let turn = queue.take_turn(Duration::from_secs(5)).unwrap();
        std::thread::spawn(move || drop(turn)).join().unwrap();
        drop(queue.take_turn(Duration::from_millis(20)).unwrap());
    }
}
