//! Group commit: concurrent writes of a [`SqliteMemoryStore`](super::SqliteMemoryStore) share
//! one transaction and one fsync.
//!
//! With `synchronous = FULL` every commit waits for the WAL to reach the disk, and the store has
//! one write connection, so writes from many clients queue behind each other's fsync: on the
//! 2-core development machine the writer saturated at about 1,400 adds a second under `cargo
//! xtask bench server`'s mix, and an add's latency was mostly that queue (docs/bench-server.md).
//! Here a write that finds the connection free opens a batch (`BEGIN IMMEDIATE`); each write
//! does its statements inside a savepoint of the open batch, so that its own error undoes only
//! its own statements; and the last one in line, the one that sees no other write waiting for
//! the connection (or a full batch), commits it for all. Every member is acknowledged only
//! after that commit returned: an acknowledged write has been flushed as before, whatever
//! batch it was in.
//!
//! A member that leaves the connection to the next one waits for the batch's outcome. It never
//! relies on the next one alone: after a short wait it takes the connection itself and commits
//! the batch if it is still open, so a batch cannot be left open by a caller that went away.
//! Every other use of the write connection ([`Writer::lock`]) first commits an open batch.
//!
//! A write waits for the connection at most the busy timeout, as it waits for SQLite's lock:
//! every namespace's store on the file shares this writer (`shared_file.rs`), so one tenant's
//! long transaction (a large import, a `forget` or `gc`) would otherwise hold every other
//! tenant's writes, each keeping a request slot, for as long as it ran. Past the timeout the
//! write fails with a storage error that says to retry; nothing of it was written.
//!
//! A batch, and every other use of the connection, holds the process's turn to write to the
//! file (`mnemon_db::sqlite::WriteQueue`) from its `BEGIN` to its end, so that the other stores'
//! writers to the file (assets, artifacts, keys, other namespaces' memory) are served in turn
//! rather than left polling SQLite's lock between two batches. A batch's turn is held by the
//! batch, not by a thread: whichever member commits it ends the turn.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mnemon_db::sqlite::{ConnGuard, ConnMutex, WriteQueue, WriteTurn};
use rusqlite::Connection;

use crate::error::MemoryError;

/// The most writes one batch holds: past it, the member that reaches it commits even with
/// others waiting, so that the first member's wait stays bounded.
const MAX_BATCH: usize = 64;

/// How long a member waits for the batch's outcome before checking that someone will still
/// commit it.
const RECHECK: Duration = Duration::from_millis(20);

/// The savepoint each member's statements run in.
const SAVEPOINT: &str = "mnemon_write";

/// The outcome of one batch, shared by its members.
#[derive(Debug, Default)]
pub(super) struct Batch {
    /// How many writes joined it; only changed with the connection held.
    members: AtomicUsize,
    /// `None` while open; then the commit's result (its error's text).
    outcome: Mutex<Option<Result<(), String>>>,
    done: Condvar,
}

impl Batch {
    fn outcome(&self) -> MutexGuard<'_, Option<Result<(), String>>> {
        self.outcome.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn finish(&self, result: Result<(), String>) {
        *self.outcome() = Some(result);
        self.done.notify_all();
    }
}

/// The batch open on the connection, and its turn at the file.
#[derive(Debug)]
struct OpenBatch {
    batch: Arc<Batch>,
    /// Ended when the batch is committed or abandoned (dropped with it).
    _turn: Option<WriteTurn>,
}

/// The write connection and the batch open on it.
#[derive(Debug)]
pub(super) struct Writer {
    conn: ConnMutex,
    /// The process's writers to the file; `None` for a connection that never writes (a store
    /// opened read-only).
    queue: Option<Arc<WriteQueue>>,
    /// How long a write waits for the connection, and then for its turn: the busy timeout.
    turn_timeout: Duration,
    /// The batch open on the connection: read and replaced only with `conn` held.
    open: Mutex<Option<OpenBatch>>,
    /// Callers blocked on `conn` right now.
    waiting: AtomicUsize,
    /// Batches committed, for the tests.
    #[cfg(test)]
    commits: AtomicUsize,
}

