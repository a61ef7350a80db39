//! The `AssetStore` trait: the narrow interface the rest of Mnemon sees (spec/assets.md §7).

use mnemon_types::{Asset, AssetRef, Value, meta};

use crate::error::StoreError;
use crate::resolve::{ResolveError, resolve_asset};

/// An asset's meta: its fields with bytes and objects replaced by type strings.
pub type AssetMeta = serde_json::Map<String, serde_json::Value>;

/// Where assets live.
///
/// The trait is synchronous and object-safe (`Box<dyn AssetStore>`, `Arc<dyn AssetStore>`),
/// and every implementation is `Send + Sync`, so one store can serve many threads. It takes and
/// returns owned, plain data, so a networked implementation (PostgreSQL) fits behind it.
///
/// Contract (checked by the shared conformance suite in `mnemon-tests`):
/// - [`put`](Self::put) inserts or replaces the whole asset atomically; when it returns, the
///   asset is visible to every later call (and, for durable stores, survives the process);
/// - [`put_batch`](Self::put_batch) stores all of its assets or none;
/// - a failed call changes nothing;
/// - [`list_ids`](Self::list_ids) returns ids in ascending byte order.
pub trait AssetStore: Send + Sync {
    /// Stores `asset`, replacing any asset with the same id.
    fn put(&self, asset: &Asset) -> Result<(), StoreError>;

    /// Stores every asset in one atomic step: all of them or, on an error, none. Later assets
    /// win over earlier ones with the same id.
    fn put_batch(&self, assets: &[Asset]) -> Result<(), StoreError>;

    /// The asset with this id, if there is one.
    fn get(&self, asset_id: &str) -> Result<Option<Asset>, StoreError>;

    /// Removes the asset; returns whether it existed.
    fn delete(&self, asset_id: &str) -> Result<bool, StoreError>;

    /// The ids of all assets, or of those whose `asset_type` equals `asset_type`, in ascending
    /// byte order.
    fn list_ids(&self, asset_type: Option<&str>) -> Result<Vec<String>, StoreError>;

    /// The asset's meta ([`mnemon_types::meta`]), if the asset exists.
    fn meta(&self, asset_id: &str) -> Result<Option<AssetMeta>, StoreError> {
        Ok(self.get(asset_id)?.map(|asset| meta(&asset)))
    }

    /// The value `reference` points at; an unknown asset is
    /// [`ResolveError::AssetNotFound`].
    fn resolve(&self, reference: &AssetRef) -> Result<Value, StoreError> {
        let asset = self
            .get(&reference.asset_id)?
            .ok_or_else(|| ResolveError::AssetNotFound {
                asset_id: reference.asset_id.clone(),
            })?;
        Ok(resolve_asset(&asset, reference)?)
    }
}

/// Rejects assets no store may hold.
pub(crate) fn check_storable(asset: &Asset) -> Result<(), StoreError> {
    if asset.asset_id.is_empty() {
        return Err(StoreError::EmptyAssetId);
    }
    Ok(())
}
