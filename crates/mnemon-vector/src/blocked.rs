//! Register-blocked `f32` dot products: several queries against several rows per inner loop,
//! each pair's score bit for bit what the one-query kernel ([`crate::dot`]) gives.
//!
//! A scan that scores many queries in one pass over a matrix is no longer bound by memory but
//! by the loads feeding the multiply-adds: the one-query kernel loads a row chunk and a query
//! chunk for every fused multiply-add. Here a tile of `Q` queries × `R` rows keeps one set of
//! accumulators per pair in registers, so each row chunk loaded is reused by `Q` queries and
//! each query chunk by `R` rows (docs/reference/library.md#index-and-performance).
//!
//! Identical bits are kept by giving every pair exactly the one-query kernel's arithmetic
//! ([`crate::f32_dot`]): four chains of 8 lanes over blocks of 32 floats, then blocks of 8 into
//! the first chain, then `(c0 + c1) + (c2 + c3)`, the 8 lanes summed in f64 and the tail added in
//! f64. On AVX-512 one 16-lane register holds two 8-lane chains (floats `i..i + 16` are chains 0
//! and 1 of block `i`, `i + 16..i + 32` chains 2 and 3), and a lane-wise fused multiply-add on 16
//! lanes is two on 8, so the chains see the same operations in the same order. Only the order
//! in which independent chains advance changes, which no result depends on.
//!
//! Where the one-query kernel is not ours (no AVX2 + FMA), each pair goes through
//! [`crate::dot`] itself.

use crate::kernel::dot_same_length as dot;

/// Which blocked kernel this CPU runs: a token only [`detect`] (and this module's tests, for
/// kernels the detected one implies) can make, since its field is private to this module.
/// [`dots`] runs the `unsafe` SIMD kernel it names, so a value saying AVX-512 must only exist
/// on a CPU that has it: keeping construction here keeps that proof local.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocked(Kind);

/// The kernels, private to this module (see [`Blocked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// 16-lane registers, tiles of [`AVX512_Q`] queries × [`AVX512_R`] rows.
    Avx512,
    /// 8-lane registers, tiles of [`AVX2_Q`] queries × 1 row.
    Avx2,
    /// One pair at a time through [`crate::dot`].
    PerPair,
}

/// Queries per AVX-512 tile: with [`AVX512_R`] rows, 2 accumulators per pair fill 24 of the
/// 32 registers, leaving room for the row chunks and a query chunk.
const AVX512_Q: usize = 4;
/// Rows per AVX-512 tile.
const AVX512_R: usize = 3;
/// Queries per AVX2 tile: 4 accumulators per pair, 12 of the 16 registers.
const AVX2_Q: usize = 3;

/// The kernel [`dots`] uses on this CPU.
pub(crate) fn detect() -> Blocked {
    #[cfg(target_arch = "x86_64")]
    {
        // The one-query kernel is ours exactly when AVX2 and FMA are there (`f32_dot::dot`).
        let ours = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
        if ours && std::is_x86_feature_detected!("avx512f") {
            return Blocked(Kind::Avx512);
        }
        if ours {
            return Blocked(Kind::Avx2);
        }
    }
    Blocked(Kind::PerPair)
}

/// A strided block of rows: row `r` is `data[r * stride..r * stride + dim]`.
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) stride: usize,
    pub(crate) dim: usize,
    pub(crate) count: usize,
}

impl<'a> Rows<'a> {
    /// Row `r`, or an empty slice when out of range.
    fn row(&self, r: usize) -> &'a [f32] {
        let start = r.saturating_mul(self.stride);
        self.data
            .get(start..start.saturating_add(self.dim))
            .unwrap_or(&[])
    }

    /// Up to `count` rows from row `first` on (none when `first` is past the end).
    pub(crate) fn slice(&self, first: usize, count: usize) -> Rows<'a> {
        let count = count.min(self.count.saturating_sub(first));
        Rows {
            data: if count == 0 {
                &[]
            } else {
                self.data
                    .get(first.saturating_mul(self.stride)..)
                    .unwrap_or(&[])
            },
            stride: self.stride,
            dim: self.dim,
            count,
        }
    }

    /// Whether every row is in range (so the kernels may read them by pointer).
    fn in_bounds(&self) -> bool {
        self.stride >= self.dim
            && (self.count == 0
                || (self.count - 1)
                    .checked_mul(self.stride)
                    .and_then(|s| s.checked_add(self.dim))
                    .is_some_and(|end| end <= self.data.len()))
    }
}

