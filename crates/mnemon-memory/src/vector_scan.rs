//! The stored vectors of whole threads in memory, for the exact scans of the durable stores
//! (docs/reference/memory.md#search-across-sessions): a search across sessions, and a recall cut
//! to `top_k` through a handle whose mirror is not current, score every live message of the
//! threads they read. Reading those rows costs far more than scoring them (100,000 rows of 256
//! dimensions: about 280 ms from SQLite and 480 ms from PostgreSQL, against about 10 ms of
//! arithmetic), so each store keeps, per thread, the `seq`, `expires_at` and stored `f32`s of
//! every row, with each vector's exact norm, in a [`VectorCache`] shared by every handle of
//! the store.
//!
//! **Always current.** An entry is the thread as of one `rev`, which every write of the thread
//! bumps in its own transaction, in any process (adds, deletes, replaces, loads, re-embeddings,
//! expiry purges); a scan reads the threads' revs in its own read transaction and takes an entry
//! only at that very rev, else reloads the thread in the same transaction. Thread ids are never
//! reused (SQLite `AUTOINCREMENT`, a PostgreSQL sequence), and a forgotten or dropped thread is
//! no longer selected, so an entry can neither outlive its thread nor stand for another.
//! Expiry is judged at each scan from the cached `expires_at` and the clock, as the SQL scan's
//! `expires_at > now` did; filters and marks are still evaluated by the database, on the rows
//! that need them. Entries never cross namespaces: only threads a scan selected (by namespace)
//! are looked up, by id.
//!
//! **Bounded.** The entries of one store hold at most [`CACHE_BUDGET_BYTES`] (a SQLite store:
//! `SqliteMemoryOptions::vector_cache_bytes`); the least
//! recently used entries make room, except those the running scan already used (so a scan over
//! more threads than fit does not evict its own entries over and over: the threads that do not
//! fit are scanned from the database as before).
//!
//! **Same results.** A scan visits each thread's live rows in `seq` order with the same
//! positions, scores each vector with the same function of the same `f32`s (the cosine through
//! the cached norm, which is `crate::exact::norm` of the vector, bit for bit), and feeds the
//! same bounded top-k; the scores are computed in parallel (each one alone, so the order cannot
//! change a bit), the top-k and the filter checks in order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rayon::prelude::*;

use crate::exact;

/// The most bytes the cached threads of one store hold by default (256 MiB: 100,000 vectors of
/// 256 dimensions take about 108 MB; of 1,536, about 620 MB).
pub(crate) const CACHE_BUDGET_BYTES: usize = 256 << 20;

/// The rows scored on one task of the parallel scoring.
const SCORE_CHUNK: usize = 2048;

/// Every stored row of one thread as of one `rev`, in `seq` order, expired ones included.
#[derive(Debug, Default)]
pub(crate) struct ThreadVectors {
    rev: i64,
    seqs: Vec<i64>,
    expires: Vec<Option<i64>>,
    /// Per row: where its vector is.
    spans: Vec<Span>,
    /// Per row: its vector's exact norm (0 without one).
    norms: Vec<f64>,
    floats: Vec<f32>,
    /// What the rows' vectors have in common, so far.
    dims: Dims,
}

/// The dimensions of a thread's rows, as rows are appended.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Dims {
    /// No row yet.
    #[default]
    Empty,
    /// Every row has a vector of this many dimensions.
    Uniform(usize),
    /// A row without a vector (or a damaged one), or two dimensions.
    Mixed,
}

impl Dims {
    fn with(self, row: Option<usize>) -> Dims {
        match (self, row) {
            (Dims::Empty, Some(len)) => Dims::Uniform(len),
            (Dims::Uniform(dim), Some(len)) if dim == len => self,
            _ => Dims::Mixed,
        }
    }
}

/// Where a row's vector is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Span {
    /// No stored vector.
    Missing,
    /// `floats[start..start + len]`.
    At { start: usize, len: usize },
    /// Stored bytes that are not `f32`s: this many (SQLite's blobs; PostgreSQL refuses such a
    /// row when it is read).
    #[cfg_attr(not(any(test, feature = "sqlite")), allow(dead_code))]
    Damaged(usize),
}

