//! The int8 dot product of symmetric quantisation (codes in −127..=127), which fast pre-scans
//! run over every row: at memory speed it decides how fast they are.
//!
//! simsimd's general `i8` kernel widens both operands to 16 bits before multiplying; with one
//! operand known never to be −128, AVX2's `vpmaddubsw` can multiply bytes directly
//! (`|a| · (b · sign a)`, the products of a pair summed in 16 bits without saturating), which
//! halves the work per byte and lets the scan run at the memory bus's pace.

/// The dot product of two int8 vectors, exact, for `b` holding no `-128` (symmetric quantisation
/// produces codes in −127..=127). `a` may hold any value.
///
/// With a `-128` in `b` the result is unspecified (but always some number: never undefined
/// behaviour or a panic); use [`dot_i8`](crate::dot_i8) for arbitrary inputs. Slices of
/// different lengths are scored over their common prefix.
pub fn dot_i8_symmetric(a: &[i8], b: &[i8]) -> i64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { avx2::dot(a, b) };
        }
    }
    // Cut to one length above, so the portable kernel always answers.
    crate::dot_i8(a, b).unwrap_or(0)
}

/// The int8 dot product of every row of `codes` (row-major, `dim` codes per row; a partial
/// last row is ignored) with each of `queries`, query by query: with `rows` the rows of `codes`
/// (cut to `out.len() / queries.len()`), `out[q * rows + r]` is
/// [`dot_i8_symmetric`]`(row r, queries[q])`, exactly (both are exact integer sums). Each
/// query's dots are contiguous, so what is computed from them runs over plain slices.
///
/// This is the pre-scan of many queries in one pass over an int8 matrix. On a CPU with
/// AVX-512 VNNI (`vpdpbusd`: 64 byte products summed into 16 lanes per instruction), tiles of
/// up to 8 queries × 2 rows are scored per inner loop, so each 64-byte row chunk loaded serves
/// every query of the tile from registers, while rows further on are requested into L2;
/// elsewhere each pair goes through [`dot_i8_symmetric`]. Queries follow
/// [`dot_i8_symmetric`]'s contract for its second operand (no `-128`); a query whose length is
/// not `dim` is scored pair by pair over the common prefix, as [`dot_i8_symmetric`] does.
pub fn dot_i8_symmetric_many(codes: &[i8], dim: usize, queries: &[&[i8]], out: &mut [i64]) {
    if dim == 0 || queries.is_empty() {
        out.fill(0);
        return;
    }
    let rows = (codes.len() / dim).min(out.len() / queries.len());
    #[cfg(target_arch = "x86_64")]
    {
        if vnni::available() && queries.iter().all(|q| q.len() == dim) {
            // SAFETY: the CPU supports AVX-512F, BW and VNNI (checked by `available`); every
            // query has `dim` codes, `codes` holds `rows * dim` and `out` `rows * queries.len()`.
            unsafe { vnni::dots(codes, dim, rows, queries, out) };
            return;
        }
    }
    for r in 0..rows {
        let row = codes.get(r * dim..(r + 1) * dim).unwrap_or(&[]);
        for (q, query) in queries.iter().enumerate() {
            if let Some(slot) = out.get_mut(q * rows + r) {
                *slot = dot_i8_symmetric(row, query);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::{
        __m512i, _MM_HINT_T1, _mm_prefetch, _mm512_dpbusd_epi32, _mm512_loadu_si512,
        _mm512_maskz_loadu_epi8, _mm512_reduce_add_epi32, _mm512_set1_epi8, _mm512_setzero_si512,
        _mm512_xor_si512,
    };

    /// Bytes per register.
    const LANES: usize = 64;

    /// Bytes of a row summed in the i32 lanes before they are moved to i64: each instruction
    /// adds at most 4 · 255 · 128 = 130,560 to a lane, 256 of them stay below 2³¹.
    const CHUNK: usize = 256 * LANES;

    /// Whether this CPU has what [`dots`] needs.
    pub(super) fn available() -> bool {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vnni")
    }

    /// Most queries per tile: a tile of 8 queries × 2 rows keeps 16 accumulators, the two
    /// rows and one query chunk in registers (19 of 32).
    const MAX_Q: usize = 8;
    /// Rows per tile. Two rows per tile and every query present in it (up to [`MAX_Q`]) use
    /// each row chunk loaded for all the queries; measured on Zen 4 from memory, 7 queries × 2
    /// rows ran at the arithmetic's peak where 4 × 4 tiles ran at less than half of it.
    const R: usize = 2;
    /// The rows requested ahead of the tile being scored are this many rows further on. They
    /// are requested into L2 (`_MM_HINT_T1`), one cache line per row per step: requests into
    /// L1 (`T0`) crowded out the tile's own lines and ran at half the speed.
    const AHEAD: usize = 8;

    /// # Safety
    /// The CPU must support AVX-512F, BW and VNNI; every query must hold `dim` codes, `codes`
    /// at least `rows * dim` and `out` at least `rows * queries.len()`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn dots(
        codes: &[i8],
        dim: usize,
        rows: usize,
        queries: &[&[i8]],
        out: &mut [i64],
    ) {
        // `vpdpbusd` multiplies unsigned by signed bytes: rows are shifted to `c + 128` (a xor
        // of the sign bit), and `128 · Σ query` is taken off again, exactly.
        let sums: Vec<i64> = queries
            .iter()
            .map(|q| q.iter().map(|&c| i64::from(c)).sum::<i64>() * 128)
            .collect();
        let nq = queries.len();
        // Queries in groups of equal size, at most `MAX_Q` each: 12 queries are 6 + 6, not
        // 8 + 4, so no tile runs with its arithmetic half idle.
        let group = nq.div_ceil(nq.div_ceil(MAX_Q).max(1)).max(1);
        let mut r = 0;
        while r < rows {
            let rn = (rows - r).min(R);
            // Rows `r + AHEAD ..` are requested while this tile is scored, if they exist.
            let ahead = (r + AHEAD + rn <= rows).then(|| r + AHEAD);
            let mut q = 0;
            while q < nq {
                let qn = (nq - q).min(group);
                // Only the first group requests rows ahead: the others find them requested.
                let ahead = if q == 0 { ahead } else { None };
                let tile = Tile {
                    codes,
                    dim,
                    rows,
                    r0: r,
                    ahead,
                    queries,
                    q0: q,
                    sums: &sums,
                };
                // SAFETY: forwarded; the tile is within the queries and rows.
                unsafe {
                    match (qn, rn) {
                        (8, 2) => tile.score::<8, 2>(out),
                        (7, 2) => tile.score::<7, 2>(out),
                        (6, 2) => tile.score::<6, 2>(out),
                        (5, 2) => tile.score::<5, 2>(out),
                        (4, 2) => tile.score::<4, 2>(out),
                        (3, 2) => tile.score::<3, 2>(out),
                        (2, 2) => tile.score::<2, 2>(out),
                        (1, 2) => tile.score::<1, 2>(out),
                        (8, _) => tile.score::<8, 1>(out),
                        (7, _) => tile.score::<7, 1>(out),
                        (6, _) => tile.score::<6, 1>(out),
                        (5, _) => tile.score::<5, 1>(out),
                        (4, _) => tile.score::<4, 1>(out),
                        (3, _) => tile.score::<3, 1>(out),
                        (2, _) => tile.score::<2, 1>(out),
                        _ => tile.score::<1, 1>(out),
                    }
                }
                q += qn;
            }
            r += rn;
        }
    }

    /// Where a tile of queries × rows lies.
    struct Tile<'a> {
        codes: &'a [i8],
        dim: usize,
        /// Rows scored in all: the stride between queries in `out`.
        rows: usize,
        /// The tile's first row.
        r0: usize,
        /// The first row to request ahead, if any.
        ahead: Option<usize>,
        queries: &'a [&'a [i8]],
        /// The tile's first query.
        q0: usize,
        /// `128 · Σ query` for every query.
        sums: &'a [i64],
    }

    impl Tile<'_> {
        /// Scores queries `q0..q0 + QT` × rows `r0..r0 + RT` into `out`.
        ///
        /// # Safety
        /// As [`dots`], with `q0 + QT <= queries.len()`, `r0 + RT <= rows`, and
        /// `ahead + RT <= rows` when `ahead` is given.
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
        // Indexed loops keep each accumulator of the tile a named register slot.
        #[allow(clippy::needless_range_loop)]
        unsafe fn score<const QT: usize, const RT: usize>(&self, out: &mut [i64]) {
            let (codes, dim) = (self.codes, self.dim);
            let flip = _mm512_set1_epi8(i8::MIN);
            // SAFETY: rows `r0..r0 + RT` lie within `codes`.
            let rp: [*const i8; RT] =
                std::array::from_fn(|r| unsafe { codes.as_ptr().add((self.r0 + r) * dim) });
            // SAFETY: rows `ahead..ahead + RT` lie within `codes` when `ahead` is given.
            let ahead: Option<[*const i8; RT]> = self
                .ahead
                .map(|a| std::array::from_fn(|r| unsafe { codes.as_ptr().add((a + r) * dim) }));
            let qp: [*const i8; QT] = std::array::from_fn(|q| {
                self.queries
                    .get(self.q0 + q)
                    .map_or(std::ptr::null(), |s| s.as_ptr())
            });
            let mut total = [[0i64; RT]; QT];
            let mut start = 0;
            while start < dim {
                let end = (start + CHUNK).min(dim);
                let mut acc = [[_mm512_setzero_si512(); RT]; QT];
                let mut i = start;
                // SAFETY (all loads and requests): `i + LANES <= end <= dim`, and every row
                // and query holds `dim` codes; the masked loads below read only the bytes
                // below `dim`.
                while i + LANES <= end {
                    let x: [__m512i; RT] = std::array::from_fn(|r| {
                        _mm512_xor_si512(
                            unsafe { _mm512_loadu_si512(rp[r].add(i).cast::<__m512i>()) },
                            flip,
                        )
                    });
                    if let Some(ahead) = &ahead {
                        for row in ahead {
                            // A request never faults and changes nothing but the caches.
                            _mm_prefetch::<_MM_HINT_T1>(unsafe { row.add(i) });
                        }
                    }
                    for q in 0..QT {
                        let y = unsafe { _mm512_loadu_si512(qp[q].add(i).cast::<__m512i>()) };
                        for r in 0..RT {
                            acc[q][r] = _mm512_dpbusd_epi32(acc[q][r], x[r], y);
                        }
                    }
                    i += LANES;
                }
                if i < end {
                    // Masked-off query bytes load as zero, so the shifted row bytes there add
                    // nothing.
                    let mask = u64::MAX >> (LANES - (end - i));
                    let x: [__m512i; RT] = std::array::from_fn(|r| {
                        _mm512_xor_si512(
                            unsafe { _mm512_maskz_loadu_epi8(mask, rp[r].add(i)) },
                            flip,
                        )
                    });
                    for q in 0..QT {
                        let y = unsafe { _mm512_maskz_loadu_epi8(mask, qp[q].add(i)) };
                        for r in 0..RT {
                            acc[q][r] = _mm512_dpbusd_epi32(acc[q][r], x[r], y);
                        }
                    }
                }
                for q in 0..QT {
                    for r in 0..RT {
                        total[q][r] += i64::from(_mm512_reduce_add_epi32(acc[q][r]));
                    }
                }
                start = end;
            }
            for q in 0..QT {
                let shift = self.sums.get(self.q0 + q).copied().unwrap_or(0);
                for r in 0..RT {
                    if let Some(slot) = out.get_mut((self.q0 + q) * self.rows + self.r0 + r) {
                        *slot = total[q][r] - shift;
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m256i, _mm256_abs_epi8, _mm256_add_epi32, _mm256_loadu_si256, _mm256_madd_epi16,
        _mm256_maddubs_epi16, _mm256_set1_epi16, _mm256_setzero_si256, _mm256_sign_epi8,
        _mm256_storeu_si256,
    };

    /// Bytes per vector.
    const LANES: usize = 32;

    /// Blocks of 32 bytes summed in the i32 lanes before they are moved to an i64: each block
    /// adds at most 2 · 2 · 128 · 127 = 65,024 to a lane, so 16,384 blocks stay below 2³¹.
    const BLOCKS_PER_FLUSH: usize = 16_384;

    /// # Safety
    /// The CPU must support AVX2; `a` and `b` must have the same length.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn dot(a: &[i8], b: &[i8]) -> i64 {
        let blocks = a.len() / LANES;
        let ones = _mm256_set1_epi16(1);
        let mut total = 0i64;
        let mut block = 0;
        while block < blocks {
            let end = (block + BLOCKS_PER_FLUSH).min(blocks);
            let mut acc = _mm256_setzero_si256();
            while block < end {
                let at = block * LANES;
                // SAFETY: `at + LANES <= blocks * LANES <= a.len() == b.len()`; unaligned
                // loads accept any address.
                let (x, y) = unsafe {
                    (
                        _mm256_loadu_si256(a.as_ptr().add(at).cast::<__m256i>()),
                        _mm256_loadu_si256(b.as_ptr().add(at).cast::<__m256i>()),
                    )
                };
                // |x| as unsigned bytes (|−128| = 128 fits), and y carrying x's sign (zero
                // where x is zero): their products equal x·y, and a pair's sum stays within
                // i16 (2 · 128 · 127 = 32,512) as long as y is never −128.
                let pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(y, x));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
                block += 1;
            }
            let mut lanes = [0i32; 8];
            // SAFETY: `lanes` is 32 writable bytes; unaligned stores accept any address.
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast::<__m256i>(), acc) };
            total += lanes.iter().map(|&l| i64::from(l)).sum::<i64>();
        }
        let tail = blocks * LANES;
        total
            + a[tail..]
                .iter()
                .zip(&b[tail..])
                .map(|(&x, &y)| i64::from(x) * i64::from(y))
                .sum::<i64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scalar(a: &[i8], b: &[i8]) -> i64 {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| i64::from(x) * i64::from(y))
            .sum()
    }

    #[test]
    fn extremes_are_exact() {
        // Every lane at its largest magnitude, over more blocks than one flush holds.
        for (x, y) in [
            (127i8, 127i8),
            (-128, 127),
            (-128, -127),
            (127, -127),
            (-127, -127),
        ] {
            let n = 32 * 16_384 * 2 + 77;
            let (a, b) = (vec![x; n], vec![y; n]);
            assert_eq!(dot_i8_symmetric(&a, &b), scalar(&a, &b), "{x} · {y}");
        }
        assert_eq!(dot_i8_symmetric(&[], &[]), 0);
        assert_eq!(dot_i8_symmetric(&[3, 4, 5], &[2]), 6);
    }

    proptest! {
        #[test]
        fn matches_the_scalar_sum(
            v in proptest::collection::vec((any::<i8>(), -127i8..=127), 0..700),
        ) {
            let (a, b): (Vec<i8>, Vec<i8>) = v.into_iter().unzip();
            prop_assert_eq!(dot_i8_symmetric(&a, &b), scalar(&a, &b));
        }

        #[test]
        fn any_input_gives_a_number(
            a in proptest::collection::vec(any::<i8>(), 0..100),
            b in proptest::collection::vec(any::<i8>(), 0..100),
        ) {
            let _ = dot_i8_symmetric(&a, &b);
        }
    }
}

