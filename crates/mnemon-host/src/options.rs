//! Tunables of the host (spec §12.2 and §12.6).

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// The default listening address: loopback only.
pub const DEFAULT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), DEFAULT_PORT);

/// The default port.
pub const DEFAULT_PORT: u16 = 8080;

/// The default request body limit: 2 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// The `count` a query gets when its arguments have none, as on the reference host.
pub const DEFAULT_COUNT: i64 = 1000;

/// How the host behaves. `Default` gives the spec's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostOptions {
    /// Requests with a larger body get 413.
    pub max_body_bytes: usize,
    /// Seeds one RNG that draws the random query vector of every query without an embedding, so
    /// a run is reproducible. `None` seeds each random query from the OS.
    pub random_seed: Option<u64>,
    /// How long a client may take to send a request body; slower ones get 408, so idle or
    /// trickling clients cannot hold connections and buffers forever.
    pub body_timeout: Duration,
    /// How long in-flight requests may take to finish after SIGINT or SIGTERM.
    pub drain_timeout: Duration,
    /// Serve `POST /admin/reload` to clients connecting from a loopback address.
    ///
    /// Disable it when a reverse proxy on the same machine forwards outside traffic, because
    /// such traffic then arrives from loopback.
    pub admin_reload: bool,
    /// Use the library's int8 pre-scan (spec §11.5): the same results as the exact scan (rows
    /// are scored exactly in order of a proven bound), several times faster on large libraries,
    /// for a quarter more memory.
    pub fast: bool,
    /// Exact scans of libraries holding at least this many floats (bits × dimension) are
    /// batched: concurrent queries share one pass over the matrix, which multiplies throughput
    /// on libraries too large for the CPU caches. Results are the same either way. `0` batches
    /// every library, `usize::MAX` none.
    pub batch_scans_from: usize,
}

/// The default [`HostOptions::batch_scans_from`]: 1 Mi floats (4 MiB of embeddings), below
/// which a scan is so short that handing it to another thread costs more than it saves.
pub const DEFAULT_BATCH_SCANS_FROM: usize = 1 << 20;

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            random_seed: None,
            body_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(10),
            admin_reload: true,
            fast: false,
            batch_scans_from: DEFAULT_BATCH_SCANS_FROM,
        }
    }
}
