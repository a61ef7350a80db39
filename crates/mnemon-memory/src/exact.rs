//! The reference arithmetic of the built-in metrics
//! (docs/reference/memory.md#embedders-and-metrics): `f32` inputs widened to `f64` and accumulated
//! in `f64`, always in the same order.
//!
//! The order is fixed (eight interleaved partial sums, combined pairwise, then the tail), so a
//! score never depends on the CPU, the thread or the message's position, and the compiler can
//! still keep eight independent additions in flight. No fused multiply-add is used (Rust never
//! contracts `a * b + c`), so results are bit-identical on every platform.

const LANES: usize = 8;

/// Σ f(aᵢ, bᵢ) over the common prefix, in the fixed order.
#[inline(always)]
fn fixed_order_sum(a: &[f32], b: &[f32], term: impl Fn(f64, f64) -> f64) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f64; LANES];
    let mut a_chunks = a.chunks_exact(LANES);
    let mut b_chunks = b.chunks_exact(LANES);
    for (x, y) in a_chunks.by_ref().zip(b_chunks.by_ref()) {
        for lane in 0..LANES {
            acc[lane] += term(f64::from(x[lane]), f64::from(y[lane]));
        }
    }
    let [s0, s1, s2, s3, s4, s5, s6, s7] = acc;
    let mut sum = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
    for (x, y) in a_chunks.remainder().iter().zip(b_chunks.remainder()) {
        sum += term(f64::from(*x), f64::from(*y));
    }
    sum
}

/// Σ aᵢbᵢ.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f64 {
    fixed_order_sum(a, b, |x, y| x * y)
}

/// Σ (aᵢ − bᵢ)².
pub(crate) fn squared_l2(a: &[f32], b: &[f32]) -> f64 {
    fixed_order_sum(a, b, |x, y| (x - y) * (x - y))
}

/// ‖a‖.
pub(crate) fn norm(a: &[f32]) -> f64 {
    dot(a, a).sqrt()
}

/// dot / (‖q‖·‖e‖) given both norms; 0 when either is 0.
pub(crate) fn cosine_with_norms(dot: f64, query_norm: f64, norm: f64) -> f64 {
    if query_norm == 0.0 || norm == 0.0 {
        0.0
    } else {
        dot / (query_norm * norm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), 32.0);
        assert_eq!(squared_l2(&[1.0, 2.0], &[4.0, 6.0]), 25.0);
        assert_eq!(norm(&[3.0, 4.0]), 5.0);
        assert_eq!(cosine_with_norms(1.0, 0.0, 2.0), 0.0);
        assert_eq!(dot(&[1.0; 20], &[2.0; 19]), 38.0);
    }

    proptest! {
        #[test]
        fn agrees_with_a_sequential_f64_sum(
            v in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..300)
        ) {
            let (a, b): (Vec<f32>, Vec<f32>) = v.into_iter().unzip();
            let seq: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            prop_assert!((dot(&a, &b) - seq).abs() <= 1e-12);
        }
    }
}
