//! Where assets live: the [`AssetStore`] trait and its implementations
//! (docs/reference/assets.md#asset-store).
//!
//! - [`InMemoryStore`]: holds everything, in-process objects included.
//! - [`SqliteAssetStore`]: the embedded default; one database file in WAL mode, durable when a put
//!   returns, byte buffers stored as BLOBs, objects only through a registered [`ObjectCodec`].
//! - `PostgresAssetStore` (feature `postgres`): the same in a PostgreSQL database that many
//!   processes and machines share.
//!
//! Durable stores are opened for one namespace (tenant, `mnemon_db::Namespace`) and never
//! reach another's assets.
//!
//! Filters, expiry and forgetting (issue 14; docs/reference/assets.md#filters, #expiry,
//! #forget) work the same on every store:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use mnemon_store::{AssetStore, Expiry, Filter, InMemoryStore, ManualClock};
//! use mnemon_types::Asset;
//!
//! let clock = Arc::new(ManualClock::new(1_000));
//! let store = InMemoryStore::with_expiry(clock.clone(), None);
//! let doc = |id: &str, owner: &str| {
//!     Asset::from_json(serde_json::json!({"asset_id": id, "owner": owner, "content": 1}))
//! };
//! store.put(&doc("u1/a", "alice")?)?;
//! store.put_expiring(&doc("u1/b", "alice")?, Expiry::After(Duration::from_millis(10)))?;
//! store.put(&doc("u2/a", "bob")?)?;
//! let alice: Filter = r#"{"eq": {"path": "owner", "value": "alice"}}"#.parse()?;
//! assert_eq!(store.list_where(Some(&alice), Some(10))?, ["u1/a", "u1/b"]);
//! clock.set(1_010); // the boundary instant: u1/b is gone for every read
//! assert_eq!(store.count_where(Some(&alice))?, 1);
//! assert_eq!(store.gc()?, 1);
//! assert_eq!(store.forget("u1/")?, 1);
//! assert_eq!(store.list_ids(None)?, ["u2/a"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Resolution of references ([`resolve_in`], [`resolve_asset`], [`ResolveError`]) lives here
//! because [`AssetStore::resolve`] needs it; `mnemon-refs` builds tool-parameter and
//! message-text substitution on top.
//!
//! ```
//! use mnemon_store::{AssetStore, InMemoryStore};
//! use mnemon_types::Asset;
//!
//! let store = InMemoryStore::new();
//! let asset = Asset::from_json(serde_json::json!({
//!     "asset_id": "a1",
//!     "asset_type": "image",
//!     "content": {"labels": ["cat", "sofa"]},
//! }))?;
//! store.put(&asset)?;
//! let value = store.resolve(&"asset://a1/content/labels/1".parse()?)?;
//! assert_eq!(value.as_str(), Some("sofa"));
//! assert_eq!(store.list_ids(Some("image"))?, ["a1"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod codec;
mod encoding;
mod error;
mod listing;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod resolve;
mod sqlite;
mod store;

pub use codec::{CodecError, CodecRegistry, ObjectCodec};
pub use error::StoreError;
pub use memory::InMemoryStore;
/// Expiry (docs/reference/assets.md#expiry): the clock the stores read and a write's
/// time-to-live, shared with the other stores through `mnemon-db`.
pub use mnemon_db::expiry::{Clock, Expiry, ManualClock, SystemClock};
/// The filter language of [`AssetStore::list_where`] (docs/reference/filters.md).
pub use mnemon_filter::{Filter, FilterError};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresAssetOptions, PostgresAssetStore};
pub use resolve::{MAX_LISTED_KEYS, ResolveError, resolve_asset, resolve_in};
pub use sqlite::{SqliteAssetOptions, SqliteAssetStore};
pub use store::{AssetMeta, AssetStore, MAX_NESTING};