#[cfg(test)]
mod many_tests {
    use super::*;
    use proptest::prelude::*;

    fn scalar(a: &[i8], b: &[i8]) -> i64 {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| i64::from(x) * i64::from(y))
            .sum()
    }

    fn check(codes: &[i8], dim: usize, queries: &[Vec<i8>]) {
        let refs: Vec<&[i8]> = queries.iter().map(Vec::as_slice).collect();
        let rows = codes.len().checked_div(dim).unwrap_or(0);
        let mut out = vec![i64::MIN; rows * refs.len()];
        dot_i8_symmetric_many(codes, dim, &refs, &mut out);
        for r in 0..rows {
            for (q, query) in refs.iter().enumerate() {
                let row = &codes[r * dim..(r + 1) * dim];
                assert_eq!(out[q * rows + r], scalar(row, query), "row {r} query {q}");
                assert_eq!(out[q * rows + r], dot_i8_symmetric(row, query));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Exact for every shape: dimensions with every tail of the 64-byte blocks, every
        /// tile (1 to 8 queries, in up to 3 groups, × 1 or 2 rows), enough rows for the
        /// requests ahead, rows holding any byte (−128 too) and queries any but −128.
        #[test]
        fn many_matches_the_scalar_sum(
            dim in 1usize..300,
            rows in 0usize..23,
            queries in 1usize..20,
            seed in any::<u64>(),
        ) {
            let mut state = seed | 1;
            let mut next = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 32) as u8 as i8
            };
            // A partial last row, which is ignored.
            let codes: Vec<i8> = (0..rows * dim + dim / 2).map(|_| next()).collect();
            let qs: Vec<Vec<i8>> = (0..queries)
                .map(|_| (0..dim).map(|_| next().max(-127)).collect())
                .collect();
            check(&codes, dim, &qs);
        }
    }

    /// The largest products over more bytes than one chunk of i32 lanes holds stay exact.
    #[test]
    fn many_extremes_are_exact() {
        let dim = 256 * 64 * 2 + 77;
        for (x, y) in [
            (127i8, 127i8),
            (-128, 127),
            (-128, -127),
            (127, -127),
            (0, 127),
        ] {
            let codes = vec![x; dim * 5];
            check(
                &codes,
                dim,
                &[
                    vec![y; dim],
                    vec![-y; dim],
                    vec![y; dim],
                    vec![0; dim],
                    vec![y; dim],
                ],
            );
        }
    }

    #[test]
    fn many_edge_cases() {
        let mut out = vec![7i64; 4];
        dot_i8_symmetric_many(&[1, 2, 3, 4], 0, &[&[]], &mut out);
        assert_eq!(out, vec![0; 4]);
        // A query of another length: scored over the common prefix, as the pairwise kernel.
        let mut out = vec![0i64; 2];
        dot_i8_symmetric_many(&[1, 2, 3, 4], 2, &[&[5]], &mut out);
        assert_eq!(out, vec![5, 15]);
        // Too small an output: only what fits.
        let mut out = vec![0i64; 1];
        dot_i8_symmetric_many(&[1, 2, 3, 4], 2, &[&[1, 1]], &mut out);
        assert_eq!(out, vec![3]);
    }
}
