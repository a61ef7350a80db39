//! `cargo xtask bench server`: the load benchmark of `mnemon serve` (issue 15, item 6;
//! docs/bench-server.md).
//!
//! Builds `mnemon` in release mode and starts the real server on 127.0.0.1 (a port the OS
//! picks), on SQLite (a fresh data directory) and on PostgreSQL (a server the test harness
//! starts, `mnemon_tests::postgres::PgServer`: the binaries of `cargo xtask postgres install`,
//! loopback only; docs/postgres.md), with `--embedding-model mnemon:hashing-v1-512`. Each server
//! is seeded through the REST API (`--sessions` sessions of `--messages` messages, embedded by a
//! first recall, and `--assets` assets), then loaded for `--seconds` per run by each count of
//! `--clients` keep-alive HTTP/1.1 connections, each sending its next request when the last was
//! answered (closed loop):
//!
//! - **resolves**: `GET /v1/resolve?reference=asset://…` only;
//! - **mix**: asset resolve, memory add (`POST /v1/memory/sessions/{s}/messages`, one message)
//!   and recall (`POST /v1/memory/sessions/{s}/search`, a text query, top 5) in the `--mix`
//!   proportions (default equal thirds), into the seeded sessions (which grow as the run adds).
//!
//! A closed loop at saturation measures the most the server answers, and its latency is then
//! mostly queueing (Little's law: with 64 clients, latency = 64 / rate). A latency target at a
//! given rate is measured open-loop: with `--paced R`, each mixed run is repeated with its
//! clients sending R requests/s in all on a fixed schedule (client `w` at `w / R` s, then every
//! `clients / R` s), and each request's latency counts from the time it was *scheduled*, so a
//! request held back by a slow answer on its connection is charged that wait too (no
//! coordinated omission).
//!
//! MCP, side by side on fresh stores: two clients, the official MCP TypeScript SDK's
//! (xtask/bench/mcp_calls.cjs, Node.js) and rmcp's (bench_server/mcp_rust.rs, one thread of
//! this process, so that a client's own per-call cost does not set the rate), each make
//! `--mcp-calls` adds and then as many searches against `mnemon serve`'s `/mcp` and `mnemon mcp`
//! over stdio (`remember`, `recall`), against the reference memory server
//! `@modelcontextprotocol/server-memory` from npm over stdio (`add_observations`,
//! `search_nodes`), spread over the same 16 groups (sessions / entities), and against a null
//! server (the client's floor); afterwards each counts the adds the server kept, and adds are
//! judged on the kept ones. And the same raw HTTP client as above sends `tools/call` requests
//! (`remember` and `recall`, half each) to `/mcp` from each count of `--clients` for
//! `--seconds`.
//!
//! Every run reports answers/s (2xx answers over the wall time), p50 and p99 latency, errors
//! (non-2xx, I/O, MCP tool errors), the server's RSS sampled every 100 ms (start, peak, end) and
//! the CPU the server and this process (the load generator: one thread) used. The issue's
//! targets are judged from the figures. The client is a minimal HTTP/1.1 client over tokio's
//! `TcpStream` on one thread, so that it costs the 2-core machine as little as possible.
//!
//! Timings need an optimised build: a debug xtask re-runs itself with `cargo run --release`.
//! Everything is bounded: each run by `--seconds` (at most 120) and each request by a 10 s
//! timeout; the server processes are stopped and the temporary directory removed on error too.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use mnemon_tests::postgres::PgServer;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::bench_stores::{thousands, verdict};
use crate::cargo;

mod mcp_calls;
mod mcp_raw;
mod mcp_rust;

use mcp_calls::{Endpoint, Kind};

const USAGE: &str = "usage: cargo xtask bench server [--clients C[,C…]] [--seconds S] \
                     [--sessions N] [--messages N] [--assets N] [--mix R:A:S] [--mcp-calls N[,N…]] \
                     [--mcp-concurrency C[,C…]] [--mcp-only] [--mnemon PATH] [--skip-postgres] \
                     [--skip-reference] [--paced R[,R…]] [--durability full|normal] [--tenants N]
  --clients C[,C…]     keep-alive connections of each run (default 8,64; each 1 to 256)
  --seconds S          length of each run (default 10; 0.5 to 120)
  --sessions N         memory sessions seeded, and used by the adds and recalls (default 16)
  --messages N         messages seeded into each session (default 50)
  --assets N           assets seeded, resolved by the load (default 200)
  --mix R:A:S          resolves : adds : recalls in the mixed runs (default 1:1:1)
  --mcp-calls N[,N…]   MCP adds, then as many searches, per server and run: each count is
                       a memory size (default 1000,10000; each 1 to 100000)
  --mcp-concurrency C[,C…]  MCP SDK calls in flight at once, every server (default 1,8;
                       each 1 to 64)
  --mcp-only           only the MCP client comparison (no REST or raw MCP runs)
  --mnemon PATH        measure this mnemon binary (default: `cargo build --release -p mnemon`),
                       e.g. a copy of an earlier build, to compare two versions
  --skip-postgres      SQLite only (no PostgreSQL server)
  --skip-reference     no Node.js reference server (no npm)
  --paced R[,R…]       also run each mix at R requests/s in all, on a fixed schedule, latency
                       from each request's scheduled time (default 3150 on SQLite and 1600 on
                       PostgreSQL, a little above issue 15's rates; 0 for none; each 1 to 100000)
  --durability LEVEL   every Mnemon server's --durability: full (default: each commit synced)
                       or normal (a commit survives a killed process, not a power loss; the
                       reference server never syncs) (docs/reference/config.md#durability)
  --tenants N          also run the mix over N namespaces on a server with one write key each,
                       every request with the key of the namespace it picks (default 64; 0 for
                       none; at most 1000)";

/// The embedder of every server: offline and deterministic.
const EMBEDDING_MODEL: &str = "mnemon:hashing-v1-512";
/// Results per recall.
const TOP_K: usize = 5;
/// Labels per seeded asset (the resolves cycle through them).
const LABELS: u64 = 8;
/// Groups (sessions, entities) the MCP SDK calls are spread over, on both servers.
const MCP_GROUPS: usize = 16;
/// The longest a request may take before it counts as an error and its connection is replaced.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest the MCP SDK client may run, per server.
const NODE_TIMEOUT: Duration = Duration::from_secs(600);
/// How often the server's RSS is sampled.
const RSS_PERIOD: Duration = Duration::from_millis(100);
/// The largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Namespaces seeded at once (one connection each) before the multi-tenant runs.
const SEED_CONNECTIONS: usize = 8;
/// The reference MCP server, from npm.
const REFERENCE_PACKAGE: &str = "@modelcontextprotocol/server-memory";

/// The reference server's release the comparison is made against: pinned, since its rate is
/// the denominator of the MCP target and releases differ in how they write their file.
const REFERENCE_VERSION: &str = "2026.8.31";

/// The MCP TypeScript SDK release the benchmark's Node client uses (installed beside the
/// reference server).
const SDK_VERSION: &str = "1.32.2";

/// Issue 15's targets (2 cores): asset resolves/s on SQLite,
const TARGET_RESOLVES: f64 = 10_000.0;
/// mixed requests/s on SQLite,
const TARGET_MIX_SQLITE: f64 = 3_000.0;
/// at this p99 (ms),
const TARGET_MIX_P99_MS: f64 = 10.0;
/// mixed requests/s on PostgreSQL,
const TARGET_MIX_POSTGRES: f64 = 1_500.0;
/// and MCP tool calls over the reference memory server's rate.
const TARGET_MCP_RATIO: f64 = 5.0;

#[derive(Debug, PartialEq)]
struct Params {
    clients: Vec<usize>,
    seconds: f64,
    sessions: usize,
    messages: usize,
    assets: usize,
    /// Resolves, adds and recalls per cycle of the mixed runs.
    mix: [u32; 3],
    /// The MCP SDK runs' sizes: adds, then as many searches.
    mcp_calls: Vec<usize>,
    /// The MCP SDK runs' calls in flight.
    mcp_concurrency: Vec<usize>,
    /// Only the MCP client comparison.
    mcp_only: bool,
    /// The binary measured instead of a fresh release build.
    mnemon: Option<PathBuf>,
    skip_postgres: bool,
    skip_reference: bool,
    /// The paced mixed runs' rates (requests/s in all); `None`: the defaults per backend.
    paced: Option<Vec<f64>>,
    /// Every Mnemon server's `--durability`.
    durability: &'static str,
    /// Namespaces of the multi-tenant mixed runs, each with its own key (0: none).
    tenants: usize,
}

/// `--durability` of the run, for every `mnemon` process it starts (set once by [`run`]).
static DURABILITY: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// The `--durability` every `mnemon` process of the run gets.
fn durability() -> &'static str {
    DURABILITY.get().copied().unwrap_or("full")
}

/// The global arguments every `mnemon` process of the run gets before its command: none at
/// the default durability, so that `--mnemon` can measure a build from before `--durability`.
fn global_args() -> Vec<&'static str> {
    match durability() {
        "full" => Vec::new(),
        level => vec!["--durability", level],
    }
}

/// The paced mixed runs' default rates: a little above issue 15's targets, so that a server
/// that keeps up answers at least the target's rate over the run.
const DEFAULT_PACE_SQLITE: f64 = 3_150.0;
const DEFAULT_PACE_POSTGRES: f64 = 1_600.0;

/// The arguments, or `None` for `--help`.
fn parse(args: &[String]) -> Result<Option<Params>> {
    let mut p = Params {
        clients: vec![8, 64],
        seconds: 10.0,
        sessions: 16,
        messages: 50,
        assets: 200,
        mix: [1, 1, 1],
        mcp_calls: vec![1_000, 10_000],
        mcp_concurrency: vec![1, 8],
        mcp_only: false,
        mnemon: None,
        skip_postgres: false,
        skip_reference: false,
        paced: None,
        durability: "full",
        tenants: 64,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut text = |name: &str| -> Result<&String> {
            it.next()
                .with_context(|| format!("{name} needs a value; {USAGE}"))
        };
        let whole = |name: &str, value: &str, least: usize, most: usize| -> Result<usize> {
            let n: usize = value
                .parse()
                .with_context(|| format!("{name} needs a whole number; {USAGE}"))?;
            if n < least || n > most {
                bail!("{name} takes {least} to {most}, not {n}; {USAGE}");
            }
            Ok(n)
        };
        match a.as_str() {
            "--help" | "-h" => return Ok(None),
            "--clients" => {
                let value = text("--clients")?;
                p.clients = value
                    .split(',')
                    .map(|c| whole("--clients", c.trim(), 1, 256))
                    .collect::<Result<_>>()?;
            }
            "--seconds" => {
                let value = text("--seconds")?;
                let s: f64 = value
                    .parse()
                    .with_context(|| format!("--seconds needs a number; {USAGE}"))?;
                if !(0.5..=120.0).contains(&s) {
                    bail!("--seconds takes 0.5 to 120, not {value}; {USAGE}");
                }
                p.seconds = s;
            }
            "--sessions" => p.sessions = whole("--sessions", text("--sessions")?, 1, 1_000)?,
            "--messages" => p.messages = whole("--messages", text("--messages")?, 0, 10_000)?,
            "--assets" => p.assets = whole("--assets", text("--assets")?, 1, 100_000)?,
            "--tenants" => p.tenants = whole("--tenants", text("--tenants")?, 0, 1_000)?,
            "--mix" => {
                let value = text("--mix")?;
                let parts: Vec<u32> = value
                    .split(':')
                    .map(|w| w.trim().parse::<u32>())
                    .collect::<Result<_, _>>()
                    .with_context(|| format!("--mix takes three whole numbers R:A:S; {USAGE}"))?;
                match parts.as_slice() {
                    &[r, a, s] if r + a + s > 0 && r.max(a).max(s) <= 100 => p.mix = [r, a, s],
                    _ => bail!(
                        "--mix takes three whole numbers R:A:S of at most 100, not all 0, not \
                         {value:?}; {USAGE}"
                    ),
                }
            }
            "--mcp-calls" => {
                let value = text("--mcp-calls")?;
                p.mcp_calls = value
                    .split(',')
                    .map(|c| whole("--mcp-calls", c.trim(), 1, 100_000))
                    .collect::<Result<_>>()?;
            }
            "--mcp-concurrency" => {
                let value = text("--mcp-concurrency")?;
                p.mcp_concurrency = value
                    .split(',')
                    .map(|c| whole("--mcp-concurrency", c.trim(), 1, 64))
                    .collect::<Result<_>>()?;
            }
            "--mcp-only" => p.mcp_only = true,
            "--mnemon" => p.mnemon = Some(PathBuf::from(text("--mnemon")?)),
            "--skip-postgres" => p.skip_postgres = true,
            "--skip-reference" => p.skip_reference = true,
            "--durability" => {
                p.durability = match text("--durability")?.as_str() {
                    "full" => "full",
                    "normal" => "normal",
                    other => bail!("--durability {other:?}: full or normal; {USAGE}"),
                }
            }
            "--paced" => {
                let value = text("--paced")?;
                p.paced = Some(
                    value
                        .split(',')
                        .map(|c| whole("--paced", c.trim(), 0, 100_000).map(|r| r as f64))
                        .filter(|r| !matches!(r, Ok(0.0)))
                        .collect::<Result<_>>()?,
                );
            }
            other => bail!("unknown argument {other:?}; {USAGE}"),
        }
    }
    Ok(Some(p))
}

