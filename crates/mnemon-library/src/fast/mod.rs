//! Fast mode (docs/reference/library.md#fast-mode): an int8 pre-scan that returns exactly what the
//! exact scan returns.
//!
//! A plain pre-scan keeps the best `C` rows by approximate score and re-ranks them, which can
//! miss a row whose approximate score was too low by a rounding step: near-ties at the cut, or
//! a run of rows the int8 copy cannot tell apart. Here every row gets a proven upper bound of
//! the exact score the exact scan would compute (`dot` in f32), and rows are scored exactly in
//! order of that bound until the best already scored beat every bound left. So the result is
//! the exact scan's, by proof rather than by luck; the speed-up is that on real data only a few
//! hundred rows have bounds above the cut.
//!
//! The bound for row `x` and query `q`, with int8 reconstructions `x̂ = s·c` and `q̂ = t·d`,
//! errors `e = x − x̂` and `f = q − q̂`: `x·q = x̂·q̂ + x̂·f + e·q`, so by Cauchy–Schwarz
//! `|x·q − x̂·q̂| ≤ ‖x̂‖‖f‖ + ‖e‖‖q‖`. `x̂·q̂ = s·t·(c·d)` is computed from an exact integer dot
//! product. The f32 `dot` differs from the real `x·q` by at most `γ·‖x‖‖q‖` with
//! `γ = (D + 64)·2⁻²⁴·1.01` (any summation order, FMA or not, f64 accumulation even better).
//! Norms are computed in f64 and padded for their own rounding.

mod top;

use mnemon_vector::{MatrixView, Scored, dot, dot_i8_symmetric, dot_i8_symmetric_many};
use rayon::prelude::*;

use top::ChunkTop;
pub(crate) use top::{Bounds, TopBounds};

/// Rows quantised or bounded per rayon task. A shared scan's block of 4,096 rows makes four
/// tasks, so neither core waits long for the other at the end of a block (2,048-row tasks left
/// the cores idle 6% of the time and answered about 10% fewer queries).
const ROWS_PER_TASK: usize = 1024;

/// Above this many dimensions the int8 dot product could overflow the kernel's i32 lanes
/// (127² · 133,000 > 2³¹), so fast mode defers to the exact scan.
const MAX_DIM: usize = 100_000;

/// f32 unit roundoff.
const U32: f64 = 1.0 / 16_777_216.0;

/// Relative padding for norms and bounds computed in f64 (their own rounding is ~1e-13).
const PAD: f64 = 1e-9;

/// The int8 copy of a library's matrix, with what the bounds need per row.
pub(crate) struct Int8Matrix {
    dim: usize,
    codes: Vec<i8>,
    scales: Vec<f32>,
    /// `‖x̂‖`, padded; infinite for a row holding a non-finite value (always scored exactly).
    quant_norm: Vec<f64>,
    /// `‖x − x̂‖`, padded; infinite likewise.
    err_norm: Vec<f64>,
    /// The largest `‖x̂‖ + ‖e‖` over finite rows: with the query norm it bounds every score,
    /// so a query that could overflow f32 is left to the exact scan.
    max_norm: f64,
}

/// Quantises `src` symmetrically into `dst`; returns the scale `s` (row ≈ `s · dst`), the norm
/// of the reconstruction and the norm of the error, or `None` when `src` is not finite.
fn quantize(src: &[f32], dst: &mut [i8]) -> Option<(f32, f64, f64)> {
    let mut max = 0.0f32;
    for &x in src {
        if !x.is_finite() {
            dst.fill(0);
            return None;
        }
        max = max.max(x.abs());
    }
    if max == 0.0 {
        dst.fill(0);
        return Some((0.0, 0.0, 0.0));
    }
    // f64 so that 127 / max cannot overflow for subnormal rows.
    let inv = 127.0 / f64::from(max);
    let scale = max / 127.0;
    let (mut qq, mut ee) = (0.0f64, 0.0f64);
    for (d, &x) in dst.iter_mut().zip(src) {
        let c = (f64::from(x) * inv).round().clamp(-127.0, 127.0);
        *d = c as i8;
        // The reconstruction uses the stored f32 scale, exactly as the scores will.
        let r = f64::from(scale) * c;
        qq += r * r;
        let e = f64::from(x) - r;
        ee += e * e;
    }
    Some((scale, qq.sqrt() * (1.0 + PAD), ee.sqrt() * (1.0 + PAD)))
}

