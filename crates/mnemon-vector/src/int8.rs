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
