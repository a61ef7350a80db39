//! Portable embedding libraries: the Polymath library file format, its query engine, and a
//! SIMD + rayon index that scans at memory speed.
//!
//! * [`Library`] loads (a file, a directory, bytes or a `serde_json::Value`; version-0 files
//!   are upgraded), validates, edits and saves libraries byte-compatibly with the reference.
//! * [`Library::query`] runs the reference's query pipeline on `&self` from a typed
//!   [`QueryRequest`] under an [`AccessGrant`], and returns a typed [`QueryResult`]. The
//!   Polymath JSON arguments and result are parsed and written only at the edge, by [`wire`]
//!   (what a host, the CLI and the conformance tests use).
//! * Embeddings live in one 64-byte-aligned matrix scanned by [`mnemon_vector`]; the optional
//!   fast mode ([`QueryRequest::fast`]) pre-scans an int8 copy and scores exactly only the rows
//!   whose proven score bound could reach the result, so it returns the exact scan's result.
//! * [`Library::pack`] writes a memory-mappable sidecar that [`Library::open`] picks up, and
//!   [`Library::pack_index`] an approximate index (HNSW, [`mnemon_ann`]) beside it, which large
//!   libraries are then searched through unless a query asks for the exact scan
//!   ([`QueryRequest::exact`], [`IndexUse`]).
//!
//! ```
//! use mnemon_library::{AccessGrant, Library, NewBit, QueryRequest};
//!
//! let mut lib = Library::blank("test-model");
//! for (text, embedding) in [("alpha", [1.0, 0.0, 0.0]), ("beta", [0.0, 1.0, 0.0])] {
//!     let url = format!("https://example.com/{text}");
//!     lib.insert_bit(&NewBit { text, embedding: &embedding, token_count: 1, url: &url,
//!                              title: None, access_tag: None })?;
//! }
//! let request = QueryRequest::new("test-model", vec![0.0, 1.0, 0.0], 1);
//! let result = lib.query(&request, &AccessGrant::default())?;
//! let (best, hit) = result.bits().next().expect("one bit");
//! assert_eq!(best.text()?, "beta");
//! assert_eq!(hit.similarity, 1.0);
//! # Ok::<(), mnemon_library::LibraryError>(())
//! ```

mod access;
mod ann;
mod builder;
mod chunk;
mod codec;
mod cut;
mod dir;
mod error;
mod fast;
mod guard;
mod id;
mod library;
mod load;
mod mapped;
mod omit;
mod problems;
mod python;
mod query;
mod request;
mod result;
#[cfg(feature = "schema")]
pub mod schema;
mod shared_scan;
mod sidecar;
mod storage;
pub mod synthetic;
pub mod wire;

pub use access::{AccessGrant, AccessPolicy, DEFAULT_PRIVATE_TAG};
pub use ann::{DIR_INDEX_NAME, index_path};
pub use chunk::{ChunkBounds, chunk_ranges, chunk_text};
pub use cut::CountType;
pub use dir::dir_files;
pub use error::{LibraryError, Located, Result};
pub use id::BitId;
pub use library::{
    BLANK_LIBRARY_MODEL, BitRef, IndexState, InsertOutcome, Library, NewBit, OpenOptions, Progress,
    tag_from_path, tag_from_relative_path,
};
pub use omit::{Omit, OmitKey};
pub use problems::{Problem, ProblemKind};
pub use query::{PlannedQuery, Prescan};
pub use request::{DEFAULT_INDEX_MIN_BITS, IndexUse, QueryRequest, default_index_ef};
pub use result::{Hit, QueryMethod, QueryResult};
pub use shared_scan::{MAX_PRESCAN_TOP, ScanJob, ScanKind};
pub use sidecar::sidecar_path;
pub use wire::QueryOptions;

/// Encodes a vector as the format's base64 text (little-endian float32, padded): for JSON sent
/// on the wire, such as query arguments for a host. Rust callers pass vectors as they are
/// ([`QueryRequest`], [`NewBit`]).
pub fn encode_embedding(v: &[f32]) -> String {
    codec::encode_vector(v)
}

/// Decodes the format's base64 text into a vector, strictly
/// (docs/reference/library.md#embedding-encoding).
pub fn decode_embedding(s: &str) -> std::result::Result<Vec<f32>, String> {
    codec::decode_vector(s).map_err(|e| e.to_string())
}
