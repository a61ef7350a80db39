//! Asset store benchmarks (issue 3). Targets on the project machine (2 cores): in-memory resolve
//! of a 5-segment path ≤ 1 µs; SQLite put of 1 KB assets ≥ 5,000/s through `put_batch`; single
//! durable puts as fast as WAL allows (reported for `synchronous=FULL` and `NORMAL`); get of
//! 1 KB and 100 KB assets.
//!
//! Run: `cargo bench -p mnemon-store --bench store -- --warm-up-time 1 --measurement-time 3`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mnemon_db::Durability;
use mnemon_store::{AssetStore, InMemoryStore, SqliteAssetOptions, SqliteAssetStore};
use mnemon_types::{Asset, AssetRef, Bytes, Map, Value};
use serde_json::json;

/// An asset of about `size` bytes: some JSON fields and a byte buffer making up the rest.
fn asset(id: &str, size: usize) -> Asset {
    let mut content = Map::new();
    content.insert(
        "meta".into(),
        Value::from_json(json!({"labels": ["cat", "sofa"], "w": 640, "h": 480})),
    );
    content.insert(
        "image".into(),
        Bytes::with_media_type(vec![7u8; size.saturating_sub(120)], "image/png").into(),
    );
    Asset::new(Value::Map(content))
        .with_id(id)
        .with_type("image")
}

fn in_memory_resolve(c: &mut Criterion) {
    let store = InMemoryStore::new();
    for i in 0..1_000 {
        store.put(&asset(&format!("filler-{i}"), 256)).unwrap();
    }
    let deep = Asset::from_json(json!({
        "asset_id": "deep",
        "content": {"a": {"b": [{"c": {"d": "leaf"}}, 2, 3]}, "x": 1, "y": [1, 2, 3]},
    }))
    .unwrap();
    store.put(&deep).unwrap();
    let reference: AssetRef = "asset://deep/content/a/b/0/c".parse().unwrap();
    assert_eq!(reference.field_path.len(), 5);
    let mut group = c.benchmark_group("in_memory");
    group.throughput(Throughput::Elements(1));
    group.bench_function("resolve_5_segments", |b| {
        b.iter(|| store.resolve(black_box(&reference)).unwrap())
    });
    group.finish();
}

fn open(dir: &tempfile::TempDir, name: &str, durability: Durability) -> SqliteAssetStore {
    SqliteAssetStore::open_with(
        dir.path().join(name),
        SqliteAssetOptions {
            durability,
            ..SqliteAssetOptions::default()
        },
    )
    .unwrap()
}

fn sqlite_put(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let counter = AtomicU64::new(0);
    let next_id = || format!("a{}", counter.fetch_add(1, Ordering::Relaxed));
    let mut group = c.benchmark_group("sqlite_put");
    group.sample_size(20);
    for (label, durability) in [("full", Durability::Full), ("normal", Durability::Normal)] {
        let store = open(&dir, &format!("{label}.sqlite3"), durability);
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("single_1kb_{label}"), |b| {
            b.iter(|| store.put(&asset(&next_id(), 1_024)).unwrap())
        });
        group.bench_function(format!("single_100kb_{label}"), |b| {
            b.iter(|| store.put(&asset(&next_id(), 100 * 1_024)).unwrap())
        });
        group.throughput(Throughput::Elements(100));
        group.bench_function(format!("batch_100x1kb_{label}"), |b| {
            b.iter(|| {
                let batch: Vec<Asset> = (0..100).map(|_| asset(&next_id(), 1_024)).collect();
                store.put_batch(&batch).unwrap()
            })
        });
    }
    group.finish();
}

fn sqlite_get(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, "get.sqlite3", Durability::Full);
    let batch: Vec<Asset> = (0..1_000)
        .map(|i| asset(&format!("small-{i}"), 1_024))
        .chain((0..100).map(|i| asset(&format!("big-{i}"), 100 * 1_024)))
        .collect();
    store.put_batch(&batch).unwrap();
    let mut group = c.benchmark_group("sqlite_get");
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    group.bench_function("1kb", |b| {
        b.iter(|| {
            i = (i + 1) % 1_000;
            store.get(&format!("small-{i}")).unwrap().unwrap()
        })
    });
    group.bench_function("100kb", |b| {
        b.iter(|| {
            i = (i + 1) % 100;
            store.get(&format!("big-{i}")).unwrap().unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, in_memory_resolve, sqlite_put, sqlite_get);
criterion_main!(benches);