/// Runs the benchmark. `args` are the words after `bench server`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let Some(params) = parse(args)? else {
        println!("{USAGE}");
        return Ok(());
    };
    if cargo::rerun_bench_in_release("server", args)? {
        return Ok(());
    }
    let _ = DURABILITY.set(params.durability);
    let binary = match &params.mnemon {
        Some(path) if path.is_file() => path.clone(),
        Some(path) => bail!("--mnemon {}: no such file", path.display()),
        None => cargo::release_mnemon()?,
    };
    let target = cargo::target_dir();
    let dir = target.join("bench-server");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let load_before = load_average();
    let clock = Instant::now();
    let result = measure(&params, &binary, &dir, &target);
    let removed = std::fs::remove_dir_all(&dir);
    let mut report = result?;
    removed.with_context(|| format!("removing {}", dir.display()))?;
    report.load = (load_before, load_average());
    report.print(&params);
    println!(
        "(the measurements took {:.1} min)",
        clock.elapsed().as_secs_f64() / 60.0
    );
    Ok(())
}

/// The three load averages of `/proc/loadavg`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// One kind of request the load sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Resolve,
    Add,
    Recall,
    McpRemember,
    McpRecall,
}

impl Op {
    const ALL: [Op; 5] = [
        Op::Resolve,
        Op::Add,
        Op::Recall,
        Op::McpRemember,
        Op::McpRecall,
    ];

    fn name(self) -> &'static str {
        match self {
            Op::Resolve => "resolve",
            Op::Add => "add",
            Op::Recall => "recall",
            Op::McpRemember => "MCP remember",
            Op::McpRecall => "MCP recall",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn is_mcp(self) -> bool {
        matches!(self, Op::McpRemember | Op::McpRecall)
    }
}

/// What a run sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    Resolves,
    Mix,
    Mcp,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Resolves => "resolves",
            Workload::Mix => "mix",
            Workload::Mcp => "MCP tools/call",
        }
    }

    /// The operations of one cycle, interleaved (R:A:S = 2:1:1 is resolve, add, recall,
    /// resolve), which every connection walks from its own starting point.
    fn cycle(self, mix: [u32; 3]) -> Vec<Op> {
        match self {
            Workload::Resolves => vec![Op::Resolve],
            Workload::Mcp => vec![Op::McpRemember, Op::McpRecall],
            Workload::Mix => {
                let mut left = mix;
                let mut ops = Vec::new();
                while left.iter().any(|&n| n > 0) {
                    for (slot, op) in left.iter_mut().zip([Op::Resolve, Op::Add, Op::Recall]) {
                        if *slot > 0 {
                            *slot -= 1;
                            ops.push(op);
                        }
                    }
                }
                ops
            }
        }
    }
}

/// What the requests are spread over: the seeded sessions and assets.
#[derive(Debug, Clone, Copy)]
struct Shape {
    sessions: usize,
    assets: usize,
}

impl Shape {
    fn of(p: &Params) -> Shape {
        Shape {
            sessions: p.sessions.max(1),
            assets: p.assets.max(1),
        }
    }
}

/// `n` scrambled (Fibonacci hashing), so that which session or asset a request uses does not
/// follow which client sends it or which operation it is.
fn spread(n: u64, salt: u64) -> u64 {
    (n ^ salt).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32
}

/// The session request `n` uses.
fn session_of(n: u64, shape: Shape) -> String {
    format!("s-{}", spread(n, 1) % shape.sessions as u64)
}

fn note(n: u64) -> String {
    format!("note {n}: the build on host {} took {} s", n % 17, n % 60)
}

fn query_text(n: u64) -> String {
    format!("build on host {}", n % 17)
}

/// The raw HTTP/1.1 request `n` of `op` against `host` (`127.0.0.1:port`).
fn request(op: Op, n: u64, shape: Shape, host: &str) -> Vec<u8> {
    let session = session_of(n, shape);
    let (method, path, body) = match op {
        Op::Resolve => (
            "GET",
            format!(
                "/v1/resolve?reference=asset://bench-{}/content/labels/{}",
                spread(n, 2) % shape.assets as u64,
                spread(n, 3) % LABELS
            ),
            None,
        ),
        Op::Add => (
            "POST",
            format!("/v1/memory/sessions/{session}/messages"),
            Some(json!({"messages": [{"name": "user", "role": "user", "content": note(n)}]})),
        ),
        Op::Recall => (
            "POST",
            format!("/v1/memory/sessions/{session}/search"),
            Some(json!({"query": {"text": query_text(n)}, "top_k": TOP_K})),
        ),
        Op::McpRemember => (
            "POST",
            "/mcp".to_owned(),
            Some(
                json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                "name": "remember", "arguments": {"session": session, "messages": [
                    {"name": "user", "role": "user", "content": note(n)}]}}}),
            ),
        ),
        Op::McpRecall => (
            "POST",
            "/mcp".to_owned(),
            Some(
                json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                "name": "recall", "arguments": {"session": session, "query": query_text(n),
                                                "top_k": TOP_K}}}),
            ),
        ),
    };
    http_request(method, &path, host, body.map(|b| b.to_string()).as_deref())
}

/// `request` with an `Authorization` header carrying `key`, after its request line.
fn with_key(request: Vec<u8>, key: &str) -> Vec<u8> {
    let line_end = request
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(request.len(), |at| at + 2);
    let mut out = Vec::with_capacity(request.len() + key.len() + 32);
    out.extend_from_slice(request.get(..line_end).unwrap_or_default());
    out.extend_from_slice(format!("Authorization: Bearer {key}\r\n").as_bytes());
    out.extend_from_slice(request.get(line_end..).unwrap_or_default());
    out
}

/// An HTTP/1.1 request with a JSON body (or none); keep-alive is HTTP/1.1's default.
fn http_request(method: &str, path: &str, host: &str, body: Option<&str>) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
    if let Some(body) = body {
        out.push_str(&format!(
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        ));
    } else {
        out.push_str("\r\n");
    }
    out.into_bytes()
}

/// How a response's body is delimited.
#[derive(Debug, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
}

/// A parsed response head.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    status: u16,
    /// Bytes of the head, up to and including the blank line.
    len: usize,
    framing: Framing,
}

/// The response head at the start of `buf`: `Ok(None)` while it is incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > MAX_HEAD {
            return Err(format!("a response head over {MAX_HEAD} bytes"));
        }
        return Ok(None);
    };
    let text = std::str::from_utf8(&buf[..end]).map_err(|_| "a non-UTF-8 head".to_owned())?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("a malformed status line {status_line:?}"))?;
    let mut framing = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("a malformed header line {line:?}"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n = value
                .parse()
                .map_err(|_| format!("a malformed Content-Length {value:?}"))?;
            framing = Some(Framing::Length(n));
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            && value.eq_ignore_ascii_case("chunked")
        {
            framing = Some(Framing::Chunked);
        }
    }
    let framing = match framing {
        Some(f) => f,
        // No body by definition.
        None if status == 204 || status == 304 || (100..200).contains(&status) => {
            Framing::Length(0)
        }
        None => return Err(format!("a {status} response without a length")),
    };
    Ok(Some(Head {
        status,
        len: end + 4,
        framing,
    }))
}

/// The bytes a complete chunked body at the start of `buf` takes (with its last chunk and
/// blank line; no trailers are expected), or `Ok(None)` while it is incomplete.
fn chunked_len(buf: &[u8]) -> Result<Option<usize>, String> {
    let mut at = 0;
    loop {
        let Some(eol) = buf
            .get(at..)
            .and_then(|rest| rest.windows(2).position(|w| w == b"\r\n"))
        else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&buf[at..at + eol]).map_err(|_| "a bad chunk size")?;
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("a malformed chunk size {line:?}"))?;
        at += eol + 2;
        if size == 0 {
            // The blank line after the last chunk.
            return Ok((buf.len() >= at + 2).then_some(at + 2));
        }
        if buf.len() < at + size + 2 {
            return Ok(None);
        }
        at += size + 2;
    }
}

/// Errors counted by kind, with the first answer's message of each (cut at 300 characters).
type Failures = std::collections::BTreeMap<String, (usize, String)>;

/// Counts one error of `kind` in `failures`, keeping the first `message` of each kind.
fn count_failure(failures: &mut Failures, kind: String, message: impl FnOnce() -> String) {
    failures
        .entry(kind)
        .and_modify(|(n, _)| *n += 1)
        .or_insert_with(|| (1, message().chars().take(300).collect()));
}

/// What kind of error an unsuccessful answer is: the operation, the status and the error code
/// of the body (`{"error": {"code"}}`; for an MCP tool error the code in its text block).
fn failure_kind(op: Op, status: u16, body: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let code = if op.is_mcp() {
        let text = value["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        let tool: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        tool["error"]["code"]
            .as_str()
            .or(value["error"]["message"].as_str())
            .unwrap_or("?")
            .to_owned()
    } else {
        value["error"]["code"].as_str().unwrap_or("?").to_owned()
    };
    format!("{} {status} {code}", op.name())
}

/// Whether an MCP `tools/call` answer is a success: a JSON-RPC result that is no tool error.
fn mcp_ok(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| {
        v.get("result")
            .is_some_and(|r| r.get("isError") != Some(&serde_json::Value::Bool(true)))
    })
}

/// One keep-alive connection.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn connect(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
        })
    }

    /// Sends `request` and reads its answer: its status and body.
    async fn exchange(&mut self, request: &[u8]) -> Result<(u16, Vec<u8>)> {
        self.stream.write_all(request).await?;
        let head = loop {
            if let Some(head) = parse_head(&self.buf).map_err(|e| anyhow!(e))? {
                break head;
            }
            self.fill().await?;
        };
        let body_len = loop {
            let rest = self.buf.get(head.len..).unwrap_or_default();
            let have = match head.framing {
                Framing::Length(n) => (rest.len() >= n).then_some(n),
                Framing::Chunked => chunked_len(rest).map_err(|e| anyhow!(e))?,
            };
            if let Some(n) = have {
                break n;
            }
            self.fill().await?;
        };
        let body = self.buf[head.len..head.len + body_len].to_vec();
        self.buf.drain(..head.len + body_len);
        Ok((head.status, body))
    }

    async fn fill(&mut self) -> Result<()> {
        if self.stream.read_buf(&mut self.buf).await? == 0 {
            bail!("the server closed the connection");
        }
        Ok(())
    }
}

/// CPU time (user + system) of a process in clock ticks, from the text of `/proc/<pid>/stat`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: count from the last `)`.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the line are utime and stime: 11 and 12 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn process_ticks(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| cpu_ticks(&s))
        .unwrap_or(0)
}

/// Clock ticks per second (`getconf CLK_TCK`, else Linux's usual 100).
fn ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|&t| t > 0.0)
        .unwrap_or(100.0)
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

/// The value of percentile `p` (0 to 100) of sorted microseconds, in milliseconds (nearest
/// rank); NaN when there are none.
fn percentile_ms(sorted_us: &[u32], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return f64::NAN;
    }
    // The smallest value with at least p % of the values at or below it.
    let rank = ((p / 100.0) * sorted_us.len() as f64).ceil() as usize;
    sorted_us
        .get(rank.saturating_sub(1).min(sorted_us.len() - 1))
        .map_or(f64::NAN, |&us| f64::from(us) / 1e3)
}

/// RSS in kB sampled over a run: the first, the largest and the last sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Rss {
    start: u64,
    peak: u64,
    end: u64,
}

impl Rss {
    fn of(samples: &[u64]) -> Rss {
        Rss {
            start: samples.first().copied().unwrap_or(0),
            peak: samples.iter().copied().max().unwrap_or(0),
            end: samples.last().copied().unwrap_or(0),
        }
    }
}

/// What one run measured.
#[derive(Debug, Default)]
struct Outcome {
    /// Latencies of the successful answers per [`Op`], sorted, in microseconds.
    latencies_us: [Vec<u32>; 5],
    errors: usize,
    /// The errors by kind (operation, status and error code, or I/O error, timeout).
    failures: Failures,
    /// From the first request to the last answer.
    elapsed: Duration,
    rss: Rss,
    /// The server's open file descriptors at the end of the run (sockets included).
    fds: usize,
    /// Cores' worth of CPU the server and this process used over the run.
    server_cpu: f64,
    client_cpu: f64,
    /// How the machine itself behaved over the run.
    machine: Machine,
}

/// The machine's own stalls over a run, measured beside the load, so that a latency tail can be
/// told apart from the shared machine pausing: the slowest of the 4 KiB writes with `fdatasync`
/// made every [`RSS_PERIOD`] to a file beside the stores, and the most a [`RSS_PERIOD`] sleep
/// overran (a paused or starved process).
#[derive(Debug, Default, Clone, Copy)]
struct Machine {
    worst_sync: Duration,
    worst_lag: Duration,
}

