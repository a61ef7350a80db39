//! WAL checkpoints off the commit path: one background thread per database file and process.
//!
//! SQLite's automatic checkpoint runs inside the commit that takes the WAL past 1,000 pages:
//! that commit copies the WAL's pages into the database file and fsyncs it before it returns,
//! several milliseconds during which the store's write connection is held. Under the memory
//! store's group commit every write of that batch, and every write queued behind it, waits
//! too: it was the slowest adds of `cargo xtask bench server`'s mix (docs/bench-server.md).
//!
//! Here every read-write connection [`connect`](super::connect) sets up gets a WAL hook in
//! place of the automatic checkpoint. The hook, called after each commit with the WAL's size,
//! does nothing below [`THRESHOLD`] pages (SQLite's own default); above it, it wakes this
//! file's checkpointer thread, which runs a `PASSIVE` checkpoint on a connection of its own
//! while writers go on committing (a checkpoint in WAL mode never blocks them). The thread is
//! started the first time it is needed, so a short-lived process that never fills the WAL
//! never starts one, and it ends when the last connection to the file in this process closes.
//!
//! Nothing about durability changes: a commit is on disk when it returns (in the WAL), and
//! the checkpoint only moves pages already there. If the thread cannot be started or cannot
//! open its connection, or falls behind until the WAL reaches [`BACKSTOP`] pages (a reader
//! holding an old snapshot for a long time can do that), the committing connection checkpoints
//! itself, as SQLite would have.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::per_file::PerFile;

/// WAL pages past which a commit asks for a checkpoint: SQLite's default autocheckpoint.
pub(crate) const THRESHOLD: i32 = 1_000;

/// WAL pages past which a committing connection checkpoints itself, in case the background
/// thread is behind or gone (about 40 MB with 4 KiB pages).
pub(crate) const BACKSTOP: i32 = 10_000;

/// The checkpointer of one database file in this process, shared by the hooks of every
/// connection to it; dropped, with its thread stopped, when the last of them closes.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    path: PathBuf,
    shared: Arc<Shared>,
    thread: Mutex<Thread>,
}

/// The thread's lifecycle: started lazily, once.
#[derive(Debug)]
enum Thread {
    NotStarted,
    Running(JoinHandle<()>),
    /// It could not be started: commits checkpoint inline.
    Failed,
}

/// What the hooks and the thread share.
#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// A commit asked for a checkpoint since the thread last started one.
    requested: bool,
    /// The last connection closed: the thread ends.
    stop: bool,
    /// The thread could not open its connection: commits checkpoint inline.
    broken: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The checkpointers alive in this process, by database file.
static CHECKPOINTERS: PerFile<Checkpointer> = PerFile::new();

impl Checkpointer {
    /// The checkpointer of the file at `path` (which exists), shared with every other
    /// connection to the same file in this process.
    pub(crate) fn for_file(path: &Path) -> Arc<Checkpointer> {
        // One file reached by two spellings must share one thread.
        CHECKPOINTERS.get(path, |path| Checkpointer {
            path,
            shared: Arc::default(),
            thread: Mutex::new(Thread::NotStarted),
        })
    }

    /// Installs the hook on `conn`, a read-write connection to this checkpointer's file. It
    /// replaces SQLite's automatic checkpoint on that connection.
    pub(crate) fn attach(self: &Arc<Self>, conn: &mut Connection) -> rusqlite::Result<()> {
        let checkpointer = Arc::clone(self);
        conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
            if pages < THRESHOLD {
                return Ok(());
            }
            if pages >= BACKSTOP || !checkpointer.request() {
                // As SQLite's automatic checkpoint would; a busy checkpoint (another one
                // running) is not the commit's failure.
                let _ = wal.checkpoint_v2(rusqlite::wal::CheckpointMode::PASSIVE);
            }
            Ok(())
        }))
    }

    /// Asks the thread for a checkpoint, starting it if needed. False when there is no
    /// thread to ask: the caller checkpoints itself.
    fn request(&self) -> bool {
        {
            let mut state = self.shared.state();
            if state.broken {
                return false;
            }
            state.requested = true;
        }
        let mut thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
        match &*thread {
            Thread::Running(_) => {
                self.shared.wake.notify_one();
                true
            }
            Thread::Failed => false,
            Thread::NotStarted => {
                let shared = Arc::clone(&self.shared);
                let path = self.path.clone();
                match thread::Builder::new()
                    .name("mnemon-checkpoint".into())
                    .spawn(move || run(&path, &shared))
                {
                    Ok(handle) => {
                        *thread = Thread::Running(handle);
                        true
                    }
                    Err(_) => {
                        *thread = Thread::Failed;
                        false
                    }
                }
            }
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.state().stop = true;
        self.shared.wake.notify_all();
        let thread = std::mem::replace(
            self.thread
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
            Thread::NotStarted,
        );
        if let Thread::Running(handle) = thread {
            // A `PASSIVE` checkpoint never waits for a lock, so the thread ends promptly.
            let _ = handle.join();
        }
    }
}

