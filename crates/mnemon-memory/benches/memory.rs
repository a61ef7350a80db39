//! Memory benchmarks (docs/reference/memory.md#performance-targets). Targets on the project machine
//! (2 cores): in-memory add of 100k messages ≤ 100 ms; SQLite ≥ 50,000 messages/s in batches of
//! 1,000; cosine retrieval over 10k × 1536 (top 10, warm cache) ≤ 5 ms median. The retrieval group
//! also times the bare `mnemon_vector::Matrix` top-k over the same rows, the floor that retrieval
//! (checks, shortlist, exact `f64` rescoring, building the messages) should stay close to.
//!
//! Run: `cargo bench -p mnemon-memory --bench memory -- --warm-up-time 1 --measurement-time 3`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use mnemon_memory::{
    InMemoryMemory, Memory, MsgInput, RetrievalQuery, RetrieveOptions, Scope, SqliteMemoryOptions,
    SqliteMemoryStore,
};
use mnemon_types::msg::{FixedClock, SequentialIds};
use mnemon_types::{Msg, MsgFactory};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

fn factory() -> MsgFactory {
    MsgFactory::new(
        Arc::new(SequentialIds::new()),
        Arc::new(FixedClock::new("2024-03-05 08:30:00")),
    )
}

/// `n` messages of about 80 characters, without embeddings.
fn messages(n: usize, tag: &str) -> Vec<Msg> {
    let f = factory();
    (0..n)
        .map(|i| {
            f.msg(
                "Harbourmaster",
                format!("Message {i:06}: the morning ferry leaves the east quay at nine thirty."),
            )
            .id(format!("{tag}-{i:08}"))
            .role("assistant")
            .build()
            .unwrap()
        })
        .collect()
}

fn inputs(messages: &[Msg]) -> Vec<MsgInput> {
    messages.iter().cloned().map(MsgInput::from).collect()
}

fn in_memory_add(c: &mut Criterion) {
    let batch = messages(100_000, "m");
    let mut group = c.benchmark_group("in_memory_add");
    group.sample_size(10);
    group.throughput(Throughput::Elements(100_000));
    group.bench_function("100k_one_call", |b| {
        b.iter_batched(
            || (InMemoryMemory::with_factory(factory()), inputs(&batch)),
            |(memory, items)| {
                memory.add(items).unwrap();
                memory
            },
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

fn sqlite_add(c: &mut Criterion) {
    let batches: Vec<Vec<Msg>> = (0..100)
        .map(|b| messages(1000, &format!("b{b:03}")))
        .collect();
    let mut group = c.benchmark_group("sqlite_add");
    group.sample_size(10);
    group.throughput(Throughput::Elements(100_000));
    group.bench_function("100_calls_of_1000_normal", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().unwrap();
                let store = SqliteMemoryStore::open(
                    dir.path().join("bench.sqlite3"),
                    SqliteMemoryOptions::default(),
                )
                .unwrap();
                let memory = store.memory(Scope::session("bench")).unwrap();
                let prepared: Vec<Vec<MsgInput>> = batches.iter().map(|b| inputs(b)).collect();
                let start = Instant::now();
                for items in prepared {
                    memory.add(items).unwrap();
                }
                total += start.elapsed();
            }
            total
        });
    });
    group.finish();
}

fn retrieval(c: &mut Criterion) {
    const N: usize = 10_000;
    const DIM: usize = 1536;
    let mut rng = Pcg64::seed_from_u64(42);
    let f = factory();
    let unit = |rng: &mut Pcg64| {
        let v: Vec<f32> = (0..DIM).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / norm).collect::<Vec<f32>>()
    };
    let items: Vec<MsgInput> = (0..N)
        .map(|i| {
            f.msg("n", format!("message {i}"))
                .embedding(unit(&mut rng))
                .build()
                .unwrap()
                .into()
        })
        .collect();
    let memory = InMemoryMemory::with_factory(factory());
    memory.add(items).unwrap();
    let query = unit(&mut rng);
    let options = RetrieveOptions {
        top_k: Some(10),
        preserve_order: false,
        ..RetrieveOptions::default()
    };
    let run = || {
        memory
            .retrieve_by_embedding(RetrievalQuery::Vector(query.clone()), &options, None)
            .unwrap()
    };
    assert_eq!(run().len(), 10); // warms the embedding cache
    // The floor: the same SIMD scan and top-k straight on an aligned matrix, no memory around it.
    let mut matrix = mnemon_vector::Matrix::with_capacity(DIM, N);
    for v in memory.get_embeddings(None).unwrap() {
        matrix.push_row(&v).unwrap();
    }
    let mut group = c.benchmark_group("retrieval");
    group.sample_size(50);
    group.bench_function("cosine_10k_x_1536_top10", |b| b.iter(run));
    group.bench_function("baseline_matrix_top10_10k_x_1536", |b| {
        b.iter(|| matrix.view().top_k(&query, 10, |_| true))
    });
    group.finish();
}

