//! `cargo xtask bench host`: the library host's load benchmark (issue 5).
//!
//! Builds `mnemon` in release mode, then for the fixture library (60 bits) and a seeded
//! synthetic library (10,000 bits × 1536 dims by default) it starts `mnemon serve` on
//! 127.0.0.1 (port chosen by the OS), sends a bounded load of `count=5, count_type=bit` form
//! queries with random unit query vectors (20,000 requests over 8 keep-alive connections by
//! default, and never for more than two minutes), stops the server with SIGTERM, and reports
//! requests/s, p50/p99/max latency, errors, and the server's RSS after warm-up and after the run.
//!
//! The load generator runs in this process on one thread, so on a 2-core machine it competes
//! with the server for CPU; the figures are a lower bound on what the host does alone. Timings
//! need an optimised build: a debug xtask re-runs itself with `cargo run --release`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use mnemon_library::synthetic::{unit_vector, write_synthetic};
use mnemon_library::{DEFAULT_MODEL, encode_embedding};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::cargo;

const SEED: u64 = 42;
/// Distinct query bodies cycled through by the load.
const QUERY_VARIANTS: usize = 64;
const WARMUP_REQUESTS: usize = 500;
/// The load stops issuing requests after this long, whatever is left.
const TIME_LIMIT: Duration = Duration::from_secs(120);
const FIXTURE_TARGET_RPS: f64 = 5000.0;
const SYNTHETIC_TARGET_RPS: f64 = 300.0;

struct Params {
    requests: usize,
    connections: usize,
    bits: usize,
    dim: usize,
    fast: bool,
    /// Run only the case whose name starts with this (`fixture` or `synthetic`).
    only: Option<String>,
}

const USAGE: &str = "usage: cargo xtask bench host [--requests N] [--connections C] [--bits N] \
                     [--dim D] [--fast] [--only fixture|synthetic]";

fn parse(args: &[String]) -> Result<Params> {
    let mut p = Params {
        requests: 20_000,
        connections: 8,
        bits: 10_000,
        dim: 1536,
        fast: false,
        only: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<usize> {
            it.next()
                .with_context(|| format!("{name} needs a value"))?
                .parse()
                .with_context(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--requests" => p.requests = value("--requests")?.max(1),
            "--connections" => p.connections = value("--connections")?.clamp(1, 256),
            "--bits" => p.bits = value("--bits")?.max(1),
            "--dim" => p.dim = value("--dim")?.max(1),
            "--fast" => p.fast = true,
            "--only" => match it.next().map(String::as_str) {
                Some(case @ ("fixture" | "synthetic")) => p.only = Some(case.to_owned()),
                _ => bail!("--only takes fixture or synthetic; {USAGE}"),
            },
            other => bail!("unknown argument {other:?}; {USAGE}"),
        }
    }
    Ok(p)
}

/// Runs the benchmark. `args` are the words after `bench host`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let params = parse(args)?;
    let root = cargo::workspace_root();
    if cfg!(debug_assertions) {
        let status = cargo::command(&root)
            .args([
                "run",
                "--release",
                "--quiet",
                "--package",
                "xtask",
                "--",
                "bench",
                "host",
            ])
            .args(args)
            .status()
            .context("running the release build of xtask")?;
        if !status.success() {
            bail!("the release benchmark failed ({status})");
        }
        return Ok(());
    }
    cargo::run_in(
        &root,
        &["build", "--release", "--quiet", "--package", "mnemon"],
    )?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let binary = target.join("release").join("mnemon");

    let fixture = root.join("tests/fixtures/polymath/library.json");
    let synthetic = if params.only.as_deref() == Some("fixture") {
        PathBuf::new()
    } else {
        synthetic_library(&target, &params)?
    };
    let cases = [
        (
            "fixture library.json".to_owned(),
            fixture,
            1536,
            FIXTURE_TARGET_RPS,
        ),
        (
            format!("synthetic {} x {}", params.bits, params.dim),
            synthetic,
            params.dim,
            SYNTHETIC_TARGET_RPS,
        ),
    ];
    println!(
        "mnemon serve under load: {} requests over {} connections per library, \
         count=5 count_type=bit, form bodies, random unit query vectors{}",
        params.requests,
        params.connections,
        if params.fast { ", --fast" } else { "" }
    );
    let mut failed = false;
    for (name, path, dim, target_rps) in cases {
        if params
            .only
            .as_ref()
            .is_some_and(|only| !name.starts_with(only.as_str()))
        {
            continue;
        }
        let report = bench_library(&binary, &path, dim, &params)
            .with_context(|| format!("benchmarking {name}"))?;
        println!("\n{name} ({})", path.display());
        report.print(target_rps);
        failed |= report.errors > 0;
    }
    if failed {
        bail!("some requests failed");
    }
    Ok(())
}

