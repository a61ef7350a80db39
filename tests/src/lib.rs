//! Shared helpers for Mnemon's cross-crate and conformance tests.
//!
//! Fixtures live in `tests/fixtures/` (copied from the original systems' runs), so the tests never
//! read anything outside the repository.

pub mod artifact_store_conformance;
pub mod asset_store_conformance;
pub mod crash;
pub mod memory_conformance;
pub mod postgres;

use std::path::PathBuf;

/// Absolute path of a fixture file under `tests/fixtures/`.
pub fn fixture(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(relative)
}
