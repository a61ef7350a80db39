//! The third MCP client of `cargo xtask bench server` (docs/bench-server.md): raw JSON-RPC, no
//! SDK. It makes the same calls as the SDK's client (xtask/bench/mcp_calls.cjs) and rmcp's
//! (`mcp_rust.rs`), but costs microseconds a call, so that the figures are the servers' own
//! rates rather than a client's: the SDK's client costs about 1 ms a call over HTTP, rmcp's
//! 0.3–0.4 ms, and at those floors no server can be timed at 5× a reference answering a few
//! thousand calls a second.
//!
//! - Over stdio it writes request lines to the server's stdin and reads answer lines from its
//!   stdout, `concurrency` requests in flight (the next written as soon as an answer arrives):
//!   pipelining, which newline-delimited JSON-RPC allows and both servers' SDKs handle (each
//!   request is dispatched as it is read).
//! - Over HTTP it posts each request, one at a time, on each of `concurrency` keep-alive
//!   connections, as the load client of step 4 posts `tools/call` (Mnemon's `/mcp` and the null
//!   server answer each POST with one JSON body, without a session).
//!
//! Each run: initialize (over stdio), make the reference's entities if it is the reference,
//! then `calls` adds, the kept count, the top-up to `calls` (see `mcp_rust.rs`), and
//! `calls` searches.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{ChildStdin, ChildStdout};

use super::mcp_calls::{
    Endpoint, Kind, Step, answer_error, answer_ok, count_calls, kept_from, stdio_command, tool_call,
};
use super::{Conn, NODE_TIMEOUT, Phase, Side, http_request};

/// Runs one client session against `endpoint` (at most [`NODE_TIMEOUT`]) on a one-thread
/// runtime of this process.
pub(super) fn run(
    kind: Kind,
    endpoint: Endpoint,
    calls: usize,
    concurrency: usize,
) -> Result<Side> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the raw client's runtime")?;
    runtime.block_on(async move {
        let session = async {
            match endpoint {
                Endpoint::Stdio { command, args, env } => {
                    let mut cmd = stdio_command(&command, &args, env);
                    cmd.stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::null())
                        .kill_on_drop(true);
                    let mut child = cmd
                        .spawn()
                        .with_context(|| format!("starting {}", command.to_string_lossy()))?;
                    let stdin = child.stdin.take().context("no stdin pipe")?;
                    let stdout = child.stdout.take().context("no stdout pipe")?;
                    let mut pipe = Pipe {
                        writer: BufWriter::new(stdin),
                        reader: BufReader::new(stdout),
                        line: String::new(),
                        next_id: 1,
                    };
                    let side = pipe.session(kind, calls, concurrency).await;
                    // Closing stdin ends a stdio server; kill it if it lingers.
                    drop(pipe);
                    if tokio::time::timeout(Duration::from_secs(5), child.wait())
                        .await
                        .is_err()
                    {
                        let _ = child.kill().await;
                    }
                    side
                }
                Endpoint::Http(url) => http_session(kind, &url, calls, concurrency).await,
            }
        };
        tokio::time::timeout(NODE_TIMEOUT, session)
            .await
            .map_err(|_| anyhow!("the raw client ran for more than {NODE_TIMEOUT:?}"))?
    })
}

