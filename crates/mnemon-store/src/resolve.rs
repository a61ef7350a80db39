//! Walking a reference's field path (docs/reference/assets.md#resolution).
//!
//! The path starts at the asset's root object ([`Asset::to_value`]), so `["content", …]` reaches
//! into the content and `["asset_name"]` reaches a top-level field. Every error names the URL
//! prefix that was reached and says how to correct the path, because its reader is often a model
//! that wrote the reference.

use std::borrow::Cow;
use std::fmt::Write as _;

use mnemon_types::{Asset, AssetRef, PathSegment, Value, canonical_index};

/// At most this many keys are listed in a [`ResolveError::KeyNotFound`] message.
pub const MAX_LISTED_KEYS: usize = 20;

/// Why a reference does not resolve. Messages are written for a model to correct itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// No asset has the id.
    #[error(
        "there is no asset with id {asset_id:?}; use the asset_id of one of the available assets and try again"
    )]
    AssetNotFound {
        /// The id that was looked up.
        asset_id: String,
    },
    /// A map has no such key.
    #[error("{at} has no key {key:?}; {}. Correct the field path and try again.", describe_keys(.available, *.total))]
    KeyNotFound {
        /// The URL of the map that was reached.
        at: String,
        /// The missing key.
        key: String,
        /// The map's first keys, in order (at most [`MAX_LISTED_KEYS`]).
        available: Vec<String>,
        /// How many keys the map has in all.
        total: usize,
    },
    /// A list is shorter than the index.
    #[error("{at} has no index {index}; {}. Correct the field path and try again.", describe_len(*.len))]
    IndexOutOfRange {
        /// The URL of the list that was reached.
        at: String,
        /// The index asked for.
        index: u64,
        /// The list's length.
        len: usize,
    },
    /// A list was indexed with something that is not a non-negative integer.
    #[error("{at} is a list, so {segment:?} cannot index it; {}. Correct the field path and try again.", describe_len(*.len))]
    BadIndex {
        /// The URL of the list that was reached.
        at: String,
        /// The segment as written.
        segment: String,
        /// The list's length.
        len: usize,
    },
    /// The path goes on below a leaf (a string, number, bool, null, bytes or an object).
    #[error(
        "{at} is {kind}, not a map or a list, so it has no field {segment:?}; end the reference at {at} or correct the field path, then try again."
    )]
    NotAContainer {
        /// The URL of the leaf that was reached.
        at: String,
        /// What the leaf is (`a string`, `bytes`, …).
        kind: &'static str,
        /// The segment that could not be applied.
        segment: String,
    },
}

fn describe_keys(available: &[String], total: usize) -> String {
    if total == 0 {
        return "it is an empty map".to_owned();
    }
    let mut out = String::from("available keys: ");
    for (i, key) in available.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{key:?}");
    }
    if total > available.len() {
        let _ = write!(out, " and {} more", total - available.len());
    }
    out
}

fn describe_len(len: usize) -> String {
    match len {
        0 => "it is an empty list".to_owned(),
        1 => "it is a list of 1 element (index 0)".to_owned(),
        n => format!("it is a list of {n} elements (indices 0 to {})", n - 1),
    }
}

fn key_not_found<'k>(
    keys: impl ExactSizeIterator<Item = &'k String>,
    reference: &AssetRef,
    depth: usize,
    key: &str,
) -> ResolveError {
    let total = keys.len();
    ResolveError::KeyNotFound {
        at: reference.url_prefix(depth),
        key: key.to_owned(),
        available: keys.take(MAX_LISTED_KEYS).cloned().collect(),
        total,
    }
}

fn segment_text(segment: &PathSegment) -> Cow<'_, str> {
    match segment {
        PathSegment::Key(k) => Cow::Borrowed(k),
        PathSegment::Index(i) => Cow::Owned(i.to_string()),
    }
}

/// Applies one segment to `node`, which the first `depth` segments of `reference` reached.
fn step<'a>(
    node: &'a Value,
    segment: &PathSegment,
    reference: &AssetRef,
    depth: usize,
) -> Result<&'a Value, ResolveError> {
    match node {
        Value::Map(map) => {
            let key = segment_text(segment);
            map.get(key.as_ref())
                .ok_or_else(|| key_not_found(map.keys(), reference, depth, &key))
        }
        Value::Array(items) => {
            let index = match segment {
                PathSegment::Index(i) => Some(*i),
                PathSegment::Key(k) => canonical_index(k),
            };
            let Some(index) = index else {
                return Err(ResolveError::BadIndex {
                    at: reference.url_prefix(depth),
                    segment: segment.to_string(),
                    len: items.len(),
                });
            };
            usize::try_from(index)
                .ok()
                .and_then(|i| items.get(i))
                .ok_or_else(|| ResolveError::IndexOutOfRange {
                    at: reference.url_prefix(depth),
                    index,
                    len: items.len(),
                })
        }
        leaf => Err(ResolveError::NotAContainer {
            at: reference.url_prefix(depth),
            kind: leaf.kind(),
            segment: segment.to_string(),
        }),
    }
}

