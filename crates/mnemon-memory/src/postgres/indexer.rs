//! Deferred HNSW maintenance: the background indexer of a [`PostgresMemoryStore`](super::PostgresMemoryStore).
//!
//! Inserting one vector into a built pgvector HNSW index costs milliseconds (at 1,536
//! dimensions on the 2-core development machine, 110 to 120 a second: docs/postgres.md), far
//! more than the rest of a durable put. So once a dimension's index exists, a write stores its
//! rows outside it (`embedding_dim` NULL, `pending_dim` set: the partial index's predicate is on
//! `embedding_dim`), commits, and is acknowledged; this indexer then moves the pending rows into
//! the index (`embedding_dim = pending_dim`) in small batches, in transactions of its own. A
//! recall meanwhile scores the thread's pending rows exactly beside the index's shortlist (see
//! `retrieve_from_index`), so nothing written is ever missing from a result.
//!
//! Moving a row changes no message: the thread's `rev` stays, mirrors stay current, and a move
//! lost in a crash only leaves the row pending, which the next indexer moves (each store's
//! indexer looks for leftovers of its namespace when it starts). That is why the move may
//! commit without waiting for its flush (`synchronous_commit` off for its transaction only):
//! the acknowledged write it follows was committed durably by the writer. Indexers of several
//! processes share the work (`FOR UPDATE SKIP LOCKED`): a row is moved once.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use mnemon_db::postgres::Pool;
use mnemon_db::{DbError, Namespace};

use super::{db_error, pg_error};
use crate::error::MemoryError;

/// How many pending rows one move takes: each costs an HNSW insertion (milliseconds), so a
/// batch holds its rows' locks for a fraction of a second, and a writer removing one of them
/// waits at most that long.
const BATCH: i64 = 32;

/// How long the indexer keeps its connection open without work.
const IDLE: Duration = Duration::from_secs(2);

/// The longest wait before the indexer tries again after failed rounds.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How long the indexer lets rows gather after a write woke it, so that a stream of single
/// puts is moved a batch per transaction instead of a transaction per put (four round trips
/// and a commit each), the index insertions themselves being the same.
const GATHER: Duration = Duration::from_millis(50);

/// Where a mover's next batch starts: after this row, in the order of the pending rows' partial
/// index, `(thread_id, seq)`. Each batch starts after the last row the one before moved, so it
/// seeks past the index entries of the rows already moved (their old versions stay in the
/// index until vacuum) instead of walking them again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cursor {
    thread_id: i64,
    seq: i64,
}

impl Cursor {
    /// Before every row.
    pub(super) const START: Cursor = Cursor {
        thread_id: i64::MIN,
        seq: i64::MIN,
    };
}

/// Moves at most `limit` pending rows of `namespace` after `after` into the HNSW indexes, in one
/// transaction, and moves `after` to the last of them; returns how many it moved (0: none left
/// after `after` that another mover is not moving; [`move_next`] then looks from the start).
/// `on_full` is called once the move of a full batch (`limit` rows) has committed, before the
/// watermarks are raised: more may be waiting.
fn move_pending(
    client: &mut postgres::Client,
    namespace: &Namespace,
    limit: i64,
    after: &mut Cursor,
    on_full: &dyn Fn(),
) -> Result<u64, MemoryError> {
    let mut tx = client.transaction().map_err(pg_error)?;
    // See the module docs: a lost move leaves the row pending, never a write lost.
    //
    // The batch is read from the pending rows' partial index in its own order, from the cursor
    // on, and the scan stops at `limit`; the other plans are turned off for this transaction
    // only, because without statistics (a new table) or with many rows pending the planner
    // chose a read of every pending row of each thread (a bitmap scan, then a sort) for every
    // batch of 32: 159 ms a batch with 55,000 rows pending, and 291,000 index entries read to
    // move 3,000 rows (docs/postgres.md#moving-pending-rows).
    tx.batch_execute(
        "SET LOCAL synchronous_commit = off;
         SET LOCAL enable_bitmapscan = off;
         SET LOCAL enable_seqscan = off;
         SET LOCAL enable_sort = off;
         SET LOCAL enable_incremental_sort = off",
    )
    .map_err(pg_error)?;
    let rows = tx
        .query(
            "WITH b AS (
               SELECT m.thread_id, m.seq FROM memory_messages m
               WHERE m.pending_dim IS NOT NULL
                 AND (m.thread_id, m.seq) > ($3, $4)
                 AND EXISTS (SELECT 1 FROM memory_threads t
                             WHERE t.thread_id = m.thread_id AND t.namespace = $1)
               ORDER BY m.thread_id, m.seq
               LIMIT $2
               FOR UPDATE OF m SKIP LOCKED)
             UPDATE memory_messages m SET embedding_dim = m.pending_dim, pending_dim = NULL
             FROM b WHERE m.thread_id = b.thread_id AND m.seq = b.seq
             RETURNING m.thread_id, m.seq",
            &[&namespace.as_str(), &limit, &after.thread_id, &after.seq],
        )
        .map_err(pg_error)?;
    tx.commit().map_err(pg_error)?;
    if i64::try_from(rows.len()).is_ok_and(|n| n >= limit) {
        on_full();
    }
    let mut threads = Vec::new();
    for row in &rows {
        let moved = Cursor {
            thread_id: row.try_get(0).map_err(pg_error)?,
            seq: row.try_get(1).map_err(pg_error)?,
        };
        if (moved.thread_id, moved.seq) > (after.thread_id, after.seq) {
            *after = moved;
        }
        if !threads.contains(&moved.thread_id) {
            threads.push(moved.thread_id);
        }
    }
    // One transaction for the batch's threads, one statement a thread, in thread order: two
    // movers raising the same two threads' watermarks in one statement each could lock their
    // rows in opposite orders (a deadlock). Without waiting for its flush, as the move: a
    // raise lost in a crash leaves a watermark low, which only makes a recall read from
    // further back.
    threads.sort_unstable();
    let mut tx = client.transaction().map_err(pg_error)?;
    tx.batch_execute("SET LOCAL synchronous_commit = off")
        .map_err(pg_error)?;
    for thread in threads {
        raise_watermarks(&mut tx, &[thread])?;
    }
    tx.commit().map_err(pg_error)?;
    Ok(u64::try_from(rows.len()).unwrap_or(u64::MAX))
}

