//! Symmetric int8 quantisation and the int8 dot product the graph walks with.
//!
//! Each row is quantised on its own: `scale = max|x| / 127` and `code = round(x / scale)`, so
//! codes stay in −127..=127 (never −128, which the sign trick of the kernels below needs) and the
//! approximate dot product of two rows is `dot_i8(a, b) · scale_a · scale_b`. Codes are padded
//! with zeros to a multiple of [`CODE_ALIGN`] bytes, so the kernels only ever see whole 64-byte
//! blocks and zeros add nothing to a sum.
//!
//! The AVX-512 VNNI kernel (`vpdpbusd`: 64 byte products summed into 16 i32 lanes per
//! instruction) is here rather than in `mnemon-vector` only because that crate was being changed
//! at the same time; it belongs beside `mnemon_vector::dot_i8_symmetric`, which is the fallback
//! on CPUs without VNNI.

use std::sync::OnceLock;

/// Codes of one row are padded to a multiple of this many bytes (one AVX-512 register).
pub(crate) const CODE_ALIGN: usize = 64;

/// The largest dimension whose dot products the kernels return exactly as an `i32`: codes lie
/// in −127..=127, so a dot product of `d` codes is at most `d` · 127² = `d` · 16,129 in size,
/// which fits an `i32` up to `d` = 133,143 (2¹⁷ = 131,072 is the power of two below). Each
/// lane's partial sum is smaller still; the bound is the sum across lanes, which is returned.
pub(crate) const MAX_DIMS: usize = 1 << 17;

/// Bytes of codes per row for `dims` dimensions.
pub(crate) fn code_stride(dims: usize) -> usize {
    dims.div_ceil(CODE_ALIGN) * CODE_ALIGN
}

