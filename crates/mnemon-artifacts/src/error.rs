//! The crate's one error type. Every message says what was wrong and what to do about it.

use std::path::PathBuf;

use uuid::Uuid;

/// A boxed error from an underlying database driver, kept opaque so that the trait does not
/// tie implementations to one driver.
pub type BoxedSource = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong with artifacts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArtifactError {
    /// A record lacks required attributes.
    #[error(
        "the artifact is missing required attributes: {}; give each a non-empty value",
        .missing.join(", ")
    )]
    MissingAttributes {
        /// Dictionary names of the missing attributes (`key`, `type`, `name`), in that order.
        missing: Vec<String>,
    },

    /// A rendered block of loaded artifacts would pass the bound it was given
    /// ([`ArtifactMemory::with_max_block_bytes`](crate::ArtifactMemory::with_max_block_bytes)).
    #[error(
        "the loaded artifacts' block would be more than {max} bytes; load fewer keys, or the \
         large ones alone"
    )]
    BlockTooLarge {
        /// The bound, in bytes.
        max: usize,
    },

    /// A record with this id was saved before; records are immutable.
    #[error(
        "an artifact with id {id} is already saved; artifacts are immutable, so save a new one (with a new id) under the same key instead"
    )]
    DuplicateId {
        /// The id that is already taken.
        id: Uuid,
    },

    /// The database underneath a store failed.
    #[error("the artifact store failed while {action}: {error}")]
    Database {
        /// What the store was doing, e.g. `saving an artifact`.
        action: &'static str,
        /// The driver's error. Already in the message, so not exposed as `source()` (a field
        /// named `source` would be): reporters that walk the chain would print it again.
        error: BoxedSource,
    },

    /// A stored record could not be read back.
    #[error(
        "stored artifact {id} is damaged ({reason}); restore the database from a backup or delete the record"
    )]
    CorruptRecord {
        /// The record's id as stored.
        id: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The database was written by a newer version of the store.
    #[error(
        "the artifact tables have schema version {found}, but this build understands up to {supported}; upgrade mnemon"
    )]
    SchemaTooNew {
        /// Version found in the database.
        found: i64,
        /// Highest version this build knows.
        supported: i64,
    },

    /// No storage backend is registered under a name.
    #[error("no storage backend is named {name:?}; the registered backends are: {known}")]
    UnknownBackend {
        /// The requested name.
        name: String,
        /// The registered names, comma-separated.
        known: String,
    },

    /// A backend registration was refused.
    #[error("cannot register a storage backend as {name:?}: {reason}")]
    InvalidBackendName {
        /// The refused name.
        name: String,
        /// Why.
        reason: &'static str,
    },

    /// A storage id is unsafe or malformed.
    #[error(
        "storage id {id:?} is refused: {reason}; use a relative path inside the storage root, such as plans/plan.json"
    )]
    UnsafeStorageId {
        /// The storage id, cut to 300 characters.
        id: String,
        /// Why it was refused.
        reason: String,
    },

    /// Reading or writing artifact content failed.
    #[error("could not {action} artifact content at {}: {source}", .path.display())]
    ContentIo {
        /// `write`, `read`, `delete`, ...
        action: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// A record points at content its backend does not have.
    #[error(
        "the content of this artifact is missing: storage backend {backend:?} has nothing under {id:?} (was the file deleted or moved?)"
    )]
    ContentNotFound {
        /// The backend name.
        backend: String,
        /// The storage id.
        id: String,
    },

    /// Content whose stored form would take more than the backend's bound, or a stored file
    /// larger than it.
    #[error(
        "the artifact content of storage id {storage_id:?} takes more than {max} bytes as stored (structured content is written as pretty JSON, indented by its nesting, so deep content grows many times over): save less or flatter content, or a string"
    )]
    ContentTooLarge {
        /// The storage id.
        storage_id: String,
        /// The bound, in bytes.
        max: usize,
    },

    /// Content could not be turned into text for storage.
    #[error("could not encode the artifact content as JSON: {0}")]
    ContentEncoding(#[source] serde_json::Error),

    /// A backend was named but no storage id was given.
    #[error(
        "storage backend {backend:?} needs a storage id; set artifact_storage_id in the config, or give the start artifact a storage_id or identifier"
    )]
    StorageIdRequired {
        /// The backend name.
        backend: String,
    },

    /// A JSONPath expression does not parse.
    #[error(
        "{setting} = {path:?} is not a valid JSONPath (RFC 9535): {message}; write it like $.plan.data or plan.data"
    )]
    InvalidJsonPath {
        /// The config setting that held it.
        setting: &'static str,
        /// The expression as written.
        path: String,
        /// The parser's explanation.
        message: String,
    },

    /// A JSONPath selected zero or several values where exactly one is needed.
    #[error(
        "{setting} = {path:?} must select exactly one value from the inputs, but it selected {count}; {hint}"
    )]
    MatchCount {
        /// The config setting that held the path.
        setting: &'static str,
        /// The expression as written.
        path: String,
        /// How many values it selected.
        count: usize,
        /// What to do about it.
        hint: &'static str,
    },

    /// `artifact_from_key` selected something other than an object.
    #[error(
        "artifact_from_key = {path:?} selected {found}, not an artifact dictionary (a JSON object with key, type, name, ...)"
    )]
    StartNotObject {
        /// The expression as written.
        path: String,
        /// The JSON type found.
        found: &'static str,
    },

    /// A field of the start artifact dictionary has the wrong JSON type.
    #[error(
        "field {field:?} of the artifact selected by artifact_from_key must be a string, but it is {found}"
    )]
    StartFieldNotString {
        /// The field.
        field: &'static str,
        /// The JSON type found.
        found: &'static str,
    },

    /// The content input is absent.
    #[error(
        "the inputs have no {key:?} entry to take the content from; provide it, or set content_key or content_path in the config"
    )]
    ContentMissing {
        /// The content key looked up.
        key: String,
    },

    /// The inputs are not a JSON object.
    #[error("the inputs must be a JSON object mapping input names to values, but they are {found}")]
    InputsNotObject {
        /// The JSON type found.
        found: &'static str,
    },

    /// An ArtifactMemory input is missing or of the wrong shape.
    #[error(
        "input {input_key:?} {problem}; give a list of keys, one key, or text mentioning keys in braces like \"Tell me about {{plan}}\""
    )]
    BadKeysInput {
        /// The input key.
        input_key: String,
        /// What is wrong.
        problem: String,
    },

    /// A step's config could not be read.
    #[error("invalid {component} config: {message}")]
    InvalidConfig {
        /// `SaveArtifact` or `ArtifactMemory`.
        component: &'static str,
        /// What is wrong.
        message: String,
    },

    /// A prompt template does not parse.
    #[error("prompt template error at byte {position}: {reason}")]
    TemplateSyntax {
        /// Byte offset in the template.
        position: usize,
        /// What is wrong and how to fix it.
        reason: &'static str,
    },

    /// Rendering a template lacked variables.
    #[error("the prompt template needs variables that were not given: {}; provide a value for each", .names.join(", "))]
    MissingVariables {
        /// The missing names, in order of first use.
        names: Vec<String>,
    },

    /// A filter cannot be applied: a bad path or type, or a field artifacts do not have (the
    /// message says where in the filter).
    #[error("bad artifact filter: {0} (docs/reference/artifacts.md#filters)")]
    Filter(mnemon_filter::FilterError),
}

