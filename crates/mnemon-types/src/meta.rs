//! Asset meta, its flattened form, and the prompt block that shows metas to a model
//! (docs/reference/assets.md#meta).
//!
//! A meta has the asset's shape with every bytes or object leaf replaced by its type string, so
//! the model sees what an asset holds without its payload.

use serde_json::{Map as JsonMap, Value as Json};

use crate::asset::{ASSET_FIELDS, Asset};
use crate::error::TypesError;
use crate::value::{DICT_TYPE, LIST_TYPE};

/// Options for [`meta_with`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaOptions {
    /// Abbreviate strings longer than this many characters as their first `n` characters
    /// followed by `…(TOTAL chars)`. Off by default; the `asset_id` is never abbreviated, since
    /// references need it whole.
    pub max_string_len: Option<usize>,
}

/// The asset's meta: its fields with bytes and objects replaced by type strings.
///
/// ```
/// use mnemon_types::{meta, Asset, Bytes, Map, Value};
///
/// let mut content = Map::new();
/// content.insert("image".into(), Bytes::with_media_type(vec![0x89], "image/png").into());
/// let asset = Asset::new(Value::Map(content)).with_id("a1");
/// assert_eq!(
///     serde_json::Value::Object(meta(&asset)),
///     serde_json::json!({"asset_id": "a1", "content": {"image": "<class 'bytes'>"}})
/// );
/// ```
pub fn meta(asset: &Asset) -> JsonMap<String, Json> {
    meta_with(asset, &MetaOptions::default())
}

/// The asset's meta, with options.
pub fn meta_with(asset: &Asset, options: &MetaOptions) -> JsonMap<String, Json> {
    let Json::Object(mut map) = asset.to_value().to_meta_json() else {
        // `Asset::to_value` always builds a map.
        return JsonMap::new();
    };
    if let Some(limit) = options.max_string_len {
        for (key, value) in map.iter_mut() {
            if key != "asset_id" {
                abbreviate(value, limit);
            }
        }
    }
    map
}

fn abbreviate(value: &mut Json, limit: usize) {
    match value {
        Json::String(s) => {
            let total = s.chars().count();
            if total > limit {
                let head: String = s.chars().take(limit).collect();
                *s = format!("{head}…({total} chars)");
            }
        }
        Json::Array(items) => items.iter_mut().for_each(|v| abbreviate(v, limit)),
        Json::Object(map) => map.values_mut().for_each(|v| abbreviate(v, limit)),
        _ => {}
    }
}

/// Renders the metas of many assets as a prompt block: a short heading and a fenced JSON array,
/// shown to the model in each round so it knows which assets it can reference.
pub fn render_meta_block(metas: &[JsonMap<String, Json>]) -> String {
    let array = Json::Array(metas.iter().cloned().map(Json::Object).collect());
    let body = serde_json::to_string_pretty(&array).unwrap_or_else(|_| "[]".to_owned());
    format!(
        "## Available assets\nRefer to a field of an asset as <|asset://ASSET_ID/FIELD/...|>.\n```json\n{body}\n```\n"
    )
}

fn check_sep(sep: &str) -> Result<char, TypesError> {
    let mut chars = sep.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c != '~' && !c.is_ascii_digit() => Ok(c),
        _ => Err(TypesError::InvalidSeparator {
            sep: sep.to_owned(),
        }),
    }
}

/// Escapes a key for a flattened path: `~` → `~0`, the separator → `~1` (RFC 6901 style).
pub fn escape_key(key: &str, sep: char) -> String {
    let mut out = String::with_capacity(key.len());
    for c in key.chars() {
        match c {
            '~' => out.push_str("~0"),
            c if c == sep => out.push_str("~1"),
            c => out.push(c),
        }
    }
    out
}

