//! Artifacts: named results of earlier agent steps, saved by key and loaded into prompts
//! (spec/artifacts.md).
//!
//! - [`ArtifactStore`] keeps [`Artifact`](mnemon_types::Artifact) records: [`InMemoryArtifactStore`] and
//!   [`SqliteArtifactStore`] (the embedded default). Within a scope, the most recently saved
//!   artifact with a key wins, decided by a per-store sequence. With the `postgres` feature,
//!   `PostgresArtifactStore` keeps them in a PostgreSQL database. The durable stores are
//!   opened for one namespace (tenant, `mnemon_db::Namespace`) and never reach another's
//!   records.
//! - [`StorageBackend`]s keep content outside the record, registered by name in a
//!   [`BackendRegistry`]: `inline` (built in) and [`WriteToFile`] (root-confined, atomic).
//! - [`SaveArtifact`] saves content from a step's inputs; [`ArtifactMemory`] loads artifacts
//!   named by key into a prompt variable; [`PromptTemplate`] fills `{name}` placeholders.
//!
//! # Decisions where the spec is silent
//!
//! - **JSONPath** is RFC 9535 through `serde_json_path`, which tracks the RFC and runs the
//!   JSONPath Compliance Test Suite. A path without a leading `$` is read as `$.` + path, or
//!   `$` + path when it starts with `[` (`['a b']`).
//! - **Records are immutable.** Saving an id twice is [`ArtifactError::DuplicateId`]; saving a
//!   key again creates a new record that becomes the latest. `delete` leaves backend content
//!   alone, since several records may share a storage id.
//! - **`list`** returns a scope's records in save order. Required attributes that are only
//!   white space count as missing.
//! - **The dictionary form** ([`Artifact::to_dict`](mnemon_types::Artifact::to_dict)) has exactly the spec's eight keys, with
//!   `storage`/`storage_id` `null` for inline content and `data` `null` for content kept in a
//!   backend (it is not copied into the record).
//! - **SaveArtifact content**: `content_path` if set; else `inputs[content_key]`; else, when the
//!   start artifact (`artifact_from_key`) has `data`, that data; else an error. The start
//!   artifact's `storage` may also be the record form `{"backend", "id"}`. Configs with
//!   unknown keys are refused, so a misspelt key is reported rather than ignored.
//! - **ArtifactMemory input**: a list of keys, a string with `{key}` mentions (`{{`/`}}` are
//!   literal), or else a single key (trimmed). A missing input is an error; `null` means no
//!   keys. Content that a record points at but its backend no longer has is an error, not an
//!   empty `data:`.
//! - **`write_to_file` reads** return the file's text as a JSON string (pretty JSON was written
//!   as text, and displays the same).
//! - **Prompt templates** refuse Python's format specs, conversions and positional `{}` instead
//!   of silently mis-rendering them; non-string values render as compact JSON.
//!
//! ```
//! use mnemon_artifacts::{ArtifactStore, InMemoryArtifactStore};
//! use mnemon_types::Artifact;
//!
//! let store = InMemoryArtifactStore::new();
//! store.save(&Artifact::new("chat-1", "plan", "plan", "First plan"))?;
//! store.save(&Artifact::new("chat-1", "plan", "plan", "Second plan"))?;
//! let plan = store.latest("chat-1", "plan")?.expect("saved above");
//! assert_eq!(plan.name, "Second plan");
//! assert!(store.latest("chat-2", "plan")?.is_none());
//! # Ok::<(), mnemon_artifacts::ArtifactError>(())
//! ```

mod artifact_memory;
mod backend;
mod error;
mod file_backend;
mod in_memory;
#[cfg(feature = "postgres")]
mod postgres;
mod pretty;
mod save;
mod selector;
mod sqlite;
mod store;
mod template;

pub use artifact_memory::{
    ARTIFACT_MEMORY_CLASS_PATH, ArtifactMemory, ArtifactMemoryConfig, LoadedArtifacts,
    RELATED_ARTIFACTS_HEADER, render_block, render_block_within, requested_keys,
};
pub use backend::{BackendRegistry, INLINE, Storage, StorageBackend, WRITE_TO_FILE};
pub use error::{ArtifactError, BoxedSource};
pub use file_backend::{
    DEFAULT_MAX_FILE_BYTES, MAX_NAME_BYTES, MAX_PATH_BYTES, STALE_TEMP_AGE, WriteToFile,
};
pub use in_memory::InMemoryArtifactStore;
/// Expiry (docs/reference/artifacts.md#expiry): the clock the stores read and a save's
/// time-to-live, shared with the other stores through `mnemon-db`.
pub use mnemon_db::expiry::{Clock, Expiry, ManualClock, SystemClock};
/// The filter language of [`ArtifactStore::list_where`] (docs/reference/filters.md).
pub use mnemon_filter::{Filter, FilterError};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresArtifactOptions, PostgresArtifactStore};
pub use save::{SAVE_ARTIFACT_CLASS_PATH, SaveArtifact, SaveArtifactConfig};
pub use sqlite::{SqliteArtifactOptions, SqliteArtifactStore};
pub use store::{ArtifactStore, ArtifactSweep, FILTER_FIELDS, ListedArtifact, PageQuery, document};
pub use template::PromptTemplate;
/// The id type of artifact records, re-exported so callers need not depend on `uuid`.
pub use uuid::Uuid;
