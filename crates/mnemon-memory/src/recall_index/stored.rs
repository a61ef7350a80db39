//! The recall index over a durable store's stored vectors (`crate::vector_scan`): for the
//! search across sessions and a recall through a handle whose mirror is not current
//! (docs/reference/memory.md#the-recall-index).
//!
//! A store reads a thread's vectors anew after every write of it (a [`ThreadVectors`] is the
//! thread at one `rev`), so the index cannot hang on one snapshot as the mirror's does. It is
//! kept per thread id, with the `seq` of each of its rows, and is *mapped* onto each snapshot
//! it serves (once per `rev`): a row of the index stands for the snapshot's row of the same
//! `seq` only when that row's vector normalises to the very bits the index was built over; rows
//! that were deleted or re-embedded are dead (never returned), and the snapshot's rows the
//! index does not stand for are the tail, scored exactly beside the graph's candidates. A
//! thread id is never reused, so an index can never stand for another thread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use mnemon_vector::Matrix;

use super::{BuildError, BuiltIndex, REBUILD_TAIL, RecallIndexOptions, normalise_into};
use crate::vector_scan::ThreadVectors;

/// The most bytes the indexes of one store hold (their normalised copies of the vectors and
/// graphs), least recently used dropped first: 100,000 vectors of 256 dimensions take about
/// 140 MB.
const BUDGET_BYTES: usize = 1 << 30;

/// One thread's index and the seqs of its rows.
struct StoredIndex {
    built: BuiltIndex,
    /// Per index row: the `seq` of the row it was built from (ascending).
    seqs: Vec<i64>,
    /// The last mapping, for the `rev` it was made at.
    mapped: Mutex<Option<(i64, Arc<Mapping>)>>,
}

impl StoredIndex {
    fn bytes(&self) -> usize {
        self.built.vectors.rows() * self.built.vectors.stride() * 4
            + self.built.bytes.len()
            + self.seqs.len() * 8
    }

    /// The mapping onto `vectors`, made once per `rev`.
    fn mapping(&self, vectors: &ThreadVectors) -> Arc<Mapping> {
        let mut slot = self.mapped.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((rev, m)) = slot.as_ref()
            && *rev == vectors.rev()
        {
            return Arc::clone(m);
        }
        let m = Arc::new(Mapping::new(&self.built.vectors, &self.seqs, vectors));
        *slot = Some((vectors.rev(), Arc::clone(&m)));
        m
    }
}

/// An index mapped onto one snapshot of its thread.
struct Mapping {
    /// Per index row: the snapshot's row it stands for, or `u32::MAX` (dead).
    rows: Vec<u32>,
    /// The snapshot's rows the index does not stand for.
    tail: Vec<usize>,
    /// Every row of the snapshot has a vector of the index's dimension: otherwise the exact
    /// scan answers, which reports such rows as it always has.
    complete: bool,
}

impl Mapping {
    fn new(normalised: &Matrix, seqs: &[i64], vectors: &ThreadVectors) -> Self {
        let dim = normalised.dim();
        let mut rows = vec![u32::MAX; seqs.len()];
        let mut covered = vec![false; vectors.rows()];
        let mut scratch = vec![0f32; dim];
        let snapshot = vectors.seqs();
        let (mut i, mut r) = (0, 0);
        while i < seqs.len() && r < snapshot.len() {
            let (Some(&a), Some(&b)) = (seqs.get(i), snapshot.get(r)) else {
                break;
            };
            if a < b {
                i += 1;
            } else if b < a {
                r += 1;
            } else {
                if let (Some(v), Some(built)) = (vectors.vector(r), normalised.row(i))
                    && v.len() == dim
                {
                    normalise_into(v, vectors.norm(r), &mut scratch);
                    let same = scratch
                        .iter()
                        .zip(built)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    if same && let (Some(slot), Ok(at)) = (rows.get_mut(i), u32::try_from(r)) {
                        *slot = at;
                        if let Some(c) = covered.get_mut(r) {
                            *c = true;
                        }
                    }
                }
                i += 1;
                r += 1;
            }
        }
        let complete =
            (0..vectors.rows()).all(|r| vectors.vector(r).is_some_and(|v| v.len() == dim));
        let tail = covered
            .iter()
            .enumerate()
            .filter(|(_, c)| !**c)
            .map(|(r, _)| r)
            .collect();
        Mapping {
            rows,
            tail,
            complete,
        }
    }

