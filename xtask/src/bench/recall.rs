//! `cargo xtask bench recall`: recall across sessions with filters, keyword and hybrid search,
//! and forget, on both durable memory backends (issue 14, "Done when": hybrid and filtered
//! recall latency p50/p99 over 100,000 messages on each backend, 1M on SQLite, and forget of
//! 100,000 records).
//!
//! The bench starts its own PostgreSQL server with the test harness
//! (`mnemon_tests::postgres::PgServer`: the binaries of `cargo xtask postgres install`, loopback
//! only; see docs/postgres.md) and a SQLite file under `target/bench-recall`. On each backend it
//! adds `--messages` seeded messages (batches of [`BATCH`]) spread over [`THREADS`] threads of
//! [`USERS`] users, each with a unit embedding of `--dim` dimensions (recorded as made by the
//! bench's model), eight words of a 500-word vocabulary as its text and a metadata `topic` (one
//! of ten), then runs `--queries` searches across every session (top 10) of each kind and
//! reports their p50 and p99:
//!
//! - **vector**: by cosine, no filter (the baseline);
//! - **filtered**: by cosine, only `metadata.topic = "t3"` (a tenth of the messages), the filter
//!   applied before the top-10 cut;
//! - **keyword**: full-text search of two vocabulary words;
//! - **hybrid**: reciprocal rank fusion of the vector and keyword rankings (default weights).
//!
//! Then **forget**: `--forget` more messages in threads of one more user, deleted with one
//! `forget(ScopeFilter::user(..))`, timed (and the messages per second).
//!
//! Timings need an optimised build: a debug xtask re-runs itself with `cargo run --release`.
//! The machine is shared and noisy: run it more than once, on an idle machine, and report
//! ranges.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use mnemon_memory::{
    AddOptions, Filter, HybridWeights, Memory, MsgInput, PostgresMemoryOptions,
    PostgresMemoryStore, RetrievalQuery, Scope, ScopeFilter, SearchHit, SearchMode, SearchRequest,
    SqliteMemoryOptions, SqliteMemoryStore,
};
use mnemon_tests::postgres::PgServer;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use crate::cargo;

const USAGE: &str = "usage: cargo xtask bench recall [--messages N] [--dim D] [--queries Q] \
                     [--forget F] [--backend sqlite|postgres|both]
  --messages N   messages searched, each backend (default 100000)
  --dim D        dimensions of every embedding (default 256)
  --queries Q    searches of each kind, each backend (default 200)
  --forget F     messages deleted by one forget, each backend (default 100000)
  --backend B    sqlite, postgres or both (default both)";

/// Messages per batched add.
const BATCH: usize = 1_000;
/// The threads the searched messages are spread over.
const THREADS: usize = 20;
/// The users those threads belong to.
const USERS: usize = 5;
/// Hits per search.
const TOP_K: usize = 10;
/// The seed: every run stores the same data and asks the same queries.
const SEED: u64 = 14;
/// The vocabulary of the messages' text.
const WORDS: usize = 500;
/// The metadata topics, one per message (a tenth of the messages each).
const TOPICS: usize = 10;
/// The model the bench's embeddings are recorded as made by.
const MODEL: &str = "bench:random-unit";

#[derive(Debug, Clone, PartialEq)]
struct Params {
    messages: usize,
    dim: usize,
    queries: usize,
    forget: usize,
    sqlite: bool,
    postgres: bool,
}

fn parse(args: &[String]) -> Result<Option<Params>> {
    let mut p = Params {
        messages: 100_000,
        dim: 256,
        queries: 200,
        forget: 100_000,
        sqlite: true,
        postgres: true,
    };
    let mut words = args.iter();
    while let Some(word) = words.next() {
        let mut value = |name: &str| -> Result<usize> {
            let Some(v) = words.next() else {
                bail!("{name} needs a number\n\n{USAGE}");
            };
            v.parse()
                .with_context(|| format!("{name} {v:?}: not a number\n\n{USAGE}"))
        };
        match word.as_str() {
            "--messages" => p.messages = value("--messages")?,
            "--dim" => p.dim = value("--dim")?,
            "--queries" => p.queries = value("--queries")?,
            "--forget" => p.forget = value("--forget")?,
            "--backend" => match words.next().map(String::as_str) {
                Some("sqlite") => (p.sqlite, p.postgres) = (true, false),
                Some("postgres") => (p.sqlite, p.postgres) = (false, true),
                Some("both") => (p.sqlite, p.postgres) = (true, true),
                other => bail!("--backend {other:?}: sqlite, postgres or both\n\n{USAGE}"),
            },
            "--help" | "-h" => return Ok(None),
            other => bail!("unknown argument {other:?}\n\n{USAGE}"),
        }
    }
    if p.messages == 0 || p.dim == 0 || p.queries == 0 {
        bail!("--messages, --dim and --queries must be at least 1\n\n{USAGE}");
    }
    Ok(Some(p))
}