/// Raises the pending watermark (memory schema version 12) of `threads` after a move: to just
/// below the lowest `seq` still pending, or below `next_seq` when none is, as one snapshot
/// reads them. A row written after that snapshot is either appended (above `next_seq`, so
/// above the new watermark) or made pending by another write, which bumps `pending_epoch`: the
/// raise applies only where the epoch is still the one read (PostgreSQL re-checks the condition
/// on the thread's latest row when a writer changed it meanwhile), so it never hides a
/// pending row from a recall. The scan for the lowest pending row starts at the old
/// watermark, so it too skips the dead entries below it.
fn raise_watermarks(
    client: &mut postgres::Transaction<'_>,
    threads: &[i64],
) -> Result<(), MemoryError> {
    client
        .execute(
            "WITH s AS (
               SELECT t.thread_id, t.pending_epoch AS epoch,
                      COALESCE((SELECT min(m.seq) FROM memory_messages m
                                WHERE m.thread_id = t.thread_id AND m.seq > t.pending_from
                                  AND m.pending_dim IS NOT NULL),
                               t.next_seq) - 1 AS w
               FROM memory_threads t WHERE t.thread_id = ANY($1))
             UPDATE memory_threads t SET pending_from = s.w
             FROM s
             WHERE t.thread_id = s.thread_id AND t.pending_epoch = s.epoch
               AND s.w > t.pending_from",
            &[&threads],
        )
        .map_err(pg_error)?;
    Ok(())
}

/// Moves the next batch after `cursor` (see [`move_pending`]); at the end of the index it
/// looks once more from the start, for rows added behind the cursor or skipped while another
/// mover held them. Returns how many it moved: 0 only when a look from the start found none.
/// `on_full` as [`move_pending`]'s.
pub(super) fn move_next(
    client: &mut postgres::Client,
    namespace: &Namespace,
    cursor: &mut Cursor,
    on_full: &dyn Fn(),
) -> Result<u64, MemoryError> {
    let moved = move_pending(client, namespace, BATCH, cursor, on_full)?;
    if moved > 0 || *cursor == Cursor::START {
        return Ok(moved);
    }
    *cursor = Cursor::START;
    move_pending(client, namespace, BATCH, cursor, on_full)
}

