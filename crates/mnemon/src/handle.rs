//! [`Mnemon`]: one handle over a data directory, and optionally a PostgreSQL database.
//!
//! The handle lives in `mnemon-ops` (as `Stores`), where the operations of the REST server,
//! the MCP tools and the CLI run against it; the facade re-exports it under its own name. The
//! layout is fixed so that the CLI, the server and embedding programs agree on it:
//!
//! ```text
//! <dir>/mnemon.sqlite3   assets, artifact records and memory threads (WAL mode)
//! <dir>/artifacts/       artifact content saved with the `write_to_file` backend
//! <dir>/libraries/       embedding libraries (`*.json`), served by `mnemon serve`
//! ```
//!
//! With [`Backend::Postgres`] (feature `postgres`) the assets, artifact records and memory live
//! in a PostgreSQL database instead, so agents on several machines share them; `<dir>` then only
//! holds the libraries (docs/postgres.md, "Choosing the backend"). Every handle is opened for
//! one namespace ([`OpenOptions::namespace`]).
//!
//! ```
//! use mnemon::Mnemon;
//! use mnemon::assets::AssetStore;
//! use mnemon::types::Asset;
//!
//! let dir = std::env::temp_dir().join(format!("mnemon-doc-{}", std::process::id()));
//! let mnemon = Mnemon::open(&dir)?;
//! mnemon.assets().put(&Asset::new("hello").with_id("a1"))?;
//! let value = mnemon.assets().resolve(&"asset://a1/content".parse()?)?;
//! assert_eq!(value.as_str(), Some("hello"));
//! # drop(mnemon);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "postgres")]
pub use mnemon_ops::PostgresPools;
pub use mnemon_ops::{
    ARTIFACTS_DIR, Backend, DATABASE_FILE, LIBRARIES_DIR, NAMESPACES_DIR, OpenError, OpenOptions,
    RecallOptions, Stores as Mnemon, artifact_backends,
};