/// Every [`RSS_PERIOD`] until `stop`: a 4 KiB write and `fdatasync` to `path`; the slowest.
fn probe_syncs(path: &Path, stop: &AtomicBool) -> Duration {
    use std::io::{Seek, Write};
    let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
    else {
        return Duration::ZERO;
    };
    let block = [0x5au8; 4096];
    let mut worst = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let written = file
            .seek(std::io::SeekFrom::Start(0))
            .and_then(|_| file.write_all(&block))
            .and_then(|()| file.sync_data());
        if written.is_err() {
            break;
        }
        worst = worst.max(started.elapsed());
        std::thread::sleep(RSS_PERIOD);
    }
    worst
}

impl Outcome {
    fn ok(&self) -> usize {
        self.latencies_us.iter().map(Vec::len).sum()
    }

    fn rate(&self) -> f64 {
        self.ok() as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    fn all_sorted(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self.latencies_us.iter().flatten().copied().collect();
        all.sort_unstable();
        all
    }
}

/// `mnemon` over `dir/data` (or `database_url`), with the run's global arguments, before its
/// command: `dir` (made if missing) is its working directory, and the environment that could
/// point it elsewhere is cleared, so that no `mnemon.toml`, `./libraries` or variable of the
/// checkout applies.
fn mnemon_command(binary: &Path, dir: &Path, database_url: Option<&str>) -> Result<Command> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = Command::new(binary);
    cmd.arg("--data-dir").arg(dir.join("data"));
    cmd.args(global_args());
    if let Some(url) = database_url {
        cmd.args(["--database-url", url]);
    }
    cmd.current_dir(dir)
        .env_remove("MNEMON_DATABASE_URL")
        .env_remove("MNEMON_NAMESPACE")
        .env_remove("MNEMON_CONFIG_FILE")
        .env_remove("LIBRARY_FILENAME");
    Ok(cmd)
}

/// A write key for each of `n` namespaces `t-<i>`, made with `mnemon keys create` in the store
/// `dir/data` (or `database_url`) a server will then serve: the keys, in order.
fn create_tenant_keys(
    binary: &Path,
    dir: &Path,
    database_url: Option<&str>,
    n: usize,
) -> Result<Vec<String>> {
    (0..n)
        .map(|i| {
            let namespace = format!("t-{i}");
            let output = mnemon_command(binary, dir, database_url)?
                .args([
                    "keys",
                    "create",
                    "--namespace",
                    &namespace,
                    "--role",
                    "write",
                ])
                .stdin(Stdio::null())
                .output()
                .context("running mnemon keys create")?;
            if !output.status.success() {
                bail!(
                    "mnemon keys create --namespace {namespace} failed: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                );
            }
            let created: serde_json::Value = serde_json::from_slice(&output.stdout)
                .context("mnemon keys create printed no JSON")?;
            created["key"]
                .as_str()
                .map(str::to_owned)
                .context("mnemon keys create printed no key")
        })
        .collect()
}

/// A running `mnemon serve`, killed if dropped before [`ServerProcess::stop`].
struct ServerProcess {
    child: Child,
    addr: SocketAddr,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServerProcess {
    /// Starts `mnemon serve` on 127.0.0.1 over `dir/data` (or `database_url`), with `dir` as
    /// its working directory so that no `mnemon.toml` or `./libraries` of the checkout applies.
    fn start(binary: &Path, dir: &Path, database_url: Option<&str>) -> Result<ServerProcess> {
        let mut cmd = mnemon_command(binary, dir, database_url)?;
        cmd.args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--embedding-model",
            EMBEDDING_MODEL,
        ])
        // The access log (one line a request) off: it would cost both processes CPU.
        .env("RUST_LOG", "info,mnemon_host::access=off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stderr = child.stderr.take().context("no stderr pipe")?;
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        // Drains the log for the whole run: a full pipe would stall the server.
        std::thread::spawn(move || {
            let mut shown = 0;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("serving on http://").nth(1) {
                    let addr = rest.split('/').next().unwrap_or_default().to_owned();
                    let _ = addr_tx.send(addr);
                } else if (line.contains("ERROR") || line.contains("WARN")) && shown < 20 {
                    shown += 1;
                    eprintln!("server: {line}");
                }
            }
        });
        let mut server = ServerProcess {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        server.addr = addr_rx
            .recv_timeout(Duration::from_secs(60))
            .context("the server did not report its address within 60 s")?
            .parse()
            .context("the server logged an unparsable address")?;
        Ok(server)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, and up to 15 s to exit (then Drop kills it): how long it took.
    fn stop(mut self) -> Result<Duration> {
        let pid = self.pid().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .context("running kill")?;
        if !status.success() {
            bail!("kill -TERM {pid} failed");
        }
        let sent = Instant::now();
        let deadline = sent + Duration::from_secs(15);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(sent.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("the server was still running 15 s after SIGTERM")
    }
}

/// Sends `request`s on one connection, one after the other, failing on any non-2xx answer.
async fn send_all(addr: SocketAddr, requests: Vec<(String, Vec<u8>)>) -> Result<()> {
    let mut conn = Conn::connect(addr).await?;
    for (what, request) in requests {
        let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT, conn.exchange(&request))
            .await
            .with_context(|| format!("{what}: no answer within {REQUEST_TIMEOUT:?}"))??;
        if !(200..300).contains(&status) {
            bail!("{what}: {status} {}", String::from_utf8_lossy(&body));
        }
    }
    Ok(())
}

/// Seeds the server: the assets, each session's messages (in batches of 100), and one recall
/// per session, so that the seeded messages are embedded before the clock starts.
fn seed(runtime: &tokio::runtime::Runtime, addr: SocketAddr, p: &Params) -> Result<()> {
    runtime.block_on(send_all(addr, seed_requests(&addr.to_string(), p, None)))
}

/// Seeds every namespace of `keys` as [`seed`] seeds the default one, through its own key,
/// [`SEED_CONNECTIONS`] namespaces at a time.
fn seed_tenants(
    runtime: &tokio::runtime::Runtime,
    addr: SocketAddr,
    p: &Params,
    keys: &[String],
) -> Result<()> {
    let host = addr.to_string();
    runtime.block_on(async {
        for group in keys.chunks(SEED_CONNECTIONS) {
            let tasks: Vec<_> = group
                .iter()
                .map(|key| tokio::spawn(send_all(addr, seed_requests(&host, p, Some(key)))))
                .collect();
            for task in tasks {
                task.await.context("a seeding task panicked")??;
            }
        }
        Ok(())
    })
}

/// The requests of [`seed`], each with `key` when given.
fn seed_requests(host: &str, p: &Params, key: Option<&str>) -> Vec<(String, Vec<u8>)> {
    let host = host.to_owned();
    let mut requests = Vec::new();
    for a in 0..p.assets {
        let labels: Vec<String> = (0..LABELS).map(|l| format!("label {l} of {a}")).collect();
        let body = json!({"asset_type": "bench", "description": format!("bench asset {a}"),
                          "content": {"labels": labels, "width": a}});
        requests.push((
            format!("putting asset bench-{a}"),
            http_request(
                "PUT",
                &format!("/v1/assets/bench-{a}"),
                &host,
                Some(&body.to_string()),
            ),
        ));
    }
    for s in 0..p.sessions {
        // Created even without messages, so that recalls in it find it.
        requests.push((
            format!("creating session s-{s}"),
            http_request("PUT", &format!("/v1/memory/sessions/s-{s}"), &host, None),
        ));
        let ids: Vec<usize> = (0..p.messages).collect();
        for chunk in ids.chunks(100) {
            let messages: Vec<_> = chunk
                .iter()
                .map(|&m| json!({"name": "user", "role": "user", "content": note((m * p.sessions + s) as u64)}))
                .collect();
            requests.push((
                format!("adding messages to s-{s}"),
                http_request(
                    "POST",
                    &format!("/v1/memory/sessions/s-{s}/messages"),
                    &host,
                    Some(&json!({ "messages": messages }).to_string()),
                ),
            ));
        }
        requests.push((
            format!("recalling in s-{s}"),
            http_request(
                "POST",
                &format!("/v1/memory/sessions/s-{s}/search"),
                &host,
                Some(&json!({"query": {"text": "seed"}, "top_k": TOP_K}).to_string()),
            ),
        ));
    }
    match key {
        Some(key) => requests
            .into_iter()
            .map(|(what, request)| (what, with_key(request, key)))
            .collect(),
        None => requests,
    }
}

/// One run: `clients` connections walking `workload`'s cycle for `seconds`. With `keys`, each
/// request picks one of them (so one namespace) by its number, whichever client sends it.
fn load(
    runtime: &tokio::runtime::Runtime,
    server: &ServerProcess,
    workload: Workload,
    clients: usize,
    pace: Option<f64>,
    keys: &Arc<Vec<String>>,
    p: &Params,
) -> Outcome {
    let cycle = Arc::new(workload.cycle(p.mix));
    let addr = server.addr;
    let host = Arc::new(addr.to_string());
    let duration = Duration::from_secs_f64(p.seconds);
    let pid = server.pid();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut samples = vec![proc_status_kb(pid, "VmRSS:")];
            let mut worst_lag = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let slept = Instant::now();
                std::thread::sleep(RSS_PERIOD);
                worst_lag = worst_lag.max(slept.elapsed().saturating_sub(RSS_PERIOD));
                samples.push(proc_status_kb(pid, "VmRSS:"));
            }
            (samples, worst_lag)
        })
    };
    let prober = {
        let stop = Arc::clone(&stop);
        let path = cargo::target_dir()
            .join("bench-server")
            .join("machine-probe");
        std::thread::spawn(move || probe_syncs(&path, &stop))
    };
    let server_ticks = process_ticks(&pid.to_string());
    let client_ticks = process_ticks("self");
    let started = Instant::now();
    let deadline = started + duration;
    let (latencies, failures) = runtime.block_on(async {
        let workers: Vec<_> = (0..clients)
            .map(|w| {
                let cycle = Arc::clone(&cycle);
                let host = Arc::clone(&host);
                let keys = Arc::clone(keys);
                let shape = Shape::of(p);
                tokio::spawn(async move {
                    let mut latencies: [Vec<u32>; 5] = Default::default();
                    let mut failures = Failures::new();
                    let mut conn = None;
                    let mut step = 0u64;
                    // Paced: this client's k-th request is due at `w / R + k · clients / R` s.
                    let schedule = pace.map(|rate| {
                        let start = tokio::time::Instant::from_std(started);
                        (
                            start + Duration::from_secs_f64(w as f64 / rate),
                            Duration::from_secs_f64(clients as f64 / rate),
                        )
                    });
                    loop {
                        let due = schedule.map(|(first, every)| first + every * step as u32);
                        match (due, schedule) {
                            // Paced, every request due before the deadline is sent, however
                            // late (stopping at the deadline dropped the most delayed ones,
                            // which the percentiles then never saw), until a request's
                            // timeout past it: then the ones still due count as failures.
                            (Some(due), Some((_, every))) => {
                                if due.into_std() >= deadline {
                                    break;
                                }
                                if Instant::now() >= deadline + REQUEST_TIMEOUT {
                                    // This one and every later one due before the deadline.
                                    let left = (deadline - due.into_std())
                                        .as_nanos()
                                        .div_ceil(every.as_nanos().max(1));
                                    for _ in 0..left {
                                        count_failure(
                                            &mut failures,
                                            "not sent a request timeout after the end".to_owned(),
                                            String::new,
                                        );
                                    }
                                    break;
                                }
                                tokio::time::sleep_until(due).await;
                            }
                            _ if Instant::now() >= deadline => break,
                            _ => {}
                        }
                        let n = step * clients as u64 + w as u64;
                        let op = cycle
                            .get((w + step as usize) % cycle.len().max(1))
                            .copied()
                            .unwrap_or(Op::Resolve);
                        step += 1;
                        let c = match conn.take() {
                            Some(c) => c,
                            None => match Conn::connect(addr).await {
                                Ok(c) => c,
                                Err(_) => {
                                    count_failure(&mut failures, "connect".to_owned(), String::new);
                                    tokio::time::sleep(Duration::from_millis(10)).await;
                                    continue;
                                }
                            },
                        };
                        let mut c = c;
                        let mut bytes = request(op, n, shape, &host);
                        if let Some(key) = keys.get(spread(n, 4) as usize % keys.len().max(1)) {
                            bytes = with_key(bytes, key);
                        }
                        // Paced, a request's latency counts from when it was due.
                        let sent = due.map_or_else(Instant::now, tokio::time::Instant::into_std);
                        let answer =
                            tokio::time::timeout(REQUEST_TIMEOUT, c.exchange(&bytes)).await;
                        let took = sent.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                        match answer {
                            Ok(Ok((status, body))) => {
                                let ok =
                                    (200..300).contains(&status) && (!op.is_mcp() || mcp_ok(&body));
                                if ok {
                                    latencies[op.index()].push(took);
                                } else {
                                    count_failure(
                                        &mut failures,
                                        failure_kind(op, status, &body),
                                        || String::from_utf8_lossy(&body).into_owned(),
                                    );
                                }
                                conn = Some(c);
                            }
                            // An I/O error or a timeout: the connection is replaced.
                            Ok(Err(e)) => count_failure(
                                &mut failures,
                                format!("{} I/O error", op.name()),
                                || format!("{e:#}"),
                            ),
                            Err(_) => count_failure(
                                &mut failures,
                                format!("{} timeout", op.name()),
                                String::new,
                            ),
                        }
                    }
                    (latencies, failures)
                })
            })
            .collect();
        let mut all: [Vec<u32>; 5] = Default::default();
        let mut failures = Failures::new();
        for worker in workers {
            match worker.await {
                Ok((latencies, f)) => {
                    for (into, from) in all.iter_mut().zip(latencies) {
                        into.extend(from);
                    }
                    for (kind, (n, message)) in f {
                        failures
                            .entry(kind)
                            .and_modify(|(count, _)| *count += n)
                            .or_insert((n, message));
                    }
                }
                Err(_) => count_failure(&mut failures, "a client panicked".to_owned(), String::new),
            }
        }
        (all, failures)
    });
    let elapsed = started.elapsed();
    let ticks = ticks_per_second();
    let server_cpu = (process_ticks(&pid.to_string()).saturating_sub(server_ticks)) as f64 / ticks;
    let client_cpu = (process_ticks("self").saturating_sub(client_ticks)) as f64 / ticks;
    stop.store(true, Ordering::Relaxed);
    let (samples, worst_lag) = sampler.join().unwrap_or_default();
    let worst_sync = prober.join().unwrap_or_default();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count);
    let mut latencies_us = latencies;
    for l in &mut latencies_us {
        l.sort_unstable();
    }
    Outcome {
        latencies_us,
        errors: failures.values().map(|(n, _)| n).sum(),
        failures,
        elapsed,
        rss: Rss::of(&samples),
        fds,
        server_cpu: server_cpu / elapsed.as_secs_f64(),
        client_cpu: client_cpu / elapsed.as_secs_f64(),
        machine: Machine {
            worst_sync,
            worst_lag,
        },
    }
}

