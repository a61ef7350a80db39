//! Embedding retrieval (docs/reference/memory.md#recall-by-embedding): metrics, queries and
//! scoring.
//!
//! Returned scores are the spec's: the built-in metrics accumulate in `f64`, always in the same
//! order ([`crate::exact`]). Reading 10k × 1536 floats that way on every query would miss the
//! 5 ms target, so a cut to `top_k` runs in two phases: `mnemon-vector`'s SIMD `f32` scan (the
//! kernel the embedding library uses) over the cached matrix shortlists every message that can
//! still make the cut, with a proven error bound (see [`shortlist`]), and only the shortlist is
//! scored exactly. The result — which messages, in which order, with which scores — is exactly
//! that of scoring everything in `f64`; a unit test checks it against that on near-ties.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use mnemon_types::{Embedder, Msg, check_embeddings};
use rayon::prelude::*;
use serde::Serialize;

use crate::embedding_cache::EmbeddingCache;
use crate::error::MemoryError;
use crate::exact;
use crate::recall_index::{self, RecallIndexOptions};
use crate::thread::ThreadState;

/// A caller's metric: `(query, embedding) -> score`, larger is closer.
pub type ScoreFn = dyn Fn(&[f32], &[f32]) -> f64 + Send + Sync;

/// How a query vector and an embedding are scored; larger is closer.
#[derive(Clone, Default)]
pub enum Metric {
    /// dot / (‖q‖·‖e‖); 0 when either norm is 0.
    #[default]
    Cosine,
    /// Σ qᵢeᵢ.
    Dot,
    /// −√Σ(qᵢ−eᵢ)².
    NegEuclidean,
    /// A caller's function of (query, embedding).
    Custom(Arc<ScoreFn>),
}

impl fmt::Debug for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Metric::Cosine => "Cosine",
            Metric::Dot => "Dot",
            Metric::NegEuclidean => "NegEuclidean",
            Metric::Custom(_) => "Custom(<fn>)",
        })
    }
}

/// What to retrieve with.
// Built once per call and consumed at once; boxing the message would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum RetrievalQuery {
    /// A query vector, used as given.
    Vector(Vec<f32>),
    /// A text, embedded by the embedder.
    Text(String),
    /// A message: its embedding, or else its embedded content text.
    Message(Msg),
}

/// Options of [`Memory::retrieve_by_embedding`](crate::Memory::retrieve_by_embedding).
#[derive(Debug, Clone)]
pub struct RetrieveOptions {
    /// The metric (default cosine).
    pub metric: Metric,
    /// How many to return: `None` all, default `Some(1)` as the reference.
    pub top_k: Option<usize>,
    /// Return the kept results in memory order instead of score order (default true, as the
    /// reference).
    pub preserve_order: bool,
    /// Consider only messages carrying this mark.
    pub mark: Option<String>,
    /// Always scan every candidate exactly, never through the thread's
    /// [recall index](crate::RecallIndexOptions) (default false: a large thread's cosine
    /// recall cut to `top_k` uses it; docs/reference/memory.md#the-recall-index).
    pub exact: bool,
    /// Return each message with its embedding (default true, as the reference). `false`
    /// leaves a `null` in the message's `embedding` extra, for callers that show the messages
    /// without their numbers: rebuilding a 1,536-dimension embedding as JSON numbers costs more
    /// than scoring a small thread (docs/reference/memory.md#recall-without-embeddings).
    pub with_embeddings: bool,
}

impl Default for RetrieveOptions {
    fn default() -> Self {
        RetrieveOptions {
            metric: Metric::Cosine,
            top_k: Some(1),
            preserve_order: true,
            mark: None,
            exact: false,
            with_embeddings: true,
        }
    }
}

/// One retrieved message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Retrieved {
    /// The score (larger is closer).
    pub score: f64,
    /// The message's position in the whole memory.
    pub index: usize,
    /// The message.
    pub message: Msg,
}