/// The write connection held for one member of a batch, its savepoint open. Dropped without
/// [`Member::finish`] (a panic on the way), it undoes its own statements and leaves the batch
/// to its other members.
pub(super) struct Member<'a> {
    writer: &'a Writer,
    /// `Some` until [`Member::finish`] hands the connection on.
    conn: Option<ConnGuard<'a>>,
    batch: Arc<Batch>,
}

impl Drop for Member<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            let _ = conn.execute_batch(&format!("ROLLBACK TO {SAVEPOINT}; RELEASE {SAVEPOINT}"));
            // The batch holds the file's write turn (and SQLite's lock) until it ends: it ends
            // now unless someone will end it.
            if self.writer.must_end(&self.batch) {
                self.writer.commit_open(&conn);
            }
        }
    }
}

/// How a member's write ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Committed {
    /// The batch committed: the member's statements are durable.
    Yes,
    /// The member's own statements failed and were undone; the batch went on without them.
    Undone,
}

/// The write connection held for a transaction of the caller's own, with its turn at the file.
pub(super) struct WriterGuard<'a> {
    // Dropped in this order: the connection is free before the next writer is woken.
    conn: ConnGuard<'a>,
    _turn: Option<WriteTurn>,
}

impl Deref for WriterGuard<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl DerefMut for WriterGuard<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

impl Writer {
    /// The writer of `conn`, whose writes take their turns in `queue` (waiting up to
    /// `turn_timeout`); without a queue, for a connection that never writes.
    pub(super) fn new(
        conn: Connection,
        queue: Option<Arc<WriteQueue>>,
        turn_timeout: Duration,
    ) -> Writer {
        Writer {
            conn: ConnMutex::new(conn),
            queue,
            turn_timeout,
            open: Mutex::new(None),
            waiting: AtomicUsize::new(0),
            #[cfg(test)]
            commits: AtomicUsize::new(0),
        }
    }

    /// Batches committed so far.
    #[cfg(test)]
    pub(super) fn commits(&self) -> usize {
        self.commits.load(Ordering::SeqCst)
    }

