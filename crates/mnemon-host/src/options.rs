//! Tunables of the host (docs/reference/host.md#requests and docs/reference/host.md#operation).
//! Every limit is listed with its default, flag and effect in `docs/limits.md`.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use mnemon_library::IndexUse;

/// The default listening address: loopback only.
pub const DEFAULT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), DEFAULT_PORT);

/// The default port.
pub const DEFAULT_PORT: u16 = 8080;

/// The default request body limit: 2 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// The `count` a query gets when its arguments have none, as on the reference host.
pub const DEFAULT_COUNT: i64 = 1000;

/// The default [`HostOptions::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1000;

/// The default [`HostOptions::header_read_timeout`]: 10 s.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The default [`HostOptions::idle_timeout`]: 60 s.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The default [`HostOptions::send_timeout`]: 30 s.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// The default [`HostOptions::max_buffered_body_bytes`]: 64 MiB.
pub const DEFAULT_MAX_BUFFERED_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The default [`HostOptions::max_concurrent_queries`]: 16, the most queries the shared scan
/// serves at once, so the cap never costs throughput.
pub const DEFAULT_MAX_CONCURRENT_QUERIES: usize = 16;

/// The default [`HostOptions::queue_timeout`]: 5 s.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(5);

/// The default [`HostOptions::max_result_bytes`]: 32 MiB of serialised JSON.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 32 * 1024 * 1024;

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
    /// Use the library's int8 pre-scan (docs/reference/library.md#fast-mode): the same results as
    /// the exact scan (rows are scored exactly in order of a proven bound), several times faster on
    /// large libraries, for a quarter more memory.
    pub fast: bool,
    /// When a library's approximate index answers (docs/reference/library.md#ann-index): a
    /// library opened with a verified `<file>.ann` and at least `index.min_bits` bits (default
    /// 50,000) is searched through it, unless a query sends `exact: true`; `index.ef` is the
    /// beam width (by default sized by the library, `mnemon_library::default_index_ef`).
    /// `min_bits: usize::MAX` never uses an index.
    pub index: IndexUse,
    /// Scans of libraries holding at least this many floats (bits × dimension) are shared:
    /// concurrent queries join one walk over the library, each block read once for all of them
    /// (docs/reference/host.md#shared-scans), which multiplies throughput on libraries too large
    /// for the CPU caches. Results are the same either way. `0` shares the scans of every
    /// library, `usize::MAX` none.
    pub batch_scans_from: usize,
    /// Shared scans of exact queries use the int8 pre-scan too, exactly as fast mode does
    /// (default `true`): the same results, bit for bit (rows are scored exactly in order of a
    /// proven bound), at a quarter of the memory traffic, so concurrent exact queries are
    /// served several times faster (docs/reference/host.md#concurrent-queries-measured). The
    /// int8 copy, a quarter of the embeddings' size, is built by the first shared scan; `false`
    /// keeps that memory and scores every row in f32.
    pub prescan_shared_scans: bool,
    /// The most connections open at once (also kept at least 64 below the process's
    /// file-descriptor limit). A new connection beyond it closes the connection idle the
    /// longest; when every connection has a request in flight, it gets 503 and is closed.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers, counted from the connection's
    /// start or from the first byte of a later request. Slower connections are closed.
    pub header_read_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request before it is closed.
    pub idle_timeout: Duration,
    /// How long a response may wait for the client to take more of it: a connection whose
    /// writes make no progress for this long (a client that stopped reading) is closed, so it
    /// cannot hold its connection slot and its result's memory forever.
    pub send_timeout: Duration,
    /// The most request-body bytes buffered across all connections. A body that would go over
    /// waits up to [`HostOptions::queue_timeout`] for room, then gets 503 with `Retry-After`.
    pub max_buffered_body_bytes: usize,
    /// The most queries run at once (scan, result building and serialisation). Others wait up
    /// to [`HostOptions::queue_timeout`], then get 503 with `Retry-After`.
    pub max_concurrent_queries: usize,
    /// How long a request waits for a query slot or body budget before it gets 503.
    pub queue_timeout: Duration,
    /// The largest serialised query result; larger ones get 400 telling the client to lower
    /// `count` or omit fields.
    pub max_result_bytes: usize,
    /// Links shown on the `GET /` query page, as `(href, text)`: a server that composes more
    /// routes (`mnemon serve` mounts the inspector at `/ui/`) points people at them.
    pub page_links: Vec<(String, String)>,
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
            index: IndexUse::default(),
            batch_scans_from: DEFAULT_BATCH_SCANS_FROM,
            prescan_shared_scans: true,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            max_buffered_body_bytes: DEFAULT_MAX_BUFFERED_BODY_BYTES,
            max_concurrent_queries: DEFAULT_MAX_CONCURRENT_QUERIES,
            queue_timeout: DEFAULT_QUEUE_TIMEOUT,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            page_links: Vec::new(),
        }
    }
}
