//! `cargo xtask bench stores`: the durable stores side by side (issue 13, item 7): SQLite and
//! PostgreSQL (pgvector HNSW) in the same run, and LangGraph's `PostgresStore` on the same
//! PostgreSQL server.
//!
//! The bench starts its own server with the test harness (`mnemon_tests::postgres::PgServer`:
//! the binaries of `cargo xtask postgres install`, loopback only, as `nobody` under root; see
//! docs/postgres.md), generates `--messages` seeded, clustered unit vectors of `--dim`
//! dimensions (clusters of about 50, so that the ten nearest neighbours are meaningful) and
//! `--queries` query vectors near the cluster centres, then measures on each backend:
//!
//! - batched adds/s (batches of 1,000) of `--messages` messages without embeddings, and with;
//!   on PostgreSQL the bulk load with embeddings runs without the HNSW index (it is dropped
//!   after the first batch created it) and the index is then rebuilt from its own definition:
//!   that is the "index build" row;
//! - batched adds/s with embeddings while the HNSW index (now over every stored vector) is
//!   maintained: `--maintained` more messages in a thread of their own (PostgreSQL only);
//! - single durable writes (the default `Durability::Full`): one asset `put`, one message
//!   `add` with its embedding; p50 and p99 of `--singles` each;
//! - recall top-10 by cosine over the bulk thread, p50 and p99: exact on SQLite, through HNSW
//!   on PostgreSQL (the thread is above `hnsw_min_messages`), and the HNSW results' recall@10
//!   against SQLite's exact ones.
//!
//! Then, unless `--skip-langgraph`, xtask/bench/langgraph_store.py runs LangGraph's
//! `PostgresStore` (PyPI `langgraph-checkpoint-postgres`, in a virtual environment under
//! `target/langgraph-venv`) on a database of its own on the same server, with an embed function
//! that looks the same vectors up, an HNSW index of the same dimensions, and measures its
//! batched puts, single puts and searches the same way.
//!
//! Timings need an optimised build: a debug xtask re-runs itself with `cargo run --release`.
//! The machine is shared and noisy: run it more than once and report ranges.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
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

const USAGE: &str = "usage: cargo xtask bench stores [--messages N] [--dim D] [--queries Q] \
                     [--maintained M] [--singles S] [--skip-langgraph]";

/// Messages per batched add, as the issue asks.
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

struct Params {
    messages: usize,
    dim: usize,
    queries: usize,
    maintained: usize,
    singles: usize,
    skip_langgraph: bool,
}

fn parse(args: &[String]) -> Result<Params> {
    let mut p = Params {
        messages: 20_000,
        dim: 1_536,
        queries: 100,
        maintained: 2_000,
        singles: 200,
        skip_langgraph: false,
    };
    let mut maintained_given = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<usize> {
            it.next()
                .with_context(|| format!("{name} needs a value; {USAGE}"))?
                .parse()
                .with_context(|| format!("{name} needs a whole number; {USAGE}"))
        };
        match a.as_str() {
            "--messages" => p.messages = value("--messages")?,
            "--dim" => p.dim = value("--dim")?,
            "--queries" => p.queries = value("--queries")?,
            "--maintained" => {
                p.maintained = value("--maintained")?;
                maintained_given = true;
            }
            "--singles" => p.singles = value("--singles")?,
            "--skip-langgraph" => p.skip_langgraph = true,
            other => bail!("unknown argument {other:?}; {USAGE}"),
        }
    }
    if p.messages == 0 || p.dim == 0 || p.queries == 0 || p.singles == 0 {
        bail!("--messages, --dim, --queries and --singles must be at least 1; {USAGE}");
    }
    if !maintained_given {
        // The default shrinks with a small --messages: the maintained adds reuse its vectors.
        p.maintained = p.maintained.min(p.messages);
    }
    if p.maintained > p.messages {
        bail!("--maintained reuses the messages' vectors: at most --messages; {USAGE}");
    }
    Ok(p)
}