/// Runs the benchmark. `args` are the words after `bench recall`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let Some(params) = parse(args)? else {
        println!("{USAGE}");
        return Ok(());
    };
    if cargo::rerun_bench_in_release("recall", args)? {
        return Ok(());
    }
    let dir = cargo::target_dir().join("bench-recall");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = measure_all(&params, &dir);
    // The databases are large: never leave them behind.
    let removed = std::fs::remove_dir_all(&dir);
    let reports = result?;
    removed.with_context(|| format!("removing {}", dir.display()))?;
    println!(
        "recall across {THREADS} threads of {USERS} users: {} messages, {} dimensions, {} \
         searches of each kind (top {TOP_K}); forget of {} messages",
        params.messages, params.dim, params.queries, params.forget
    );
    println!(
        "{:<10} {:>8} {:>20} {:>20} {:>20} {:>20} {:>16}",
        "backend",
        "load s",
        "vector p50/p99 ms",
        "filtered p50/p99 ms",
        "keyword p50/p99 ms",
        "hybrid p50/p99 ms",
        "forget s (msg/s)"
    );
    for report in &reports {
        report.print();
    }
    Ok(())
}

fn measure_all(p: &Params, dir: &Path) -> Result<Vec<Report>> {
    let data = Data::generate(p);
    let mut reports = Vec::new();
    if p.sqlite {
        let path = dir.join("memory.sqlite3");
        let store = SqliteMemoryStore::open(&path, SqliteMemoryOptions::default())?;
        reports.push(measure("sqlite", &SqliteBench(store), &data, p)?);
    }
    if p.postgres {
        let server = PgServer::start().context("starting the PostgreSQL server")?;
        let url = server.fresh_database("bench_recall")?;
        let store = PostgresMemoryStore::open(&url, PostgresMemoryOptions::default())?;
        reports.push(measure("postgres", &PostgresBench(store), &data, p)?);
    }
    Ok(reports)
}

/// What the bench asks of a store, on either backend.
trait Bench {
    fn memory(&self, scope: Scope) -> Result<Box<dyn Memory>>;
    fn search(&self, request: &SearchRequest) -> Result<Vec<SearchHit>>;
    fn forget(&self, within: &ScopeFilter) -> Result<u64>;
}

struct SqliteBench(Arc<SqliteMemoryStore>);

impl Bench for SqliteBench {
    fn memory(&self, scope: Scope) -> Result<Box<dyn Memory>> {
        Ok(Box::new(self.0.memory(scope)?))
    }

    fn search(&self, request: &SearchRequest) -> Result<Vec<SearchHit>> {
        Ok(self.0.search_with(request, None)?.hits)
    }

    fn forget(&self, within: &ScopeFilter) -> Result<u64> {
        Ok(self.0.forget(within)?.messages)
    }
}

struct PostgresBench(Arc<PostgresMemoryStore>);

impl Bench for PostgresBench {
    fn memory(&self, scope: Scope) -> Result<Box<dyn Memory>> {
        Ok(Box::new(self.0.memory(scope)?))
    }

    fn search(&self, request: &SearchRequest) -> Result<Vec<SearchHit>> {
        Ok(self.0.search_with(request, None)?.hits)
    }

    fn forget(&self, within: &ScopeFilter) -> Result<u64> {
        Ok(self.0.forget(within)?.messages)
    }
}

