//! The contiguous, 64-byte-aligned row matrix and its parallel scans.

use rayon::prelude::*;

use crate::VectorError;
use crate::blocked;
use crate::kernel::dot_same_length as dot;
use crate::select::{Scored, TopK};

/// Rows are padded to a multiple of this many floats (64 bytes), so every row starts on a
/// 64-byte boundary when the block does.
pub const ROW_ALIGN_FLOATS: usize = 16;

/// Rows per rayon task: large enough to amortise scheduling, small enough to balance two cores.
const ROWS_PER_TASK: usize = 1024;

/// Lanes (16 MiB) that [`Matrix::push_zero_row`] faults in ahead of the rows it fills.
const PREFAULT_BLOCK: usize = (16 << 20) / 64;

/// One 64-byte-aligned group of 16 floats; the unit the owned block is allocated in.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Lane([f32; ROW_ALIGN_FLOATS]);

const ZERO_LANE: Lane = Lane([0.0; ROW_ALIGN_FLOATS]);

/// The padded row length for a dimension.
fn stride_for(dim: usize) -> usize {
    dim.div_ceil(ROW_ALIGN_FLOATS) * ROW_ALIGN_FLOATS
}

/// An owned row-major `f32` matrix in one 64-byte-aligned allocation.
///
/// Row `i` occupies floats `i * stride .. i * stride + dim`; the padding up to `stride` is zero.
#[derive(Clone)]
pub struct Matrix {
    lanes: Vec<Lane>,
    dim: usize,
    rows: usize,
}

impl std::fmt::Debug for Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matrix")
            .field("rows", &self.rows)
            .field("dim", &self.dim)
            .finish_non_exhaustive()
    }
}

impl Matrix {
    /// An empty matrix whose rows will have `dim` floats.
    pub fn new(dim: usize) -> Self {
        Matrix {
            lanes: Vec::new(),
            dim,
            rows: 0,
        }
    }

    /// An empty matrix with room for `rows` rows before it reallocates.
    pub fn with_capacity(dim: usize, rows: usize) -> Self {
        let mut m = Matrix::new(dim);
        m.reserve(rows);
        m
    }

    /// A matrix of `rows` zero rows.
    pub fn zeros(rows: usize, dim: usize) -> Self {
        let lanes_per_row = stride_for(dim) / ROW_ALIGN_FLOATS;
        Matrix {
            lanes: vec![ZERO_LANE; rows.saturating_mul(lanes_per_row)],
            dim,
            rows,
        }
    }

    /// Reserves room for `additional` more rows.
    pub fn reserve(&mut self, additional: usize) {
        let lanes_per_row = stride_for(self.dim) / ROW_ALIGN_FLOATS;
        self.lanes.reserve(additional.saturating_mul(lanes_per_row));
    }

