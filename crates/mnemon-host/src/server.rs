//! Binding, serving, graceful shutdown and reload triggers.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::compose::{RequestLimits, ServedLibrary};
use crate::error::HostError;
use crate::listener;
use crate::options::HostOptions;
use crate::routes;
use crate::source::Sources;
use crate::state::{HostState, Reloaded};

/// A library host whose data is loaded and whose socket is bound, ready to [`run`](Host::run).
pub struct Host {
    listener: TcpListener,
    state: Arc<HostState>,
    /// Routes served beside the library endpoint ([`Host::with_routes`]).
    extra: axum::Router,
    /// Wraps the whole app, library endpoint included ([`Host::with_layer_around`]).
    around: Option<WrapRouter>,
}

/// A function that wraps the host's finished router ([`Host::with_layer_around`]).
type WrapRouter = Box<dyn FnOnce(axum::Router) -> axum::Router + Send + Sync>;

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("addr", &self.listener.local_addr().ok())
            .field("options", &self.state.options)
            .finish_non_exhaustive()
    }
}

impl Host {
    /// Loads the library and config from `sources` (on the blocking pool), then binds `addr`.
    /// Port 0 picks a free port; see [`Host::local_addr`].
    pub async fn bind(
        addr: SocketAddr,
        sources: Sources,
        options: HostOptions,
    ) -> Result<Host, HostError> {
        let loader = sources.clone();
        let index = options.index;
        let snapshot = tokio::task::spawn_blocking(move || loader.load_serving(&index))
            .await
            .map_err(|_| HostError::LoaderPanicked)??;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|error| HostError::Bind { addr, error })?;
        Ok(Host {
            listener,
            state: Arc::new(HostState::new(snapshot, sources, options)),
            extra: axum::Router::new(),
            around: None,
        })
    }

    /// The address the host listens on.
    pub fn local_addr(&self) -> Result<SocketAddr, HostError> {
        Ok(self.listener.local_addr()?)
    }

    /// The number of bits currently served.
    pub fn bits(&self) -> usize {
        self.state.snapshot().library.len()
    }

    /// The model of the library currently served.
    pub fn model(&self) -> String {
        self.state.snapshot().library.model().to_owned()
    }

    /// The host's shared limits, for the handlers of routes composed with
    /// [`with_routes`](Host::with_routes): request bodies and request slots count against the
    /// same budgets as the library queries (docs/limits.md).
    pub fn limits(&self) -> RequestLimits {
        RequestLimits {
            limits: Arc::clone(&self.state.limits),
            max_body_bytes: self.state.options.max_body_bytes,
            body_timeout: self.state.options.body_timeout,
        }
    }

    /// Serves `routes` beside the library endpoint: behind the same listener and middleware
    /// (connection limit, timeouts, gzip, access log), without the endpoint's CORS (their
    /// answers are not for web pages of other origins). The routes must not overlap the
    /// host's own (`/`, `/healthz`, `/health`, `/_ah/warmup`, `/admin/reload`) and must not set
    /// a fallback; unknown paths keep getting the host's 404.
    pub fn with_routes(self, routes: axum::Router) -> Host {
        Host {
            extra: self.extra.merge(routes),
            ..self
        }
    }

    /// Wraps the whole app (the library endpoint `POST /`, the host's other routes and those
    /// of [`Host::with_routes`]) with `wrap`, applied once when the host starts: for a
    /// middleware that must see every route, such as request metrics (`mnemon-server`'s
    /// `/metrics`). Route layers added with `axum::Router::layer` still see the matched route
    /// pattern. A second call replaces the first.
    pub fn with_layer_around(
        self,
        wrap: impl FnOnce(axum::Router) -> axum::Router + Send + Sync + 'static,
    ) -> Host {
        Host {
            around: Some(Box::new(wrap)),
            ..self
        }
    }

    /// A handle that reloads the served data while the host runs.
    pub fn handle(&self) -> HostHandle {
        HostHandle {
            state: Arc::clone(&self.state),
        }
    }

    /// Serves until `shutdown` completes, then stops accepting connections and lets in-flight
    /// requests finish for up to [`HostOptions::drain_timeout`].
    pub async fn run<F>(self, shutdown: F) -> Result<(), HostError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let drain = self.state.options.drain_timeout;
        let options = self.state.options.clone();
        let (stopping, stopped) = tokio::sync::watch::channel(false);
        let signal = tokio::spawn(async move {
            shutdown.await;
            tracing::info!(
                drain_secs = drain.as_secs_f64(),
                "shutting down: no new connections, draining in-flight requests"
            );
            // Nobody listening is fine: the server is then already gone.
            let _ = stopping.send(true);
        });
        let trimmer = tokio::spawn(Arc::clone(&self.state.limits).trim_when_quiet());
        let mut app = routes::router_with(self.state, self.extra);
        if let Some(wrap) = self.around {
            app = wrap(app);
        }
        let drained = listener::serve(self.listener, app, options, stopped).await;
        signal.abort();
        trimmer.abort();
        if !drained {
            tracing::warn!(
                "in-flight requests did not finish within the drain timeout; closing them"
            );
        }
        tracing::info!("stopped");
        Ok(())
    }

    /// Serves until SIGINT or SIGTERM (Ctrl-C elsewhere), draining as [`Host::run`] does. On
    /// Unix, SIGHUP reloads the library and config without dropping requests.
    ///
    /// The signal handlers are installed before this returns its first `Pending`, so a signal
    /// sent once the host logged its address is never missed.
    pub async fn run_until_signal(self) -> Result<(), HostError> {
        let shutdown = shutdown_signal()?;
        let reloader = reload_on_hangup(self.handle())?;
        let outcome = self.run(shutdown).await;
        if let Some(task) = reloader {
            task.abort();
        }
        outcome
    }
}

/// Reloads a running host.
#[derive(Clone)]
pub struct HostHandle {
    state: Arc<HostState>,
}

impl std::fmt::Debug for HostHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostHandle").finish_non_exhaustive()
    }
}

impl HostHandle {
    /// Loads the library and config again and swaps them in atomically. Requests already
    /// running finish on the data they started with; on failure the host keeps serving the
    /// previous data.
    pub async fn reload(&self) -> Result<Reloaded, HostError> {
        self.state.reload().await
    }

    /// The library served now; it stays valid (and unchanged) while held, across reloads.
    pub fn library(&self) -> ServedLibrary {
        ServedLibrary(self.state.snapshot())
    }
}

/// A future completing on the first SIGINT or SIGTERM.
#[cfg(unix)]
fn shutdown_signal() -> Result<impl Future<Output = ()> + Send + 'static, HostError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT received"),
            _ = terminate.recv() => tracing::info!("SIGTERM received"),
        }
    })
}

/// A future completing on Ctrl-C.
#[cfg(not(unix))]
fn shutdown_signal() -> Result<impl Future<Output = ()> + Send + 'static, HostError> {
    Ok(async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    })
}

/// Reloads the host on every SIGHUP.
#[cfg(unix)]
fn reload_on_hangup(handle: HostHandle) -> Result<Option<tokio::task::JoinHandle<()>>, HostError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = signal(SignalKind::hangup())?;
    Ok(Some(tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP received: reloading");
            if let Err(error) = handle.reload().await {
                tracing::error!(%error, "reload failed; still serving the previous libraries");
            }
        }
    })))
}

#[cfg(not(unix))]
fn reload_on_hangup(_handle: HostHandle) -> Result<Option<tokio::task::JoinHandle<()>>, HostError> {
    Ok(None)
}