/// The server's similarity search over one SQLite session of 50,000 messages with 512-dimensional
/// embeddings (the hashing embedder's size): every request opens a fresh handle on the thread
/// (`existing_memory`), whose mirror is empty, then recalls the top 5 by cosine.
fn sqlite_fresh_handle_recall(c: &mut Criterion) {
    const N: usize = 50_000;
    const DIM: usize = 512;
    let mut rng = Pcg64::seed_from_u64(7);
    let f = factory();
    let mut unit = move || {
        let v: Vec<f32> = (0..DIM).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / norm).collect::<Vec<f32>>()
    };
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteMemoryStore::open_with_factory(
        dir.path().join("m.sqlite3"),
        SqliteMemoryOptions::default(),
        factory(),
    )
    .unwrap();
    let memory = store.memory(Scope::session("big")).unwrap();
    for batch in 0..N / 1000 {
        let items: Vec<MsgInput> = (0..1000)
            .map(|i| {
                f.msg(
                    "n",
                    format!("message {batch} {i}: the ferry leaves at nine thirty"),
                )
                .embedding(unit())
                .build()
                .unwrap()
                .into()
            })
            .collect();
        memory.add(items).unwrap();
    }
    drop(memory);
    let query = unit();
    let options = RetrieveOptions {
        top_k: Some(5),
        preserve_order: false,
        ..RetrieveOptions::default()
    };
    let mut group = c.benchmark_group("sqlite_recall");
    group.sample_size(10);
    group.bench_function("fresh_handle_50k_x_512_top5", |b| {
        b.iter(|| {
            let memory = store
                .existing_memory(Scope::session("big"))
                .unwrap()
                .unwrap();
            let found = memory
                .retrieve_by_embedding(RetrievalQuery::Vector(query.clone()), &options, None)
                .unwrap();
            assert_eq!(found.len(), 5);
        })
    });
    // Where the time of that recall goes: reading the rows' stored vectors alone (the body,
    // before the vector in the row and holding the embedding's decimals too, is stepped over),
    // and scoring 50,000 vectors exactly in memory.
    let conn = rusqlite::Connection::open(dir.path().join("m.sqlite3")).unwrap();
    group.bench_function("read_stored_vectors_50k_x_512", |b| {
        b.iter(|| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT seq, embedding FROM memory_messages ORDER BY thread_id, seq",
                )
                .unwrap();
            let mut rows = stmt.query([]).unwrap();
            let mut bytes = 0;
            while let Some(row) = rows.next().unwrap() {
                bytes += row.get_ref(1).unwrap().as_blob().unwrap().len();
            }
            assert_eq!(bytes, N * DIM * 4);
        })
    });
    let vectors: Vec<Vec<f32>> = (0..N).map(|_| unit()).collect();
    group.bench_function("score_exactly_in_memory_50k_x_512", |b| {
        b.iter(|| {
            let mut best = f64::MIN;
            for v in &vectors {
                let dot: f64 = v
                    .iter()
                    .zip(&query)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum();
                let norm: f64 = v
                    .iter()
                    .map(|a| f64::from(*a) * f64::from(*a))
                    .sum::<f64>()
                    .sqrt();
                best = best.max(dot / norm);
            }
            best
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    in_memory_add,
    sqlite_add,
    retrieval,
    sqlite_fresh_handle_recall
);
criterion_main!(benches);
