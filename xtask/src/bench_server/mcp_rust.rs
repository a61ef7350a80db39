//! The second MCP client of `cargo xtask bench server` (docs/bench-server.md): rmcp's client (the
//! Rust SDK Mnemon's own tests use) making the same calls as xtask/bench/mcp_calls.cjs, on one
//! thread of this process, so that a server's figures are not bounded by a Node.js client's
//! per-call cost. Over stdio it spawns the server as a child process (`mnemon mcp …`, `node
//! …/server-memory`, `node mcp_null_server.cjs stdio`); over streamable HTTP it posts to a URL
//! (`mnemon serve`'s `/mcp`, the null server's).
//!
//! Each run: connect (initialize), make the reference's entities if it is the reference, then
//! `calls` adds, `concurrency` calls in flight on the one session; off the clock, count the adds
//! the server kept through its own tools and make the lost ones again one at a time (the
//! top-up); then `calls` searches, `concurrency` in flight, over the same memory on every
//! server.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};

use super::mcp_calls::{Endpoint, Kind, Step, count_calls, kept_from, stdio_command, tool_call};
use super::{NODE_TIMEOUT, Phase, Side};

/// A `tools/call` request of `tool` with `arguments` (an object).
fn params((tool, arguments): (&'static str, Value)) -> CallToolRequestParams {
    let arguments = match arguments {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    CallToolRequestParams::new(tool).with_arguments(arguments)
}

/// Runs one client session against `endpoint` (at most [`NODE_TIMEOUT`]) on a one-thread
/// runtime of this process.
pub(super) fn run(
    kind: Kind,
    endpoint: Endpoint,
    calls: usize,
    concurrency: usize,
) -> Result<Side> {
    // The workspace builds reqwest's rustls without a crypto provider; plain HTTP needs none,
    // but building a client checks for one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the rmcp client's runtime")?;
    runtime.block_on(async move {
        tokio::time::timeout(NODE_TIMEOUT, session(kind, endpoint, calls, concurrency))
            .await
            .map_err(|_| anyhow!("the rmcp client ran for more than {NODE_TIMEOUT:?}"))?
    })
}

async fn session(kind: Kind, endpoint: Endpoint, calls: usize, concurrency: usize) -> Result<Side> {
    let client = match endpoint {
        Endpoint::Http(url) => ()
            .serve(StreamableHttpClientTransport::from_uri(url.clone()))
            .await
            .with_context(|| format!("initializing an MCP session with {url}"))?,
        Endpoint::Stdio { command, args, env } => {
            let mut cmd = stdio_command(&command, &args, env);
            cmd.kill_on_drop(true);
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("starting {}", command.to_string_lossy()))?;
            ().serve(transport).await.with_context(|| {
                format!(
                    "initializing an MCP session with {}",
                    command.to_string_lossy()
                )
            })?
        }
    };
    let peer = client.peer().clone();
    if let Some(setup) = tool_call(kind, Step::Setup, 0) {
        // Before the clock starts.
        let made = peer
            .call_tool(params(setup))
            .await
            .context("create_entities")?;
        if made.is_error == Some(true) {
            bail!("create_entities failed: {:?}", made.content);
        }
    }
    let adds = phase(&peer, kind, Step::Add, 0..calls, concurrency).await;
    let kept = kept(&peer, kind, calls).await?;
    // The top-up, off the clock: a server that lost adds made concurrently (the reference
    // does) gets them again one at a time, so that every server's searches run over a memory
    // of `calls` adds; otherwise the one that lost most would search the least.
    if let Some(kept) = kept {
        let missing = calls.saturating_sub(usize::try_from(kept).unwrap_or(usize::MAX));
        let topped = phase(&peer, kind, Step::Add, calls..calls + missing, 1).await;
        if topped.errors > 0 {
            bail!("{} of the {missing} top-up adds failed", topped.errors);
        }
    }
    let searches = phase(&peer, kind, Step::Search, 0..calls, concurrency).await;
    client
        .cancel()
        .await
        .map_err(|e| anyhow!("closing the MCP session: {e}"))?;
    Ok(Side {
        adds,
        searches,
        kept,
    })
}

/// The calls of `step` numbered `range`, `concurrency` in flight on `peer`.
async fn phase(
    peer: &Peer<RoleClient>,
    kind: Kind,
    step: Step,
    range: std::ops::Range<usize>,
    concurrency: usize,
) -> Phase {
    let next = Arc::new(AtomicUsize::new(range.start));
    let end = range.end;
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let peer = peer.clone();
        let next = Arc::clone(&next);
        workers.spawn(async move {
            let mut latencies_us = Vec::new();
            let mut errors = 0;
            let mut first_error = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    break;
                }
                let Some(request) = tool_call(kind, step, i).map(params) else {
                    errors += 1;
                    first_error.get_or_insert_with(|| format!("no {step:?} call"));
                    break;
                };
                let sent = Instant::now();
                match peer.call_tool(request).await {
                    Ok(result) if result.is_error != Some(true) => {
                        latencies_us.push(micros(sent.elapsed()));
                    }
                    Ok(result) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| format!("{:?}", result.content));
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            (latencies_us, errors, first_error)
        });
    }
    let mut phase = Phase::default();
    let mut first_error = None;
    while let Some(joined) = workers.join_next().await {
        match joined {
            Ok((latencies, errors, error)) => {
                phase.latencies_us.extend(latencies);
                phase.errors += errors;
                if first_error.is_none() {
                    first_error = error;
                }
            }
            Err(e) => {
                phase.errors += 1;
                first_error.get_or_insert_with(|| format!("a client task failed: {e}"));
            }
        }
    }
    phase.finish(started, "rmcp client", first_error)
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// How many added messages (observations) the server holds, through its own tools (see
/// [`count_calls`]).
async fn kept(peer: &Peer<RoleClient>, kind: Kind, calls: usize) -> Result<Option<u64>> {
    let mut kept = None;
    for (i, call) in count_calls(kind, calls).into_iter().enumerate() {
        let got = peer
            .call_tool(params(call))
            .await
            .context("counting the kept adds")?;
        let answer = json!({"result": serde_json::to_value(&got)?});
        kept = Some(kept.unwrap_or(0) + kept_from(kind, i, &answer)?);
    }
    Ok(kept)
}
