//! Property tests of the SQLite asset store: anything stored comes back unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mnemon_store::{AssetStore, SqliteAssetStore};
use mnemon_types::{Asset, Bytes, Map, Value};
use proptest::prelude::*;

/// Keys a careless encoding might mistake for its own markers, plus arbitrary strings.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("$bytes".to_owned()),
        Just("__bytes__".to_owned()),
        Just("$object".to_owned()),
        Just("$type".to_owned()),
        Just("__mnemon_leaf__".to_owned()),
        Just("<class 'bytes'>".to_owned()),
        Just("asset_id".to_owned()),
        Just("content".to_owned()),
        Just(String::new()),
        "[0-9]{1,3}",
        any::<String>(),
    ]
}

fn json_leaf() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|i| serde_json::json!(i)),
        any::<u64>().prop_map(|i| serde_json::json!(i)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| serde_json::json!(f)),
        any::<String>().prop_map(serde_json::Value::String),
        Just(serde_json::json!("data:image/png;base64,AAAA")),
        Just(serde_json::json!({"$bytes": "AAEC", "media_type": "image/png"})),
    ]
}

fn json() -> impl Strategy<Value = serde_json::Value> {
    json_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            proptest::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Value trees with bytes leaves mixed in.
fn tree() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        3 => json_leaf().prop_map(Value::from_json),
        1 => (proptest::collection::vec(any::<u8>(), 0..64), proptest::option::of("[a-z]+/[a-z]+"))
            .prop_map(|(data, media)| Value::Bytes(match media {
                Some(m) => Bytes::with_media_type(data, m),
                None => Bytes::new(data),
            })),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Map(kv.into_iter().collect::<Map>())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn any_json_comes_back_unchanged(content in json(), extra in json(), id in "[^\u{0}]{1,12}") {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteAssetStore::open(dir.path().join("db.sqlite3")).unwrap();
        let mut asset = Asset::new(Value::from_json(content)).with_id(id.clone());
        asset.extra.insert("extra".into(), Value::from_json(extra));
        store.put(&asset).unwrap();
        let back = store.get(&id).unwrap().unwrap();
        // Exact, including key order and number representation.
        prop_assert_eq!(serde_json::to_string(&back).unwrap(), serde_json::to_string(&asset).unwrap());
        prop_assert_eq!(back, asset);
    }

    #[test]
    fn trees_with_bytes_come_back_unchanged(content in tree()) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteAssetStore::open(dir.path().join("db.sqlite3")).unwrap();
        let asset = Asset::new(content).with_id("t");
        store.put(&asset).unwrap();
        prop_assert_eq!(store.get("t").unwrap().unwrap(), asset);
    }
}
