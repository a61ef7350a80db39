//! Mnemon's operations, each defined once with typed input and output (serde + schemars), run
//! against the stores of one namespace: the Rust API that the REST server
//! (`mnemon-server`, docs/reference/rest.md) and, later, the CLI and MCP tools expose, so the
//! three cannot drift.
//!
//! * [`Stores`] opens the stores of a data directory (SQLite) or a PostgreSQL database for one
//!   namespace; the facade re-exports it as `mnemon::Mnemon`.
//! * [`Service`] is a `Stores` plus the models the operations use (an embedder for text search,
//!   the cl100k tokenizer for token budgets). Cheap to clone, `Send + Sync`; the stores are
//!   synchronous, so an async server calls operations on its blocking pool.
//! * Operations are methods of [`Service`], grouped by module: [`assets`] (put, get, list,
//!   delete, meta, resolve), [`refs`] (parameters, render), [`artifacts`] (save, get, latest,
//!   list, delete, load into a prompt), [`memory`] (sessions, add, get, search, marks, export,
//!   import) and [`library`] (list, query).
//! * [`status`]: the version, the backend (no secrets) and the namespace's sizes.
//! * Every failure is an [`OpsError`] with a stable [`code`](OpsError::code) and an
//!   [`ErrorKind`] a transport maps to its status.
//! * Lists page with opaque cursors ([`page`]).
//!
//! ```
//! use mnemon_ops::{Service, Stores};
//! use mnemon_ops::memory::{MemoryAddInput, MemoryGetInput, MessageBody};
//!
//! let dir = tempfile::tempdir()?;
//! let service = Service::new(Stores::open(dir.path())?);
//! service.memory_add(MemoryAddInput {
//!     session: "chat-1".into(),
//!     messages: vec![MessageBody(serde_json::json!({"name": "user", "content": "hi"}))],
//!     marks: vec![],
//! })?;
//! let got = service.memory_get(MemoryGetInput {
//!     session: "chat-1".into(), recent: None, mark: None, exclude_mark: None, tokens: None,
//!     include_embeddings: false,
//! })?;
//! assert_eq!(got.messages[0].0["content"], "hi");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod artifacts;
pub mod assets;
mod error;
pub mod expiry;
mod json_size;
pub mod library;
pub mod maintenance;
pub mod memory;
pub mod page;
#[cfg(feature = "postgres")]
mod pools;
pub mod refs;
mod service;
pub mod status;
mod stores;

pub use error::{ErrorKind, OpsError};
#[cfg(feature = "postgres")]
pub use pools::{INDEXER_CONNECTIONS, PostgresPools, STORE_CONNECTIONS};
pub use service::{DEFAULT_MAX_RESULT_BYTES, Service};
pub use stores::{
    ARTIFACTS_DIR, Backend, DATABASE_FILE, LIBRARIES_DIR, NAMESPACES_DIR, OpenError, OpenOptions,
    RecallOptions, Stores, artifact_backends,
};