/// Walks the whole of `reference.field_path` from `root` (which stands for the asset's root
/// object) and borrows the value reached.
///
/// ```
/// use mnemon_store::resolve_in;
/// use mnemon_types::{AssetRef, Value};
///
/// let root = Value::from_json(serde_json::json!({"content": {"labels": ["cat", "sofa"]}}));
/// let r: AssetRef = "asset://a1/content/labels/1".parse()?;
/// assert_eq!(resolve_in(&root, &r)?.as_str(), Some("sofa"));
///
/// let typo: AssetRef = "asset://a1/content/lables".parse()?;
/// assert_eq!(
///     resolve_in(&root, &typo).unwrap_err().to_string(),
///     "asset://a1/content has no key \"lables\"; available keys: \"labels\". \
///      Correct the field path and try again."
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn resolve_in<'a>(root: &'a Value, reference: &AssetRef) -> Result<&'a Value, ResolveError> {
    walk(root, reference, 0)
}

fn walk<'a>(
    mut node: &'a Value,
    reference: &AssetRef,
    start: usize,
) -> Result<&'a Value, ResolveError> {
    for (depth, segment) in reference.field_path.iter().enumerate().skip(start) {
        node = step(node, segment, reference, depth)?;
    }
    Ok(node)
}

/// Resolves `reference` inside `asset` (whose id is not checked) and returns a copy of the
/// value reached; byte buffers and objects are shared, not copied.
///
/// Gives exactly what [`resolve_in`] gives on [`Asset::to_value`], without building that tree.
pub fn resolve_asset(asset: &Asset, reference: &AssetRef) -> Result<Value, ResolveError> {
    let Some(first) = reference.field_path.first() else {
        return Ok(asset.to_value());
    };
    let key = segment_text(first);
    // `Asset::to_value` lets an extra field shadow a known one of the same name; so does this.
    if let Some(node) = asset.extra.get(key.as_ref()) {
        return walk(node, reference, 1).cloned();
    }
    let text_field = match key.as_ref() {
        "content" => return walk(&asset.content, reference, 1).cloned(),
        "asset_id" => Some(&asset.asset_id),
        "asset_type" => asset.asset_type.as_ref(),
        "asset_name" => asset.asset_name.as_ref(),
        "description" => asset.description.as_ref(),
        "content_type" => asset.content_type.as_ref(),
        _ => None,
    };
    match (text_field, reference.field_path.get(1)) {
        (Some(text), None) => Ok(Value::String(text.clone())),
        (Some(_), Some(next)) => Err(ResolveError::NotAContainer {
            at: reference.url_prefix(1),
            kind: Value::String(String::new()).kind(),
            segment: next.to_string(),
        }),
        (None, _) => {
            // The keys of `Asset::to_value`, in its order, without building it: that copied the
            // whole content only to name the fields, for every reference to an unknown one.
            let known = [
                ("asset_type", asset.asset_type.is_some()),
                ("asset_id", true),
                ("asset_name", asset.asset_name.is_some()),
                ("description", asset.description.is_some()),
                ("content_type", asset.content_type.is_some()),
                ("content", true),
            ];
            let mut keys: Vec<String> = known
                .iter()
                .filter(|(_, present)| *present)
                .map(|(name, _)| (*name).to_owned())
                .collect();
            // An extra field of a known name keeps that name's place (it shadows the field).
            keys.extend(
                asset
                    .extra
                    .keys()
                    .filter(|k| !known.iter().any(|(name, present)| *present && name == k))
                    .cloned(),
            );
            Err(key_not_found(keys.iter(), reference, 0, &key))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon_types::{Bytes, Map};
    use proptest::prelude::*;
    use serde_json::json;

    fn sample() -> Asset {
        Asset::from_json(json!({
            "asset_type": "asset_example",
            "asset_id": "a1",
            "content": {
                "image": "png",
                "source_url": "https://example.com/cat.png",
                "labels": ["cat", "sofa"],
                "7": "seven",
                "007": "bond",
            },
            "score": 0.5,
        }))
        .unwrap()
    }

    fn r(url: &str) -> AssetRef {
        url.parse().unwrap()
    }

    #[test]
    fn spec_table_paths_resolve() {
        let a = sample();
        let get = |url: &str| resolve_asset(&a, &r(url)).unwrap().to_json().unwrap();
        assert_eq!(get("asset://a1/content/labels/0"), json!("cat"));
        assert_eq!(get("asset://a1/content/7"), json!("seven"));
        assert_eq!(get("asset://a1/content/007"), json!("bond"));
        assert_eq!(get("asset://a1/asset_type"), json!("asset_example"));
        assert_eq!(get("asset://a1/asset_id"), json!("a1"));
        assert_eq!(get("asset://a1/score"), json!(0.5));
        assert_eq!(get("asset://a1"), serde_json::to_value(&a).unwrap());
        // A string key that is a canonical decimal indexes a list.
        let reference = AssetRef::new("a1")
            .child("content")
            .child("labels")
            .child("1");
        assert_eq!(
            resolve_asset(&a, &reference).unwrap().as_str(),
            Some("sofa")
        );
    }

    #[test]
    fn key_not_found_matches_the_spec_example() {
        let a = Asset::from_json(json!({"asset_id": "a1", "content": {
            "image": 1, "source_url": 2, "labels": []}}))
        .unwrap();
        let err = resolve_asset(&a, &r("asset://a1/content/lables")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "asset://a1/content has no key \"lables\"; available keys: \"image\", \"source_url\", \"labels\". Correct the field path and try again."
        );
    }

    #[test]
    fn key_list_is_capped_at_twenty_then_counted() {
        let content: serde_json::Map<String, serde_json::Value> =
            (0..25).map(|i| (format!("k{i:02}"), json!(i))).collect();
        let a = Asset::from_json(json!({"asset_id": "a1", "content": content})).unwrap();
        let err = resolve_asset(&a, &r("asset://a1/content/nope")).unwrap_err();
        let ResolveError::KeyNotFound {
            available, total, ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!((available.len(), *total), (20, 25));
        assert!(err.to_string().contains("\"k19\" and 5 more."), "{err}");
    }

    #[test]
    fn root_key_errors_list_the_asset_fields() {
        let err = resolve_asset(&sample(), &r("asset://a1/contnet")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "asset://a1 has no key \"contnet\"; available keys: \"asset_type\", \"asset_id\", \"content\", \"score\". Correct the field path and try again."
        );
    }

    #[test]
    fn list_and_leaf_errors_name_the_prefix() {
        let a = sample();
        let err = resolve_asset(&a, &r("asset://a1/content/labels/2")).unwrap_err();
        assert_eq!(
            err,
            ResolveError::IndexOutOfRange {
                at: "asset://a1/content/labels".into(),
                index: 2,
                len: 2
            }
        );
        assert!(err.to_string().contains("indices 0 to 1"));
        let err = resolve_asset(&a, &r("asset://a1/content/labels/first")).unwrap_err();
        assert!(matches!(err, ResolveError::BadIndex { ref segment, .. } if segment == "first"));
        let err = resolve_asset(&a, &r("asset://a1/content/labels/-1")).unwrap_err();
        assert!(matches!(err, ResolveError::BadIndex { .. }));
        let err = resolve_asset(&a, &r("asset://a1/content/source_url/0")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "asset://a1/content/source_url is a string, not a map or a list, so it has no field \"0\"; end the reference at asset://a1/content/source_url or correct the field path, then try again."
        );
        let err = resolve_asset(&a, &r("asset://a1/asset_type/x")).unwrap_err();
        assert!(
            matches!(err, ResolveError::NotAContainer { ref at, .. } if at == "asset://a1/asset_type")
        );
    }

    #[test]
    fn bytes_are_leaves_and_shared() {
        let mut content = Map::new();
        content.insert("img".into(), Bytes::new(vec![1u8, 2, 3]).into());
        let a = Asset::new(Value::Map(content)).with_id("b");
        let got = resolve_asset(&a, &r("asset://b/content/img")).unwrap();
        assert_eq!(got.as_bytes().unwrap().data(), &[1, 2, 3]);
        let err = resolve_asset(&a, &r("asset://b/content/img/0")).unwrap_err();
        assert!(matches!(
            err,
            ResolveError::NotAContainer { kind: "bytes", .. }
        ));
    }

    fn json_tree() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(json!(null)),
            any::<i64>().prop_map(|i| json!(i)),
            "[a-c0-9]{0,3}".prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map("[a-c0-9]{0,2}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn path() -> impl Strategy<Value = Vec<PathSegment>> {
        let seg = prop_oneof![
            (0u64..4).prop_map(PathSegment::Index),
            "[a-c0-9]{0,2}".prop_map(PathSegment::Key),
            prop_oneof![
                Just("content"),
                Just("asset_id"),
                Just("asset_name"),
                Just("x")
            ]
            .prop_map(PathSegment::from),
        ];
        proptest::collection::vec(seg, 0..5)
    }

    proptest! {
        #[test]
        fn resolve_asset_agrees_with_walking_to_value(
            content in json_tree(),
            extra in json_tree(),
            name in proptest::option::of("[a-z]{0,3}"),
            // An extra field may have a known field's name, present or not (it shadows it).
            extra_name in prop_oneof![Just("x"), Just("asset_name"), Just("content_type"), Just("y")],
            mut field_path in path(),
        ) {
            let mut asset = Asset::new(Value::from_json(content)).with_id("p");
            asset.asset_name = name;
            asset.extra.insert(extra_name.into(), Value::from_json(extra));
            if let Some(first) = field_path.first_mut()
                && let PathSegment::Key(k) = first
                    && k.is_empty() { *first = PathSegment::from("content"); }
            let reference = AssetRef { asset_id: "p".into(), field_path };
            let root = asset.to_value();
            let expected = resolve_in(&root, &reference).cloned();
            prop_assert_eq!(resolve_asset(&asset, &reference), expected);
        }
    }
}
