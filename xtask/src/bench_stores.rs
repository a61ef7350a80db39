//! `cargo xtask bench stores`: the durable stores side by side (issue 13, item 7): SQLite and
//! PostgreSQL (pgvector HNSW) in the same run, and LangGraph's `PostgresStore` on the same
//! PostgreSQL server, doing the same operations on the same vectors, with the ratio of Mnemon's
//! rates to LangGraph's and issue 13's targets marked met or unmet from the figures.
//!
//! The bench starts its own server with the test harness
//! (`mnemon_tests::postgres::PgServer::start_with_settings`: the binaries of `cargo xtask
//! postgres install`, loopback only, as `nobody` under root; see docs/postgres.md), sized to the
//! data as a real server would be ([`server_settings`]: `shared_buffers`,
//! `maintenance_work_mem`, `effective_cache_size`, `max_wal_size`; printed with the report). It
//! generates `--messages` seeded, clustered unit vectors of `--dim` dimensions (clusters of about
//! 50, so that the ten nearest neighbours are meaningful) and `--queries` query vectors near the
//! cluster centres, computes the exact top 10 of every query by brute force (the reference of
//! every recall@10 below, SQLite's included), then measures on each backend, in batches of
//! [`BATCH`] and with the stores' default durability (`Durability::Full`, a synchronous commit):
//!
//! - **bulk**: batched adds/s of the messages without embeddings (Mnemon only), and with; the
//!   HNSW index is dropped for the load and then rebuilt from its own definition: the "index
//!   build" row. On Mnemon the store creates the index after its first batch and the bench drops
//!   it then; LangGraph's `setup` creates it and the script drops it before its first batch.
//!   Mnemon writes the batches after the first outside the index for its background indexer
//!   (`PostgresMemoryOptions::background_indexing`); the time until it has moved them in
//!   (watched through `pending_index()`) before the build counts as load time.
//! - **maintained**: batched adds/s of `--maintained` more messages into another thread
//!   (namespace) while the HNSW index, now over every stored vector, is maintained; Mnemon's
//!   adds are acknowledged before its background indexer inserts them into the index, so the
//!   rate until its indexer has moved the last of them into the index (`pending_index()` reads
//!   0) is reported beside it, and judged
//!   too (LangGraph's puts are indexed when acknowledged);
//! - **single puts**: `--singles` sequential durable puts of one message with its embedding (and,
//!   for Mnemon, of one asset): puts/s, p50 and p99, and for Mnemon the rate until indexed;
//! - **searches**: top-10 by cosine of every query, sequentially, over the bulk thread
//!   (namespace): searches/s, p50, p99 and recall@10 against the exact top 10. Exact on SQLite;
//!   through HNSW on PostgreSQL, after `ANALYZE` (the bench reports whether the planner uses the
//!   index for the store's query before and after it);
//! - **concurrent** (`--clients C`, default 4, 0 to skip; PostgreSQL and LangGraph): C threads,
//!   each with its own store and so its own connection, each putting `--singles` messages into
//!   a thread of its own, then each running every query: the puts/s and searches/s over the wall
//!   time of each half.
//!
//! LangGraph (unless `--skip-langgraph`): xtask/bench/langgraph_store.py runs the same phases
//! through `PostgresStore` (PyPI `langgraph-checkpoint-postgres`, in a virtual environment under
//! `target/langgraph-venv`) on a database of its own on the same server, with an embed function
//! that looks the same vectors up and an HNSW index of the same dimensions. It reports raw
//! timings; rates and percentiles are computed here with the same functions for both sides.
//! `--langgraph-messages N` gives LangGraph a smaller bulk load (its first N messages), and the
//! table then says which size each column was measured at.
//!
//! Timings need an optimised build: a debug xtask re-runs itself with `cargo run --release`.
//! The machine is shared and noisy: run it more than once and report ranges.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use mnemon_memory::{
    Memory, MsgInput, PostgresMemoryOptions, PostgresMemoryStore, RetrievalQuery, RetrieveOptions,
    Scope, SqliteMemoryStore, VectorMode,
};
use mnemon_store::{AssetStore, PostgresAssetOptions, PostgresAssetStore, SqliteAssetStore};
use mnemon_tests::postgres::PgServer;
use mnemon_types::Asset;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use crate::cargo;

const USAGE: &str = "usage: cargo xtask bench stores [--messages N] [--langgraph-messages N] \
                     [--dim D] [--queries Q] [--maintained M] [--singles S] [--clients C] \
                     [--ef-search E] [--skip-langgraph]
  --messages N            messages of the bulk load, both backends (default 20000)
  --langgraph-messages N  LangGraph's bulk load: its first N messages (default: --messages)
  --dim D                 dimensions of every vector (default 1536)
  --queries Q             top-10 searches, each backend (default 100)
  --maintained M          messages added with the HNSW index maintained (default 2000)
  --singles S             sequential single puts, and puts per concurrent client (default 200)
  --clients C             concurrent clients, each with its own connection (default 4; 0: skip)
  --ef-search E           both stores' HNSW shortlist, hnsw.ef_search (default: each one's own:
                          40 for both, pgvector's)
  --skip-langgraph        no LangGraph, no Python, no PyPI";

/// Messages per batched add, on every backend, as the issue asks.
const BATCH: usize = 1_000;
/// Results per recall.
const TOP_K: usize = 10;
/// The vectors' seed: every run stores the same data.
const SEED: u64 = 13;
/// About how many messages share a cluster centre.
const CLUSTER_SIZE: usize = 50;
/// The spread of a message around its centre (relative to the centre's unit length).
const SPREAD: f32 = 0.6;
/// The LangGraph packages, pinned so that runs compare like with like.
const LANGGRAPH_PACKAGES: [&str; 2] = [
    "langgraph-checkpoint-postgres==3.2.0",
    "psycopg[binary]==3.3.9",
];
/// Issue 13's targets (2 cores): batched messages/s into PostgreSQL,
const TARGET_BATCHED: f64 = 50_000.0;
/// recall p99 in ms at [`TARGET_RECALL_AT`] messages,
const TARGET_RECALL_P99_MS: f64 = 20.0;
/// with at least this recall@10,
const TARGET_RECALL_AT_10: f64 = 0.95;
/// the size those two are stated at,
const TARGET_RECALL_AT: usize = 100_000;
/// and Mnemon's put and search rates over LangGraph's `PostgresStore`'s.
const TARGET_RATIO: f64 = 3.0;

#[derive(Debug, PartialEq)]
struct Params {
    messages: usize,
    /// LangGraph's bulk load (its first `langgraph_messages` messages).
    langgraph_messages: usize,
    dim: usize,
    queries: usize,
    maintained: usize,
    singles: usize,
    clients: usize,
    /// Both stores' `hnsw.ef_search`; `None`: each one's default.
    ef_search: Option<usize>,
    skip_langgraph: bool,
}

/// The arguments, or `None` for `--help`.
fn parse(args: &[String]) -> Result<Option<Params>> {
    let mut p = Params {
        messages: 20_000,
        langgraph_messages: 0,
        dim: 1_536,
        queries: 100,
        maintained: 2_000,
        singles: 200,
        clients: 4,
        ef_search: None,
        skip_langgraph: false,
    };
    let mut maintained_given = false;
    let mut langgraph_given = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<usize> {
            it.next()
                .with_context(|| format!("{name} needs a value; {USAGE}"))?
                .parse()
                .with_context(|| format!("{name} needs a whole number; {USAGE}"))
        };
        match a.as_str() {
            "--help" | "-h" => return Ok(None),
            "--messages" => p.messages = value("--messages")?,
            "--langgraph-messages" => {
                p.langgraph_messages = value("--langgraph-messages")?;
                langgraph_given = true;
            }
            "--dim" => p.dim = value("--dim")?,
            "--queries" => p.queries = value("--queries")?,
            "--maintained" => {
                p.maintained = value("--maintained")?;
                maintained_given = true;
            }
            "--singles" => p.singles = value("--singles")?,
            "--clients" => p.clients = value("--clients")?,
            "--ef-search" => p.ef_search = Some(value("--ef-search")?),
            "--skip-langgraph" => p.skip_langgraph = true,
            other => bail!("unknown argument {other:?}; {USAGE}"),
        }
    }
    if p.messages == 0 || p.dim == 0 || p.queries == 0 || p.singles == 0 {
        bail!("--messages, --dim, --queries and --singles must be at least 1; {USAGE}");
    }
    if !langgraph_given {
        p.langgraph_messages = p.messages;
    }
    if p.langgraph_messages == 0 || p.langgraph_messages > p.messages {
        bail!(
            "--langgraph-messages takes LangGraph's share of the generated messages: from 1 to \
             --messages ({}); {USAGE}",
            p.messages
        );
    }
    if !maintained_given {
        // The default shrinks with a small load: the maintained adds reuse its vectors.
        p.maintained = p.maintained.min(p.langgraph_messages);
    }
    if p.maintained > p.langgraph_messages {
        bail!(
            "--maintained reuses the bulk load's vectors: at most --messages and \
             --langgraph-messages; {USAGE}"
        );
    }
    Ok(Some(p))
}