/// One row of the table.
#[derive(Debug)]
struct Run {
    backend: &'static str,
    workload: Workload,
    /// Namespaces the requests were spread over, each through its own key (0: the default
    /// namespace of a server without keys).
    tenants: usize,
    clients: usize,
    /// The rate the clients were paced at (requests/s in all), or `None`: a closed loop.
    paced: Option<f64>,
    outcome: Outcome,
}

/// One phase of the MCP SDK client's calls.
#[derive(Debug, Default)]
struct Phase {
    /// Latencies of the successful calls, sorted, in microseconds.
    latencies_us: Vec<u32>,
    errors: usize,
    wall: Duration,
}

impl Phase {
    fn rate(&self) -> f64 {
        self.latencies_us.len() as f64 / self.wall.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Ends a phase begun at `started`: its wall time, its latencies sorted, and the first
    /// failed call's error, if any, printed under `client`'s name.
    fn finish(mut self, started: Instant, client: &str, first_error: Option<String>) -> Phase {
        self.wall = started.elapsed();
        self.latencies_us.sort_unstable();
        if let Some(error) = first_error {
            eprintln!(
                "MCP ({client}): {} calls failed; the first: {error}",
                self.errors
            );
        }
        self
    }
}

/// The MCP SDK client's adds and searches against one server.
#[derive(Debug, Default)]
struct Side {
    adds: Phase,
    searches: Phase,
    /// How many added messages (observations) the server held after the add phase, read back
    /// through its own tools (Mnemon: `recall` of each session's latest; the reference:
    /// `read_graph`; `None` for the null server): fewer than the acknowledged adds means adds
    /// were lost. The clients then make the lost ones again, one at a time and off the clock,
    /// so that the searches run over the same memory on every server.
    kept: Option<u64>,
}

impl Side {
    /// The acknowledged adds the server still held afterwards (all of them when it was not
    /// counted, as for the null server).
    fn kept_adds(&self) -> usize {
        let acknowledged = self.adds.latencies_us.len();
        self.kept.map_or(acknowledged, |kept| {
            usize::try_from(kept).map_or(acknowledged, |kept| kept.min(acknowledged))
        })
    }

    /// Kept adds over the add phase's wall time: an add acknowledged and then lost is not
    /// throughput.
    fn kept_add_rate(&self) -> f64 {
        self.kept_adds() as f64 / self.adds.wall.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Kept adds and successful searches over the time of both phases.
    fn kept_rate(&self) -> f64 {
        (self.kept_adds() + self.searches.latencies_us.len()) as f64
            / (self.adds.wall + self.searches.wall)
                .as_secs_f64()
                .max(f64::MIN_POSITIVE)
    }

    /// From mcp_calls.cjs's report.
    fn from_report(report: &serde_json::Value) -> Result<Side> {
        let phase = |key: &str| -> Result<Phase> {
            let p = &report[key];
            let wall = p["wall_seconds"]
                .as_f64()
                .with_context(|| format!("no {key}.wall_seconds"))?;
            let mut latencies_us: Vec<u32> = p["seconds"]
                .as_array()
                .with_context(|| format!("no {key}.seconds"))?
                .iter()
                .map(|s| {
                    s.as_f64()
                        .filter(|s| s.is_finite() && *s >= 0.0)
                        .map(|s| (s * 1e6).round().min(f64::from(u32::MAX)) as u32)
                        .with_context(|| format!("{key}.seconds holds {s}"))
                })
                .collect::<Result<_>>()?;
            latencies_us.sort_unstable();
            Ok(Phase {
                latencies_us,
                errors: p["errors"]
                    .as_u64()
                    .and_then(|e| usize::try_from(e).ok())
                    .with_context(|| format!("no {key}.errors"))?,
                wall: Duration::try_from_secs_f64(wall)
                    .map_err(|e| anyhow!("{key}.wall_seconds = {wall}: {e}"))?,
            })
        };
        Ok(Side {
            adds: phase("adds")?,
            searches: phase("searches")?,
            kept: report["kept"].as_u64(),
        })
    }
}

/// What the MCP SDK client of mcp_calls.cjs calls: a server under test, the reference, or a
/// do-nothing server that shows what the client and the transport cost by themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum McpTarget {
    /// `mnemon serve`'s `/mcp` (streamable HTTP): `remember`, `recall`.
    MnemonHttp,
    /// `mnemon mcp` (stdio, the reference's transport): `remember`, `recall`.
    MnemonStdio,
    /// `@modelcontextprotocol/server-memory` (stdio): `add_observations`, `search_nodes`.
    Reference,
    /// xtask/bench/mcp_null_server.cjs over streamable HTTP: the client's floor on HTTP.
    NullHttp,
    /// xtask/bench/mcp_null_server.cjs over stdio: the client's floor on stdio.
    NullStdio,
}

impl McpTarget {
    /// In the order measured and printed.
    const ALL: [McpTarget; 5] = [
        McpTarget::MnemonHttp,
        McpTarget::MnemonStdio,
        McpTarget::Reference,
        McpTarget::NullHttp,
        McpTarget::NullStdio,
    ];

    fn label(self) -> &'static str {
        match self {
            McpTarget::MnemonHttp => "mnemon serve /mcp (HTTP)",
            McpTarget::MnemonStdio => "mnemon mcp (stdio)",
            McpTarget::Reference => "reference server-memory (stdio)",
            McpTarget::NullHttp => "client floor: null server (HTTP)",
            McpTarget::NullStdio => "client floor: null server (stdio)",
        }
    }

    /// Whether the 5× target is judged on it.
    fn judged(self) -> bool {
        matches!(self, McpTarget::MnemonHttp | McpTarget::MnemonStdio)
    }

    /// Whether it is a client floor (measured once per concurrency, at the smallest size).
    fn floor(self) -> bool {
        matches!(self, McpTarget::NullHttp | McpTarget::NullStdio)
    }
}

/// Which MCP client makes the calls: both drive every target with the same calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum McpClient {
    /// The official TypeScript SDK's client in Node.js (xtask/bench/mcp_calls.cjs): what most
    /// agents use, and the SDK the reference server is built on.
    Sdk,
    /// rmcp's client on one thread of this process (bench_server/mcp_rust.rs): a client that
    /// costs little per call, so that the servers, not the client, set the rate.
    Rust,
    /// Raw JSON-RPC on one thread of this process (bench_server/mcp_raw.rs), pipelined over
    /// stdio: no SDK, microseconds a call, so that the figures are the servers' own rates.
    Raw,
}

impl McpClient {
    /// In the order measured and printed.
    const ALL: [McpClient; 3] = [McpClient::Sdk, McpClient::Rust, McpClient::Raw];

    fn label(self) -> &'static str {
        match self {
            McpClient::Sdk => "TypeScript SDK",
            McpClient::Rust => "rmcp (Rust)",
            McpClient::Raw => "raw JSON-RPC",
        }
    }
}

/// One MCP client's figures at one memory size and one concurrency.
#[derive(Debug)]
struct McpConfig {
    /// The client that made the calls.
    client: McpClient,
    /// Adds, then as many searches.
    calls: usize,
    /// Calls in flight.
    concurrency: usize,
    /// Each target's figures, or why it has none.
    sides: Vec<(McpTarget, Result<Side, String>)>,
}

impl McpConfig {
    fn side(&self, target: McpTarget) -> Option<&Result<Side, String>> {
        self.sides
            .iter()
            .find(|(t, _)| *t == target)
            .map(|(_, side)| side)
    }
}

/// The MCP comparison: the SDK client against every target, in every configuration.
#[derive(Debug)]
struct McpReport {
    /// Every configuration measured, in order (sizes within concurrencies).
    configs: Vec<McpConfig>,
    /// Why nothing was measured (no Node.js, npm, or `--skip-reference`), if so.
    unavailable: Option<String>,
}

#[derive(Debug, Default)]
struct Report {
    runs: Vec<Run>,
    mcp: Option<McpReport>,
    /// The load average before and after.
    load: (String, String),
    /// How long each load-test server took from SIGTERM to its exit, or why it did not exit.
    stops: Vec<(String, Result<Duration, String>)>,
}

impl Report {
    /// Records how `server`'s stop went, under `label`: a server that does not exit in time is
    /// killed, and the run goes on (the figures measured so far are not lost).
    fn stopped(&mut self, label: &str, server: ServerProcess) {
        let outcome = server.stop().map_err(|e| format!("{e:#}"));
        if let Err(error) = &outcome {
            eprintln!("{label}: {error}");
        }
        self.stops.push((label.to_owned(), outcome));
    }
}

fn measure(p: &Params, binary: &Path, dir: &Path, target: &Path) -> Result<Report> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut report = Report::default();
    if p.mcp_only {
        report.mcp = Some(measure_mcp(p, binary, dir, target));
        return Ok(report);
    }
    // Every run of one server: in the default namespace (no `keys`: resolves and the mix), or
    // spread over the namespaces of `keys` (the mix).
    let backend_runs = |backend: &'static str,
                        server: &ServerProcess,
                        keys: &Arc<Vec<String>>,
                        report: &mut Report|
     -> Result<()> {
        let tenants = keys.len();
        let (workloads, over) = if tenants == 0 {
            eprintln!("{backend}: seeding ...");
            seed(&runtime, server.addr, p).with_context(|| format!("seeding {backend}"))?;
            (&[Workload::Resolves, Workload::Mix][..], String::new())
        } else {
            eprintln!("{backend}: seeding {tenants} tenants ...");
            seed_tenants(&runtime, server.addr, p, keys)
                .with_context(|| format!("seeding {backend}'s tenants"))?;
            (&[Workload::Mix][..], format!(" over {tenants} tenants"))
        };
        for &clients in &p.clients {
            for &workload in workloads {
                eprintln!(
                    "{backend}: {}{over} from {clients} clients for {} s ...",
                    workload.name(),
                    p.seconds
                );
                let outcome = load(&runtime, server, workload, clients, None, keys, p);
                report.runs.push(Run {
                    backend,
                    workload,
                    tenants,
                    clients,
                    paced: None,
                    outcome,
                });
            }
            let paces = p.paced.clone().unwrap_or_else(|| {
                vec![if backend == "SQLite" {
                    DEFAULT_PACE_SQLITE
                } else {
                    DEFAULT_PACE_POSTGRES
                }]
            });
            for rate in paces {
                eprintln!(
                    "{backend}: mix{over} paced at {rate}/s from {clients} clients for {} s ...",
                    p.seconds
                );
                let outcome = load(
                    &runtime,
                    server,
                    Workload::Mix,
                    clients,
                    Some(rate),
                    keys,
                    p,
                );
                report.runs.push(Run {
                    backend,
                    workload: Workload::Mix,
                    tenants,
                    clients,
                    paced: Some(rate),
                    outcome,
                });
            }
        }
        Ok(())
    };
    // The server of the multi-tenant runs: a fresh store with a write key per namespace
    // (`mnemon keys create`), so that it requires keys, as a shared deployment does.
    let tenant_runs = |backend: &'static str,
                       work: &Path,
                       database_url: Option<&str>,
                       report: &mut Report|
     -> Result<()> {
        if p.tenants == 0 {
            return Ok(());
        }
        eprintln!("{backend}: creating {} tenants' keys ...", p.tenants);
        let keys = Arc::new(create_tenant_keys(binary, work, database_url, p.tenants)?);
        let server = ServerProcess::start(binary, work, database_url)?;
        backend_runs(backend, &server, &keys, report)?;
        report.stopped(&format!("{backend}, {} tenants", p.tenants), server);
        Ok(())
    };
    let no_keys = Arc::new(Vec::new());

    let server = ServerProcess::start(binary, &dir.join("sqlite"), None)?;
    backend_runs("SQLite", &server, &no_keys, &mut report)?;
    report.stopped("SQLite", server);
    tenant_runs("SQLite", &dir.join("sqlite-tenants"), None, &mut report)?;

    if !p.skip_postgres {
        eprintln!("PostgreSQL: starting the server ...");
        let pg = PgServer::start().context("starting PostgreSQL (see docs/postgres.md)")?;
        let url = pg
            .fresh_database("bench_server")
            .context("creating the benchmark database")?;
        let server = ServerProcess::start(binary, &dir.join("postgres"), Some(&url))?;
        backend_runs("PostgreSQL", &server, &no_keys, &mut report)?;
        report.stopped("PostgreSQL", server);
        if p.tenants > 0 {
            let url = pg
                .fresh_database("bench_server_tenants")
                .context("creating the tenants' benchmark database")?;
            tenant_runs(
                "PostgreSQL",
                &dir.join("postgres-tenants"),
                Some(&url),
                &mut report,
            )?;
        }
        drop(pg);
    }

    report.mcp = Some(measure_mcp(p, binary, dir, target));
    // The raw tools/call runs, on a fresh SQLite server seeded as the REST runs are: they
    // recall in the seeded sessions (s-<i>).
    let server = ServerProcess::start(binary, &dir.join("mcp-raw"), None)?;
    seed(&runtime, server.addr, p).context("seeding the MCP server")?;
    for &clients in &p.clients {
        eprintln!(
            "MCP: tools/call from {clients} raw HTTP clients for {} s ...",
            p.seconds
        );
        let outcome = load(&runtime, &server, Workload::Mcp, clients, None, &no_keys, p);
        report.runs.push(Run {
            backend: "SQLite",
            workload: Workload::Mcp,
            tenants: 0,
            clients,
            paced: None,
            outcome,
        });
    }
    report.stopped("MCP raw (SQLite)", server);
    Ok(report)
}