/// The seeded embeddings (row-major unit vectors) and the queries.
struct Data {
    dim: usize,
    vectors: Vec<f32>,
    query_vectors: Vec<f32>,
    query_texts: Vec<String>,
}

impl Data {
    fn generate(p: &Params) -> Data {
        let mut rng = ChaCha8Rng::seed_from_u64(SEED);
        let mut unit_vectors = |n: usize| -> Vec<f32> {
            let mut out = Vec::with_capacity(n * p.dim);
            for _ in 0..n {
                let v: Vec<f32> = (0..p.dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
                let norm = v
                    .iter()
                    .map(|x| x * x)
                    .sum::<f32>()
                    .sqrt()
                    .max(f32::MIN_POSITIVE);
                out.extend(v.iter().map(|x| x / norm));
            }
            out
        };
        let vectors = unit_vectors(p.messages.max(p.forget));
        let query_vectors = unit_vectors(p.queries);
        let mut rng = ChaCha8Rng::seed_from_u64(SEED + 1);
        let query_texts = (0..p.queries)
            .map(|_| {
                format!(
                    "w{} w{}",
                    rng.random_range(0..WORDS),
                    rng.random_range(0..WORDS)
                )
            })
            .collect();
        Data {
            dim: p.dim,
            vectors,
            query_vectors,
            query_texts,
        }
    }

    fn vector(&self, i: usize) -> &[f32] {
        let count = self.vectors.len() / self.dim;
        let at = (i % count.max(1)) * self.dim;
        self.vectors.get(at..at + self.dim).unwrap_or_default()
    }

    fn query(&self, q: usize) -> (&[f32], &str) {
        let at = q * self.dim;
        (
            self.query_vectors
                .get(at..at + self.dim)
                .unwrap_or_default(),
            self.query_texts.get(q).map_or("", String::as_str),
        )
    }
}

/// Message `i`: eight words of the vocabulary (a deterministic mix of `i`), a topic, a vector.
fn message(data: &Data, prefix: &str, i: usize) -> MsgInput {
    let words: Vec<String> = (0..8u64)
        .map(|k| {
            let h = (i as u64)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(k.wrapping_mul(0xBF58_476D_1CE4_E5B9));
            format!("w{}", (h >> 33) % WORDS as u64)
        })
        .collect();
    json!({
        "id": format!("{prefix}{i}"),
        "name": "bench",
        "role": if i.is_multiple_of(2) { "user" } else { "assistant" },
        "content": words.join(" "),
        "metadata": {"topic": format!("t{}", i % TOPICS)},
        "embedding": data.vector(i),
    })
    .into()
}

/// Adds `count` messages in batches of [`BATCH`] over `threads` threads of `users` users.
fn load(
    bench: &dyn Bench,
    data: &Data,
    prefix: &str,
    count: usize,
    user: &dyn Fn(usize) -> String,
) -> Result<Duration> {
    let clock = Instant::now();
    let per_thread = count.div_ceil(THREADS);
    for t in 0..THREADS {
        let scope = Scope {
            user_id: Some(user(t)),
            agent_id: Some("bench".into()),
            session_id: Some(format!("{prefix}-s{t}")),
        };
        let memory = bench.memory(scope)?;
        let first = t * per_thread;
        let last = ((t + 1) * per_thread).min(count);
        let mut i = first;
        while i < last {
            let end = (i + BATCH).min(last);
            let items = (i..end).map(|j| message(data, prefix, j)).collect();
            memory.add_with_model(items, &AddOptions::default(), MODEL)?;
            i = end;
        }
    }
    Ok(clock.elapsed())
}

/// p50 and p99 in milliseconds (nearest rank).
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |p: f64| {
        let rank = ((p / 100.0) * (samples.len().saturating_sub(1)) as f64).round() as usize;
        samples
            .get(rank.min(samples.len().saturating_sub(1)))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    };
    (at(50.0), at(99.0))
}

struct Report {
    backend: &'static str,
    load: Duration,
    vector: (f64, f64),
    filtered: (f64, f64),
    keyword: (f64, f64),
    hybrid: (f64, f64),
    forget: Option<(Duration, u64)>,
}

