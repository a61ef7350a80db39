//! The assets one call has read, so that many references into one asset read it once.
//!
//! A render or a parameter substitution resolves each distinct reference once, but distinct
//! references into one asset (`asset://big/content/k0` … `k9999`) each read and parsed the
//! whole asset: within the reference limit, one call of a few hundred kilobytes could parse a
//! 2 MB asset ten thousand times. [`Fetched`] keeps each asset read, up to [`KEPT_BYTES`] of
//! them (measured as their content's JSON), and resolves further references in it in memory.

use std::collections::HashMap;

use mnemon_store::{AssetStore, ResolveError, StoreError, resolve_asset};
use mnemon_types::{Asset, AssetRef, Value};

use crate::size::json_len;

/// The most bytes of assets (their content as JSON) one call keeps: past it, an asset not yet
/// kept is read for each reference into it, as before.
const KEPT_BYTES: usize = 64 << 20;

/// The assets one call has read (or found missing), over its store.
pub(crate) struct Fetched<'a> {
    store: &'a dyn AssetStore,
    /// Each asset read, or `None` for one the store does not hold.
    kept: HashMap<String, Option<Asset>>,
    /// Bytes of [`KEPT_BYTES`] not yet used.
    room: usize,
}

impl<'a> Fetched<'a> {
    /// Nothing read yet from `store`.
    pub(crate) fn new(store: &'a dyn AssetStore) -> Fetched<'a> {
        Fetched {
            store,
            kept: HashMap::new(),
            room: KEPT_BYTES,
        }
    }

    /// The value `reference` points at, as [`AssetStore::resolve`] gives it, reading its asset
    /// only if this call has not kept it. A storage failure is not kept: it may pass.
    pub(crate) fn resolve(&mut self, reference: &AssetRef) -> Result<Value, StoreError> {
        if let Some(kept) = self.kept.get(&reference.asset_id) {
            return resolve_in(kept.as_ref(), reference);
        }
        let asset = self.store.get(&reference.asset_id)?;
        let resolved = resolve_in(asset.as_ref(), reference);
        let size = match &asset {
            Some(asset) => json_len(&asset.content, self.room),
            None => Some(0),
        };
        if let Some(size) = size {
            self.room -= size;
            self.kept.insert(reference.asset_id.clone(), asset);
        }
        resolved
    }
}

fn resolve_in(asset: Option<&Asset>, reference: &AssetRef) -> Result<Value, StoreError> {
    let asset = asset.ok_or_else(|| ResolveError::AssetNotFound {
        asset_id: reference.asset_id.clone(),
    })?;
    Ok(resolve_asset(asset, reference)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_store::CountingStore;

    #[test]
    fn references_into_one_asset_read_it_once() {
        let content: serde_json::Map<String, serde_json::Value> = (0..100)
            .map(|k| (format!("k{k}"), serde_json::json!(k)))
            .collect();
        let asset = Asset::new(Value::from_json(serde_json::Value::Object(content))).with_id("big");
        let store = CountingStore::with(&[asset]);
        let mut fetched = Fetched::new(&store);
        for k in 0..100 {
            let reference: AssetRef = format!("asset://big/content/k{k}").parse().unwrap();
            assert_eq!(
                fetched.resolve(&reference).unwrap(),
                Value::from_json(serde_json::json!(k))
            );
        }
        let missing: AssetRef = "asset://gone/content".parse().unwrap();
        for _ in 0..3 {
            assert!(matches!(
                fetched.resolve(&missing),
                Err(StoreError::Resolve(ResolveError::AssetNotFound { .. }))
            ));
        }
        let absent: AssetRef = "asset://big/content/nothing".parse().unwrap();
        assert!(fetched.resolve(&absent).is_err());
        assert_eq!(store.reads(), 2);
    }
}
