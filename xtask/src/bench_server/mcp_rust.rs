//! The second MCP client of `cargo xtask bench server` (docs/bench-server.md): rmcp's client (the
//! Rust SDK Mnemon's own tests use) making the same calls as xtask/bench/mcp_calls.cjs, on one
//! thread of this process, so that a server's figures are not bounded by a Node.js client's
//! per-call cost. Over stdio it spawns the server as a child process (`mnemon mcp …`, `node
//! …/server-memory`, `node mcp_null_server.cjs stdio`); over streamable HTTP it posts to a URL
//! (`mnemon serve`'s `/mcp`, the null server's).
//!
//! Each run: connect (initialize), make the reference's entities if it is the reference, then
//! `calls` adds and `calls` searches, `concurrency` calls in flight on the one session, then
//! count the adds the server kept through its own tools, after the clock.

use std::ffi::OsString;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};

use super::{MCP_GROUPS, NODE_TIMEOUT, Phase, Side, TOP_K};

/// Which tools the client calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Mnemon's `remember` and `recall`.
    Mnemon,
    /// The reference's `add_observations` and `search_nodes`.
    Reference,
    /// Mnemon's calls, to the null server (nothing is kept or counted).
    Null,
}

/// Where the server is.
#[derive(Debug, Clone)]
pub(super) enum Endpoint {
    /// Streamable HTTP at this URL.
    Http(String),
    /// A child process speaking newline-delimited JSON-RPC on its stdin and stdout.
    Stdio {
        command: OsString,
        args: Vec<OsString>,
        env: Vec<(String, OsString)>,
    },
}

/// The group (session, entity) of call `i`: the names mcp_calls.cjs uses.
fn group(i: usize) -> String {
    format!("topic-{:02}", i % MCP_GROUPS)
}

/// The text of add `i`, as mcp_calls.cjs writes it.
fn content(i: usize) -> String {
    format!("note {i}: the build on host {} took {} s", i % 17, i % 60)
}

/// A `tools/call` request of `tool` with `arguments` (an object).
fn params(tool: &'static str, arguments: Value) -> CallToolRequestParams {
    let arguments = match arguments {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    CallToolRequestParams::new(tool).with_arguments(arguments)
}

/// Add `i` of `kind`.
fn add(kind: Kind, i: usize) -> CallToolRequestParams {
    match kind {
        Kind::Reference => params(
            "add_observations",
            json!({"observations": [{"entityName": group(i), "contents": [content(i)]}]}),
        ),
        Kind::Mnemon | Kind::Null => params(
            "remember",
            json!({"session": group(i),
                   "messages": [{"name": "user", "role": "user", "content": content(i)}]}),
        ),
    }
}

/// Search `i` of `kind`.
fn search(kind: Kind, i: usize) -> CallToolRequestParams {
    match kind {
        Kind::Reference => params("search_nodes", json!({"query": group(i)})),
        Kind::Mnemon | Kind::Null => params(
            "recall",
            json!({"session": group(i), "query": format!("build on host {}", i % 17),
                   "top_k": TOP_K}),
        ),
    }
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
            let mut cmd = tokio::process::Command::new(&command);
            cmd.args(&args)
                .envs(env)
                // What `mnemon mcp` gets: the stores its arguments name only.
                .env_remove("MNEMON_DATABASE_URL")
                .env_remove("MNEMON_NAMESPACE")
                .env_remove("MNEMON_CONFIG_FILE")
                .env_remove("MNEMON_EMBEDDING_MODEL")
                .kill_on_drop(true);
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
    if kind == Kind::Reference {
        // One entity per group, before the clock starts.
        let entities: Vec<Value> = (0..MCP_GROUPS)
            .map(|g| json!({"name": group(g), "entityType": "log", "observations": []}))
            .collect();
        let made = peer
            .call_tool(params("create_entities", json!({"entities": entities})))
            .await
            .context("create_entities")?;
        if made.is_error == Some(true) {
            bail!("create_entities failed: {:?}", made.content);
        }
    }
    let adds = phase(&peer, calls, concurrency, move |i| add(kind, i)).await;
    let searches = phase(&peer, calls, concurrency, move |i| search(kind, i)).await;
    let kept = kept(&peer, kind, calls).await?;
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

/// `calls` calls made by `make`, `concurrency` in flight on `peer`.
async fn phase(
    peer: &Peer<RoleClient>,
    calls: usize,
    concurrency: usize,
    make: impl Fn(usize) -> CallToolRequestParams + Send + Sync + Copy + 'static,
) -> Phase {
    let next = Arc::new(AtomicUsize::new(0));
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
                if i >= calls {
                    break;
                }
                let request = make(i);
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
    phase.wall = started.elapsed();
    phase.latencies_us.sort_unstable();
    if let Some(error) = first_error {
        eprintln!(
            "MCP (rmcp client): {} calls failed; the first: {error}",
            phase.errors
        );
    }
    phase
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// The JSON result of a tool: its structured content, else its first text block parsed.
fn structured(result: &CallToolResult) -> Option<Value> {
    if let Some(value) = &result.structured_content {
        return Some(value.clone());
    }
    let text = result.content.first()?.as_text()?;
    serde_json::from_str(&text.text).ok()
}

/// How many added messages (observations) the server holds after the run, through its own
/// tools: Mnemon's `recall` of each session's latest `calls`, the reference's `read_graph`.
async fn kept(peer: &Peer<RoleClient>, kind: Kind, calls: usize) -> Result<Option<u64>> {
    match kind {
        Kind::Null => Ok(None),
        Kind::Reference => {
            let graph = peer
                .call_tool(params("read_graph", json!({})))
                .await
                .context("counting with read_graph")?;
            let graph = structured(&graph).context("read_graph answered no JSON")?;
            let entities = graph["entities"]
                .as_array()
                .context("read_graph answered no entities")?;
            Ok(Some(
                entities
                    .iter()
                    .map(|e| e["observations"].as_array().map_or(0, |o| o.len() as u64))
                    .sum(),
            ))
        }
        Kind::Mnemon => {
            let mut kept = 0;
            for g in 0..MCP_GROUPS {
                let got = peer
                    .call_tool(params(
                        "recall",
                        json!({"session": group(g), "recent": calls.max(1)}),
                    ))
                    .await
                    .with_context(|| format!("counting {} with recall", group(g)))?;
                if got.is_error == Some(true) {
                    bail!("counting {}: {:?}", group(g), got.content);
                }
                let got = structured(&got).context("recall answered no JSON")?;
                kept += got["messages"].as_array().map_or(0, |m| m.len() as u64);
            }
            Ok(Some(kept))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_match_the_sdk_scripts() {
        // The same names and texts as xtask/bench/mcp_calls.cjs.
        assert_eq!(group(17), "topic-01");
        assert_eq!(content(61), "note 61: the build on host 10 took 1 s");
        let a = add(Kind::Reference, 3);
        assert_eq!(a.name, "add_observations");
        let s = search(Kind::Mnemon, 20);
        assert_eq!(s.name, "recall");
        assert_eq!(
            s.arguments.as_ref().and_then(|m| m.get("query")),
            Some(&json!("build on host 3"))
        );
    }
}
