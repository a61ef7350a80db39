//! MCP tool-call throughput through rmcp's client, on loopback (docs/reference/mcp.md#throughput):
//! `remember` (one message), `recall` (a text query, top 5, in the same session) and `recall`
//! without a session (`recall-all`: top 5 across every client's session, one store query) over
//! streamable HTTP (axum on 127.0.0.1:0) with 1 and 8 concurrent clients, and over the
//! byte-stream transport stdio uses (one client), against a fresh SQLite data directory.
//!
//! ```sh
//! cargo run --release -p mnemon-mcp --example mcp_throughput -- [CALLS]   # default 2000
//! ```
//!
//! Bounded: CALLS calls of each of the three per run, split across the clients.

use std::sync::Arc;
use std::time::Instant;

use mnemon_mcp::mnemon_ops::{Service, Stores};
use mnemon_mcp::{HttpOptions, MnemonMcp};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

type Error = Box<dyn std::error::Error + Send + Sync>;

fn server(dir: &std::path::Path) -> Result<MnemonMcp, Error> {
    let embedder = mnemon_embed::embedder_for_model("mnemon:hashing-v1-512")?;
    let service = Service::new(Stores::open(dir)?).with_embedder(Arc::from(embedder));
    Ok(MnemonMcp::new(service))
}

async fn call(peer: &Peer<RoleClient>, tool: &'static str, arguments: Value) -> Result<(), Error> {
    let Value::Object(arguments) = arguments else {
        return Err("arguments must be an object".into());
    };
    let result = peer
        .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
        .await?;
    if result.is_error == Some(true) {
        return Err(format!("{tool} failed: {:?}", result.content).into());
    }
    Ok(())
}

/// `calls` remember calls, then `calls` recall calls, from one client into its own session.
async fn remember_run(peer: Peer<RoleClient>, client: usize, calls: usize) -> Result<(), Error> {
    let session = format!("bench-{client}");
    for i in 0..calls {
        let text = format!("note {i}: the build on host {} took {} s", i % 17, i % 60);
        call(
            &peer,
            "remember",
            json!({"session": session, "messages": [{"name": "user", "content": text}]}),
        )
        .await?;
    }
    Ok(())
}

async fn recall_run(peer: Peer<RoleClient>, client: usize, calls: usize) -> Result<(), Error> {
    let session = format!("bench-{client}");
    for i in 0..calls {
        let query = format!("build on host {}", i % 17);
        call(
            &peer,
            "recall",
            json!({"session": session, "query": query, "top_k": 5}),
        )
        .await?;
    }
    Ok(())
}

/// `calls` recall calls without a session: one search across every session of the namespace
/// (every client's), in one store query per call.
async fn recall_all_run(peer: Peer<RoleClient>, calls: usize) -> Result<(), Error> {
    for i in 0..calls {
        let query = format!("build on host {}", i % 17);
        call(&peer, "recall", json!({"query": query, "top_k": 5})).await?;
    }
    Ok(())
}

/// Runs the three phases over `peers`, printing calls/s for each.
async fn measure(label: &str, peers: &[Peer<RoleClient>], total: usize) -> Result<(), Error> {
    let per_client = total / peers.len();
    let mut rates = Vec::new();
    for phase in ["remember", "recall", "recall-all"] {
        let start = Instant::now();
        let mut tasks = Vec::new();
        for (client, peer) in peers.iter().enumerate() {
            let peer = peer.clone();
            tasks.push(tokio::spawn(async move {
                match phase {
                    "remember" => remember_run(peer, client, per_client).await,
                    "recall" => recall_run(peer, client, per_client).await,
                    _ => recall_all_run(peer, per_client).await,
                }
            }));
        }
        for task in tasks {
            task.await??;
        }
        let rate = (per_client * peers.len()) as f64 / start.elapsed().as_secs_f64();
        rates.push(format!("{phase} {rate:.0}/s"));
    }
    println!("{label}: {}", rates.join(", "));
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let total: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 2_000,
    };
    for clients in [1, 8] {
        let dir = tempfile::tempdir()?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/mcp", listener.local_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(mnemon_mcp::serve_http(
            listener,
            server(dir.path())?,
            HttpOptions::default(),
            async move {
                let _ = stopped.await;
            },
        ));
        let mut running = Vec::new();
        for _ in 0..clients {
            running.push(
                ().serve(StreamableHttpClientTransport::from_uri(url.clone()))
                    .await?,
            );
        }
        let peers: Vec<_> = running.iter().map(|r| r.peer().clone()).collect();
        measure(&format!("http, {clients} client(s)"), &peers, total).await?;
        for client in running {
            client.cancel().await?;
        }
        let _ = stop.send(());
        serving.await??;
    }

    let dir = tempfile::tempdir()?;
    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let mcp = server(dir.path())?;
    let served = tokio::spawn(async move {
        if let Ok(running) = mcp.serve(server_end).await {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(client_end).await?;
    measure("stdio transport, 1 client", &[client.peer().clone()], total).await?;
    client.cancel().await?;
    served.await?;
    Ok(())
}