impl Report {
    fn print(&self) {
        let pair = |(p50, p99): (f64, f64)| format!("{p50:.2} / {p99:.2}");
        let forget = self.forget.map_or("-".to_owned(), |(spent, n)| {
            format!(
                "{:.2} ({:.0})",
                spent.as_secs_f64(),
                n as f64 / spent.as_secs_f64().max(1e-9)
            )
        });
        println!(
            "{:<10} {:>8.1} {:>20} {:>20} {:>20} {:>20} {:>16}",
            self.backend,
            self.load.as_secs_f64(),
            pair(self.vector),
            pair(self.filtered),
            pair(self.keyword),
            pair(self.hybrid),
            forget
        );
    }
}

fn measure(backend: &'static str, bench: &dyn Bench, data: &Data, p: &Params) -> Result<Report> {
    let loaded = load(bench, data, "m", p.messages, &|t| format!("u{}", t % USERS))?;
    let filter = Filter::parse(&json!({"eq": {"path": "metadata.topic", "value": "t3"}}))
        .context("the bench's filter")?;
    let mut timings: [Vec<Duration>; 4] = Default::default();
    for q in 0..p.queries {
        let (vector, text) = data.query(q);
        let base = SearchRequest::new(
            ScopeFilter::all(),
            RetrievalQuery::Vector(vector.to_vec()),
            TOP_K,
        );
        let requests = [
            base.clone(),
            base.clone().with_filter(filter.clone()),
            SearchRequest {
                mode: SearchMode::Keyword { text: text.into() },
                ..base.clone()
            },
            SearchRequest {
                mode: SearchMode::Hybrid {
                    text: text.into(),
                    weights: HybridWeights::default(),
                },
                ..base
            },
        ];
        for (request, samples) in requests.iter().zip(timings.iter_mut()) {
            let clock = Instant::now();
            let hits = bench.search(request)?;
            samples.push(clock.elapsed());
            if hits.len() != TOP_K && !matches!(request.mode, SearchMode::Keyword { .. }) {
                bail!("{backend}: {} hits instead of {TOP_K}", hits.len());
            }
        }
    }
    let [vector, filtered, keyword, hybrid] = timings.map(percentiles);
    let forget = if p.forget > 0 {
        load(bench, data, "f", p.forget, &|_| "forgotten".to_owned())?;
        let clock = Instant::now();
        let gone = bench.forget(&ScopeFilter::user("forgotten"))?;
        let spent = clock.elapsed();
        if gone != p.forget as u64 {
            bail!("{backend}: forget removed {gone} messages of {}", p.forget);
        }
        Some((spent, gone))
    } else {
        None
    };
    Ok(Report {
        backend,
        load: loaded,
        vector,
        filtered,
        keyword,
        hybrid,
        forget,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &str) -> Vec<String> {
        words.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn arguments_parse_with_their_defaults() {
        let p = parse(&args("")).unwrap().unwrap();
        assert_eq!(
            (p.messages, p.dim, p.queries, p.forget),
            (100_000, 256, 200, 100_000)
        );
        assert!(p.sqlite && p.postgres);
        let p = parse(&args("--messages 5 --backend sqlite --forget 0"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (p.messages, p.forget, p.sqlite, p.postgres),
            (5, 0, true, false)
        );
        assert!(parse(&args("--help")).unwrap().is_none());
        assert!(parse(&args("--messages x")).is_err());
        assert!(parse(&args("--backend mysql")).is_err());
        assert!(parse(&args("--queries 0")).is_err());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let (p50, p99) = percentiles(samples);
        assert_eq!((p50.round(), p99.round()), (51.0, 99.0));
    }

    #[test]
    fn messages_are_seeded_and_carry_their_topic() {
        let p = parse(&args("--messages 30 --queries 2 --dim 4 --forget 0"))
            .unwrap()
            .unwrap();
        let a = Data::generate(&p);
        let b = Data::generate(&p);
        assert_eq!(a.vectors, b.vectors);
        let norm: f32 = a.vector(3).iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-5);
        let MsgInput::Json(m) = message(&a, "m", 13) else {
            panic!("JSON expected")
        };
        assert_eq!(m["metadata"]["topic"], "t3");
        assert_eq!(m["content"].as_str().unwrap().split(' ').count(), 8);
    }
}
