//! The approximate index of a large thread's recall (docs/reference/memory.md#the-recall-index):
//! `mnemon-ann`'s HNSW graph, the one libraries use, over the thread's embeddings, so a cosine
//! recall cut to `top_k` reads a few thousand rows instead of all of them.
//!
//! **What it covers.** An index is built over the first rows of one [`EmbeddingCache`] *lineage*
//! (a cache built from a thread's entries, then grown in place by appends and by embeddings
//! stored for messages that had none). Within a lineage rows are only ever appended, so row `r`
//! of the index is row `r` of the cache, with the same vector, for as long as the lineage
//! lives; a removal, a replace or a rewritten embedding starts a new lineage, and the index of
//! the old one is no longer used. Rows appended after the build (the *tail*) are scored exactly
//! beside the graph's candidates; once the tail outgrows a quarter of the indexed rows, the
//! index is rebuilt over all of them.
//!
//! **Same scores.** The graph ranks unit-normalised copies of the rows (so its dot product is
//! the cosine); its candidates, with the tail, are then scored with the recall's own exact `f64`
//! cosine ([`crate::retrieval`]), so every returned score is the exact scan's score of that
//! message. Which messages are found is approximate, unless the beam covers the index: then
//! every visible row is a candidate, and the result is the exact scan's.
//!
//! **Filters.** A recall with a mark walks the graph through every row but returns only marked
//! ones; when the walk cannot find `top_k` of them, or a mark selects fewer than one row in
//! [`SELECTIVE`], the exact scan answers, so a recall never returns fewer messages than it would
//! without the index.
//!
//! **Building.** Building takes seconds at 100,000 rows (parallel, with rayon), so by default it
//! runs on a background thread, one build at a time in the process; until it is done, the exact
//! scan answers. The rows are copied (normalised) before the build starts, so the thread keeps
//! changing meanwhile.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};

use mnemon_ann::{
    BuildParams, IndexBytes, IndexView, OpenOptions, SearchMethod, SearchParams, Verified, Verify,
};
use mnemon_vector::Matrix;

use crate::embedding_cache::EmbeddingCache;

mod stored;

pub(crate) use stored::StoredIndexes;

/// When a thread's recall uses the approximate index, and how it searches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecallIndexOptions {
    /// The fewest embeddings (of the thread's common dimension) for which a cosine recall cut
    /// to `top_k` uses the index. Default 50,000: below that the exact scan takes a few
    /// milliseconds. `usize::MAX` turns the index off.
    pub min_messages: usize,
    /// The walk's beam width: the candidates found before the exact re-score (at least `top_k`
    /// plus a small margin). `None` (the default) sizes it by the index, as libraries do
    /// ([`mnemon_ann::default_ef`]: 128 up to 100,000 rows, 416 at 1,000,000). A beam at least
    /// as wide as the index makes every visible row a candidate, and the recall exact.
    pub ef: Option<usize>,
    /// Build the index on a background thread (the default): recalls do not wait for it, the
    /// exact scan answers until it is ready. `false` builds it inside the recall that finds it
    /// missing or outgrown (batch jobs, tests).
    pub background: bool,
}

impl Default for RecallIndexOptions {
    fn default() -> Self {
        RecallIndexOptions {
            min_messages: 50_000,
            ef: None,
            background: true,
        }
    }
}

impl RecallIndexOptions {
    /// Options that never use the index.
    pub fn off() -> Self {
        RecallIndexOptions {
            min_messages: usize::MAX,
            ..RecallIndexOptions::default()
        }
    }
}

/// The state of a thread's recall index, for operators and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecallIndexStatus {
    /// No index of the thread's current rows: none was needed yet, or a change that was not an
    /// append (a removal, a replace, a rewritten embedding) made the last one unusable.
    Absent,
    /// A build is running; the exact scan answers until it is done.
    Building,
    /// The index covers `indexed` rows; `unindexed` rows added since are scored exactly.
    Ready {
        /// Rows in the index.
        indexed: usize,
        /// Rows appended since the build.
        unindexed: usize,
    },
    /// The last build over these rows failed (a NaN or infinite embedding): the exact scan
    /// answers until the rows change.
    Failed(String),
}

/// Extra candidates asked of the graph beyond `top_k`, so that the exact `f64` re-score, not the
/// graph's `f32` one, decides the last places.
const MARGIN: usize = 8;

