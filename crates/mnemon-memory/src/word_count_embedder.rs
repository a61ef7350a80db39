//! `WordCountEmbedder`: a deterministic, offline embedder for tests and demos only.
//!
//! It exists so that this crate's tests, doctests and examples can exercise the embedder paths
//! of retrieval (§6.1) without a model or a network. It is not the project's hashing embedder,
//! `mnemon_embed::HashingEmbedder` (model `mnemon:hashing-v1-<d>`, a versioned algorithm that
//! libraries store vectors of): that one hashes words and word pairs with a sign per feature,
//! this one only counts whitespace-separated words per bucket (model `mnemon:hash-<d>`), so
//! their vectors differ. Do not store this embedder's vectors in a memory meant for real recall.

use mnemon_types::{EmbedError, Embedder};

/// A test and demo embedder: counts lowercase whitespace-separated words into `dimension`
/// buckets picked by their FNV-1a hash, and L2-normalises the counts.
///
/// Texts sharing words get similar vectors, which is enough to exercise recall in tests without
/// a model; it is lexical, not semantic. A text without tokens gives the zero vector. For real
/// use, supply a model-backed [`Embedder`] (or the project's offline hashing embedder,
/// `mnemon_embed::HashingEmbedder`, which produces different vectors).
#[derive(Debug, Clone)]
pub struct WordCountEmbedder {
    dimension: usize,
    model: String,
}

impl WordCountEmbedder {
    /// An embedder of this dimension (at least 1).
    pub fn new(dimension: usize) -> Self {
        let dimension = dimension.max(1);
        WordCountEmbedder {
            dimension,
            model: format!("mnemon:hash-{dimension}"),
        }
    }
}

/// FNV-1a, 64 bits: stable across runs and platforms, unlike the std hasher.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Embedder for WordCountEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|text| {
                let mut v = vec![0f32; self.dimension];
                for token in text.split_whitespace() {
                    let h = fnv1a(&token.to_lowercase());
                    let bucket = usize::try_from(h % self.dimension as u64).unwrap_or(0);
                    if let Some(x) = v.get_mut(bucket) {
                        *x += 1.0;
                    }
                }
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                if norm > 0.0 {
                    v.iter_mut().for_each(|x| *x /= norm);
                }
                v
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_normalised() {
        let e = WordCountEmbedder::new(16);
        let a = e.embed(&["The ferry", "the FERRY", ""]).unwrap();
        assert_eq!(a[0], a[1]);
        let n: f32 = a[0].iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-6);
        assert!(a[2].iter().all(|&x| x == 0.0));
    }
}