/// Writes the synthetic library once; later runs reuse it.
fn synthetic_library(target: &Path, params: &Params) -> Result<PathBuf> {
    let dir = target.join("bench-host");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!(
        "synthetic-{}x{}-seed{SEED}.json",
        params.bits, params.dim
    ));
    if !path.is_file() {
        eprintln!("writing {} ...", path.display());
        let partial = path.with_extension("json.partial");
        let file = std::fs::File::create(&partial)
            .with_context(|| format!("creating {}", partial.display()))?;
        write_synthetic(
            std::io::BufWriter::new(file),
            DEFAULT_MODEL,
            params.bits,
            params.dim,
            SEED,
        )?;
        std::fs::rename(&partial, &path)?;
    }
    Ok(path)
}

struct Report {
    requests: usize,
    errors: usize,
    elapsed: Duration,
    latencies_us: Vec<u32>,
    rss_before_kb: u64,
    rss_after_kb: u64,
    hwm_kb: u64,
    logged_requests: usize,
    exit: String,
}

impl Report {
    fn print(&self, target_rps: f64) {
        let rps = self.requests as f64 / self.elapsed.as_secs_f64();
        let pct = |p: f64| -> f64 {
            let i = ((self.latencies_us.len() as f64 - 1.0) * p).round() as usize;
            self.latencies_us.get(i).copied().unwrap_or(0) as f64 / 1000.0
        };
        let verdict = if rps >= target_rps && self.errors == 0 {
            "meets"
        } else {
            "MISSES"
        };
        println!(
            "  {} requests in {:.2} s: {rps:.0} requests/s ({verdict} the target of {target_rps:.0}/s)",
            self.requests,
            self.elapsed.as_secs_f64()
        );
        println!(
            "  latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            pct(0.50),
            pct(0.99),
            pct(1.0)
        );
        println!(
            "  errors {}; access-log lines {}; server RSS {:.1} MB after warm-up, {:.1} MB after \
             the run (peak {:.1} MB); exit on SIGTERM: {}",
            self.errors,
            self.logged_requests,
            self.rss_before_kb as f64 / 1024.0,
            self.rss_after_kb as f64 / 1024.0,
            self.hwm_kb as f64 / 1024.0,
            self.exit
        );
    }
}

/// A running `mnemon serve`, killed if dropped early.
struct ServerProcess {
    child: Child,
    addr: SocketAddr,
    log_lines: Arc<AtomicUsize>,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(binary: &Path, library: &Path, fast: bool) -> Result<ServerProcess> {
    let mut cmd = Command::new(binary);
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--library"])
        .arg(library)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if fast {
        cmd.arg("--fast");
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let log_lines = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&log_lines);
    // Drains the log for the whole run: a full pipe would stall the server.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("serving on http://").nth(1) {
                let addr = rest.split('/').next().unwrap_or_default().to_owned();
                let _ = addr_tx.send(addr);
            } else if line.contains("mnemon_host::access") {
                counter.fetch_add(1, Ordering::Relaxed);
            } else if line.contains("ERROR") || line.contains("WARN") {
                eprintln!("server: {line}");
            }
        }
    });
    let addr = addr_rx
        .recv_timeout(Duration::from_secs(120))
        .context("the server did not report its address")?
        .parse()
        .context("the server logged an unparsable address")?;
    Ok(ServerProcess {
        child,
        addr,
        log_lines,
    })
}

/// A `/proc/<pid>/status` field in kB (Linux), or 0.
fn proc_status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Form bodies for `count=5, count_type=bit` queries with seeded random unit vectors.
fn query_bodies(dim: usize) -> Vec<String> {
    let mut rng = ChaCha8Rng::seed_from_u64(SEED + 1);
    (0..QUERY_VARIANTS)
        .map(|_| {
            let embedding = encode_embedding(&unit_vector(&mut rng, dim));
            form_urlencoded::Serializer::new(String::new())
                .append_pair("version", "1")
                .append_pair("query_embedding_model", DEFAULT_MODEL)
                .append_pair("query_embedding", &embedding)
                .append_pair("count", "5")
                .append_pair("count_type", "bit")
                .finish()
        })
        .collect()
}

