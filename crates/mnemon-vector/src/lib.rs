//! SIMD vector kernels shared by the embedding library index and memory recall.
//!
//! Under construction (issue 4).