    /// The connection, however long it takes: for what never writes (the reads of a store
    /// opened read-only) and the checkpoint at close.
    fn acquire(&self) -> ConnGuard<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let conn = self.conn.lock();
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        conn
    }

    /// The connection, if it comes within `wait`.
    fn acquire_within(&self, wait: Duration) -> Option<ConnGuard<'_>> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let conn = self.conn.try_lock_for(wait);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        conn
    }

    /// The connection for a new write, waited for up to the busy timeout.
    fn acquire_for_write(&self) -> Result<ConnGuard<'_>, MemoryError> {
        self.acquire_within(self.turn_timeout)
            .ok_or_else(|| MemoryError::Storage {
                detail: format!(
                    "the memory store's write connection stayed busy for {:?} (another write to \
                 the same database file held it: a large import, forget or gc); nothing was \
                 written, so the write can be retried",
                    self.turn_timeout
                ),
            })
    }

    fn open_slot(&self) -> MutexGuard<'_, Option<OpenBatch>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This writer's turn at the file, if it has a queue.
    fn take_turn(&self) -> rusqlite::Result<Option<WriteTurn>> {
        self.queue
            .as_ref()
            .map(|queue| queue.take_turn(self.turn_timeout))
            .transpose()
    }

    /// Whether a member leaving `batch` without its statements (dropped, or failed to begin)
    /// must commit it, for nobody else will: nobody is in line for the connection, or nobody
    /// else joined it. In line is not enough on its own, since a write in line may give up
    /// at its timeout; the batch's other members wait for its outcome and commit it
    /// themselves when it stays open ([`wait`]).
    fn must_end(&self, batch: &Batch) -> bool {
        self.waiting.load(Ordering::SeqCst) == 0 || batch.members.load(Ordering::SeqCst) <= 1
    }

    /// Commits the open batch, if any, on `conn` (held by the caller), and ends its turn.
    fn commit_open(&self, conn: &Connection) {
        let Some(OpenBatch { batch, _turn }) = self.open_slot().take() else {
            return;
        };
        #[cfg(test)]
        self.commits.fetch_add(1, Ordering::SeqCst);
        let result = conn.execute_batch("COMMIT").map_err(|e| {
            // A failed COMMIT may leave the transaction open: end it, so that the next
            // batch can begin.
            let _ = conn.execute_batch("ROLLBACK");
            e.to_string()
        });
        batch.finish(result);
    }

    /// The write connection for a call of its own (a transaction it begins and ends itself),
    /// after committing any open batch, once it is this writer's turn at the file.
    pub(super) fn lock(&self) -> Result<WriterGuard<'_>, MemoryError> {
        let conn = self.acquire_for_write()?;
        self.commit_open(&conn);
        // Holding the connection while waiting is safe: whoever has the turn does not need
        // this connection (an open batch of it, which would, was just committed).
        let turn = self.take_turn()?;
        Ok(WriterGuard { conn, _turn: turn })
    }

    /// The write connection without a turn at the file, after committing any open batch: for
    /// what never waits for SQLite's write lock (reads on a store opened read-only).
    pub(super) fn lock_without_turn(&self) -> ConnGuard<'_> {
        let conn = self.acquire();
        self.commit_open(&conn);
        conn
    }

    /// Folds the WAL back into the main file as the writer closes, when no other writer of
    /// this process is at work (`mnemon_db::sqlite::WriteQueue::checkpoint_on_close`); a
    /// writer opened read-only never does.
    pub(super) fn checkpoint_on_close(&self) {
        let conn = self.lock_without_turn();
        if let Some(queue) = &self.queue {
            queue.checkpoint_on_close(&conn);
        }
    }

    /// Joins the open batch (or opens one) and begins the member's savepoint.
    pub(super) fn join(&self) -> Result<Member<'_>, MemoryError> {
        let conn = self.acquire_for_write()?;
        let batch = {
            let mut open = self.open_slot();
            match open.as_ref() {
                Some(open) => Arc::clone(&open.batch),
                None => {
                    let turn = self.take_turn()?;
                    conn.execute_batch("BEGIN IMMEDIATE")?;
                    let batch = Arc::new(Batch::default());
                    *open = Some(OpenBatch {
                        batch: Arc::clone(&batch),
                        _turn: turn,
                    });
                    batch
                }
            }
        };
        batch.members.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = conn.execute_batch(&format!("SAVEPOINT {SAVEPOINT}")) {
            // Not part of the batch after all: whoever comes next commits it, or, when nobody
            // will, this call, so that the batch does not keep the file's turn.
            if self.must_end(&batch) {
                self.commit_open(&conn);
            }
            drop(conn);
            return Err(e.into());
        }
        Ok(Member {
            writer: self,
            conn: Some(conn),
            batch,
        })
    }
}

impl Member<'_> {
    /// The connection, inside the member's savepoint.
    pub(super) fn conn(&self) -> Result<&Connection, MemoryError> {
        self.conn.as_deref().ok_or_else(|| MemoryError::Storage {
            detail: "a write used its connection after handing it on (a bug in mnemon-memory)"
                .into(),
        })
    }

    /// Ends the member's write: keeps its statements (`keep`) or undoes them, hands the
    /// connection on or commits the batch, and waits until the batch is committed. An error
    /// is the batch's: none of its members' statements were kept.
    pub(super) fn finish(mut self, keep: bool) -> Result<Committed, MemoryError> {
        let writer = self.writer;
        let batch = Arc::clone(&self.batch);
        let Some(conn) = self.conn.take() else {
            return Err(MemoryError::Storage {
                detail: "a write was finished twice (a bug in mnemon-memory)".into(),
            });
        };
        let ended = if keep {
            conn.execute_batch(&format!("RELEASE {SAVEPOINT}"))
        } else {
            conn.execute_batch(&format!("ROLLBACK TO {SAVEPOINT}; RELEASE {SAVEPOINT}"))
        };
        if let Err(e) = ended {
            // The savepoint cannot be ended cleanly: the whole batch is unsure, so it ends now.
            let _ = conn.execute_batch("ROLLBACK");
            if let Some(open) = writer.open_slot().take() {
                open.batch.finish(Err(e.to_string()));
            }
            return Err(e.into());
        }
        let last = writer.waiting.load(Ordering::SeqCst) == 0
            || batch.members.load(Ordering::SeqCst) >= MAX_BATCH;
        if last {
            writer.commit_open(&conn);
        }
        drop(conn);
        let outcome = wait(writer, &batch);
        match (outcome, keep) {
            (Ok(()), true) => Ok(Committed::Yes),
            (Ok(()), false) => Ok(Committed::Undone),
            (Err(e), _) => Err(MemoryError::Storage {
                detail: format!(
                    "the transaction holding this write (with other concurrent writes) did not \
                     commit: {e}; nothing of it was stored, so it can be retried"
                ),
            }),
        }
    }
}

