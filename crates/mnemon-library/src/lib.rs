//! Portable embedding libraries: the Polymath library file format, its query engine, and a
//! SIMD + rayon index that scans at memory speed.
//!
//! * [`Library`] loads (file, reader, bytes or `serde_json::Value`; version-0 files are
//!   upgraded), validates, edits and saves libraries byte-compatibly with the reference.
//! * [`Library::query`] runs the reference's query pipeline on `&self` from a JSON object of
//!   arguments (as an HTTP host receives them), form fields, or typed [`QueryArgs`], under an
//!   [`AccessPolicy`].
//! * Embeddings live in one 64-byte-aligned matrix scanned by [`mnemon_vector`]; the optional
//!   fast mode ([`QueryOptions::fast`]) pre-scans an int8 copy and scores exactly only the rows
//!   whose proven score bound could reach the result, so it returns the exact scan's result.
//! * [`Library::pack`] writes a memory-mappable sidecar that [`Library::open`] picks up.
//!
//! ```
//! use mnemon_library::{AccessPolicy, Library};
//! use serde_json::json;
//!
//! let mut lib = Library::blank("test-model");
//! // Two bits with 3-dimensional embeddings: [1, 0, 0] and [0, 1, 0].
//! for (text, emb) in [("alpha", "AACAPwAAAAAAAAAA"), ("beta", "AAAAAAAAgD8AAAAA")] {
//!     lib.insert(&json!({"text": text, "embedding": emb, "token_count": 1,
//!                        "info": {"url": format!("https://example.com/{text}")}}))?;
//! }
//! let args = json!({"version": 1, "query_embedding_model": "test-model",
//!                   "query_embedding": "AAAAAAAAgD8AAAAA", "count": 1, "count_type": "bit"});
//! let result = lib.query(args.as_object().unwrap(), &AccessPolicy::default())?;
//! assert_eq!(result["bits"][0]["text"], "beta");
//! assert_eq!(result["bits"][0]["similarity"], 1.0);
//! # Ok::<(), mnemon_library::LibraryError>(())
//! ```

mod access;
mod builder;
mod chunk;
mod codec;
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
#[cfg(feature = "schema")]
pub mod schema;
mod sidecar;
mod storage;
pub mod synthetic;

pub use access::{AccessPolicy, DEFAULT_PRIVATE_TAG};
pub use chunk::{ChunkBounds, chunk_ranges, chunk_text};
pub use error::{LibraryError, Located, Result};
pub use id::BitId;
pub use library::{
    BitRef, CountType, DEFAULT_MODEL, InsertOutcome, Library, OpenOptions, Progress, tag_from_path,
    tag_from_relative_path,
};
pub use omit::{Omit, OmitKey};
pub use problems::{Problem, ProblemKind};
pub use query::{PlannedQuery, QueryArgs, QueryOptions};
pub use sidecar::sidecar_path;

/// Encodes a vector as the format's base64 text (little-endian float32, padded).
pub fn encode_embedding(v: &[f32]) -> String {
    codec::encode_vector(v)
}

/// Decodes the format's base64 text into a vector, strictly (spec §3.3).
pub fn decode_embedding(s: &str) -> std::result::Result<Vec<f32>, String> {
    codec::decode_vector(s).map_err(|e| e.to_string())
}