    /// Index rows that stand for nothing, and snapshot rows outside the index.
    fn stale_rows(&self) -> usize {
        self.rows.iter().filter(|&&r| r == u32::MAX).count() + self.tail.len()
    }
}

/// Per thread: its index, whether a build is running, and a failed build's `rev`.
#[derive(Default)]
struct Slot {
    ready: Option<Arc<StoredIndex>>,
    building: bool,
    failed_rev: Option<i64>,
    used: u64,
}

#[derive(Default)]
struct Inner {
    threads: HashMap<i64, Slot>,
    tick: u64,
}

/// The recall indexes of one store's threads, shared by its handles.
pub(crate) struct StoredIndexes {
    options: RecallIndexOptions,
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for StoredIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredIndexes")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(PoisonError::into_inner)
}

impl StoredIndexes {
    /// No indexes yet, used as `options` say.
    pub(crate) fn new(options: RecallIndexOptions) -> Self {
        StoredIndexes {
            options,
            inner: Arc::default(),
        }
    }

    /// The snapshot's rows (ascending) a cosine top-`keep` of `query` must score: the graph's
    /// candidates among the rows live at `now`, and the tail. `None` when the index does not
    /// answer (a small thread, no index yet, a row without a vector of the query's dimension,
    /// a walk that could not find `keep` live rows): the exact scan answers then.
    pub(crate) fn candidates(
        &self,
        thread_id: i64,
        vectors: &Arc<ThreadVectors>,
        now: i64,
        query: &[f32],
        keep: usize,
    ) -> Option<Vec<usize>> {
        let rows = vectors.rows();
        if rows < self.options.min_messages
            || rows == 0
            || keep == 0
            || keep >= rows
            || !query.iter().all(|x| x.is_finite())
            // Every score ties at 0: the exact scan answers in row order, as every other path.
            || query.iter().all(|&x| x == 0.0)
            // Only an index over every row can answer, and building one for a query of
            // another dimension (which the caller refuses anyway) would replace the thread's
            // good index with an empty one.
            || vectors.uniform_dim() != Some(query.len())
        {
            return None;
        }
        let ready = self.usable(thread_id, vectors, query.len())?;
        let mapping = ready.mapping(vectors);
        if !mapping.complete {
            return None;
        }
        let indexed = ready.built.vectors.rows();
        if mapping.stale_rows().saturating_mul(REBUILD_TAIL) > indexed {
            self.start_build(thread_id, vectors, query.len());
        }
        let visible = |i: u32| {
            mapping
                .rows
                .get(i as usize)
                .is_some_and(|&r| r != u32::MAX && vectors.is_live(r as usize, now))
        };
        let found = ready.built.walk(query, keep, self.options.ef, visible)?;
        let mut out: Vec<usize> = found
            .iter()
            .filter_map(|&i| mapping.rows.get(i as usize))
            .map(|&r| r as usize)
            .chain(
                mapping
                    .tail
                    .iter()
                    .copied()
                    .filter(|&r| vectors.is_live(r, now)),
            )
            .collect();
        out.sort_unstable();
        out.dedup();
        (out.len() >= keep).then_some(out)
    }

    /// The thread's index of dimension `dim`, starting a build when there is none.
    fn usable(
        &self,
        thread_id: i64,
        vectors: &Arc<ThreadVectors>,
        dim: usize,
    ) -> Option<Arc<StoredIndex>> {
        let ready = {
            let mut inner = lock(&self.inner);
            inner.tick += 1;
            let tick = inner.tick;
            let slot = inner.threads.entry(thread_id).or_default();
            slot.used = tick;
            slot.ready.clone()
        };
        match ready {
            Some(ready) if ready.built.vectors.dim() == dim => Some(ready),
            _ => {
                self.start_build(thread_id, vectors, dim);
                lock(&self.inner)
                    .threads
                    .get(&thread_id)
                    .and_then(|s| s.ready.clone())
                    .filter(|r| r.built.vectors.dim() == dim)
            }
        }
    }

