//! An HTTP host serving Mnemon embedding libraries, compatible with clients of the Polymath host
//! (docs/reference/host.md#library-host-protocol).
//!
//! * `POST /` runs a query. Arguments come from a form-urlencoded, multipart or JSON body; the
//!   media type is matched case-insensitively and its parameters are ignored. `count` defaults
//!   to 1000. Results are 200 with compact JSON; bad arguments are 400 `{"error": "<message>"}`;
//!   bodies over the limit (2 MiB by default) are 413, refused on `Content-Length` first;
//!   bodies that do not arrive within 30 s are 408.
//! * `OPTIONS /` answers CORS preflights; every response of these routes allows any origin
//!   (not those of [`Host::with_routes`]). Responses of 500
//!   bytes or more are gzipped for clients that accept it.
//! * `GET /healthz` (200 `{"status":"ok"}`), `GET /_ah/warmup` (204), and, for loopback clients,
//!   `POST /admin/reload`. Anything else is 404 or 405 with a JSON error.
//! * Queries run on the blocking pool (the scan itself fans out over rayon), so a slow query
//!   never holds up the async threads accepting other requests.
//! * The served library and access policy form one immutable snapshot behind an `Arc`; a reload
//!   (SIGHUP, `POST /admin/reload` or [`HostHandle::reload`]) loads a new one and swaps it in
//!   atomically, while running requests finish on the old one.
//! * SIGINT and SIGTERM stop accepting connections and drain in-flight requests for up to 10 s.
//! * Each request is logged once (method, path, status, latency, bits) under the tracing target
//!   `mnemon_host::access`. Bodies, query strings and headers are never logged, so neither
//!   tokens nor embeddings reach the log.
//!
//! ```
//! use mnemon_host::{ConfigSource, Host, HostOptions, LibrarySource, Sources};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let library = br#"{"version": 1, "embedding_model": "m", "bits": []}"#;
//! let sources = Sources {
//!     library: LibrarySource::bytes("empty", &library[..]),
//!     config: ConfigSource::Defaults,
//! };
//! let runtime = tokio::runtime::Runtime::new()?;
//! runtime.block_on(async {
//!     let host = Host::bind("127.0.0.1:0".parse()?, sources, HostOptions::default()).await?;
//!     assert!(host.local_addr()?.ip().is_loopback());
//!     assert_eq!(host.bits(), 0);
//!     // A real server passes a shutdown signal; `run_until_signal` uses SIGINT/SIGTERM.
//!     host.run(async {}).await?;
//!     Ok(())
//! })
//! # }
//! ```

mod access_log;
mod batch;
mod body;
mod compose;
mod cors;
mod error;
mod limits;
mod listener;
mod options;
mod page;
mod response;
mod routes;
mod server;
mod source;
mod state;

pub use compose::{HeldBody, LimitRejection, RequestLimits, RequestSlot, ServedLibrary};
pub use cors::{is_cross_origin, is_loopback_name};
pub use error::HostError;
pub use listener::raise_fd_limit;
pub use options::{
    DEFAULT_ADDR, DEFAULT_BATCH_SCANS_FROM, DEFAULT_COUNT, DEFAULT_HEADER_READ_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_BUFFERED_BODY_BYTES,
    DEFAULT_MAX_CONCURRENT_QUERIES, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_PORT, DEFAULT_QUEUE_TIMEOUT, DEFAULT_SEND_TIMEOUT, HostOptions,
};
pub use server::{Host, HostHandle};
pub use source::{ConfigSource, LibrarySource, Sources};
pub use state::Reloaded;
