//! Mnemon: a memory LLM agents can trust.
//!
//! This facade re-exports Mnemon's components under one roof, and the `Mnemon` handle (feature
//! `sqlite`) opens them all over one data directory. Depend on it to get everything, or on a
//! single component crate (`mnemon-store`, `mnemon-library`, …) to get only that part.
//!
//! | module | crate | holds |
//! |---|---|---|
//! | [`types`] | `mnemon-types` | the value tree, `Asset`, meta, `AssetRef`, `Msg`, `Artifact`, `Embedder` |
//! | [`db`] | `mnemon-db` | storage plumbing: `Durability`, `Namespace`, schemas and migrations, SQLite (and PostgreSQL) setup, atomic file writes |
//! | [`assets`] | `mnemon-store` | the `AssetStore` trait, in-memory and SQLite stores |
//! | [`refs`] | `mnemon-refs` | references in tool parameters and message text |
//! | [`artifacts`] | `mnemon-artifacts` | artifact stores, backends, SaveArtifact, ArtifactMemory, templates |
//! | [`memory`] | `mnemon-memory` | conversation memory and recall |
//! | [`library`] | `mnemon-library` | embedding libraries and their query engine |
//! | [`embed`] | `mnemon-embed` | `Embedder` implementations (hashing, OpenAI-compatible), the `cl100k_base` tokenizer |
//! | [`import`] | `mnemon-import` | building libraries from Markdown and text files |
#![cfg_attr(
    feature = "host",
    doc = "| [`host`] | `mnemon-host` | the HTTP library host (feature `host`) |"
)]
#![cfg_attr(
    not(feature = "host"),
    doc = "| `host` | `mnemon-host` | the HTTP library host (feature `host`, off in this build) |"
)]
//!
//! Cargo features: `sqlite` (default) enables the durable memory store and the
#![cfg_attr(feature = "sqlite", doc = "[`Mnemon`]")]
#![cfg_attr(not(feature = "sqlite"), doc = "`Mnemon`")]
//! handle; `postgres` (default) PostgreSQL for the handle (`Backend::Postgres`, docs/postgres.md)
//! and the CLI's `--database-url`; `host` (default) the HTTP host; `cli` (default) the `mnemon` binary. A program that
//! only embeds Mnemon can use `default-features = false, features = ["sqlite"]`.
//!
//! Each thing has one home. A type several components share is defined once, in [`types`]
//! (`Embedder`, `Tokenizer`, `Msg`, `Artifact`) or [`db`] (`Durability`, `Namespace`), and that
//! is its name here; a component that re-exports one for its own users (as [`embed`] does the
//! embedder traits) hands out that same item, not a second type. Names that could be confused
//! say what they hold: `SqliteAssetStore`, `SqliteArtifactStore`, `SqliteMemoryStore`.
//!
//! ```
//! use mnemon::assets::{AssetStore, InMemoryStore};
//! use mnemon::types::Asset;
//!
//! let store = InMemoryStore::new();
//! store.put(&Asset::new(serde_json::json!({"labels": ["cat"]})).with_id("a1"))?;
//! let label = store.resolve(&"asset://a1/content/labels/0".parse()?)?;
//! assert_eq!(label.as_str(), Some("cat"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "sqlite")]
mod handle;
#[cfg(feature = "sqlite")]
pub mod migrate;

#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub use handle::PostgresPools;
#[cfg(feature = "sqlite")]
pub use handle::{
    ARTIFACTS_DIR, Backend, DATABASE_FILE, LIBRARIES_DIR, Mnemon, NAMESPACES_DIR, OpenError,
    OpenOptions, RecallOptions, artifact_backends,
};

pub use mnemon_artifacts as artifacts;
pub use mnemon_db as db;
pub use mnemon_embed as embed;
#[cfg(feature = "host")]
pub use mnemon_host as host;
pub use mnemon_import as import;
pub use mnemon_library as library;
pub use mnemon_memory as memory;
pub use mnemon_refs as refs;
pub use mnemon_store as assets;
pub use mnemon_types as types;