/// `outs[q][r] = dot(rows.row(r), queries[q])` for every row and query, with `kernel`. Every
/// query must have `rows.dim` floats and every `outs[q]` at least `rows.count` entries; when they
/// do not, the pairs are scored one by one over whatever is there (never a panic).
pub(crate) fn dots(kernel: Blocked, rows: Rows<'_>, queries: &[&[f32]], outs: &mut [&mut [f32]]) {
    let shapes_ok = rows.in_bounds()
        && queries.len() == outs.len()
        && queries.iter().all(|q| q.len() == rows.dim)
        && outs.iter().all(|o| o.len() >= rows.count);
    match kernel.0 {
        #[cfg(target_arch = "x86_64")]
        Kind::Avx512 if shapes_ok => {
            // SAFETY: `detect` returned Avx512 only on a CPU with AVX-512F, AVX2 and FMA; the
            // shapes were checked just above.
            unsafe { x86::dots_avx512(rows, queries, outs) }
        }
        #[cfg(target_arch = "x86_64")]
        Kind::Avx2 if shapes_ok => {
            // SAFETY: `detect` returned Avx2 only on a CPU with AVX2 and FMA; shapes checked.
            unsafe { x86::dots_avx2(rows, queries, outs) }
        }
        _ => per_pair(rows, queries, outs),
    }
}