/// Waits for `batch`'s outcome; commits it when it is still open and nobody else is in line
/// for the connection.
fn wait(writer: &Writer, batch: &Arc<Batch>) -> Result<(), String> {
    let mut outcome = batch.outcome();
    loop {
        if let Some(result) = outcome.as_ref() {
            return result.clone();
        }
        let (next, timeout) = batch
            .done
            .wait_timeout(outcome, RECHECK)
            .unwrap_or_else(PoisonError::into_inner);
        outcome = next;
        if outcome.is_none() && timeout.timed_out() {
            drop(outcome);
            // Not waited for longer than a recheck: whoever holds the connection may commit
            // this batch and then run a long transaction of its own, which this member, its
            // write committed, must not wait for.
            if let Some(conn) = writer.acquire_within(RECHECK) {
                let still_open = writer
                    .open_slot()
                    .as_ref()
                    .is_some_and(|open| Arc::ptr_eq(&open.batch, batch));
                if still_open && writer.waiting.load(Ordering::SeqCst) == 0 {
                    writer.commit_open(&conn);
                }
            }
            outcome = batch.outcome();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(dir: &tempfile::TempDir) -> Arc<Writer> {
        let conn = Connection::open(dir.path().join("w.sqlite3")).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
             CREATE TABLE t (n INTEGER PRIMARY KEY);",
        )
        .unwrap();
        let queue = WriteQueue::for_file(&dir.path().join("w.sqlite3"));
        Arc::new(Writer::new(conn, Some(queue), Duration::from_secs(5)))
    }

    fn count(dir: &tempfile::TempDir) -> usize {
        kept(dir).len()
    }

    /// The committed rows, read through a connection of their own.
    fn kept(dir: &tempfile::TempDir) -> Vec<i64> {
        let conn = Connection::open(dir.path().join("w.sqlite3")).unwrap();
        conn.prepare("SELECT n FROM t ORDER BY n")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Joins a batch of `w` and inserts `n` inside the member's savepoint.
    fn insert(w: &Arc<Writer>, n: i64) -> Member<'_> {
        let m = w.join().unwrap();
        m.conn()
            .unwrap()
            .execute("INSERT INTO t VALUES (?1)", [n])
            .unwrap();
        m
    }

    /// A lone write commits at once and is visible to another connection when acknowledged.
    #[test]
    fn a_lone_write_is_committed_when_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        let m = insert(&w, 1);
        assert_eq!(m.finish(true).unwrap(), Committed::Yes);
        assert_eq!(count(&dir), 1);
        assert!(w.open_slot().is_none());
    }

    /// Two writes in one batch share one commit; a member whose own statements fail is undone
    /// alone, and the batch's other write commits.
    #[test]
    fn an_undone_member_leaves_the_others_committed() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        // Two members in one batch: the first leaves the connection to a waiting second.
        let first = insert(&w, 1);
        let second = {
            let w = Arc::clone(&w);
            std::thread::spawn(move || {
                let m = insert(&w, 2);
                m.finish(false).unwrap()
            })
        };
        while w.waiting.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        assert_eq!(first.finish(true).unwrap(), Committed::Yes);
        assert_eq!(second.join().unwrap(), Committed::Undone);
        assert_eq!(kept(&dir), vec![1]);
        assert_eq!(w.commits.load(Ordering::SeqCst), 1);
    }

    /// A member that handed its batch on returns once the batch is committed, even when
    /// whoever committed it keeps the connection for a long transaction of its own (before,
    /// a member whose recheck had fired waited for the connection, so for that transaction).
    #[test]
    fn a_member_does_not_wait_for_the_transaction_after_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        let member = insert(&w, 1);
        let (committed, held) = (std::sync::mpsc::channel(), Duration::from_secs(2));
        let next = {
            let (w, committed) = (Arc::clone(&w), committed.0);
            std::thread::spawn(move || {
                // In line for the connection: the member hands its batch on to this.
                let conn = w.acquire_within(Duration::from_secs(10)).unwrap();
                // Slower than a recheck, as a commit's fsync may be: the member's recheck
                // finds the connection taken.
                std::thread::sleep(RECHECK * 3);
                w.commit_open(&conn);
                let _ = committed.send(std::time::Instant::now());
                // A long transaction of its own.
                std::thread::sleep(held);
            })
        };
        while w.waiting.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        assert_eq!(member.finish(true).unwrap(), Committed::Yes);
        let returned = std::time::Instant::now();
        let at = committed.1.recv().unwrap();
        assert!(
            returned.duration_since(at) < held / 2,
            "the member returned {:?} after its batch committed",
            returned.duration_since(at)
        );
        next.join().unwrap();
        assert_eq!(kept(&dir), vec![1]);
    }

    /// A lone member dropped while a write is in line that then gives up at its timeout ends
    /// its batch itself: nobody else would, and the batch holds the file's turn.
    #[test]
    fn a_dropped_lone_member_ends_its_batch_though_a_write_was_in_line() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        let member = insert(&w, 1);
        let in_line = {
            let w = Arc::clone(&w);
            std::thread::spawn(move || w.acquire_within(Duration::from_secs(10)).is_none())
        };
        while w.waiting.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        drop(member);
        assert!(w.open_slot().is_none(), "the batch was left open");
        assert!(!in_line.join().unwrap());
        assert!(kept(&dir).is_empty());
    }

    /// Many concurrent writers: every acknowledged write is committed, in at most as many
    /// commits as writes, and no batch is left open.
    #[test]
    fn concurrent_writes_share_commits_and_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let w = Arc::clone(&w);
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let m = w.join().unwrap();
                        m.conn()
                            .unwrap()
                            .execute("INSERT INTO t VALUES (?1)", [t * 1000 + i])
                            .unwrap();
                        assert_eq!(m.finish(true).unwrap(), Committed::Yes);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(count(&dir), 400);
        assert!(w.commits.load(Ordering::SeqCst) <= 400);
        assert!(w.open_slot().is_none());
        // A call of its own after the batches finds no transaction open.
        let conn = w.lock().unwrap();
        assert!(conn.is_autocommit());
    }

    /// A member dropped without finishing (a panic on the way) undoes its own statements; the
    /// batch's other write still commits.
    #[test]
    fn a_dropped_member_is_undone() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        let first = insert(&w, 1);
        let dropped = {
            let w = Arc::clone(&w);
            std::thread::spawn(move || {
                let m = insert(&w, 2);
                drop(m);
                // The next write commits, in the same batch or a batch of its own.
                let m = insert(&w, 3);
                m.finish(true).unwrap()
            })
        };
        while w.waiting.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        assert_eq!(first.finish(true).unwrap(), Committed::Yes);
        assert_eq!(dropped.join().unwrap(), Committed::Yes);
        assert_eq!(kept(&dir), vec![1, 3]);
    }

    /// A lone member dropped without finishing ends its batch: the file's write turn is free
    /// for the other stores' writers, and nothing of it was kept.
    #[test]
    fn a_lone_dropped_member_ends_its_batch_and_its_turn() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        drop(insert(&w, 1));
        assert!(w.open_slot().is_none());
        let queue = w.queue.as_ref().unwrap();
        assert!(
            queue.take_turn(Duration::ZERO).is_ok(),
            "the batch kept the turn"
        );
        assert_eq!(count(&dir), 0);
    }

    /// A member that leaves the connection to a caller that will never commit (here: the test
    /// holding the count of waiters up by hand) still gets its batch committed, by itself.
    #[test]
    fn a_batch_is_never_left_open() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        let m = insert(&w, 7);
        // Someone "waiting" who never comes.
        w.waiting.fetch_add(1, Ordering::SeqCst);
        let w2 = Arc::clone(&w);
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            w2.waiting.fetch_sub(1, Ordering::SeqCst);
        });
        assert_eq!(m.finish(true).unwrap(), Committed::Yes);
        release.join().unwrap();
        assert_eq!(count(&dir), 1);
    }
}
