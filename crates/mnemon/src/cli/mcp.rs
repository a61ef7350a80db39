//! `mnemon mcp`: the Model Context Protocol server (docs/reference/mcp.md) over stdio, for an
//! MCP client that starts it as a subprocess (Claude Desktop and the like), or over streamable
//! HTTP on a loopback address with `--http`.
//!
//! It serves the stores the global options name (`--data-dir`, `--database-url`,
//! `--namespace`, `--artifact-files`), like every store command.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use mnemon_library::Library;
use mnemon_mcp::mnemon_ops::{Service, Stores};
use mnemon_mcp::{Call, Denied, HttpOptions, MnemonMcp, ResolveWith};
use mnemon_server::OpenAccess;

use super::{CliError, CliResult, Target};

/// The embedder when neither --embedding-model nor a library names one: the offline model of
/// the sample library `mnemon serve` ships (lexical, deterministic, free).
const DEFAULT_EMBEDDING_MODEL: &str = "mnemon:hashing-v1-512";

/// Serve memory, assets, artifacts and a library as MCP tools.
#[derive(Debug, clap::Args)]
pub(crate) struct McpArgs {
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio; ADDR must be a loopback
    /// address (port 0 picks a free port). The endpoint's URL is printed on stdout.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,

    /// The embedder `recall` and `search_library` turn text into vectors with (for example
    /// mnemon:hashing-v1-512, or openai.com:text-embedding-3-small with OPENAI_API_KEY). Defaults to
    /// the library's model, else mnemon:hashing-v1-512.
    #[arg(long, env = "MNEMON_EMBEDDING_MODEL", value_name = "MODEL")]
    embedding_model: Option<String>,

    /// The library `search_library` searches: a file, or a directory whose `*.json` files are
    /// merged in path order. Defaults to <data-dir>/libraries if it exists, else none.
    #[arg(long, value_name = "FILE|DIR")]
    library: Option<PathBuf>,
}

/// Runs `mnemon mcp`.
pub(crate) fn run(args: McpArgs, target: &Target<'_>, quiet: bool) -> CliResult {
    // stdout carries the protocol over stdio: logs go to stderr, warnings only unless asked.
    super::log_to_stderr(if quiet { "error" } else { "warn" }, args.http.is_some());
    if let Some(addr) = args.http
        && !addr.ip().is_loopback()
    {
        return Err(CliError::input(anyhow!(
            "--http {addr} is not a loopback address: `mnemon mcp` has no API keys, so it only \
             listens on 127.0.0.1 or ::1; use `mnemon serve` (its /mcp endpoint) to serve others"
        )));
    }
    // A deployment that has had keys never runs open (docs/reference/keys.md#running-open),
    // and `mnemon mcp` checks none: over HTTP, where any local process or a proxy on this
    // machine could reach it, it refuses such a data directory or database.
    if let Some(addr) = args.http
        && super::serve::key_store(target)?.is_some()
    {
        return Err(CliError::input(anyhow!(
            "--http {addr}: this deployment has API keys (created with `mnemon keys`), and \
             `mnemon mcp` checks none, so it will not serve it over HTTP; use `mnemon serve`, \
             whose /mcp endpoint takes the keys, or `mnemon mcp` over stdio"
        )));
    }
    let library = load_library(&args, target)?;
    let model = match (&args.embedding_model, &library) {
        (Some(model), _) => model.clone(),
        (None, Some(library)) => library.model().to_owned(),
        (None, None) => DEFAULT_EMBEDDING_MODEL.to_owned(),
    };
    let embedder = mnemon::embed::embedder_for_model(&model)
        .with_context(|| format!("--embedding-model {model}"))
        .map_err(CliError::input)?;
    let stores = Stores::open_with(target.data_dir, &target.open_options())
        .context("cannot open the stores")
        .map_err(CliError::failure)?;
    let service = Service::new(stores).with_embedder(Arc::from(embedder));
    let mut server = match args.http {
        None => MnemonMcp::new(service),
        // Over HTTP, open only until a key is created (docs/reference/keys.md#running-open):
        // from then on every tool call is refused, as `mnemon serve` refuses every request.
        Some(_) => {
            let open =
                OpenAccess::until_keys(target.namespace.clone(), super::serve::keys_probe(target)?);
            MnemonMcp::new(ResolveWith(move |_call: &Call<'_>| {
                open.admit().map_err(|refused| Denied {
                    code: refused.code.to_owned(),
                    message: refused.message,
                })?;
                Ok(service.clone())
            }))
        }
    };
    if let Some(library) = library {
        server = server.with_library(Arc::new(library));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::failure)?;
    runtime.block_on(async move {
        match args.http {
            None => mnemon_mcp::serve_stdio(server)
                .await
                .map_err(CliError::failure),
            Some(addr) => serve_http(addr, server).await,
        }
    })
}

/// Binds `addr`, prints the endpoint's URL on stdout and serves until SIGINT or SIGTERM.
async fn serve_http(addr: SocketAddr, server: MnemonMcp) -> CliResult {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
        .map_err(CliError::failure)?;
    let bound = listener.local_addr().map_err(CliError::failure)?;
    // The URL is the first line on stdout, for scripts that started the server on port 0.
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        writeln!(out, "http://{bound}/mcp")
            .and_then(|()| out.flush())
            .map_err(CliError::failure)?;
    }
    tracing::info!("MCP endpoint at http://{bound}/mcp (open: loopback only, no keys)");
    mnemon_mcp::serve_http(listener, server, HttpOptions::default(), shutdown_signal())
        .await
        .map_err(CliError::failure)
}

/// Completes on the first SIGINT or SIGTERM (on other systems, Ctrl-C).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut interrupt), Ok(mut terminate)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            return;
        }
    }
    // Without signal handlers the server runs until killed.
    let _ = tokio::signal::ctrl_c().await;
}

/// The library `--library` names, else `<data-dir>/libraries` when it exists, else none.
fn load_library(args: &McpArgs, target: &Target<'_>) -> Result<Option<Library>, CliError> {
    let path = match &args.library {
        Some(path) => path.clone(),
        None => {
            let default = target.data_dir.join(mnemon_mcp::mnemon_ops::LIBRARIES_DIR);
            if !default.is_dir() {
                return Ok(None);
            }
            default
        }
    };
    let library = if path.is_dir() {
        Library::open_dir(&path)
    } else {
        Library::open(&path)
    };
    library
        .with_context(|| format!("cannot load the library {}", path.display()))
        .map(Some)
        .map_err(CliError::input)
}
