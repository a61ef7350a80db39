//! The `f32` dot product on AVX2 + FMA with four independent accumulators.
//!
//! simsimd's AVX2 kernel chains every fused multiply-add through one accumulator, so each waits
//! for the last (4 to 5 cycles) and a 1536-dimensional row takes about 1,000 cycles. Four
//! chains keep the FMA units busy: scans of cached rows, and batches of queries sharing one
//! pass over a matrix, run several times faster. Summation order differs from simsimd's, so
//! scores can differ in the last bits; every row goes through the same kernel, so rankings stay
//! consistent, and the library's fast-mode bounds hold for any order.

/// The dot product, or `None` when this CPU lacks AVX2 or FMA. `a` and `b` must have the same
/// length.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> Option<f32> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above.
            return Some(unsafe { avx2_fma::dot(a, b) });
        }
    }
    let _ = (a, b);
    None
}

#[cfg(target_arch = "x86_64")]
mod avx2_fma {
    use std::arch::x86_64::{
        __m256, _mm256_add_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps,
        _mm256_storeu_ps,
    };

    /// Floats per vector.
    const LANES: usize = 8;

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc: [__m256; 4] = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (all loads below): `i + width <= n`, and both slices hold at least `n` floats;
        // unaligned loads accept any address.
        while i + 4 * LANES <= n {
            for (k, sum) in acc.iter_mut().enumerate() {
                let at = i + k * LANES;
                let (x, y) = unsafe { (_mm256_loadu_ps(pa.add(at)), _mm256_loadu_ps(pb.add(at))) };
                *sum = _mm256_fmadd_ps(x, y, *sum);
            }
            i += 4 * LANES;
        }
        while i + LANES <= n {
            let (x, y) = unsafe { (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i))) };
            acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
            i += LANES;
        }
        let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut lanes = [0.0f32; LANES];
        // SAFETY: `lanes` is 8 writable floats; unaligned stores accept any address.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
        // The lanes and the tail are summed in f64, as simsimd does.
        let mut total: f64 = lanes.iter().map(|&x| f64::from(x)).sum();
        for (x, y) in a[i..n].iter().zip(&b[i..n]) {
            total += f64::from(*x) * f64::from(*y);
        }
        total as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Within f32 rounding of the exact sum, for every length (tails included).
        #[test]
        fn close_to_the_exact_sum(
            v in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..300),
            skip in 0usize..8,
        ) {
            let (a, b): (Vec<f32>, Vec<f32>) = v.into_iter().unzip();
            // Unaligned starts too.
            let (a, b) = (&a[skip.min(a.len())..], &b[skip.min(b.len())..]);
            let exact: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            let bound: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x.abs() * y.abs())).sum();
            if let Some(got) = dot(a, b) {
                let tolerance = (a.len() as f64 + 64.0) * 2f64.powi(-24) * bound + 1e-30;
                prop_assert!((f64::from(got) - exact).abs() <= tolerance, "{got} vs {exact}");
            }
        }
    }

    #[test]
    fn known_values() {
        let a: Vec<f32> = (0..1537).map(|i| (i % 7) as f32).collect();
        let b: Vec<f32> = (0..1537).map(|i| (i % 5) as f32 - 2.0).collect();
        let exact: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        if let Some(got) = dot(&a, &b) {
            assert_eq!(f64::from(got), exact);
        }
        assert_eq!(dot(&[], &[]).unwrap_or(0.0), 0.0);
    }
}