/// Runs the benchmark. `args` are the words after `bench stores`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let Some(params) = parse(args)? else {
        println!("{USAGE}");
        return Ok(());
    };
    if cargo::rerun_bench_in_release("stores", args)? {
        return Ok(());
    }
    let dir = cargo::workspace_root().join("target/bench-stores");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let clock = Instant::now();
    let result = measure(&params, &dir);
    // The vectors and databases are large: never leave them behind.
    let removed = std::fs::remove_dir_all(&dir);
    let report = result?;
    removed.with_context(|| format!("removing {}", dir.display()))?;
    report.print(&params);
    println!(
        "(the measurements took {:.1} min)",
        clock.elapsed().as_secs_f64() / 60.0
    );
    Ok(())
}

/// The seeded data set: `messages` and `queries` are row-major `dim`-wide unit vectors.
struct Data {
    dim: usize,
    messages: Vec<f32>,
    queries: Vec<f32>,
}

impl Data {
    fn generate(p: &Params) -> Data {
        let mut rng = ChaCha8Rng::seed_from_u64(SEED);
        let clusters = p.messages.div_ceil(CLUSTER_SIZE).max(1);
        let centres: Vec<Vec<f32>> = (0..clusters)
            .map(|_| unit(gaussian(&mut rng, p.dim, 1.0)))
            .collect();
        let near = |centre: &[f32], rng: &mut ChaCha8Rng| -> Vec<f32> {
            let noise = gaussian(rng, p.dim, SPREAD);
            unit(centre.iter().zip(noise).map(|(c, n)| c + n).collect())
        };
        let mut messages = Vec::with_capacity(p.messages * p.dim);
        for i in 0..p.messages {
            messages.extend(near(&centres[i % clusters], &mut rng));
        }
        let mut queries = Vec::with_capacity(p.queries * p.dim);
        for _ in 0..p.queries {
            let c = rng.random_range(0..clusters);
            queries.extend(near(&centres[c], &mut rng));
        }
        Data {
            dim: p.dim,
            messages,
            queries,
        }
    }

    fn message(&self, i: usize) -> &[f32] {
        &self.messages[i * self.dim..(i + 1) * self.dim]
    }

    fn query(&self, q: usize) -> &[f32] {
        &self.queries[q * self.dim..(q + 1) * self.dim]
    }
}