/// How many rows of `namespace` are pending.
pub(super) fn count_pending(
    client: &mut postgres::Client,
    namespace: &Namespace,
) -> Result<u64, MemoryError> {
    let row = client
        .query_one(
            "SELECT count(*) FROM memory_messages m
             WHERE m.pending_dim IS NOT NULL
               AND m.thread_id IN (SELECT thread_id FROM memory_threads WHERE namespace = $1)",
            &[&namespace.as_str()],
        )
        .map_err(pg_error)?;
    let n: i64 = row.try_get(0).map_err(pg_error)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

#[derive(Debug, Default)]
struct State {
    /// A write left rows pending since the lead mover last looked.
    wake: bool,
    /// How many full batches the lead mover has moved (a backlog): each helper compares it
    /// with the count it last acted on, so that one call reaches every helper.
    backlogs: u64,
    /// The store is being dropped.
    stop: bool,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// The lead's: a write, or the stop.
    changed: Condvar,
    /// The helpers': a call, or the stop.
    called: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The most movers one store's indexer runs (`PostgresMemoryOptions::indexer_movers`).
pub(super) const MAX_MOVERS: usize = 16;

/// The background threads of one store: its movers, each taking a connection from the pool
/// for each batch (the pool is its own, one connection per mover opened when there is work,
/// unless the store was given one that the indexers of several namespaces share:
/// `PostgresMemoryOptions::indexer_pool`), so that they never take one of the store's, and
/// closing the pool's connections after [`IDLE`] without work.
///
/// The lead mover answers every write. The others (helpers) join only a backlog: when a
/// batch of the lead's comes back full, they move disjoint batches beside it (`SKIP LOCKED`)
/// until none is left. An HNSW insertion is milliseconds of one server process's CPU, so one
/// mover uses one of the server's cores, and a backlog is indexed that many times faster with
/// more; a trickle of writes (batches of a few rows) is moved by the lead alone, as helpers
/// would only add transactions (docs/postgres.md#moving-pending-rows).
#[derive(Debug)]
pub(super) struct Indexer {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Indexer {
    /// Starts the indexer of `namespace` with `movers` threads (1 to [`MAX_MOVERS`]; outside,
    /// the nearest), moving rows with connections from `pool`; the lead first looks for rows
    /// left pending by earlier processes.
    pub(super) fn start(
        pool: Pool,
        namespace: Namespace,
        movers: usize,
    ) -> Result<Indexer, MemoryError> {
        let shared = Arc::new(Shared::default());
        shared.lock().wake = true;
        let mut indexer = Indexer {
            shared,
            threads: Vec::new(),
        };
        for mover in 0..movers.clamp(1, MAX_MOVERS) {
            let worker = Arc::clone(&indexer.shared);
            let pool = pool.clone();
            let namespace = namespace.clone();
            let thread = std::thread::Builder::new()
                .name(format!("mnemon-memory-indexer-{mover}"))
                .spawn(move || {
                    if mover == 0 {
                        lead(&pool, &namespace, &worker);
                    } else {
                        help(&pool, &namespace, &worker);
                    }
                })
                .map_err(|e| MemoryError::Storage {
                    detail: format!("cannot start the memory's background indexer thread: {e}"),
                })?;
            // Kept at once, so that a later thread's failure stops the earlier ones (drop).
            indexer.threads.push(thread);
        }
        Ok(indexer)
    }

    /// Tells the lead mover that a committed write left rows pending.
    pub(super) fn wake(&self) {
        self.shared.lock().wake = true;
        // Only the lead waits on it (the helpers on `called`).
        self.shared.changed.notify_one();
    }
}

impl Drop for Indexer {
    /// Stops the threads after the batches they are moving (rows still pending stay so, for
    /// the next indexer of the namespace).
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        self.shared.called.notify_all();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The lead mover's loop: a round after each wake-up (and the first, for leftovers), calling
/// the helpers when a batch comes back full.
fn lead(pool: &Pool, namespace: &Namespace, shared: &Shared) {
    // The wait before a round after a failed one: doubled by each failure, up to
    // `MAX_BACKOFF`, so that a server that is gone is neither hammered nor given up on.
    let mut backoff = IDLE;
    loop {
        {
            let mut state = shared.lock();
            while !state.wake && !state.stop {
                let (next, timeout) = shared
                    .changed
                    .wait_timeout(state, IDLE)
                    .unwrap_or_else(PoisonError::into_inner);
                state = next;
                if timeout.timed_out() && !state.wake {
                    // Idle: give the connections nobody used meanwhile back to the server.
                    pool.close_idle(IDLE);
                }
            }
            if state.stop {
                return;
            }
            // Let the writes of the next moments join this batch (a stop still ends it).
            let (next, _) = shared
                .changed
                .wait_timeout_while(state, GATHER, |s| !s.stop)
                .unwrap_or_else(PoisonError::into_inner);
            state = next;
            if state.stop {
                return;
            }
            state.wake = false;
        }
        // The helpers are called at every full batch: a round goes on while writes keep
        // coming, and a helper that found nothing left a moment ago must come back for them.
        // A helper still moving just looks once more when it is done.
        let on_full = || {
            {
                let mut state = shared.lock();
                state.backlogs = state.backlogs.wrapping_add(1);
            }
            shared.called.notify_all();
        };
        let retry_after = match drain(pool, namespace, shared, &on_full) {
            // Every connection of a shared pool stayed busy for the checkout's wait (other
            // namespaces' indexers): the rows are still pending, so this is another round,
            // not a failure to report.
            Ok(Round::Busy) => {
                backoff = IDLE;
                shared.lock().wake = true;
                None
            }
            // Rows another transaction held while this round looked are skipped (`SKIP
            // LOCKED`: a mark's foreign-key check, a removal that then rolled back, another
            // process's mover that then failed) and stay pending, with no write bound to come
            // and wake the indexer: it looks again after `IDLE` while any is left.
            Ok(Round::Done) if shared.lock().stop => return,
            Ok(Round::Done) => {
                backoff = IDLE;
                match any_pending(pool, namespace) {
                    Ok(false) => None,
                    Ok(true) | Err(_) => Some(IDLE),
                }
            }
            Err(e) => {
                tracing::warn!(
                    target: "mnemon_memory::postgres",
                    "the memory's background indexer stopped a round: {e}; pending rows stay \
                     searchable exactly, and it tries again in {} s",
                    backoff.as_secs()
                );
                let wait = backoff;
                backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
                Some(wait)
            }
        };
        if let Some(wait) = retry_after {
            let state = shared.lock();
            let (mut state, _) = shared
                .changed
                .wait_timeout_while(state, wait, |s| !s.stop && !s.wake)
                .unwrap_or_else(PoisonError::into_inner);
            state.wake = true;
        }
    }
}

/// A helper's loop: each time the lead calls (a full batch), batches beside it until none is
/// left. Errors and busy pools end its turn (the lead retries the rows: they stay pending).
fn help(pool: &Pool, namespace: &Namespace, shared: &Shared) {
    let mut answered = 0;
    loop {
        {
            let mut state = shared.lock();
            while state.backlogs == answered && !state.stop {
                state = shared
                    .called
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.stop {
                return;
            }
            answered = state.backlogs;
        }
        if let Err(e) = drain(pool, namespace, shared, &|| {}) {
            tracing::warn!(
                target: "mnemon_memory::postgres",
                "a helper of the memory's background indexer stopped: {e}; the rows it left \
                 stay pending for the lead mover"
            );
        }
    }
}

/// Whether any row of `namespace` is pending (stops at the first).
fn any_pending(pool: &Pool, namespace: &Namespace) -> Result<bool, MemoryError> {
    let mut client = match pool.get() {
        Ok(client) => client,
        // Busy: other indexers are moving rows; look again later.
        Err(DbError::PoolTimeout { .. }) => return Ok(true),
        Err(e) => return Err(db_error(e)),
    };
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM memory_messages m
               WHERE m.pending_dim IS NOT NULL
                 AND EXISTS (SELECT 1 FROM memory_threads t
                             WHERE t.thread_id = m.thread_id AND t.namespace = $1))",
            &[&namespace.as_str()],
        )
        .map_err(pg_error)?;
    row.try_get(0).map_err(pg_error)
}

/// How a round of [`drain`] ended without an error.
enum Round {
    /// Nothing is left to move, or the store stops.
    Done,
    /// No connection came free within the pool's checkout wait.
    Busy,
}

/// Moves batches until none is left or the store stops, with a connection checked out for
/// each batch: indexers sharing a pool take turns batch by batch (a checkout waits behind the
/// ones already waiting: `mnemon_db::postgres::Pool::get`), and none waits for another's whole
/// backlog.
fn drain(
    pool: &Pool,
    namespace: &Namespace,
    shared: &Shared,
    on_full: &dyn Fn(),
) -> Result<Round, MemoryError> {
    let mut cursor = Cursor::START;
    loop {
        let mut client = match pool.get() {
            Ok(client) => client,
            Err(DbError::PoolTimeout { .. }) => return Ok(Round::Busy),
            Err(e) => return Err(db_error(e)),
        };
        match move_next(&mut client, namespace, &mut cursor, on_full) {
            Ok(0) => return Ok(Round::Done),
            Ok(_) => {}
            Err(e) => {
                // Its session may be in any state: a fresh connection for the next round.
                client.discard();
                return Err(e);
            }
        }
        drop(client);
        if shared.lock().stop {
            return Ok(Round::Done);
        }
    }
}