impl Int8Matrix {
    /// Quantises every row of `view`, in parallel.
    pub(crate) fn build(view: &MatrixView<'_>) -> Self {
        let dim = view.dim();
        let rows = view.rows();
        let mut codes = vec![0i8; rows.saturating_mul(dim)];
        let mut scales = vec![0.0f32; rows];
        let mut quant_norm = vec![0.0f64; rows];
        let mut err_norm = vec![0.0f64; rows];
        if dim > 0 {
            codes
                .par_chunks_mut(dim)
                .zip(scales.par_iter_mut())
                .zip(quant_norm.par_iter_mut().zip(err_norm.par_iter_mut()))
                .enumerate()
                .with_min_len(ROWS_PER_TASK)
                .for_each(|(i, ((dst, scale), (qn, en)))| {
                    match quantize(view.row(i).unwrap_or(&[]), dst) {
                        Some((s, q, e)) => (*scale, *qn, *en) = (s, q, e),
                        None => (*scale, *qn, *en) = (0.0, f64::INFINITY, f64::INFINITY),
                    }
                });
        }
        let max_norm = quant_norm
            .iter()
            .zip(&err_norm)
            .map(|(q, e)| q + e)
            .filter(|n| n.is_finite())
            .fold(0.0f64, f64::max);
        Int8Matrix {
            dim,
            codes,
            scales,
            quant_norm,
            err_norm,
            max_norm,
        }
    }

    /// What the bounds need from `query`: its int8 codes and the constants of the slack, or
    /// `None` when the bound cannot be trusted (dimension too large, a query of the wrong
    /// length or not finite, or scores that could overflow f32).
    pub(crate) fn prepare(&self, query: &[f32]) -> Option<QueryCodes> {
        if self.dim == 0 || self.dim > MAX_DIM || query.len() != self.dim {
            return None;
        }
        let mut codes = vec![0i8; self.dim];
        let (q_scale, q_quant, q_err) = quantize(query, &mut codes)?;
        let q_norm = (q_quant + q_err) * (1.0 + PAD);
        if self.max_norm * q_norm >= 1e37 {
            return None;
        }
        let gamma = (self.dim as f64 + 64.0) * U32 * 1.01;
        // At least the smallest normal number, so that an infinite row norm (a row holding a
        // non-finite value) makes an infinite slack even for the zero query, never NaN; a
        // larger slack is still an upper bound.
        Some(QueryCodes {
            codes,
            scale: f64::from(q_scale),
            slack_quant: (q_err + gamma * q_norm).max(f64::MIN_POSITIVE),
            slack_err: ((1.0 + gamma) * q_norm).max(f64::MIN_POSITIVE),
        })
    }

    /// Row `i`'s upper bound of `dot(row, query)` from the exact int8 dot product `int_dot` of
    /// its codes with the query's. One function for the one-query and the batched pre-scan, so
    /// both give the same bounds bit for bit.
    fn bound(&self, i: usize, int_dot: i64, q: &QueryCodes) -> f64 {
        match (
            self.quant_norm.get(i),
            self.err_norm.get(i),
            self.scales.get(i),
        ) {
            (Some(&qn), Some(&en), Some(&scale)) => row_bounds(int_dot, scale, qn, en, q).0,
            _ => f64::INFINITY,
        }
    }

    /// For every row where `keep` holds, an upper bound of `dot(row, query)` as the exact scan
    /// computes it, and [`HIDDEN`] where `keep` fails; with the number of rows kept. `None` when
    /// the bound cannot be trusted (see [`Int8Matrix::prepare`]).
    fn upper_bounds<F>(&self, query: &[f32], keep: &F) -> Option<(Vec<f64>, usize)>
    where
        F: Fn(usize) -> bool + Sync,
    {
        let q = self.prepare(query)?;
        let mut out = vec![HIDDEN; self.scales.len()];
        let visible = out
            .par_chunks_mut(ROWS_PER_TASK)
            .enumerate()
            .map(|(chunk, slots)| {
                let base = chunk * ROWS_PER_TASK;
                let mut kept = 0usize;
                for (offset, slot) in slots.iter_mut().enumerate() {
                    let i = base + offset;
                    if !keep(i) {
                        continue;
                    }
                    kept += 1;
                    let codes = self
                        .codes
                        .get(i * self.dim..(i + 1) * self.dim)
                        .unwrap_or(&[]);
                    // `q.codes` comes from `quantize`, so it never holds -128.
                    *slot = self.bound(i, dot_i8_symmetric(codes, &q.codes), &q);
                }
                kept
            })
            .sum();
        Some((out, visible))
    }

