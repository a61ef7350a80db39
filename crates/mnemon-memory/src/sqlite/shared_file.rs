//! What every memory store handle on one database file shares in this process: the write
//! connection with its group commit, the read connections and the vector cache.
//!
//! A server opens a handle per namespace (tenant), all on one file. With a write connection
//! each, the concurrent adds of different namespaces committed apart, one `fdatasync` each,
//! taking turns at the file (`mnemon_db::sqlite::WriteQueue`): four namespaces adding at once
//! made about half the adds a second of one namespace's four writers, whose adds share commits.
//! With one writer per file, every namespace's concurrent adds join one batch. The read
//! connections (up to four), the vector cache (up to 256 MiB) and the thread mirrors' cache (up
//! to 50,000 messages) were per handle too, so they grew with the number of tenants; a process
//! now holds one set per file. Each store's mirrors stay its own, keyed by the store.
//!
//! Nothing of a namespace lives in these: every statement binds its namespace, and the vector
//! cache is keyed by thread id, unique in the file. Handles share only when they were opened
//! with the same connection settings and cache budget; a store opened read-only keeps its own
//! connection (it may carry a temporary view over an older file).

use std::path::Path;
use std::sync::{Arc, Mutex};

use mnemon_db::DbError;
use mnemon_db::sqlite::{self, ReadGuard, ReadPool, Schema, Settings, Shared, WriteQueue};
use rusqlite::Connection;

use super::group_commit::Writer;
use crate::vector_scan::VectorCache;

/// The connections and the vector cache of one database file, shared by the store handles on
/// it. The last handle to drop it leaves the file checkpointed.
#[derive(Debug)]
pub(super) struct SharedFile {
    pub(super) writer: Writer,
    /// `None` when opened read-only: its one connection serves reads.
    pub(super) readers: Option<ReadPool>,
    pub(super) vectors: VectorCache,
    /// The thread mirrors of every store on the file, each store's its own
    /// ([`MirrorCache`](super::MirrorCache)): one bound for them all.
    pub(super) mirrors: Mutex<super::MirrorCache>,
}

/// What handles must agree on to share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Terms {
    settings: Settings,
    vector_cache_bytes: usize,
}

/// The shared files alive in this process.
static SHARED: Shared<Terms, SharedFile> = Shared::new();

impl SharedFile {
    /// The shared connections of the database at `path` for handles opened with `settings`
    /// and a vector cache of `vector_cache_bytes`: those of a live handle, or new ones, the file
    /// created and `schema` brought to its current version by the first.
    ///
    /// Two first handles opening at the same moment may each open their own
    /// ([`Shared::get_or_open`]).
    pub(super) fn open(
        path: &Path,
        settings: &Settings,
        schema: &Schema,
        vector_cache_bytes: usize,
    ) -> Result<Arc<SharedFile>, DbError> {
        let terms = Terms {
            settings: *settings,
            vector_cache_bytes,
        };
        SHARED.get_or_open(path, terms, || {
            let conn = sqlite::open(path, settings, schema)?;
            // After `open`: the file exists, is in WAL mode and has the current schema.
            let readers = ReadPool::open(path, settings)?;
            Ok(SharedFile {
                writer: Writer::new(
                    conn,
                    Some(WriteQueue::for_file(path)),
                    settings.busy_timeout,
                ),
                readers: Some(readers),
                vectors: VectorCache::new(vector_cache_bytes),
                mirrors: Mutex::default(),
            })
        })
    }

    /// A store's own connection, opened read-only: shared with no other handle.
    pub(super) fn read_only(conn: Connection, vector_cache_bytes: usize) -> Arc<SharedFile> {
        Arc::new(SharedFile {
            // Never writes, so it takes no turns.
            writer: Writer::new(conn, None, Settings::default().busy_timeout),
            readers: None,
            vectors: VectorCache::new(vector_cache_bytes),
            mirrors: Mutex::default(),
        })
    }
}

impl SharedFile {
    /// A connection for a read: one of the readers, which never wait for the writer's
    /// transaction, or, opened read-only, the one connection (which never writes).
    pub(super) fn reader(&self) -> Result<ReadGuard<'_>, DbError> {
        Ok(match &self.readers {
            Some(readers) => readers.take()?,
            None => self.writer.lock_without_turn().into(),
        })
    }
}

impl Drop for SharedFile {
    fn drop(&mut self) {
        // The readers close first: the writer is then the file's last connection of these
        // handles, as it was alone.
        drop(self.readers.take());
        // Folds the WAL back into the main file so that a single file is left at rest; never
        // waits for another process or for this one's writers.
        self.writer.checkpoint_on_close();
    }
}