/// Ids and embedding texts of the candidates that lack an embedding, in memory order.
pub(crate) fn missing_embeddings(state: &ThreadState, mark: Option<&str>) -> Vec<(String, String)> {
    let cache = state.embedding_cache();
    if cache.missing() == 0 {
        return Vec::new();
    }
    candidates(state, mark)
        .into_iter()
        .filter(|&i| !cache.has(i))
        .filter_map(|i| state.entries().get(i))
        .map(|e| (e.id().to_owned(), e.msg_without_embedding().content_text()))
        .collect()
}

fn candidates(state: &ThreadState, mark: Option<&str>) -> Vec<usize> {
    match mark {
        Some(_) => state.marked(mark, None),
        None => (0..state.len()).collect(),
    }
}

/// The largest batch handed to an embedder at once.
pub(crate) const EMBED_BATCH: usize = 256;

/// Embeds `texts` in batches, checking the embedder's contract.
pub(crate) fn embed_texts(
    embedder: &dyn Embedder,
    texts: &[&str],
) -> Result<Vec<Vec<f32>>, MemoryError> {
    let model = || embedder.model().to_owned();
    let mut out = Vec::with_capacity(texts.len());
    for batch in texts.chunks(EMBED_BATCH) {
        let vectors = embedder.embed(batch).map_err(|e| MemoryError::Embedder {
            model: model(),
            detail: e.message.clone(),
        })?;
        // The contract every embedder's caller checks (count, dimension, finite numbers).
        check_embeddings(embedder.dimension(), batch.len(), &vectors).map_err(|e| {
            MemoryError::EmbedderContract {
                model: model(),
                detail: e.to_string(),
            }
        })?;
        out.extend(vectors);
    }
    Ok(out)
}

/// The query vector of `query`.
pub(crate) fn query_vector(
    query: RetrievalQuery,
    embedder: Option<&dyn Embedder>,
) -> Result<Vec<f32>, MemoryError> {
    let text = match query {
        RetrievalQuery::Vector(v) => {
            if v.is_empty() {
                return Err(MemoryError::InvalidQuery {
                    reason: "the query vector is empty".into(),
                });
            }
            return Ok(v);
        }
        RetrievalQuery::Message(msg) => match msg.embedding() {
            Some(v) => return Ok(v),
            None => msg.content_text(),
        },
        RetrievalQuery::Text(text) => text,
    };
    let embedder = embedder.ok_or(MemoryError::QueryNeedsEmbedder)?;
    embed_texts(embedder, &[text.as_str()])?
        .pop()
        .ok_or_else(|| MemoryError::EmbedderContract {
            model: embedder.model().to_owned(),
            detail: "no vector for the query".into(),
        })
}

/// Below this many multiply-adds, scoring stays on one thread.
const PARALLEL_WORK: usize = 1 << 18;

/// From this many multiply-adds on, a cut to `top_k` selects with the SIMD `f32` scan first.
const TWO_PHASE_WORK: usize = 1 << 16;

/// Scores the candidates (every one must have an embedding) and ranks them
/// (docs/reference/memory.md#retrieval-steps steps 3–6).
/// `index` is the backend's recall index policy (`None`: never, as PostgreSQL, which has
/// pgvector).
pub(crate) fn score(
    state: &ThreadState,
    query: &[f32],
    options: &RetrieveOptions,
    index: Option<&RecallIndexOptions>,
) -> Result<Vec<Retrieved>, MemoryError> {
    score_with(
        state,
        query,
        options,
        TWO_PHASE_WORK,
        Unembedded::Refuse,
        index,
    )
}

/// [`score`] over the candidates that have an embedding, leaving out those without one: for a
/// recall that has embedded every message it found without one, so that any still without one
/// was added by another writer while it ran (docs/reference/memory.md#retrieval-steps).
pub(crate) fn score_embedded(
    state: &ThreadState,
    query: &[f32],
    options: &RetrieveOptions,
    index: Option<&RecallIndexOptions>,
) -> Result<Vec<Retrieved>, MemoryError> {
    score_with(
        state,
        query,
        options,
        TWO_PHASE_WORK,
        Unembedded::Skip,
        index,
    )
}