fn unescape_key(segment: &str, sep: char, path: &str) -> Result<String, TypesError> {
    let mut out = String::with_capacity(segment.len());
    let mut chars = segment.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push(sep),
                _ => {
                    return Err(TypesError::Unflatten {
                        path: path.to_owned(),
                        reason: "'~' must be followed by 0 or 1".to_owned(),
                    });
                }
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Flattens a meta (or any JSON map) into an ordered map from paths to values.
///
/// Depth-first in insertion order. Keys are escaped with [`escape_key`], array indices written in
/// decimal. With `keep_container_type`, each map or array first emits its own entry holding its
/// type string; without it only leaves are emitted, and empty containers appear as `{}` or `[]`.
///
/// `sep` must be one character other than `~` and the ASCII digits, so paths stay unambiguous.
///
/// ```
/// use mnemon_types::flatten;
/// use serde_json::json;
///
/// let meta = json!({"asset_id": "a1", "content": {"labels": ["cat"], "a/b": {}}});
/// let flat = flatten(meta.as_object().unwrap(), "/", false)?;
/// assert_eq!(
///     serde_json::Value::Object(flat),
///     json!({"asset_id": "a1", "content/labels/0": "cat", "content/a~1b": {}})
/// );
/// # Ok::<(), mnemon_types::TypesError>(())
/// ```
pub fn flatten(
    meta: &JsonMap<String, Json>,
    sep: &str,
    keep_container_type: bool,
) -> Result<JsonMap<String, Json>, TypesError> {
    let sep = check_sep(sep)?;
    let mut out = JsonMap::new();
    for (key, value) in meta {
        flatten_into(
            &escape_key(key, sep),
            value,
            sep,
            keep_container_type,
            &mut out,
        );
    }
    Ok(out)
}

fn flatten_into(path: &str, value: &Json, sep: char, keep: bool, out: &mut JsonMap<String, Json>) {
    let children: Vec<(String, &Json)> = match value {
        Json::Object(map) => map.iter().map(|(k, v)| (escape_key(k, sep), v)).collect(),
        Json::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        leaf => {
            out.insert(path.to_owned(), leaf.clone());
            return;
        }
    };
    if keep {
        let type_string = if value.is_object() {
            DICT_TYPE
        } else {
            LIST_TYPE
        };
        out.insert(path.to_owned(), Json::String(type_string.to_owned()));
    } else if children.is_empty() {
        out.insert(path.to_owned(), value.clone());
        return;
    }
    for (segment, child) in children {
        flatten_into(&format!("{path}{sep}{segment}"), child, sep, keep, out);
    }
}

/// The most segments a path given to [`unflatten`] may have (the asset stores nest at most 127
/// levels, so no flattened asset has more).
pub const MAX_UNFLATTEN_DEPTH: usize = 128;

/// Rebuilds a tree from its flattened form; the inverse of [`flatten`] with
/// `keep_container_type` on.
///
/// An entry holding `<class 'dict'>` or `<class 'list'>` declares a container that later entries
/// fill. (A string leaf with exactly that text cannot be told apart from an empty container,
/// except in the asset's own string fields such as `content_type`, which always stay strings.)
/// Children of a path that was never declared go into a map. A path of more than
/// [`MAX_UNFLATTEN_DEPTH`] segments is refused: the tree it builds would be too deep to drop or
/// write without running out of stack.
pub fn unflatten(
    flat: &JsonMap<String, Json>,
    sep: &str,
) -> Result<JsonMap<String, Json>, TypesError> {
    let sep_char = check_sep(sep)?;
    let mut root = Json::Object(JsonMap::new());
    for (path, value) in flat {
        if path.split(sep_char).nth(MAX_UNFLATTEN_DEPTH).is_some() {
            return Err(TypesError::Unflatten {
                path: path.chars().take(64).collect(),
                reason: format!(
                    "more than {MAX_UNFLATTEN_DEPTH} segments; a stored asset nests at most 127 levels"
                ),
            });
        }
        let segments = path
            .split(sep_char)
            .map(|s| unescape_key(s, sep_char, path))
            .collect::<Result<Vec<_>, _>>()?;
        let is_top_string_field = segments.len() == 1
            && segments
                .first()
                .is_some_and(|s| ASSET_FIELDS.contains(&s.as_str()) && s != "content");
        let node = match value.as_str() {
            Some(DICT_TYPE) if !is_top_string_field => Json::Object(JsonMap::new()),
            Some(LIST_TYPE) if !is_top_string_field => Json::Array(Vec::new()),
            _ => value.clone(),
        };
        insert_at(&mut root, &segments, node, path)?;
    }
    match root {
        Json::Object(map) => Ok(map),
        _ => Ok(JsonMap::new()),
    }
}

fn insert_at(
    root: &mut Json,
    segments: &[String],
    node: Json,
    path: &str,
) -> Result<(), TypesError> {
    let fail = |reason: &str| TypesError::Unflatten {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let Some((last, parents)) = segments.split_last() else {
        return Err(fail("empty path"));
    };
    let mut current = root;
    for segment in parents {
        current = match current {
            Json::Object(map) => map
                .entry(segment.clone())
                .or_insert_with(|| Json::Object(JsonMap::new())),
            Json::Array(items) => {
                // Canonical only, as the last segment's: `+0` or `00` would name element 0
                // under another spelling.
                let index = crate::canonical_index(segment)
                    .and_then(|i| usize::try_from(i).ok())
                    .ok_or_else(|| fail("a list's children must have decimal indices"))?;
                items
                    .get_mut(index)
                    .ok_or_else(|| fail("a list element is missing before this path"))?
            }
            _ => return Err(fail("a parent of this path is a leaf, not a container")),
        };
    }
    match current {
        Json::Object(map) => {
            if map.contains_key(last) {
                return Err(fail("the path appears twice"));
            }
            map.insert(last.clone(), node);
        }
        Json::Array(items) => {
            if last.parse::<usize>().ok() != Some(items.len())
                || crate::canonical_index(last).is_none()
            {
                return Err(fail("list indices must appear in order 0, 1, 2, …"));
            }
            items.push(node);
        }
        _ => return Err(fail("a parent of this path is a leaf, not a container")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Bytes, Map, Value};
    use proptest::prelude::*;
    use serde_json::json;

    fn spec_asset() -> Asset {
        let mut content = Map::new();
        content.insert(
            "image".into(),
            Bytes::with_media_type(vec![1, 2, 3], "image/png").into(),
        );
        content.insert("source_url".into(), "https://example.com/cat.png".into());
        content.insert("labels".into(), Value::from_json(json!(["cat", "sofa"])));
        Asset::new(Value::Map(content))
            .with_id("a1")
            .with_type("asset_example")
            .with_content_type("<class 'dict'>")
    }

    /// A path deeper than any asset is refused: 50,000 segments built a tree whose drop ran
    /// off the end of the stack.
    #[test]
    fn unflatten_refuses_paths_deeper_than_an_asset() {
        let deep = vec!["a"; 50_000].join("/");
        let mut flat = JsonMap::new();
        flat.insert(deep, Json::from(1));
        assert!(matches!(
            unflatten(&flat, "/"),
            Err(TypesError::Unflatten { .. })
        ));
        let mut flat = JsonMap::new();
        flat.insert(vec!["a"; MAX_UNFLATTEN_DEPTH].join("/"), Json::from(1));
        assert!(unflatten(&flat, "/").is_ok());
    }

    #[test]
    fn spec_flatten_example() {
        let flat = flatten(&meta(&spec_asset()), "/", true).unwrap();
        let expected = json!({
            "asset_type": "asset_example",
            "asset_id": "a1",
            "content_type": "<class 'dict'>",
            "content": "<class 'dict'>",
            "content/image": "<class 'bytes'>",
            "content/source_url": "https://example.com/cat.png",
            "content/labels": "<class 'list'>",
            "content/labels/0": "cat",
            "content/labels/1": "sofa"
        });
        let keys: Vec<_> = flat.keys().cloned().collect();
        let expected_keys: Vec<_> = expected.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, expected_keys, "keys in order");
        assert_eq!(Json::Object(flat.clone()), expected);
        // And it comes back, content_type staying a string.
        assert_eq!(unflatten(&flat, "/").unwrap(), meta(&spec_asset()));
    }

    #[test]
    fn escaping_prevents_collisions() {
        let a = json!({"a": {"b/c": 1}});
        let b = json!({"a/b": {"c": 2}});
        let fa = flatten(a.as_object().unwrap(), "/", false).unwrap();
        let fb = flatten(b.as_object().unwrap(), "/", false).unwrap();
        assert_eq!(Json::Object(fa), json!({"a/b~1c": 1}));
        assert_eq!(Json::Object(fb), json!({"a~1b/c": 2}));
        let tilde = json!({"~x": {"y~1": 0}});
        let ft = flatten(tilde.as_object().unwrap(), "/", true).unwrap();
        assert_eq!(
            Json::Object(ft.clone()),
            json!({"~0x": DICT_TYPE, "~0x/y~01": 0})
        );
        assert_eq!(Json::Object(unflatten(&ft, "/").unwrap()), tilde);
    }

    #[test]
    fn empty_containers_never_disappear() {
        let m = json!({"content": {"e": {}, "l": [], "n": null}});
        let without = flatten(m.as_object().unwrap(), ".", false).unwrap();
        assert_eq!(
            Json::Object(without),
            json!({"content.e": {}, "content.l": [], "content.n": null})
        );
        let with = flatten(m.as_object().unwrap(), ".", true).unwrap();
        assert_eq!(
            Json::Object(with.clone()),
            json!({"content": DICT_TYPE, "content.e": DICT_TYPE, "content.l": LIST_TYPE, "content.n": null})
        );
        assert_eq!(Json::Object(unflatten(&with, ".").unwrap()), m);
    }

    #[test]
    fn separators_that_would_be_ambiguous_are_refused() {
        let m = JsonMap::new();
        for sep in ["", "~", "0", "//"] {
            assert!(matches!(
                flatten(&m, sep, true),
                Err(TypesError::InvalidSeparator { .. })
            ));
        }
    }

    #[test]
    fn unflatten_reports_inconsistent_input() {
        let bad = json!({"a": 1, "a/b": 2});
        assert!(unflatten(bad.as_object().unwrap(), "/").is_err());
        let gap = json!({"l": LIST_TYPE, "l/1": 2});
        assert!(unflatten(gap.as_object().unwrap(), "/").is_err());
        let tilde = json!({"a~2": 1});
        assert!(unflatten(tilde.as_object().unwrap(), "/").is_err());
        // A parent index in another spelling of 0 used to name element 0.
        for parent in ["00", "+0"] {
            let alias = json!({"l": LIST_TYPE, "l/0": DICT_TYPE, format!("l/{parent}/x"): 1});
            assert!(
                unflatten(alias.as_object().unwrap(), "/").is_err(),
                "{parent}"
            );
        }
    }

    #[test]
    fn long_strings_can_be_abbreviated() {
        let asset = Asset::new("x".repeat(50)).with_id("a-very-long-id-that-stays");
        let m = meta_with(
            &asset,
            &MetaOptions {
                max_string_len: Some(5),
            },
        );
        assert_eq!(m["content"], json!("xxxxx…(50 chars)"));
        assert_eq!(m["asset_id"], json!("a-very-long-id-that-stays"));
    }

    #[test]
    fn meta_block_is_a_fenced_array() {
        let block = render_meta_block(&[meta(&spec_asset())]);
        assert!(block.contains("```json\n["));
        assert!(block.contains("\"content\": {"));
    }

    fn leaf() -> impl Strategy<Value = Json> {
        prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            // Any text but the container type strings, which unflatten reads as containers.
            any::<String>()
                .prop_filter("not a type string", |s| s != DICT_TYPE && s != LIST_TYPE)
                .prop_map(Json::String),
        ]
    }

    fn tree() -> impl Strategy<Value = Json> {
        leaf().prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Json::Array),
                proptest::collection::vec(("[a-z~/.0-9]{0,3}|.{0,4}", inner), 0..5)
                    .prop_map(|pairs| Json::Object(pairs.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn flatten_then_unflatten_round_trips(
            fields in proptest::collection::vec(("[a-z~/.]{0,4}|.{0,4}", tree()), 0..5),
            sep in "[/.:|]",
        ) {
            let map: JsonMap<String, Json> = fields.into_iter().collect();
            let flat = flatten(&map, &sep, true).unwrap();
            prop_assert_eq!(unflatten(&flat, &sep).unwrap(), map);
        }
    }
}
