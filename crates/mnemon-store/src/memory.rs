//! The in-memory store: holds everything, in-process objects included.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use mnemon_db::expiry::{Clock, Expiry, SystemClock, is_live};
use mnemon_filter::{Dialect, Filter};
use mnemon_types::{Asset, AssetRef, Value};

use crate::error::StoreError;
use crate::listing::{self, Times};
use crate::resolve::{ResolveError, resolve_asset};
use crate::store::{AssetMeta, AssetStore, check_storable};

/// An [`AssetStore`] in the process's memory; nothing outlives it.
///
/// Readers share a read lock and writers take the write lock briefly, so it is safe and fast
/// under concurrent readers and writers. Assets are kept behind `Arc`, so a `get` or `resolve`
/// copies only what it returns, and byte buffers and objects are never copied.
///
/// Expiry and filters behave as in the durable stores: the clock and the default time-to-live
/// are chosen with [`InMemoryStore::with_expiry`]; filters are evaluated on each asset's
/// document ([`Filter::matches`]).
#[derive(Debug)]
pub struct InMemoryStore {
    assets: RwLock<BTreeMap<String, Entry>>,
    clock: Arc<dyn Clock>,
    default_ttl: Option<Duration>,
}

/// An asset and the store's times for it.
#[derive(Debug, Clone)]
struct Entry {
    asset: Arc<Asset>,
    times: Times,
}

impl Default for InMemoryStore {
    fn default() -> Self {
        InMemoryStore::with_expiry(Arc::new(SystemClock), None)
    }
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store reading `clock`, whose plain puts expire `default_ttl` after they are
    /// written (never for `None`).
    pub fn with_expiry(clock: Arc<dyn Clock>, default_ttl: Option<Duration>) -> Self {
        InMemoryStore {
            assets: RwLock::new(BTreeMap::new()),
            clock,
            default_ttl,
        }
    }

    /// How many assets the store holds, expired ones not yet swept included.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the store holds no assets.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    // A panic while a guard is held cannot leave the map half-changed (every write is a single
    // insert or remove), so a poisoned lock is still consistent.
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<String, Entry>> {
        self.assets.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<String, Entry>> {
        self.assets.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live asset with this id.
    fn live(&self, asset_id: &str) -> Option<Arc<Asset>> {
        let now = self.clock.now_millis();
        self.read()
            .get(asset_id)
            .filter(|e| is_live(e.times.expires_at, now))
            .map(|e| Arc::clone(&e.asset))
    }

    /// The live entries matching `filter`, in id order, each passed to `visit` until it
    /// returns false.
    fn scan(
        &self,
        filter: Option<&Filter>,
        mut visit: impl FnMut(&str) -> bool,
    ) -> Result<(), StoreError> {
        if let Some(filter) = filter {
            // The same check the durable stores' translation makes, so that a filter refused
            // there is refused here too.
            let resolver = listing::resolver("meta", true, true);
            filter.to_sql(Dialect::Sqlite, &resolver, &mut Vec::new())?;
        }
        let now = self.clock.now_millis();
        for (id, entry) in self.read().iter() {
            if !is_live(entry.times.expires_at, now) {
                continue;
            }
            if filter.is_some_and(|f| !f.matches(&listing::document(&entry.asset, entry.times))) {
                continue;
            }
            if !visit(id) {
                break;
            }
        }
        Ok(())
    }

    /// Removes the entries `doomed` selects; returns how many.
    fn remove_where(&self, doomed: impl Fn(&str, &Entry) -> bool) -> u64 {
        let mut map = self.write();
        let before = map.len();
        map.retain(|id, entry| !doomed(id, entry));
        (before - map.len()) as u64
    }
}

impl AssetStore for InMemoryStore {
    fn put(&self, asset: &Asset) -> Result<(), StoreError> {
        self.put_batch_expiring(std::slice::from_ref(asset), Expiry::Default)
    }

    fn put_batch(&self, assets: &[Asset]) -> Result<(), StoreError> {
        self.put_batch_expiring(assets, Expiry::Default)
    }

    fn put_batch_expiring(&self, assets: &[Asset], expiry: Expiry) -> Result<(), StoreError> {
        assets.iter().try_for_each(check_storable)?;
        let shared: Vec<_> = assets.iter().map(|a| Arc::new(a.clone())).collect();
        let now = self.clock.now_millis();
        let expires_at = expiry.deadline(now, self.default_ttl);
        let mut map = self.write();
        for asset in shared {
            // A replaced live asset keeps its creation time; an expired one is a new asset.
            let created_at = match map.get(&asset.asset_id) {
                Some(old) if is_live(old.times.expires_at, now) => old.times.created_at,
                _ => Some(now),
            };
            let times = Times {
                created_at,
                updated_at: Some(now),
                expires_at,
            };
            map.insert(asset.asset_id.clone(), Entry { asset, times });
        }
        Ok(())
    }

    fn get(&self, asset_id: &str) -> Result<Option<Asset>, StoreError> {
        Ok(self.live(asset_id).map(Arc::unwrap_or_clone))
    }

    fn delete(&self, asset_id: &str) -> Result<bool, StoreError> {
        let now = self.clock.now_millis();
        let removed = self.write().remove(asset_id);
        Ok(removed.is_some_and(|e| is_live(e.times.expires_at, now)))
    }

    fn list_ids(&self, asset_type: Option<&str>) -> Result<Vec<String>, StoreError> {
        let now = self.clock.now_millis();
        let map = self.read();
        Ok(map
            .iter()
            .filter(|(_, e)| is_live(e.times.expires_at, now))
            .filter(|(_, e)| asset_type.is_none() || e.asset.asset_type.as_deref() == asset_type)
            .map(|(id, _)| id.clone())
            .collect())
    }

    fn expires_at(&self, asset_id: &str) -> Result<Option<Option<i64>>, StoreError> {
        let now = self.clock.now_millis();
        Ok(self
            .read()
            .get(asset_id)
            .map(|e| e.times.expires_at)
            .filter(|at| is_live(*at, now)))
    }

    fn list_where(
        &self,
        filter: Option<&Filter>,
        limit: Option<usize>,
    ) -> Result<Vec<String>, StoreError> {
        let mut ids = Vec::new();
        if limit == Some(0) {
            return Ok(ids);
        }
        self.scan(filter, |id| {
            ids.push(id.to_owned());
            limit.is_none_or(|n| ids.len() < n)
        })?;
        Ok(ids)
    }

    fn count_where(&self, filter: Option<&Filter>) -> Result<u64, StoreError> {
        let mut n = 0u64;
        self.scan(filter, |_| {
            n += 1;
            true
        })?;
        Ok(n)
    }

    fn gc(&self) -> Result<u64, StoreError> {
        let now = self.clock.now_millis();
        Ok(self.remove_where(|_, e| !is_live(e.times.expires_at, now)))
    }

    fn forget(&self, id_prefix: &str) -> Result<u64, StoreError> {
        Ok(self.remove_where(|id, _| id.starts_with(id_prefix)))
    }

    fn meta(&self, asset_id: &str) -> Result<Option<AssetMeta>, StoreError> {
        Ok(self.live(asset_id).map(|a| mnemon_types::meta(&a)))
    }

    fn resolve(&self, reference: &AssetRef) -> Result<Value, StoreError> {
        // Clone the Arc and release the lock before walking, so writers never wait on a walk.
        let asset = self
            .live(&reference.asset_id)
            .ok_or_else(|| ResolveError::AssetNotFound {
                asset_id: reference.asset_id.clone(),
            })?;
        Ok(resolve_asset(&asset, reference)?)
    }
}