    /// Starts a build of the thread's index over `vectors` (the rows with a vector of `dim`
    /// dimensions), unless one is running or the last failed at this `rev`.
    fn start_build(&self, thread_id: i64, vectors: &Arc<ThreadVectors>, dim: usize) {
        {
            let mut inner = lock(&self.inner);
            let slot = inner.threads.entry(thread_id).or_default();
            if slot.building || slot.failed_rev == Some(vectors.rev()) {
                return;
            }
            slot.building = true;
        }
        let rev = vectors.rev();
        // The build holds the store's indexes weakly: once the store is dropped, it stops at
        // once instead of finishing for nobody.
        let inner = Arc::downgrade(&self.inner);
        // A snapshot never changes, so the copy is made by the build itself, off the search's
        // path (the mirror's index must copy first: its rows keep growing in place).
        let vectors = Arc::clone(vectors);
        let job = move || {
            let _building = Building {
                inner: &inner,
                thread_id,
            };
            let mut seqs = Vec::new();
            let rows = || {
                #[cfg(test)]
                tests::NORMALISED_FOR
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(thread_id);
                let (normalised, made) = normalised_rows(&vectors, dim);
                seqs = made;
                normalised
            };
            let built = BuiltIndex::build(0, rows, &|| inner.strong_count() == 0);
            drop(vectors);
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let mut guard = lock(&inner);
            let slot = guard.threads.entry(thread_id).or_default();
            slot.building = false;
            match built {
                Ok(built) => {
                    slot.ready = Some(Arc::new(StoredIndex {
                        built,
                        seqs,
                        mapped: Mutex::new(None),
                    }));
                    slot.failed_rev = None;
                }
                Err(BuildError::Failed(_)) => slot.failed_rev = Some(rev),
                // Only when the store was dropped, and then it cannot be upgraded.
                Err(BuildError::Abandoned) => {}
            }
            evict(&mut guard, thread_id);
        };
        if self.options.background {
            let inner = Arc::clone(&self.inner);
            let spawned = std::thread::Builder::new()
                .name("mnemon-recall-index".into())
                .spawn(job);
            // No thread to build on: the exact scan answers, and a later search retries.
            if spawned.is_err()
                && let Some(slot) = lock(&inner).threads.get_mut(&thread_id)
            {
                slot.building = false;
            }
        } else {
            job();
        }
    }

    /// Rows the thread's index holds, if it has one (tests).
    #[cfg(test)]
    fn indexed(&self, thread_id: i64) -> Option<usize> {
        lock(&self.inner)
            .threads
            .get(&thread_id)
            .and_then(|s| s.ready.as_ref())
            .map(|r| r.built.vectors.rows())
    }
}

/// The unit-normalised copy of the snapshot's rows with a vector of `dim` dimensions, and
/// their seqs.
fn normalised_rows(vectors: &ThreadVectors, dim: usize) -> (Matrix, Vec<i64>) {
    let mut normalised = Matrix::with_capacity(dim, vectors.rows());
    let mut seqs = Vec::with_capacity(vectors.rows());
    let mut scratch = vec![0f32; dim];
    for (r, &seq) in vectors.seqs().iter().enumerate() {
        if let Some(v) = vectors.vector(r)
            && v.len() == dim
        {
            normalise_into(v, vectors.norm(r), &mut scratch);
            if normalised.push_row(&scratch).is_ok() {
                seqs.push(seq);
            }
        }
    }
    (normalised, seqs)
}

/// Clears a thread's `building` mark however its build ends (a panic included), so a later
/// search can start another.
struct Building<'a> {
    inner: &'a Weak<Mutex<Inner>>,
    thread_id: i64,
}

impl Drop for Building<'_> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade()
            && let Some(slot) = lock(&inner).threads.get_mut(&self.thread_id)
        {
            slot.building = false;
        }
    }
}

