//! The retrieval cache of one thread (docs/reference/memory.md#numbers-and-the-cache): every
//! embedding as an `f32` row of one contiguous, 64-byte-aligned [`Matrix`], with exact row norms.
//!
//! The cache follows the thread incrementally: appended messages append rows, and embeddings
//! stored later for messages that had none append rows too (rows need not be in message order;
//! each row remembers its message). Only removals and rewrites of existing embeddings rebuild it.
//!
//! Embeddings whose length differs from the matrix's dimension (a memory mixing two embedders)
//! are kept aside as "odd" rows; queries touching them take the exact path of
//! [`crate::retrieval`], which never needs the matrix.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use mnemon_vector::Matrix;

use crate::entry::Entry;
use crate::exact;

/// Where one message's embedding lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// The message has no embedding.
    Missing,
    /// Row `r` of the matrix.
    Row(usize),
    /// Entry `o` of the odd rows (length differs from the matrix's dimension).
    Odd(usize),
}

/// The embeddings of a thread, one matrix row per message that has one.
#[derive(Debug)]
pub(crate) struct EmbeddingCache {
    matrix: Matrix,
    /// Per message, in memory order.
    slots: Vec<Slot>,
    /// Per matrix row: the message's index.
    row_entry: Vec<usize>,
    /// Per matrix row: the exact (f64, fixed order) Euclidean norm of the row.
    row_norms: Vec<f64>,
    /// Embeddings whose length differs from the matrix's dimension, with their norms.
    odd: Vec<(Vec<f32>, f64)>,
    missing: usize,
    /// Unique to this cache since it was built: kept while rows are only appended, so a
    /// recall index built over its first rows stays valid for it (`crate::recall_index`).
    lineage: u64,
}

/// The next [`EmbeddingCache::lineage`].
static NEXT_LINEAGE: AtomicU64 = AtomicU64::new(1);

impl EmbeddingCache {
    /// The cache of `entries`. The matrix takes the most common embedding length, so one stray
    /// vector cannot push every other row aside.
    pub(crate) fn build(entries: &[Entry]) -> Self {
        let vectors: Vec<Option<Vec<f32>>> = entries.iter().map(Entry::embedding).collect();
        let mut counts: HashMap<usize, usize> = HashMap::new();
        for v in vectors.iter().flatten() {
            *counts.entry(v.len()).or_default() += 1;
        }
        // Ties go to the smaller dimension so the choice does not depend on hash order.
        let dim = counts
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
            .map_or(0, |(dim, _)| dim);
        let rows = vectors
            .iter()
            .filter(|v| v.as_ref().is_some_and(|v| v.len() == dim))
            .count();
        let mut cache = EmbeddingCache {
            matrix: Matrix::with_capacity(dim, rows),
            slots: Vec::with_capacity(entries.len()),
            row_entry: Vec::with_capacity(rows),
            row_norms: Vec::with_capacity(rows),
            odd: Vec::new(),
            missing: 0,
            lineage: NEXT_LINEAGE.fetch_add(1, Ordering::Relaxed),
        };
        for vector in vectors {
            cache.push(vector);
        }
        cache
    }

    /// Appends the slots of messages added at the end of the thread.
    pub(crate) fn append(&mut self, entries: &[Entry]) {
        let with_embedding = entries.iter().filter(|e| e.has_embedding()).count();
        self.matrix.reserve(with_embedding);
        self.row_entry.reserve(with_embedding);
        self.row_norms.reserve(with_embedding);
        self.slots.reserve(entries.len());
        for entry in entries {
            self.push(entry.embedding());
        }
    }

    /// Records the embedding stored for message `index`, which had none. Returns false (and
    /// changes nothing) when the message already had one or is unknown: the caller rebuilds.
    pub(crate) fn fill(&mut self, index: usize, vector: Vec<f32>) -> bool {
        if self.slots.get(index) != Some(&Slot::Missing) {
            return false;
        }
        let slot = self.place(index, vector);
        if let Some(s) = self.slots.get_mut(index) {
            *s = slot;
            self.missing -= 1;
        }
        true
    }

    fn push(&mut self, vector: Option<Vec<f32>>) {
        let index = self.slots.len();
        let slot = match vector {
            None => {
                self.missing += 1;
                Slot::Missing
            }
            Some(v) => self.place(index, v),
        };
        self.slots.push(slot);
    }