/// Runs the benchmark. `args` are the words after `bench stores`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let params = parse(args)?;
    if cfg!(debug_assertions) {
        let status = cargo::command(&cargo::workspace_root())
            .args([
                "run",
                "--release",
                "--quiet",
                "--package",
                "xtask",
                "--",
                "bench",
                "stores",
            ])
            .args(args)
            .status()
            .context("running the release build of xtask")?;
        if !status.success() {
            bail!("the release benchmark failed ({status})");
        }
        return Ok(());
    }
    let dir = cargo::workspace_root().join("target/bench-stores");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = measure(&params, &dir);
    // The vectors and databases are large: never leave them behind.
    let removed = std::fs::remove_dir_all(&dir);
    let report = result?;
    removed.with_context(|| format!("removing {}", dir.display()))?;
    report.print(&params);
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

fn rate(count: usize, spent: Duration) -> f64 {
    count as f64 / spent.as_secs_f64().max(f64::MIN_POSITIVE)
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

/// `singles` durable single-message adds (with embeddings) to `memory`.
fn single_adds(memory: &dyn Memory, data: &Data, singles: usize) -> Result<(f64, f64)> {
    let count = data.messages.len() / data.dim;
    let mut samples = Vec::with_capacity(singles);
    for s in 0..singles {
        let msg = message(data, s % count, true);
        let clock = Instant::now();
        memory.add(vec![msg]).context("adding one message")?;
        samples.push(clock.elapsed());
    }
    Ok(percentiles(samples))
}

/// `singles` durable single-asset puts to `store`.
fn single_puts(store: &dyn AssetStore, singles: usize) -> Result<(f64, f64)> {
    let mut samples = Vec::with_capacity(singles);
    for s in 0..singles {
        let asset = Asset::new(json!({"bench": "stores", "n": s, "text": "a small asset"}))
            .with_id(format!("bench-{s}"));
        let clock = Instant::now();
        store.put(&asset).context("putting one asset")?;
        samples.push(clock.elapsed());
    }
    Ok(percentiles(samples))
}

/// p50 and p99 of some latencies, in milliseconds.
type Latency = (f64, f64);

/// Top-[`TOP_K`] recalls of every query: their latency and the ids found per query.
fn recalls(memory: &dyn Memory, data: &Data) -> Result<(Latency, Vec<Vec<String>>)> {
    let options = RetrieveOptions {
        top_k: Some(TOP_K),
        preserve_order: false,
        ..RetrieveOptions::default()
    };
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
    Ok((percentiles(samples), found))
}

/// The mean share of the exact top-k that `found` holds.
fn recall_at_k(found: &[Vec<String>], exact: &[Vec<String>]) -> f64 {
    let mut hits = 0usize;
    let mut wanted = 0usize;
    for (f, e) in found.iter().zip(exact) {
        wanted += e.len();
        hits += e.iter().filter(|id| f.contains(id)).count();
    }
    hits as f64 / wanted.max(1) as f64
}

/// One backend's figures (`None`: not applicable).
#[derive(Default)]
struct Figures {
    adds_plain: Option<f64>,
    adds_embedded: Option<f64>,
    adds_maintained: Option<f64>,
    asset_put: Option<(f64, f64)>,
    message_put: Option<(f64, f64)>,
    recall: Option<(f64, f64)>,
    recall_at_10: Option<f64>,
    index_build: Option<Duration>,
}

struct Report {
    sqlite: Figures,
    postgres: Figures,
    langgraph: Option<Figures>,
    maintenance_work_mem: String,
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
    let all = 0..p.messages;

    eprintln!("SQLite ...");
    let mut sqlite = Figures::default();
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
    sqlite.message_put = Some(single_adds(&single, &data, p.singles)?);
    let assets = SqliteAssetStore::open(dir.join("assets.sqlite"))
        .context("opening the SQLite asset store")?;
    sqlite.asset_put = Some(single_puts(&assets, p.singles)?);
    let (latency, exact) = recalls(&bulk, &data)?;
    sqlite.recall = Some(latency);
    sqlite.recall_at_10 = Some(1.0);
    drop((plain, bulk, single, store, assets));

    eprintln!("PostgreSQL: starting the server ...");
    let server = PgServer::start().context("starting PostgreSQL (see docs/postgres.md)")?;
    let url = server
        .fresh_database("bench_stores")
        .context("creating the benchmark database")?;
    let database = url.rsplit('/').next().unwrap_or_default().to_owned();
    let mut admin = server.connect(&database)?;
    let maintenance_work_mem: String = admin.query_one("SHOW maintenance_work_mem", &[])?.get(0);
    let mut postgres = Figures::default();
    let store = PostgresMemoryStore::open(&url, PostgresMemoryOptions::default())
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
    postgres.adds_embedded = Some(rate(p.messages, spent));
    let definition = definition.context("no batch was added")?;
    eprintln!("PostgreSQL: building the HNSW index ...");
    let clock = Instant::now();
    admin.batch_execute(&definition)?;
    postgres.index_build = Some(clock.elapsed());
    eprintln!("PostgreSQL: adds with the index maintained ...");
    let maintained = store.memory(Scope::session("maintained"))?;
    postgres.adds_maintained = Some(rate(
        p.maintained,
        add_batches(&maintained, &data, 0..p.maintained, true, || Ok(()))?,
    ));
    let single = store.memory(Scope::session("single"))?;
    postgres.message_put = Some(single_adds(&single, &data, p.singles)?);
    let assets = PostgresAssetStore::open(&url, PostgresAssetOptions::default())
        .context("opening the PostgreSQL asset store")?;
    postgres.asset_put = Some(single_puts(&assets, p.singles)?);
    // The store's HNSW query uses the index only when the planner's statistics are current
    // (docs of `mnemon_memory`'s PostgreSQL module): say whether it would before and after the
    // ANALYZE that autovacuum would run, and measure after it.
    let planned_before = plan_uses_index(&mut admin, &data, &index)?;
    admin.batch_execute("ANALYZE memory_messages")?;
    let planned_after = plan_uses_index(&mut admin, &data, &index)?;
    eprintln!("PostgreSQL: recalls ...");
    let before = store.index_recalls();
    let (latency, found) = recalls(&bulk, &data)?;
    let through_index = store.index_recalls() - before;
    if through_index != p.queries as u64 {
        bail!(
            "only {through_index} of {} recalls went through the HNSW index: the bulk thread \
             must hold at least hnsw_min_messages (10,000 by default) messages",
            p.queries
        );
    }
    postgres.recall = Some(latency);
    postgres.recall_at_10 = Some(recall_at_k(&found, &exact));
    drop((plain, bulk, maintained, single, store, assets, admin));

    let langgraph = if p.skip_langgraph {
        None
    } else {
        Some(langgraph(p, dir, &data, &server, &exact)?)
    };
    Ok(Report {
        sqlite,
        postgres,
        langgraph,
        maintenance_work_mem,
        planned: (planned_before, planned_after),
    })
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

/// Runs xtask/bench/langgraph_store.py on a database of its own on `server`.
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
    write_f32(&messages, &data.messages)?;
    write_f32(&queries, &data.queries)?;
    let url = server
        .fresh_database("bench_langgraph")
        .context("creating the LangGraph database")?;
    let script = cargo::workspace_root().join("xtask/bench/langgraph_store.py");
    eprintln!("LangGraph PostgresStore ...");
    let output = Command::new(&python)
        .arg(&script)
        .arg(&url)
        .arg(&messages)
        .arg(&queries)
        .args([p.messages, p.queries, p.dim, BATCH, p.singles].map(|n| n.to_string()))
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}):\n{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("{} printed no JSON report", script.display()))?;
    let number = |key: &str| -> Result<f64> {
        report[key]
            .as_f64()
            .with_context(|| format!("{} reported no {key}", script.display()))
    };
    let found: Vec<Vec<String>> = report["results"]
        .as_array()
        .context("the LangGraph report has no results")?
        .iter()
        .map(|hits| {
            hits.as_array()
                .map(|ids| ids.iter().map(|id| format!("m{id}")).collect())
                .unwrap_or_default()
        })
        .collect();
    Ok(Figures {
        adds_maintained: Some(number("adds_per_s")?),
        message_put: Some((number("put_p50_ms")?, number("put_p99_ms")?)),
        recall: Some((number("search_p50_ms")?, number("search_p99_ms")?)),
        recall_at_10: Some(recall_at_k(&found, exact)),
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

impl Report {
    fn print(&self, p: &Params) {
        let none = Figures::default();
        let lg = self.langgraph.as_ref().unwrap_or(&none);
        let cols = [&self.sqlite, &self.postgres, lg];
        let count = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.0}"));
        let pair =
            |v: Option<(f64, f64)>| v.map_or("–".to_owned(), |(a, b)| format!("{a:.2} / {b:.2}"));
        let rows: Vec<(String, [String; 3])> = vec![
            (
                format!("batched adds/s, no embeddings ({})", p.messages),
                cols.map(|f| count(f.adds_plain)),
            ),
            (
                format!("batched adds/s, embeddings, no index ({})", p.messages),
                cols.map(|f| count(f.adds_embedded)),
            ),
            (
                format!(
                    "batched adds/s, embeddings, HNSW maintained (Mnemon {}, LangGraph {})",
                    p.maintained, p.messages
                ),
                cols.map(|f| count(f.adds_maintained)),
            ),
            (
                "HNSW index build (s)".to_owned(),
                cols.map(|f| {
                    f.index_build
                        .map_or("–".to_owned(), |d| format!("{:.1}", d.as_secs_f64()))
                }),
            ),
            (
                "single durable asset put p50 / p99 (ms)".to_owned(),
                cols.map(|f| pair(f.asset_put)),
            ),
            (
                "single durable message add p50 / p99 (ms)".to_owned(),
                cols.map(|f| pair(f.message_put)),
            ),
            (
                format!("recall top-{TOP_K} p50 / p99 (ms)"),
                cols.map(|f| pair(f.recall)),
            ),
            (
                format!("recall@{TOP_K} against exact"),
                cols.map(|f| f.recall_at_10.map_or("–".to_owned(), |r| format!("{r:.3}"))),
            ),
        ];
        println!(
            "\nstores: {} messages of {} dimensions, {} queries, batches of {BATCH}, \
             {} single writes; PostgreSQL maintenance_work_mem {}",
            p.messages, p.dim, p.queries, p.singles, self.maintenance_work_mem
        );
        let headers = [
            "SQLite (exact)",
            "PostgreSQL (HNSW)",
            "LangGraph PostgresStore",
        ];
        let width = rows
            .iter()
            .map(|(l, _)| l.chars().count())
            .max()
            .unwrap_or(0);
        println!(
            "| {:width$} | {} | {} | {} |",
            "operation", headers[0], headers[1], headers[2]
        );
        println!("|{}|---:|---:|---:|", "-".repeat(width + 2));
        for (label, values) in &rows {
            println!(
                "| {label:width$} | {} | {} | {} |",
                values[0], values[1], values[2]
            );
        }
        let yes = |b: bool| if b { "yes" } else { "no" };
        println!(
            "PostgreSQL planner uses the HNSW index for the store's recall query: before ANALYZE \
             {}, after ANALYZE (the recalls above) {}",
            yes(self.planned.0),
            yes(self.planned.1)
        );
        if self.langgraph.is_none() {
            println!("(LangGraph skipped: --skip-langgraph)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn generated_vectors_are_unit_and_seeded() {
        let p = parse(&[
            "--messages".into(),
            "120".into(),
            "--dim".into(),
            "16".into(),
        ])
        .expect("arguments");
        let a = Data::generate(&p);
        let b = Data::generate(&p);
        assert_eq!(a.messages, b.messages);
        for i in 0..120 {
            let norm: f32 = a.message(i).iter().map(|x| x * x).sum();
            assert!((norm - 1.0).abs() < 1e-4, "message {i}: {norm}");
        }
    }
}