/// `dim` normal samples of standard deviation `scale / sqrt(dim)` (Box–Muller): a vector of
/// about length `scale`.
fn gaussian(rng: &mut ChaCha8Rng, dim: usize, scale: f32) -> Vec<f32> {
    let sd = scale / (dim as f32).sqrt();
    (0..dim)
        .map(|_| {
            let u1: f32 = rng.random_range(f32::EPSILON..1.0);
            let u2: f32 = rng.random();
            sd * (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
        })
        .collect()
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// Message `i` as the stores take it; `id` is `m<i>` whatever thread it goes to, so that
/// recall results name the vector they hold.
fn message(data: &Data, i: usize, embedding: bool) -> MsgInput {
    let mut msg = json!({
        "id": format!("m{i}"),
        "name": "bench",
        "role": "user",
        "content": format!("message {i} of the stores benchmark"),
    });
    if embedding {
        msg["embedding"] = json!(data.message(i));
    }
    msg.into()
}

/// Adds messages `range` in batches of [`BATCH`]; returns the time spent in `add` only (the
/// messages are built outside the clock). `after_first` runs once, after the first batch.
fn add_batches(
    memory: &dyn Memory,
    data: &Data,
    range: std::ops::Range<usize>,
    embedding: bool,
    mut after_first: impl FnMut() -> Result<()>,
) -> Result<Duration> {
    let mut spent = Duration::ZERO;
    let mut first = true;
    let mut start = range.start;
    while start < range.end {
        let end = (start + BATCH).min(range.end);
        let batch: Vec<MsgInput> = (start..end).map(|i| message(data, i, embedding)).collect();
        let clock = Instant::now();
        memory.add(batch).context("adding a batch of messages")?;
        spent += clock.elapsed();
        if first {
            after_first()?;
            first = false;
        }
        start = end;
    }
    Ok(spent)
}

/// Operations per second: `count` operations in `spent`.
fn rate(count: usize, spent: Duration) -> f64 {
    count as f64 / spent.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// How many times `mnemon`'s rate `langgraph`'s is (above 1: Mnemon is faster); `None` unless
/// both were measured and are positive.
fn ratio(mnemon: Option<f64>, langgraph: Option<f64>) -> Option<f64> {
    match (mnemon, langgraph) {
        (Some(m), Some(l)) if m > 0.0 && l > 0.0 && m.is_finite() && l.is_finite() => Some(m / l),
        _ => None,
    }
}

/// p50 and p99 in milliseconds (nearest rank).
fn percentiles(mut samples: Vec<Duration>) -> Latency {
    samples.sort();
    let at = |p: f64| {
        let rank = ((p / 100.0) * (samples.len().saturating_sub(1)) as f64).round() as usize;
        samples
            .get(rank.min(samples.len().saturating_sub(1)))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    };
    (at(50.0), at(99.0))
}

/// p50 and p99 of some latencies, in milliseconds.
type Latency = (f64, f64);

/// The durations of one operation run sequentially by one client: its rate (operations over
/// the time spent in them) and its latency percentiles, the same way for every backend.
#[derive(Debug, Clone, Default)]
struct Sampled(Vec<Duration>);

impl Sampled {
    fn rate(&self) -> f64 {
        rate(self.0.len(), self.0.iter().sum())
    }

    fn latency(&self) -> Latency {
        percentiles(self.0.clone())
    }

    /// From seconds as LangGraph's script reports them.
    fn from_seconds(seconds: &[f64]) -> Result<Sampled> {
        seconds
            .iter()
            .map(|&s| Duration::try_from_secs_f64(s).map_err(|e| anyhow!("a timing of {s} s: {e}")))
            .collect::<Result<_>>()
            .map(Sampled)
    }
}

/// Operations done by concurrent clients over the wall time from the moment every client was
/// connected to the moment the last one finished.
#[derive(Debug, Clone, Copy)]
struct Throughput {
    ops: usize,
    wall: Duration,
}

impl Throughput {
    fn rate(&self) -> f64 {
        rate(self.ops, self.wall)
    }
}

/// `singles` durable single-message adds (with embeddings) to `memory`.
fn single_adds(memory: &dyn Memory, data: &Data, singles: usize) -> Result<Sampled> {
    let count = data.messages.len() / data.dim;
    let mut samples = Vec::with_capacity(singles);
    for s in 0..singles {
        let msg = message(data, s % count, true);
        let clock = Instant::now();
        memory.add(vec![msg]).context("adding one message")?;
        samples.push(clock.elapsed());
    }
    Ok(Sampled(samples))
}

/// `singles` durable single-asset puts to `store`.
fn single_puts(store: &dyn AssetStore, singles: usize) -> Result<Sampled> {
    let mut samples = Vec::with_capacity(singles);
    for s in 0..singles {
        let asset = Asset::new(json!({"bench": "stores", "n": s, "text": "a small asset"}))
            .with_id(format!("bench-{s}"));
        let clock = Instant::now();
        store.put(&asset).context("putting one asset")?;
        samples.push(clock.elapsed());
    }
    Ok(Sampled(samples))
}

/// The recall options of every search: top [`TOP_K`] by cosine.
fn top_k() -> RetrieveOptions {
    RetrieveOptions {
        top_k: Some(TOP_K),
        preserve_order: false,
        ..RetrieveOptions::default()
    }
}

/// Top-[`TOP_K`] recalls of every query, sequentially: their durations and the ids found per
/// query.
fn recalls(memory: &dyn Memory, data: &Data) -> Result<(Sampled, Vec<Vec<String>>)> {
    let options = top_k();
    let mut samples = Vec::new();
    let mut found = Vec::new();
    for q in 0..data.queries.len() / data.dim {
        let query = RetrievalQuery::Vector(data.query(q).to_vec());
        let clock = Instant::now();
        let hits = memory
            .retrieve_by_embedding(query, &options, None)
            .context("recalling by embedding")?;
        samples.push(clock.elapsed());
        found.push(hits.iter().map(|h| h.message.id().to_owned()).collect());
    }
    Ok((Sampled(samples), found))
}

/// The exact top `k` of every query among the first `n` messages, by brute force: cosine in
/// `f64` (as the stores' exact scoring, so that a near tie at the `k`th place is decided as they
/// decide it; ties to the lower index). The reference of every recall@k.
fn exact_top_k(data: &Data, n: usize, k: usize) -> Vec<Vec<String>> {
    let norms: Vec<f64> = (0..n)
        .map(|i| dot(data.message(i), data.message(i)).sqrt())
        .collect();
    (0..data.queries.len() / data.dim)
        .map(|q| {
            let query = data.query(q);
            let query_norm = dot(query, query).sqrt();
            let mut best: Vec<(f64, usize)> = Vec::with_capacity(k + 1);
            for (i, norm) in norms.iter().enumerate() {
                let score = dot(query, data.message(i)) / (query_norm * norm);
                if best.len() < k || best.last().is_some_and(|&(worst, _)| score > worst) {
                    let at = best.partition_point(|&(s, _)| s >= score);
                    best.insert(at, (score, i));
                    best.truncate(k);
                }
            }
            best.iter().map(|&(_, i)| format!("m{i}")).collect()
        })
        .collect()
}

/// The dot product in `f64`, in eight independent lanes so that the compiler vectorises it.
fn dot(a: &[f32], b: &[f32]) -> f64 {
    let mut lanes = [0f64; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f64 = a8
        .remainder()
        .iter()
        .zip(b8.remainder())
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    for (x, y) in a8.zip(b8) {
        for lane in 0..8 {
            lanes[lane] += f64::from(x[lane]) * f64::from(y[lane]);
        }
    }
    lanes.iter().sum::<f64>() + tail
}

/// The mean share of the exact top-k that `found` holds (a result longer than its exact
/// top-k would be credited for guesses: counted only up to that length).
fn recall_at_k(found: &[Vec<String>], exact: &[Vec<String>]) -> f64 {
    let mut hits = 0usize;
    let mut wanted = 0usize;
    for (f, e) in found.iter().zip(exact) {
        let f = &f[..f.len().min(e.len())];
        wanted += e.len();
        hits += e.iter().filter(|id| f.contains(id)).count();
    }
    hits as f64 / wanted.max(1) as f64
}

/// The settings of the benchmark's server for a bulk load of `messages` vectors of `dim`
/// dimensions, sized as a real server for that data would be (one copy of the vectors is
/// `messages × dim × 4` bytes; each store keeps a copy in its table and one in its HNSW index):
///
/// - `shared_buffers`: twice a copy (a table's vectors and their index stay in the buffer
///   cache), between 128 MB and 4 GB;
/// - `maintenance_work_mem`: 1.5 copies and 64 MB, at most 4 GB, so that an HNSW index is built
///   in memory (pgvector builds on disk, much slower, once its graph outgrows it);
/// - `effective_cache_size`: four copies, between 1 GB and 16 GB (the planner's estimate of
///   the cache; this host has 24 GB);
/// - `max_wal_size`: four copies, between 1 GB and 16 GB, so that a bulk load is not one
///   checkpoint after another.
///
/// Durability stays the harness's (`fsync` and `synchronous_commit` on).
fn server_settings(messages: usize, dim: usize) -> Vec<(&'static str, String)> {
    const MB: u64 = 1 << 20;
    let copy = (messages as u64)
        .saturating_mul(dim as u64)
        .saturating_mul(4);
    let mb = |bytes: u64, least: u64, most: u64| format!("{}MB", (bytes / MB).clamp(least, most));
    vec![
        ("shared_buffers", mb(copy.saturating_mul(2), 128, 4096)),
        (
            "maintenance_work_mem",
            mb(copy.saturating_mul(3) / 2 + 64 * MB, 64, 4096),
        ),
        (
            "effective_cache_size",
            mb(copy.saturating_mul(4), 1024, 16384),
        ),
        ("max_wal_size", mb(copy.saturating_mul(4), 1024, 16384)),
    ]
}

/// The server settings the report prints, as the server reports them.
const SHOWN_SETTINGS: [&str; 8] = [
    "shared_buffers",
    "maintenance_work_mem",
    "effective_cache_size",
    "max_wal_size",
    "max_parallel_maintenance_workers",
    "work_mem",
    "fsync",
    "synchronous_commit",
];

/// One column's figures (`None`: not measured there).
#[derive(Debug, Default)]
struct Figures {
    /// The bulk load's size: what the searches run over.
    bulk: usize,
    adds_plain: Option<f64>,
    adds_embedded: Option<f64>,
    index_build: Option<Duration>,
    adds_maintained: Option<f64>,
    /// Mnemon: the maintained adds over the time until the background indexer had moved all
    /// of them into the HNSW index (acknowledged adds, then the store's indexer, watched); LangGraph's adds are
    /// indexed when acknowledged, so its figure is `adds_maintained`.
    maintained_indexed: Option<f64>,
    message_puts: Option<Sampled>,
    /// As `maintained_indexed`, for the single puts.
    message_puts_indexed: Option<f64>,
    asset_puts: Option<Sampled>,
    searches: Option<Sampled>,
    recall_at_10: Option<f64>,
    concurrent_puts: Option<Throughput>,
    /// As `maintained_indexed`, for the concurrent puts (wall time until every client's puts
    /// were indexed).
    concurrent_puts_indexed: Option<Throughput>,
    concurrent_searches: Option<Throughput>,
}

impl Figures {
    /// A rate of puts counted until indexed: Mnemon's own figure when the run has one, else
    /// (LangGraph, SQLite) the acknowledged rate, whose puts are indexed when acknowledged.
    fn indexed(own: Option<f64>, acknowledged: Option<f64>) -> Option<f64> {
        own.or(acknowledged)
    }
}

#[derive(Debug)]
struct Report {
    sqlite: Figures,
    postgres: Figures,
    langgraph: Option<Figures>,
    /// The server's settings ([`SHOWN_SETTINGS`]) as it reports them.
    settings: Vec<(String, String)>,
    /// Mnemon's `hnsw_min_messages` for the run.
    hnsw_min_messages: usize,
    /// Mnemon's `hnsw_ef_search` for the run.
    hnsw_ef_search: usize,
    /// Whether the planner used the HNSW index before and after `ANALYZE`.
    planned: (bool, bool),
}

fn measure(p: &Params, dir: &Path) -> Result<Report> {
    let clock = Instant::now();
    let data = Data::generate(p);
    eprintln!(
        "generated {} messages and {} queries of {} dimensions in {:.1} s",
        p.messages,
        p.queries,
        p.dim,
        clock.elapsed().as_secs_f64()
    );
    let clock = Instant::now();
    let exact = exact_top_k(&data, p.messages, TOP_K);
    let exact_langgraph = if p.langgraph_messages == p.messages {
        exact.clone()
    } else {
        exact_top_k(&data, p.langgraph_messages, TOP_K)
    };
    eprintln!(
        "exact top {TOP_K} by brute force in {:.1} s",
        clock.elapsed().as_secs_f64()
    );
    let all = 0..p.messages;

    eprintln!("SQLite ...");
    let mut sqlite = Figures {
        bulk: p.messages,
        ..Figures::default()
    };
    let store = SqliteMemoryStore::open(dir.join("memory.sqlite"), Default::default())
        .context("opening the SQLite memory store")?;
    let plain = store.memory(Scope::session("plain"))?;
    sqlite.adds_plain = Some(rate(
        p.messages,
        add_batches(&plain, &data, all.clone(), false, || Ok(()))?,
    ));
    let bulk = store.memory(Scope::session("bulk"))?;
    sqlite.adds_embedded = Some(rate(
        p.messages,
        add_batches(&bulk, &data, all.clone(), true, || Ok(()))?,
    ));
    let single = store.memory(Scope::session("single"))?;
    sqlite.message_puts = Some(single_adds(&single, &data, p.singles)?);
    let assets = SqliteAssetStore::open(dir.join("assets.sqlite"))
        .context("opening the SQLite asset store")?;
    sqlite.asset_puts = Some(single_puts(&assets, p.singles)?);
    let (searches, found) = recalls(&bulk, &data)?;
    sqlite.searches = Some(searches);
    sqlite.recall_at_10 = Some(recall_at_k(&found, &exact));
    drop((plain, bulk, single, store, assets));

    eprintln!("PostgreSQL: starting the server ...");
    let server = PgServer::start_with_settings(server_settings(p.messages, p.dim))
        .context("starting PostgreSQL (see docs/postgres.md)")?;
    let url = server
        .fresh_database("bench_stores")
        .context("creating the benchmark database")?;
    let database = url.rsplit('/').next().unwrap_or_default().to_owned();
    let mut admin = server.connect(&database)?;
    let mut settings = Vec::new();
    for name in SHOWN_SETTINGS {
        let value: String = admin.query_one(&format!("SHOW {name}"), &[])?.get(0);
        settings.push((name.to_owned(), value));
    }
    let mut postgres = Figures {
        bulk: p.messages,
        ..Figures::default()
    };
    let defaults = PostgresMemoryOptions::default();
    // The HNSW path from the default size on, or from the whole bulk load when a small run
    // stores fewer: the bench measures that path.
    let options = PostgresMemoryOptions {
        hnsw_min_messages: defaults.hnsw_min_messages.min(p.messages),
        hnsw_ef_search: p.ef_search.unwrap_or(defaults.hnsw_ef_search),
        ..defaults
    };
    let store = PostgresMemoryStore::open(&url, options.clone())
        .context("opening the PostgreSQL memory store")?;
    if !matches!(store.vector_mode(), VectorMode::Pgvector { .. }) {
        bail!(
            "the server has no pgvector ({:?}): run `cargo xtask postgres install`",
            store.vector_mode()
        );
    }
    eprintln!("PostgreSQL: adds ...");
    let plain = store.memory(Scope::session("plain"))?;
    postgres.adds_plain = Some(rate(
        p.messages,
        add_batches(&plain, &data, all.clone(), false, || Ok(()))?,
    ));
    // The store creates the HNSW index of a dimension after the first write of it (and then
    // remembers it exists); the bulk load drops it after that first batch and rebuilds it
    // from its own definition afterwards, which is what building the index costs.
    let index = format!("memory_messages_hnsw_{}", p.dim);
    let mut definition = None;
    let bulk = store.memory(Scope::session("bulk"))?;
    let spent = add_batches(&bulk, &data, all.clone(), true, || {
        let row = admin
            .query_opt(
                "SELECT indexdef FROM pg_indexes WHERE indexname = $1",
                &[&index],
            )?
            .with_context(|| {
                format!("the store created no index {index}: has its name changed?")
            })?;
        definition = Some(row.get::<_, String>(0));
        admin.batch_execute(&format!("DROP INDEX {index}"))?;
        Ok(())
    })?;
    // The store wrote the batches after the first outside the (dropped) index, for its
    // background indexer: they are moved in before the build, and that time counts as the
    // load's.
    let clock = Instant::now();
    wait_indexed(&store).context("moving the bulk load's rows in")?;
    let spent = spent + clock.elapsed();
    postgres.adds_embedded = Some(rate(p.messages, spent));
    let definition = definition.context("no batch was added")?;
    eprintln!("PostgreSQL: building the HNSW index ...");
    let clock = Instant::now();
    admin.batch_execute(&definition)?;
    postgres.index_build = Some(clock.elapsed());
    // The store's HNSW query uses the index only when the planner's statistics are current
    // (docs of `mnemon_memory`'s PostgreSQL module): say whether it would before and after the
    // ANALYZE that autovacuum would run, and measure after it.
    let planned_before = plan_uses_index(&mut admin, &data, &index)?;
    admin.batch_execute("ANALYZE memory_messages, memory_threads")?;
    let planned_after = plan_uses_index(&mut admin, &data, &index)?;
    eprintln!("PostgreSQL: adds with the index maintained ...");
    let maintained = store.memory(Scope::session("maintained"))?;
    let spent = add_batches(&maintained, &data, 0..p.maintained, true, || Ok(()))?;
    postgres.adds_maintained = Some(rate(p.maintained, spent));
    let clock = Instant::now();
    wait_indexed(&store).context("indexing the maintained adds")?;
    let catch_up = clock.elapsed();
    eprintln!(
        "PostgreSQL: the maintained adds were indexed {:.1} s after the last was acknowledged",
        catch_up.as_secs_f64()
    );
    postgres.maintained_indexed = Some(rate(p.maintained, spent + catch_up));
    let single = store.memory(Scope::session("single"))?;
    let puts = single_adds(&single, &data, p.singles)?;
    let clock = Instant::now();
    wait_indexed(&store).context("indexing the single puts")?;
    let catch_up = clock.elapsed();
    postgres.message_puts_indexed =
        Some(rate(p.singles, puts.0.iter().sum::<Duration>() + catch_up));
    postgres.message_puts = Some(puts);
    let assets = PostgresAssetStore::open(&url, PostgresAssetOptions::default())
        .context("opening the PostgreSQL asset store")?;
    postgres.asset_puts = Some(single_puts(&assets, p.singles)?);
    eprintln!("PostgreSQL: searches ...");
    // Through a store and handle of their own, as a server's request reads (a fresh handle
    // per request): the writer's handle would re-score from its mirror of the thread, which
    // no other process has, and read no embedding from the database.
    let reader = PostgresMemoryStore::open(
        &url,
        PostgresMemoryOptions {
            // Nothing for it to move; its start-up look would overlap the first searches.
            background_indexing: false,
            ..options.clone()
        },
    )
    .context("opening a second PostgreSQL memory store")?;
    let fresh_bulk = reader.memory(Scope::session("bulk"))?;
    let before = reader.index_recalls();
    let (searches, found) = recalls(&fresh_bulk, &data)?;
    let through_index = reader.index_recalls() - before;
    if through_index != p.queries as u64 {
        bail!(
            "only {through_index} of {} recalls went through the HNSW index",
            p.queries
        );
    }
    postgres.searches = Some(searches);
    postgres.recall_at_10 = Some(recall_at_k(&found, &exact));
    drop((
        plain, bulk, maintained, single, store, assets, fresh_bulk, reader,
    ));
    if p.clients > 0 {
        eprintln!("PostgreSQL: {} concurrent clients ...", p.clients);
        let (puts, indexed, searches) = concurrent_postgres(&url, &options, &data, p)?;
        postgres.concurrent_puts = Some(puts);
        postgres.concurrent_puts_indexed = Some(indexed);
        postgres.concurrent_searches = Some(searches);
    }
    // Mnemon's leftovers (dead row versions of the moved rows, dirty buffers, WAL) must not
    // be cleaned up during LangGraph's phases, on the same two cores: vacuumed, checkpointed
    // and waited for here, after every Mnemon phase.
    settle(&mut admin).context("settling the server after Mnemon's phases")?;
    drop(admin);

    let langgraph = if p.skip_langgraph {
        None
    } else {
        Some(langgraph(p, dir, &data, &server, &exact_langgraph)?)
    };
    Ok(Report {
        sqlite,
        postgres,
        langgraph,
        settings,
        hnsw_min_messages: options.hnsw_min_messages,
        hnsw_ef_search: options.hnsw_ef_search,
        planned: (planned_before, planned_after),
    })
}

/// `p.clients` threads, each with a store of its own (one connection, and its background
/// indexer's): each puts `p.singles` messages with embeddings one at a time into a thread of its
/// own, then waits until the stores' indexers have indexed them, then, once every client has, recalls
/// every query over the bulk thread. The messages and memory handles are made before the clock
/// starts, as LangGraph's clients connect before theirs. Returns the acknowledged puts, the
/// puts until indexed, and the searches.
fn concurrent_postgres(
    url: &str,
    options: &PostgresMemoryOptions,
    data: &Data,
    p: &Params,
) -> Result<(Throughput, Throughput, Throughput)> {
    let connected = Barrier::new(p.clients + 1);
    let put_done = Barrier::new(p.clients + 1);
    let indexed_done = Barrier::new(p.clients + 1);
    let query_options = top_k();
    std::thread::scope(|scope| {
        let clients: Vec<_> = (0..p.clients)
            .map(|c| {
                let (connected, put_done, indexed_done, query_options) =
                    (&connected, &put_done, &indexed_done, &query_options);
                scope.spawn(move || -> Result<u64> {
                    // Every client reaches both barriers whatever fails, so none waits forever.
                    let opened = (|| -> Result<_> {
                        let store = PostgresMemoryStore::open(
                            url,
                            PostgresMemoryOptions {
                                pool_size: 1,
                                ..options.clone()
                            },
                        )?;
                        let own = store.memory(Scope::session(format!("concurrent-{c}")))?;
                        let bulk = store.memory(Scope::session("bulk"))?;
                        let messages: Vec<MsgInput> = (0..p.singles)
                            .map(|i| message(data, (c * p.singles + i) % p.messages, true))
                            .collect();
                        Ok((store, own, bulk, messages))
                    })();
                    connected.wait();
                    let put = match opened {
                        Ok((store, own, bulk, messages)) => messages
                            .into_iter()
                            .try_for_each(|m| own.add(vec![m]).map(drop))
                            .map(|()| (store, bulk))
                            .context("a concurrent put"),
                        Err(error) => Err(error),
                    };
                    put_done.wait();
                    let indexed = put.and_then(|(store, bulk)| {
                        wait_indexed(&store).context("indexing a client's puts")?;
                        Ok((store, bulk))
                    });
                    indexed_done.wait();
                    let (store, bulk) = indexed?;
                    for q in 0..p.queries {
                        let query = RetrievalQuery::Vector(data.query(q).to_vec());
                        bulk.retrieve_by_embedding(query, query_options, None)
                            .context("a concurrent recall")?;
                    }
                    Ok(store.index_recalls())
                })
            })
            .collect();
        connected.wait();
        let clock = Instant::now();
        put_done.wait();
        let put_wall = clock.elapsed();
        indexed_done.wait();
        let indexed_wall = clock.elapsed();
        let clock = Instant::now();
        let mut through_index = 0;
        for client in clients {
            through_index += client
                .join()
                .map_err(|_| anyhow!("a concurrent client panicked"))??;
        }
        let search_wall = clock.elapsed();
        let searches = (p.clients * p.queries) as u64;
        if through_index != searches {
            bail!(
                "only {through_index} of {searches} concurrent recalls went through the HNSW index"
            );
        }
        Ok((
            Throughput {
                ops: p.clients * p.singles,
                wall: put_wall,
            },
            Throughput {
                ops: p.clients * p.singles,
                wall: indexed_wall,
            },
            Throughput {
                ops: p.clients * p.queries,
                wall: search_wall,
            },
        ))
    })
}

/// Waits until no message of `store`'s namespace waits for the HNSW index, moving none itself:
/// "until indexed" is then what the store's own background indexer delivers (`flush_index`
/// would move rows on this thread too, a second mover beside the indexer).
fn wait_indexed(store: &PostgresMemoryStore) -> Result<()> {
    let started = Instant::now();
    let (mut least, mut since, mut said) = (u64::MAX, Instant::now(), Instant::now());
    loop {
        let pending = store.pending_index()?;
        if pending == 0 {
            return Ok(());
        }
        if pending < least {
            (least, since) = (pending, Instant::now());
        }
        if since.elapsed() > Duration::from_secs(120) {
            bail!(
                "{pending} messages have waited for the HNSW index for 2 minutes without one \
                 being moved: is the store's background indexer failing? (its warnings are in \
                 the log with RUST_LOG=warn)"
            );
        }
        if said.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "PostgreSQL: {pending} messages wait for the HNSW index ({:.0} s)",
                started.elapsed().as_secs_f64()
            );
            said = Instant::now();
        }
        // Each look counts the namespace's pending rows: seldom enough not to slow the
        // indexer it waits for (20 looks a second at most).
        std::thread::sleep(Duration::from_millis(if pending > 1_000 {
            200
        } else {
            50
        }));
    }
}

/// Vacuums and checkpoints the Mnemon database and waits (at most 2 minutes) until no
/// autovacuum worker runs on the server.
fn settle(admin: &mut postgres::Client) -> Result<()> {
    // Separate queries: several statements in one query string are one transaction block,
    // where VACUUM cannot run.
    admin.batch_execute("VACUUM (ANALYZE)")?;
    admin.batch_execute("CHECKPOINT")?;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120) {
        let workers: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'",
                &[],
            )?
            .get(0);
        if workers == 0 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("PostgreSQL: autovacuum still runs after 2 minutes; going on with LangGraph");
    Ok(())
}

/// Whether the planner answers the store's HNSW shortlist query (its shape in
/// crates/mnemon-memory/src/postgres.rs, for the first query vector over the bulk thread) with
/// the index `index`.
fn plan_uses_index(admin: &mut postgres::Client, data: &Data, index: &str) -> Result<bool> {
    let dim = data.dim;
    let vector: Vec<String> = data.query(0).iter().map(f32::to_string).collect();
    let plan = admin.query(
        &format!(
            "EXPLAIN SELECT m.seq, m.embedding FROM memory_messages m
             WHERE m.thread_id = (SELECT thread_id FROM memory_threads WHERE session_id = 'bulk')
               AND m.embedding_dim = {dim}
             ORDER BY m.embedding_v::vector({dim}) <=> '[{}]'::vector({dim})
             LIMIT 200",
            vector.join(",")
        ),
        &[],
    )?;
    Ok(plan
        .iter()
        .filter_map(|row| row.try_get::<_, String>(0).ok())
        .any(|line| line.contains(index)))
}

/// Runs xtask/bench/langgraph_store.py on a database of its own on `server`: its first
/// `p.langgraph_messages` messages; `exact` is their exact top 10 per query.
fn langgraph(
    p: &Params,
    dir: &Path,
    data: &Data,
    server: &PgServer,
    exact: &[Vec<String>],
) -> Result<Figures> {
    let python = langgraph_venv()?;
    let messages = dir.join("messages.f32");
    let queries = dir.join("queries.f32");
    write_f32(&messages, &data.messages[..p.langgraph_messages * p.dim])?;
    write_f32(&queries, &data.queries)?;
    let url = server
        .fresh_database("bench_langgraph")
        .context("creating the LangGraph database")?;
    if let Some(ef) = p.ef_search {
        // LangGraph sets no `hnsw.ef_search` (it searches with pgvector's default, 40):
        // every connection to its database takes the run's value instead, like for like.
        let mut admin = postgres::Client::connect(&url, postgres::NoTls)
            .context("connecting to the LangGraph database")?;
        admin
            .batch_execute(&format!(
                "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET hnsw.ef_search = {ef}', \
                 current_database()); END $$"
            ))
            .context("setting hnsw.ef_search for LangGraph's connections")?;
    }
    let script = cargo::workspace_root().join("xtask/bench/langgraph_store.py");
    let config = json!({
        "url": url,
        "messages_file": messages,
        "queries_file": queries,
        "count": p.langgraph_messages,
        "query_count": p.queries,
        "dim": p.dim,
        "batch": BATCH,
        "maintained": p.maintained,
        "singles": p.singles,
        "clients": p.clients,
        "top_k": TOP_K,
    });
    eprintln!("LangGraph PostgresStore ...");
    // Its progress lines go to the terminal; stdout is the JSON report.
    let output = Command::new(&python)
        .arg(&script)
        .arg(config.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}): see its output above",
            script.display(),
            output.status
        );
    }
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("{} printed no JSON report", script.display()))?;
    langgraph_figures(&report, p, exact)
        .with_context(|| format!("reading the report of {}", script.display()))
}