/// A JSON-RPC `tools/call` request of `tool` with `arguments`, as one line of text.
fn call_line(id: u64, (tool, arguments): (&'static str, Value)) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
    .to_string()
}

/// A stdio server's pipes.
struct Pipe {
    writer: BufWriter<ChildStdin>,
    reader: BufReader<ChildStdout>,
    line: String,
    next_id: u64,
}

impl Pipe {
    async fn send(&mut self, line: &str) -> Result<()> {
        self.writer.write_all(line.as_bytes()).await?;
        self.writer.write_all(b"\n").await?;
        Ok(())
    }

    /// The next answer (a message with an `id`), skipping notifications and requests.
    async fn answer(&mut self) -> Result<(u64, Value)> {
        loop {
            self.line.clear();
            if self.reader.read_line(&mut self.line).await? == 0 {
                bail!("the server closed its stdout");
            }
            let Ok(message) = serde_json::from_str::<Value>(self.line.trim()) else {
                continue;
            };
            if message.get("method").is_some() {
                continue;
            }
            if let Some(id) = message.get("id").and_then(Value::as_u64) {
                return Ok((id, message));
            }
        }
    }

    /// One request, its answer awaited.
    async fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(&line.to_string()).await?;
        self.writer.flush().await?;
        loop {
            let (got, answer) = self.answer().await?;
            if got == id {
                return Ok(answer);
            }
        }
    }

    async fn session(&mut self, kind: Kind, calls: usize, concurrency: usize) -> Result<Side> {
        let init = self
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "mnemon-bench-raw", "version": "1.0.0"}}),
            )
            .await
            .context("initializing the MCP session")?;
        if init.get("result").is_none() {
            bail!("initialize failed: {}", init["error"]);
        }
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await?;
        run_calls(self, kind, calls, concurrency).await
    }
}

