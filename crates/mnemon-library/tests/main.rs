//! One test binary for the library's integration tests: each module was a binary of its own
//! (docs/ARCHITECTURE.md, "Tests").

mod fast;
mod files;
mod index;
mod sidecar;