/// A mark selecting fewer than one embedded row in this many goes to the exact scan, which
/// scores only the marked rows: cheaper than a walk that would mostly pass over unmarked ones.
pub(crate) const SELECTIVE: usize = 16;

/// The tail may grow to `1 / REBUILD_TAIL` of the indexed rows before the index is rebuilt.
const REBUILD_TAIL: usize = 4;

/// Builds run one at a time in the process: each is parallel already.
static BUILDS: Mutex<()> = Mutex::new(());

/// Builds that stopped because their owner was dropped (tests watch it).
#[cfg(test)]
pub(crate) static ABANDONED_BUILDS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Why a build gave no index.
enum BuildError {
    /// Nobody holds the index's owner any more: the build stopped.
    Abandoned,
    /// The rows cannot be indexed (a NaN or an infinite value), and why.
    Failed(String),
}

/// A built index: the unit-normalised rows it was built over and its bytes.
struct BuiltIndex {
    lineage: u64,
    vectors: Matrix,
    bytes: IndexBytes,
    verified: Verified,
}

impl BuiltIndex {
    /// Builds over the matrix `rows` gives, rows `0..` of the cache lineage `lineage`, unless
    /// `abandoned` says, before the build starts or before any node's insertion, that nobody
    /// holds the index's owner any more (its store or thread was dropped): a build at 100,000
    /// rows takes a core for seconds to minutes, which a closed store must not go on spending.
    /// `rows` is called once the build's turn has come, so that builds waiting for it hold no
    /// copy of their rows (a search across many large threads starts a build for each).
    fn build(
        lineage: u64,
        rows: impl FnOnce() -> Matrix,
        abandoned: &(dyn Fn() -> bool + Sync),
    ) -> Result<Self, BuildError> {
        let _one = BUILDS.lock().unwrap_or_else(PoisonError::into_inner);
        let mut made = None;
        let built = if abandoned() {
            Err(mnemon_ann::AnnError::Cancelled)
        } else {
            let vectors = made.insert(rows());
            mnemon_ann::build_cancellable(
                vectors.view(),
                &BuildParams::default(),
                &|_| {},
                abandoned,
            )
        };
        let bytes = built.map_err(|e| match e {
            mnemon_ann::AnnError::Cancelled => {
                #[cfg(test)]
                ABANDONED_BUILDS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                BuildError::Abandoned
            }
            e => BuildError::Failed(e.to_string()),
        })?;
        // Built, so the rows were made.
        let Some(vectors) = made else {
            return Err(BuildError::Abandoned);
        };
        // Just built over these very rows: the structure check suffices.
        let verified = IndexView::open(
            bytes.as_bytes(),
            vectors.view(),
            &OpenOptions {
                verify: Verify::Structure,
                expected_fingerprint: None,
            },
        )
        .map_err(|e| BuildError::Failed(e.to_string()))?
        .verified();
        Ok(BuiltIndex {
            lineage,
            vectors,
            bytes,
            verified,
        })
    }

    fn rows(&self) -> usize {
        self.vectors.rows()
    }

    /// The graph's candidates for a top-`keep` of `query` among the rows `visible` admits
    /// (index rows, best first): `keep` plus [`MARGIN`] of them, or every visible row when the
    /// beam (`ef`, at least that many) covers the index. `None` when the graph does not answer
    /// (a walk that could not find them, or an unusable view): the caller's exact scan does.
    fn walk(
        &self,
        query: &[f32],
        keep: usize,
        ef: Option<usize>,
        visible: impl Fn(u32) -> bool + Sync,
    ) -> Option<Vec<u32>> {
        // The graph scores rows in `f32` against a quantised query, so a finite query of huge
        // length (components near 1e37) overflowed every score to infinity and the walk, all
        // ties, stopped near its entry; a zero query tied every row the same way. A cosine
        // ignores the query's length: the walk takes it at unit length, and a zero query is
        // left to the exact scan, which orders its ties by index (docs/memory.md).
        let norm = query
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt();
        if !(norm.is_finite() && norm > 0.0) {
            return None;
        }
        let query: Vec<f32> = query
            .iter()
            .map(|&x| (f64::from(x) / norm) as f32)
            .collect();
        let view =
            IndexView::reopen(self.bytes.as_bytes(), self.vectors.view(), &self.verified).ok()?;
        let indexed = self.rows();
        let ef = ef
            .unwrap_or_else(|| mnemon_ann::default_ef(indexed))
            .max(keep.saturating_add(MARGIN));
        // A beam covering the index returns every visible row: the recall is then exact.
        let count = if ef >= indexed {
            indexed
        } else {
            keep.saturating_add(MARGIN)
        };
        let mut params = SearchParams::new(count);
        params.ef = ef;
        let found = view.search(&query, &params, visible).ok()?;
        (found.method == SearchMethod::Graph).then(|| found.hits.iter().map(|h| h.index).collect())
    }
}