/// Drops the least recently used indexes (never `keep`'s) until the rest fit the budget.
fn evict(inner: &mut Inner, keep: i64) {
    loop {
        let total: usize = inner
            .threads
            .values()
            .filter_map(|s| s.ready.as_ref())
            .map(|r| r.bytes())
            .sum();
        if total <= BUDGET_BYTES {
            return;
        }
        let victim = inner
            .threads
            .iter()
            .filter(|(id, s)| **id != keep && s.ready.is_some())
            .min_by_key(|(_, s)| s.used)
            .map(|(id, _)| *id);
        match victim.and_then(|id| inner.threads.get_mut(&id)) {
            Some(slot) => slot.ready = None,
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64;

    use super::*;
    use crate::vector_scan::{Scored, cosine};

    fn snapshot(rev: i64, rows: &[(i64, Option<i64>, Vec<f32>)]) -> Arc<ThreadVectors> {
        let mut v = ThreadVectors::new(rev);
        for (seq, expires, vector) in rows {
            v.push(*seq, *expires, Some(vector));
        }
        Arc::new(v)
    }

    fn random_rows(n: usize, dim: usize, seed: u64) -> Vec<(i64, Option<i64>, Vec<f32>)> {
        let mut rng = Pcg64::seed_from_u64(seed);
        (0..n)
            .map(|i| {
                let v = (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
                (i as i64 + 1, None, v)
            })
            .collect()
    }

    fn indexes(ef: usize) -> StoredIndexes {
        StoredIndexes::new(RecallIndexOptions {
            min_messages: 0,
            ef: Some(ef),
            background: false,
        })
    }

    /// (position, seq, score bits) of the top `k`, through the index's rows or the whole scan.
    fn top(
        vectors: &ThreadVectors,
        now: i64,
        query: &[f32],
        k: usize,
        rows: Option<&[usize]>,
    ) -> Vec<(usize, i64, u64)> {
        let score = cosine(query, crate::exact::norm(query));
        let mut all = Vec::new();
        let mut visit = |position: usize, seq: i64, found: Scored| {
            if let Scored::Score(s) = found {
                all.push((position, seq, s));
            }
            Ok::<(), ()>(())
        };
        match rows {
            Some(rows) => vectors.scan_rows(now, query.len(), rows, &score, &mut visit),
            None => vectors.scan(now, query.len(), &score, &mut visit),
        }
        .unwrap();
        all.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        all.truncate(k);
        all.into_iter()
            .map(|(p, s, x)| (p, s, x.to_bits()))
            .collect()
    }

    #[test]
    fn a_covering_beam_is_exact_across_changes_and_expiry() {
        let mut rows = random_rows(300, 12, 1);
        let ix = indexes(10_000);
        let query: Vec<f32> = random_rows(1, 12, 2).remove(0).2;
        let v1 = snapshot(1, &rows);
        let found = ix.candidates(7, &v1, 0, &query, 5).unwrap();
        assert_eq!(
            top(&v1, 0, &query, 5, Some(&found)),
            top(&v1, 0, &query, 5, None)
        );
        assert_eq!(ix.indexed(7), Some(300));
        // The next snapshot: the best row deleted, another re-embedded to the query itself, two
        // rows appended (one equal to the query), one expired.
        let best = top(&v1, 0, &query, 1, None)[0].1;
        rows.retain(|r| r.0 != best);
        rows[10].2 = query.clone();
        rows[20].1 = Some(5);
        rows.push((1_000, None, query.clone()));
        rows.push((1_001, None, random_rows(1, 12, 3).remove(0).2));
        let v2 = snapshot(2, &rows);
        for now in [0, 10] {
            let found = ix.candidates(7, &v2, now, &query, 5).unwrap();
            assert_eq!(
                top(&v2, now, &query, 5, Some(&found)),
                top(&v2, now, &query, 5, None),
                "now {now}"
            );
        }
        // The deleted and re-embedded rows are dead in the index, the new ones its tail.
        let m = ix.usable(7, &v2, 12).unwrap().mapping(&v2);
        assert_eq!(m.rows.iter().filter(|&&r| r == u32::MAX).count(), 2);
        assert_eq!(m.tail.len(), 3);
    }

    /// A query of another dimension than the thread's vectors is refused by the caller; it
    /// must not get that far first in here: it used to start a build at its own dimension,
    /// over none of the rows, whose empty index then replaced the thread's good one, and the
    /// next right query rebuilt the whole index again.
    #[test]
    fn a_query_of_another_dimension_keeps_the_thread_index() {
        let v = snapshot(1, &random_rows(300, 12, 1));
        let ix = indexes(64);
        let query = random_rows(1, 12, 2).remove(0).2;
        assert!(ix.candidates(7, &v, 0, &query, 5).is_some());
        assert_eq!(ix.indexed(7), Some(300));
        assert!(ix.candidates(7, &v, 0, &[1.0, 2.0, 3.0], 5).is_none());
        assert_eq!(ix.indexed(7), Some(300), "the index was replaced");
        // A thread whose rows are of two dimensions is never indexed (no query could use it).
        let mut mixed = random_rows(300, 12, 3);
        mixed.extend(
            random_rows(10, 4, 4)
                .into_iter()
                .map(|(s, e, v)| (s + 1_000, e, v)),
        );
        let mixed = snapshot(1, &mixed);
        assert!(ix.candidates(8, &mixed, 0, &query, 5).is_none());
        assert_eq!(ix.indexed(8), None);
    }

    /// An all-zero query ties every row at 0: the exact scan answers (the first rows, as on
    /// every path and backend), not an arbitrary walk of the graph.
    #[test]
    fn a_zero_query_is_left_to_the_exact_scan() {
        let v = snapshot(1, &random_rows(300, 12, 1));
        let ix = indexes(64);
        assert!(ix.candidates(7, &v, 0, &[0.0; 12], 5).is_none());
    }

    #[test]
    fn a_background_build_stops_when_its_store_is_dropped() {
        use crate::recall_index::{ABANDONED_BUILDS, tests::wait_for_abandoned_builds};
        // Large enough that the build takes far longer than the drop below.
        let v = snapshot(1, &random_rows(20_000, 8, 8));
        let ix = StoredIndexes::new(RecallIndexOptions {
            min_messages: 0,
            ef: Some(16),
            background: true,
        });
        let query = random_rows(1, 8, 9).remove(0).2;
        let before = ABANDONED_BUILDS.load(std::sync::atomic::Ordering::SeqCst);
        // No index yet: the build starts and the exact scan answers.
        assert!(ix.candidates(1, &v, 0, &query, 5).is_none());
        drop(ix);
        // Before the fix the build ran to its end for nobody, and none was abandoned.
        assert!(wait_for_abandoned_builds(before) > before);
    }

    /// The threads whose rows a build has normalised (tests watch it).
    pub(super) static NORMALISED_FOR: Mutex<Vec<i64>> = Mutex::new(Vec::new());

    /// Builds run one at a time, and one waiting for its turn holds no normalised copy of its
    /// rows: a search across many large threads starts a build for each, and every one of them
    /// made its copy at once and held it while waiting.
    #[test]
    fn builds_waiting_their_turn_hold_no_copy() {
        let ix = StoredIndexes::new(RecallIndexOptions {
            min_messages: 0,
            ef: Some(16),
            background: true,
        });
        let threads: Vec<i64> = (9_001..9_004).collect();
        let query = random_rows(1, 8, 9).remove(0).2;
        let turn = super::super::BUILDS
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (i, &thread) in threads.iter().enumerate() {
            let v = snapshot(1, &random_rows(500, 8, 20 + i as u64));
            assert!(ix.candidates(thread, &v, 0, &query, 5).is_none());
        }
        // Time for the three build threads to start and, as before, to normalise their rows.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let normalised = |of: &[i64]| {
            NORMALISED_FOR
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .filter(|t| of.contains(t))
                .count()
        };
        assert_eq!(normalised(&threads), 0);
        drop(turn);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while normalised(&threads) < threads.len() {
            assert!(std::time::Instant::now() < deadline, "the builds never ran");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_narrow_beam_finds_nearly_every_neighbour() {
        let rows = random_rows(3_000, 16, 4);
        let v = snapshot(1, &rows);
        let ix = indexes(128);
        let (mut hit, mut wanted) = (0, 0);
        for q in 0..20 {
            let query = random_rows(1, 16, 100 + q).remove(0).2;
            let found = ix.candidates(1, &v, 0, &query, 10).unwrap();
            let truth = top(&v, 0, &query, 10, None);
            let got = top(&v, 0, &query, 10, Some(&found));
            wanted += truth.len();
            hit += got.iter().filter(|g| truth.contains(g)).count();
        }
        let recall = hit as f64 / wanted as f64;
        assert!(recall >= 0.95, "recall@10 {recall}");
    }

    #[test]
    fn outgrown_indexes_are_rebuilt_and_incomplete_threads_scan() {
        let mut rows = random_rows(200, 8, 5);
        let ix = indexes(16);
        let query = random_rows(1, 8, 6).remove(0).2;
        assert!(
            ix.candidates(3, &snapshot(1, &rows), 0, &query, 3)
                .is_some()
        );
        rows.extend(
            random_rows(60, 8, 7)
                .into_iter()
                .map(|(s, e, v)| (s + 500, e, v)),
        );
        // 60 new rows of 200 indexed: past a quarter, so this search starts a rebuild.
        assert!(
            ix.candidates(3, &snapshot(2, &rows), 0, &query, 3)
                .is_some()
        );
        assert_eq!(ix.indexed(3), Some(260));
        // A row without a vector of the query's dimension: the exact scan answers.
        let mut v = Arc::into_inner(snapshot(3, &rows)).unwrap();
        v.push(9_999, None, None);
        assert!(ix.candidates(3, &Arc::new(v), 0, &query, 3).is_none());
        // Another dimension builds that dimension's index.
        let other = random_rows(100, 4, 8);
        let q4 = random_rows(1, 4, 9).remove(0).2;
        assert!(ix.candidates(3, &snapshot(4, &other), 0, &q4, 3).is_some());
        assert_eq!(ix.indexed(3), Some(100));
    }
}
