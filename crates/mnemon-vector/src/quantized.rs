//! An int8 copy of a matrix for approximate pre-scans.

use rayon::prelude::*;

use crate::kernel::dot_i8;
use crate::matrix::MatrixView;
use crate::select::{Scored, TopK};

const ROWS_PER_TASK: usize = 2048;

/// Symmetric per-row int8 quantisation of a matrix: row `i` ≈ `scale[i] * codes[i]`.
///
/// Approximate scores rank rows for a pre-scan; callers re-rank the candidates exactly.
#[derive(Debug, Clone)]
pub struct QuantizedMatrix {
    codes: Vec<i8>,
    scales: Vec<f32>,
    dim: usize,
}

/// Quantises one vector symmetrically; returns its scale.
fn quantize_into(src: &[f32], dst: &mut [i8]) -> f32 {
    let max = src.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        dst.fill(0);
        return 0.0;
    }
    let inv = 127.0 / max;
    for (d, s) in dst.iter_mut().zip(src) {
        *d = (s * inv).round().clamp(-127.0, 127.0) as i8;
    }
    max / 127.0
}

impl QuantizedMatrix {
    /// Quantises every row of `view`, in parallel.
    pub fn from_view(view: &MatrixView<'_>) -> Self {
        let dim = view.dim();
        let rows = view.rows();
        let mut codes = vec![0i8; rows * dim];
        let mut scales = vec![0.0f32; rows];
        if dim > 0 {
            codes
                .par_chunks_mut(dim)
                .zip(scales.par_iter_mut())
                .enumerate()
                .for_each(|(i, (dst, scale))| {
                    *scale = quantize_into(view.row(i).unwrap_or(&[]), dst);
                });
        }
        QuantizedMatrix { codes, scales, dim }
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.scales.len()
    }

    /// The `c` rows with the best approximate dot product with `query` among those where
    /// `keep(index)` holds, best first. Scores are approximate.
    pub fn top_candidates<F>(&self, query: &[f32], c: usize, keep: F) -> Vec<Scored>
    where
        F: Fn(usize) -> bool + Sync,
    {
        let rows = self.rows();
        if c == 0 || rows == 0 || self.dim == 0 {
            return Vec::new();
        }
        let mut q = vec![0i8; self.dim];
        let q_scale = quantize_into(query.get(..self.dim).unwrap_or(query), &mut q);
        let chunks = rows.div_ceil(ROWS_PER_TASK);
        (0..chunks)
            .into_par_iter()
            .map(|chunk| {
                let mut heap = TopK::new(c);
                let start = chunk * ROWS_PER_TASK;
                let end = (start + ROWS_PER_TASK).min(rows);
                for index in start..end {
                    if !keep(index) {
                        continue;
                    }
                    let codes = self
                        .codes
                        .get(index * self.dim..(index + 1) * self.dim)
                        .unwrap_or(&[]);
                    let scale = self.scales.get(index).copied().unwrap_or(0.0);
                    let approx = dot_i8(codes, &q) as f32 * scale * q_scale;
                    heap.offer(Scored {
                        index,
                        score: approx,
                    });
                }
                heap
            })
            .reduce(|| TopK::new(c), TopK::merge)
            .into_sorted()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Matrix;

    #[test]
    fn candidates_contain_the_exact_best() {
        let dim = 64;
        let mut m = Matrix::new(dim);
        // A small LCG: distinct, well-spread rows.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        for _ in 0..3000u32 {
            let v: Vec<f32> = (0..dim).map(|_| next()).collect();
            m.push_row(&v).unwrap();
        }
        let q: Vec<f32> = (0..dim).map(|d| (d as f32 * 0.3).cos()).collect();
        let exact = m.view().top_k(&q, 5, |_| true);
        let qm = QuantizedMatrix::from_view(&m.view());
        let cands = qm.top_candidates(&q, 69, |_| true);
        for e in exact {
            assert!(cands.iter().any(|c| c.index == e.index));
        }
    }
}
