//! The two transports: stdio (`mnemon mcp`) and streamable HTTP (mounted at `/mcp`).

use std::future::Future;
use std::sync::Arc;

use rmcp::ServiceExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::error::McpError;
use crate::tools::MnemonMcp;

/// How the streamable-HTTP endpoint checks requests.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct HttpOptions {
    /// The `Host` header values accepted (names or `name:port`). `None` keeps rmcp's default,
    /// loopback names only (`localhost`, `127.0.0.1`, `::1`), which stops DNS-rebinding attacks
    /// on a server bound to loopback; a server reachable under another name lists it here.
    /// `Some(vec![])` accepts every host (only behind a proxy that checks it).
    pub allowed_hosts: Option<Vec<String>>,
    /// The largest request body accepted, in bytes. `None` keeps rmcp's default (4 MiB); a
    /// server with a body limit of its own passes it, so that `/mcp` takes what its other
    /// routes take.
    pub max_body_bytes: Option<usize>,
}

impl HttpOptions {
    /// Accepts these `Host` values instead of the loopback names.
    pub fn with_allowed_hosts(
        mut self,
        hosts: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.allowed_hosts = Some(hosts.into_iter().map(Into::into).collect());
        self
    }

    /// Accepts request bodies of up to `bytes` (rmcp's default is 4 MiB).
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = Some(bytes);
        self
    }
}

/// The streamable-HTTP MCP endpoint for `server`: a tower service (axum-compatible) to mount
/// with `Router::nest_service("/mcp", …)`.
///
/// It runs stateless (no `Mcp-Session-Id`, one JSON answer per POST): any process serving the
/// same database answers any request, so several servers can sit behind one address
/// (docs/reference/mcp.md#http).
pub fn http_service(
    server: MnemonMcp,
    options: HttpOptions,
) -> StreamableHttpService<MnemonMcp, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None);
    if let Some(bytes) = options.max_body_bytes {
        config = config.with_max_request_body_bytes(bytes);
    }
    if let Some(hosts) = options.allowed_hosts {
        config = if hosts.is_empty() {
            config.disable_allowed_hosts()
        } else {
            config.with_allowed_hosts(hosts)
        };
    }
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// An axum router serving [`http_service`] at `/mcp`, to merge into a server's router.
pub fn router(server: MnemonMcp, options: HttpOptions) -> axum::Router {
    axum::Router::new().nest_service("/mcp", http_service(server, options))
}

/// Serves [`router`] on `listener` until `shutdown` completes (what `mnemon mcp --http` runs).
pub async fn serve_http<F>(
    listener: tokio::net::TcpListener,
    server: MnemonMcp,
    options: HttpOptions,
    shutdown: F,
) -> Result<(), McpError>
where
    F: Future<Output = ()> + Send + 'static,
{
    axum::serve(listener, router(server, options))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

/// Serves one MCP session over stdin and stdout until the client closes it (what `mnemon mcp`
/// runs). Nothing else may write to stdout meanwhile: logs go to stderr.
///
/// When both streams are pipes (as an MCP client starts a server), they are read and written
/// through tokio's non-blocking pipe driver (`rmcp::transport::stdio_pipes`), not tokio's
/// `Stdin`/`Stdout`, which hand every read and every write to the blocking thread pool: two
/// thread hand-offs a call saved (docs/reference/mcp.md#throughput). Anything else (a file, a
/// terminal) falls back to the blocking handles.
pub async fn serve_stdio(server: MnemonMcp) -> Result<(), McpError> {
    let running = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|e| McpError::Initialize {
            detail: e.to_string(),
        })?;
    running.waiting().await.map_err(|e| McpError::Session {
        detail: e.to_string(),
    })?;
    Ok(())
}