/// What scoring does with a candidate without an embedding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unembedded {
    /// Refuse the recall ([`MemoryError::MissingEmbedding`]).
    Refuse,
    /// Leave the candidate out.
    Skip,
}

/// [`score`], taking the two-phase path from `two_phase_work` multiply-adds on (tests lower it).
fn score_with(
    state: &ThreadState,
    query: &[f32],
    options: &RetrieveOptions,
    two_phase_work: usize,
    unembedded: Unembedded,
    index: Option<&RecallIndexOptions>,
) -> Result<Vec<Retrieved>, MemoryError> {
    let cache = state.embedding_cache();
    let mut chosen = candidates(state, options.mark.as_deref());
    if unembedded == Unembedded::Skip {
        chosen.retain(|&i| cache.has(i));
    }
    let id_of = |i: usize| {
        state
            .entries()
            .get(i)
            .map(|e| e.id().to_owned())
            .unwrap_or_default()
    };
    let mut missing = chosen.iter().copied().filter(|&i| !cache.has(i));
    if let Some(first) = missing.next() {
        return Err(MemoryError::MissingEmbedding {
            id: id_of(first),
            missing: 1 + missing.count(),
        });
    }
    if let Some(&bad) = chosen
        .iter()
        .find(|&&i| cache.row(i).is_some_and(|r| r.len() != query.len()))
    {
        return Err(MemoryError::DimensionMismatch {
            id: id_of(bad),
            expected: query.len(),
            found: cache.row(bad).map_or(0, <[f32]>::len),
        });
    }
    let keep = options.top_k.map_or(chosen.len(), |k| k.min(chosen.len()));
    if keep == 0 {
        return Ok(Vec::new());
    }
    let scorer = ExactScorer::new(&cache, query, &options.metric);
    // A large thread's cosine top-k: the index's candidates, scored exactly.
    let indexed = match index {
        Some(index)
            if !options.exact
                && matches!(options.metric, Metric::Cosine)
                && query.iter().all(|x| x.is_finite()) =>
        {
            recall_index::candidates(state.index_slot(), &cache, query, &chosen, keep, index)
        }
        _ => None,
    };
    let two_phase = indexed.is_none()
        && keep < chosen.len()
        && chosen.len().saturating_mul(query.len()) >= two_phase_work
        && !matches!(options.metric, Metric::Custom(_));
    let mut scored = indexed
        .or_else(|| {
            two_phase
                .then(|| shortlist(&cache, query, &options.metric, &chosen, keep))
                .flatten()
        })
        .map_or_else(
            || scorer.score_all(&chosen),
            |short| scorer.score_all(&short),
        );
    if keep < scored.len() {
        scored.select_nth_unstable_by(keep - 1, rank);
        scored.truncate(keep);
    }
    scored.sort_by(rank);
    if options.preserve_order {
        scored.sort_by_key(|&(_, i)| i);
    }
    Ok(scored
        .into_iter()
        .filter_map(|(score, index)| {
            let message = state
                .entries()
                .get(index)?
                .message_for(options.with_embeddings);
            Some(Retrieved {
                score,
                index,
                message,
            })
        })
        .collect())
}

/// The spec's scores: `f64` accumulation in a fixed order ([`crate::exact`]), or the caller's
/// function.
struct ExactScorer<'a> {
    cache: &'a EmbeddingCache,
    query: &'a [f32],
    query_norm: f64,
    metric: &'a Metric,
}

impl<'a> ExactScorer<'a> {
    fn new(cache: &'a EmbeddingCache, query: &'a [f32], metric: &'a Metric) -> Self {
        ExactScorer {
            cache,
            query,
            query_norm: exact::norm(query),
            metric,
        }
    }

    fn score(&self, i: usize) -> (f64, usize) {
        let row = self.cache.row(i).unwrap_or_default();
        let s = match self.metric {
            Metric::Cosine => exact::cosine_with_norms(
                exact::dot(self.query, row),
                self.query_norm,
                self.cache.norm(i),
            ),
            Metric::Dot => exact::dot(self.query, row),
            Metric::NegEuclidean => -exact::squared_l2(self.query, row).sqrt(),
            Metric::Custom(f) => f(self.query, row),
        };
        (s, i)
    }