impl Caller for Pipe {
    async fn tool(&mut self, call: (&'static str, Value)) -> Result<Value> {
        let (name, arguments) = call;
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// The calls of `step` numbered `range`, `concurrency` in flight, pipelined.
    async fn phase(
        &mut self,
        kind: Kind,
        step: Step,
        range: std::ops::Range<usize>,
        concurrency: usize,
    ) -> Result<Phase> {
        let mut sent: HashMap<u64, Instant> = HashMap::new();
        let mut phase = Phase::default();
        let mut first_error = None;
        let mut next = range.start;
        let started = Instant::now();
        while next < range.end || !sent.is_empty() {
            let mut wrote = false;
            while sent.len() < concurrency.max(1) && next < range.end {
                let Some(call) = tool_call(kind, step, next) else {
                    bail!("no {step:?} call for this server");
                };
                let id = self.next_id;
                self.next_id += 1;
                self.send(&call_line(id, call)).await?;
                sent.insert(id, Instant::now());
                next += 1;
                wrote = true;
            }
            if wrote {
                self.writer.flush().await?;
            }
            let (id, answer) = self.answer().await?;
            let Some(at) = sent.remove(&id) else {
                continue;
            };
            if answer_ok(&answer) {
                phase.latencies_us.push(micros(at.elapsed()));
            } else {
                phase.errors += 1;
                first_error.get_or_insert_with(|| answer_error(&answer));
            }
        }
        Ok(phase.finish(started, "raw client", first_error))
    }
}

/// How a session makes calls: one awaited, or a phase of many.
trait Caller {
    /// One call, its answer awaited.
    async fn tool(&mut self, call: (&'static str, Value)) -> Result<Value>;
    /// The calls of `step` numbered `range`, `concurrency` in flight.
    async fn phase(
        &mut self,
        kind: Kind,
        step: Step,
        range: std::ops::Range<usize>,
        concurrency: usize,
    ) -> Result<Phase>;
}

/// A run after the handshake: the reference's entities, `calls` adds, the kept count, the
/// top-up (the lost adds again, one at a time, off the clock: see `mcp_rust.rs`), and `calls`
/// searches.
async fn run_calls(
    caller: &mut impl Caller,
    kind: Kind,
    calls: usize,
    concurrency: usize,
) -> Result<Side> {
    if let Some(setup) = tool_call(kind, Step::Setup, 0) {
        let made = caller.tool(setup).await.context("create_entities")?;
        if !answer_ok(&made) {
            bail!("create_entities failed: {}", answer_error(&made));
        }
    }
    let adds = caller.phase(kind, Step::Add, 0..calls, concurrency).await?;
    let mut kept = None;
    for (i, call) in count_calls(kind, calls).into_iter().enumerate() {
        let answer = caller.tool(call).await.context("counting the kept adds")?;
        kept = Some(kept.unwrap_or(0) + kept_from(kind, i, &answer)?);
    }
    if let Some(kept) = kept {
        let missing = calls.saturating_sub(usize::try_from(kept).unwrap_or(usize::MAX));
        let topped = caller
            .phase(kind, Step::Add, calls..calls + missing, 1)
            .await?;
        if topped.errors > 0 {
            bail!("{} of the {missing} top-up adds failed", topped.errors);
        }
    }
    let searches = caller
        .phase(kind, Step::Search, 0..calls, concurrency)
        .await?;
    Ok(Side {
        adds,
        searches,
        kept,
    })
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// The same over HTTP: `concurrency` keep-alive connections posting one request at a time.
async fn http_session(kind: Kind, url: &str, calls: usize, concurrency: usize) -> Result<Side> {
    let host = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
        .map(|(host, _)| host.to_owned())
        .with_context(|| format!("{url} is no http://host/path URL"))?;
    let addr: std::net::SocketAddr = host
        .parse()
        .with_context(|| format!("{url} has no IP address and port"))?;
    let path = format!(
        "/{}",
        url.split_once(&host)
            .map_or("", |(_, p)| p)
            .trim_start_matches('/')
    );
    run_calls(&mut Http { addr, host, path }, kind, calls, concurrency).await
}

/// An HTTP MCP endpoint.
struct Http {
    addr: std::net::SocketAddr,
    host: String,
    path: String,
}

impl Http {
    fn body(&self, id: u64, call: (&'static str, Value)) -> Vec<u8> {
        http_request("POST", &self.path, &self.host, Some(&call_line(id, call)))
    }
}

impl Caller for Http {
    /// One call on a connection of its own.
    async fn tool(&mut self, call: (&'static str, Value)) -> Result<Value> {
        let mut conn = Conn::connect(self.addr).await?;
        let (status, body) = conn.exchange(&self.body(0, call)).await?;
        if status != 200 {
            bail!("HTTP {status}: {}", String::from_utf8_lossy(&body));
        }
        serde_json::from_slice(&body).context("an answer that is no JSON")
    }

    async fn phase(
        &mut self,
        kind: Kind,
        step: Step,
        range: std::ops::Range<usize>,
        concurrency: usize,
    ) -> Result<Phase> {
        let next = Arc::new(AtomicUsize::new(range.start));
        let started = Instant::now();
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..concurrency.max(1) {
            let mut conn = Conn::connect(self.addr)
                .await
                .with_context(|| format!("connecting to {}", self.addr))?;
            let next = Arc::clone(&next);
            let (host, path, end) = (self.host.clone(), self.path.clone(), range.end);
            workers.spawn(async move {
                let mut latencies_us = Vec::new();
                let mut errors = 0;
                let mut first_error = None;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= end {
                        break;
                    }
                    let Some(call) = tool_call(kind, step, i) else {
                        first_error.get_or_insert_with(|| format!("no {step:?} call"));
                        errors += 1;
                        break;
                    };
                    let request =
                        http_request("POST", &path, &host, Some(&call_line(i as u64, call)));
                    let sent = Instant::now();
                    match conn.exchange(&request).await {
                        Ok((200, body)) => match serde_json::from_slice::<Value>(&body) {
                            Ok(answer) if answer_ok(&answer) => {
                                latencies_us.push(micros(sent.elapsed()));
                            }
                            Ok(answer) => {
                                errors += 1;
                                first_error.get_or_insert_with(|| answer_error(&answer));
                            }
                            Err(e) => {
                                errors += 1;
                                first_error.get_or_insert_with(|| e.to_string());
                            }
                        },
                        Ok((status, body)) => {
                            errors += 1;
                            first_error.get_or_insert_with(|| {
                                format!("HTTP {status}: {}", String::from_utf8_lossy(&body))
                            });
                        }
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert_with(|| format!("{e:#}"));
                            break;
                        }
                    }
                }
                (latencies_us, errors, first_error)
            });
        }
        let mut phase = Phase::default();
        let mut first_error = None;
        while let Some(joined) = workers.join_next().await {
            let (latencies, errors, error) =
                joined.map_err(|e| anyhow!("a raw client task failed: {e}"))?;
            phase.latencies_us.extend(latencies);
            phase.errors += errors;
            if first_error.is_none() {
                first_error = error;
            }
        }
        Ok(phase.finish(started, "raw client", first_error))
    }
}