    /// Every row's upper bound for each of `queries`, in one pass over the int8 copy
    /// ([`dot_i8_symmetric_many`]: each block of rows is read once for all the queries):
    /// `result[q]` holds what [`Int8Matrix::upper_bounds`] gives for `queries[q]` with every row
    /// kept, bit for bit, or `None` where it gives `None`.
    pub(crate) fn upper_bounds_many(&self, queries: &[&[f32]]) -> Vec<Option<Vec<f64>>> {
        let prepared: Vec<Option<QueryCodes>> = queries.iter().map(|q| self.prepare(q)).collect();
        // Only the trusted queries are scanned; `slot[k]` is the k-th of them.
        let trusted: Vec<&QueryCodes> = prepared.iter().flatten().collect();
        let rows = self.scales.len();
        let mut bounds: Vec<Vec<f64>> = trusted.iter().map(|_| vec![HIDDEN; rows]).collect();
        let mut outs: Vec<BoundsOut<'_>> = bounds
            .iter_mut()
            .map(|b| BoundsOut::Every(b.as_mut_slice()))
            .collect();
        self.upper_bounds_rows(&trusted, 0..rows, &mut outs);
        let mut scanned = bounds.into_iter();
        prepared
            .iter()
            .map(|q| q.as_ref().and_then(|_| scanned.next()))
            .collect()
    }

