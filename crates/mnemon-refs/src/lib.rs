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
//! - Input from a client: [`render_limited`] and [`resolve_params_limited`] bound the
//!   references one call resolves and the bytes its output takes ([`Limits`]: by default 10,000
//!   and 32 MiB), since each reference can stand for a whole stored payload. Every entry point
//!   resolves each distinct reference once per call.
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
mod fetched;
mod limits;
mod params;
mod render;
mod scan;
#[cfg(test)]
mod scan_oracle;
mod size;
#[cfg(test)]
mod test_store;

pub use detect::{Detected, detect_reference};
pub use error::RefsError;
pub use limits::{DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_REFERENCES, Limits};
pub use params::{CommandSpec, Mode, ParameterSpec, resolve_params, resolve_params_limited};
pub use render::{
    Rendered, Unresolved, WITHHELD_MESSAGE_BYTES, default_renderer, render, render_default,
    render_limited,
};
pub use scan::{Marker, MarkerForm, scan};