    fn score_all(&self, indices: &[usize]) -> Vec<(f64, usize)> {
        if indices.len().saturating_mul(self.query.len()) >= PARALLEL_WORK {
            indices
                .par_iter()
                .with_min_len(256)
                .map(|&i| self.score(i))
                .collect()
        } else {
            indices.iter().map(|&i| self.score(i)).collect()
        }
    }
}

/// Phase one of a top-k cut: the candidates that can still be among the `keep` best once scored
/// exactly, found with the SIMD `f32` scan of the whole matrix.
///
/// Each `f32` score `a` comes with a bound `e` on its distance from the exact `f64` score (the
/// forward error of an `f32` sum of n products is at most γₙ·Σ|qᵢeᵢ| ≤ n·2⁻²⁴·‖q‖‖e‖ whatever
/// the summation order; the bound used is twice that, plus slack for underflow). If `L` is the
/// lowest `a − e` among the messages whose `a` reaches the `keep`-th best, those (at least
/// `keep`) messages all score at least `L` exactly, so a message with `a + e < L` cannot make the
/// cut: it is dropped, and only the rest are scored exactly. The result is therefore the same as
/// scoring everything exactly.
///
/// Returns `None` (score everything exactly) when a candidate is not in the matrix, the query is
/// not finite, or an approximate score overflows.
fn shortlist(
    cache: &EmbeddingCache,
    query: &[f32],
    metric: &Metric,
    chosen: &[usize],
    keep: usize,
) -> Option<Vec<usize>> {
    let view = cache.matrix().view();
    if view.dim() != query.len() || !query.iter().all(|x| x.is_finite()) {
        return None;
    }
    let kernel: fn(&[f32], &[f32]) -> Result<f32, mnemon_vector::VectorError> = match metric {
        Metric::Cosine | Metric::Dot => mnemon_vector::dot,
        Metric::NegEuclidean => mnemon_vector::neg_euclidean,
        Metric::Custom(_) => return None,
    };
    let n = query.len() as f64;
    let relative = (n + 8.0) * f64::powi(2.0, -23);
    let underflow = n * f64::powi(2.0, -120);
    let query_norm = exact::norm(query);
    // Only the candidates' rows are read (a mark may select few), in parallel and in order.
    // A non-finite value (overflow, or a row outside the matrix) marks the whole scan unusable.
    let bound = |&i: &usize| -> (f64, f64) {
        let Some((r, row)) = cache.matrix_row(i).and_then(|r| Some((r, view.row(r)?))) else {
            return (f64::NAN, f64::NAN);
        };
        let Ok(raw) = kernel(row, query).map(f64::from) else {
            return (f64::NAN, f64::NAN);
        };
        let norm = cache.row_norm(r);
        match metric {
            Metric::Dot => (raw, relative * query_norm * norm + underflow),
            Metric::Cosine if query_norm == 0.0 || norm == 0.0 => (0.0, 0.0),
            Metric::Cosine => {
                let scale = query_norm * norm;
                (raw / scale, relative + underflow / scale)
            }
            _ => (raw, relative * raw.abs() + underflow.sqrt()),
        }
    };
    let bounded: Vec<(f64, f64)> = chosen.par_iter().with_min_len(512).map(bound).collect();
    if keep == 0
        || keep >= bounded.len()
        || !bounded.iter().all(|(a, e)| a.is_finite() && e.is_finite())
    {
        return None;
    }
    // The keep-th best approximate score; every message scoring at least that is among the
    // best (ties may add more, which only lowers the floor and keeps the argument sound).
    let mut approx: Vec<f64> = bounded.iter().map(|&(a, _)| a).collect();
    let (_, &mut kth, _) = approx.select_nth_unstable_by(keep - 1, |x, y| y.total_cmp(x));
    let floor = bounded
        .iter()
        .filter(|&&(a, _)| a >= kth)
        .map(|&(a, e)| a - e)
        .fold(f64::INFINITY, f64::min);
    Some(
        bounded
            .iter()
            .zip(chosen)
            .filter(|&(&(a, e), _)| a + e >= floor)
            .map(|(_, &i)| i)
            .collect(),
    )
}

