//! Mnemon: a memory LLM agents can trust.
//!
//! This facade re-exports Mnemon's components; the `mnemon` binary is the command-line tool.
//!
//! ```
//! let r: mnemon::types::AssetRef = "asset://a1/content".parse()?;
//! assert_eq!(r.asset_id, "a1");
//! # Ok::<(), mnemon::types::UrlError>(())
//! ```

pub use mnemon_types as types;
