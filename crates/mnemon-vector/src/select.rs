//! Bounded top-k selection keyed by (score descending, index ascending).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A row index with its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    /// The row's index.
    pub index: usize,
    /// The row's score; larger is better.
    pub score: f32,
}

impl Scored {
    /// The ranking order: higher score first, then lower index; a NaN score last, whatever
    /// its sign (a sum of infinities of both signs, from finite rows that overflow `f32`, is a
    /// NaN whose sign bit differs by CPU: `total_cmp` ranked it first on aarch64 and last on
    /// x86), and `-0.0` equal to `0.0`. A total order.
    pub fn rank_cmp(&self, other: &Scored) -> Ordering {
        self.score
            .is_nan()
            .cmp(&other.score.is_nan())
            .then_with(|| {
                other
                    .score
                    .partial_cmp(&self.score)
                    .unwrap_or(Ordering::Equal)
            })
            .then(self.index.cmp(&other.index))
    }
}

/// Heap entry whose maximum is the worst-ranked candidate, so it can be evicted cheaply.
struct Worst(Scored);

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.rank_cmp(&other.0)
    }
}

/// Keeps the `k` best candidates seen so far.
pub(crate) struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
}

impl TopK {
    pub(crate) fn new(k: usize) -> Self {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k.min(1 << 16) + 1),
        }
    }

    pub(crate) fn offer(&mut self, candidate: Scored) {
        if self.heap.len() < self.k {
            self.heap.push(Worst(candidate));
        } else if let Some(mut worst) = self.heap.peek_mut()
            && candidate.rank_cmp(&worst.0) == Ordering::Less
        {
            *worst = Worst(candidate);
        }
    }

    pub(crate) fn merge(mut self, other: TopK) -> TopK {
        if self.heap.len() < other.heap.len() {
            return other.merge(self);
        }
        for Worst(candidate) in other.heap {
            self.offer(candidate);
        }
        self
    }

    pub(crate) fn into_sorted(self) -> Vec<Scored> {
        let mut out: Vec<Scored> = self.heap.into_iter().map(|w| w.0).collect();
        out.sort_unstable_by(Scored::rank_cmp);
        out
    }
}

/// The `k` best entries of precomputed `scores` among indices where `keep(index)` holds, best
/// first, ties to the lower index.
pub fn top_k_of_scores(scores: &[f32], k: usize, keep: impl Fn(usize) -> bool) -> Vec<Scored> {
    let mut heap = TopK::new(k);
    if k == 0 {
        return Vec::new();
    }
    for (index, &score) in scores.iter().enumerate() {
        if keep(index) {
            heap.offer(Scored { index, score });
        }
    }
    heap.into_sorted()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// NaN ranks last whatever its sign bit, and signed zeros tie (then the lower index).
    #[test]
    fn nan_ranks_last_and_zeros_tie() {
        let negative_nan = -f32::NAN;
        assert!(negative_nan.is_sign_negative() && f32::NAN.is_sign_positive());
        let scores = [f32::NAN, 1.0, negative_nan, -0.0, 0.0, f32::NEG_INFINITY];
        let order: Vec<usize> = top_k_of_scores(&scores, 6, |_| true)
            .iter()
            .map(|s| s.index)
            .collect();
        assert_eq!(order, [1, 3, 4, 5, 0, 2]);
    }

    proptest! {
        #[test]
        fn matches_stable_sort(scores in proptest::collection::vec(-3i8..3, 0..300), k in 0usize..50) {
            let scores: Vec<f32> = scores.into_iter().map(f32::from).collect();
            let got: Vec<usize> = top_k_of_scores(&scores, k, |i| i % 5 != 1).iter().map(|s| s.index).collect();
            let mut want: Vec<usize> = (0..scores.len()).filter(|i| i % 5 != 1).collect();
            want.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
            want.truncate(k);
            prop_assert_eq!(got, want);
        }
    }
}
