//! Turning asset references back into objects (docs/reference/assets.md#asset-references).
//!
//! - Resolution of one reference: [`AssetStore::resolve`](mnemon_store::AssetStore::resolve),
//!   with the typed, model-friendly [`ResolveError`](mnemon_store::ResolveError)s (they live in
//!   `mnemon-store`, where the trait needs them).
//! - Tool-call parameters: [`resolve_params`] replaces references in the parameters a
//!   [`CommandSpec`] (YAML or JSON) declares `asset_ref_acceptable`, in [`Mode::Lenient`] or
//!   [`Mode::Strict`], all or nothing.
//! - Message text: [`scan`] finds `<|…|>` markers (URL or JSON form, code skipped) and
//!   [`render`] replaces the resolvable ones, leaving the rest verbatim and reporting them.
//!
//! ```
//! use mnemon_refs::render_default;
//! use mnemon_store::{AssetStore, InMemoryStore};
//! use mnemon_types::Asset;
//!
//! let store = InMemoryStore::new();
//! store.put(&Asset::from_json(serde_json::json!({
//!     "asset_id": "a1", "content": {"labels": ["cat", "sofa"]},
//! }))?)?;
//! let out = render_default("Seen: <|asset://a1/content/labels/0|>, <|asset://a1/content/x|>", &store);
//! assert_eq!(out.text, "Seen: cat, <|asset://a1/content/x|>");
//! assert_eq!(out.unresolved.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod detect;
mod error;
mod params;
mod render;
mod scan;
#[cfg(test)]
mod scan_oracle;

pub use detect::{Detected, detect_reference};
pub use error::RefsError;
pub use params::{CommandSpec, Mode, ParameterSpec, resolve_params};
pub use render::{Rendered, Unresolved, default_renderer, render, render_default};
pub use scan::{Marker, MarkerForm, scan};
