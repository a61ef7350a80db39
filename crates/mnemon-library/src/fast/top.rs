//! Pre-scan bounds kept only for the rows that can rank among a query's `k` best
//! (docs/reference/host.md#shared-scans).
//!
//! A shared scan pre-scans about eight queries at a time. Writing every row's bound for every
//! query (8 bytes a row, 800 KB a query at 100,000 rows) and reading it back to select the
//! candidates cost about as much as the bounds' arithmetic. A bit-mode query of count `k` only
//! ever scores rows whose bound reaches its `k`-th best exact score, and that score is at least
//! the `k`-th best *lower* bound of any rows (those `k` rows score at least their lower bounds).
//! So while the scan goes, a [`TopBounds`] keeps the `k` best lower bounds seen and only the
//! rows whose upper bound reaches the `k`-th of them at the time: on random unit vectors a few
//! hundred of 100,000. Every other row's bound is below the final threshold, the
//! [`Bounds::Listed`] floor, and the selection (`super::select`) checks the floor against the
//! exact score that decides its cut, so a query that needs more (another count, rows hidden
//! from it) is answered by the exact scan, never from an incomplete list.

/// Rows per group in [`TopBounds::scan_chunk`]'s first comparison.
const GROUP: usize = 8;

/// Bounds from a pre-scan, for [`super::select`].
#[derive(Clone, Debug)]
pub(crate) enum Bounds {
    /// Every row's upper bound, by row.
    Every(Vec<f64>),
    /// Some rows' upper bounds; every row not listed has a bound below `floor`.
    Listed {
        /// `(bound, row)` pairs, in no particular order.
        rows: Vec<(f64, usize)>,
        /// A value no unlisted row's bound reaches.
        floor: f64,
        /// Rows in the library the bounds were computed for.
        total: usize,
    },
}

impl Bounds {
    /// Rows in the library the bounds were computed for.
    pub(crate) fn total(&self) -> usize {
        match self {
            Bounds::Every(bounds) => bounds.len(),
            Bounds::Listed { total, .. } => *total,
        }
    }
}

/// The rows of a scan that can rank among a query's `k` best, gathered block by block
/// (see the module's overview).
#[derive(Debug)]
pub(crate) struct TopBounds {
    k: usize,
    /// The best `k` lower bounds seen so far (fewer before `k` rows were seen), ascending.
    lowers: Vec<f64>,
    /// `(upper bound, row)` of every row whose bound reached the threshold when scanned.
    rows: Vec<(f64, usize)>,
}

/// What one task of a block found for a [`TopBounds`]: merged by [`TopBounds::merge`].
#[derive(Debug, Default)]
pub(crate) struct ChunkTop {
    lowers: Vec<f64>,
    rows: Vec<(f64, usize)>,
}

