//! The assets one call has read, so that many references into one asset read it once.
//!
//! A render or a parameter substitution resolves each distinct reference once, but distinct
//! references into one asset (`asset://big/content/k0` … `k9999`) each read and parsed the
//! whole asset: within the reference limit, one call of a few hundred kilobytes could parse a
//! 2 MB asset ten thousand times. [`Fetched`] keeps the assets read, up to [`KEPT_BYTES`] of
//! memory (their trees, measured by [`tree_cost`]), dropping the least recently used past it,
//! and resolves further references in them in memory. An asset larger than the whole budget is
//! kept alone: it is in memory while a reference into it resolves anyway, and reading it again
//! for each further reference is what the cache is for.
//!
//! The budget was once counted in bytes of JSON, which a tree exceeds up to about 40 times, so
//! 32 assets of 2 MB each were all kept (gigabytes) by one call; and once it was spent, every
//! asset read afterwards was read again for each reference into it.

use std::collections::{BTreeMap, HashMap, HashSet};

use mnemon_store::{AssetStore, ResolveError, StoreError, resolve_asset};
use mnemon_types::{Asset, AssetRef, Value};

use crate::RefsError;
use crate::size::tree_cost;

/// The most memory the assets one call keeps may take, as [`tree_cost`] measures it.
const KEPT_BYTES: usize = 256 << 20;

/// How many times [`KEPT_BYTES`] one call may read again, of assets it read before and dropped:
/// markers into a few large assets in turn (`a/k0 b/k0 c/k0 d/k0 a/k1 …`), more than the call
/// can keep, would otherwise read one of them for each marker (ten thousand reads of a 2 MB
/// asset from a request of a few hundred kilobytes). First reads are not counted: each distinct
/// asset is read once, which the assets stored bound.
const READ_FACTOR: usize = 4;

/// What a missing asset's entry costs (its id and slot), so that a call naming many missing
/// assets is bounded too.
const MISSING_COST: usize = 64;

/// The assets one call has read (or found missing), over its store.
pub(crate) struct Fetched<'a> {
    store: &'a dyn AssetStore,
    /// Each asset read (`None` for one the store does not hold), its cost and when it was last
    /// used.
    kept: HashMap<String, Kept>,
    /// The kept assets' ids by when they were last used, oldest first.
    by_use: BTreeMap<u64, String>,
    /// The kept assets' total cost.
    used: usize,
    /// The most [`used`](Self::used) may be, unless one asset alone takes more.
    budget: usize,
    /// Counts uses, for [`by_use`](Self::by_use).
    clock: u64,
    /// Every asset id read so far, kept or not.
    read: HashSet<String>,
    /// The cost of the assets read again after they were dropped.
    reread: usize,
}

struct Kept {
    asset: Option<Asset>,
    cost: usize,
    used_at: u64,
}

impl<'a> Fetched<'a> {
    /// Nothing read yet from `store`.
    pub(crate) fn new(store: &'a dyn AssetStore) -> Fetched<'a> {
        Fetched::with_budget(store, KEPT_BYTES)
    }

    /// As [`new`](Self::new), keeping at most `budget` bytes of assets.
    fn with_budget(store: &'a dyn AssetStore, budget: usize) -> Fetched<'a> {
        Fetched {
            store,
            kept: HashMap::new(),
            by_use: BTreeMap::new(),
            used: 0,
            budget,
            clock: 0,
            read: HashSet::new(),
            reread: 0,
        }
    }

    /// The value `reference` points at, as [`AssetStore::resolve`] gives it, reading its asset
    /// only if this call has not kept it. A storage failure is not kept: it may pass. The outer
    /// error ends the call: it has read more than it may ([`READ_FACTOR`]).
    pub(crate) fn resolve(
        &mut self,
        reference: &AssetRef,
    ) -> Result<Result<Value, StoreError>, RefsError> {
        self.clock += 1;
        if let Some(kept) = self.kept.get_mut(&reference.asset_id) {
            self.by_use.remove(&kept.used_at);
            kept.used_at = self.clock;
            self.by_use.insert(self.clock, reference.asset_id.clone());
            return Ok(resolve_in(kept.asset.as_ref(), reference));
        }
        let asset = match self.store.get(&reference.asset_id) {
            Ok(asset) => asset,
            Err(error) => return Ok(Err(error)),
        };
        // Past the budget the cost is the budget: such an asset is kept alone.
        let cost = match &asset {
            Some(asset) => tree_cost(&asset.content, self.budget).unwrap_or(self.budget),
            None => MISSING_COST,
        };
        if !self.read.insert(reference.asset_id.clone()) {
            self.reread = self.reread.saturating_add(cost);
            let most = self.budget.saturating_mul(READ_FACTOR);
            if self.reread > most {
                return Err(RefsError::ReadTooLarge { limit: most });
            }
        }
        let resolved = resolve_in(asset.as_ref(), reference);
        while self.used.saturating_add(cost) > self.budget {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            if let Some(dropped) = self.kept.remove(&oldest) {
                self.used -= dropped.cost;
            }
        }
        self.used += cost;
        self.by_use.insert(self.clock, reference.asset_id.clone());
        self.kept.insert(
            reference.asset_id.clone(),
            Kept {
                asset,
                cost,
                used_at: self.clock,
            },
        );
        Ok(resolved)
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
                fetched.resolve(&reference).unwrap().unwrap(),
                Value::from_json(serde_json::json!(k))
            );
        }
        let missing: AssetRef = "asset://gone/content".parse().unwrap();
        for _ in 0..3 {
            assert!(matches!(
                fetched.resolve(&missing).unwrap(),
                Err(StoreError::Resolve(ResolveError::AssetNotFound { .. }))
            ));
        }
        let absent: AssetRef = "asset://big/content/nothing".parse().unwrap();
        assert!(fetched.resolve(&absent).unwrap().is_err());
        assert_eq!(store.reads(), 2);
    }

