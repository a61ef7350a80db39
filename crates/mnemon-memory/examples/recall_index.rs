//! Issue 17 item 4, measured: one SQLite session of `RECALL_MESSAGES` messages (default
//! 100,000) of `RECALL_DIM` dimensions (default 256), clustered around 1,000 centres from a
//! fixed seed, then top-10 cosine recalls (`RECALL_QUERIES`, default 200) through one handle
//! (its mirror current, as a long-lived agent holds it): the exact scan
//! (`RetrieveOptions::exact`) against the recall index
//! (docs/reference/memory.md#the-recall-index), on the same queries in the same run. Then the
//! same through a handle with a mirror of its own, never current (the recall streams the
//! store's cached vectors through the store's index of the thread, as a handle opened per
//! request does when no handle holds the thread), and as a search across sessions. Prints
//! each index's build time, p50/p99 of each path, their ratio, and the index's recall@10
//! against the exact answers. In a temporary folder. `RECALL_VECTOR_CACHE_MB` sets the store's
//! vector cache (default 256 MiB, `SqliteMemoryOptions::vector_cache_bytes`).
//!
//! `cargo run --release -p mnemon-memory --example recall_index`

use std::time::{Duration, Instant};

use mnemon_memory::{
    Memory, MsgInput, RecallIndexOptions, RecallIndexStatus, RetrievalQuery, RetrieveOptions,
    Retrieved, Scope, ScopeFilter, SearchRequest, SqliteMemoryOptions, SqliteMemoryStore,
};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde_json::json;