/// What a scan found at one live row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scored {
    /// The row's score.
    Score(f64),
    /// The row has no stored vector.
    Missing,
    /// The row's vector has this length, not the query's.
    Other(usize),
    /// The row's stored vector is this many bytes, not a whole number of `f32`s.
    Damaged(usize),
}

impl ThreadVectors {
    /// An empty thread as of `rev`.
    pub(crate) fn new(rev: i64) -> Self {
        ThreadVectors {
            rev,
            ..ThreadVectors::default()
        }
    }

    /// Appends the next row (rows come in `seq` order).
    pub(crate) fn push(&mut self, seq: i64, expires_at: Option<i64>, vector: Option<&[f32]>) {
        self.seqs.push(seq);
        self.expires.push(expires_at);
        self.dims = self.dims.with(vector.map(<[f32]>::len));
        match vector {
            Some(v) => {
                self.spans.push(Span::At {
                    start: self.floats.len(),
                    len: v.len(),
                });
                self.norms.push(exact::norm(v));
                self.floats.extend_from_slice(v);
            }
            None => {
                self.spans.push(Span::Missing);
                self.norms.push(0.0);
            }
        }
    }

    #[cfg(any(test, feature = "sqlite"))]
    /// [`push`](Self::push) of a vector stored as little-endian `f32` bytes; bytes that are
    /// not a whole number of them are a damaged row, which a scan reports
    /// ([`Scored::Damaged`]) if it reaches it.
    pub(crate) fn push_le_bytes(
        &mut self,
        seq: i64,
        expires_at: Option<i64>,
        bytes: Option<&[u8]>,
    ) {
        let Some(bytes) = bytes else {
            self.push(seq, expires_at, None);
            return;
        };
        if !bytes.len().is_multiple_of(4) {
            self.seqs.push(seq);
            self.expires.push(expires_at);
            self.spans.push(Span::Damaged(bytes.len()));
            self.norms.push(0.0);
            self.dims = Dims::Mixed;
            return;
        }
        let start = self.floats.len();
        self.floats.extend(
            bytes
                .chunks_exact(4)
                .map(|b| <[u8; 4]>::try_from(b).map_or(f32::NAN, f32::from_le_bytes)),
        );
        let len = self.floats.len() - start;
        let norm = exact::norm(self.floats.get(start..).unwrap_or_default());
        self.seqs.push(seq);
        self.expires.push(expires_at);
        self.spans.push(Span::At { start, len });
        self.norms.push(norm);
        self.dims = self.dims.with(Some(len));
    }

    /// The `rev` this is the thread at.
    pub(crate) fn rev(&self) -> i64 {
        self.rev
    }

    /// The dimension of every row's vector, when every row (expired ones included) has a
    /// vector of that one dimension.
    pub(crate) fn uniform_dim(&self) -> Option<usize> {
        match self.dims {
            Dims::Uniform(dim) => Some(dim),
            Dims::Empty | Dims::Mixed => None,
        }
    }

    /// Rows, expired ones included.
    pub(crate) fn rows(&self) -> usize {
        self.seqs.len()
    }

    /// Every row's `seq`, ascending.
    pub(crate) fn seqs(&self) -> &[i64] {
        &self.seqs
    }

    /// Whether row `row` is live at `now`.
    pub(crate) fn is_live(&self, row: usize, now: i64) -> bool {
        self.expires
            .get(row)
            .is_some_and(|e| mnemon_db::expiry::is_live(*e, now))
    }

    /// The exact norm of row `row`'s vector (0 without one).
    pub(crate) fn norm(&self, row: usize) -> f64 {
        self.norms.get(row).copied().unwrap_or(0.0)
    }

    #[cfg(any(test, feature = "sqlite"))]
    /// The index of the message at `seq` among the live rows at `now` (its position in the
    /// thread), or `None` when no row has that `seq` or it is not live: what counting the live
    /// rows before it in the database gives, without reading them.
    pub(crate) fn index_of(&self, seq: i64, now: i64) -> Option<usize> {
        let row = self.seqs.binary_search(&seq).ok()?;
        let expires = self.expires.get(..=row)?;
        if !mnemon_db::expiry::is_live(*expires.last()?, now) {
            return None;
        }
        let expired = expires
            .iter()
            .take(row)
            .filter(|e| !mnemon_db::expiry::is_live(**e, now))
            .count();
        Some(row - expired)
    }