    /// Floats per row that hold data.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Floats from one row's start to the next (the dimension rounded up to 16).
    pub fn stride(&self) -> usize {
        stride_for(self.dim)
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Whether the matrix has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Appends a row; it must have exactly [`Matrix::dim`] floats.
    pub fn push_row(&mut self, row: &[f32]) -> Result<(), VectorError> {
        if row.len() != self.dim {
            return Err(VectorError::DimensionMismatch {
                expected: self.dim,
                found: row.len(),
            });
        }
        let index = self.push_zero_row();
        if let Some(dst) = self.row_mut(index) {
            dst.copy_from_slice(row);
        }
        Ok(())
    }

    /// Appends a row of zeros and returns its index, for callers that fill rows in place
    /// (for example decoding base64 straight into [`Matrix::row_mut`]).
    pub fn push_zero_row(&mut self) -> usize {
        let lanes_per_row = self.stride() / ROW_ALIGN_FLOATS;
        let before = self.lanes.len();
        let after = before + lanes_per_row;
        if before == 0 || before / PREFAULT_BLOCK != after / PREFAULT_BLOCK {
            self.prefault_ahead(after);
        }
        self.lanes.resize(after, ZERO_LANE);
        self.rows += 1;
        self.rows - 1
    }

    /// Touches, across the rayon threads, the pages of the reserved block after the one that
    /// holds lane `at` (and that block too when the matrix is still empty).
    ///
    /// A library's matrix is reserved up front and filled row by row on one thread, which would
    /// otherwise take every first-touch page fault alone: a third of a 100,000-row load. Only a
    /// block or two ahead is touched, so a generous reservation costs no resident memory.
    fn prefault_ahead(&mut self, at: usize) {
        const LANES_PER_PAGE: usize = 4096 / std::mem::size_of::<Lane>();
        let len = self.lanes.len();
        if self.lanes.capacity() - len < PREFAULT_BLOCK {
            return;
        }
        let next_block = (at / PREFAULT_BLOCK + 1) * PREFAULT_BLOCK;
        let first = if len == 0 { 0 } else { next_block.max(len) };
        let end = (next_block + PREFAULT_BLOCK).min(self.lanes.capacity());
        let spare = self.lanes.spare_capacity_mut();
        let Some(ahead) = spare.get_mut(first.saturating_sub(len)..end.saturating_sub(len)) else {
            return;
        };
        ahead.par_chunks_mut(LANES_PER_PAGE * 64).for_each(|pages| {
            for page in pages.chunks_mut(LANES_PER_PAGE) {
                if let Some(lane) = page.first_mut() {
                    lane.write(ZERO_LANE);
                }
            }
        });
    }

    /// Removes the last row.
    pub fn pop_row(&mut self) {
        if self.rows > 0 {
            self.rows -= 1;
            self.lanes
                .truncate(self.rows * (self.stride() / ROW_ALIGN_FLOATS));
        }
    }

    /// Removes row `index`, moving later rows up by one. Out-of-range indices are ignored.
    pub fn remove_row(&mut self, index: usize) {
        if index >= self.rows {
            return;
        }
        let lanes_per_row = self.stride() / ROW_ALIGN_FLOATS;
        self.lanes
            .drain(index * lanes_per_row..(index + 1) * lanes_per_row);
        self.rows -= 1;
    }

    /// Row `index` (its `dim` floats, without padding), or `None` when out of range.
    pub fn row(&self, index: usize) -> Option<&[f32]> {
        if index >= self.rows {
            return None;
        }
        let start = index * self.stride();
        self.as_slice().get(start..start + self.dim)
    }

    /// Row `index` for writing, or `None` when out of range.
    pub fn row_mut(&mut self, index: usize) -> Option<&mut [f32]> {
        if index >= self.rows {
            return None;
        }
        let start = index * self.stride();
        let dim = self.dim;
        self.as_mut_slice().get_mut(start..start + dim)
    }

    /// The whole block, `rows * stride` floats including padding.
    pub fn as_slice(&self) -> &[f32] {
        // SAFETY: `Lane` is `repr(C)` over `[f32; 16]` with no padding (64 bytes, align 64), so
        // `lanes.len()` lanes are exactly `16 * lanes.len()` initialised, contiguous `f32`s.
        unsafe {
            std::slice::from_raw_parts(
                self.lanes.as_ptr().cast::<f32>(),
                self.lanes.len() * ROW_ALIGN_FLOATS,
            )
        }
    }

    /// The whole block for writing; rows are `stride` floats apart.
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        // SAFETY: as in `as_slice`; the exclusive borrow of `self` makes the view unique.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.lanes.as_mut_ptr().cast::<f32>(),
                self.lanes.len() * ROW_ALIGN_FLOATS,
            )
        }
    }

    /// The rows `start..end` for writing, as one block of `stride`-sized chunks (padding
    /// included), clamped to the matrix.
    pub fn rows_mut(&mut self, start: usize, end: usize) -> &mut [f32] {
        let stride = self.stride();
        let end = end.min(self.rows);
        let start = start.min(end);
        let block = self.as_mut_slice();
        &mut block[start * stride..end * stride]
    }

    /// A borrowed view for scanning.
    pub fn view(&self) -> MatrixView<'_> {
        MatrixView {
            data: self.as_slice(),
            dim: self.dim,
            stride: self.stride(),
            rows: self.rows,
        }
    }
}

/// A borrowed row-major matrix: an owned [`Matrix`] or a block mapped from a file.
#[derive(Debug, Clone, Copy)]
pub struct MatrixView<'a> {
    data: &'a [f32],
    dim: usize,
    stride: usize,
    rows: usize,
}

impl MatrixView<'static> {
    /// A view with no rows and no columns.
    pub const EMPTY: MatrixView<'static> = MatrixView {
        data: &[],
        dim: 0,
        stride: 0,
        rows: 0,
    };
}