/// Queries per path, unless `RECALL_QUERIES` says otherwise.
const QUERIES: usize = 200;
const TOP_K: usize = 10;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn near(rng: &mut Pcg64, centre: &[f32]) -> Vec<f32> {
    centre
        .iter()
        .map(|x| x + 0.35 * rng.random_range(-1.0f32..1.0))
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(at).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Each query's hits, and the recalls' times, sorted.
type Run = (Vec<Vec<Retrieved>>, Vec<Duration>);

fn timed(
    memory: &dyn Memory,
    queries: &[Vec<f32>],
    options: &RetrieveOptions,
) -> Result<Run, Box<dyn std::error::Error>> {
    let mut found = Vec::with_capacity(queries.len());
    let mut times = Vec::with_capacity(queries.len());
    for q in queries {
        let started = Instant::now();
        found.push(memory.retrieve_by_embedding(
            RetrievalQuery::Vector(q.clone()),
            options,
            None,
        )?);
        times.push(started.elapsed());
    }
    times.sort();
    Ok((found, times))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let messages = env("RECALL_MESSAGES", 100_000);
    let dim = env("RECALL_DIM", 256);
    let mut rng = Pcg64::seed_from_u64(42);
    let centres: Vec<Vec<f32>> = (0..1_000)
        .map(|_| (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect())
        .collect();
    let dir = tempfile::tempdir()?;
    let store = SqliteMemoryStore::open(
        dir.path().join("memory.sqlite3"),
        SqliteMemoryOptions {
            recall_index: RecallIndexOptions {
                background: false,
                ..RecallIndexOptions::default()
            },
            vector_cache_bytes: env("RECALL_VECTOR_CACHE_MB", 256) << 20,
            ..SqliteMemoryOptions::default()
        },
    )?;
    let memory = store.memory(Scope::session("long"))?;
    let started = Instant::now();
    for start in (0..messages).step_by(1_000) {
        let batch: Vec<MsgInput> = (start..(start + 1_000).min(messages))
            .map(|i| {
                let c = rng.random_range(0..centres.len());
                let v = near(&mut rng, &centres[c]);
                MsgInput::Json(json!({"id": format!("m{i}"), "name": "user",
                    "content": format!("message {i}"), "embedding": v}))
            })
            .collect();
        memory.add(batch)?;
    }
    println!(
        "{messages} messages of {dim} dimensions added in {:.1?}",
        started.elapsed()
    );
    let queries: Vec<Vec<f32>> = (0..env("RECALL_QUERIES", QUERIES))
        .map(|_| {
            let c = rng.random_range(0..centres.len());
            near(&mut rng, &centres[c])
        })
        .collect();
    let exact = RetrieveOptions {
        top_k: Some(TOP_K),
        preserve_order: false,
        exact: true,
        ..RetrieveOptions::default()
    };
    let indexed = RetrieveOptions {
        exact: false,
        ..exact.clone()
    };
    // Warm the mirror, then build the index inside one recall.
    timed(&memory, &queries[..1], &exact)?;
    let started = Instant::now();
    timed(&memory, &queries[..1], &indexed)?;
    let build = started.elapsed();
    let status = memory.recall_index_status()?;
    println!("index build (inside the first indexed recall): {build:.1?}, {status:?}");
    if !matches!(status, RecallIndexStatus::Ready { .. }) {
        return Err("the index was not built".into());
    }
    let (truth, exact_times) = timed(&memory, &queries, &exact)?;
    let (got, index_times) = timed(&memory, &queries, &indexed)?;
    report(
        "through a held handle (the mirror's index)",
        (&truth, &exact_times),
        (&got, &index_times),
    )?;

    let fresh = store
        .existing_memory_unshared(Scope::session("long"))?
        .ok_or("the session is missing")?;
    timed(&fresh, &queries[..1], &exact)?;
    let started = Instant::now();
    timed(&fresh, &queries[..1], &indexed)?;
    println!(
        "store index build (inside the first streamed recall): {:.1?}",
        started.elapsed()
    );
    let (truth, exact_times) = timed(&fresh, &queries, &exact)?;
    let (got, index_times) = timed(&fresh, &queries, &indexed)?;
    report(
        "through a handle without a current mirror (the store's index)",
        (&truth, &exact_times),
        (&got, &index_times),
    )?;

    let search = |exact: bool| -> Result<Run, Box<dyn std::error::Error>> {
        let mut found = Vec::with_capacity(queries.len());
        let mut times = Vec::with_capacity(queries.len());
        for q in &queries {
            let mut request =
                SearchRequest::new(ScopeFilter::all(), RetrievalQuery::Vector(q.clone()), TOP_K);
            request.exact = exact;
            let started = Instant::now();
            let hits = store.search_with(&request, None)?.hits;
            times.push(started.elapsed());
            found.push(
                hits.into_iter()
                    .map(|h| Retrieved {
                        score: h.score,
                        index: h.index,
                        message: h.message,
                    })
                    .collect(),
            );
        }
        times.sort();
        Ok((found, times))
    };
    let (truth, exact_times) = search(true)?;
    let (got, index_times) = search(false)?;
    report(
        "search across sessions",
        (&truth, &exact_times),
        (&got, &index_times),
    )
}

/// Prints both paths' percentiles and the index's recall; errs when a score differs.
fn report(
    what: &str,
    (truth, exact_times): (&[Vec<Retrieved>], &[Duration]),
    (got, index_times): (&[Vec<Retrieved>], &[Duration]),
) -> Result<(), Box<dyn std::error::Error>> {
    let (mut hit, mut wanted) = (0usize, 0usize);
    for (t, g) in truth.iter().zip(got) {
        wanted += t.len();
        hit += g
            .iter()
            .filter(|r| t.iter().any(|e| e.index == r.index))
            .count();
        // Every score the index returns is the exact scan's score of that message.
        for r in g {
            if let Some(e) = t.iter().find(|e| e.index == r.index)
                && e.score != r.score
            {
                return Err(format!("message {} scored differently", r.index).into());
            }
        }
    }
    let (e50, e99) = (percentile(exact_times, 0.5), percentile(exact_times, 0.99));
    let (i50, i99) = (percentile(index_times, 0.5), percentile(index_times, 0.99));
    println!("{what}:");
    println!("  exact scan: p50 {e50:.2} ms, p99 {e99:.2} ms");
    println!(
        "  recall index: p50 {i50:.2} ms, p99 {i99:.2} ms ({:.1}x at p50), recall@{TOP_K} {:.3}",
        e50 / i50,
        hit as f64 / wanted as f64
    );
    Ok(())
}