    /// The bounds of rows `rows` (cut to the library), for each of `queries` into its `outs`
    /// entry: [`BoundsOut::Every`] gets row `rows.start + i`'s bound at `i`, for `i` below the
    /// shortest such output (entries past it are left as they are, and the other queries are
    /// cut to it); [`BoundsOut::Top`] gathers the rows that can rank among the query's best. Each
    /// block of rows is read once for all the queries ([`dot_i8_symmetric_many`]); one step of
    /// a scan shared by queries that come and go (`crate::shared_scan`).
    pub(crate) fn upper_bounds_rows(
        &self,
        queries: &[&QueryCodes],
        rows: std::ops::Range<usize>,
        outs: &mut [BoundsOut<'_>],
    ) {
        let first = rows.start;
        let pairs = queries.len().min(outs.len());
        let Some(queries) = queries.get(..pairs) else {
            return;
        };
        let codes: Vec<&[i8]> = queries.iter().map(|q| q.codes.as_slice()).collect();
        let len = outs
            .iter()
            .take(pairs)
            .filter_map(|o| match o {
                BoundsOut::Every(slots) => Some(slots.len()),
                BoundsOut::Top(_) => None,
            })
            .min()
            .unwrap_or(usize::MAX)
            .min(rows.end.min(self.scales.len()).saturating_sub(first));
        if pairs == 0 || len == 0 {
            return;
        }
        let chunks = len.div_ceil(ROWS_PER_TASK);
        let mut per_chunk: Vec<Vec<ChunkOut<'_>>> =
            (0..chunks).map(|_| Vec::with_capacity(pairs)).collect();
        for out in outs.iter_mut().take(pairs) {
            match out {
                BoundsOut::Every(slots) => {
                    let Some(slots) = slots.get_mut(..len) else {
                        continue;
                    };
                    for (slot, chunk) in per_chunk.iter_mut().zip(slots.chunks_mut(ROWS_PER_TASK)) {
                        slot.push(ChunkOut::Every(chunk));
                    }
                }
                BoundsOut::Top(top) => {
                    let (k, threshold) = (top.k(), top.threshold());
                    for slot in &mut per_chunk {
                        slot.push(ChunkOut::Top { k, threshold });
                    }
                }
            }
        }
        let found: Vec<Vec<ChunkTop>> = per_chunk
            .into_par_iter()
            .enumerate()
            .map(|(chunk, mut outs)| {
                let base = first + chunk * ROWS_PER_TASK;
                let len = ROWS_PER_TASK.min(first + len - base);
                let mut tops = Vec::new();
                let block = self
                    .codes
                    .get(base * self.dim..(base + len) * self.dim)
                    .unwrap_or(&[]);
                let row_range = base..base + len;
                let (Some(scales), Some(quant), Some(err)) = (
                    self.scales.get(row_range.clone()),
                    self.quant_norm.get(row_range.clone()),
                    self.err_norm.get(row_range),
                ) else {
                    return tops;
                };
                let (mut dots, mut uppers) = SCRATCH.take();
                // Every entry is written by the kernel, so the buffer is not cleared first.
                dots.resize(len * codes.len(), 0);
                dot_i8_symmetric_many(block, self.dim, &codes, &mut dots);
                // Query by query, over each query's contiguous dots: the loops run over
                // plain slices, without an index check or a branch.
                for (k, (out, q)) in outs.iter_mut().zip(queries).enumerate() {
                    let Some(row_dots) = dots.get(k * len..(k + 1) * len) else {
                        continue;
                    };
                    let slots: &mut [f64] = match out {
                        ChunkOut::Every(slots) => slots,
                        ChunkOut::Top { .. } => {
                            uppers.clear();
                            uppers.resize(len, 0.0);
                            &mut uppers
                        }
                    };
                    upper_bounds_of(slots, row_dots, scales, quant, err, q);
                    if let ChunkOut::Top { k, threshold } = out {
                        let lower = |i: usize| match (
                            row_dots.get(i),
                            scales.get(i),
                            quant.get(i),
                            err.get(i),
                        ) {
                            (Some(&d), Some(&s), Some(&qn), Some(&en)) => {
                                row_bounds(d, s, qn, en, q).1
                            }
                            _ => f64::NEG_INFINITY,
                        };
                        tops.push(TopBounds::scan_chunk(*k, *threshold, base, &uppers, lower));
                    }
                }
                SCRATCH.set((dots, uppers));
                tops
            })
            .collect();
        for chunk in found {
            let mut chunk = chunk.into_iter();
            for out in outs.iter_mut().take(pairs) {
                if let BoundsOut::Top(top) = out
                    && let Some(rows) = chunk.next()
                {
                    top.merge(rows);
                }
            }
        }
    }
}

thread_local! {
    /// A pre-scan task's buffers (the int8 dots of its rows, one query's upper bounds), kept
    /// by each thread between tasks: a shared scan runs four tasks a block, and allocating
    /// 64 KB for each showed in its profile.
    static SCRATCH: std::cell::Cell<(Vec<i64>, Vec<f64>)> = const { std::cell::Cell::new((Vec::new(), Vec::new())) };
}

/// Where [`Int8Matrix::upper_bounds_rows`] puts one query's bounds.
pub(crate) enum BoundsOut<'a> {
    /// Every row's bound, by row from the first row scanned.
    Every(&'a mut [f64]),
    /// Only the rows that can rank among the query's best.
    Top(&'a mut TopBounds),
}

/// One query's part of one task of [`Int8Matrix::upper_bounds_rows`].
enum ChunkOut<'a> {
    Every(&'a mut [f64]),
    /// A [`TopBounds`]'s `k` and threshold before the block.
    Top {
        k: usize,
        threshold: f64,
    },
}

/// The upper and lower bound of a row with int8 dot product `int_dot`, scale `scale`,
/// `‖x̂‖ = qn` and `‖e‖ = en` (see the module's overview): `approx ± margin`. The slack
/// `qn·‖f‖ + en·‖q‖ + γ·(qn + en)·‖q‖` is computed as `qn·A + en·B` with the query's constants
/// [`QueryCodes::slack_quant`] and [`QueryCodes::slack_err`]: the same sum regrouped, whose
/// rounding (a few units of 2⁻⁵³) the padding covers many times over. A row with a non-finite
/// value has infinite norms, a zero scale and zero codes, so its bounds are ±∞ (it is always
/// scored exactly): the query's constants are positive (see [`Int8Matrix::prepare`]), so the
/// slack is infinite, never NaN, and `approx` is zero. No branch, so the batched pre-scan's loop
/// over rows has none.
#[inline]
fn row_bounds(int_dot: i64, scale: f32, qn: f64, en: f64, q: &QueryCodes) -> (f64, f64) {
    let approx = int_dot as f64 * f64::from(scale) * q.scale;
    let slack = qn * q.slack_quant + en * q.slack_err;
    // Padding covers the rounding of the slack, of `approx` and of these sums.
    let margin = slack * (1.0 + PAD) + approx.abs() * 4.0 * PAD;
    (approx + margin, approx - margin)
}

/// `slots[i]` = the upper bound of the row with `dots[i]`, `scales[i]`, `quant[i]`, `err[i]`
/// ([`row_bounds`]), over the shortest of them. With AVX-512 (F and DQ, which converts 8 i64
/// to f64 at once) the same loop is compiled for it: the same operations in the same order
/// on each row, so the same bits; it took 7–8 cycles a row compiled for plain x86-64, a
/// tenth of a fast shared scan's time.
fn upper_bounds_of(
    slots: &mut [f64],
    dots: &[i64],
    scales: &[f32],
    quant: &[f64],
    err: &[f64],
    q: &QueryCodes,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq") {
            // SAFETY: the CPU supports AVX-512F and DQ, checked just above.
            unsafe { upper_bounds_avx512(slots, dots, scales, quant, err, q) };
            return;
        }
    }
    upper_bounds_loop(slots, dots, scales, quant, err, q);
}

