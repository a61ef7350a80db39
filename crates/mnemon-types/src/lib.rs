//! Mnemon's data model, shared by every other crate.
//!
//! - [`Value`]: the value tree an asset's content is made of: JSON, plus byte buffers
//!   ([`Bytes`]) and live Rust values ([`Object`], through the [`AssetObject`] trait).
//! - [`Asset`]: an object kept outside the chat history under an id.
//! - [`meta`], [`flatten`], [`unflatten`]: the shape of an asset as the model sees it.
//! - [`AssetRef`]: a reference to an asset or a field inside it, in object form or as an
//!   `asset://` URL.
//! - [`Embedder`]: turns texts into vectors, for memory recall and library import, and
//!   [`check_embeddings`], the check of its contract; [`Tokenizer`]: counts a text's tokens.
//! - [`msg`] and [`artifact`]: conversation messages and artifact records.
//!
//! ```
//! use mnemon_types::{flatten, meta, Asset, AssetRef};
//! use serde_json::json;
//!
//! let asset = Asset::from_json(json!({
//!     "asset_id": "a1",
//!     "content": {"labels": ["cat", "sofa"]},
//! }))?;
//! let flat = flatten(&meta(&asset), "/", false)?;
//! assert_eq!(flat["content/labels/1"], json!("sofa"));
//!
//! let reference: AssetRef = "asset://a1/content/labels/1".parse()?;
//! assert_eq!(serde_json::to_value(&reference)?, json!({
//!     "asset_id": "a1",
//!     "field_path": ["content", "labels", 1],
//! }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod artifact;
mod asset;
mod embedder;
mod error;
mod meta;
pub mod msg;
mod reference;
#[cfg(feature = "schema")]
mod schema;
mod tokenizer;
mod value;

pub use artifact::{Artifact, StorageLocation};
pub use asset::{ASSET_FIELDS, Asset, new_asset_id};
pub use embedder::{ContractError, EmbedError, Embedder, check_embeddings};
pub use error::{TypesError, UrlError};
pub use meta::{
    MAX_UNFLATTEN_DEPTH, MetaOptions, escape_key, flatten, meta, meta_with, render_meta_block,
    unflatten,
};
pub use msg::{Msg, MsgError, MsgFactory, MsgKind};
pub use reference::{AssetRef, PathSegment, canonical_index};
pub use tokenizer::{Tokenizer, WhitespaceTokenizer};
pub use value::{
    AssetObject, BYTES_TYPE, Bytes, DICT_TYPE, LIST_TYPE, Map, Object, Value, object_type_string,
};