fn bench_library(binary: &Path, library: &Path, dim: usize, params: &Params) -> Result<Report> {
    let mut server = start_server(binary, library, params.fast)?;
    let pid = server.child.id();
    let url = format!("http://{}/", server.addr);
    let bodies = Arc::new(query_bodies(dim));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(params.connections)
        .timeout(Duration::from_secs(30))
        .build()?;

    // Check one answer, then warm up.
    let first = runtime.block_on(async {
        let body = bodies.first().cloned().unwrap_or_default();
        let response = client
            .post(&url)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await?;
        anyhow::Ok((status, text))
    })?;
    let result: serde_json::Value = serde_json::from_str(&first.1)
        .with_context(|| format!("the first answer is not JSON: {}", first.1))?;
    let bits = result["bits"].as_array().map_or(0, Vec::len);
    if !first.0.is_success() || bits != 5 {
        bail!(
            "the first query returned {} with {bits} bits: {}",
            first.0,
            first.1
        );
    }
    let warmup = load(
        &runtime,
        &client,
        &url,
        &bodies,
        WARMUP_REQUESTS,
        params.connections,
    );
    if warmup.errors > 0 {
        bail!("{} of the warm-up requests failed", warmup.errors);
    }
    let rss_before_kb = proc_status_kb(pid, "VmRSS:");
    let outcome = load(
        &runtime,
        &client,
        &url,
        &bodies,
        params.requests,
        params.connections,
    );
    let rss_after_kb = proc_status_kb(pid, "VmRSS:");
    let hwm_kb = proc_status_kb(pid, "VmHWM:");
    drop(client);

    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -TERM {pid} failed");
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(code) = server.child.try_wait()? {
            break code.to_string();
        }
        if Instant::now() > deadline {
            break "still running 15 s after SIGTERM".to_owned();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Lines logged before the server exited have been read once the pipe closed.
    std::thread::sleep(Duration::from_millis(100));
    let logged = server.log_lines.load(Ordering::Relaxed);
    let mut latencies_us = outcome.latencies_us;
    latencies_us.sort_unstable();
    Ok(Report {
        requests: latencies_us.len() + outcome.errors,
        errors: outcome.errors,
        elapsed: outcome.elapsed,
        latencies_us,
        rss_before_kb,
        rss_after_kb,
        hwm_kb,
        logged_requests: logged,
        exit,
    })
}

struct LoadOutcome {
    latencies_us: Vec<u32>,
    errors: usize,
    elapsed: Duration,
}

/// Sends `total` requests from `connections` concurrent workers, each waiting for its answer
/// before sending the next (closed loop), and stops early at [`TIME_LIMIT`].
fn load(
    runtime: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    url: &str,
    bodies: &Arc<Vec<String>>,
    total: usize,
    connections: usize,
) -> LoadOutcome {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let results = runtime.block_on(async {
        let workers: Vec<_> = (0..connections)
            .map(|_| {
                let client = client.clone();
                let url = url.to_owned();
                let bodies = Arc::clone(bodies);
                let next = Arc::clone(&next);
                tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    let mut errors = 0usize;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= total || started.elapsed() > TIME_LIMIT {
                            break;
                        }
                        let body = bodies.get(i % bodies.len()).cloned().unwrap_or_default();
                        let sent = Instant::now();
                        let ok = match client
                            .post(&url)
                            .header("Content-Type", "application/x-www-form-urlencoded")
                            .body(body)
                            .send()
                            .await
                        {
                            Ok(response) => {
                                let success = response.status().is_success();
                                response.bytes().await.is_ok() && success
                            }
                            Err(_) => false,
                        };
                        if ok {
                            latencies.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        } else {
                            errors += 1;
                        }
                    }
                    (latencies, errors)
                })
            })
            .collect();
        let mut all = Vec::with_capacity(total);
        let mut errors = 0;
        for worker in workers {
            match worker.await {
                Ok((latencies, e)) => {
                    all.extend(latencies);
                    errors += e;
                }
                Err(_) => errors += 1,
            }
        }
        (all, errors)
    });
    LoadOutcome {
        latencies_us: results.0,
        errors: results.1,
        elapsed: started.elapsed(),
    }
}