/// [`upper_bounds_of`] compiled for AVX-512F and DQ.
///
/// # Safety
/// The CPU must support AVX-512F and DQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn upper_bounds_avx512(
    slots: &mut [f64],
    dots: &[i64],
    scales: &[f32],
    quant: &[f64],
    err: &[f64],
    q: &QueryCodes,
) {
    upper_bounds_loop(slots, dots, scales, quant, err, q);
}

/// The loop of [`upper_bounds_of`], inlined into each of its compilations.
#[inline(always)]
fn upper_bounds_loop(
    slots: &mut [f64],
    dots: &[i64],
    scales: &[f32],
    quant: &[f64],
    err: &[f64],
    q: &QueryCodes,
) {
    for ((((slot, &int_dot), &scale), &qn), &en) in
        slots.iter_mut().zip(dots).zip(scales).zip(quant).zip(err)
    {
        *slot = row_bounds(int_dot, scale, qn, en, q).0;
    }
}

/// A query quantised for the bounds, with the constants of its slack.
pub(crate) struct QueryCodes {
    codes: Vec<i8>,
    /// The query's int8 scale `t`.
    scale: f64,
    /// `‖f‖ + γ·‖q‖` (`‖f‖` and `‖q‖ ≤ ‖q̂‖ + ‖f‖` padded): what the slack multiplies `‖x̂‖` by.
    slack_quant: f64,
    /// `(1 + γ)·‖q‖`: what the slack multiplies `‖e‖` by.
    slack_err: f64,
}

/// Upper bounds computed ahead, by [`Int8Matrix::upper_bounds_many`], for every row; `keep` is
/// applied here: rows it hides get [`HIDDEN`]. Returns the bounds and the number of rows kept,
/// exactly what [`Int8Matrix::upper_bounds`] returns for the same query and `keep`.
pub(crate) fn apply_keep<F>(mut bounds: Vec<f64>, keep: &F) -> (Vec<f64>, usize)
where
    F: Fn(usize) -> bool + Sync,
{
    let visible = bounds
        .par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .map(|(chunk, slots)| {
            let base = chunk * ROWS_PER_TASK;
            let mut kept = 0usize;
            for (offset, slot) in slots.iter_mut().enumerate() {
                if keep(base + offset) {
                    kept += 1;
                } else {
                    *slot = HIDDEN;
                }
            }
            kept
        })
        .sum();
    (bounds, visible)
}

/// What the cut needs from the ranked rows scored so far.
pub(crate) enum Need {
    /// The first `n` rows of the ranking decide the result.
    Prefix(usize),
    /// The rows scored so far do not decide it: more are needed.
    More,
}