    /// Stores `vector` for message `index` and returns its slot.
    fn place(&mut self, index: usize, vector: Vec<f32>) -> Slot {
        let norm = exact::norm(&vector);
        if self.matrix.is_empty() && self.matrix.dim() == 0 {
            // The first embedding decides the dimension of an incrementally built matrix.
            self.matrix = Matrix::new(vector.len());
        }
        if self.matrix.push_row(&vector).is_ok() {
            self.row_entry.push(index);
            self.row_norms.push(norm);
            Slot::Row(self.row_entry.len() - 1)
        } else {
            self.odd.push((vector, norm));
            Slot::Odd(self.odd.len() - 1)
        }
    }

    /// How many messages the cache describes.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether message `index` has an embedding.
    pub(crate) fn has(&self, index: usize) -> bool {
        matches!(self.slots.get(index), Some(Slot::Row(_) | Slot::Odd(_)))
    }

    /// How many messages lack an embedding.
    pub(crate) fn missing(&self) -> usize {
        self.missing
    }

    /// Message `index`'s embedding.
    pub(crate) fn row(&self, index: usize) -> Option<&[f32]> {
        match *self.slots.get(index)? {
            Slot::Missing => None,
            Slot::Row(r) => self.matrix.row(r),
            Slot::Odd(o) => self.odd.get(o).map(|(v, _)| v.as_slice()),
        }
    }

    /// The exact norm of message `index`'s embedding (0 without one).
    pub(crate) fn norm(&self, index: usize) -> f64 {
        match self.slots.get(index) {
            Some(&Slot::Row(r)) => self.row_norms.get(r).copied().unwrap_or(0.0),
            Some(&Slot::Odd(o)) => self.odd.get(o).map_or(0.0, |(_, n)| *n),
            _ => 0.0,
        }
    }

    /// Message `index`'s matrix row, if it is in the matrix.
    pub(crate) fn matrix_row(&self, index: usize) -> Option<usize> {
        match self.slots.get(index) {
            Some(&Slot::Row(r)) => Some(r),
            _ => None,
        }
    }

    /// The matrix (every embedding of the common dimension).
    pub(crate) fn matrix(&self) -> &Matrix {
        &self.matrix
    }

    /// The message of matrix row `r`.
    pub(crate) fn row_entry(&self, r: usize) -> Option<usize> {
        self.row_entry.get(r).copied()
    }

    /// This cache's lineage: the same from its build through every append and fill, and
    /// never another cache's.
    pub(crate) fn lineage(&self) -> u64 {
        self.lineage
    }

    /// The exact norm of matrix row `r`.
    pub(crate) fn row_norm(&self, r: usize) -> f64 {
        self.row_norms.get(r).copied().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::test_factory;

    fn entry(embedding: Option<Vec<f32>>) -> Entry {
        let f = test_factory();
        let mut b = f.msg("n", "c");
        if let Some(v) = embedding {
            b = b.embedding(v);
        }
        Entry::new(b.build().unwrap(), vec![])
    }

    #[test]
    fn incremental_equals_rebuilt() {
        let entries = vec![
            entry(Some(vec![1.0, 2.0])),
            entry(None),
            entry(Some(vec![3.0, 4.0, 5.0])),
            entry(Some(vec![0.5, -1.0])),
        ];
        let built = EmbeddingCache::build(&entries);
        let mut grown = EmbeddingCache::build(&[]);
        grown.append(&entries[..1]);
        grown.append(&entries[1..]);
        for cache in [&built, &grown] {
            assert_eq!(cache.len(), 4);
            assert_eq!(cache.missing(), 1);
            assert_eq!(cache.matrix().dim(), 2);
            assert_eq!(cache.row(2), Some(&[3.0f32, 4.0, 5.0][..]));
            assert_eq!(cache.matrix_row(2), None);
            assert_eq!(cache.row(3), Some(&[0.5f32, -1.0][..]));
            assert!(!cache.has(1));
            assert_eq!(cache.norm(0), 5f64.sqrt());
        }
        assert!(grown.fill(1, vec![7.0, 8.0]));
        assert!(!grown.fill(1, vec![7.0, 8.0]));
        assert!(!grown.fill(9, vec![7.0, 8.0]));
        assert_eq!(grown.missing(), 0);
        assert_eq!(grown.row(1), Some(&[7.0f32, 8.0][..]));
        assert_eq!(grown.matrix().rows(), 3);
    }

    #[test]
    fn most_common_dimension_wins() {
        let entries = vec![
            entry(Some(vec![1.0])),
            entry(Some(vec![1.0, 2.0])),
            entry(Some(vec![3.0, 4.0])),
        ];
        let cache = EmbeddingCache::build(&entries);
        assert_eq!(cache.matrix().dim(), 2);
        assert_eq!(cache.row(0), Some(&[1.0f32][..]));
        assert_eq!(cache.matrix_row(2), Some(1));
    }
}