/// LangGraph's figures from its script's report, computed as the Mnemon side's.
fn langgraph_figures(
    report: &serde_json::Value,
    p: &Params,
    exact: &[Vec<String>],
) -> Result<Figures> {
    let seconds = |key: &str| -> Result<Duration> {
        let s = report[key]
            .as_f64()
            .with_context(|| format!("no number {key}"))?;
        Duration::try_from_secs_f64(s).map_err(|e| anyhow!("{key} = {s}: {e}"))
    };
    let samples = |key: &str| -> Result<Sampled> {
        let values: Vec<f64> = report[key]
            .as_array()
            .with_context(|| format!("no list {key}"))?
            .iter()
            .map(|v| v.as_f64().with_context(|| format!("{key} holds {v}")))
            .collect::<Result<_>>()?;
        Sampled::from_seconds(&values)
    };
    let count = |key: &str| -> Result<usize> {
        report[key]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .with_context(|| format!("no count {key}"))
    };
    let found: Vec<Vec<String>> = report["results"]
        .as_array()
        .context("no results")?
        .iter()
        .map(|hits| {
            hits.as_array()
                .map(|ids| {
                    ids.iter()
                        .filter_map(|id| id.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect();
    let (concurrent_puts, concurrent_searches) = if p.clients > 0 {
        (
            Some(Throughput {
                ops: count("concurrent_puts")?,
                wall: seconds("concurrent_put_wall_seconds")?,
            }),
            Some(Throughput {
                ops: count("concurrent_searches")?,
                wall: seconds("concurrent_search_wall_seconds")?,
            }),
        )
    } else {
        (None, None)
    };
    Ok(Figures {
        bulk: p.langgraph_messages,
        adds_embedded: Some(rate(p.langgraph_messages, seconds("bulk_seconds")?)),
        index_build: Some(seconds("index_build_seconds")?),
        adds_maintained: Some(rate(p.maintained, seconds("maintained_seconds")?)),
        message_puts: Some(samples("single_seconds")?),
        searches: Some(samples("search_seconds")?),
        recall_at_10: Some(recall_at_k(&found, exact)),
        concurrent_puts,
        concurrent_searches,
        ..Figures::default()
    })
}

/// The virtual environment's python under `target/langgraph-venv`, created and filled from
/// PyPI on first use.
fn langgraph_venv() -> Result<PathBuf> {
    let venv = cargo::workspace_root().join("target/langgraph-venv");
    let python = venv.join("bin/python");
    let installed = Command::new(&python)
        .args(["-c", "import langgraph.store.postgres, psycopg"])
        .output()
        .is_ok_and(|o| o.status.success());
    if installed {
        return Ok(python);
    }
    eprintln!(
        "creating {} (PyPI: {})",
        venv.display(),
        LANGGRAPH_PACKAGES.join(", ")
    );
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .context("running python3 -m venv (install python3 and python3-venv)")?;
    if !status.success() {
        bail!("python3 -m venv {} failed ({status})", venv.display());
    }
    let status = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet"])
        .args(LANGGRAPH_PACKAGES)
        .status()
        .context("running pip in the LangGraph virtual environment")?;
    if !status.success() {
        bail!(
            "pip install {} failed ({status}); or pass --skip-langgraph",
            LANGGRAPH_PACKAGES.join(" ")
        );
    }
    Ok(python)
}

fn write_f32(path: &Path, values: &[f32]) -> Result<()> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::new(file);
    for v in values {
        out.write_all(&v.to_le_bytes())?;
    }
    out.flush()
        .with_context(|| format!("writing {}", path.display()))
}

/// A figure in a cell: `–` when not measured.
fn cell<T>(value: Option<T>, show: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "–".to_owned(), show)
}

/// A whole number with thousands separators: 12,345.
pub(crate) fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}

/// `met` or `UNMET`.
pub(crate) fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "UNMET" }
}