    fn asset(id: &str, content: serde_json::Value) -> Asset {
        Asset::new(Value::from_json(content)).with_id(id)
    }

    fn reference(text: &str) -> AssetRef {
        text.parse().unwrap()
    }

    /// What is kept is measured as trees: two arrays of 1,000 zeros take 2 KB of JSON each but
    /// over 50 KB of memory, so a budget of 100 KB keeps one of them, not both (measured as
    /// JSON, 32 assets of 2 MB, gigabytes of trees, were all kept by one call).
    #[test]
    fn kept_assets_are_measured_as_trees() {
        let zeros = serde_json::json!(vec![0; 1_000]);
        let cost = tree_cost(&Value::from_json(zeros.clone()), usize::MAX).unwrap();
        assert!((50_000..100_000).contains(&cost), "{cost}");
        let store = CountingStore::with(&[asset("a", zeros.clone()), asset("b", zeros)]);
        let mut fetched = Fetched::with_budget(&store, 100_000);
        for id in ["a", "b", "a"] {
            fetched
                .resolve(&reference(&format!("asset://{id}/content/0")))
                .unwrap()
                .unwrap();
        }
        assert_eq!(store.reads(), 3, "a was dropped to keep b");
        assert!(fetched.used <= 100_000, "{}", fetched.used);
    }

    /// Once the budget is spent, a newly read asset takes the place of the least recently used
    /// ones (alone, when it is larger than the whole budget): a thousand references into it
    /// read it once. They read it a thousand times when the spent budget kept nothing more.
    #[test]
    fn a_spent_budget_makes_room_for_the_asset_in_use() {
        let keys: serde_json::Map<String, serde_json::Value> = (0..1_000)
            .map(|k| (format!("k{k}"), serde_json::json!(k)))
            .collect();
        let filler = serde_json::json!("x".repeat(3_000));
        let store = CountingStore::with(&[
            asset("f1", filler.clone()),
            asset("f2", filler),
            asset("tree", serde_json::Value::Object(keys)),
        ]);
        let mut fetched = Fetched::with_budget(&store, 8_000);
        fetched
            .resolve(&reference("asset://f1/content"))
            .unwrap()
            .unwrap();
        fetched
            .resolve(&reference("asset://f2/content"))
            .unwrap()
            .unwrap();
        for k in 0..1_000 {
            let found = fetched
                .resolve(&reference(&format!("asset://tree/content/k{k}")))
                .unwrap()
                .unwrap();
            assert_eq!(found, Value::from_json(serde_json::json!(k)));
        }
        assert_eq!(store.reads(), 3);
        // Most recently used first: f2 is kept again only by reading it again.
        fetched
            .resolve(&reference("asset://f2/content"))
            .unwrap()
            .unwrap();
        assert_eq!(store.reads(), 4);
    }

    /// The least recently used asset goes first: a use keeps an asset (first in, first out
    /// would drop `f1`, read first, though it was used since).
    #[test]
    fn the_least_recently_used_asset_goes_first() {
        let filler = serde_json::json!("x".repeat(3_000));
        let store = CountingStore::with(&[
            asset("f1", filler.clone()),
            asset("f2", filler.clone()),
            asset("f3", filler),
        ]);
        let mut fetched = Fetched::with_budget(&store, 7_000);
        for id in ["f1", "f2", "f1", "f3", "f1"] {
            fetched
                .resolve(&reference(&format!("asset://{id}/content")))
                .unwrap()
                .unwrap();
        }
        assert_eq!(store.reads(), 3, "f2 made room for f3; f1 stayed");
    }

    /// Markers into a few large assets in turn, more than one call can keep, read them again
    /// and again: past its read budget the call ends (it read one asset per marker, ten
    /// thousand times, within the reference limit).
    #[test]
    fn a_call_reading_too_much_is_ended() {
        let filler = serde_json::json!("x".repeat(3_000));
        let assets: Vec<Asset> = (0..4)
            .map(|i| asset(&format!("a{i}"), filler.clone()))
            .collect();
        let store = CountingStore::with(&assets);
        let mut fetched = Fetched::with_budget(&store, 7_000);
        let mut ended = None;
        for turn in 0..1_000 {
            let next = reference(&format!("asset://a{}/content", turn % 4));
            if let Err(error) = fetched.resolve(&next) {
                ended = Some((turn, error));
                break;
            }
        }
        let Some((turn, RefsError::ReadTooLarge { limit })) = ended else {
            panic!("never ended: {ended:?}")
        };
        assert_eq!(limit, 7_000 * READ_FACTOR);
        assert!(turn < 20, "{turn}");
        assert!(store.reads() <= 20, "{}", store.reads());
        // Many distinct assets, far more than the read budget together, are each read once.
        let assets: Vec<Asset> = (0..40)
            .map(|i| asset(&format!("d{i}"), filler.clone()))
            .collect();
        let store = CountingStore::with(&assets);
        let mut fetched = Fetched::with_budget(&store, 7_000);
        for i in 0..40 {
            let next = reference(&format!("asset://d{i}/content"));
            fetched.resolve(&next).unwrap().unwrap();
        }
        assert_eq!(store.reads(), 40);
    }
}