/// The MCP SDK client against every [`McpTarget`], for each `--mcp-concurrency` and each
/// `--mcp-calls`, every server on fresh, empty stores (the reference's rate falls as its file
/// grows, since it rewrites the whole file on every add). A target that fails has its error in
/// the report instead of figures; the others still run.
fn measure_mcp(p: &Params, binary: &Path, dir: &Path, target: &Path) -> McpReport {
    let node_dir = target.join("mcp-node");
    let bench = cargo::workspace_root().join("xtask/bench");
    let script = bench.join("mcp_calls.cjs");
    let null_server = bench.join("mcp_null_server.cjs");
    let reference = if p.skip_reference {
        Err("--skip-reference".to_owned())
    } else {
        install_reference(&node_dir)
    };
    let index = match reference {
        Ok(index) => index,
        Err(why) => {
            return McpReport {
                configs: Vec::new(),
                unavailable: Some(why),
            };
        }
    };
    let smallest = p.mcp_calls.iter().copied().min().unwrap_or(0);
    let mut configs = Vec::new();
    let mut n = 0;
    for &concurrency in &p.mcp_concurrency {
        for &calls in &p.mcp_calls {
            for client in McpClient::ALL {
                let mut sides = Vec::new();
                for t in McpTarget::ALL {
                    if t.floor() && calls != smallest {
                        continue;
                    }
                    n += 1;
                    eprintln!(
                        "MCP: the {} client, {calls} adds and {calls} searches, {concurrency} \
                         in flight, against {} ...",
                        client.label(),
                        t.label()
                    );
                    let work = dir.join(format!("mcp-{n}"));
                    let base = json!({"node_dir": node_dir, "calls": calls, "groups": MCP_GROUPS,
                                      "concurrency": concurrency});
                    let side = mcp_side(
                        client,
                        t,
                        &base,
                        binary,
                        &index,
                        &script,
                        &null_server,
                        &work,
                    )
                    .map_err(|e| format!("{e:#}"));
                    if let Err(why) = &side {
                        eprintln!("MCP: {} failed: {why}", t.label());
                    }
                    sides.push((t, side));
                }
                configs.push(McpConfig {
                    client,
                    calls,
                    concurrency,
                    sides,
                });
            }
        }
    }
    McpReport {
        configs,
        unavailable: None,
    }
}

/// The arguments of `mnemon mcp` over `work/data`, as `mnemon serve` is started.
fn mnemon_mcp_args(work: &Path) -> Vec<std::ffi::OsString> {
    let mut args = vec!["--data-dir".into(), work.join("data").into_os_string()];
    args.extend(global_args().into_iter().map(Into::into));
    args.extend(["mcp", "--embedding-model", EMBEDDING_MODEL].map(Into::into));
    args
}

/// `client`'s figures against `t`, on fresh stores under `work`.
#[allow(clippy::too_many_arguments)]
fn mcp_side(
    client: McpClient,
    t: McpTarget,
    base: &serde_json::Value,
    binary: &Path,
    reference: &Path,
    script: &Path,
    null_server: &Path,
    work: &Path,
) -> Result<Side> {
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    match client {
        McpClient::Rust => {
            return rust_side(mcp_rust::run, t, base, binary, reference, null_server, work);
        }
        McpClient::Raw => {
            return rust_side(mcp_raw::run, t, base, binary, reference, null_server, work);
        }
        McpClient::Sdk => {}
    }
    let with = |extra: serde_json::Value| -> serde_json::Value {
        let mut config = base.clone();
        if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
            config.extend(extra.clone());
        }
        config
    };
    match t {
        McpTarget::MnemonHttp => {
            let server = ServerProcess::start(binary, work, None)?;
            let side = node_calls(
                script,
                &with(json!({"kind": "mnemon", "transport": "http",
                             "url": format!("http://{}/mcp", server.addr)})),
            );
            server.stop()?;
            side
        }
        // The same stores and embedder as `mnemon serve`, over the reference's transport.
        McpTarget::MnemonStdio => node_calls(
            script,
            &with(
                json!({"kind": "mnemon", "transport": "stdio", "command": binary,
                         "args": mnemon_mcp_args(work).iter()
                             .map(|a| a.to_string_lossy().into_owned())
                             .collect::<Vec<_>>()}),
            ),
        ),
        McpTarget::Reference => node_calls(
            script,
            &with(
                json!({"kind": "reference", "transport": "stdio", "command": "node",
                         "args": [reference],
                         "env": {"MEMORY_FILE_PATH": work.join("reference-memory.jsonl")}}),
            ),
        ),
        McpTarget::NullStdio => node_calls(
            script,
            &with(
                json!({"kind": "null", "transport": "stdio", "command": "node",
                         "args": [null_server, "stdio"]}),
            ),
        ),
        McpTarget::NullHttp => {
            let server = NullHttpServer::start(null_server)?;
            node_calls(
                script,
                &with(json!({"kind": "null", "transport": "http", "url": server.url})),
            )
        }
    }
}

/// The figures of a client of this process (`run`: rmcp's or the raw one) against `t` (the
/// same servers, stores and calls as the SDK client's, from `base`'s `calls` and
/// `concurrency`).
fn rust_side(
    run: fn(Kind, Endpoint, usize, usize) -> Result<Side>,
    t: McpTarget,
    base: &serde_json::Value,
    binary: &Path,
    reference: &Path,
    null_server: &Path,
    work: &Path,
) -> Result<Side> {
    let calls = base["calls"]
        .as_u64()
        .and_then(|c| usize::try_from(c).ok())
        .context("no calls")?;
    let concurrency = base["concurrency"]
        .as_u64()
        .and_then(|c| usize::try_from(c).ok())
        .context("no concurrency")?;
    let stdio = |command: &str, args: Vec<std::ffi::OsString>| Endpoint::Stdio {
        command: command.into(),
        args,
        env: Vec::new(),
    };
    match t {
        McpTarget::MnemonHttp => {
            let server = ServerProcess::start(binary, work, None)?;
            let side = run(
                Kind::Mnemon,
                Endpoint::Http(format!("http://{}/mcp", server.addr)),
                calls,
                concurrency,
            );
            server.stop()?;
            side
        }
        McpTarget::MnemonStdio => run(
            Kind::Mnemon,
            Endpoint::Stdio {
                command: binary.into(),
                args: mnemon_mcp_args(work),
                env: Vec::new(),
            },
            calls,
            concurrency,
        ),
        McpTarget::Reference => run(
            Kind::Reference,
            Endpoint::Stdio {
                command: "node".into(),
                args: vec![reference.into()],
                env: vec![(
                    "MEMORY_FILE_PATH".to_owned(),
                    work.join("reference-memory.jsonl").into(),
                )],
            },
            calls,
            concurrency,
        ),
        McpTarget::NullStdio => run(
            Kind::Null,
            stdio("node", vec![null_server.into(), "stdio".into()]),
            calls,
            concurrency,
        ),
        McpTarget::NullHttp => {
            let server = NullHttpServer::start(null_server)?;
            run(
                Kind::Null,
                Endpoint::Http(server.url.clone()),
                calls,
                concurrency,
            )
        }
    }
}

/// xtask/bench/mcp_null_server.cjs over HTTP, killed when dropped.
struct NullHttpServer {
    child: Child,
    url: String,
}

impl NullHttpServer {
    fn start(script: &Path) -> Result<NullHttpServer> {
        let mut child = Command::new("node")
            .arg(script)
            .args(["http", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("running node (install Node.js)")?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut server = NullHttpServer {
            child,
            url: String::new(),
        };
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .context("the null MCP server did not report its address within 30 s")?;
        server.url = line
            .trim()
            .strip_prefix("listening on ")
            .with_context(|| format!("the null MCP server printed {line:?}"))?
            .to_owned();
        Ok(server)
    }
}

impl Drop for NullHttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The reference server's entry point under `node_dir`, installed from npm on first use; or
/// why it cannot be.
fn install_reference(node_dir: &Path) -> Result<PathBuf, String> {
    let index = node_dir.join("node_modules/@modelcontextprotocol/server-memory/dist/index.js");
    let reference = node_dir.join("node_modules/@modelcontextprotocol/server-memory/package.json");
    let sdk = node_dir.join("node_modules/@modelcontextprotocol/sdk/package.json");
    // Installed at the pinned releases (an earlier install of others is replaced).
    let version_of = |manifest: &Path| -> Option<String> {
        let text = std::fs::read_to_string(manifest).ok()?;
        let value: serde_json::Value = serde_json::from_str(&text).ok()?;
        value["version"].as_str().map(str::to_owned)
    };
    let pinned = || {
        index.is_file()
            && version_of(&reference).as_deref() == Some(REFERENCE_VERSION)
            && version_of(&sdk).as_deref() == Some(SDK_VERSION)
    };
    if pinned() {
        return Ok(index);
    }
    std::fs::create_dir_all(node_dir)
        .map_err(|e| format!("creating {}: {e}", node_dir.display()))?;
    eprintln!(
        "installing {REFERENCE_PACKAGE}@{REFERENCE_VERSION} into {} (npm) ...",
        node_dir.display()
    );
    let status = Command::new("npm")
        .arg("install")
        .arg("--prefix")
        .arg(node_dir)
        .args([
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            &format!("{REFERENCE_PACKAGE}@{REFERENCE_VERSION}"),
            &format!("@modelcontextprotocol/sdk@{SDK_VERSION}"),
        ])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("running npm (install Node.js and npm): {e}"))?;
    if !status.success() || !pinned() {
        return Err(format!("npm install {REFERENCE_PACKAGE} failed ({status})"));
    }
    Ok(index)
}

/// Runs xtask/bench/mcp_calls.cjs with `config` (at most [`NODE_TIMEOUT`]) and reads its report.
fn node_calls(script: &Path, config: &serde_json::Value) -> Result<Side> {
    let mut child = Command::new("node")
        .arg(script)
        .arg(config.to_string())
        // What `mnemon mcp` inherits through the client: the stores it names in `config` only.
        .env_remove("MNEMON_DATABASE_URL")
        .env_remove("MNEMON_NAMESPACE")
        .env_remove("MNEMON_CONFIG_FILE")
        .env_remove("MNEMON_EMBEDDING_MODEL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("running node (install Node.js)")?;
    let mut stdout = child.stdout.take().context("no stdout pipe")?;
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).map(|_| out)
    });
    let deadline = Instant::now() + NODE_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{} ran for more than {NODE_TIMEOUT:?}", script.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader
        .join()
        .map_err(|_| anyhow!("the reader thread panicked"))??;
    if !status.success() {
        bail!(
            "{} failed ({status}): see its output above",
            script.display()
        );
    }
    let report: serde_json::Value = serde_json::from_str(out.trim())
        .with_context(|| format!("{} printed no JSON report: {out:?}", script.display()))?;
    Side::from_report(&report)
}