    /// Roughly the bytes it holds.
    pub(crate) fn bytes(&self) -> usize {
        self.floats.len() * 4
            + self.seqs.len()
                * (size_of::<i64>()
                    + size_of::<Option<i64>>()
                    + size_of::<Span>()
                    + size_of::<f64>())
    }

    /// The stored vector of row `row`.
    pub(crate) fn vector(&self, row: usize) -> Option<&[f32]> {
        match *self.spans.get(row)? {
            Span::At { start, len } => self.floats.get(start..start.checked_add(len)?),
            Span::Missing | Span::Damaged(_) => None,
        }
    }

    /// Scores every live row (at `now`) against a query of `dim` dimensions with
    /// `score(vector, norm)`, and visits the live rows in order with their position among the
    /// live rows (the message's index), `seq` and what was found. The scores are computed in
    /// parallel first; the visits are in order, so `visit` may keep a top-k and stop with an
    /// error.
    pub(crate) fn scan<E>(
        &self,
        now: i64,
        dim: usize,
        score: impl Fn(&[f32], f64) -> f64 + Sync,
        mut visit: impl FnMut(usize, i64, Scored) -> Result<(), E>,
    ) -> Result<(), E> {
        let rows = self.seqs.len();
        let scores: Vec<f64> = (0..rows)
            .into_par_iter()
            .with_min_len(SCORE_CHUNK)
            .map(|row| match self.vector(row) {
                Some(v) if v.len() == dim => {
                    score(v, self.norms.get(row).copied().unwrap_or_default())
                }
                _ => f64::NAN,
            })
            .collect();
        let mut index = 0;
        for (row, (&seq, expires)) in self.seqs.iter().zip(&self.expires).enumerate() {
            if !mnemon_db::expiry::is_live(*expires, now) {
                continue;
            }
            let position = index;
            index += 1;
            let found = match self.spans.get(row).copied().unwrap_or(Span::Missing) {
                Span::Missing => Scored::Missing,
                Span::Damaged(bytes) => Scored::Damaged(bytes),
                Span::At { len, .. } if len != dim => Scored::Other(len),
                Span::At { .. } => Scored::Score(scores.get(row).copied().unwrap_or(f64::NAN)),
            };
            visit(position, seq, found)?;
        }
        Ok(())
    }
}

impl ThreadVectors {
    /// [`scan`](Self::scan) of only the rows `rows` (ascending; the candidates a recall index
    /// found, `crate::recall_index`): each live one among them is scored and visited in order
    /// with its position among all the live rows, as the whole scan would visit it.
    pub(crate) fn scan_rows<E>(
        &self,
        now: i64,
        dim: usize,
        rows: &[usize],
        score: impl Fn(&[f32], f64) -> f64 + Sync,
        mut visit: impl FnMut(usize, i64, Scored) -> Result<(), E>,
    ) -> Result<(), E> {
        let scores: Vec<f64> = rows
            .par_iter()
            .with_min_len(64)
            .map(|&row| match self.vector(row) {
                Some(v) if v.len() == dim => score(v, self.norm(row)),
                _ => f64::NAN,
            })
            .collect();
        // Positions count the live rows before each candidate: one pass over the expiries.
        let mut live_before = 0;
        let mut next = 0;
        for (&row, &score) in rows.iter().zip(&scores) {
            while next < row {
                live_before += usize::from(self.is_live(next, now));
                next += 1;
            }
            if !self.is_live(row, now) {
                continue;
            }
            let Some(&seq) = self.seqs.get(row) else {
                continue;
            };
            let found = match self.spans.get(row).copied().unwrap_or(Span::Missing) {
                Span::Missing => Scored::Missing,
                Span::Damaged(bytes) => Scored::Damaged(bytes),
                Span::At { len, .. } if len != dim => Scored::Other(len),
                Span::At { .. } => Scored::Score(score),
            };
            visit(live_before, seq, found)?;
        }
        Ok(())
    }
}

