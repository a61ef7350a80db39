//! Conversation memory for agents: compatible with AgentScope files, durable and searchable.
//!
//! - [`Memory`]: the object-safe trait (get, add with dedupe, delete, load, export, clear,
//!   embedding retrieval, marks, token-budgeted recall). Every implementation passes the same
//!   conformance suite (`mnemon-tests`, `memory_conformance`).
//! - [`InMemoryMemory`]: the counterpart of AgentScope's `TemporaryMemory`.
//! - [`SqliteMemoryStore`] / [`SqliteMemory`] (feature `sqlite`, on by default): one SQLite
//!   file in WAL mode holding many threads, scoped by user, agent and session; an acknowledged
//!   write survives `kill -9`. Connection setup, durability and the schema's migrations are
//!   `mnemon-db`'s, shared with the other stores.
//! - [`PostgresMemoryStore`] / [`PostgresMemory`] (feature `postgres`): the same threads in a
//!   PostgreSQL database shared by many processes and machines, with pgvector HNSW indexes on
//!   the embeddings when the extension is there (docs/postgres.md).
//! - Durable stores are opened for one [`Namespace`] (tenant): no call through a handle reads,
//!   lists, counts, searches or deletes another namespace's threads. The default namespace holds
//!   everything written before namespaces existed.
//! - Retrieval ([`RetrievalQuery`], [`RetrieveOptions`], [`Metric`]) shortlists with the SIMD
//!   scan of `mnemon-vector` over a cached, aligned embedding matrix, and returns the spec's
//!   exact `f64` scores (results equal scoring every message in `f64`); any
//!   [`Embedder`](mnemon_types::Embedder) fills in missing embeddings (offline, without a
//!   model: `mnemon_embed::HashingEmbedder`, which the conformance suite uses).
//! - Across sessions (durable stores): `search_with` a `SearchRequest` — the threads a
//!   `ScopeFilter` selects, a metadata `Filter` applied before the top-k cut, and a
//!   `SearchMode`: vector, keyword (SQLite FTS5, PostgreSQL `tsvector`) or hybrid (reciprocal
//!   rank fusion, `HybridWeights`); `forget` deletes a subject (`Forgotten`); messages
//!   expire ([`AddOptions::expiry`], a store's `default_ttl` and clock) and `gc` removes them;
//!   every stored embedding records its model, a recall with another is refused
//!   ([`MemoryError::EmbeddingModelMismatch`]) and `reembed` moves threads to a new one
//!   (docs/reference/memory.md).
//! - [`Tokenizer`]s drive [`Memory::recall_within_budget`]: [`WhitespaceTokenizer`] needs no
//!   vocabulary; OpenAI's `cl100k_base` counts are `mnemon_embed::Cl100kTokenizer` (feature
//!   `tiktoken` of `mnemon-embed`, which needs no network client).
//!
//! Messages are [`mnemon_types::Msg`]; see [`mnemon_types::msg`] for their text forms.
//!
//! ```
//! use mnemon_memory::{InMemoryMemory, Memory, MemoryQuery, RetrievalQuery, RetrieveOptions};
//! use serde_json::json;
//!
//! let memory = InMemoryMemory::new();
//! memory.add(vec![
//!     json!({"name": "Mara", "content": "Is the ferry running?", "role": "user",
//!            "embedding": [0.1, 0.9]}).into(),
//!     json!({"name": "Harbourmaster", "content": "Yes, at 09:30.",
//!            "embedding": [0.8, 0.2]}).into(),
//! ])?;
//! assert_eq!(memory.size()?, 2);
//! assert_eq!(
//!     memory.render(&MemoryQuery { recent_n: Some(1), ..Default::default() })?,
//!     "Harbourmaster: Yes, at 09:30."
//! );
//! let best = memory.retrieve_by_embedding(
//!     RetrievalQuery::Vector(vec![0.0, 1.0]),
//!     &RetrieveOptions::default(),
//!     None,
//! )?;
//! assert_eq!(best[0].message.name(), "Mara");
//! # Ok::<(), mnemon_memory::MemoryError>(())
//! ```

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod activity;
mod clock;
mod document;
mod embedding_cache;
mod entry;
mod error;
mod exact;
mod export;
mod in_memory;
mod load;
mod marks;
mod memory;
mod ops;
#[cfg(feature = "postgres")]
mod postgres;
mod recall_index;
mod report;
mod retrieval;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod scope;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod search;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sweep;
mod thread;
mod tokens;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod vector_scan;
mod words;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use activity::{ThreadPage, ThreadSummary};
pub use clock::{SystemClock, default_factory};
pub use document::{EXPIRES_KEY as STORED_EXPIRES_KEY, MODEL_KEY as STORED_MODEL_KEY};
pub use document::{ExportFormat, ExportOptions, ExportTarget, Exported, LoadSource, MsgInput};
pub use error::MemoryError;
pub use in_memory::InMemoryMemory;
pub use load::check_messages;
pub use marks::{MAX_MARK_BYTES, validate_mark};
pub use memory::{AddOptions, Memory, MemoryQuery, MsgFilter};
/// The tenant a durable store is opened for (`mnemon-db`'s one type for every store).
pub use mnemon_db::Namespace;
/// The metadata filter language of [`SearchRequest::filter`] (`mnemon-filter`'s, re-exported so
/// that callers need no other crate; docs/reference/filters.md).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use mnemon_filter::Filter;
/// The token counters of [`Memory::recall_within_budget`], kept in `mnemon-types` beside
/// `Embedder` and re-exported here.
pub use mnemon_types::{Tokenizer, WhitespaceTokenizer};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresMemory, PostgresMemoryOptions, PostgresMemoryStore, VectorMode};
pub use recall_index::{RecallIndexOptions, RecallIndexStatus};
pub use report::{AddReport, DeleteByIdReport, DeleteReport};
pub use retrieval::{Metric, RetrievalQuery, RetrieveOptions, Retrieved, ScoreFn};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use scope::Scope;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use search::{
    HybridWeights, MAX_HYBRID_CANDIDATES, MAX_KEYWORD_MATCHES, ScopeFilter, SearchHit, SearchMode,
    SearchRequest, SearchResults,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteMemory, SqliteMemoryOptions, SqliteMemoryStore};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use sweep::Forgotten;
pub use tokens::{BudgetOptions, BudgetRecall};
pub use words::keyword_words;
