//! The in-memory store: holds everything, in-process objects included.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use mnemon_types::{Asset, AssetRef, Value};

use crate::error::StoreError;
use crate::resolve::{ResolveError, resolve_asset};
use crate::store::{AssetMeta, AssetStore, check_storable};

/// An [`AssetStore`] in the process's memory; nothing outlives it.
///
/// Readers share a read lock and writers take the write lock briefly, so it is safe and fast
/// under concurrent readers and writers. Assets are kept behind `Arc`, so a `get` or `resolve`
/// copies only what it returns, and byte buffers and objects are never copied.
#[derive(Debug, Default)]
pub struct InMemoryStore {
    assets: RwLock<BTreeMap<String, Arc<Asset>>>,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many assets the store holds.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the store holds no assets.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    // A panic while a guard is held cannot leave the map half-changed (every write is a single
    // insert or remove), so a poisoned lock is still consistent.
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<String, Arc<Asset>>> {
        self.assets.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<String, Arc<Asset>>> {
        self.assets.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl AssetStore for InMemoryStore {
    fn put(&self, asset: &Asset) -> Result<(), StoreError> {
        check_storable(asset)?;
        let shared = Arc::new(asset.clone());
        self.write().insert(asset.asset_id.clone(), shared);
        Ok(())
    }

    fn put_batch(&self, assets: &[Asset]) -> Result<(), StoreError> {
        assets.iter().try_for_each(check_storable)?;
        let shared: Vec<_> = assets.iter().map(|a| Arc::new(a.clone())).collect();
        let mut map = self.write();
        for asset in shared {
            map.insert(asset.asset_id.clone(), asset);
        }
        Ok(())
    }

    fn get(&self, asset_id: &str) -> Result<Option<Asset>, StoreError> {
        let found = self.read().get(asset_id).cloned();
        Ok(found.map(Arc::unwrap_or_clone))
    }

    fn delete(&self, asset_id: &str) -> Result<bool, StoreError> {
        Ok(self.write().remove(asset_id).is_some())
    }

    fn list_ids(&self, asset_type: Option<&str>) -> Result<Vec<String>, StoreError> {
        let map = self.read();
        Ok(map
            .iter()
            .filter(|(_, a)| asset_type.is_none() || a.asset_type.as_deref() == asset_type)
            .map(|(id, _)| id.clone())
            .collect())
    }

    fn meta(&self, asset_id: &str) -> Result<Option<AssetMeta>, StoreError> {
        let found = self.read().get(asset_id).cloned();
        Ok(found.map(|a| mnemon_types::meta(&a)))
    }

    fn resolve(&self, reference: &AssetRef) -> Result<Value, StoreError> {
        // Clone the Arc and release the lock before walking, so writers never wait on a walk.
        let asset = self
            .read()
            .get(&reference.asset_id)
            .cloned()
            .ok_or_else(|| ResolveError::AssetNotFound {
                asset_id: reference.asset_id.clone(),
            })?;
        Ok(resolve_asset(&asset, reference)?)
    }
}