/// Milliseconds with two decimals, `–` for none.
fn ms(v: f64) -> String {
    if v.is_nan() {
        "–".to_owned()
    } else {
        format!("{v:.2}")
    }
}

fn mb(kb: u64) -> String {
    format!("{:.0}", kb as f64 / 1024.0)
}

impl Run {
    /// The workload, with its tenants and its pace when it has them.
    fn label(&self) -> String {
        let mut label = self.workload.name().to_owned();
        if self.tenants > 0 {
            label.push_str(&format!(" over {} tenants", self.tenants));
        }
        if let Some(rate) = self.paced {
            label.push_str(&format!(" paced {}/s", thousands(rate)));
        }
        label
    }

    /// The table's cells for this run.
    fn cells(&self) -> Vec<String> {
        let o = &self.outcome;
        let all = o.all_sorted();
        vec![
            self.backend.to_owned(),
            self.label(),
            self.clients.to_string(),
            thousands(o.ok() as f64),
            thousands(o.rate()),
            ms(percentile_ms(&all, 50.0)),
            ms(percentile_ms(&all, 99.0)),
            o.errors.to_string(),
            format!(
                "{} / {} / {}",
                mb(o.rss.start),
                mb(o.rss.peak),
                mb(o.rss.end)
            ),
            o.fds.to_string(),
            format!("{:.2}", o.server_cpu),
            format!("{:.2}", o.client_cpu),
            format!(
                "{:.1} / {:.1}",
                o.machine.worst_sync.as_secs_f64() * 1e3,
                o.machine.worst_lag.as_secs_f64() * 1e3
            ),
        ]
    }

    /// p50 / p99 of each operation the run sent.
    fn per_op(&self) -> String {
        Op::ALL
            .iter()
            .filter(|op| !self.outcome.latencies_us[op.index()].is_empty())
            .map(|op| {
                let l = &self.outcome.latencies_us[op.index()];
                format!(
                    "{} {} × {} / {} ms",
                    op.name(),
                    thousands(l.len() as f64),
                    ms(percentile_ms(l, 50.0)),
                    ms(percentile_ms(l, 99.0))
                )
            })
            .chain(
                self.outcome
                    .failures
                    .iter()
                    .map(|(kind, (n, message))| format!("errors: {kind} × {n} (first: {message})")),
            )
            .collect::<Vec<_>>()
            .join("; ")
    }
}

const HEADERS: [&str; 13] = [
    "backend",
    "workload",
    "clients",
    "answers",
    "answers/s",
    "p50 ms",
    "p99 ms",
    "errors",
    "server RSS MB start / peak / end",
    "server fds (end)",
    "server CPU (cores)",
    "client CPU (cores)",
    "machine: worst fsync / sleep overrun ms",
];

/// A markdown table of `rows` under [`HEADERS`], columns padded to their widest cell.
fn table(rows: &[Vec<String>]) -> String {
    aligned_table(&HEADERS, 2, rows)
}

/// The MCP table's columns.
const MCP_HEADERS: [&str; 12] = [
    "client",
    "server",
    "calls",
    "in flight",
    "acked adds/s",
    "kept adds/s",
    "add p50 / p99 ms",
    "searches/s",
    "search p50 / p99 ms",
    "kept calls/s",
    "errors",
    "adds kept",
];

/// A markdown table of the MCP runs under [`MCP_HEADERS`].
fn mcp_table(rows: &[Vec<String>]) -> String {
    aligned_table(&MCP_HEADERS, 2, rows)
}

/// One row of the MCP table: `client`'s figures against `t` at `calls` and `concurrency`, or why
/// it has none.
fn mcp_cells(
    client: McpClient,
    calls: usize,
    concurrency: usize,
    t: McpTarget,
    side: &Result<Side, String>,
) -> Vec<String> {
    let mut cells = vec![
        client.label().to_owned(),
        t.label().to_owned(),
        thousands(calls as f64),
        concurrency.to_string(),
    ];
    match side {
        Ok(s) => cells.extend([
            thousands(s.adds.rate()),
            thousands(s.kept_add_rate()),
            format!(
                "{} / {}",
                ms(percentile_ms(&s.adds.latencies_us, 50.0)),
                ms(percentile_ms(&s.adds.latencies_us, 99.0))
            ),
            thousands(s.searches.rate()),
            format!(
                "{} / {}",
                ms(percentile_ms(&s.searches.latencies_us, 50.0)),
                ms(percentile_ms(&s.searches.latencies_us, 99.0))
            ),
            thousands(s.kept_rate()),
            (s.adds.errors + s.searches.errors).to_string(),
            s.kept.map_or_else(
                || "–".to_owned(),
                |kept| {
                    format!(
                        "{} of {}",
                        thousands(kept as f64),
                        thousands(s.adds.latencies_us.len() as f64)
                    )
                },
            ),
        ]),
        Err(why) => {
            cells.push(format!("failed: {why}"));
            cells.extend(std::iter::repeat_n(String::new(), 7));
        }
    }
    cells
}

/// A markdown table of `rows` under `headers`, columns padded to their widest cell, the first
/// `text_columns` to the left and the figures to the right.
fn aligned_table(headers: &[&str], text_columns: usize, rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..headers.len())
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .chain([headers[c].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (s, &w))| {
                // Text columns to the left, figures to the right.
                if c < text_columns {
                    format!("{s:<w$}")
                } else {
                    format!("{s:>w$}")
                }
            })
            .collect();
        format!("| {} |", padded.join(" | "))
    };
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    let mut out = line(&header);
    out.push('\n');
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(c, &w)| {
            if c < text_columns {
                "-".repeat(w + 2)
            } else {
                format!("{}:", "-".repeat(w + 1))
            }
        })
        .collect();
    out.push_str(&format!("|{}|", rule.join("|")));
    for row in rows {
        out.push('\n');
        out.push_str(&line(row));
    }
    out
}

/// One MCP configuration's verdict for one of Mnemon's transports: its kept adds/s, searches/s
/// and kept calls/s over the reference's, each met only at ≥ 5× with no Mnemon error (and not
/// judged at all when the reference failed a call: "not comparable"). Adds are
/// judged on the adds each server still held afterwards: an acknowledged add that the server
/// lost (the reference's concurrent adds overwrite each other) is not throughput.
fn judge_mcp(mnemon: &Result<Side, String>, reference: Option<&Result<Side, String>>) -> String {
    let mnemon = match mnemon {
        Ok(side) => side,
        Err(why) => return format!("not measured: Mnemon failed ({why}) UNMET"),
    };
    let reference = match reference {
        Some(Ok(side)) => side,
        Some(Err(why)) => return format!("not measured: the reference failed ({why})"),
        None => return "not measured: no reference run".to_owned(),
    };
    // A reference that failed calls is slower by its failures' time and faster by their
    // missing answers: no ratio against it is a fair one.
    let reference_errors = reference.adds.errors + reference.searches.errors;
    if reference_errors > 0 {
        let errors = mnemon.adds.errors + mnemon.searches.errors;
        // Mnemon's own errors still fail its target.
        let own = if errors > 0 {
            format!(" {}", verdict(false))
        } else {
            String::new()
        };
        return format!(
            "not comparable: the reference failed {reference_errors} calls (Mnemon: {errors}){own}"
        );
    }
    let errors = mnemon.adds.errors + mnemon.searches.errors;
    let judged = |what: &str, m: f64, r: f64| -> String {
        let ratio = if r > 0.0 { m / r } else { f64::NAN };
        let met = ratio >= TARGET_MCP_RATIO && errors == 0;
        format!(
            "{what} {}/s vs {}/s = {ratio:.2}× {}",
            thousands(m),
            thousands(r),
            verdict(met)
        )
    };
    let lost = |side: &Side| {
        side.kept
            .filter(|&kept| kept < side.adds.latencies_us.len() as u64)
            .map(|kept| (kept, side.adds.latencies_us.len()))
    };
    let mut text = [
        judged(
            "kept adds",
            mnemon.kept_add_rate(),
            reference.kept_add_rate(),
        ),
        judged(
            "searches",
            mnemon.searches.rate(),
            reference.searches.rate(),
        ),
        judged("kept calls", mnemon.kept_rate(), reference.kept_rate()),
    ]
    .join("; ");
    if errors > 0 {
        text.push_str(&format!(" ({errors} mnemon errors)"));
    }
    if let Some((kept, acknowledged)) = lost(reference) {
        text.push_str(&format!(
            " (the reference kept {} of its {} acknowledged adds; acked adds {}/s)",
            thousands(kept as f64),
            thousands(acknowledged as f64),
            thousands(reference.adds.rate())
        ));
    }
    if let Some((kept, acknowledged)) = lost(mnemon) {
        text.push_str(&format!(
            " (Mnemon kept {} of its {} acknowledged adds)",
            thousands(kept as f64),
            thousands(acknowledged as f64)
        ));
    }
    text
}