/// One row of the table: a label, the SQLite, PostgreSQL and LangGraph cells, and Mnemon
/// PostgreSQL's ratio to LangGraph (above 1: Mnemon is faster).
struct Row {
    label: String,
    cells: [String; 3],
    ratio: Option<f64>,
}

impl Report {
    /// The table's rows.
    fn rows(&self, p: &Params) -> Vec<Row> {
        let none = Figures::default();
        let lg = self.langgraph.as_ref().unwrap_or(&none);
        let cols = [&self.sqlite, &self.postgres, lg];
        let rates = |f: fn(&Figures) -> Option<f64>| -> ([String; 3], Option<f64>) {
            (
                cols.map(|c| cell(f(c), thousands)),
                ratio(f(&self.postgres), f(lg)),
            )
        };
        let pair = |v: Option<Latency>| cell(v, |(a, b)| format!("{a:.2} / {b:.2}"));
        let mut rows = Vec::new();
        let mut push = |label: String, (cells, ratio): ([String; 3], Option<f64>)| {
            rows.push(Row {
                label,
                cells,
                ratio,
            });
        };
        push(
            "messages in the bulk load (what is searched)".to_owned(),
            (
                [
                    thousands(self.sqlite.bulk as f64),
                    thousands(self.postgres.bulk as f64),
                    cell(self.langgraph.as_ref(), |f| thousands(f.bulk as f64)),
                ],
                None,
            ),
        );
        push(
            "batched adds/s, no embeddings".to_owned(),
            rates(|f| f.adds_plain),
        );
        push(
            "batched adds/s, embeddings, no index (bulk load)".to_owned(),
            rates(|f| f.adds_embedded),
        );
        push(
            "HNSW index build (s)".to_owned(),
            (
                cols.map(|c| cell(c.index_build, |d| format!("{:.1}", d.as_secs_f64()))),
                // As a rate (builds per second), so that above 1 still means Mnemon is faster.
                ratio(
                    self.postgres.index_build.map(|d| 1.0 / d.as_secs_f64()),
                    lg.index_build.map(|d| 1.0 / d.as_secs_f64()),
                ),
            ),
        );
        push(
            format!(
                "batched puts/s, embeddings, HNSW maintained ({} more)",
                p.maintained
            ),
            rates(|f| f.adds_maintained),
        );
        push(
            "  the same until indexed (Mnemon: + background catch-up)".to_owned(),
            rates(|f| Figures::indexed(f.maintained_indexed, f.adds_maintained)),
        );
        push(
            "single durable puts/s (message + embedding; 1 client)".to_owned(),
            rates(|f| f.message_puts.as_ref().map(Sampled::rate)),
        );
        push(
            "  the same until indexed (Mnemon: + background catch-up)".to_owned(),
            rates(|f| {
                Figures::indexed(
                    f.message_puts_indexed,
                    f.message_puts.as_ref().map(Sampled::rate),
                )
            }),
        );
        push(
            "  its latency p50 / p99 (ms)".to_owned(),
            (
                cols.map(|c| pair(c.message_puts.as_ref().map(Sampled::latency))),
                None,
            ),
        );
        push(
            "single durable asset put p50 / p99 (ms)".to_owned(),
            (
                cols.map(|c| pair(c.asset_puts.as_ref().map(Sampled::latency))),
                None,
            ),
        );
        push(
            format!("searches/s, top-{TOP_K} (1 client)"),
            rates(|f| f.searches.as_ref().map(Sampled::rate)),
        );
        push(
            format!("  search top-{TOP_K} p50 / p99 (ms)"),
            (
                cols.map(|c| pair(c.searches.as_ref().map(Sampled::latency))),
                None,
            ),
        );
        push(
            format!("  recall@{TOP_K} against exact"),
            (
                cols.map(|c| cell(c.recall_at_10, |r| format!("{r:.3}"))),
                None,
            ),
        );
        if p.clients > 0 {
            push(
                format!("concurrent single puts/s ({} clients)", p.clients),
                rates(|f| f.concurrent_puts.map(|t| t.rate())),
            );
            push(
                "  the same until indexed (Mnemon: + background catch-up)".to_owned(),
                rates(|f| {
                    Figures::indexed(
                        f.concurrent_puts_indexed.map(|t| t.rate()),
                        f.concurrent_puts.map(|t| t.rate()),
                    )
                }),
            );
            push(
                format!("concurrent searches/s ({} clients)", p.clients),
                rates(|f| f.concurrent_searches.map(|t| t.rate())),
            );
        }
        rows
    }

