#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The asset store conformance suite and the concurrency test, on every store.

use std::sync::Arc;

use mnemon_store::{
    AssetStore, CodecRegistry, InMemoryStore, SqliteAssetOptions, SqliteAssetStore,
};
use mnemon_tests::asset_store_conformance::{self as suite, Capabilities};

fn sqlite_options() -> SqliteAssetOptions {
    SqliteAssetOptions {
        codecs: CodecRegistry::new().with(suite::point_codec()),
        ..SqliteAssetOptions::default()
    }
}

#[test]
fn in_memory_store_conforms() {
    suite::run(
        &|| Box::new(InMemoryStore::new()),
        Capabilities {
            objects_without_codec: true,
        },
    );
}

#[test]
fn sqlite_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let counter = std::cell::Cell::new(0);
    suite::run(
        &|| {
            counter.set(counter.get() + 1);
            let path = dir.path().join(format!("db{}.sqlite3", counter.get()));
            Box::new(SqliteAssetStore::open_with(path, sqlite_options()).unwrap())
        },
        Capabilities {
            objects_without_codec: false,
        },
    );
}

#[test]
fn in_memory_store_under_four_threads() {
    suite::concurrent_mixed(Arc::new(InMemoryStore::new()), 4, 1_000);
}

#[test]
fn sqlite_store_under_four_threads() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteAssetStore::open_with(
        dir.path().join("db.sqlite3"),
        SqliteAssetOptions {
            // The check is about isolation, not fsync speed.
            durability: mnemon_db::Durability::Normal,
            ..sqlite_options()
        },
    )
    .unwrap();
    suite::concurrent_mixed(Arc::new(store), 4, 1_000);
}

#[test]
fn sqlite_store_is_shared_by_two_handles() {
    // Two handles on one file (as two processes would have) see each other's writes.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite3");
    let a: Arc<dyn AssetStore> =
        Arc::new(SqliteAssetStore::open_with(&path, sqlite_options()).unwrap());
    let b: Arc<dyn AssetStore> =
        Arc::new(SqliteAssetStore::open_with(&path, sqlite_options()).unwrap());
    let asset =
        mnemon_types::Asset::from_json(serde_json::json!({"asset_id": "x", "content": 1})).unwrap();
    a.put(&asset).unwrap();
    assert_eq!(b.get("x").unwrap(), Some(asset));
    assert!(b.delete("x").unwrap());
    assert!(a.get("x").unwrap().is_none());
}
