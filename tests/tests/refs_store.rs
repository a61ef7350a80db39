//! References resolved through each asset store: parameters and message text, with bytes and
//! objects coming back from the store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mnemon_refs::{CommandSpec, Mode, RefsError, render_default, resolve_params};
use mnemon_store::{
    AssetStore, CodecRegistry, InMemoryStore, SqliteAssetOptions, SqliteAssetStore,
};
use mnemon_tests::asset_store_conformance::{Point, point_codec};
use mnemon_types::{Asset, Bytes, Map, Object, Value};
use serde_json::json;

fn fill(store: &dyn AssetStore) {
    let mut content = Map::new();
    content.insert(
        "image".into(),
        Bytes::with_media_type(b"PNG".to_vec(), "image/png").into(),
    );
    content.insert("where".into(), Object::new(Point { x: 1, y: 2 }).into());
    content.insert("labels".into(), Value::from_json(json!(["cat", "sofa"])));
    store
        .put(&Asset::new(Value::Map(content)).with_id("a1"))
        .unwrap();
}

fn stores() -> (tempfile::TempDir, Vec<Box<dyn AssetStore>>) {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteAssetStore::open_with(
        dir.path().join("db.sqlite3"),
        SqliteAssetOptions {
            codecs: CodecRegistry::new().with(point_codec()),
            ..SqliteAssetOptions::default()
        },
    )
    .unwrap();
    let stores: Vec<Box<dyn AssetStore>> = vec![Box::new(InMemoryStore::new()), Box::new(sqlite)];
    for s in &stores {
        fill(s.as_ref());
    }
    (dir, stores)
}

#[test]
fn markers_render_bytes_objects_and_json_from_every_store() {
    let (_dir, stores) = stores();
    let text = "![cat](<|asset://a1/content/image|>) at <|{\"asset_id\": \"a1\", \"field_path\": [\"content\", \"where\"]}|>: <|asset://a1/content/labels|>, <|asset://a1/content/labels/2|>";
    for store in &stores {
        let out = render_default(text, store.as_ref());
        assert_eq!(
            out.text,
            "![cat](data:image/png;base64,UE5H) at [1,2]: [\"cat\",\"sofa\"], <|asset://a1/content/labels/2|>"
        );
        assert_eq!(out.unresolved.len(), 1);
        assert!(matches!(
            out.unresolved[0].error,
            RefsError::MarkerUnresolved(_)
        ));
    }
}

#[test]
fn params_get_the_stored_object_itself() {
    let (_dir, stores) = stores();
    let spec = CommandSpec::from_yaml(
        "name: plot\nparameters:\n  - {name: at, asset_ref_acceptable: true}\n  - {name: img, asset_ref_acceptable: true}\n",
    )
    .unwrap();
    let params = json!({"at": "asset://a1/content/where", "img": {"asset_id": "a1", "field_path": ["content", "image"]}});
    for store in &stores {
        let out = resolve_params(&spec, &params, store.as_ref(), Mode::Strict).unwrap();
        let Value::Object(o) = &out["at"] else {
            panic!("{:?}", out["at"])
        };
        assert_eq!(o.downcast_ref::<Point>(), Some(&Point { x: 1, y: 2 }));
        assert_eq!(out["img"].as_bytes().unwrap().data(), b"PNG");
    }
}
