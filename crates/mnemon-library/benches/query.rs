//! Query latency on a seeded synthetic library: exact and fast scans against a plain scalar
//! loop over the same matrix (the baseline).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use mnemon_library::synthetic::{unit_vector, write_synthetic};
use mnemon_library::{AccessPolicy, Library, QueryOptions, encode_embedding, wire};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value, json};

const BITS: usize = 20_000;
const DIM: usize = 1536;
const MODEL: &str = "openai.com:text-embedding-ada-002";

fn args(query: &[f32], count: i64, count_type: &str) -> Map<String, Value> {
    json!({"version": 1, "query_embedding_model": MODEL, "query_embedding": encode_embedding(query),
           "count": count, "count_type": count_type})
    .as_object()
    .unwrap()
    .clone()
}

fn scalar_top10(lib: &Library, q: &[f32]) -> Vec<(f32, usize)> {
    let m = lib.embeddings();
    let mut scored: Vec<(f32, usize)> = (0..m.rows())
        .map(|i| (mnemon_vector::scalar_dot(m.row(i).unwrap(), q), i))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.truncate(10);
    scored
}

fn bench(c: &mut Criterion) {
    let mut bytes = Vec::new();
    write_synthetic(&mut bytes, MODEL, BITS, DIM, 42).unwrap();
    let lib = Library::from_bytes(&bytes).unwrap();
    drop(bytes);
    let q = unit_vector(&mut ChaCha8Rng::seed_from_u64(1), DIM);
    let policy = AccessPolicy::default();
    let exact = QueryOptions::default();
    let fast = QueryOptions {
        fast: true,
        ..QueryOptions::default()
    };
    let bit10 = args(&q, 10, "bit");
    let tok1000 = args(&q, 1000, "token");
    // Fast and exact must agree before timing means anything.
    assert_eq!(
        wire::query(&lib, &bit10, &policy, &exact).unwrap()["bits"],
        wire::query(&lib, &bit10, &policy, &fast).unwrap()["bits"]
    );
    let mut g = c.benchmark_group(format!("library_{BITS}x{DIM}"));
    g.sample_size(20);
    g.bench_function("exact_bit_10", |b| {
        b.iter(|| wire::query(&lib, &bit10, &policy, &exact).unwrap())
    });
    g.bench_function("fast_bit_10", |b| {
        b.iter(|| wire::query(&lib, &bit10, &policy, &fast).unwrap())
    });
    g.bench_function("exact_token_1000", |b| {
        b.iter(|| wire::query(&lib, &tok1000, &policy, &exact).unwrap())
    });
    g.bench_function("fast_token_1000", |b| {
        b.iter(|| wire::query(&lib, &tok1000, &policy, &fast).unwrap())
    });
    g.bench_function("scalar_baseline_top_10", |b| {
        b.iter(|| scalar_top10(&lib, &q))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