/// Asks the CPU to start loading `rows` into its caches, without waiting for them: the scan
/// calls it for the next block of rows while it scores the current one, so the tiles find
/// their rows in cache instead of stalling on memory (the hardware prefetcher alone follows
/// too few streams to keep the multiply-adds fed).
pub(crate) fn prefetch(rows: Rows<'_>) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        for r in 0..rows.count {
            let row = rows.row(r);
            // One request per 64-byte line.
            for line in row.chunks(16) {
                // SAFETY: SSE is part of x86_64; a prefetch never faults, and the address is
                // inside the row anyway.
                unsafe { _mm_prefetch::<_MM_HINT_T1>(line.as_ptr().cast::<i8>()) };
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = rows;
}

/// The fallback: every pair through the one-query kernel.
fn per_pair(rows: Rows<'_>, queries: &[&[f32]], outs: &mut [&mut [f32]]) {
    for (query, out) in queries.iter().zip(outs.iter_mut()) {
        for (r, slot) in out.iter_mut().take(rows.count).enumerate() {
            *slot = dot(rows.row(r), query);
        }
    }
}

/// The one-query AVX2 kernel's arithmetic in portable code (`f32::mul_add` is the fused
/// multiply-add the hardware does): the reference the blocked kernels are tested against.
#[cfg(test)]
pub(crate) fn reference_dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [[0.0f32; 8]; 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, chain) in acc.iter_mut().enumerate() {
            for (l, lane) in chain.iter_mut().enumerate() {
                let at = i + 8 * k + l;
                *lane = a[at].mul_add(b[at], *lane);
            }
        }
        i += 32;
    }
    while i + 8 <= n {
        for (l, lane) in acc[0].iter_mut().enumerate() {
            *lane = a[i + l].mul_add(b[i + l], *lane);
        }
        i += 8;
    }
    let lanes: [f32; 8] =
        std::array::from_fn(|l| (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]));
    let mut total: f64 = lanes.iter().map(|&x| f64::from(x)).sum();
    for (x, y) in a[i..n].iter().zip(&b[i..n]) {
        total += f64::from(*x) * f64::from(*y);
    }
    total as f32
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m256, __m512, _mm256_add_ps, _mm256_castpd_ps, _mm256_fmadd_ps, _mm256_loadu_ps,
        _mm256_setzero_ps, _mm256_storeu_ps, _mm512_castps_pd, _mm512_castps512_ps256,
        _mm512_extractf64x4_pd, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_setzero_ps,
    };

    use super::{AVX2_Q, AVX512_Q, AVX512_R, Rows};

    /// The 8 lanes summed in f64 as the one-query kernel sums them, plus the tail
    /// `row[from..n] · query[from..n]` in f64.
    ///
    /// # Safety
    /// `row` and `query` must each hold `n` readable floats.
    #[inline(always)]
    unsafe fn finish(
        lanes: &[f32; 8],
        row: *const f32,
        query: *const f32,
        from: usize,
        n: usize,
    ) -> f32 {
        let mut total: f64 = lanes.iter().map(|&x| f64::from(x)).sum();
        for j in from..n {
            // SAFETY: `j < n`, and both hold `n` floats.
            let (x, y) = unsafe { (*row.add(j), *query.add(j)) };
            total += f64::from(x) * f64::from(y);
        }
        total as f32
    }

    /// Every pair of `rows` × `queries` on AVX-512, in tiles of [`AVX512_Q`] × [`AVX512_R`]
    /// (smaller tiles at the edges).
    ///
    /// # Safety
    /// The CPU must support AVX-512F, AVX2 and FMA; `rows` must be in bounds, every query must
    /// have `rows.dim` floats and every output at least `rows.count` entries.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn dots_avx512(rows: Rows<'_>, queries: &[&[f32]], outs: &mut [&mut [f32]]) {
        // Rows outside, queries inside: a tile's rows are read from memory once and stay in
        // L1 while every query (in L2) passes over them, and the next rows are requested
        // meanwhile.
        let mut r = 0;
        while r < rows.count {
            let rn = (rows.count - r).min(AVX512_R);
            super::prefetch(rows.slice(r + rn, AVX512_R));
            let mut q = 0;
            while q < queries.len() {
                let qn = (queries.len() - q).min(AVX512_Q);
                // SAFETY: forwarded; the tile is within the queries and rows.
                unsafe {
                    match (qn, rn) {
                        (4, 3) => tile512::<4, 3>(rows, r, queries, q, outs),
                        (4, 2) => tile512::<4, 2>(rows, r, queries, q, outs),
                        (4, _) => tile512::<4, 1>(rows, r, queries, q, outs),
                        (3, 3) => tile512::<3, 3>(rows, r, queries, q, outs),
                        (3, 2) => tile512::<3, 2>(rows, r, queries, q, outs),
                        (3, _) => tile512::<3, 1>(rows, r, queries, q, outs),
                        (2, 3) => tile512::<2, 3>(rows, r, queries, q, outs),
                        (2, 2) => tile512::<2, 2>(rows, r, queries, q, outs),
                        (2, _) => tile512::<2, 1>(rows, r, queries, q, outs),
                        (_, 3) => tile512::<1, 3>(rows, r, queries, q, outs),
                        (_, 2) => tile512::<1, 2>(rows, r, queries, q, outs),
                        _ => tile512::<1, 1>(rows, r, queries, q, outs),
                    }
                }
                q += qn;
            }
            r += rn;
        }
    }

    /// Queries `q0..q0 + Q` × rows `r0..r0 + R`.
    ///
    /// # Safety
    /// As [`dots_avx512`], with `q0 + Q <= queries.len()` and `r0 + R <= rows.count`.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[allow(clippy::needless_range_loop)]
    unsafe fn tile512<const Q: usize, const R: usize>(
        rows: Rows<'_>,
        r0: usize,
        queries: &[&[f32]],
        q0: usize,
        outs: &mut [&mut [f32]],
    ) {
        let n = rows.dim;
        let base = rows.data.as_ptr();
        // SAFETY: row `r0 + r` starts in bounds (checked by the caller).
        let rp: [*const f32; R] =
            std::array::from_fn(|r| unsafe { base.add((r0 + r) * rows.stride) });
        let qp: [*const f32; Q] =
            std::array::from_fn(|q| queries.get(q0 + q).map_or(std::ptr::null(), |s| s.as_ptr()));
        // Chains 0 | 1 and chains 2 | 3 of each pair.
        let mut lo = [[_mm512_setzero_ps(); R]; Q];
        let mut hi = [[_mm512_setzero_ps(); R]; Q];
        let mut i = 0;
        // SAFETY (all loads): `i + 32 <= n`, and every row and query holds `n` floats.
        while i + 32 <= n {
            let x: [__m512; R] = std::array::from_fn(|r| unsafe { _mm512_loadu_ps(rp[r].add(i)) });
            for q in 0..Q {
                let y = unsafe { _mm512_loadu_ps(qp[q].add(i)) };
                for r in 0..R {
                    lo[q][r] = _mm512_fmadd_ps(x[r], y, lo[q][r]);
                }
            }
            let x: [__m512; R] =
                std::array::from_fn(|r| unsafe { _mm512_loadu_ps(rp[r].add(i + 16)) });
            for q in 0..Q {
                let y = unsafe { _mm512_loadu_ps(qp[q].add(i + 16)) };
                for r in 0..R {
                    hi[q][r] = _mm512_fmadd_ps(x[r], y, hi[q][r]);
                }
            }
            i += 32;
        }
        for q in 0..Q {
            for r in 0..R {
                let (a, b) = (lo[q][r], hi[q][r]);
                let mut c0: __m256 = _mm512_castps512_ps256(a);
                let c1: __m256 = upper_half(a);
                let c2: __m256 = _mm512_castps512_ps256(b);
                let c3: __m256 = upper_half(b);
                let mut j = i;
                while j + 8 <= n {
                    // SAFETY: `j + 8 <= n`.
                    let (x, y) =
                        unsafe { (_mm256_loadu_ps(rp[r].add(j)), _mm256_loadu_ps(qp[q].add(j))) };
                    c0 = _mm256_fmadd_ps(x, y, c0);
                    j += 8;
                }
                let sum = _mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3));
                let mut lanes = [0.0f32; 8];
                // SAFETY: `lanes` is 8 writable floats.
                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
                // SAFETY: row and query hold `n` floats.
                let score = unsafe { finish(&lanes, rp[r], qp[q], j, n) };
                if let Some(slot) = outs.get_mut(q0 + q).and_then(|o| o.get_mut(r0 + r)) {
                    *slot = score;
                }
            }
        }
    }

    /// The upper 8 floats of a 16-float register (chains 1 or 3).
    #[target_feature(enable = "avx512f")]
    fn upper_half(v: __m512) -> __m256 {
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)))
    }

    /// Every pair of `rows` × `queries` on AVX2, in tiles of [`AVX2_Q`] queries × 1 row.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; shapes as for [`dots_avx512`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dots_avx2(rows: Rows<'_>, queries: &[&[f32]], outs: &mut [&mut [f32]]) {
        for r in 0..rows.count {
            super::prefetch(rows.slice(r + 1, 1));
            let mut q = 0;
            while q < queries.len() {
                let qn = (queries.len() - q).min(AVX2_Q);
                // SAFETY: forwarded; the tile is within the queries and rows.
                unsafe {
                    match qn {
                        3 => tile256::<3>(rows, r, queries, q, outs),
                        2 => tile256::<2>(rows, r, queries, q, outs),
                        _ => tile256::<1>(rows, r, queries, q, outs),
                    }
                }
                q += qn;
            }
        }
    }

    /// Queries `q0..q0 + Q` × row `r0`, four 8-lane chains per pair.
    ///
    /// # Safety
    /// As [`dots_avx2`], with `q0 + Q <= queries.len()` and `r0 < rows.count`.
    #[target_feature(enable = "avx2,fma")]
    // Indexed loops keep each accumulator of the tile a named register slot.
    #[allow(clippy::needless_range_loop)]
    unsafe fn tile256<const Q: usize>(
        rows: Rows<'_>,
        r0: usize,
        queries: &[&[f32]],
        q0: usize,
        outs: &mut [&mut [f32]],
    ) {
        let n = rows.dim;
        // SAFETY: row `r0` starts in bounds.
        let rp = unsafe { rows.data.as_ptr().add(r0 * rows.stride) };
        let qp: [*const f32; Q] =
            std::array::from_fn(|q| queries.get(q0 + q).map_or(std::ptr::null(), |s| s.as_ptr()));
        let mut acc = [[_mm256_setzero_ps(); 4]; Q];
        let mut i = 0;
        // SAFETY (all loads): `i + width <= n`; row and queries hold `n` floats.
        while i + 32 <= n {
            for k in 0..4 {
                let x = unsafe { _mm256_loadu_ps(rp.add(i + 8 * k)) };
                for q in 0..Q {
                    let y = unsafe { _mm256_loadu_ps(qp[q].add(i + 8 * k)) };
                    acc[q][k] = _mm256_fmadd_ps(x, y, acc[q][k]);
                }
            }
            i += 32;
        }
        while i + 8 <= n {
            let x = unsafe { _mm256_loadu_ps(rp.add(i)) };
            for q in 0..Q {
                let y = unsafe { _mm256_loadu_ps(qp[q].add(i)) };
                acc[q][0] = _mm256_fmadd_ps(x, y, acc[q][0]);
            }
            i += 8;
        }
        for q in 0..Q {
            let [c0, c1, c2, c3] = acc[q];
            let sum = _mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3));
            let mut lanes = [0.0f32; 8];
            // SAFETY: `lanes` is 8 writable floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
            // SAFETY: row and query hold `n` floats.
            let score = unsafe { finish(&lanes, rp, qp[q], i, n) };
            if let Some(slot) = outs.get_mut(q0 + q).and_then(|o| o.get_mut(r0)) {
                *slot = score;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every kernel this CPU can run: the one `detect` picks and the ones below it.
    fn kernels() -> Vec<Blocked> {
        // A detected kernel implies the ones below it (AVX-512 is only picked with AVX2 + FMA).
        let all = match detect().0 {
            Kind::Avx512 => vec![Kind::Avx512, Kind::Avx2, Kind::PerPair],
            Kind::Avx2 => vec![Kind::Avx2, Kind::PerPair],
            Kind::PerPair => vec![Kind::PerPair],
        };
        all.into_iter().map(Blocked).collect()
    }

    /// Whether the one-query kernel is the four-chain one `reference_dot` mirrors.
    fn ours() -> bool {
        detect().0 != Kind::PerPair
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Scores with `kernel` into fresh outputs.
    fn run(kernel: Blocked, rows: Rows<'_>, queries: &[&[f32]]) -> Vec<Vec<f32>> {
        let mut outs: Vec<Vec<f32>> = queries.iter().map(|_| vec![f32::NAN; rows.count]).collect();
        let mut slices: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
        dots(kernel, rows, queries, &mut slices);
        outs
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Every blocked kernel gives each pair the one-query kernel's bits, and (where that
        /// kernel is ours) the portable reference's: random dimensions cover every tail (blocks
        /// of 32, of 8, single floats), random row and query counts every edge tile, random
        /// padding the strides, and values of many magnitudes the rounding.
        #[test]
        fn blocked_kernels_match_the_one_query_kernel(
            dim in 0usize..200,
            rows in 0usize..9,
            queries in 1usize..11,
            pad in 0usize..20,
            scale in -20i32..20,
            seed in any::<u64>(),
        ) {
            let stride = dim + pad;
            let mut state = seed | 1;
            let mut next = move || {
                // xorshift: cheap, seeded values in -1..1 of varied magnitudes.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let unit = (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                unit * 2f32.powi(((state >> 8) % 7) as i32 - 3 + scale)
            };
            let data: Vec<f32> = (0..rows * stride + 3).map(|_| next()).collect();
            let qs: Vec<Vec<f32>> = (0..queries).map(|_| (0..dim).map(|_| next()).collect()).collect();
            let refs: Vec<&[f32]> = qs.iter().map(Vec::as_slice).collect();
            // An unaligned start, so no kernel relies on alignment.
            let block = Rows { data: &data[1..], stride, dim, count: rows };
            for kernel in kernels() {
                let got = run(kernel, block, &refs);
                for (q, scores) in refs.iter().zip(&got) {
                    for (r, score) in scores.iter().enumerate() {
                        let row = &data[1 + r * stride..1 + r * stride + dim];
                        prop_assert_eq!(score.to_bits(), dot(row, q).to_bits(), "{:?} row {} of {}", kernel, r, rows);
                        if ours() {
                            prop_assert_eq!(score.to_bits(), reference_dot(row, q).to_bits());
                        }
                    }
                }
            }
        }
    }

    /// The portable reference really is the one-query kernel's arithmetic, on a length with
    /// every kind of tail.
    #[test]
    fn reference_is_the_one_query_kernel() {
        let a: Vec<f32> = (0..1536 + 32 + 8 + 5)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.3)
            .collect();
        let b: Vec<f32> = (0..a.len())
            .map(|i| ((i * 53 % 89) as f32 - 44.0) / 3.1)
            .collect();
        for n in [0, 5, 8, 13, 32, 45, 1536, a.len()] {
            if ours() {
                assert_eq!(
                    reference_dot(&a[..n], &b[..n]).to_bits(),
                    dot(&a[..n], &b[..n]).to_bits(),
                    "n = {n}"
                );
            }
        }
    }

    /// Shapes that do not fit (a short query, a short block, too few outputs) are scored pair by
    /// pair over what is there, never read out of bounds or panic.
    #[test]
    fn bad_shapes_fall_back() {
        let data = vec![1.0f32; 40];
        let short = [1.0f32; 3];
        let full = [2.0f32; 20];
        for kernel in kernels() {
            let rows = Rows {
                data: &data,
                stride: 20,
                dim: 20,
                count: 3,
            };
            let got = run(kernel, rows, &[&full, &short]);
            assert_eq!(bits(&got[0]), bits(&[40.0, 40.0, 0.0]));
            assert_eq!(bits(&got[1]), bits(&[3.0, 3.0, 0.0]));
            let mut few = [0.0f32; 1];
            dots(
                kernel,
                Rows {
                    data: &data,
                    stride: 20,
                    dim: 20,
                    count: 2,
                },
                &[&full],
                &mut [&mut few],
            );
            assert_eq!(few, [40.0]);
        }
    }
}
