//! Embedding retrieval (spec/memory.md §6): metrics, the cached embedding matrix and scoring.
//!
//! Scores come from `mnemon-vector`'s SIMD kernels, the same ones the embedding library uses.
//! Cosine divides the kernel's dot product by row norms cached with the matrix, so a warm
//! query reads each embedding once.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use mnemon_types::{Embedder, Msg};
use rayon::prelude::*;
use serde::Serialize;

use crate::error::MemoryError;
use crate::thread::{Entry, ThreadState};

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
}

impl Default for RetrieveOptions {
    fn default() -> Self {
        RetrieveOptions {
            metric: Metric::Cosine,
            top_k: Some(1),
            preserve_order: true,
            mark: None,
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

/// The embeddings of a thread as one contiguous `f32` block, with row norms.
#[derive(Debug, Default)]
pub(crate) struct EmbeddingCache {
    data: Vec<f32>,
    /// Per entry: the start and length of its row in `data`, if it has an embedding.
    rows: Vec<Option<(usize, usize)>>,
    norms: Vec<f64>,
}

impl EmbeddingCache {
    pub(crate) fn build(entries: &[Entry]) -> Self {
        let mut cache = EmbeddingCache {
            data: Vec::new(),
            rows: Vec::with_capacity(entries.len()),
            norms: Vec::with_capacity(entries.len()),
        };
        for entry in entries {
            match entry.msg.embedding() {
                Some(row) => {
                    let start = cache.data.len();
                    cache
                        .norms
                        .push(f64::from(mnemon_vector::dot(&row, &row)).sqrt());
                    cache.data.extend_from_slice(&row);
                    cache.rows.push(Some((start, row.len())));
                }
                None => {
                    cache.rows.push(None);
                    cache.norms.push(0.0);
                }
            }
        }
        cache
    }

    pub(crate) fn row(&self, index: usize) -> Option<&[f32]> {
        let (start, len) = (*self.rows.get(index)?)?;
        self.data.get(start..start + len)
    }
}

/// Ids and embedding texts of the candidates that lack an embedding, in memory order.
pub(crate) fn missing_embeddings(state: &ThreadState, mark: Option<&str>) -> Vec<(String, String)> {
    candidates(state, mark)
        .into_iter()
        .filter_map(|i| state.entries().get(i))
        .filter(|e| !e.msg.has_embedding())
        .map(|e| (e.msg.id().to_owned(), e.msg.content_text()))
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
        if vectors.len() != batch.len() {
            return Err(MemoryError::EmbedderContract {
                model: model(),
                detail: format!("{} vectors for {} texts", vectors.len(), batch.len()),
            });
        }
        for v in &vectors {
            if v.len() != embedder.dimension() || v.is_empty() {
                return Err(MemoryError::EmbedderContract {
                    model: model(),
                    detail: format!(
                        "a vector of length {} where dimension() is {}",
                        v.len(),
                        embedder.dimension()
                    ),
                });
            }
            if v.iter().any(|x| !x.is_finite()) {
                return Err(MemoryError::EmbedderContract {
                    model: model(),
                    detail: "a vector with a NaN or infinite number".into(),
                });
            }
        }
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

/// Scores the candidates (every one must have an embedding) and ranks them (§6.2 steps 3–6).
pub(crate) fn score(
    state: &ThreadState,
    query: &[f32],
    options: &RetrieveOptions,
) -> Result<Vec<Retrieved>, MemoryError> {
    let cache = state.embedding_cache();
    let chosen = candidates(state, options.mark.as_deref());
    let id_of = |i: usize| {
        state
            .entries()
            .get(i)
            .map(|e| e.msg.id().to_owned())
            .unwrap_or_default()
    };
    let missing: Vec<usize> = chosen
        .iter()
        .copied()
        .filter(|&i| cache.row(i).is_none())
        .collect();
    if let Some(&first) = missing.first() {
        return Err(MemoryError::MissingEmbedding {
            id: id_of(first),
            missing: missing.len(),
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
    let query_norm = f64::from(mnemon_vector::dot(query, query)).sqrt();
    let score_one = |i: usize| -> (f64, usize) {
        let row = cache.row(i).unwrap_or_default();
        let s = match &options.metric {
            Metric::Cosine => {
                let norm = cache.norms.get(i).copied().unwrap_or(0.0);
                if query_norm == 0.0 || norm == 0.0 {
                    0.0
                } else {
                    f64::from(mnemon_vector::dot(query, row)) / (query_norm * norm)
                }
            }
            Metric::Dot => f64::from(mnemon_vector::dot(query, row)),
            Metric::NegEuclidean => -f64::from(mnemon_vector::squared_l2(query, row)).sqrt(),
            Metric::Custom(f) => f(query, row),
        };
        (s, i)
    };
    let mut scored: Vec<(f64, usize)> = if chosen.len().saturating_mul(query.len()) >= PARALLEL_WORK
    {
        chosen
            .par_iter()
            .with_min_len(256)
            .map(|&i| score_one(i))
            .collect()
    } else {
        chosen.iter().map(|&i| score_one(i)).collect()
    };
    let keep = options.top_k.map_or(scored.len(), |k| k.min(scored.len()));
    if keep == 0 {
        return Ok(Vec::new());
    }
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
            let message = state.entries().get(index)?.msg.clone();
            Some(Retrieved {
                score,
                index,
                message,
            })
        })
        .collect())
}

/// Highest score first, NaN last, ties by lower index.
fn rank(a: &(f64, usize), b: &(f64, usize)) -> Ordering {
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
            cache.row(i).map(<[f32]>::to_vec).ok_or_else(|| {
                let missing = (0..state.len()).filter(|&j| cache.row(j).is_none()).count();
                MemoryError::MissingEmbedding {
                    id: state
                        .entries()
                        .get(i)
                        .map(|e| e.msg.id().to_owned())
                        .unwrap_or_default(),
                    missing,
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_orders_nan_last_and_ties_by_index() {
        let mut v = [(0.5, 3), (f64::NAN, 0), (0.9, 2), (0.5, 1)];
        v.sort_by(rank);
        let order: Vec<usize> = v.iter().map(|x| x.1).collect();
        assert_eq!(order, vec![2, 1, 3, 0]);
    }
}
