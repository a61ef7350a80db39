//! The `AssetStore` trait: the narrow interface the rest of Mnemon sees
//! (docs/reference/assets.md#asset-store).

use mnemon_db::Expiry;
use mnemon_filter::Filter;
use mnemon_types::{Asset, AssetRef, PathSegment, Value, meta};

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
/// - every store refuses the same assets: an empty id ([`StoreError::EmptyAssetId`]) and
///   maps and lists nested deeper than [`MAX_NESTING`] ([`StoreError::TooDeep`]), so no store
///   holds an asset another could not;
/// - a failed call changes nothing;
/// - [`list_ids`](Self::list_ids) and [`list_where`](Self::list_where) return ids in ascending
///   byte order;
/// - an expired asset (docs/reference/assets.md#expiry) is invisible to every read at once
///   (`get`, `meta`, `resolve`, `list_ids`, `list_where`, `count_where`) and `delete` reports it
///   absent; [`gc`](Self::gc) removes it;
/// - [`forget`](Self::forget) removes every asset whose id starts with a prefix (all of the
///   namespace's for `""`) in one transaction.
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

    /// Stores every asset in one atomic step, as [`put_batch`](Self::put_batch) does, each
    /// expiring as `expiry` says (`put` and `put_batch` use [`Expiry::Default`], the handle's
    /// default time-to-live). Replacing an asset replaces its expiry too.
    fn put_batch_expiring(&self, assets: &[Asset], expiry: Expiry) -> Result<(), StoreError>;

    /// Stores `asset`, as [`put`](Self::put) does, expiring as `expiry` says.
    fn put_expiring(&self, asset: &Asset, expiry: Expiry) -> Result<(), StoreError> {
        self.put_batch_expiring(std::slice::from_ref(asset), expiry)
    }

    /// When the asset expires (milliseconds since the Unix epoch): `Ok(None)` when it does
    /// not exist (or has expired), `Ok(Some(None))` when it never expires.
    fn expires_at(&self, asset_id: &str) -> Result<Option<Option<i64>>, StoreError>;

    /// The ids of the live assets whose filterable document matches `filter` (all of them for
    /// `None`), in ascending byte order, at most `limit` of them: the filter applies before the
    /// cut, so a limit of 10 gives 10 ids when 10 match. The document is the asset's meta plus
    /// `created_at`, `updated_at` and `expires_at` (docs/reference/assets.md#filters); a path
    /// the store cannot filter on is [`StoreError::Filter`].
    fn list_where(
        &self,
        filter: Option<&Filter>,
        limit: Option<usize>,
    ) -> Result<Vec<String>, StoreError>;

    /// How many live assets match `filter` (all of them for `None`).
    fn count_where(&self, filter: Option<&Filter>) -> Result<u64, StoreError>;

    /// Removes every expired asset of the namespace (rows and bytes), in one transaction;
    /// returns how many.
    fn gc(&self) -> Result<u64, StoreError>;

    /// Removes every asset of the namespace whose id starts with `id_prefix`, expired or not,
    /// in one transaction; `""` removes all of the namespace's assets. Returns how many.
    fn forget(&self, id_prefix: &str) -> Result<u64, StoreError>;

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

/// The deepest nesting of maps and lists an asset may have, counting the asset's own root
/// object: an asset whose `content` is a list of maps has depth 3.
///
/// Durable stores read an asset back with a JSON parser that refuses deeper input (serde_json's
/// recursion limit, which also keeps the reader off the end of its stack), so every store
/// rejects deeper assets when they are put rather than failing to read them later. The CLI
/// reads asset files with the same parser, so any asset file it accepts fits.
pub const MAX_NESTING: usize = 127;

/// Rejects assets no store may hold.
pub(crate) fn check_storable(asset: &Asset) -> Result<(), StoreError> {
    if asset.asset_id.is_empty() {
        return Err(StoreError::EmptyAssetId);
    }
    // Only Rust code can fill `extra` so (a JSON form's own field is read as that field).
    if let Some(field) = asset
        .extra
        .keys()
        .find(|k| mnemon_types::ASSET_FIELDS.contains(&k.as_str()))
    {
        return Err(StoreError::ReservedExtraField {
            asset_id: asset.asset_id.clone(),
            field: field.clone(),
        });
    }
    if let Some(field_path) = first_too_deep(asset) {
        return Err(StoreError::TooDeep {
            asset_id: asset.asset_id.clone(),
            field_path,
            limit: MAX_NESTING,
        });
    }
    Ok(())
}