impl TopBounds {
    /// An empty collection for a query that needs its `k` best rows (`k ≥ 1`).
    pub(crate) fn new(k: usize) -> TopBounds {
        TopBounds {
            k: k.max(1),
            lowers: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// The rows kept per query.
    pub(crate) fn k(&self) -> usize {
        self.k
    }

    /// The `k`-th best lower bound seen so far (−∞ before `k` rows were seen): no row whose
    /// bound is below it can rank among the `k` best.
    pub(crate) fn threshold(&self) -> f64 {
        match self.lowers.first() {
            Some(&lowest) if self.lowers.len() >= self.k => lowest,
            _ => f64::NEG_INFINITY,
        }
    }

    /// The rows of one task: `uppers[i]` is row `first + i`'s upper bound and `lower(i)` its
    /// lower bound (never above the upper). Keeps the rows whose upper bound reaches the
    /// threshold, which starts at `threshold` (the collection's, before the block) and rises
    /// with this task's own `k` best lower bounds. A lower bound can only raise the threshold
    /// where the upper bound reaches it, so `lower` is asked for those rows only; on a scan
    /// under way almost no row gets past the one comparison.
    pub(crate) fn scan_chunk(
        k: usize,
        mut threshold: f64,
        first: usize,
        uppers: &[f64],
        lower: impl Fn(usize) -> f64,
    ) -> ChunkTop {
        let mut chunk = ChunkTop::default();
        // Groups whose best bound is below the threshold are passed over after one comparison
        // (the maximum of 8 compiles to a few vector instructions).
        for (g, group) in uppers.chunks(GROUP).enumerate() {
            let best = group
                .iter()
                .fold(f64::NEG_INFINITY, |m, &u| if u > m { u } else { m });
            if best < threshold {
                continue;
            }
            for (j, &upper) in group.iter().enumerate() {
                if upper < threshold {
                    continue;
                }
                let offset = g * GROUP + j;
                chunk.rows.push((upper, first + offset));
                let lower = lower(offset);
                if lower > threshold {
                    if chunk.lowers.len() >= k {
                        // Full: `lower` beats the lowest of them (the threshold is at least it).
                        chunk.lowers.remove(0);
                    }
                    let at = chunk.lowers.partition_point(|&l| l < lower);
                    chunk.lowers.insert(at, lower);
                    if chunk.lowers.len() >= k
                        && let Some(&lowest) = chunk.lowers.first()
                    {
                        threshold = threshold.max(lowest);
                    }
                }
            }
        }
        chunk
    }

    /// Adds one task's rows and lower bounds.
    pub(crate) fn merge(&mut self, chunk: ChunkTop) {
        self.rows.extend(chunk.rows);
        if chunk.lowers.is_empty() {
            return;
        }
        self.lowers.extend(chunk.lowers);
        self.lowers.sort_unstable_by(f64::total_cmp);
        let extra = self.lowers.len().saturating_sub(self.k);
        self.lowers.drain(..extra);
    }

    /// The bounds gathered, for a library of `total` rows, once the scan has covered them all.
    pub(crate) fn finish(self, total: usize) -> Bounds {
        Bounds::Listed {
            floor: self.threshold(),
            rows: self.rows,
            total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Fed in chunks of any size, the collection lists every row that ranks among the `k`
        /// best by upper bound or could by its bound, its floor is at most the `k`-th best
        /// lower bound, and every unlisted row's bound is below the floor.
        #[test]
        fn listed_rows_cover_the_best(
            raw in proptest::collection::vec((-4.0f64..4.0, 0.0f64..1.0), 0..3000),
            k in 1usize..40,
            chunk in 1usize..700,
        ) {
            let bounds: Vec<(f64, f64)> = raw.iter().map(|&(mid, half)| (mid + half, mid - half)).collect();
            let mut top = TopBounds::new(k);
            for (c, part) in bounds.chunks(chunk).enumerate() {
                let uppers: Vec<f64> = part.iter().map(|b| b.0).collect();
                let found = TopBounds::scan_chunk(top.k(), top.threshold(), c * chunk, &uppers, |i| part[i].1);
                top.merge(found);
            }
            let Bounds::Listed { rows, floor, total } = top.finish(bounds.len()) else {
                unreachable!()
            };
            prop_assert_eq!(total, bounds.len());
            let mut lowers: Vec<f64> = bounds.iter().map(|b| b.1).collect();
            lowers.sort_by(|a, b| b.total_cmp(a));
            let kth = lowers.get(k - 1).copied().unwrap_or(f64::NEG_INFINITY);
            prop_assert_eq!(floor, kth);
            let listed: std::collections::HashSet<usize> = rows.iter().map(|r| r.1).collect();
            prop_assert_eq!(listed.len(), rows.len());
            for (i, &(upper, _)) in bounds.iter().enumerate() {
                if listed.contains(&i) {
                    prop_assert!(rows.iter().any(|r| r.1 == i && r.0.to_bits() == upper.to_bits()));
                } else {
                    prop_assert!(upper < floor, "row {i}: {upper} unlisted, floor {floor}");
                }
            }
        }
    }
}