/// The best rows by exact score, in the exact scan's order (score descending, index
/// ascending), for a cut that looks at a prefix of that order: `need` is called with the rows
/// scored so far, in order, and says how long a prefix decides the result. Returns the scored
/// rows in order (at least that prefix), or `None` when the exact scan should be used instead
/// (no trustworthy bound, bounds listed for too few rows, or so many rows needed scoring that a
/// full scan is cheaper).
///
/// `prescanned`, when given, holds the bounds for `query` from a pre-scan computed ahead
/// ([`Int8Matrix::upper_bounds_many`] or a shared scan), so the pre-scan is not run again.
/// `visible` is the number of rows `keep` holds for (the caller counted them): when it is
/// every row, the pre-scan's bounds are used as they are, without asking `keep` row by row.
#[allow(clippy::too_many_arguments)]
pub(crate) fn select<F>(
    int8: &Int8Matrix,
    view: &MatrixView<'_>,
    query: &[f32],
    keep: &F,
    visible: usize,
    prescanned: Option<Bounds>,
    first_batch: usize,
    need: &mut dyn FnMut(&[Scored]) -> Need,
) -> Option<Vec<Scored>>
where
    F: Fn(usize) -> bool + Sync,
{
    let all_visible = visible == view.rows();
    let (mut pool, visible) = match prescanned {
        Some(bounds) if bounds.total() != view.rows() => {
            (Pool::Every(int8.upper_bounds(query, keep)?.0), visible)
        }
        Some(Bounds::Every(bounds)) if all_visible => (Pool::Every(bounds), visible),
        Some(Bounds::Every(bounds)) => {
            let (bounds, visible) = apply_keep(bounds, keep);
            (Pool::Every(bounds), visible)
        }
        Some(Bounds::Listed {
            mut rows, floor, ..
        }) => {
            if !all_visible {
                rows.retain(|&(_, index)| keep(index));
            }
            rows.sort_unstable_by(rank);
            (
                Pool::Listed {
                    rows,
                    next: 0,
                    floor,
                },
                visible,
            )
        }
        None => {
            let (bounds, visible) = int8.upper_bounds(query, keep)?;
            (Pool::Every(bounds), visible)
        }
    };
    let floor = pool.floor();
    let mut scored: Vec<Scored> = Vec::new();
    // Taking from a list sorted once costs nothing, so batches start small there and each row
    // scored (a read of the f32 row, often from memory) is one the cut may need; taking from
    // every row's bounds costs a pass over them, so batches start at `first_batch`.
    let mut batch = match pool {
        Pool::Listed { .. } => first_batch.min(LISTED_FIRST_BATCH),
        Pool::Every(_) => first_batch,
    }
    .max(1);
    loop {
        // Score the next batch of rows, highest bound first.
        let (next, next_bound) = pool.take(batch);
        // A row or query of another length cannot be scored here: the exact scan answers.
        for index in next {
            let score = dot(view.row(index)?, query).ok()?;
            scored.push(Scored { index, score });
        }
        scored.sort_unstable_by(Scored::rank_cmp);
        let done = match need(&scored) {
            // Every unscored row's exact score is below its bound, so below the prefix's last
            // score: it ranks after the whole prefix. Unlisted rows' bounds are below the
            // floor.
            Need::Prefix(p) => {
                p == 0
                    || match scored.get(p - 1) {
                        Some(s) => {
                            let last = f64::from(s.score);
                            next_bound.is_none_or(|bound| bound < last)
                                && (floor == HIDDEN || floor <= last)
                        }
                        // Fewer rows than the prefix: decided once every row is scored.
                        None => next_bound.is_none() && floor == HIDDEN,
                    }
            }
            Need::More => next_bound.is_none() && floor == HIDDEN,
        };
        if done {
            tracing::trace!(
                scored = scored.len(),
                listed = matches!(pool, Pool::Listed { .. }),
                "fast mode: rows scored exactly"
            );
            return Some(scored);
        }
        // Nothing left to score, yet the rows not listed might matter.
        next_bound?;
        if scored.len().saturating_mul(4) >= visible {
            return None;
        }
        batch = match pool {
            Pool::Listed { .. } => LISTED_NEXT_BATCH,
            Pool::Every(_) => batch.saturating_mul(2),
        };
    }
}

/// The first batch scored from a [`Pool::Listed`]. Counted over 8,500 host queries for the 5
/// best of 100,000 random unit vectors: the first 16 rows decided half of them, 28 rows 91%,
/// 44 all (mean about 20); the first batch from every row's bounds is 69.
const LISTED_FIRST_BATCH: usize = 16;

/// The batches scored from a [`Pool::Listed`] after the first: a round costs a sort of the
/// few rows scored, far less than the f32 rows a larger batch would read for nothing.
const LISTED_NEXT_BATCH: usize = 4;

/// The rows a selection has not scored yet, with their bounds.
enum Pool {
    /// Every row's bound by row ([`HIDDEN`] once taken, or when hidden).
    Every(Vec<f64>),
    /// The rows listed, best first, and the first not yet taken; every other row's bound is
    /// below `floor`.
    Listed {
        rows: Vec<Bounded>,
        next: usize,
        floor: f64,
    },
}

impl Pool {
    /// A value no row outside the pool's bounds reaches ([`HIDDEN`] when it has them all).
    fn floor(&self) -> f64 {
        match self {
            Pool::Every(_) => HIDDEN,
            Pool::Listed { floor, .. } => *floor,
        }
    }

    /// Takes the `n` rows with the highest bounds (ties: lower index first), and returns them
    /// with the highest bound left among the pool's rows (`None` when none is left).
    fn take(&mut self, n: usize) -> (Vec<usize>, Option<f64>) {
        match self {
            Pool::Every(bounds) => take_highest(bounds, n),
            Pool::Listed { rows, next, .. } => {
                let end = next.saturating_add(n).min(rows.len());
                let taken = rows
                    .get(*next..end)
                    .unwrap_or(&[])
                    .iter()
                    .map(|&(_, index)| index)
                    .collect();
                *next = end;
                (taken, rows.get(end).map(|&(bound, _)| bound))
            }
        }
    }
}

/// Bound descending, index ascending.
fn rank(a: &Bounded, b: &Bounded) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// A row's bound and index.
type Bounded = (f64, usize);

/// The bound of a row that is hidden from the query or already scored.
pub(crate) const HIDDEN: f64 = f64::NEG_INFINITY;

/// Rows per group in the first pass of [`take_highest`].
const GROUP: usize = 32;

