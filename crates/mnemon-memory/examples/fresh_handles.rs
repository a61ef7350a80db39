//! The pattern of `mnemon serve` on SQLite, without HTTP: every operation opens a fresh handle
//! of its thread (as the operation layer does per request), 8 threads at once, each thread a
//! session of 50–500 messages of 256 dimensions; half the operations add one message, half
//! recall the top 5 by a vector. Handles with mirrors of their own (as before the store shared
//! them) and shared ones alternate, two rounds. Bounded: 4 × 4 seconds (`FRESH_SECONDS` to
//! change) in a temporary folder. Prints operations per second and the p50/p99 latency of each
//! kind, and the ratio of each round.
//!
//! `cargo run --release -p mnemon-memory --example fresh_handles`

use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemon_memory::{
    Memory, MemoryError, MsgInput, RetrievalQuery, RetrieveOptions, Scope, SqliteMemory,
    SqliteMemoryOptions, SqliteMemoryStore,
};
use serde_json::json;

const DIM: usize = 256;
const WORKERS: usize = 8;

fn vector(seed: u64) -> Vec<f64> {
    // A cheap deterministic pseudo-random vector (xorshift).
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..DIM)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2000) as f64 / 1000.0 - 1.0
        })
        .collect()
}

fn message(id: u64) -> MsgInput {
    MsgInput::Json(json!({
        "id": format!("m{id}"), "name": "user", "role": "user",
        "content": format!("message number {id} about the ferry and the tides"),
        "embedding": vector(id),
    }))
}

fn missing(scope: &Scope) -> MemoryError {
    MemoryError::Storage {
        detail: format!("session {scope:?} is missing"),
    }
}

/// A handle with a mirror of its own, as every handle had before the store shared them: the
/// "before" of the comparison.
fn unshared(store: &Arc<SqliteMemoryStore>, scope: &Scope) -> Result<SqliteMemory, MemoryError> {
    store
        .existing_memory_unshared(scope.clone())?
        .ok_or_else(|| missing(scope))
}

/// One worker: alternately adds a message and recalls the top 5 through a fresh handle of its
/// session until `deadline`; returns the latencies of each kind.
fn work(
    store: &Arc<SqliteMemoryStore>,
    worker: usize,
    deadline: Instant,
    shared: bool,
) -> Result<(Vec<Duration>, Vec<Duration>), MemoryError> {
    let scope = Scope::session(format!("s{worker}"));
    let mut adds = Vec::new();
    let mut recalls = Vec::new();
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let t = Instant::now();
        // A fresh handle per operation, as the service opens one per request (mnemon-ops:
        // created on write for an add, an existing thread's for a recall).
        if n.is_multiple_of(2) {
            let memory = if shared {
                store.memory_created_on_write(scope.clone())?
            } else {
                unshared(store, &scope)?
            };
            let id = 10_000_000 * (worker as u64 + 1) + n;
            memory.add(vec![message(id)])?;
            adds.push(t.elapsed());
        } else {
            let memory = if shared {
                store
                    .existing_memory(scope.clone())?
                    .ok_or_else(|| missing(&scope))?
            } else {
                unshared(store, &scope)?
            };
            let query: Vec<f32> = vector(n).iter().map(|&x| x as f32).collect();
            let options = RetrieveOptions {
                top_k: Some(5),
                ..RetrieveOptions::default()
            };
            let found =
                memory.retrieve_by_embedding(RetrievalQuery::Vector(query), &options, None)?;
            if found.len() != 5 {
                return Err(MemoryError::Storage {
                    detail: format!("a recall found {} messages, not 5", found.len()),
                });
            }
            recalls.push(t.elapsed());
        }
    }
    Ok((adds, recalls))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted
        .get(i)
        .or(sorted.last())
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = std::env::var("FRESH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let dir = tempfile::tempdir()?;
    let store =
        SqliteMemoryStore::open(dir.path().join("memory.db"), SqliteMemoryOptions::default())?;
    let mut next_id = 0u64;
    for worker in 0..WORKERS {
        let size = 50 + worker * 450 / (WORKERS - 1);
        let memory = store.memory(Scope::session(format!("s{worker}")))?;
        let batch = (0..size)
            .map(|_| {
                next_id += 1;
                message(next_id)
            })
            .collect();
        memory.add(batch)?;
    }
    // The two kinds of handle alternate, so that both meet the same machine load.
    for round in 0..2 {
        let before = run(&store, seconds, false)?;
        let after = run(&store, seconds, true)?;
        println!("round {round}: shared / unshared = {:.1}x", after / before);
    }
    Ok(())
}

/// One timed run of every worker; prints its figures and returns operations per second.
fn run(
    store: &Arc<SqliteMemoryStore>,
    seconds: u64,
    shared: bool,
) -> Result<f64, Box<dyn std::error::Error>> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let handles: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let store = Arc::clone(store);
            std::thread::spawn(move || work(&store, worker, deadline, shared))
        })
        .collect();
    let mut adds = Vec::new();
    let mut recalls = Vec::new();
    for handle in handles {
        let (a, r) = handle.join().map_err(|_| "a worker panicked")??;
        adds.extend(a);
        recalls.extend(r);
    }
    let elapsed = started.elapsed().as_secs_f64();
    adds.sort();
    recalls.sort();
    let rate = (adds.len() + recalls.len()) as f64 / elapsed;
    println!(
        "{:>8}: {} workers, {elapsed:.1} s: {:.0} ops/s ({:.0} adds/s, {:.0} recalls/s); add p50 {:.2} ms p99 {:.2} ms; recall p50 {:.2} ms p99 {:.2} ms",
        if shared { "shared" } else { "unshared" },
        WORKERS,
        (adds.len() + recalls.len()) as f64 / elapsed,
        adds.len() as f64 / elapsed,
        recalls.len() as f64 / elapsed,
        percentile(&adds, 0.5),
        percentile(&adds, 0.99),
        percentile(&recalls, 0.5),
        percentile(&recalls, 0.99),
    );
    Ok(rate)
}