    /// Issue 13's targets, each with the figures it is judged on and whether they meet it.
    fn targets(&self) -> Vec<String> {
        let pg = &self.postgres;
        let mut lines = Vec::new();
        let batched: Vec<String> = [
            ("no embeddings", pg.adds_plain),
            ("embeddings, no index", pg.adds_embedded),
            ("embeddings, HNSW maintained", pg.adds_maintained),
        ]
        .iter()
        .filter_map(|(what, v)| {
            v.map(|v| format!("{what} {}/s {}", thousands(v), verdict(v >= TARGET_BATCHED)))
        })
        .collect();
        lines.push(format!(
            "≥ {} messages/s batched into PostgreSQL: {}",
            thousands(TARGET_BATCHED),
            batched.join("; ")
        ));
        if let (Some(searches), Some(recall)) = (&pg.searches, pg.recall_at_10) {
            let (_, p99) = searches.latency();
            let met = p99 <= TARGET_RECALL_P99_MS && recall >= TARGET_RECALL_AT_10;
            let judged = if pg.bulk == TARGET_RECALL_AT {
                verdict(met).to_owned()
            } else {
                format!(
                    "not judged: measured at {} messages, the target is stated at {} (it would \
                     be {} at this size)",
                    thousands(pg.bulk as f64),
                    thousands(TARGET_RECALL_AT as f64),
                    verdict(met)
                )
            };
            lines.push(format!(
                "recall p99 ≤ {TARGET_RECALL_P99_MS} ms with recall@{TOP_K} ≥ \
                 {TARGET_RECALL_AT_10} at {} messages: p99 {p99:.2} ms, recall@{TOP_K} \
                 {recall:.3} {judged}",
                thousands(TARGET_RECALL_AT as f64),
            ));
        }
        if let Some(lg) = &self.langgraph {
            let sizes = if lg.bulk == pg.bulk {
                String::new()
            } else {
                format!(
                    " (Mnemon over {} messages, LangGraph over {}: not the same size)",
                    thousands(pg.bulk as f64),
                    thousands(lg.bulk as f64)
                )
            };
            let judged = |rows: &[(&str, Option<f64>, Option<f64>)]| -> String {
                rows.iter()
                    .filter_map(|(what, m, l)| {
                        ratio(*m, *l)
                            .map(|r| format!("{what} {r:.2}× {}", verdict(r >= TARGET_RATIO)))
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            lines.push(format!(
                "≥ {TARGET_RATIO}× LangGraph's put rate: {}{sizes}",
                judged(&[
                    (
                        "single durable puts",
                        pg.message_puts.as_ref().map(Sampled::rate),
                        lg.message_puts.as_ref().map(Sampled::rate),
                    ),
                    (
                        "single durable puts until indexed",
                        pg.message_puts_indexed,
                        lg.message_puts.as_ref().map(Sampled::rate),
                    ),
                    (
                        "batched, HNSW maintained",
                        pg.adds_maintained,
                        lg.adds_maintained
                    ),
                    (
                        "batched, HNSW maintained, until indexed",
                        pg.maintained_indexed,
                        lg.adds_maintained
                    ),
                    ("batched, bulk load", pg.adds_embedded, lg.adds_embedded),
                    (
                        "concurrent single puts",
                        pg.concurrent_puts.map(|t| t.rate()),
                        lg.concurrent_puts.map(|t| t.rate()),
                    ),
                    (
                        "concurrent single puts until indexed",
                        pg.concurrent_puts_indexed.map(|t| t.rate()),
                        lg.concurrent_puts.map(|t| t.rate()),
                    ),
                ])
            ));
            lines.push(format!(
                "≥ {TARGET_RATIO}× LangGraph's search rate: {}{sizes}",
                judged(&[
                    (
                        "sequential searches",
                        pg.searches.as_ref().map(Sampled::rate),
                        lg.searches.as_ref().map(Sampled::rate),
                    ),
                    (
                        "concurrent searches",
                        pg.concurrent_searches.map(|t| t.rate()),
                        lg.concurrent_searches.map(|t| t.rate()),
                    ),
                ])
            ));
        }
        lines
    }

    fn print(&self, p: &Params) {
        println!(
            "\nstores: {} messages of {} dimensions (LangGraph: {}), {} queries, batches of \
             {BATCH}, {} single puts, {} concurrent clients; Mnemon's HNSW path from {} messages, \
             hnsw.ef_search {} (LangGraph: {})",
            thousands(p.messages as f64),
            p.dim,
            if self.langgraph.is_some() {
                thousands(p.langgraph_messages as f64)
            } else {
                "skipped".to_owned()
            },
            p.queries,
            p.singles,
            p.clients,
            thousands(self.hnsw_min_messages as f64),
            self.hnsw_ef_search,
            p.ef_search
                .map_or_else(|| "pgvector's default, 40".to_owned(), |ef| ef.to_string())
        );
        let settings: Vec<String> = self
            .settings
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        println!("PostgreSQL server (both stores): {}", settings.join(" "));
        let rows = self.rows(p);
        let headers = [
            "SQLite (exact)",
            "Mnemon PostgreSQL (HNSW)",
            "LangGraph PostgresStore",
            "Mnemon / LangGraph",
        ];
        let width = rows
            .iter()
            .map(|r| r.label.chars().count())
            .max()
            .unwrap_or(0);
        println!(
            "| {:width$} | {} | {} | {} | {} |",
            "operation", headers[0], headers[1], headers[2], headers[3]
        );
        println!("|{}|---:|---:|---:|---:|", "-".repeat(width + 2));
        for row in &rows {
            println!(
                "| {:width$} | {} | {} | {} | {} |",
                row.label,
                row.cells[0],
                row.cells[1],
                row.cells[2],
                cell(row.ratio, |r| format!("{r:.2}×"))
            );
        }
        println!(
            "Rates: operations over the time spent in them (1 client) or over the wall time of \
             all clients (concurrent), computed the same way for every column; the ratio is \
             Mnemon PostgreSQL's rate over LangGraph's (for the index build, LangGraph's time \
             over Mnemon's): above 1, Mnemon is faster."
        );
        let yes = |b: bool| if b { "yes" } else { "no" };
        println!(
            "PostgreSQL planner uses the HNSW index for the store's recall query: before ANALYZE \
             {}, after ANALYZE (the searches above) {}",
            yes(self.planned.0),
            yes(self.planned.1)
        );
        if self.langgraph.is_none() {
            println!("(LangGraph skipped: --skip-langgraph)");
        }
        println!("issue 13's targets:");
        for line in self.targets() {
            println!("- {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &str) -> Vec<String> {
        words.split_whitespace().map(str::to_owned).collect()
    }

    fn parsed(words: &str) -> Params {
        match parse(&args(words)) {
            Ok(Some(p)) => p,
            other => panic!("{words:?}: {other:?}"),
        }
    }

    #[test]
    fn recall_counts_the_exact_ids_found() {
        let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let exact = vec![ids(&["a", "b"]), ids(&["c", "d"])];
        let found = vec![ids(&["b", "x"]), ids(&["c", "d"])];
        assert!((recall_at_k(&found, &exact) - 0.75).abs() < 1e-12);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples = (1..=100).map(Duration::from_millis).collect();
        let (p50, p99) = percentiles(samples);
        assert!(
            (p50 - 51.0).abs() < 1e-9 && (p99 - 99.0).abs() < 1e-9,
            "{p50} {p99}"
        );
    }

    #[test]
    fn rates_are_operations_over_the_time_spent() {
        assert!((rate(500, Duration::from_millis(250)) - 2_000.0).abs() < 1e-9);
        // Sequential: 4 operations of 1, 2, 3 and 4 ms are 4 in 10 ms.
        let sampled = Sampled((1..=4).map(Duration::from_millis).collect());
        assert!((sampled.rate() - 400.0).abs() < 1e-9, "{}", sampled.rate());
        // LangGraph's seconds give the same rate as the same durations measured here.
        let from_python =
            Sampled::from_seconds(&[0.001, 0.002, 0.003, 0.004]).unwrap_or_else(|e| panic!("{e}"));
        assert!((from_python.rate() - sampled.rate()).abs() < 1e-6);
        assert!(Sampled::from_seconds(&[-1.0]).is_err());
        assert!(Sampled::from_seconds(&[f64::NAN]).is_err());
        let concurrent = Throughput {
            ops: 800,
            wall: Duration::from_secs(2),
        };
        assert!((concurrent.rate() - 400.0).abs() < 1e-9);
    }

    #[test]
    fn the_ratio_is_mnemon_over_langgraph_and_only_of_two_figures() {
        assert_eq!(ratio(Some(300.0), Some(100.0)), Some(3.0));
        assert_eq!(ratio(Some(50.0), Some(100.0)), Some(0.5));
        assert_eq!(ratio(None, Some(100.0)), None);
        assert_eq!(ratio(Some(100.0), None), None);
        assert_eq!(ratio(Some(100.0), Some(0.0)), None);
        assert_eq!(ratio(Some(f64::INFINITY), Some(1.0)), None);
    }

    #[test]
    fn arguments_parse_with_their_defaults() {
        let p = parsed("");
        assert_eq!(
            p,
            Params {
                messages: 20_000,
                langgraph_messages: 20_000,
                dim: 1_536,
                queries: 100,
                maintained: 2_000,
                singles: 200,
                clients: 4,
                ef_search: None,
                skip_langgraph: false,
            }
        );
        let p = parsed("--messages 100000 --langgraph-messages 20000 --clients 0 --skip-langgraph");
        assert_eq!(
            (
                p.messages,
                p.langgraph_messages,
                p.clients,
                p.skip_langgraph
            ),
            (100_000, 20_000, 0, true)
        );
        // The maintained adds reuse the smaller load's vectors.
        assert_eq!(parsed("--messages 1500").maintained, 1_500);
        assert_eq!(
            parsed("--messages 5000 --langgraph-messages 1200").maintained,
            1_200
        );
        assert!(matches!(parse(&args("--help")), Ok(None)));
    }

    #[test]
    fn bad_arguments_say_what_to_fix() {
        for (words, says) in [
            ("--messages", "needs a value"),
            ("--messages lots", "whole number"),
            ("--dim 0", "at least 1"),
            ("--langgraph-messages 30000", "--langgraph-messages"),
            ("--langgraph-messages 0", "--langgraph-messages"),
            ("--messages 1000 --maintained 2000", "--maintained"),
            ("--fast", "unknown argument"),
        ] {
            match parse(&args(words)) {
                Err(error) => assert!(error.to_string().contains(says), "{words}: {error}"),
                Ok(p) => panic!("{words:?} was accepted: {p:?}"),
            }
        }
    }

    #[test]
    fn server_settings_fit_the_data() {
        let at = |messages, dim| -> Vec<(&str, String)> { server_settings(messages, dim) };
        let get = |settings: &[(&str, String)], name: &str| {
            settings
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("no {name}"))
        };
        // 100,000 × 1,536 × 4 bytes = 585 MiB per copy.
        let big = at(100_000, 1_536);
        assert_eq!(get(&big, "shared_buffers"), "1171MB");
        assert_eq!(get(&big, "maintenance_work_mem"), "942MB");
        assert_eq!(get(&big, "effective_cache_size"), "2343MB");
        assert_eq!(get(&big, "max_wal_size"), "2343MB");
        // A small run keeps sensible floors; a huge one the ceilings.
        let small = at(2_000, 256);
        assert_eq!(get(&small, "shared_buffers"), "128MB");
        assert_eq!(get(&small, "maintenance_work_mem"), "66MB");
        assert_eq!(get(&small, "effective_cache_size"), "1024MB");
        let huge = at(10_000_000, 2_000);
        assert_eq!(get(&huge, "shared_buffers"), "4096MB");
        assert_eq!(get(&huge, "maintenance_work_mem"), "4096MB");
        assert_eq!(get(&huge, "max_wal_size"), "16384MB");
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1_000.0), "1,000");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(thousands(-12_345.0), "-12,345");
    }

    fn data(messages: usize, queries: usize, dim: usize) -> Data {
        Data::generate(&Params {
            queries,
            ..parsed(&format!("--messages {messages} --dim {dim}"))
        })
    }

    #[test]
    fn generated_vectors_are_unit_and_seeded() {
        let a = data(120, 5, 16);
        let b = data(120, 5, 16);
        assert_eq!(a.messages, b.messages);
        for i in 0..120 {
            let norm: f32 = a.message(i).iter().map(|x| x * x).sum();
            assert!((norm - 1.0).abs() < 1e-4, "message {i}: {norm}");
        }
    }

    #[test]
    fn exact_top_k_is_the_sorted_brute_force() {
        let d = data(300, 7, 19);
        let exact = exact_top_k(&d, 300, 10);
        assert_eq!(exact.len(), 7);
        for (q, ids) in exact.iter().enumerate() {
            let sum = |a: &[f32], b: &[f32]| -> f64 {
                a.iter()
                    .zip(b)
                    .map(|(x, y)| f64::from(*x) * f64::from(*y))
                    .sum()
            };
            let (query, norm) = (d.query(q), sum(d.query(q), d.query(q)).sqrt());
            let mut all: Vec<(f64, usize)> = (0..300)
                .map(|i| {
                    let m = d.message(i);
                    (sum(query, m) / (norm * sum(m, m).sqrt()), i)
                })
                .collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0));
            let want: Vec<String> = all[..10].iter().map(|(_, i)| format!("m{i}")).collect();
            assert_eq!(ids, &want, "query {q}");
        }
        // Over a prefix, only its messages.
        let prefix = exact_top_k(&d, 50, 10);
        assert!(
            prefix
                .iter()
                .flatten()
                .all(|id| id[1..].parse::<usize>().is_ok_and(|i| i < 50))
        );
        assert!((dot(&[1.0; 19], &[2.0; 19]) - 38.0).abs() < 1e-5);
    }

