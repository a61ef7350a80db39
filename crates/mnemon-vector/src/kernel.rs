//! Pairwise kernels, dispatched at run time by simsimd.

use simsimd::SpatialSimilarity;

use crate::VectorError;

/// Two vectors scored together must have one length: a score over a common prefix would rank
/// silently wrong (issue 12 item 4).
fn same_length<T>(a: &[T], b: &[T]) -> Result<(), VectorError> {
    if a.len() == b.len() {
        Ok(())
    } else {
        Err(VectorError::LengthMismatch {
            left: a.len(),
            right: b.len(),
        })
    }
}

/// The dot product of two slices the caller knows to have one length (the matrix scans check
/// the query once, not once per row).
pub(crate) fn dot_same_length(a: &[f32], b: &[f32]) -> f32 {
    if let Some(d) = crate::f32_dot::dot(a, b) {
        return d;
    }
    // simsimd only returns None on a length mismatch; the scalar loop then stops at the
    // shorter slice.
    f32::dot(a, b).map_or_else(|| scalar_dot(a, b), |d| d as f32)
}

/// The dot product of `a` and `b`, computed with the best SIMD kernel for this CPU; an error
/// when their lengths differ.
pub fn dot(a: &[f32], b: &[f32]) -> Result<f32, VectorError> {
    same_length(a, b)?;
    Ok(dot_same_length(a, b))
}

/// The cosine similarity of `a` and `b` (1 for the same direction, −1 for opposite ones); an
/// error when their lengths differ.
///
/// Returns 0 when either vector is all zeros.
pub fn cosine(a: &[f32], b: &[f32]) -> Result<f32, VectorError> {
    same_length(a, b)?;
    let ab = f64::from(dot_same_length(a, b));
    let aa = f64::from(dot_same_length(a, a));
    let bb = f64::from(dot_same_length(b, b));
    if aa <= 0.0 || bb <= 0.0 {
        return Ok(0.0);
    }
    Ok((ab / (aa.sqrt() * bb.sqrt())) as f32)
}

/// The squared Euclidean distance between `a` and `b`; an error when their lengths differ.
pub fn squared_l2(a: &[f32], b: &[f32]) -> Result<f32, VectorError> {
    same_length(a, b)?;
    Ok(f32::l2sq(a, b).map_or_else(
        || a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum(),
        |d| d as f32,
    ))
}

/// The negated Euclidean distance, so that larger means closer, like [`dot`] and [`cosine`];
/// an error when the lengths differ.
pub fn neg_euclidean(a: &[f32], b: &[f32]) -> Result<f32, VectorError> {
    Ok(-squared_l2(a, b)?.sqrt())
}

/// The Euclidean norm of `a`.
pub fn norm(a: &[f32]) -> f32 {
    dot_same_length(a, a).sqrt()
}

/// The dot product of two int8 vectors, accumulated exactly; an error when their lengths
/// differ.
pub fn dot_i8(a: &[i8], b: &[i8]) -> Result<i64, VectorError> {
    same_length(a, b)?;
    // Blocks of 2^16 products sum exactly in an i32 (each at most 128² = 2^14), which the
    // compiler vectorises; the blocks add in i64, so the result is exact at any length.
    // (simsimd's NEON and serial kernels add into an i32, which wraps past 2^31: 133,144
    // products of 127 · 127.)
    const BLOCK: usize = 1 << 16;
    Ok(a.chunks(BLOCK)
        .zip(b.chunks(BLOCK))
        .map(|(x, y)| {
            i64::from(
                x.iter()
                    .zip(y)
                    .map(|(&p, &q)| i32::from(p) * i32::from(q))
                    .sum::<i32>(),
            )
        })
        .sum())
}

/// A plain sequential loop with no explicit SIMD: the baseline benchmarks compare against.
pub fn scalar_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        sum += x * y;
    }
    sum
}

/// The name of the `f32` dot-product kernel in use on this CPU (ours or simsimd's), for logs
/// and benchmarks.
pub fn kernel_name() -> &'static str {
    use simsimd::capabilities as c;
    if crate::f32_dot::dot(&[], &[]).is_some() {
        // Our own four-chain kernel scores f32 rows; simsimd serves the other kernels.
        "avx2-fma (4 chains)"
    } else if c::uses_sapphire() {
        "avx512-sapphire"
    } else if c::uses_genoa() {
        "avx512-genoa"
    } else if c::uses_ice() {
        "avx512-ice"
    } else if c::uses_skylake() {
        "avx512-skylake"
    } else if c::uses_haswell() {
        "avx2-fma"
    } else if c::uses_sve() {
        "sve"
    } else if c::uses_neon() {
        "neon"
    } else {
        "portable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), Ok(32.0));
        assert_eq!(squared_l2(&[1.0, 2.0], &[4.0, 6.0]), Ok(25.0));
        assert_eq!(neg_euclidean(&[1.0, 2.0], &[4.0, 6.0]), Ok(-5.0));
        assert!(
            (cosine(&[1.0, 0.0], &[1.0, 1.0]).unwrap() - std::f32::consts::FRAC_1_SQRT_2).abs()
                < 1e-6
        );
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), Ok(0.0));
        assert_eq!(
            dot_i8(&[127, -128, 3], &[127, -128, -1]),
            Ok(127 * 127 + 128 * 128 - 3)
        );
        assert_eq!(norm(&[3.0, 4.0]), 5.0);
        assert!(!kernel_name().is_empty());
    }

    /// The int8 dot product is exact past an i32's range, on every CPU.
    #[test]
    fn int8_dot_products_do_not_wrap() {
        let n = 1_000_000;
        let (a, b) = (vec![127i8; n], vec![-128i8; n]);
        assert_eq!(dot_i8(&a, &a), Ok(n as i64 * 127 * 127));
        assert_eq!(dot_i8(&a, &b), Ok(-(n as i64) * 127 * 128));
        assert_eq!(dot_i8(&b, &b), Ok(n as i64 * 128 * 128));
    }

    /// Issue 12 item 4: `dot(&[1, 2, 3], &[1, 1])` used to score the common prefix (3.0) as if
    /// the vectors matched; every pairwise kernel now refuses mismatched lengths.
    #[test]
    fn mismatched_lengths_are_an_error() {
        let mismatch = Err(VectorError::LengthMismatch { left: 3, right: 2 });
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[1.0, 1.0]), mismatch);
        assert_eq!(cosine(&[1.0, 2.0, 3.0], &[1.0, 1.0]), mismatch);
        assert_eq!(squared_l2(&[1.0, 2.0, 3.0], &[1.0, 1.0]), mismatch);
        assert_eq!(neg_euclidean(&[1.0, 2.0, 3.0], &[1.0, 1.0]), mismatch);
        assert_eq!(dot_i8(&[1, 2, 3], &[1, 1]), mismatch.map(|_: f32| 0));
        assert_eq!(
            dot(&[], &[1.0]),
            Err(VectorError::LengthMismatch { left: 0, right: 1 })
        );
        assert_eq!(dot(&[], &[]), Ok(0.0));
    }

    proptest! {
        #[test]
        fn simd_matches_scalar(v in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..2000)) {
            let (a, b): (Vec<f32>, Vec<f32>) = v.into_iter().unzip();
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            prop_assert!((f64::from(dot(&a, &b).unwrap()) - exact).abs() < 1e-3);
            prop_assert!((f64::from(scalar_dot(&a, &b)) - exact).abs() < 1e-3);
        }
    }
}