/// The cosine of the exact scans (`crate::search::cosine`), through a cached norm.
pub(crate) fn cosine(query: &[f32], query_norm: f64) -> impl Fn(&[f32], f64) -> f64 + Sync + '_ {
    move |v, norm| exact::cosine_with_norms(exact::dot(query, v), query_norm, norm)
}

/// The cached threads of one store: see the module docs.
#[derive(Debug)]
pub(crate) struct VectorCache {
    budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Per thread id: the thread at one rev, and when it was last used.
    threads: HashMap<i64, (Arc<ThreadVectors>, u64)>,
    bytes: usize,
    /// Counts uses; a scan's start is the value when it began.
    tick: u64,
}

impl Default for VectorCache {
    fn default() -> Self {
        VectorCache::new(CACHE_BUDGET_BYTES)
    }
}

impl VectorCache {
    /// An empty cache holding at most `budget` bytes.
    pub(crate) fn new(budget: usize) -> Self {
        VectorCache {
            budget,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A scan's start: entries it uses from now on are not evicted for its later threads.
    pub(crate) fn start(&self) -> u64 {
        let mut inner = self.lock();
        inner.tick += 1;
        inner.tick
    }

    /// Thread `thread_id` at `rev`, if cached; an entry at another rev is dropped.
    pub(crate) fn get(&self, thread_id: i64, rev: i64) -> Option<Arc<ThreadVectors>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        match inner.threads.get_mut(&thread_id) {
            Some((v, used)) if v.rev == rev => {
                *used = tick;
                Some(Arc::clone(v))
            }
            Some(_) => {
                if let Some((old, _)) = inner.threads.remove(&thread_id) {
                    inner.bytes = inner.bytes.saturating_sub(old.bytes());
                }
                None
            }
            None => None,
        }
    }

    /// Keeps `vectors` as thread `thread_id` when it fits, evicting the least recently used
    /// entries not used since `scan_start`; returns it either way.
    pub(crate) fn insert(
        &self,
        thread_id: i64,
        vectors: ThreadVectors,
        scan_start: u64,
    ) -> Arc<ThreadVectors> {
        let vectors = Arc::new(vectors);
        let size = vectors.bytes();
        if size > self.budget {
            return vectors;
        }
        let mut inner = self.lock();
        if let Some((old, _)) = inner.threads.remove(&thread_id) {
            inner.bytes = inner.bytes.saturating_sub(old.bytes());
        }
        while inner.bytes + size > self.budget {
            let victim = inner
                .threads
                .iter()
                .filter(|(_, (_, used))| *used < scan_start)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(id, _)| *id);
            let Some(victim) = victim else {
                return vectors;
            };
            if let Some((old, _)) = inner.threads.remove(&victim) {
                inner.bytes = inner.bytes.saturating_sub(old.bytes());
            }
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner.bytes += size;
        inner
            .threads
            .insert(thread_id, (Arc::clone(&vectors), tick));
        vectors
    }

    /// How many threads are cached.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().threads.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn thread(rev: i64, rows: usize, dim: usize) -> ThreadVectors {
        let mut t = ThreadVectors::new(rev);
        for i in 0..rows {
            let v: Vec<f32> = (0..dim).map(|j| (i * 7 + j) as f32 * 0.01 - 0.3).collect();
            t.push(i as i64 + 1, None, Some(&v));
        }
        t
    }