// Not `#[from]`: that would also make the filter error the `source()`, printed twice.
impl From<mnemon_filter::FilterError> for ArtifactError {
    fn from(error: mnemon_filter::FilterError) -> Self {
        ArtifactError::Filter(error)
    }
}

impl ArtifactError {
    /// Whether the error comes from what the caller gave (a config, inputs, a storage id, a
    /// template, a record) rather than from the environment (the database, the file system,
    /// damaged data). A CLI maps the first kind to a usage error, a server to a 4xx status.
    pub fn is_caller_error(&self) -> bool {
        match self {
            ArtifactError::MissingAttributes { .. }
            | ArtifactError::DuplicateId { .. }
            | ArtifactError::UnknownBackend { .. }
            | ArtifactError::InvalidBackendName { .. }
            | ArtifactError::UnsafeStorageId { .. }
            | ArtifactError::StorageIdRequired { .. }
            | ArtifactError::InvalidJsonPath { .. }
            | ArtifactError::MatchCount { .. }
            | ArtifactError::StartNotObject { .. }
            | ArtifactError::StartFieldNotString { .. }
            | ArtifactError::ContentMissing { .. }
            | ArtifactError::InputsNotObject { .. }
            | ArtifactError::BadKeysInput { .. }
            | ArtifactError::InvalidConfig { .. }
            | ArtifactError::TemplateSyntax { .. }
            | ArtifactError::MissingVariables { .. }
            | ArtifactError::BlockTooLarge { .. }
            | ArtifactError::ContentTooLarge { .. }
            | ArtifactError::Filter(_) => true,
            ArtifactError::Database { .. }
            | ArtifactError::CorruptRecord { .. }
            | ArtifactError::SchemaTooNew { .. }
            | ArtifactError::ContentIo { .. }
            | ArtifactError::ContentNotFound { .. }
            | ArtifactError::ContentEncoding(_) => false,
        }
    }

    /// Wraps a database driver's error.
    pub fn database(action: &'static str, source: impl Into<BoxedSource>) -> Self {
        ArtifactError::Database {
            action,
            error: source.into(),
        }
    }
}

/// The JSON type name of a value, for error messages.
pub(crate) fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