impl<'a> MatrixView<'a> {
    /// Views `rows` rows of `dim` floats placed `stride` floats apart in `data`.
    pub fn new(
        data: &'a [f32],
        dim: usize,
        stride: usize,
        rows: usize,
    ) -> Result<Self, VectorError> {
        let needed = rows.checked_mul(stride);
        if stride < dim || needed.is_none_or(|n| n > data.len()) {
            return Err(VectorError::BadLayout {
                len: data.len(),
                rows,
                stride,
                dim,
            });
        }
        Ok(MatrixView {
            data,
            dim,
            stride,
            rows,
        })
    }

    /// Floats per row that hold data.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Floats from one row's start to the next.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Row `index`, or `None` when out of range.
    pub fn row(&self, index: usize) -> Option<&'a [f32]> {
        if index >= self.rows {
            return None;
        }
        let start = index * self.stride;
        self.data.get(start..start + self.dim)
    }

    /// The row's data at `index`; only called with indices below `rows`.
    fn row_unchecked_len(&self, index: usize) -> &'a [f32] {
        self.row(index).unwrap_or(&[])
    }

    /// A query must have the matrix's dimension: scoring a shorter or longer one over the
    /// common prefix would rank silently wrong (issue 12 item 4).
    fn check_query(&self, query: &[f32]) -> Result<(), VectorError> {
        if query.len() == self.dim {
            Ok(())
        } else {
            Err(VectorError::DimensionMismatch {
                expected: self.dim,
                found: query.len(),
            })
        }
    }

    /// Scores every row against `query` with [`dot`](crate::dot), in parallel; an error when
    /// `query` does not have [`MatrixView::dim`] floats.
    pub fn scores(&self, query: &[f32]) -> Result<Vec<f32>, VectorError> {
        let mut out = vec![0.0; self.rows];
        self.scores_into(query, &mut out)?;
        Ok(out)
    }

    /// Like [`MatrixView::scores`], into `out` (only `min(out.len(), rows)` entries are written).
    pub fn scores_into(&self, query: &[f32], out: &mut [f32]) -> Result<(), VectorError> {
        self.check_query(query)?;
        let n = out.len().min(self.rows);
        out[..n]
            .par_chunks_mut(ROWS_PER_TASK)
            .enumerate()
            .for_each(|(chunk, scores)| {
                let base = chunk * ROWS_PER_TASK;
                for (offset, score) in scores.iter_mut().enumerate() {
                    *score = dot(self.row_unchecked_len(base + offset), query);
                }
            });
        Ok(())
    }

    /// The dot product of every row with each of `queries`, in one pass over the matrix:
    /// `result[q][row]` equals `scores(queries[q])[row]` bit for bit. An error when a query
    /// does not have [`MatrixView::dim`] floats.
    ///
    /// A scan of a large matrix is bound by memory bandwidth, not arithmetic. Here each small
    /// block of rows is read from memory once and scored against every query while it sits in
    /// cache, in register-blocked tiles of queries × rows (`crate::blocked`), so `n` queries
    /// cost little more than one until the multiply-adds themselves set the pace.
    pub fn scores_many(&self, queries: &[&[f32]]) -> Result<Vec<Vec<f32>>, VectorError> {
        let mut out: Vec<Vec<f32>> = queries.iter().map(|_| vec![0.0; self.rows]).collect();
        let mut outs: Vec<&mut [f32]> = out.iter_mut().map(Vec::as_mut_slice).collect();
        self.scores_many_rows(queries, 0, &mut outs)?;
        Ok(out)
    }

    /// [`MatrixView::scores_many`] over a run of rows: `outs[q][i]` becomes the dot product of
    /// row `first + i` with `queries[q]`, bit for bit what [`MatrixView::scores`] gives that
    /// row, for `i` below the shortest output and below the rows left after `first` (entries
    /// past them are left as they are). An error when a query does not have
    /// [`MatrixView::dim`] floats; `queries` and `outs` are paired in order, extra ones of
    /// either ignored.
    ///
    /// This is one step of a scan shared by queries that join and leave while it runs: each
    /// block of rows is read once for all the queries waiting at that moment.
    pub fn scores_many_rows(
        &self,
        queries: &[&[f32]],
        first: usize,
        outs: &mut [&mut [f32]],
    ) -> Result<(), VectorError> {
        for query in queries {
            self.check_query(query)?;
        }
        let pairs = queries.len().min(outs.len());
        let queries = queries.get(..pairs).unwrap_or(&[]);
        let len = outs
            .iter()
            .take(pairs)
            .map(|o| o.len())
            .min()
            .unwrap_or(0)
            .min(self.rows.saturating_sub(first));
        let kernel = blocked::detect();
        // Chunk `c` of every query's output, gathered per chunk so tasks own disjoint slices.
        let mut per_chunk: Vec<Vec<&mut [f32]>> = Vec::new();
        for scores in outs.iter_mut().take(pairs) {
            let Some(scores) = scores.get_mut(..len) else {
                continue;
            };
            for (c, chunk) in scores.chunks_mut(ROWS_PER_TASK).enumerate() {
                if per_chunk.len() <= c {
                    per_chunk.push(Vec::with_capacity(pairs));
                }
                if let Some(slot) = per_chunk.get_mut(c) {
                    slot.push(chunk);
                }
            }
        }
        per_chunk
            .into_par_iter()
            .enumerate()
            .for_each(|(c, mut outputs)| {
                let base = first + c * ROWS_PER_TASK;
                let len = outputs.first().map_or(0, |o| o.len());
                let rows = blocked::Rows {
                    data: self.data.get(base * self.stride..).unwrap_or(&[]),
                    stride: self.stride,
                    dim: self.dim,
                    count: len,
                };
                blocked::dots(kernel, rows, queries, &mut outputs);
            });
        Ok(())
    }

    /// Scores every row with a caller-supplied kernel, in parallel (for example cosine or
    /// negative Euclidean distance instead of the dot product).
    pub fn scores_with<F>(&self, query: &[f32], kernel: F) -> Vec<f32>
    where
        F: Fn(&[f32], &[f32]) -> f32 + Sync,
    {
        let mut out = vec![0.0; self.rows];
        out.par_chunks_mut(ROWS_PER_TASK)
            .enumerate()
            .for_each(|(chunk, scores)| {
                let base = chunk * ROWS_PER_TASK;
                for (offset, score) in scores.iter_mut().enumerate() {
                    *score = kernel(self.row_unchecked_len(base + offset), query);
                }
            });
        out
    }

    /// The `k` best rows by dot product with `query` among those for which `keep(index)` is
    /// true, best first; ties go to the lower index. Each rayon task keeps a bounded heap and the
    /// heaps are merged, so nothing is fully sorted. The result equals a stable full sort cut to
    /// `k`. An error when `query` does not have [`MatrixView::dim`] floats.
    pub fn top_k<F>(&self, query: &[f32], k: usize, keep: F) -> Result<Vec<Scored>, VectorError>
    where
        F: Fn(usize) -> bool + Sync,
    {
        self.check_query(query)?;
        if k == 0 || self.rows == 0 {
            return Ok(Vec::new());
        }
        let chunks = self.rows.div_ceil(ROWS_PER_TASK);
        Ok((0..chunks)
            .into_par_iter()
            .map(|chunk| {
                let mut heap = TopK::new(k);
                let start = chunk * ROWS_PER_TASK;
                let end = (start + ROWS_PER_TASK).min(self.rows);
                for index in start..end {
                    if keep(index) {
                        heap.offer(Scored {
                            index,
                            score: dot(self.row_unchecked_len(index), query),
                        });
                    }
                }
                heap
            })
            .reduce(|| TopK::new(k), TopK::merge)
            .into_sorted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top_k_of_scores;

    #[test]
    fn scores_many_equals_one_scan_per_query() {
        let dim = 37;
        let rows = ROWS_PER_TASK * 2 + 45;
        let mut m = Matrix::new(dim);
        for r in 0..rows {
            let row: Vec<f32> = (0..dim)
                .map(|d| ((r * 31 + d * 7) % 97) as f32 / 13.0 - 3.0)
                .collect();
            m.push_row(&row).unwrap();
        }
        let queries: Vec<Vec<f32>> = (0..5)
            .map(|q| {
                (0..dim)
                    .map(|d| ((q * 11 + d * 5) % 23) as f32 / 7.0 - 1.5)
                    .collect()
            })
            .collect();
        let refs: Vec<&[f32]> = queries.iter().map(Vec::as_slice).collect();
        let view = m.view();
        let many = view.scores_many(&refs).unwrap();
        assert_eq!(many.len(), 5);
        for (q, scores) in queries.iter().zip(&many) {
            let one = view.scores(q).unwrap();
            assert_eq!(
                scores.iter().map(|s| s.to_bits()).collect::<Vec<_>>(),
                one.iter().map(|s| s.to_bits()).collect::<Vec<_>>()
            );
        }
        assert!(view.scores_many(&[]).unwrap().is_empty());
        assert_eq!(
            Matrix::new(dim).view().scores_many(&refs).unwrap(),
            vec![Vec::<f32>::new(); 5]
        );
    }

    /// Issue 17 item 0: a scan shared by queries that come and go scores the rows block by
    /// block, starting anywhere; every block gives the one-query scan's bits.
    #[test]
    fn scores_many_rows_equals_the_rows_of_one_scan() {
        let dim = 21;
        let rows = ROWS_PER_TASK + 300;
        let mut m = Matrix::new(dim);
        for r in 0..rows {
            let row: Vec<f32> = (0..dim)
                .map(|d| ((r * 17 + d * 3) % 89) as f32 / 11.0 - 4.0)
                .collect();
            m.push_row(&row).unwrap();
        }
        let queries: Vec<Vec<f32>> = (0..3)
            .map(|q| (0..dim).map(|d| ((q * 7 + d) % 13) as f32 - 6.0).collect())
            .collect();
        let refs: Vec<&[f32]> = queries.iter().map(Vec::as_slice).collect();
        let view = m.view();
        let whole = view.scores_many(&refs).unwrap();
        // Blocks that straddle task boundaries, in rotated order, the last one cut short.
        let blocks = [(700, 500), (1200, 500), (0, 700)];
        let mut got = vec![vec![f32::NAN; rows]; 3];
        for (first, len) in blocks {
            let mut outs: Vec<&mut [f32]> = got
                .iter_mut()
                .map(|g| &mut g[first..(first + len).min(rows)])
                .collect();
            view.scores_many_rows(&refs, first, &mut outs).unwrap();
        }
        for (g, w) in got.iter().zip(&whole) {
            assert_eq!(
                g.iter().map(|s| s.to_bits()).collect::<Vec<_>>(),
                w.iter().map(|s| s.to_bits()).collect::<Vec<_>>()
            );
        }
        // Outputs past the last row are left alone; a query of another dimension is refused.
        let mut tail = [-1.0f32; 10];
        view.scores_many_rows(&refs[..1], rows - 4, &mut [&mut tail[..]])
            .unwrap();
        assert_eq!(&tail[..4], &whole[0][rows - 4..]);
        assert!(tail[4..].iter().all(|&s| s == -1.0));
        let short = [1.0f32; 3];
        assert!(
            view.scores_many_rows(&[&short[..]], 0, &mut [&mut tail[..]])
                .is_err()
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(40))]

        /// Issue 17 item 0: the register-blocked batch scan gives every row of every query the
        /// bits of the one-query scan, for random dimensions (every kernel tail), row counts
        /// across task boundaries and batch sizes (every edge tile).
        #[test]
        fn scores_many_is_bit_identical_for_random_shapes(
            dim in 1usize..100,
            rows in 0usize..2100,
            queries in 1usize..18,
            seed in proptest::prelude::any::<u64>(),
        ) {
            let mut state = seed | 1;
            let mut next = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            };
            let mut m = Matrix::with_capacity(dim, rows);
            for _ in 0..rows {
                let row: Vec<f32> = (0..dim).map(|_| next()).collect();
                m.push_row(&row).unwrap();
            }
            let qs: Vec<Vec<f32>> = (0..queries).map(|_| (0..dim).map(|_| next()).collect()).collect();
            let refs: Vec<&[f32]> = qs.iter().map(Vec::as_slice).collect();
            let view = m.view();
            let many = view.scores_many(&refs).unwrap();
            for (q, scores) in qs.iter().zip(&many) {
                let one = view.scores(q).unwrap();
                proptest::prop_assert_eq!(
                    scores.iter().map(|s| s.to_bits()).collect::<Vec<_>>(),
                    one.iter().map(|s| s.to_bits()).collect::<Vec<_>>()
                );
                let best = view.top_k(q, 5, |_| true).unwrap();
                proptest::prop_assert_eq!(top_k_of_scores(scores, 5, |_| true), best);
            }
        }
    }

    /// Issue 12 item 4: a query of another length was scored over the common prefix of each
    /// row; every scan now refuses it.
    #[test]
    fn scans_refuse_a_query_of_another_length() {
        let mut m = Matrix::new(3);
        m.push_row(&[1.0, 2.0, 3.0]).unwrap();
        let view = m.view();
        let mismatch = VectorError::DimensionMismatch {
            expected: 3,
            found: 2,
        };
        assert_eq!(view.scores(&[1.0, 1.0]), Err(mismatch.clone()));
        assert_eq!(
            view.scores_into(&[1.0, 1.0], &mut [0.0]),
            Err(mismatch.clone())
        );
        assert_eq!(
            view.scores_many(&[&[1.0, 1.0, 1.0], &[1.0, 1.0]]),
            Err(mismatch.clone())
        );
        assert_eq!(view.top_k(&[1.0, 1.0], 1, |_| true), Err(mismatch));
        assert_eq!(view.scores(&[1.0, 1.0, 1.0]), Ok(vec![6.0]));
    }

    #[test]
    fn a_large_reservation_fills_correctly_across_prefaulted_blocks() {
        // One lane per row; the reservation spans several prefault blocks.
        let rows = PREFAULT_BLOCK * 3 + 17;
        let mut m = Matrix::with_capacity(16, rows + 1000);
        for i in 0..rows {
            let r = m.push_zero_row();
            assert_eq!(r, i);
            if i % 4099 == 0
                && let Some(row) = m.row_mut(r)
            {
                row[0] = i as f32;
            }
        }
        assert_eq!(m.rows(), rows);
        for i in (0..rows).step_by(4099) {
            let row = m.row(i).unwrap();
            assert_eq!(row[0], i as f32);
            assert!(row[1..].iter().all(|x| *x == 0.0));
        }
        assert!(m.as_slice().iter().filter(|x| **x != 0.0).count() <= rows / 4099 + 1);
    }

    #[test]
    fn rows_are_aligned_and_padded() {
        let mut m = Matrix::new(3);
        for i in 0..5 {
            m.push_row(&[i as f32, 1.0, 2.0]).unwrap();
        }
        assert_eq!(m.stride(), 16);
        assert_eq!(m.as_slice().as_ptr() as usize % 64, 0);
        assert_eq!(m.row(4).unwrap(), &[4.0, 1.0, 2.0]);
        assert!(m.row(5).is_none());
        assert!(m.push_row(&[1.0]).is_err());
        m.remove_row(0);
        assert_eq!(m.row(0).unwrap(), &[1.0, 1.0, 2.0]);
        assert_eq!(m.rows(), 4);
        m.pop_row();
        assert_eq!(m.rows(), 3);
    }

    #[test]
    fn top_k_equals_stable_full_sort() {
        let dim = 7;
        let mut m = Matrix::new(dim);
        for i in 0..5000u32 {
            // Few distinct rows, so there are many exact ties.
            let v: Vec<f32> = (0..dim)
                .map(|d| ((i % 37) as f32 * 0.1 + d as f32).sin())
                .collect();
            m.push_row(&v).unwrap();
        }
        let q: Vec<f32> = (0..dim).map(|d| (d as f32).cos()).collect();
        let scores = m.view().scores(&q).unwrap();
        let mut all: Vec<usize> = (0..m.rows()).filter(|i| i % 3 != 0).collect();
        all.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        for k in [1, 10, 100, 4000] {
            let got = m.view().top_k(&q, k, |i| i % 3 != 0).unwrap();
            let want: Vec<usize> = all.iter().copied().take(k).collect();
            assert_eq!(got.iter().map(|s| s.index).collect::<Vec<_>>(), want);
        }
    }

    #[test]
    fn view_checks_layout() {
        let data = vec![0.0; 32];
        assert!(MatrixView::new(&data, 16, 16, 2).is_ok());
        assert!(MatrixView::new(&data, 16, 16, 3).is_err());
        assert!(MatrixView::new(&data, 17, 16, 1).is_err());
    }
}