/// What a thread's slot holds.
#[derive(Default)]
struct SlotState {
    ready: Option<Arc<BuiltIndex>>,
    /// The lineage a build is running for.
    building: Option<u64>,
    /// The lineage and row count whose build failed, and why.
    failed: Option<(u64, usize, String)>,
}

/// One thread's index, shared with the background build that fills it.
#[derive(Default)]
pub(crate) struct IndexSlot {
    state: Mutex<SlotState>,
    built: Condvar,
}

impl std::fmt::Debug for IndexSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("IndexSlot")
            .field("indexed", &s.ready.as_ref().map(|b| b.rows()))
            .field("building", &s.building.is_some())
            .finish()
    }
}

/// Clears the slot's `building` mark however the build ends (a panic included), so a later
/// recall can start another.
struct BuildingGuard<'a>(&'a Weak<IndexSlot>);

impl Drop for BuildingGuard<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.0.upgrade() {
            slot.lock().building = None;
            slot.built.notify_all();
        }
    }
}

impl IndexSlot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The index usable for `cache` (same lineage, no more rows than it has), starting a build
    /// when there is none or its tail has outgrown it.
    fn usable(
        self: &Arc<Self>,
        cache: &EmbeddingCache,
        options: &RecallIndexOptions,
    ) -> Option<Arc<BuiltIndex>> {
        let rows = cache.matrix().rows();
        let lineage = cache.lineage();
        let mut s = self.lock();
        let ready = s
            .ready
            .as_ref()
            .filter(|b| b.lineage == lineage && b.rows() <= rows)
            .cloned();
        let outgrown = ready
            .as_ref()
            .is_none_or(|b| (rows - b.rows()).saturating_mul(REBUILD_TAIL) > b.rows());
        let failed_here = s
            .failed
            .as_ref()
            .is_some_and(|(l, n, _)| *l == lineage && *n == rows);
        if !outgrown || s.building.is_some() || failed_here {
            return ready;
        }
        s.building = Some(lineage);
        if ready.is_none() {
            // Another lineage's index can never answer again: free it now.
            s.ready = None;
        }
        drop(s);
        let vectors = normalised(cache);
        // The build holds the slot weakly: when the thread's state is dropped (its store
        // closed), the build stops at once instead of finishing for nobody.
        let slot = Arc::downgrade(self);
        if options.background {
            let spawned = std::thread::Builder::new()
                .name("mnemon-recall-index".into())
                .spawn(move || IndexSlot::finish_build(&slot, lineage, vectors));
            if spawned.is_err() {
                // No thread to build on: the exact scan answers, and a later recall retries.
                self.lock().building = None;
            }
            ready
        } else {
            IndexSlot::finish_build(&slot, lineage, vectors);
            self.lock()
                .ready
                .as_ref()
                .filter(|b| b.lineage == lineage)
                .cloned()
                .or(ready)
        }
    }

    /// Builds over `vectors` and stores the result (or why it failed) in the slot, if anyone
    /// still holds it; stops early once nobody does.
    fn finish_build(slot: &Weak<IndexSlot>, lineage: u64, vectors: Matrix) {
        let _guard = BuildingGuard(slot);
        let rows = vectors.rows();
        let built = BuiltIndex::build(lineage, || vectors, &|| slot.strong_count() == 0);
        let Some(slot) = slot.upgrade() else {
            return;
        };
        let mut s = slot.lock();
        match built {
            Ok(built) => {
                s.ready = Some(Arc::new(built));
                s.failed = None;
            }
            Err(BuildError::Failed(why)) => s.failed = Some((lineage, rows, why)),
            // Only when nobody held the slot, and then it cannot be upgraded.
            Err(BuildError::Abandoned) => {}
        }
    }

    /// Waits (up to `timeout`) for a running build to finish.
    #[cfg(test)]
    pub(crate) fn wait(&self, timeout: std::time::Duration) {
        let s = self.lock();
        let _ = self
            .built
            .wait_timeout_while(s, timeout, |s| s.building.is_some());
    }

    /// The slot's state as seen by `cache`.
    pub(crate) fn status(&self, cache: &EmbeddingCache) -> RecallIndexStatus {
        let s = self.lock();
        let rows = cache.matrix().rows();
        if let Some(b) = s
            .ready
            .as_ref()
            .filter(|b| b.lineage == cache.lineage() && b.rows() <= rows)
        {
            return RecallIndexStatus::Ready {
                indexed: b.rows(),
                unindexed: rows - b.rows(),
            };
        }
        if s.building.is_some() {
            return RecallIndexStatus::Building;
        }
        match &s.failed {
            Some((l, _, why)) if *l == cache.lineage() => RecallIndexStatus::Failed(why.clone()),
            _ => RecallIndexStatus::Absent,
        }
    }
}

