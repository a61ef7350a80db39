//! The crate's error type (docs/reference/memory.md#errors).

use mnemon_types::MsgError;

/// Everything a memory operation can fail with. `p` is the position of the offending item in
/// its batch or document.
///
/// A failed operation leaves the memory exactly as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// A required key is absent.
    #[error("item {p}: missing required field \"{field}\"")]
    MissingField {
        /// Position of the item.
        p: usize,
        /// The missing key.
        field: String,
    },
    /// A key has a value of the wrong type or shape.
    #[error("item {p}: field \"{field}\" must be {expected}")]
    InvalidField {
        /// Position of the item.
        p: usize,
        /// The offending key.
        field: String,
        /// What the value must be.
        expected: String,
    },
    /// An item is not a JSON object.
    #[error("item {p}: expected a JSON object")]
    NotAnObject {
        /// Position of the item.
        p: usize,
    },
    /// An extra used a core or marker key.
    #[error("key \"{key}\" is reserved")]
    ReservedKey {
        /// The key.
        key: String,
    },
    /// A `__type` other than `Msg`, `Tht` or `List`.
    #[error("deserialization of type \"{name}\" is not supported")]
    UnknownType {
        /// The `__type` value.
        name: String,
    },
    /// A serialized message without any format marker.
    #[error("serialized message has no \"__type\" or \"__module__\"/\"__name__\" key")]
    MissingType,
    /// A 0.1.x object of a class other than `agentscope.message.msg.Msg`.
    #[error("unsupported serialized class {module}.{name}")]
    UnsupportedClass {
        /// The `__module__` value.
        module: String,
        /// The `__name__` value.
        name: String,
    },
    /// The text is not JSON.
    #[error("invalid JSON: {detail}")]
    InvalidJson {
        /// The parser's message.
        detail: String,
    },
    /// A document that is neither an array nor an object.
    #[error("expected a JSON array or object of messages, found {found}")]
    InvalidFormat {
        /// What was found (e.g. "a number").
        found: String,
    },
    /// Reading or writing a file failed.
    #[error("I/O error on {path}: {detail}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's message.
        detail: String,
    },
    /// Retrieval needs embeddings that some messages lack, and no embedder was given.
    #[error("message {id} has no embedding ({missing} without one) and no embedder was given")]
    MissingEmbedding {
        /// The first message without an embedding.
        id: String,
        /// How many candidates lack one.
        missing: usize,
    },
    /// An embedding's length differs from the query's.
    #[error("message {id}: embedding has {found} dimensions, query has {expected}")]
    DimensionMismatch {
        /// The message.
        id: String,
        /// The query's dimension.
        expected: usize,
        /// The message embedding's dimension.
        found: usize,
    },
    /// The query cannot be used (e.g. an empty vector).
    #[error("invalid query: {reason}")]
    InvalidQuery {
        /// Why.
        reason: String,
    },
    /// Text had to be embedded but no embedder was given.
    #[error("a text query, or a message without an embedding, needs an embedder")]
    QueryNeedsEmbedder,
    /// The embedder returned an error.
    #[error("embedder {model} failed: {detail}")]
    Embedder {
        /// The embedder's model name.
        model: String,
        /// Its message.
        detail: String,
    },
    /// The embedder returned the wrong number of vectors, wrong lengths or non-finite numbers.
    #[error("embedder {model} broke its contract: {detail}")]
    EmbedderContract {
        /// The embedder's model name.
        model: String,
        /// What was wrong.
        detail: String,
    },
    /// A mark that is empty or longer than 255 bytes.
    #[error("invalid mark \"{mark}\": must be 1 to 255 bytes")]
    InvalidMark {
        /// The mark.
        mark: String,
    },
    /// A recall or search with an embedder whose model is not the one that made stored
    /// embeddings: their scores would not be comparable
    /// (docs/reference/memory.md#embedding-models).
    #[error(
        "stored embeddings were made by model {stored:?}, this recall uses {requested:?}: recall \
         with the {stored:?} embedder, or re-embed the messages with {requested:?} (reembed)"
    )]
    EmbeddingModelMismatch {
        /// A model of the stored embeddings.
        stored: String,
        /// The model of the recall's embedder.
        requested: String,
    },
    /// A message was given an expiry by a memory that keeps no clock (`InMemoryMemory`).
    #[error(
        "this memory does not expire messages: add them without an expiry, or use a durable \
         store (SQLite or PostgreSQL), whose gc removes expired messages"
    )]
    ExpiryUnsupported,
    /// A metadata filter of a search that cannot be applied to messages (a field no message
    /// has a place for, such as `embedding`), or that is malformed (see
    /// docs/reference/memory.md#filters for the fields and docs/reference/filters.md for the
    /// language).
    #[error("invalid filter: {detail}")]
    InvalidFilter {
        /// What is wrong and where in the filter.
        detail: String,
    },
    /// A scope field given as the empty string.
    #[error("scope field {field} must not be empty")]
    InvalidScope {
        /// `user_id`, `agent_id` or `session_id`.
        field: String,
    },
    /// A thread-summary cursor that no listing returned (see
    /// docs/reference/memory.md#thread-summaries).
    #[error(
        "invalid thread cursor \"{cursor}\": pass the next cursor of the previous page as it was returned, or none for the first page"
    )]
    InvalidCursor {
        /// The cursor given.
        cursor: String,
    },
    /// The storage engine failed (including `SQLITE_BUSY` after the busy timeout).
    #[error("storage error: {detail}")]
    Storage {
        /// The engine's message.
        detail: String,
    },
    /// The database was written by a newer Mnemon.
    #[error("database schema version {found} is newer than supported version {supported}")]
    SchemaVersion {
        /// The version found in the file.
        found: i64,
        /// The newest version this build understands.
        supported: i64,
    },
}

impl From<MsgError> for MemoryError {
    fn from(error: MsgError) -> Self {
        match error {
            MsgError::MissingField { p, field } => MemoryError::MissingField { p, field },
            MsgError::InvalidField { p, field, expected } => {
                MemoryError::InvalidField { p, field, expected }
            }
            MsgError::NotAnObject { p } => MemoryError::NotAnObject { p },
            MsgError::ReservedKey { key } => MemoryError::ReservedKey { key },
            MsgError::UnknownType { name } => MemoryError::UnknownType { name },
            MsgError::MissingType => MemoryError::MissingType,
            MsgError::UnsupportedClass { module, name } => {
                MemoryError::UnsupportedClass { module, name }
            }
            MsgError::InvalidJson { detail } => MemoryError::InvalidJson { detail },
            // `MsgError` is non-exhaustive; keep any future variant's message.
            other => MemoryError::InvalidJson {
                detail: other.to_string(),
            },
        }
    }
}

#[cfg(feature = "sqlite")]
impl From<rusqlite::Error> for MemoryError {
    fn from(error: rusqlite::Error) -> Self {
        MemoryError::Storage {
            detail: error.to_string(),
        }
    }
}