    proptest! {
        /// A scan visits exactly the live rows, in order, with their positions among the live
        /// rows, and scores each as the exact cosine of the stored vector does.
        #[test]
        fn scan_scores_like_the_exact_cosine(
            rows in proptest::collection::vec(
                (proptest::option::of(0i64..20),
                 proptest::option::of(proptest::collection::vec(-1.0f32..1.0, 3..5))),
                0..40),
            query in proptest::collection::vec(-1.0f32..1.0, 4),
            now in 0i64..20,
        ) {
            let mut t = ThreadVectors::new(1);
            let mut bytes = ThreadVectors::new(1);
            for (i, (expires, v)) in rows.iter().enumerate() {
                t.push(i as i64 * 2, *expires, v.as_deref());
                let le: Option<Vec<u8>> =
                    v.as_ref().map(|v| v.iter().flat_map(|f| f.to_le_bytes()).collect());
                bytes.push_le_bytes(i as i64 * 2, *expires, le.as_deref());
            }
            let qn = exact::norm(&query);
            let mut expected = Vec::new();
            let mut index = 0;
            for (i, (expires, v)) in rows.iter().enumerate() {
                if expires.is_some_and(|e| e <= now) {
                    continue;
                }
                let found = match v {
                    None => Scored::Missing,
                    Some(v) if v.len() != 4 => Scored::Other(v.len()),
                    Some(v) => Scored::Score(crate::search::cosine(&query, qn, v)),
                };
                expected.push((index, i as i64 * 2, found));
                index += 1;
            }
            for t in [&t, &bytes] {
                let mut seen = Vec::new();
                t.scan(now, 4, cosine(&query, qn), |p, s, f| {
                    seen.push((p, s, f));
                    Ok::<(), ()>(())
                }).unwrap();
                prop_assert_eq!(&seen, &expected);
            }
        }
    }

    #[test]
    fn damaged_bytes_are_reported_where_a_scan_reaches_them() {
        let mut t = ThreadVectors::new(0);
        t.push_le_bytes(1, None, Some(&[0, 0, 0]));
        t.push_le_bytes(2, None, Some(&[]));
        t.push_le_bytes(3, Some(5), Some(&[0]));
        let mut seen = Vec::new();
        t.scan(
            0,
            2,
            |_, _| 1.0,
            |_, _, f| {
                seen.push(f);
                Ok::<(), ()>(())
            },
        )
        .unwrap();
        assert_eq!(
            seen,
            [Scored::Damaged(3), Scored::Other(0), Scored::Damaged(1)]
        );
    }

    #[test]
    fn index_of_counts_the_live_rows_before() {
        let mut t = ThreadVectors::new(0);
        for (seq, expires) in [
            (1, None),
            (3, Some(5)),
            (4, None),
            (9, Some(50)),
            (12, None),
        ] {
            t.push(seq, expires, None);
        }
        assert_eq!(t.index_of(1, 10), Some(0));
        assert_eq!(t.index_of(3, 10), None);
        assert_eq!(t.index_of(3, 4), Some(1));
        assert_eq!(t.index_of(4, 10), Some(1));
        assert_eq!(t.index_of(4, 4), Some(2));
        assert_eq!(t.index_of(12, 10), Some(3));
        assert_eq!(t.index_of(12, 60), Some(2));
        assert_eq!(t.index_of(2, 0), None);
    }

    #[test]
    fn an_entry_is_taken_only_at_its_rev() {
        let cache = VectorCache::new(1 << 20);
        let start = cache.start();
        cache.insert(7, thread(3, 10, 4), start);
        assert!(cache.get(7, 3).is_some());
        assert!(cache.get(8, 3).is_none());
        // Another rev: the entry is stale and dropped.
        assert!(cache.get(7, 4).is_none());
        assert!(cache.get(7, 3).is_none());
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn the_budget_evicts_the_least_recently_used_but_not_the_running_scan() {
        let one = thread(0, 100, 16).bytes();
        let cache = VectorCache::new(one * 2 + one / 2);
        let start = cache.start();
        cache.insert(1, thread(0, 100, 16), start);
        cache.insert(2, thread(0, 100, 16), start);
        // A third thread of the same scan does not fit and evicts neither.
        cache.insert(3, thread(0, 100, 16), start);
        assert_eq!(cache.len(), 2);
        assert!(cache.get(3, 0).is_none());
        // A later scan uses thread 2; thread 1, least recently used, makes room.
        let later = cache.start();
        assert!(cache.get(2, 0).is_some());
        cache.insert(3, thread(0, 100, 16), later);
        assert!(cache.get(1, 0).is_none());
        assert!(cache.get(2, 0).is_some() && cache.get(3, 0).is_some());
        // A thread larger than the budget is returned, never kept.
        let big = cache.insert(4, thread(0, 1000, 16), cache.start());
        assert_eq!(big.rev(), 0);
        assert!(cache.get(4, 0).is_none());
    }
}