/// The unit-normalised copy of every row of the cache's matrix (a zero row stays zero: its
/// cosine is 0 with anything).
fn normalised(cache: &EmbeddingCache) -> Matrix {
    let m = cache.matrix();
    let mut out = Matrix::with_capacity(m.dim(), m.rows());
    let mut row = vec![0f32; m.dim()];
    for r in 0..m.rows() {
        normalise_into(m.row(r).unwrap_or(&[]), cache.row_norm(r), &mut row);
        // Same dimension by construction.
        let _ = out.push_row(&row);
    }
    out
}

/// `vector / norm` into `out` (as long as `vector`), in `f64` and rounded once; zeros for a zero
/// norm. The same vector and norm always give the same bits, which the stored index's mapping
/// relies on.
fn normalise_into(vector: &[f32], norm: f64, out: &mut [f32]) {
    for (o, x) in out.iter_mut().zip(vector) {
        *o = if norm > 0.0 {
            (f64::from(*x) / norm) as f32
        } else {
            0.0
        };
    }
}

/// The messages (indices into the thread, ascending) a cosine recall of `query` cut to `keep`
/// must score exactly, found through the index: the graph's candidates among `chosen` plus
/// every chosen message appended since the build. `None` when the index does not answer (too
/// few rows, no index yet, a selective mark, a walk that could not find `keep` chosen rows):
/// the exact scan answers then.
///
/// `chosen` must be ascending and every chosen message a row of the cache's matrix.
pub(crate) fn candidates(
    slot: &Arc<IndexSlot>,
    cache: &EmbeddingCache,
    query: &[f32],
    chosen: &[usize],
    keep: usize,
    options: &RecallIndexOptions,
) -> Option<Vec<usize>> {
    let rows = cache.matrix().rows();
    if rows < options.min_messages
        || rows == 0
        || keep == 0
        || keep >= chosen.len()
        || cache.matrix().dim() != query.len()
        || chosen.len().saturating_mul(SELECTIVE) < rows
    {
        return None;
    }
    let built = slot.usable(cache, options)?;
    let indexed = built.rows();
    let all = chosen.len() == cache.len();
    let mut is_chosen = Vec::new();
    if !all {
        is_chosen = vec![false; cache.len()];
        for &i in chosen {
            if let Some(c) = is_chosen.get_mut(i) {
                *c = true;
            }
        }
    }
    let visible = |r: usize| {
        all || cache
            .row_entry(r)
            .is_some_and(|i| is_chosen.get(i) == Some(&true))
    };
    let found = built.walk(query, keep, options.ef, |r| visible(r as usize))?;
    let mut out: Vec<usize> = found
        .iter()
        .filter_map(|&r| cache.row_entry(r as usize))
        .chain(
            (indexed..rows)
                .filter(|&r| visible(r))
                .filter_map(|r| cache.row_entry(r)),
        )
        .collect();
    out.sort_unstable();
    out.dedup();
    (out.len() >= keep).then_some(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64;

    use super::*;
    use crate::clock::test_factory;
    use crate::entry::Entry;
    use crate::retrieval::{self, RetrieveOptions, Retrieved};
    use crate::thread::{Change, ThreadState};

    /// `rows` messages around 8 centres (every `mark_every`-th marked "m"), and a query near one.
    fn thread(rows: usize, dim: usize, mark_every: usize, seed: u64) -> (ThreadState, Vec<f32>) {
        let mut rng = Pcg64::seed_from_u64(seed);
        let centres: Vec<Vec<f32>> = (0..8)
            .map(|_| (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect())
            .collect();
        let f = test_factory();
        let entries = (0..rows)
            .map(|i| {
                let v = near(&mut rng, &centres[i % centres.len()], 0.5);
                let marks = if i % mark_every == 0 {
                    vec!["m".to_owned()]
                } else {
                    vec![]
                };
                Entry::new(f.msg("n", i).embedding(v).build().unwrap(), marks)
            })
            .collect();
        let query = near(&mut rng, &centres[0], 0.5);
        (ThreadState::from_entries(entries), query)
    }

    fn near(rng: &mut Pcg64, centre: &[f32], spread: f32) -> Vec<f32> {
        centre
            .iter()
            .map(|x| x + spread * rng.random_range(-1.0f32..1.0))
            .collect()
    }

    fn inline(ef: usize) -> RecallIndexOptions {
        RecallIndexOptions {
            min_messages: 0,
            ef: Some(ef),
            background: false,
        }
    }

    fn options(top_k: usize, mark: Option<&str>) -> RetrieveOptions {
        RetrieveOptions {
            top_k: Some(top_k),
            preserve_order: false,
            mark: mark.map(str::to_owned),
            ..RetrieveOptions::default()
        }
    }

    fn key(found: &[Retrieved]) -> Vec<(usize, u64)> {
        found.iter().map(|r| (r.index, r.score.to_bits())).collect()
    }

    fn exact(state: &ThreadState, query: &[f32], o: &RetrieveOptions) -> Vec<Retrieved> {
        retrieval::score(state, query, o, None).unwrap()
    }

    fn indexed(
        state: &ThreadState,
        query: &[f32],
        o: &RetrieveOptions,
        index: &RecallIndexOptions,
    ) -> Vec<Retrieved> {
        retrieval::score(state, query, o, Some(index)).unwrap()
    }

    /// Whether the index (not the exact scan) answers this recall.
    fn answers(
        state: &ThreadState,
        query: &[f32],
        top_k: usize,
        index: &RecallIndexOptions,
    ) -> bool {
        let cache = state.embedding_cache();
        let chosen: Vec<usize> = (0..state.len()).collect();
        candidates(state.index_slot(), &cache, query, &chosen, top_k, index).is_some()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// A beam covering the index makes the recall the exact scan's, marks or not.
        #[test]
        fn a_covering_beam_gives_the_exact_recall(
            rows in 20usize..260,
            dim in 2usize..24,
            top_k in 1usize..12,
            mark_every in 1usize..4,
            seed in any::<u64>(),
        ) {
            let (state, query) = thread(rows, dim, mark_every, seed);
            let index = inline(rows);
            for mark in [None, Some("m")] {
                let o = options(top_k, mark);
                prop_assert_eq!(key(&indexed(&state, &query, &o, &index)), key(&exact(&state, &query, &o)));
            }
            prop_assert!(answers(&state, &query, top_k, &index));
        }

        /// A marked recall through the index never returns fewer messages than are marked (up to
        /// `top_k`), and every score is the exact one.
        #[test]
        fn a_marked_recall_is_never_short(
            rows in 200usize..600,
            top_k in 1usize..30,
            mark_every in 1usize..40,
            seed in any::<u64>(),
        ) {
            let (state, query) = thread(rows, 8, mark_every, seed);
            let o = options(top_k, Some("m"));
            let got = indexed(&state, &query, &o, &inline(16));
            let marked = state.marked(Some("m"), None).len();
            prop_assert_eq!(got.len(), top_k.min(marked));
            let all = exact(&state, &query, &options(rows, Some("m")));
            for r in &got {
                let same = all.iter().find(|e| e.index == r.index).map(|e| e.score.to_bits());
                prop_assert_eq!(same, Some(r.score.to_bits()));
            }
        }
    }

    /// The recall@10 of the index (which must answer, with 10 messages) against the exact scan
    /// over `queries` (the queries of seeds 7, 1007, 2007, …: the first near one of the
    /// messages' centres, the others near random points), each scaled by `scale`; `check` sees
    /// each query's messages found.
    fn recall_at_10(
        state: &ThreadState,
        index: &RecallIndexOptions,
        queries: u64,
        scale: f32,
        check: impl Fn(&[f32], &[Retrieved]),
    ) -> f64 {
        let o = options(10, None);
        let (mut hit, mut wanted) = (0, 0);
        for seed in 0..queries {
            let (_, query) = thread(0, 32, 1, 7 + 1000 * seed);
            let query: Vec<f32> = query.iter().map(|x| x * scale).collect();
            assert!(query.iter().all(|x| x.is_finite()));
            assert!(answers(state, &query, 10, index));
            let truth = exact(state, &query, &o);
            let got = indexed(state, &query, &o, index);
            assert_eq!(got.len(), 10);
            check(&query, &got);
            wanted += truth.len();
            hit += got
                .iter()
                .filter(|r| truth.iter().any(|t| t.index == r.index))
                .count();
        }
        hit as f64 / wanted as f64
    }

    #[test]
    fn a_narrow_beam_finds_nearly_every_neighbour_with_exact_scores() {
        let (state, _) = thread(4_000, 32, 1, 7);
        let index = RecallIndexOptions {
            ef: None,
            ..inline(0)
        };
        let recall = recall_at_10(&state, &index, 20, 1.0, |query, got| {
            let all = exact(&state, query, &options(4_000, None));
            for r in got {
                let score = all.iter().find(|e| e.index == r.index).map(|e| e.score);
                assert_eq!(score, Some(r.score));
            }
        });
        assert!(recall >= 0.95, "recall@10 {recall}");
    }

    /// A cosine recall does not depend on the query's length, through the index as through the
    /// exact scan: a query scaled to about 1e37 (finite, so accepted) finds nearly every
    /// neighbour (its graph scores overflowed to infinity, and the walk found whatever lay near
    /// its entry), and a zero query, whose scores all tie at 0, is left to the exact scan, which
    /// returns the first messages (the index returned those near its entry).
    #[test]
    fn the_walk_does_not_depend_on_the_query_length() {
        let (state, _) = thread(4_000, 32, 1, 7);
        let index = RecallIndexOptions {
            ef: None,
            ..inline(0)
        };
        let o = options(10, None);
        let recall = recall_at_10(&state, &index, 10, 1e37, |_, _| {});
        assert!(recall >= 0.95, "recall@10 of huge queries {recall}");
        let zero = vec![0.0; 32];
        assert!(!answers(&state, &zero, 10, &index));
        let got = indexed(&state, &zero, &o, &index);
        assert_eq!(key(&got), key(&exact(&state, &zero, &o)));
        assert_eq!(
            got.iter().map(|r| r.index).collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
    }

    #[test]
    fn appended_messages_are_found_until_the_index_is_rebuilt() {
        let (mut state, query) = thread(400, 16, 1, 3);
        let index = inline(32);
        let o = options(3, None);
        indexed(&state, &query, &o, &index);
        assert_eq!(
            state.index_slot().status(&state.embedding_cache()),
            RecallIndexStatus::Ready {
                indexed: 400,
                unindexed: 0
            }
        );
        // A message equal to the query, appended after the build, is the best match.
        let f = test_factory();
        let twin = Entry::new(
            f.msg("n", "twin").embedding(query.clone()).build().unwrap(),
            vec![],
        );
        state.apply(Change::Append(vec![twin]));
        assert_eq!(
            state.index_slot().status(&state.embedding_cache()),
            RecallIndexStatus::Ready {
                indexed: 400,
                unindexed: 1
            }
        );
        let got = indexed(&state, &query, &o, &index);
        assert_eq!(got[0].index, 400);
        assert_eq!(key(&got[..1]), key(&exact(&state, &query, &o)[..1]));
        // A tail past a quarter of the index rebuilds it over every row.
        let more: Vec<Entry> = (0..101)
            .map(|i| {
                let v = query.iter().map(|x| -x).collect();
                Entry::new(
                    f.msg("n", format!("far {i}")).embedding(v).build().unwrap(),
                    vec![],
                )
            })
            .collect();
        state.apply(Change::Append(more));
        indexed(&state, &query, &o, &index);
        assert_eq!(
            state.index_slot().status(&state.embedding_cache()),
            RecallIndexStatus::Ready {
                indexed: 502,
                unindexed: 0
            }
        );
    }

    #[test]
    fn a_removal_retires_the_index() {
        let (mut state, query) = thread(300, 8, 1, 5);
        let index = inline(32);
        let o = options(5, None);
        indexed(&state, &query, &o, &index);
        let best = exact(&state, &query, &o)[0].index;
        state.apply(Change::Remove(vec![best]));
        assert_eq!(
            state.index_slot().status(&state.embedding_cache()),
            RecallIndexStatus::Absent
        );
        // The next recall rebuilds over the remaining rows and never returns the removed one.
        let got = indexed(&state, &query, &o, &index);
        assert_eq!(key(&got), key(&exact(&state, &query, &o)));
        assert_eq!(
            state.index_slot().status(&state.embedding_cache()),
            RecallIndexStatus::Ready {
                indexed: 299,
                unindexed: 0
            }
        );
    }

    #[test]
    fn a_background_build_lets_the_exact_scan_answer_until_it_is_ready() {
        let (state, query) = thread(2_000, 16, 1, 11);
        let index = RecallIndexOptions {
            background: true,
            ..inline(16)
        };
        let o = options(5, None);
        // The first recall starts the build and is answered by the exact scan.
        assert_eq!(
            key(&indexed(&state, &query, &o, &index)),
            key(&exact(&state, &query, &o))
        );
        state.index_slot().wait(Duration::from_secs(60));
        assert_eq!(
            state.index_slot().status(&state.embedding_cache()),
            RecallIndexStatus::Ready {
                indexed: 2_000,
                unindexed: 0
            }
        );
        assert!(answers(&state, &query, 5, &index));
    }

    /// Waits (up to a minute) until more than `before` builds were abandoned.
    pub(crate) fn wait_for_abandoned_builds(before: usize) -> usize {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let now = ABANDONED_BUILDS.load(std::sync::atomic::Ordering::SeqCst);
            if now > before || std::time::Instant::now() > deadline {
                return now;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_background_build_stops_when_its_thread_is_dropped() {
        // Large enough that the build takes far longer than the drop below.
        let (state, query) = thread(20_000, 8, 1, 17);
        let index = RecallIndexOptions {
            background: true,
            ..inline(16)
        };
        let before = ABANDONED_BUILDS.load(std::sync::atomic::Ordering::SeqCst);
        indexed(&state, &query, &options(5, None), &index);
        drop(state);
        // Before the fix the build ran to its end for nobody, and none was abandoned.
        assert!(wait_for_abandoned_builds(before) > before);
    }

    #[test]
    fn small_threads_selective_marks_and_forced_exact_scans_skip_the_index() {
        let (state, query) = thread(1_000, 8, 50, 13);
        let index = RecallIndexOptions {
            min_messages: 1_001,
            ..inline(16)
        };
        assert!(!answers(&state, &query, 5, &index));
        let index = inline(16);
        let cache = state.embedding_cache();
        // 20 marked rows of 1,000: fewer than one in SELECTIVE.
        let marked = state.marked(Some("m"), None);
        assert_eq!(marked.len(), 20);
        assert!(candidates(state.index_slot(), &cache, &query, &marked, 5, &index).is_none());
        let o = RetrieveOptions {
            exact: true,
            ..options(5, None)
        };
        indexed(&state, &query, &o, &index);
        assert_eq!(state.index_slot().status(&cache), RecallIndexStatus::Absent);
    }

    #[test]
    fn extreme_and_zero_embeddings_are_indexed_and_scored_exactly() {
        let f = test_factory();
        let mut vectors: Vec<Vec<f32>> = (0..64).map(|i| vec![i as f32, 1.0]).collect();
        vectors.push(vec![f32::MAX, f32::MAX]);
        vectors.push(vec![0.0, 0.0]);
        vectors.push(vec![f32::MIN_POSITIVE, -f32::MIN_POSITIVE]);
        let entries = vectors
            .into_iter()
            .enumerate()
            .map(|(i, v)| Entry::new(f.msg("n", i).embedding(v).build().unwrap(), vec![]))
            .collect();
        let state = ThreadState::from_entries(entries);
        let query = [1.0, 0.5];
        let index = inline(67);
        for top_k in [1, 3, 66] {
            let o = options(top_k, None);
            let got = indexed(&state, &query, &o, &index);
            assert_eq!(key(&got), key(&exact(&state, &query, &o)), "top {top_k}");
        }
        assert!(answers(&state, &query, 3, &index));
    }
}