/// Highest score first, NaN last, ties by lower index.
pub(crate) fn rank(a: &(f64, usize), b: &(f64, usize)) -> Ordering {
    match (a.0.is_nan(), b.0.is_nan()) {
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (true, true) => a.1.cmp(&b.1),
        (false, false) => {
            b.0.partial_cmp(&a.0)
                .unwrap_or(Ordering::Equal)
                .then(a.1.cmp(&b.1))
        }
    }
}

/// Every entry's embedding (each must have one), in order.
pub(crate) fn all_embeddings(state: &ThreadState) -> Result<Vec<Vec<f32>>, MemoryError> {
    let cache = state.embedding_cache();
    (0..state.len())
        .map(|i| {
            cache
                .row(i)
                .map(<[f32]>::to_vec)
                .ok_or_else(|| MemoryError::MissingEmbedding {
                    id: state
                        .entries()
                        .get(i)
                        .map(|e| e.id().to_owned())
                        .unwrap_or_default(),
                    missing: cache.missing(),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::test_factory;
    use crate::entry::Entry;
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64;

    /// Rows clustered around a few centres with tiny perturbations, so that many `f32` scores
    /// tie or nearly tie at the cut; every third row is marked.
    fn clustered_state(rows: usize, dim: usize, seed: u64) -> (ThreadState, Vec<f32>) {
        let mut rng = Pcg64::seed_from_u64(seed);
        let centres: Vec<Vec<f32>> = (0..3)
            .map(|_| (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect())
            .collect();
        let f = test_factory();
        let entries = (0..rows)
            .map(|i| {
                let centre = &centres[i % centres.len()];
                let jitter = [0.0f32, 1e-7, 1e-6, 1e-4][rng.random_range(0..4)];
                let v: Vec<f32> = centre
                    .iter()
                    .map(|x| x + jitter * rng.random_range(-1.0f32..1.0))
                    .collect();
                Entry::new(
                    f.msg("n", i).embedding(v).build().unwrap(),
                    if i % 3 == 0 { vec!["m".into()] } else { vec![] },
                )
            })
            .collect();
        let query = centres[0]
            .iter()
            .map(|x| x + 1e-3 * rng.random_range(-1.0f32..1.0))
            .collect();
        (ThreadState::from_entries(entries), query)
    }

    #[test]
    fn two_phase_equals_scoring_everything_exactly() {
        for (seed, dim) in [(1, 7), (2, 64), (3, 300)] {
            let (state, query) = clustered_state(600, dim, seed);
            for metric in [Metric::Cosine, Metric::Dot, Metric::NegEuclidean] {
                for top_k in [1, 2, 5, 37, 199, 599] {
                    for mark in [None, Some("m".to_owned())] {
                        let options = RetrieveOptions {
                            metric: metric.clone(),
                            top_k: Some(top_k),
                            preserve_order: false,
                            mark,
                            exact: false,
                            with_embeddings: true,
                        };
                        let key = |r: Vec<Retrieved>| {
                            r.into_iter()
                                .map(|r| (r.index, r.score))
                                .collect::<Vec<_>>()
                        };
                        let fast =
                            key(
                                score_with(&state, &query, &options, 0, Unembedded::Refuse, None)
                                    .unwrap(),
                            );
                        let slow = key(score_with(
                            &state,
                            &query,
                            &options,
                            usize::MAX,
                            Unembedded::Refuse,
                            None,
                        )
                        .unwrap());
                        assert_eq!(fast, slow, "{metric:?} top {top_k} dim {dim}");
                    }
                }
            }
        }
    }

    proptest::proptest! {
        /// Rows drawn from few values, so exact and near ties are common.
        #[test]
        fn two_phase_equals_exact_on_arbitrary_rows(
            rows in proptest::collection::vec(
                proptest::collection::vec(proptest::sample::select(vec![-1.0f32, -0.5, 0.0, 1e-7, 0.25, 1.0, 3.0]), 6),
                2..60,
            ),
            query in proptest::collection::vec(-2.0f32..2.0, 6),
            top_k in 1usize..20,
            metric in 0usize..3,
        ) {
            let f = test_factory();
            let entries = rows
                .into_iter()
                .enumerate()
                .map(|(i, v)| Entry::new(f.msg("n", i).embedding(v).build().unwrap(), vec![]))
                .collect();
            let state = ThreadState::from_entries(entries);
            let options = RetrieveOptions {
                metric: [Metric::Cosine, Metric::Dot, Metric::NegEuclidean][metric].clone(),
                top_k: Some(top_k),
                preserve_order: false,
                mark: None,
                exact: false,
                with_embeddings: true,
            };
            let key = |r: Vec<Retrieved>| r.into_iter().map(|r| (r.index, r.score)).collect::<Vec<_>>();
            let fast = key(score_with(&state, &query, &options, 0, Unembedded::Refuse, None).unwrap());
            let slow = key(score_with(&state, &query, &options, usize::MAX, Unembedded::Refuse, None).unwrap());
            proptest::prop_assert_eq!(fast, slow);
        }
    }

    #[test]
    fn shortlist_is_short_when_scores_spread() {
        let mut rng = Pcg64::seed_from_u64(5);
        let f = test_factory();
        let entries: Vec<Entry> = (0..2000)
            .map(|i| {
                let v = (0..256).map(|_| rng.random_range(-1.0f32..1.0)).collect();
                Entry::new(f.msg("n", i).embedding(v).build().unwrap(), vec![])
            })
            .collect();
        let state = ThreadState::from_entries(entries);
        let query: Vec<f32> = (0..256).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let chosen: Vec<usize> = (0..2000).collect();
        let cache = state.embedding_cache();
        for metric in [Metric::Cosine, Metric::Dot, Metric::NegEuclidean] {
            let short = shortlist(&cache, &query, &metric, &chosen, 10).unwrap();
            assert!(
                (10..40).contains(&short.len()),
                "{metric:?}: {}",
                short.len()
            );
        }
        assert!(shortlist(&cache, &query[1..], &Metric::Cosine, &chosen, 10).is_none());
    }

    #[test]
    fn scores_are_exact_f64() {
        let f = test_factory();
        let e = vec![0.12f32, -0.5, 0.33, 0.8];
        let state = ThreadState::from_entries(vec![Entry::new(
            f.msg("n", "c").embedding(e.clone()).build().unwrap(),
            vec![],
        )]);
        let q = [0.1f32, 0.2, 0.3, 0.4];
        let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
        let (q64, e64) = (wide(&q), wide(&e));
        let dot: f64 = q64.iter().zip(&e64).map(|(a, b)| a * b).sum();
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let got = score_with(
            &state,
            &q,
            &RetrieveOptions::default(),
            0,
            Unembedded::Refuse,
            None,
        )
        .unwrap();
        assert!((got[0].score - dot / (norm(&q64) * norm(&e64))).abs() < 1e-15);
    }

    #[test]
    fn non_finite_queries_fall_back_to_exact_scoring() {
        let (state, mut query) = clustered_state(50, 16, 9);
        query[3] = f32::NAN;
        let options = RetrieveOptions {
            top_k: Some(3),
            ..RetrieveOptions::default()
        };
        let got = score_with(&state, &query, &options, 0, Unembedded::Refuse, None).unwrap();
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|r| r.score.is_nan()));
        assert_eq!(
            got.iter().map(|r| r.index).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
    }

    #[test]
    fn rank_orders_nan_last_and_ties_by_index() {
        let mut v = [(0.5, 3), (f64::NAN, 0), (0.9, 2), (0.5, 1)];
        v.sort_by(rank);
        let order: Vec<usize> = v.iter().map(|x| x.1).collect();
        assert_eq!(order, vec![2, 1, 3, 0]);
    }
}