    fn figures(rate: f64, latency_ms: u64, bulk: usize) -> Figures {
        let samples = |ms| Sampled(vec![Duration::from_millis(ms); 10]);
        Figures {
            bulk,
            adds_plain: Some(rate * 100.0),
            adds_embedded: Some(rate),
            index_build: Some(Duration::from_secs(10)),
            adds_maintained: Some(rate),
            maintained_indexed: None,
            message_puts: Some(samples(latency_ms)),
            message_puts_indexed: None,
            asset_puts: None,
            searches: Some(samples(latency_ms)),
            recall_at_10: Some(0.96),
            concurrent_puts: Some(Throughput {
                ops: 100,
                wall: Duration::from_secs(1),
            }),
            concurrent_puts_indexed: None,
            concurrent_searches: None,
        }
    }

    #[test]
    fn targets_are_judged_on_the_figures() {
        let p = parsed("--messages 100000");
        let report = Report {
            sqlite: Figures::default(),
            // 600 messages/s batched, 2 ms puts and searches (500/s); until indexed, 300
            // batched messages/s and 250 single puts/s.
            postgres: Figures {
                maintained_indexed: Some(300.0),
                message_puts_indexed: Some(250.0),
                ..figures(600.0, 2, 100_000)
            },
            // 100 messages/s batched, 8 ms puts and searches (125/s).
            langgraph: Some(Figures {
                adds_plain: None,
                ..figures(100.0, 8, 100_000)
            }),
            settings: Vec::new(),
            hnsw_min_messages: 10_000,
            hnsw_ef_search: 80,
            planned: (true, true),
        };
        let targets = report.targets();
        assert_eq!(targets.len(), 4, "{targets:#?}");
        assert!(
            targets[0].contains("no embeddings 60,000/s met"),
            "{}",
            targets[0]
        );
        assert!(
            targets[0].contains("embeddings, no index 600/s UNMET"),
            "{}",
            targets[0]
        );
        assert!(
            targets[1].contains("p99 2.00 ms, recall@10 0.960 met")
                && !targets[1].contains("not judged"),
            "{}",
            targets[1]
        );
        assert!(
            targets[2].contains("single durable puts 4.00× met"),
            "{}",
            targets[2]
        );
        assert!(
            targets[2].contains("batched, HNSW maintained 6.00× met"),
            "{}",
            targets[2]
        );
        assert!(
            targets[2].contains("concurrent single puts 1.00× UNMET"),
            "{}",
            targets[2]
        );
        // Until indexed, against LangGraph's puts, indexed when acknowledged.
        assert!(
            targets[2].contains("batched, HNSW maintained, until indexed 3.00× met"),
            "{}",
            targets[2]
        );
        assert!(
            targets[2].contains("single durable puts until indexed 2.00× UNMET"),
            "{}",
            targets[2]
        );
        // Not measured (concurrent until indexed): not judged.
        assert!(
            !targets[2].contains("concurrent single puts until indexed"),
            "{}",
            targets[2]
        );
        assert!(
            targets[3].contains("sequential searches 4.00× met"),
            "{}",
            targets[3]
        );
        // Concurrent searches were not measured: not judged.
        assert!(!targets[3].contains("concurrent"), "{}", targets[3]);
        // The ratio column agrees with the targets.
        let rows = report.rows(&p);
        let row = |label: &str| {
            rows.iter()
                .find(|r| r.label.starts_with(label))
                .unwrap_or_else(|| panic!("no row {label}"))
        };
        assert_eq!(row("single durable puts/s").ratio, Some(4.0));
        assert_eq!(row("HNSW index build").ratio, Some(1.0));
        assert_eq!(row("batched adds/s, no embeddings").ratio, None);
    }

    #[test]
    fn targets_say_when_the_sizes_differ() {
        let p = parsed("--messages 20000 --langgraph-messages 5000");
        let report = Report {
            sqlite: Figures::default(),
            postgres: figures(600.0, 30, 20_000),
            langgraph: Some(figures(100.0, 8, 5_000)),
            settings: Vec::new(),
            hnsw_min_messages: 10_000,
            hnsw_ef_search: 80,
            planned: (true, true),
        };
        let targets = report.targets();
        assert!(
            targets[1].contains("not judged: measured at 20,000 messages")
                && targets[1].contains("would be UNMET"),
            "{}",
            targets[1]
        );
        assert!(
            targets[2].contains("LangGraph over 5,000: not the same size"),
            "{}",
            targets[2]
        );
        let rows = report.rows(&p);
        assert_eq!(rows[0].cells[1], "20,000");
        assert_eq!(rows[0].cells[2], "5,000");
    }
}