/// The thread: a checkpoint each time a commit asks for one, until the file's last
/// connection closes.
fn run(path: &Path, shared: &Shared) {
    let conn = match Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) {
        Ok(conn) => conn,
        Err(_) => {
            shared.state().broken = true;
            return;
        }
    };
    // A checkpoint that finds another one running returns at once rather than waiting; and
    // it fsyncs the database file, which it would not under `synchronous = OFF`.
    let _ = conn.busy_timeout(Duration::ZERO);
    let _ = conn.pragma_update(None, "synchronous", "FULL");
    loop {
        {
            let mut state = shared.state();
            while !state.requested && !state.stop {
                state = shared
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.stop {
                return;
            }
            state.requested = false;
        }
        // Busy (another connection is checkpointing) or failed: the next commit past the
        // threshold asks again, and the backstop bounds the WAL meanwhile.
        let _ = conn.wal_checkpoint_v2(None::<&str>, rusqlite::wal::CheckpointMode::PASSIVE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The WAL's size in pages, or `None` while the thread's checkpoint holds the lock.
    fn wal_pages(conn: &Connection) -> Option<i32> {
        // A PASSIVE checkpoint on a fully checkpointed WAL does no work and reports the sizes.
        conn.wal_checkpoint_v2(None::<&str>, rusqlite::wal::CheckpointMode::PASSIVE)
            .map(|(log, _)| log)
            .ok()
    }

    fn file(dir: &Path) -> (PathBuf, Connection) {
        let path = dir.join("db.sqlite3");
        let mut conn = Connection::open(&path).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        conn.execute_batch("CREATE TABLE t (x BLOB)").unwrap();
        Checkpointer::for_file(&path).attach(&mut conn).unwrap();
        (path, conn)
    }

    /// Writes about `pages` WAL pages, one page per commit.
    fn fill(conn: &Connection, pages: usize) {
        for _ in 0..pages {
            conn.execute("INSERT INTO t VALUES (zeroblob(3000))", [])
                .unwrap();
        }
    }

    #[test]
    fn connections_to_one_file_share_one_checkpointer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite3");
        std::fs::write(&path, b"").unwrap();
        let a = Checkpointer::for_file(&path);
        let b = Checkpointer::for_file(&dir.path().join(".").join("db.sqlite3"));
        assert!(Arc::ptr_eq(&a, &b));
        let other = dir.path().join("other.sqlite3");
        std::fs::write(&other, b"").unwrap();
        assert!(!Arc::ptr_eq(&a, &Checkpointer::for_file(&other)));
    }

    #[test]
    fn the_thread_checkpoints_a_wal_past_the_threshold() {
        let dir = tempfile::tempdir().unwrap();
        let (path, conn) = file(dir.path());
        fill(&conn, THRESHOLD as usize + 50);
        // The thread copies the WAL back into the file; the next commit then restarts the WAL
        // from its beginning, so it stays near the threshold instead of growing.
        let start = std::time::Instant::now();
        loop {
            fill(&conn, 1);
            let pages = wal_pages(&conn);
            if pages.is_some_and(|p| p < THRESHOLD) {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "WAL still at {pages:?} pages"
            );
            thread::sleep(Duration::from_millis(10));
        }
        let checkpointer = Checkpointer::for_file(&path);
        assert!(matches!(
            *checkpointer.thread.lock().unwrap(),
            Thread::Running(_)
        ));
    }

    #[test]
    fn a_short_session_starts_no_thread_and_closing_stops_it() {
        let dir = tempfile::tempdir().unwrap();
        let (path, conn) = file(dir.path());
        fill(&conn, 10);
        let checkpointer = Checkpointer::for_file(&path);
        assert!(matches!(
            *checkpointer.thread.lock().unwrap(),
            Thread::NotStarted
        ));
        fill(&conn, THRESHOLD as usize);
        assert!(matches!(
            *checkpointer.thread.lock().unwrap(),
            Thread::Running(_)
        ));
        let weak = Arc::downgrade(&checkpointer);
        drop(checkpointer);
        drop(conn);
        // The last connection closed: the checkpointer, its thread joined, is gone.
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn without_a_thread_the_commit_checkpoints_itself() {
        let dir = tempfile::tempdir().unwrap();
        let (path, conn) = file(dir.path());
        let checkpointer = Checkpointer::for_file(&path);
        checkpointer.shared.state().broken = true;
        fill(&conn, THRESHOLD as usize + 10);
        // Checkpointed inline by the commit that crossed the threshold, then restarted.
        fill(&conn, 1);
        assert!(wal_pages(&conn).is_some_and(|p| p < THRESHOLD));
        assert!(matches!(
            *checkpointer.thread.lock().unwrap(),
            Thread::NotStarted
        ));
    }
}
