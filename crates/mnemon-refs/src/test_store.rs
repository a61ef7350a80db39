//! A store for tests that counts the reads references make, so a test can tell how many times
//! a call went to the store.

use std::sync::atomic::{AtomicUsize, Ordering};

use mnemon_store::{AssetMeta, AssetStore, Expiry, Filter, InMemoryStore, StoreError};
use mnemon_types::{Asset, AssetRef, Value};

/// An [`InMemoryStore`] that counts calls of `resolve` and `get`.
#[derive(Default)]
pub(crate) struct CountingStore {
    inner: InMemoryStore,
    reads: AtomicUsize,
}

impl CountingStore {
    /// A counting store holding `assets`.
    pub(crate) fn with(assets: &[Asset]) -> CountingStore {
        let store = CountingStore::default();
        store.inner.put_batch(assets).unwrap();
        store
    }

    /// How many times `resolve` or `get` was called.
    pub(crate) fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }
}

impl AssetStore for CountingStore {
    fn put(&self, asset: &Asset) -> Result<(), StoreError> {
        self.inner.put(asset)
    }
    fn put_batch(&self, assets: &[Asset]) -> Result<(), StoreError> {
        self.inner.put_batch(assets)
    }
    fn get(&self, asset_id: &str) -> Result<Option<Asset>, StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.get(asset_id)
    }
    fn delete(&self, asset_id: &str) -> Result<bool, StoreError> {
        self.inner.delete(asset_id)
    }
    fn list_ids(&self, asset_type: Option<&str>) -> Result<Vec<String>, StoreError> {
        self.inner.list_ids(asset_type)
    }
    fn put_batch_expiring(&self, assets: &[Asset], expiry: Expiry) -> Result<(), StoreError> {
        self.inner.put_batch_expiring(assets, expiry)
    }
    fn expires_at(&self, asset_id: &str) -> Result<Option<Option<i64>>, StoreError> {
        self.inner.expires_at(asset_id)
    }
    fn list_where(
        &self,
        filter: Option<&Filter>,
        limit: Option<usize>,
    ) -> Result<Vec<String>, StoreError> {
        self.inner.list_where(filter, limit)
    }
    fn count_where(&self, filter: Option<&Filter>) -> Result<u64, StoreError> {
        self.inner.count_where(filter)
    }
    fn gc(&self) -> Result<u64, StoreError> {
        self.inner.gc()
    }
    fn forget(&self, id_prefix: &str) -> Result<u64, StoreError> {
        self.inner.forget(id_prefix)
    }
    fn meta(&self, asset_id: &str) -> Result<Option<AssetMeta>, StoreError> {
        self.inner.meta(asset_id)
    }
    fn resolve(&self, reference: &AssetRef) -> Result<Value, StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.resolve(reference)
    }
}
