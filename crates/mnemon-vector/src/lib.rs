//! SIMD vector kernels shared by the embedding library index and memory recall.
//!
//! * [`dot`], [`cosine`], [`squared_l2`] and [`neg_euclidean`] score two `f32` slices of one
//!   length (an error otherwise) with the best SIMD kernel the CPU offers (AVX-512, AVX2+FMA,
//!   NEON, SVE or a portable loop), picked once at run time by
//!   [simsimd](https://crates.io/crates/simsimd).
//! * [`Matrix`] stores many vectors as one contiguous, 64-byte-aligned row-major `f32` block, and
//!   [`MatrixView`] scans such a block (owned or memory-mapped) across rayon threads, with
//!   [`MatrixView::top_k`] selecting the best rows without sorting them all, and
//!   [`MatrixView::scores_many`] scoring a batch of queries in one pass with register-blocked
//!   tiles of queries × rows (AVX-512 or AVX2 + FMA, picked at run time), each score bit for bit
//!   the one-query scan's.
//! * [`dot_i8_symmetric`] is the int8 kernel of symmetric-quantised pre-scans (the library's
//!   fast mode keeps its own int8 copy, with the per-row norms its score bounds need), and
//!   [`dot_i8_symmetric_many`] its batch form (AVX-512 VNNI `vpdpbusd` tiles where the CPU has
//!   them), exact like it.
//!
//! Every row goes through the same kernel, so a row's score depends only on the query and that
//! row, never on its position or on how rows are split between threads.
//!
//! ```
//! use mnemon_vector::{dot, Matrix};
//!
//! assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), Ok(32.0));
//! assert!(dot(&[1.0, 2.0, 3.0], &[1.0, 1.0]).is_err());
//!
//! let mut m = Matrix::new(3);
//! m.push_row(&[1.0, 0.0, 0.0]).unwrap();
//! m.push_row(&[0.0, 1.0, 0.0]).unwrap();
//! m.push_row(&[0.6, 0.8, 0.0]).unwrap();
//! let best = m.view().top_k(&[0.0, 1.0, 0.0], 2, |_| true)?;
//! assert_eq!(best.iter().map(|s| s.index).collect::<Vec<_>>(), vec![1, 2]);
//! # Ok::<(), mnemon_vector::VectorError>(())
//! ```

mod blocked;
mod f32_dot;
mod int8;
mod kernel;
mod matrix;
mod select;

pub use int8::{dot_i8_symmetric, dot_i8_symmetric_many};
pub use kernel::{cosine, dot, dot_i8, kernel_name, neg_euclidean, norm, scalar_dot, squared_l2};
pub use matrix::{Matrix, MatrixView, ROW_ALIGN_FLOATS};
pub use select::{Scored, top_k_of_scores};

/// Errors from building or viewing a matrix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VectorError {
    /// A row or query does not have the matrix's dimension.
    #[error("vector has {found} dimensions but the matrix has {expected}")]
    DimensionMismatch {
        /// The matrix's dimension.
        expected: usize,
        /// The length that was given.
        found: usize,
    },
    /// Two vectors scored together have different lengths.
    #[error(
        "cannot score vectors of different lengths ({left} and {right}); embed both with the same model"
    )]
    LengthMismatch {
        /// The first vector's length.
        left: usize,
        /// The second vector's length.
        right: usize,
    },
    /// A borrowed block is too short for the rows it should hold, or its stride is below the
    /// dimension.
    #[error(
        "matrix block of {len} floats cannot hold {rows} rows of stride {stride} (dimension {dim})"
    )]
    BadLayout {
        /// Floats in the block.
        len: usize,
        /// Rows requested.
        rows: usize,
        /// Floats per row in the block.
        stride: usize,
        /// Meaningful floats per row.
        dim: usize,
    },
}
