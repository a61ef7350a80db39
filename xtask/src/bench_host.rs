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

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use mnemon_library::synthetic::{unit_vector, write_synthetic};
use mnemon_library::{BLANK_LIBRARY_MODEL, encode_embedding};
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
    /// Run only the case whose name starts with this (`fixture` or `synthetic`), or `limits`:
    /// the memory and connection scenarios of issue 11 instead of the load.
    only: Option<String>,
    /// Measure this `mnemon` binary instead of the workspace's release build: an earlier
    /// build copied aside, for an A/B in runs close in time (the machine's speed drifts).
    mnemon: Option<PathBuf>,
    /// Serve the synthetic library through its ANN index (`mnemon library pack --index`, a
    /// hard link of the library in `bench-host/indexed/`, so the plain runs keep scanning).
    index: bool,
}

const USAGE: &str = "usage: cargo xtask bench host [--requests N] [--connections C] [--bits N] \
                     [--dim D] [--fast] [--index] [--only fixture|synthetic|limits] \
                     [--mnemon PATH]";

fn parse(args: &[String]) -> Result<Params> {
    let mut p = Params {
        requests: 20_000,
        connections: 8,
        bits: 10_000,
        dim: 1536,
        fast: false,
        only: None,
        mnemon: None,
        index: false,
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
            "--index" => p.index = true,
            "--mnemon" => {
                let path = it.next().context("--mnemon needs a value")?;
                p.mnemon = Some(PathBuf::from(path));
            }
            "--only" => match it.next().map(String::as_str) {
                Some(case @ ("fixture" | "synthetic" | "limits")) => p.only = Some(case.to_owned()),
                _ => bail!("--only takes fixture, synthetic or limits; {USAGE}"),
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
    if cargo::rerun_bench_in_release("host", args)? {
        return Ok(());
    }
    let binary = match &params.mnemon {
        Some(path) if path.is_file() => path.clone(),
        Some(path) => bail!("--mnemon {}: no such file", path.display()),
        None => cargo::release_mnemon()?,
    };
    let target = cargo::target_dir();

    let fixture = root.join("tests/fixtures/polymath/library.json");
    if params.only.as_deref() == Some("limits") {
        let synthetic = synthetic_library(&target, &params)?;
        return limits(&binary, &fixture, &synthetic);
    }
    let synthetic = if params.only.as_deref() == Some("fixture") {
        PathBuf::new()
    } else if params.index {
        indexed_library(&binary, &synthetic_library(&target, &params)?)?
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
         count=5 count_type=bit, form bodies, random unit query vectors{}{}",
        params.requests,
        params.connections,
        if params.fast { ", --fast" } else { "" },
        if params.index {
            ", the synthetic library through its ANN index"
        } else {
            ""
        }
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

/// The synthetic library at `library` hard-linked into `indexed/` beside it and packed there
/// with its ANN index (`mnemon library pack --index`, with a progress bar), once: the index of
/// 100,000 × 1,536 takes about 40 s to build. The library itself keeps no index, so runs
/// without `--index` still scan.
fn indexed_library(binary: &Path, library: &Path) -> Result<PathBuf> {
    let parent = library.parent().context("the library has no folder")?;
    let dir = parent.join("indexed");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = library
        .file_name()
        .context("the library has no file name")?;
    let linked = dir.join(name);
    let mut index = linked.clone().into_os_string();
    index.push(".ann");
    if !linked.is_file() {
        std::fs::hard_link(library, &linked)
            .or_else(|_| std::fs::copy(library, &linked).map(drop))
            .with_context(|| format!("linking {} into {}", library.display(), dir.display()))?;
    }
    if !Path::new(&index).is_file() {
        eprintln!("packing {} with its ANN index ...", linked.display());
        let status = Command::new(binary)
            .args(["library", "pack", "--index"])
            .arg(&linked)
            .status()
            .with_context(|| format!("running {} library pack", binary.display()))?;
        if !status.success() {
            bail!("mnemon library pack --index {} failed", linked.display());
        }
    }
    Ok(linked)
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
            BLANK_LIBRARY_MODEL,
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
    /// The server logged that queries search the library's ANN index.
    indexed: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(binary: &Path, library: &Path, fast: bool) -> Result<ServerProcess> {
    let extra: &[&str] = if fast { &["--fast"] } else { &[] };
    start_server_with(binary, library, extra, None)
}

/// Starts `mnemon serve` on 127.0.0.1 with `extra` arguments, under `ulimit -n fd_limit` when
/// one is given.
fn start_server_with(
    binary: &Path,
    library: &Path,
    extra: &[&str],
    fd_limit: Option<u32>,
) -> Result<ServerProcess> {
    let mut cmd = match fd_limit {
        Some(fds) => {
            let mut sh = Command::new("sh");
            sh.args(["-c", &format!("ulimit -n {fds} && exec \"$0\" \"$@\"")])
                .arg(binary);
            sh
        }
        None => Command::new(binary),
    };
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--library"])
        .arg(library)
        .args(extra)
        .env(
            "RUST_LOG",
            std::env::var("MNEMON_BENCH_SERVER_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let log_lines = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&log_lines);
    let indexed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let index_seen = Arc::clone(&indexed);
    let mut trace = std::env::var_os("MNEMON_BENCH_SERVER_TRACE")
        .and_then(|path| std::fs::File::create(path).ok());
    // Drains the log for the whole run: a full pipe would stall the server.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("serving on http://").nth(1) {
                let addr = rest.split('/').next().unwrap_or_default().to_owned();
                let _ = addr_tx.send(addr);
            } else if line.contains("mnemon_host::access") {
                counter.fetch_add(1, Ordering::Relaxed);
            } else if line.contains("queries search the library's ANN index") {
                index_seen.store(true, Ordering::Relaxed);
            } else if line.contains("ERROR") || line.contains("WARN") {
                eprintln!("server: {line}");
            } else if let Some(file) = &mut trace {
                // `MNEMON_BENCH_SERVER_TRACE` names a file for the server's other lines.
                let _ = writeln!(file, "{line}");
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
        indexed,
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
                .append_pair("query_embedding_model", BLANK_LIBRARY_MODEL)
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
    if params.index && !server.indexed.load(Ordering::Relaxed) {
        // The address line comes after the library is loaded, so the index line is in by now.
        bail!(
            "the server did not report searching {}'s ANN index",
            library.display()
        );
    }
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

/// Connections that each send a body of 2 MiB less a few bytes and hold it (issue 11, item 6).
const HELD_BODIES: usize = 600;
/// Idle sockets opened against a host limited to 1,024 file descriptors (issue 11, item 7).
const IDLE_SOCKETS: usize = 1100;
/// Concurrent `count: -1` queries (issue 11, item 6).
const BURST: usize = 16;

/// `--only limits`: the issue 11 scenarios, measured on the release build. Prints the server's
/// RSS peak and settled values, and `/healthz` latency with idle sockets open.
fn limits(binary: &Path, fixture: &Path, synthetic: &Path) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mb = |kb: u64| kb as f64 / 1024.0;

    // 1. Bodies held open.
    let server = start_server_with(binary, fixture, &[], None)?;
    let pid = server.child.id();
    let before = proc_status_kb(pid, "VmRSS:");
    let body_len = 2 * 1024 * 1024;
    let (held, sent_mb) = runtime.block_on(hold_bodies(server.addr, body_len - 8));
    std::thread::sleep(Duration::from_secs(1));
    let holding = proc_status_kb(pid, "VmRSS:");
    let peak = proc_status_kb(pid, "VmHWM:");
    drop(held);
    std::thread::sleep(Duration::from_secs(3));
    let after = proc_status_kb(pid, "VmRSS:");
    println!(
        "{HELD_BODIES} connections each sending {} bytes of a {body_len}-byte body and holding \
         ({sent_mb:.0} MB written): RSS {:.1} MB before, {:.1} MB while \
         held, peak {:.1} MB, {:.1} MB 3 s after they closed",
        body_len - 8,
        mb(before),
        mb(holding),
        mb(peak),
        mb(after)
    );
    drop(server);

    // 2. Idle sockets past a 1,024-descriptor limit.
    let server = start_server_with(binary, fixture, &[], Some(1024))?;
    let (idle, latencies) = runtime.block_on(idle_then_health(server.addr));
    let shown: Vec<String> = latencies
        .iter()
        .map(|l| match l {
            Some(d) => format!("{:.1} ms", d.as_secs_f64() * 1000.0),
            None => "timeout (10 s)".to_owned(),
        })
        .collect();
    println!(
        "{idle} idle sockets open, server under ulimit -n 1024: /healthz {}",
        shown.join(", ")
    );
    drop(server);

    // 3. Concurrent queries returning every bit, with the default result cap and without one.
    for extra in [&[][..], &["--max-result-bytes", "100000000000"][..]] {
        let server = start_server_with(binary, synthetic, extra, None)?;
        let pid = server.child.id();
        let before = proc_status_kb(pid, "VmRSS:");
        let statuses = burst(server.addr)?;
        let peak = proc_status_kb(pid, "VmHWM:");
        std::thread::sleep(Duration::from_secs(3));
        let idle = proc_status_kb(pid, "VmRSS:");
        println!(
            "{BURST} concurrent count=-1 queries on {} ({}): statuses {statuses:?}; RSS {:.1} MB \
             loaded, peak {:.1} MB, {:.1} MB idle 3 s later",
            synthetic.file_name().unwrap_or_default().to_string_lossy(),
            if extra.is_empty() {
                "default limits".to_owned()
            } else {
                extra.join(" ")
            },
            mb(before),
            mb(peak),
            mb(idle)
        );
    }
    Ok(())
}

/// Opens [`HELD_BODIES`] connections, each sending a `Content-Length: 2 MiB` head and `bytes`
/// bytes of body (for at most 20 s: a host that stops reading blocks the writes), and returns
/// the open connections and the megabytes written.
async fn hold_bodies(addr: SocketAddr, bytes: usize) -> (Vec<tokio::net::TcpStream>, f64) {
    use tokio::io::AsyncWriteExt;
    let tasks: Vec<_> = (0..HELD_BODIES)
        .map(|_| {
            tokio::spawn(async move {
                let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
                let head = format!(
                    "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\n\r\n",
                    2 * 1024 * 1024
                );
                stream.write_all(head.as_bytes()).await.ok()?;
                let chunk = vec![b' '; 64 * 1024];
                let mut sent = 0usize;
                let _ = tokio::time::timeout(Duration::from_secs(20), async {
                    while sent < bytes {
                        let n = (bytes - sent).min(chunk.len());
                        if stream.write_all(&chunk[..n]).await.is_err() {
                            break;
                        }
                        sent += n;
                    }
                })
                .await;
                Some((stream, sent))
            })
        })
        .collect();
    let mut held = Vec::new();
    let mut sent = 0usize;
    for task in tasks {
        if let Ok(Some((stream, n))) = task.await {
            held.push(stream);
            sent += n;
        }
    }
    (held, sent as f64 / 1e6)
}

/// Opens [`IDLE_SOCKETS`] idle connections, then times five `/healthz` requests on new ones.
async fn idle_then_health(addr: SocketAddr) -> (usize, Vec<Option<Duration>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut idle = Vec::new();
    for _ in 0..IDLE_SOCKETS {
        if let Ok(stream) = tokio::net::TcpStream::connect(addr).await {
            idle.push(stream);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut latencies = Vec::new();
    for _ in 0..5 {
        let asked = Instant::now();
        let answered = tokio::time::timeout(Duration::from_secs(10), async {
            let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await
                .ok()?;
            let mut response = Vec::new();
            stream.read_to_end(&mut response).await.ok()?;
            response.starts_with(b"HTTP/1.1 200").then_some(())
        })
        .await;
        latencies.push(matches!(answered, Ok(Some(()))).then(|| asked.elapsed()));
    }
    (idle.len(), latencies)
}

/// Sends [`BURST`] `count: -1` queries at once and returns their statuses (0: no answer).
fn burst(addr: SocketAddr) -> Result<Vec<u16>> {
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(300))
        .build()?;
    let url = format!("http://{addr}/");
    let body = serde_json::json!({"version": 1, "query_embedding_model": BLANK_LIBRARY_MODEL,
                                  "count": -1, "count_type": "bit"})
    .to_string();
    let statuses = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..BURST)
            .map(|_| {
                scope.spawn(|| {
                    client
                        .post(&url)
                        .header("Content-Type", "application/json")
                        .body(body.clone())
                        .send()
                        .and_then(|r| {
                            let status = r.status().as_u16();
                            r.bytes().map(|_| status)
                        })
                        .unwrap_or(0)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or(0))
            .collect::<Vec<u16>>()
    });
    Ok(statuses)
}
