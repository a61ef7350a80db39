//! Issue 16's "search within one session" on SQLite: one session of 50,000 messages of 256
//! dimensions, then top-10 recalls by cosine, each through a fresh handle (as `mnemon serve`
//! opens one per request: no mirror), first through a store opened anew (the first recall reads
//! the thread's vectors into the store's cache, `vector_scan.rs`), then through the same store.
//! Prints the p50/p99 of each. In a temporary folder; `SESSION_MESSAGES` changes the size.
//!
//! `cargo run --release -p mnemon-memory --example session_recall`

use std::time::{Duration, Instant};

use mnemon_memory::{
    Memory, MsgInput, RetrievalQuery, RetrieveOptions, Scope, SqliteMemoryOptions,
    SqliteMemoryStore,
};
use serde_json::json;

const DIM: usize = 256;
const QUERIES: usize = 50;

fn vector(seed: u64) -> Vec<f32> {
    // A cheap deterministic pseudo-random vector (xorshift).
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..DIM)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(at).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let messages: u64 = std::env::var("SESSION_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("memory.sqlite3");
    let scope = Scope::session("long");
    {
        let store = SqliteMemoryStore::open(&path, SqliteMemoryOptions::default())?;
        let memory = store.memory(scope.clone())?;
        let started = Instant::now();
        for start in (0..messages).step_by(1000) {
            let batch: Vec<MsgInput> = (start..(start + 1000).min(messages))
                .map(|i| {
                    MsgInput::Json(json!({"id": format!("m{i}"), "name": "user",
                        "content": format!("message {i}"), "embedding": vector(i)}))
                })
                .collect();
            memory.add(batch)?;
        }
        println!(
            "{messages} messages of {DIM} dimensions added in {:.1?}",
            started.elapsed()
        );
    }
    let store = SqliteMemoryStore::open(&path, SqliteMemoryOptions::default())?;
    let options = RetrieveOptions {
        top_k: Some(10),
        ..RetrieveOptions::default()
    };
    for round in ["first recalls of a store opened anew", "the same store"] {
        let mut times = Vec::with_capacity(QUERIES);
        for q in 0..QUERIES as u64 {
            let started = Instant::now();
            let fresh = store
                .existing_memory(scope.clone())?
                .ok_or("the session is missing")?;
            let found = fresh.retrieve_by_embedding(
                RetrievalQuery::Vector(vector(1_000_000 + q)),
                &options,
                None,
            )?;
            times.push(started.elapsed());
            assert_eq!(found.len(), 10);
        }
        let first = times.first().copied().unwrap_or_default();
        times.sort();
        println!(
            "{round}: top-10 recall through a fresh handle: first {:.1} ms, p50 {:.2} ms, p99 {:.2} ms",
            first.as_secs_f64() * 1000.0,
            percentile(&times, 0.5),
            percentile(&times, 0.99)
        );
    }
    Ok(())
}