/// Takes the `n` rows with the highest bounds (ties: lower index first) out of `bounds`
/// (marking them [`HIDDEN`]), and returns them, in no particular order, with the highest bound
/// left (`None` when no row is left). Bounds are never NaN.
///
/// Two passes over the bounds, neither of which keeps a heap: the first takes each group of
/// [`GROUP`] rows' best bound, and the `n`-th best of those is a threshold that at least `n`
/// rows reach (`n` groups each hold one). The second collects the rows at or above it, on
/// random data a little over `n` of them, and only those are ranked. A bounded heap per chunk
/// spent more time on its comparisons than the int8 pre-scan on its arithmetic.
fn take_highest(bounds: &mut [f64], n: usize) -> (Vec<usize>, Option<f64>) {
    let best = |rows: &[f64]| {
        rows.iter().fold(
            HIDDEN,
            |best, &bound| if bound > best { bound } else { best },
        )
    };
    let mut groups: Vec<f64> = bounds
        .chunks(GROUP)
        .map(best)
        .filter(|&b| b != HIDDEN)
        .collect();
    let threshold = match n.checked_sub(1) {
        // No row is taken: every visible row is left, and only the best of them matters.
        None => f64::INFINITY,
        Some(last) if last < groups.len() => {
            let (_, nth, _) = groups.select_nth_unstable_by(last, |a, b| b.total_cmp(a));
            *nth
        }
        // Fewer groups than rows wanted: every visible row is a candidate.
        Some(_) => f64::NEG_INFINITY,
    };
    let mut candidates: Vec<Bounded> = Vec::new();
    let mut below = HIDDEN;
    for (index, &bound) in bounds.iter().enumerate() {
        if bound == HIDDEN {
            continue;
        }
        if bound >= threshold {
            candidates.push((bound, index));
        } else if bound > below {
            below = bound;
        }
    }
    let mut left = (below != HIDDEN).then_some(below);
    if candidates.len() > n {
        let (_, next, _) = candidates.select_nth_unstable_by(n, rank);
        // The rows after `next` rank below it, so it is the best of the candidates left.
        left = max_bound(left, Some(next.0));
        candidates.truncate(n);
    }
    for &(_, index) in &candidates {
        if let Some(bound) = bounds.get_mut(index) {
            *bound = HIDDEN;
        }
    }
    (
        candidates.into_iter().map(|(_, index)| index).collect(),
        left,
    )
}