/// The path from the asset's root to the first map or list, depth-first in field order, that
/// is nested deeper than [`MAX_NESTING`].
fn first_too_deep(asset: &Asset) -> Option<Vec<PathSegment>> {
    let fields = std::iter::once(("content", &asset.content))
        .chain(asset.extra.iter().map(|(k, v)| (k.as_str(), v)));
    for (name, value) in fields {
        // The asset's root object is the first level, so a field may nest one less.
        if let Some(mut path) = first_deeper_than(value, MAX_NESTING - 1) {
            path.insert(0, PathSegment::Key(name.to_owned()));
            return Some(path);
        }
    }
    None
}

/// The path below `value` to the first map or list at a depth greater than `limit` (`value`
/// itself, if a map or list, is at depth 1).
///
/// Walks with an explicit stack rather than recursion, because the value may be nested deeper
/// than the call stack can take, and builds the path only when it finds one, so that a put of
/// a large asset allocates nothing here.
fn first_deeper_than(value: &Value, limit: usize) -> Option<Vec<PathSegment>> {
    // The maps and lists entered, each with the index of the next child to visit.
    let mut frames: Vec<(&Value, usize)> = Vec::new();
    let mut entering = Some(value);
    loop {
        if let Some(node) = entering.take()
            && matches!(node, Value::Map(_) | Value::Array(_))
        {
            if frames.len() >= limit {
                // Each frame's last visited child (index - 1) is a step of the path.
                return Some(
                    frames
                        .iter()
                        .filter_map(|&(node, next)| segment_at(node, next.checked_sub(1)?))
                        .collect(),
                );
            }
            frames.push((node, 0));
        }
        let (node, next) = frames.last_mut()?;
        match child_at(node, *next) {
            Some(child) => {
                *next += 1;
                entering = Some(child);
            }
            None => {
                frames.pop();
            }
        }
    }
}

fn child_at(node: &Value, index: usize) -> Option<&Value> {
    match node {
        Value::Map(map) => map.get_index(index).map(|(_, v)| v),
        Value::Array(items) => items.get(index),
        _ => None,
    }
}

fn segment_at(node: &Value, index: usize) -> Option<PathSegment> {
    match node {
        Value::Map(map) => map
            .get_index(index)
            .map(|(k, _)| PathSegment::Key(k.clone())),
        Value::Array(_) => Some(PathSegment::Index(index as u64)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon_types::Map;

    /// `depth` lists nested in one another around `leaf`.
    fn lists(depth: usize, leaf: Value) -> Value {
        (0..depth).fold(leaf, |v, _| Value::Array(vec![v]))
    }

    #[test]
    fn nesting_is_counted_from_the_root_object() {
        let at_limit = Asset::new(lists(MAX_NESTING - 1, Value::Null)).with_id("a");
        assert!(check_storable(&at_limit).is_ok());
        let over = Asset::new(lists(MAX_NESTING, Value::Null)).with_id("a");
        let Err(StoreError::TooDeep {
            field_path, limit, ..
        }) = check_storable(&over)
        else {
            panic!("expected TooDeep")
        };
        assert_eq!(limit, MAX_NESTING);
        // The offending list is the innermost one: "content", then MAX_NESTING - 1 zeros.
        assert_eq!(field_path.len(), MAX_NESTING);
        assert_eq!(field_path[0], PathSegment::Key("content".into()));
        assert!(field_path[1..].iter().all(|s| *s == PathSegment::Index(0)));
    }

    #[test]
    fn the_first_too_deep_place_is_named_in_order() {
        let mut inner = Map::new();
        inner.insert("shallow".into(), lists(3, Value::Null));
        inner.insert("deep".into(), lists(MAX_NESTING + 5, Value::Null));
        let content = Value::Array(vec![Value::Null, Value::Map(inner)]);
        let mut asset = Asset::new(content).with_id("a");
        asset
            .extra
            .insert("later".into(), lists(MAX_NESTING * 2, Value::Null));
        let Err(StoreError::TooDeep { field_path, .. }) = check_storable(&asset) else {
            panic!("expected TooDeep")
        };
        let want: Vec<PathSegment> = ["content".into(), PathSegment::Index(1), "deep".into()]
            .into_iter()
            .chain(std::iter::repeat_n(PathSegment::Index(0), MAX_NESTING - 3))
            .collect();
        // The path to a list at depth MAX_NESTING + 1 has a step for every level below the root.
        assert_eq!(want.len(), MAX_NESTING);
        assert_eq!(field_path, want);
        // An extra field is checked too.
        asset.content = Value::Null;
        let Err(StoreError::TooDeep { field_path, .. }) = check_storable(&asset) else {
            panic!("expected TooDeep")
        };
        assert_eq!(field_path[0], PathSegment::Key("later".into()));
        assert_eq!(field_path.len(), MAX_NESTING);
    }

    #[test]
    fn wide_shallow_assets_pass() {
        let wide = Value::Array((0..10_000).map(|i| lists(i % 5, Value::Null)).collect());
        assert!(check_storable(&Asset::new(wide).with_id("w")).is_ok());
    }
}