impl Report {
    /// The runs of `workload` on `backend` in the default namespace (`tenants` 0) or spread
    /// over namespaces (any other).
    fn runs_of(
        &self,
        backend: &str,
        workload: Workload,
        tenants: bool,
    ) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(move |r| {
            r.backend == backend && r.workload == workload && (r.tenants > 0) == tenants
        })
    }

    /// Issue 15's targets, each with the figures it is judged on and whether they meet it. A
    /// run with errors does not meet a target.
    fn targets(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let judge = |runs: Vec<&Run>, least: f64, p99_ms: Option<f64>| -> String {
            if runs.is_empty() {
                return "not measured".to_owned();
            }
            runs.iter()
                .map(|r| {
                    let o = &r.outcome;
                    let p99 = percentile_ms(&o.all_sorted(), 99.0);
                    let mut met = o.rate() >= least && o.errors == 0;
                    let mut text = match r.paced {
                        Some(rate) => format!(
                            "{} clients paced at {}/s: {}/s",
                            r.clients,
                            thousands(rate),
                            thousands(o.rate())
                        ),
                        None => format!("{} clients {}/s", r.clients, thousands(o.rate())),
                    };
                    if let Some(most) = p99_ms {
                        met &= p99 <= most;
                        text.push_str(&format!(" p99 {} ms", ms(p99)));
                    }
                    if o.errors > 0 {
                        text.push_str(&format!(" ({} errors)", o.errors));
                    }
                    format!("{text} {}", verdict(met))
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        lines.push(format!(
            "SQLite ≥ {} asset resolves/s: {}",
            thousands(TARGET_RESOLVES),
            judge(
                self.runs_of("SQLite", Workload::Resolves, false).collect(),
                TARGET_RESOLVES,
                None
            )
        ));
        // The mixed targets, in the default namespace and then spread over the tenants' (each
        // request with its namespace's key), where the run had them.
        for tenants in [false, true] {
            let over = match self.runs.iter().map(|r| r.tenants).max() {
                Some(n) if tenants && n > 0 => format!(", over {n} tenants"),
                _ if tenants => continue,
                _ => String::new(),
            };
            lines.push(format!(
                "SQLite ≥ {} mixed requests/s at p99 ≤ {TARGET_MIX_P99_MS} ms{over}: {}",
                thousands(TARGET_MIX_SQLITE),
                judge(
                    self.runs_of("SQLite", Workload::Mix, tenants).collect(),
                    TARGET_MIX_SQLITE,
                    Some(TARGET_MIX_P99_MS)
                )
            ));
            lines.push(format!(
                "PostgreSQL ≥ {} mixed requests/s{over}: {}",
                thousands(TARGET_MIX_POSTGRES),
                judge(
                    self.runs_of("PostgreSQL", Workload::Mix, tenants).collect(),
                    TARGET_MIX_POSTGRES,
                    None
                )
            ));
        }
        let title = format!(
            "MCP tool calls ≥ {TARGET_MCP_RATIO}× the reference memory server's rate (same \
             client, same calls)"
        );
        match &self.mcp {
            None => lines.push(format!("{title}: not measured")),
            Some(McpReport {
                unavailable: Some(why),
                ..
            }) => lines.push(format!(
                "{title}: not measured: the SDK and the reference server could not run ({why})"
            )),
            Some(McpReport { configs, .. }) => {
                for config in configs {
                    for (t, side) in config.sides.iter().filter(|(t, _)| t.judged()) {
                        let head = format!(
                            "{title}, {} client, {} calls, {} in flight, {}",
                            config.client.label(),
                            thousands(config.calls as f64),
                            config.concurrency,
                            t.label()
                        );
                        lines.push(format!(
                            "{head}: {}",
                            judge_mcp(side, config.side(McpTarget::Reference))
                        ));
                    }
                }
            }
        }
        lines
    }

    fn print(&self, p: &Params) {
        println!(
            "\nmnemon serve under load: {} s per run, keep-alive HTTP/1.1 clients {:?}, \
             {} sessions × {} seeded messages, {} assets, mix resolve:add:recall = {}:{}:{}, \
             embedder {EMBEDDING_MODEL}, durability {}",
            p.seconds,
            p.clients,
            p.sessions,
            p.messages,
            p.assets,
            p.mix[0],
            p.mix[1],
            p.mix[2],
            p.durability
        );
        println!(
            "load average before: {}; after: {} (the machine is shared: indicative figures)",
            self.load.0, self.load.1
        );
        let rows: Vec<Vec<String>> = self.runs.iter().map(Run::cells).collect();
        println!("{}", table(&rows));
        println!(
            "answers/s: 2xx answers (MCP: no tool error) over the wall time of the run; \
             latency from the request's first byte written to its answer's last byte read (paced \
             runs: from the time the request was due); CPU: \
             cores' worth over the run (the client is this process, one thread); machine: \
             the slowest 4 KiB write + fdatasync beside the stores, and the longest overrun of a \
             100 ms sleep, over the run (probes every 100 ms: tens of ms there mean the shared \
             machine itself stalled)."
        );
        println!("per operation (answers × p50 / p99):");
        for run in &self.runs {
            println!(
                "- {} {} {} clients: {}",
                run.backend,
                run.label(),
                run.clients,
                run.per_op()
            );
        }
        if !self.stops.is_empty() {
            let stops: Vec<String> = self
                .stops
                .iter()
                .map(|(label, outcome)| match outcome {
                    Ok(took) => format!("{label} {:.2} s", took.as_secs_f64()),
                    Err(error) => format!("{label}: {error} (killed)"),
                })
                .collect();
            println!(
                "server stops (SIGTERM to exit, in-flight requests drained, stores closed): {}",
                stops.join("; ")
            );
        }
        if let Some(mcp) = &self.mcp {
            println!(
                "\nMCP, three clients making the same calls: the official TypeScript SDK's \
                 ({SDK_VERSION}; xtask/bench/mcp_calls.cjs, Node.js), rmcp's (Rust, one thread of this \
                 process) and raw JSON-RPC (pipelined over stdio, keep-alive over HTTP; one \
                 thread of this process): N adds then N searches over {MCP_GROUPS} sessions / \
                 entities, C calls in flight on one session, every server on fresh stores; \
                 Mnemon: remember, recall (top 5); the reference ({REFERENCE_PACKAGE} \
                 {REFERENCE_VERSION}): add_observations, \
                 search_nodes (which answers the entity with all its observations); client \
                 floor: a null server that answers at once (no server over that transport can \
                 be timed faster by that client). Kept adds: the acknowledged adds the server \
                 held after the add phase, read back through its own tools; the lost ones are \
                 then made again one at a time, off the clock, so that every server searches \
                 N adds; kept adds/s and kept calls/s count only the kept ones, and the targets \
                 are judged on them:"
            );
            match &mcp.unavailable {
                Some(why) => {
                    println!("(not measured: the SDK and {REFERENCE_PACKAGE} could not run: {why})")
                }
                None => {
                    let rows: Vec<Vec<String>> = mcp
                        .configs
                        .iter()
                        .flat_map(|c| {
                            c.sides.iter().map(|(t, side)| {
                                mcp_cells(c.client, c.calls, c.concurrency, *t, side)
                            })
                        })
                        .collect();
                    println!("{}", mcp_table(&rows));
                }
            }
        }
        println!("\nissue 15's targets:");
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
    fn a_key_goes_in_a_header_after_the_request_line() {
        let plain = http_request("POST", "/v1/x", "127.0.0.1:9", Some("{}"));
        let keyed = String::from_utf8(with_key(plain, "mk_abc")).unwrap_or_default();
        assert_eq!(
            keyed,
            "POST /v1/x HTTP/1.1\r\nAuthorization: Bearer mk_abc\r\nHost: 127.0.0.1:9\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: 2\r\n\r\n{}"
        );
    }

    #[test]
    fn arguments_parse_with_their_defaults() {
        let p = parsed("");
        assert_eq!(p.clients, vec![8, 64]);
        assert!((p.seconds - 10.0).abs() < 1e-12);
        assert_eq!((p.sessions, p.messages, p.assets), (16, 50, 200));
        assert_eq!(p.mix, [1, 1, 1]);
        assert_eq!(p.mcp_calls, vec![1_000, 10_000]);
        assert_eq!(p.mcp_concurrency, vec![1, 8]);
        assert_eq!(p.durability, "full");
        assert_eq!(p.tenants, 64);
        assert_eq!(parsed("--tenants 0").tenants, 0);
        assert!(parse(&args("--tenants 1001")).is_err());
        assert_eq!(parsed("--durability normal").durability, "normal");
        let p = parsed(
            "--clients 4,16 --seconds 2.5 --sessions 3 --messages 0 --assets 9 --mix 2:1:0 \
             --mcp-calls 50 --mcp-concurrency 4,16 --skip-postgres --skip-reference",
        );
        assert_eq!(p.clients, vec![4, 16]);
        assert!((p.seconds - 2.5).abs() < 1e-12);
        assert_eq!(
            (p.sessions, p.messages, p.assets, p.mix),
            (3, 0, 9, [2, 1, 0])
        );
        assert_eq!(p.mcp_calls, vec![50]);
        assert_eq!(p.mcp_concurrency, vec![4, 16]);
        assert!(p.skip_postgres && p.skip_reference);
        assert!(!p.mcp_only && p.mnemon.is_none());
        assert_eq!(p.paced, None);
        assert_eq!(
            parsed("--paced 3000,5000").paced,
            Some(vec![3_000.0, 5_000.0])
        );
        assert_eq!(parsed("--paced 0").paced, Some(vec![]));
        let p = parsed("--mcp-only --mnemon /tmp/mnemon-before");
        assert!(p.mcp_only);
        assert_eq!(p.mnemon, Some(PathBuf::from("/tmp/mnemon-before")));
        assert!(matches!(parse(&args("--help")), Ok(None)));
    }

    #[test]
    fn the_default_durability_adds_no_argument() {
        // `--mnemon` measures builds from before `--durability`, which refuse the flag: the
        // default must leave every command line as it was (`run` alone sets `DURABILITY`).
        assert_eq!(durability(), "full");
        assert!(global_args().is_empty());
        let args = mnemon_mcp_args(Path::new("w"));
        assert_eq!(
            args,
            [
                "--data-dir",
                "w/data",
                "mcp",
                "--embedding-model",
                EMBEDDING_MODEL
            ]
            .map(std::ffi::OsString::from)
        );
    }

    #[test]
    fn bad_arguments_say_what_to_fix() {
        for (words, says) in [
            ("--clients", "needs a value"),
            ("--clients 0", "1 to 256"),
            ("--clients 8,x", "whole number"),
            ("--clients 300", "1 to 256"),
            ("--seconds 0.1", "0.5 to 120"),
            ("--seconds 1000", "0.5 to 120"),
            ("--seconds soon", "needs a number"),
            ("--mix 1:1", "R:A:S"),
            ("--mix 0:0:0", "not all 0"),
            ("--mix a:b:c", "three whole numbers"),
            ("--sessions 0", "1 to 1000"),
            ("--mnemon", "needs a value"),
            ("--paced 200000", "0 to 100000"),
            ("--paced fast", "whole number"),
            ("--fast", "unknown argument"),
            ("--durability off", "full or normal"),
        ] {
            match parse(&args(words)) {
                Err(error) => assert!(error.to_string().contains(says), "{words}: {error}"),
                Ok(p) => panic!("{words:?} was accepted: {p:?}"),
            }
        }
    }

    #[test]
    fn percentiles_are_nearest_rank_in_ms() {
        let sorted: Vec<u32> = (1..=100).map(|ms| ms * 1000).collect();
        assert!((percentile_ms(&sorted, 50.0) - 50.0).abs() < 1e-9);
        assert!((percentile_ms(&sorted, 99.0) - 99.0).abs() < 1e-9);
        // 1,000 values: p99 is the 990th (rounding p · (n − 1) gave the 989th).
        let thousand: Vec<u32> = (1..=1000).collect();
        assert!((percentile_ms(&thousand, 99.0) - 0.990).abs() < 1e-9);
        assert!((percentile_ms(&thousand, 0.0) - 0.001).abs() < 1e-9);
        assert!((percentile_ms(&sorted, 100.0) - 100.0).abs() < 1e-9);
        assert!((percentile_ms(&[1500], 99.0) - 1.5).abs() < 1e-9);
        assert!(percentile_ms(&[], 50.0).is_nan());
        assert_eq!(ms(f64::NAN), "–");
    }

    #[test]
    fn the_mix_interleaves_its_proportions() {
        use Op::*;
        assert_eq!(Workload::Mix.cycle([1, 1, 1]), vec![Resolve, Add, Recall]);
        assert_eq!(
            Workload::Mix.cycle([3, 1, 1]),
            vec![Resolve, Add, Recall, Resolve, Resolve]
        );
        assert_eq!(Workload::Mix.cycle([0, 2, 1]), vec![Add, Recall, Add]);
        assert_eq!(Workload::Resolves.cycle([1, 1, 1]), vec![Resolve]);
        assert_eq!(Workload::Mcp.cycle([1, 1, 1]), vec![McpRemember, McpRecall]);
    }

    #[test]
    fn requests_are_http_1_1_with_their_bodies() {
        let p = parsed("--sessions 4 --assets 10");
        let text = |op, n| {
            String::from_utf8(request(op, n, Shape::of(&p), "127.0.0.1:9")).unwrap_or_default()
        };
        let resolve = text(Op::Resolve, 13);
        let (asset, label) = (spread(13, 2) % 10, spread(13, 3) % LABELS);
        assert_eq!(
            resolve,
            format!(
                "GET /v1/resolve?reference=asset://bench-{asset}/content/labels/{label} \
                 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"
            )
        );
        let add = text(Op::Add, 6);
        let (head, body) = add.split_once("\r\n\r\n").unwrap_or_default();
        let session = format!("s-{}", spread(6, 1) % 4);
        assert!(
            head.starts_with(&format!(
                "POST /v1/memory/sessions/{session}/messages HTTP/1.1"
            )),
            "{head}"
        );
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{head}"
        );
        let body: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        assert_eq!(body["messages"][0]["content"], note(6));
        let mcp = text(Op::McpRecall, 5);
        let body: serde_json::Value =
            serde_json::from_str(mcp.split_once("\r\n\r\n").unwrap_or_default().1)
                .unwrap_or_default();
        assert_eq!(body["method"], "tools/call");
        assert_eq!(body["params"]["name"], "recall");
        assert_eq!(
            body["params"]["arguments"]["session"],
            format!("s-{}", spread(5, 1) % 4)
        );
    }

    #[test]
    fn every_client_and_operation_reaches_every_session() {
        // Client w of 8 sends request n = step * 8 + w; a 2-step cycle alternates operations.
        // Each (client, operation) pair must still reach all 16 sessions.
        let shape = Shape {
            sessions: 16,
            assets: 200,
        };
        for w in 0..8u64 {
            for op in 0..2u64 {
                let sessions: std::collections::BTreeSet<String> = (0..400u64)
                    .filter(|step| (w + step) % 2 == op)
                    .map(|step| session_of(step * 8 + w, shape))
                    .collect();
                assert_eq!(
                    sessions.len(),
                    16,
                    "client {w}, operation {op}: {sessions:?}"
                );
            }
        }
    }

    #[test]
    fn failures_are_named_by_operation_status_and_code() {
        let rest = br#"{"error":{"code":"busy","message":"try again"}}"#;
        assert_eq!(failure_kind(Op::Add, 503, rest), "add 503 busy");
        assert_eq!(failure_kind(Op::Recall, 500, b"oops"), "recall 500 ?");
        let text = json!({"error": {"code": "session_not_found", "message": "m"}}).to_string();
        let tool = json!({"jsonrpc": "2.0", "id": 1, "result": {"isError": true, "content": [
            {"type": "text", "text": text}]}});
        assert_eq!(
            failure_kind(Op::McpRecall, 200, tool.to_string().as_bytes()),
            "MCP recall 200 session_not_found"
        );
        let protocol = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no tool"}}"#;
        assert_eq!(
            failure_kind(Op::McpRemember, 200, protocol),
            "MCP remember 200 no tool"
        );
    }

    #[test]
    fn failures_count_and_keep_the_first_message() {
        let mut failures = Failures::new();
        count_failure(&mut failures, "add 503 busy".to_owned(), || {
            "first".to_owned()
        });
        count_failure(&mut failures, "add 503 busy".to_owned(), || {
            "second".to_owned()
        });
        count_failure(&mut failures, "connect".to_owned(), || "x".repeat(400));
        assert_eq!(failures["add 503 busy"], (2, "first".to_owned()));
        assert_eq!(failures["connect"].1.len(), 300);
    }

    #[test]
    fn response_heads_parse() {
        let head = parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx: y\r\n\r\nhello");
        assert_eq!(
            head,
            Ok(Some(Head {
                status: 200,
                len: 44,
                framing: Framing::Length(5)
            }))
        );
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-len"), Ok(None));
        let chunked = parse_head(b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert!(matches!(
            chunked,
            Ok(Some(Head {
                status: 404,
                framing: Framing::Chunked,
                ..
            }))
        ));
        let not_modified = parse_head(b"HTTP/1.1 304 Not Modified\r\netag: x\r\n\r\n");
        assert!(matches!(
            not_modified,
            Ok(Some(Head {
                framing: Framing::Length(0),
                ..
            }))
        ));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n\r\n").is_err());
        assert!(parse_head(b"SPDY 200\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: lots\r\n\r\n").is_err());
        assert!(parse_head(&vec![b'a'; MAX_HEAD + 1]).is_err());
    }

    #[test]
    fn chunked_bodies_are_measured_when_complete() {
        let body = b"5\r\nhello\r\n3;ext\r\nabc\r\n0\r\n\r\nNEXT";
        assert_eq!(chunked_len(body), Ok(Some(body.len() - 4)));
        for cut in 0..body.len() - 4 {
            assert_eq!(chunked_len(&body[..cut]), Ok(None), "cut at {cut}");
        }
        assert!(chunked_len(b"zz\r\n").is_err());
    }

    #[test]
    fn mcp_answers_are_judged_by_their_result() {
        assert!(mcp_ok(
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}"#
        ));
        assert!(mcp_ok(
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#
        ));
        assert!(!mcp_ok(
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#
        ));
        assert!(!mcp_ok(
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no tool"}}"#
        ));
        assert!(!mcp_ok(b"not json"));
    }

    #[test]
    fn cpu_ticks_come_from_the_stat_line() {
        // A command name with a space and a parenthesis; utime 250, stime 50.
        let stat = "1234 (my (proc) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        assert_eq!(cpu_ticks(stat), Some(300));
        assert_eq!(cpu_ticks("1234 (short) S 1"), None);
        // This process's own line parses (Linux).
        if let Ok(own) = std::fs::read_to_string("/proc/self/stat") {
            assert!(cpu_ticks(&own).is_some(), "{own}");
        }
    }

    #[test]
    fn rss_is_start_peak_and_end() {
        assert_eq!(
            Rss::of(&[100, 300, 200]),
            Rss {
                start: 100,
                peak: 300,
                end: 200
            }
        );
        assert_eq!(Rss::of(&[]), Rss::default());
    }

    fn outcome(ok: usize, latency_us: u32, errors: usize) -> Outcome {
        let mut latencies_us: [Vec<u32>; 5] = Default::default();
        latencies_us[0] = vec![latency_us; ok];
        Outcome {
            latencies_us,
            errors,
            elapsed: Duration::from_secs(1),
            ..Outcome::default()
        }
    }

    fn run(backend: &'static str, workload: Workload, clients: usize, o: Outcome) -> Run {
        Run {
            backend,
            workload,
            tenants: 0,
            clients,
            paced: None,
            outcome: o,
        }
    }

    fn side(adds: usize, searches: usize) -> Side {
        let phase = |n| Phase {
            latencies_us: vec![1_000; n],
            errors: 0,
            wall: Duration::from_secs(1),
        };
        Side {
            adds: phase(adds),
            searches: phase(searches),
            kept: Some(adds as u64),
        }
    }

    #[test]
    fn targets_are_judged_on_the_figures() {
        let report = Report {
            runs: vec![
                run("SQLite", Workload::Resolves, 8, outcome(12_000, 500, 0)),
                run("SQLite", Workload::Resolves, 64, outcome(9_000, 500, 0)),
                // Fast enough, but p99 over 10 ms.
                run("SQLite", Workload::Mix, 8, outcome(4_000, 12_000, 0)),
                // Fast enough, but with errors.
                run("SQLite", Workload::Mix, 64, outcome(4_000, 2_000, 3)),
                run("PostgreSQL", Workload::Mix, 8, outcome(1_600, 2_000, 0)),
                // Paced: judged on what it answered and its p99 from the due times.
                Run {
                    paced: Some(3_150.0),
                    ..run("SQLite", Workload::Mix, 64, outcome(3_100, 4_000, 0))
                },
                // Over tenants: judged on their own line, not with the default namespace's.
                Run {
                    tenants: 64,
                    ..run("SQLite", Workload::Mix, 64, outcome(3_500, 11_000, 0))
                },
            ],
            mcp: Some(McpReport {
                configs: vec![
                    McpConfig {
                        client: McpClient::Sdk,
                        calls: 1_000,
                        concurrency: 1,
                        sides: vec![
                            (McpTarget::MnemonHttp, Ok(side(600, 100))),
                            (McpTarget::MnemonStdio, Err("mnemon mcp exited".to_owned())),
                            (McpTarget::Reference, Ok(side(100, 100))),
                            // A floor is shown, never judged.
                            (McpTarget::NullStdio, Ok(side(100_000, 100_000))),
                        ],
                    },
                    McpConfig {
                        client: McpClient::Rust,
                        calls: 10_000,
                        concurrency: 8,
                        sides: vec![
                            (McpTarget::MnemonHttp, Ok(side(600, 600))),
                            (McpTarget::Reference, Err("node died".to_owned())),
                        ],
                    },
                ],
                unavailable: None,
            }),
            load: Default::default(),
            stops: Vec::new(),
        };
        let t = report.targets();
        assert_eq!(t.len(), 8, "{t:#?}");
        assert!(
            !t[1].contains("11.00 ms"),
            "the tenants' run is not the default namespace's: {}",
            t[1]
        );
        assert!(
            t[3].starts_with("SQLite ≥ 3,000 mixed requests/s at p99 ≤ 10 ms, over 64 tenants: ")
                && t[3].contains("64 clients 3,500/s p99 11.00 ms UNMET"),
            "{}",
            t[3]
        );
        assert!(
            t[4].starts_with("PostgreSQL ≥ 1,500 mixed requests/s, over 64 tenants: not measured"),
            "{}",
            t[4]
        );
        assert!(t[0].contains("8 clients 12,000/s met"), "{}", t[0]);
        assert!(t[0].contains("64 clients 9,000/s UNMET"), "{}", t[0]);
        assert!(
            t[1].contains("8 clients 4,000/s p99 12.00 ms UNMET"),
            "{}",
            t[1]
        );
        assert!(
            t[1].contains("64 clients 4,000/s p99 2.00 ms (3 errors) UNMET"),
            "{}",
            t[1]
        );
        assert!(
            t[1].contains("64 clients paced at 3,150/s: 3,100/s p99 4.00 ms met"),
            "{}",
            t[1]
        );
        assert!(t[2].contains("8 clients 1,600/s met"), "{}", t[2]);
        assert!(
            t[5].contains(
                "TypeScript SDK client, 1,000 calls, 1 in flight, mnemon serve /mcp (HTTP): "
            ),
            "{}",
            t[5]
        );
        assert!(
            t[5].contains("kept adds 600/s vs 100/s = 6.00× met"),
            "{}",
            t[5]
        );
        assert!(
            t[5].contains("searches 100/s vs 100/s = 1.00× UNMET"),
            "{}",
            t[5]
        );
        assert!(
            t[5].contains("kept calls 350/s vs 100/s = 3.50× UNMET"),
            "{}",
            t[5]
        );

        // A transport that failed does not meet the target; a failed reference is not measured.
        assert!(
            t[6].contains("1 in flight, mnemon mcp (stdio): not measured: Mnemon failed (mnemon mcp exited) UNMET"),
            "{}",
            t[6]
        );
        assert!(!t[5].contains("acknowledged"), "nothing lost: {}", t[5]);
        assert!(
            t[7].contains("rmcp (Rust) client, 10,000 calls, 8 in flight, mnemon serve /mcp (HTTP): not measured: the reference failed (node died)"),
            "{}",
            t[7]
        );

        let missing = Report {
            mcp: Some(McpReport {
                configs: Vec::new(),
                unavailable: Some("npm not found".to_owned()),
            }),
            ..Report::default()
        };
        let t = missing.targets();
        assert!(t[0].ends_with("not measured"), "{}", t[0]);
        assert!(t[3].contains("could not run (npm not found)"), "{}", t[3]);
    }

    #[test]
    fn the_table_is_markdown_with_aligned_columns() {
        let r = run("SQLite", Workload::Mix, 8, outcome(2_500, 1_500, 1));
        let text = table(&[r.cells()]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("| backend | workload |"),
            "{}",
            lines[0]
        );
        assert!(lines[1].starts_with("|---------|"), "{}", lines[1]);
        assert!(lines[1].ends_with(":|"), "{}", lines[1]);
        let cells: Vec<&str> = lines[2].split('|').map(str::trim).collect();
        assert_eq!(
            &cells[1..9],
            &["SQLite", "mix", "8", "2,500", "2,500", "1.50", "1.50", "1"]
        );
        // Every line has the same width: the columns line up.
        let width = lines[0].chars().count();
        assert!(lines.iter().all(|l| l.chars().count() == width), "{text}");
        assert_eq!(
            r.per_op(),
            "resolve 2,500 × 1.50 / 1.50 ms",
            "only the operations sent"
        );
    }

    #[test]
    fn the_mcp_table_has_a_row_per_target_and_configuration() {
        let rows = vec![
            mcp_cells(
                McpClient::Sdk,
                1_000,
                1,
                McpTarget::MnemonHttp,
                &Ok(side(600, 300)),
            ),
            mcp_cells(
                McpClient::Rust,
                1_000,
                1,
                McpTarget::Reference,
                &Err("node died".to_owned()),
            ),
        ];
        let text = mcp_table(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        let cells: Vec<&str> = lines[2].split('|').map(str::trim).collect();
        assert_eq!(
            &cells[1..7],
            &[
                "TypeScript SDK",
                "mnemon serve /mcp (HTTP)",
                "1,000",
                "1",
                "600",
                "600"
            ]
        );
        assert!(lines[3].contains("failed: node died"), "{}", lines[3]);
        let width = lines[0].chars().count();
        assert!(lines.iter().all(|l| l.chars().count() == width), "{text}");
    }

    #[test]
    fn lost_adds_are_named_in_the_verdict() {
        let mnemon = side(600, 600);
        let mut reference = side(100, 100);
        reference.kept = Some(14);
        let verdict = judge_mcp(&Ok(mnemon), Some(&Ok(reference)));
        assert!(
            verdict.ends_with(
                "(the reference kept 14 of its 100 acknowledged adds; acked adds 100/s)"
            ),
            "{verdict}"
        );
        // Adds are judged on the kept ones, on both sides.
        assert!(
            verdict.contains("kept adds 600/s vs 14/s = 42.86× met"),
            "{verdict}"
        );
        let mut lossy = side(600, 600);
        lossy.kept = Some(60);
        let verdict = judge_mcp(&Ok(lossy), Some(&Ok(side(100, 100))));
        assert!(
            verdict.contains("kept adds 60/s vs 100/s = 0.60× UNMET"),
            "{verdict}"
        );
        assert!(
            verdict.contains("kept calls 330/s vs 100/s = 3.30× UNMET"),
            "{verdict}"
        );
        assert!(
            verdict.ends_with("(Mnemon kept 60 of its 600 acknowledged adds)"),
            "{verdict}"
        );
        // A reference that failed calls is not a fair denominator.
        let failing = || {
            let mut failing = side(100, 100);
            failing.searches.errors = 3;
            failing
        };
        let verdict = judge_mcp(&Ok(side(600, 600)), Some(&Ok(failing())));
        assert_eq!(
            verdict,
            "not comparable: the reference failed 3 calls (Mnemon: 0)"
        );
        let mut erring = side(600, 600);
        erring.adds.errors = 1;
        let verdict = judge_mcp(&Ok(erring), Some(&Ok(failing())));
        assert!(verdict.ends_with("(Mnemon: 1) UNMET"), "{verdict}");
        let report = json!({
            "adds": {"wall_seconds": 1.0, "seconds": [0.001], "errors": 0},
            "searches": {"wall_seconds": 1.0, "seconds": [0.001], "errors": 0},
            "kept": 1,
        });
        let s = Side::from_report(&report).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.kept, Some(1));
        let row = mcp_cells(McpClient::Rust, 1, 1, McpTarget::MnemonStdio, &Ok(s));
        assert_eq!(row.last().map(String::as_str), Some("1 of 1"));
    }

    #[test]
    fn mcp_sides_read_the_scripts_report() {
        let report = json!({
            "adds": {"wall_seconds": 2.0, "seconds": [0.003, 0.001], "errors": 1},
            "searches": {"wall_seconds": 1.0, "seconds": [0.002, 0.002], "errors": 0},
        });
        let s = Side::from_report(&report).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.kept, None);
        assert_eq!(s.adds.latencies_us, vec![1_000, 3_000]);
        assert_eq!(s.adds.errors, 1);
        assert!((s.adds.rate() - 1.0).abs() < 1e-9);
        assert!((s.searches.rate() - 2.0).abs() < 1e-9);
        // 4 calls in 3 s.
        assert!((s.kept_rate() - 4.0 / 3.0).abs() < 1e-9);
        assert!((s.kept_add_rate() - 1.0).abs() < 1e-9);
        assert!(Side::from_report(&json!({"adds": {}})).is_err());
        let negative = json!({
            "adds": {"wall_seconds": 1.0, "seconds": [-1.0], "errors": 0},
            "searches": {"wall_seconds": 1.0, "seconds": [], "errors": 0},
        });
        assert!(Side::from_report(&negative).is_err());
    }
}