fn max_bound(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y.total_cmp(&x).is_gt() { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon_vector::Matrix;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn matrix(rows: &[Vec<f32>], dim: usize) -> Matrix {
        let mut m = Matrix::new(dim);
        for r in rows {
            m.push_row(r).unwrap();
        }
        m
    }

    proptest! {
        /// The two-pass selection takes exactly the rows a full sort ranks first (bound
        /// descending, index ascending), and reports the best bound it leaves: with ties,
        /// hidden rows and infinite bounds (rows always scored exactly).
        #[test]
        fn take_highest_equals_a_full_sort(
            raw in proptest::collection::vec(
                prop_oneof![Just(HIDDEN), Just(0.5f64), Just(f64::INFINITY), -4.0f64..4.0],
                0..5000,
            ),
            n in 0usize..300,
        ) {
            let mut bounds = raw.clone();
            let (mut got, left) = take_highest(&mut bounds, n);
            let mut all: Vec<(f64, usize)> = raw.iter().copied().enumerate()
                .filter(|&(_, b)| b != HIDDEN).map(|(i, b)| (b, i)).collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut want: Vec<usize> = all.iter().take(n).map(|&(_, i)| i).collect();
            got.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(left, all.get(n).map(|&(b, _)| b));
            for i in &got {
                prop_assert_eq!(bounds[*i], HIDDEN);
            }
        }
    }

    proptest! {
        /// The bound is never below the score the exact scan computes, whatever the scale of
        /// the values (subnormal, huge, zero rows, mixed signs).
        #[test]
        fn bounds_are_upper_bounds(
            dim in 1usize..80,
            seed in any::<u64>(),
            exps in proptest::collection::vec(-40i32..30, 1..40),
            q_exp in -40i32..30,
        ) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut draw = |e: i32| -> Vec<f32> {
                let v = crate::synthetic::unit_vector(&mut rng, dim);
                v.into_iter().map(|x| x * 2f32.powi(e)).collect()
            };
            let mut rows: Vec<Vec<f32>> = exps.iter().map(|&e| draw(e)).collect();
            rows.push(vec![0.0; dim]);
            let query = draw(q_exp);
            let m = matrix(&rows, dim);
            let p = Int8Matrix::build(&m.view());
            let Some((bounds, _)) = p.upper_bounds(&query, &|_| true) else {
                // Refused only when scores could come near f32's range.
                let q_norm = query.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
                prop_assert!(p.max_norm * q_norm >= 1e36);
                return Ok(());
            };
            for (i, r) in rows.iter().enumerate() {
                let exact = f64::from(dot(r, &query).unwrap());
                let bound = bounds[i];
                prop_assert!(exact <= bound, "row {i}: {exact} > {bound}");
            }
        }
    }

    proptest! {
        /// Issue 17 item 0: the batched pre-scan gives every row of every query the bound of
        /// the one-query pre-scan, bit for bit, and refuses the same queries (a wrong length,
        /// scores near f32's range); non-finite rows stay unbounded.
        #[test]
        fn batched_bounds_equal_one_query_bounds(
            dim in 1usize..150,
            rows in 1usize..300,
            seed in any::<u64>(),
            exps in proptest::collection::vec(-30i32..30, 1..9),
        ) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut vectors: Vec<Vec<f32>> = (0..rows)
                .map(|_| crate::synthetic::unit_vector(&mut rng, dim))
                .collect();
            vectors[rows / 2][0] = f32::NAN;
            let m = matrix(&vectors, dim);
            let p = Int8Matrix::build(&m.view());
            let mut queries: Vec<Vec<f32>> = exps
                .iter()
                .map(|&e| {
                    crate::synthetic::unit_vector(&mut rng, dim)
                        .into_iter()
                        .map(|x| x * 2f32.powi(e))
                        .collect()
                })
                .collect();
            queries.push(vec![0.5; dim + 1]);
            queries.push(vec![1e30; dim]);
            let refs: Vec<&[f32]> = queries.iter().map(Vec::as_slice).collect();
            let many = p.upper_bounds_many(&refs);
            prop_assert_eq!(many.len(), refs.len());
            for (q, got) in refs.iter().zip(many) {
                let one = p.upper_bounds(q, &|_| true);
                match (got, one) {
                    (None, None) => {}
                    (Some(got), Some((want, visible))) => {
                        prop_assert_eq!(visible, rows);
                        prop_assert_eq!(
                            got.iter().map(|b| b.to_bits()).collect::<Vec<_>>(),
                            want.iter().map(|b| b.to_bits()).collect::<Vec<_>>()
                        );
                        let keep = |i: usize| i % 3 != 1;
                        let (kept, visible) = apply_keep(got, &keep);
                        let (want, want_visible) = p.upper_bounds(q, &keep).unwrap();
                        prop_assert_eq!(visible, want_visible);
                        prop_assert_eq!(
                            kept.iter().map(|b| b.to_bits()).collect::<Vec<_>>(),
                            want.iter().map(|b| b.to_bits()).collect::<Vec<_>>()
                        );
                    }
                    (got, one) => prop_assert!(false, "batched {:?} vs one {:?}", got.is_some(), one.is_some()),
                }
            }
        }
    }

    /// On random unit vectors only a small share of the rows is scored exactly: fast mode
    /// really is a pre-scan, not an exact scan in disguise.
    #[test]
    fn prunes_random_data() {
        let (rows, dim) = (6000, 96);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let vectors: Vec<Vec<f32>> = (0..rows)
            .map(|_| crate::synthetic::unit_vector(&mut rng, dim))
            .collect();
        let m = matrix(&vectors, dim);
        let view = m.view();
        let p = Int8Matrix::build(&view);
        for _ in 0..5 {
            let q = crate::synthetic::unit_vector(&mut rng, dim);
            let keep = |i: usize| i % 7 != 3;
            let scored = select(
                &p,
                &view,
                &q,
                &keep,
                (0..rows).filter(|&i| keep(i)).count(),
                None,
                74,
                &mut |s| {
                    if s.len() >= 10 {
                        Need::Prefix(10)
                    } else {
                        Need::More
                    }
                },
            )
            .unwrap();
            assert!(scored.len() < rows / 8, "scored {} rows", scored.len());
            assert_eq!(scored[..10], view.top_k(&q, 10, keep).unwrap()[..]);
        }
    }

    #[test]
    fn non_finite_rows_are_always_scored() {
        let m = matrix(&[vec![1.0, 0.0], vec![f32::INFINITY, 0.0]], 2);
        let p = Int8Matrix::build(&m.view());
        let (b, visible) = p.upper_bounds(&[1.0, 0.0], &|_| true).unwrap();
        assert_eq!(b[1], f64::INFINITY);
        assert_eq!(visible, 2);
        assert!(p.upper_bounds(&[1.0], &|_| true).is_none());
    }
}