/// Quantises `row` into `codes` (exactly [`code_stride`] bytes, padding zeroed) and returns the
/// scale. A zero row gets scale 0 and zero codes. The caller has checked that `row` is finite.
pub(crate) fn quantise(row: &[f32], codes: &mut [i8]) -> f32 {
    let max = row.iter().fold(0.0f32, |m, &x| m.max(x.abs()));
    codes.fill(0);
    if max == 0.0 {
        return 0.0;
    }
    let scale = max / 127.0;
    let inverse = 127.0 / max;
    for (code, &x) in codes.iter_mut().zip(row) {
        // |x · inverse| ≤ 127 up to rounding, clamped so a code is never −128.
        *code = (x * inverse).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// The signature shared by the kernels.
type DotFn = fn(&[i8], &[i8]) -> i32;

/// Whether this CPU has AVX-512 F, BW and VNNI (checked once).
fn has_vnni() -> bool {
    static VNNI: OnceLock<bool> = OnceLock::new();
    *VNNI.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vnni")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// The kernel chosen once for this CPU.
fn kernel() -> DotFn {
    #[cfg(target_arch = "x86_64")]
    {
        if has_vnni() {
            return vnni::dot_checked;
        }
    }
    portable
}

/// The name of the int8 kernel in use, for benchmark reports.
pub fn int8_kernel_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if has_vnni() {
            return "avx512-vnni";
        }
        if std::is_x86_feature_detected!("avx2") {
            return "avx2";
        }
    }
    "portable"
}

/// The exact dot product of two code rows of one padded length (over their common prefix
/// otherwise). Codes must lie in −127..=127 in `b` (quantisation guarantees it).
#[inline]
pub(crate) fn dot_codes(a: &[i8], b: &[i8]) -> i32 {
    kernel()(a, b)
}

/// A query's codes made ready for many dot products against rows: on CPUs with AVX-512 VNNI,
/// the magnitudes of its codes and, per 64-byte block, which codes are negative. `vpdpbusd`
/// multiplies unsigned by signed bytes, so a pair of signed rows costs a sign mask, an absolute
/// value and a masked negation per block on top of the multiply-add; with those of the query
/// computed once, a row costs one load, one masked negation and one multiply-add per block.
#[derive(Debug, Clone, Default)]
pub(crate) struct Prepared {
    /// `|code|` of every query code (padded like the codes); empty when the CPU has no VNNI.
    magnitudes: Vec<u8>,
    /// Bit `j` of word `b`: code `64·b + j` is negative.
    negative: Vec<u64>,
}

impl Prepared {
    /// Prepares `codes` (a padded code row) for the kernel this CPU uses.
    pub(crate) fn new(codes: &[i8]) -> Self {
        if has_vnni() && codes.len().is_multiple_of(CODE_ALIGN) {
            Prepared {
                magnitudes: codes.iter().map(|c| c.unsigned_abs()).collect(),
                negative: codes
                    .chunks(CODE_ALIGN)
                    .map(|block| {
                        block
                            .iter()
                            .enumerate()
                            .fold(0u64, |mask, (j, &c)| mask | (u64::from(c < 0) << j))
                    })
                    .collect(),
            }
        } else {
            Prepared::default()
        }
    }

    /// The dot product of the prepared query (whose codes are `codes`) and `row`: the same
    /// value as [`dot_codes`]`(codes, row)`.
    #[inline]
    pub(crate) fn dot(&self, codes: &[i8], row: &[i8]) -> i32 {
        #[cfg(target_arch = "x86_64")]
        {
            if !self.magnitudes.is_empty() && row.len() == self.magnitudes.len() {
                // SAFETY: `magnitudes` is only filled when `has_vnni()`, i.e. the CPU reports
                // AVX-512 F, BW and VNNI; the lengths are equal multiples of 64 (checked in
                // `new` and above) and `negative` holds one word per block.
                return unsafe { vnni::dot_prepared(&self.magnitudes, &self.negative, row) };
            }
        }
        dot_codes(codes, row)
    }
}

/// Hints the CPU to fetch the first `lines` cache lines of `data` (a row about to be read): a
/// hint that never faults, a no-op off x86-64.
#[inline]
pub(crate) fn prefetch<T>(data: &[T], lines: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let bytes = std::mem::size_of_val(data);
        let start = data.as_ptr().cast::<i8>();
        for line in 0..lines.min(bytes.div_ceil(64)) {
            // SAFETY: prefetching is a hint that never faults, and `line · 64` lies inside
            // `data`, so the offset pointer stays inside its allocation.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.add(line * 64)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, lines);
}

/// `mnemon-vector`'s AVX2 kernel (or its portable loop): exact in i64, and the sums of
/// [`MAX_DIMS`] codes fit an i32.
fn portable(a: &[i8], b: &[i8]) -> i32 {
    mnemon_vector::dot_i8_symmetric(a, b) as i32
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::{
        __m512i, _mm512_abs_epi8, _mm512_add_epi32, _mm512_dpbusd_epi32, _mm512_loadu_si512,
        _mm512_mask_sub_epi8, _mm512_movepi8_mask, _mm512_reduce_add_epi32, _mm512_setzero_si512,
    };

    use super::CODE_ALIGN;

    /// Checks the one precondition [`dot`] has beyond the CPU's, then calls it; the tail that
    /// is not a whole block (never present for padded codes) is summed by a plain loop.
    pub(super) fn dot_checked(a: &[i8], b: &[i8]) -> i32 {
        let n = a.len().min(b.len());
        let whole = n / CODE_ALIGN * CODE_ALIGN;
        let (head_a, tail_a) = a[..n].split_at(whole);
        let (head_b, tail_b) = b[..n].split_at(whole);
        // SAFETY: `kernel()` picks this function only when the CPU reports AVX-512 F, BW and
        // VNNI; both heads hold `whole` bytes, a multiple of 64.
        let head = unsafe { dot(head_a, head_b) };
        head + tail_a
            .iter()
            .zip(tail_b)
            .map(|(&x, &y)| i32::from(x) * i32::from(y))
            .sum::<i32>()
    }

    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI; `a` and `b` must have one length, a multiple
    /// of 64.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn dot(a: &[i8], b: &[i8]) -> i32 {
        let zero = _mm512_setzero_si512();
        let mut acc = _mm512_setzero_si512();
        let mut at = 0;
        while at + CODE_ALIGN <= a.len() {
            // SAFETY: `at + 64 <= a.len() == b.len()`; unaligned loads accept any address.
            let (x, y) = unsafe {
                (
                    _mm512_loadu_si512(a.as_ptr().add(at).cast::<__m512i>()),
                    _mm512_loadu_si512(b.as_ptr().add(at).cast::<__m512i>()),
                )
            };
            // vpdpbusd multiplies unsigned by signed bytes: |x| · (y carrying x's sign) equals
            // x · y for every y but −128, which quantisation never produces.
            let negative = _mm512_movepi8_mask(x);
            let signed_y = _mm512_mask_sub_epi8(y, negative, zero, y);
            acc = _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(x), signed_y);
            at += CODE_ALIGN;
        }
        _mm512_reduce_add_epi32(acc)
    }

    /// The dot product of a prepared query (`magnitudes`, `negative`: see `Prepared`) and a
    /// row, in two independent accumulators so consecutive multiply-adds do not wait for each
    /// other.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI; `magnitudes` and `row` must have one length,
    /// a multiple of 64, and `negative` at least one word per 64 bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn dot_prepared(magnitudes: &[u8], negative: &[u64], row: &[i8]) -> i32 {
        let zero = _mm512_setzero_si512();
        let (mut even, mut odd) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        let blocks = (row.len() / CODE_ALIGN)
            .min(magnitudes.len() / CODE_ALIGN)
            .min(negative.len());
        let mut b = 0;
        while b < blocks {
            // SAFETY: block `b` lies inside both slices (`b < blocks`); unaligned loads accept
            // any address.
            let (x, y) = unsafe {
                (
                    _mm512_loadu_si512(magnitudes.as_ptr().add(b * CODE_ALIGN).cast::<__m512i>()),
                    _mm512_loadu_si512(row.as_ptr().add(b * CODE_ALIGN).cast::<__m512i>()),
                )
            };
            // |q| · (y carrying q's sign) = q · y, as in `dot`.
            let signed_y = _mm512_mask_sub_epi8(y, negative[b], zero, y);
            if b % 2 == 0 {
                even = _mm512_dpbusd_epi32(even, x, signed_y);
            } else {
                odd = _mm512_dpbusd_epi32(odd, x, signed_y);
            }
            b += 1;
        }
        _mm512_reduce_add_epi32(_mm512_add_epi32(even, odd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scalar(a: &[i8], b: &[i8]) -> i32 {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| i32::from(x) * i32::from(y))
            .sum()
    }

    #[test]
    fn quantise_keeps_codes_symmetric_and_pads_with_zeros() {
        let row = [1.0, -1.0, 0.5, -0.25, 0.0];
        let mut codes = vec![7i8; code_stride(row.len())];
        let scale = quantise(&row, &mut codes);
        assert_eq!(codes.len(), 64);
        assert_eq!(&codes[..5], &[127, -127, 64, -32, 0]);
        assert!(codes[5..].iter().all(|&c| c == 0));
        assert!((scale - 1.0 / 127.0).abs() < 1e-9);
        let mut zero = vec![1i8; 64];
        assert_eq!(quantise(&[0.0; 3], &mut zero), 0.0);
        assert!(zero.iter().all(|&c| c == 0));
    }

    /// The largest row the kernels take: its self-dot (every code at ±127) is the largest
    /// sum they return and fits. `MAX_DIMS` was 2²⁰, whose self-dot wrapped negative.
    #[test]
    fn the_largest_dot_product_fits() {
        let expected = MAX_DIMS as i64 * 127 * 127;
        assert!(expected <= i64::from(i32::MAX));
        for code in [127i8, -127] {
            let a = vec![code; MAX_DIMS];
            assert_eq!(i64::from(dot_codes(&a, &a)), expected);
            assert_eq!(i64::from(Prepared::new(&a).dot(&a, &a)), expected);
        }
    }

    #[test]
    fn extremes_are_exact() {
        for (x, y) in [(127i8, 127i8), (-128, 127), (-127, -127), (127, -127)] {
            let n = 64 * 40 + 17;
            let (a, b) = (vec![x; n], vec![y; n]);
            assert_eq!(dot_codes(&a, &b), scalar(&a, &b), "{x} · {y}");
            let (mut pa, mut pb) = (a.clone(), b.clone());
            pa.resize(code_stride(n), 0);
            pb.resize(code_stride(n), 0);
            assert_eq!(
                Prepared::new(&pa).dot(&pa, &pb),
                scalar(&a, &b),
                "{x} · {y}"
            );
        }
        assert_eq!(dot_codes(&[], &[]), 0);
    }

    proptest! {
        #[test]
        fn kernel_matches_the_scalar_sum(
            v in proptest::collection::vec((any::<i8>(), -127i8..=127), 0..700),
        ) {
            let (a, b): (Vec<i8>, Vec<i8>) = v.into_iter().unzip();
            prop_assert_eq!(dot_codes(&a, &b), scalar(&a, &b));
            prop_assert_eq!(portable(&a, &b), scalar(&a, &b));
            // Prepared queries, on padded rows as the graph holds them (either side's codes).
            let stride = code_stride(a.len());
            let (mut pa, mut pb) = (a.clone(), b.clone());
            pa.resize(stride, 0);
            pb.resize(stride, 0);
            // The query side may hold −128 (a code row never does).
            prop_assert_eq!(Prepared::new(&pa).dot(&pa, &pb), scalar(&a, &b));
        }

        #[test]
        fn quantised_dot_approximates_the_f32_dot(
            v in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 1..300),
        ) {
            let (a, b): (Vec<f32>, Vec<f32>) = v.into_iter().unzip();
            let stride = code_stride(a.len());
            let (mut ca, mut cb) = (vec![0i8; stride], vec![0i8; stride]);
            let (sa, sb) = (quantise(&a, &mut ca), quantise(&b, &mut cb));
            let approx = dot_codes(&ca, &cb) as f32 * sa * sb;
            let exact: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            // Each code is off by at most half a step: the error is bounded by the norms.
            let bound = 0.5 * (sa * b.iter().map(|x| x.abs()).sum::<f32>()
                + sb * a.iter().map(|x| x.abs()).sum::<f32>())
                + 0.25 * sa * sb * a.len() as f32
                + 1e-4;
            prop_assert!((approx - exact).abs() <= bound, "{approx} vs {exact} (bound {bound})");
        }
    }
}
