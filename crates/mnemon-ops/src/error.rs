//! The one error type of every operation: a stable machine [`code`](OpsError::code), a
//! [`kind`](OpsError::kind) a transport maps to its own status (docs/reference/rest.md#errors),
//! and a message that says what to fix.

use mnemon_artifacts::ArtifactError;
use mnemon_memory::MemoryError;
use mnemon_refs::RefsError;
use mnemon_store::{ResolveError, StoreError};

use crate::stores::OpenError;

/// What kind of failure an error is, for a transport to choose its status by (HTTP: 400, 404,
/// 409, 422, 503, 500).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input is malformed (not the shape the operation takes): HTTP 400.
    BadRequest,
    /// What the input names does not exist: HTTP 404.
    NotFound,
    /// The input conflicts with what is stored: HTTP 409.
    Conflict,
    /// The input is well formed but cannot be carried out as given: HTTP 422.
    Unprocessable,
    /// A part the operation needs (the database, the embedder) is unreachable for now: HTTP 503.
    Unavailable,
    /// A fault of the service (damaged data, a bug): HTTP 500.
    Internal,
}

/// Why an operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpsError {
    /// The input does not have the shape the operation takes.
    #[error("{message}")]
    InvalidInput {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A metadata filter that is not one of docs/reference/filters.md (the message says where
    /// in the filter it is wrong).
    #[error("bad filter: {message} (docs/reference/filters.md has the language)")]
    InvalidFilter {
        /// The filter's error.
        message: String,
    },
    /// A pagination cursor that this list did not hand out (or that names an item since removed).
    #[error(
        "the cursor is not one this list handed out (or the item it points after was removed); \
         start again without a cursor"
    )]
    InvalidCursor,
    /// No asset with this id in the namespace.
    #[error("there is no asset with id {asset_id:?}; GET /v1/assets lists the stored ids")]
    AssetNotFound {
        /// The id asked for.
        asset_id: String,
    },
    /// No artifact with this id (or no artifact for this key) in the namespace.
    #[error("{what}; GET /v1/artifacts?scope=… lists a scope's artifacts")]
    ArtifactNotFound {
        /// What was looked for.
        what: String,
    },
    /// No memory session with this id in the namespace.
    #[error("there is no memory session {session:?}; GET /v1/memory/sessions lists them")]
    SessionNotFound {
        /// The session asked for.
        session: String,
    },
    /// No message with this id in the session.
    #[error("there is no message {id:?} in memory session {session:?}")]
    MessageNotFound {
        /// The session.
        session: String,
        /// The message id asked for.
        id: String,
    },
    /// No library is served.
    #[error("no library is served; start the server with --library FILE|DIR")]
    NoLibrary,
    /// Text search needs an embedder and none is configured.
    #[error(
        "searching by text needs an embedder, and none is configured; start the server with \
         --embedding-model (for example mnemon:hashing-v1-256), or search with a vector"
    )]
    NoEmbedder,
    /// An asset store error.
    #[error(transparent)]
    Store(StoreError),
    /// A reference error.
    #[error(transparent)]
    Refs(RefsError),
    /// An artifact error.
    #[error(transparent)]
    Artifact(ArtifactError),
    /// A memory error.
    #[error(transparent)]
    Memory(MemoryError),
    /// A library error.
    #[error(transparent)]
    Library(mnemon_library::LibraryError),
    /// A library query's result would be larger than the service's limit
    /// ([`Service::with_max_result_bytes`](crate::Service::with_max_result_bytes)); it was
    /// refused as it was written, so nothing past the limit was built.
    #[error(
        "the result is larger than the limit of {max} bytes; ask for fewer bits with a lower \
         count, or leave fields out with omit (\"embedding\", the default, leaves out the \
         embeddings)"
    )]
    ResultTooLarge {
        /// The limit, in bytes of JSON.
        max: usize,
    },
    /// A session's messages (`memory_get`, `memory_export`) take more bytes as JSON than the
    /// result limit ([`Service::with_max_result_bytes`](crate::Service::with_max_result_bytes)).
    #[error(
        "the session's messages take more than the limit of {max} bytes as JSON; ask for the \
         latest with recent or within a token budget with tokens, leave the embeddings out, or \
         read the session in parts by mark"
    )]
    MessagesTooLarge {
        /// The limit, in bytes of JSON.
        max: usize,
    },
    /// The artifacts an `artifact_load` names render to more bytes than the result limit.
    #[error(
        "the loaded artifacts take more than the limit of {max} bytes; name fewer keys, or keep \
         large content in artifacts loaded on their own"
    )]
    LoadTooLarge {
        /// The limit, in bytes.
        max: usize,
    },
    /// A library text query with a server embedder of another model than the library's.
    #[error(
        "the server's embedder is {embedder:?} but the library's model is {library:?}; query \
         with an embedding of the library's model"
    )]
    LibraryModelMismatch {
        /// The server embedder's model.
        embedder: String,
        /// The library's model.
        library: String,
    },
    /// A session search's hits (`memory_search`) take more bytes as JSON than the result limit.
    #[error(
        "the search hits take more than the limit of {max} bytes as JSON; ask for fewer with \
         top_k, or leave the embeddings out"
    )]
    HitsTooLarge {
        /// The limit, in bytes of JSON.
        max: usize,
    },
    /// A result could not be written as JSON: a fault of the service, not of the input.
    #[error("the result could not be written as JSON: {detail}")]
    Unwritable {
        /// What failed.
        detail: String,
    },
    /// The namespace's stores did not open (a server opens them on the namespace's first
    /// request): for now, when the database could not be reached or a connection opened (the
    /// process out of file descriptors), and the same request may succeed later; for good
    /// when the file is damaged or written by a newer Mnemon.
    #[error("cannot open the stores to serve: {0}")]
    Open(OpenError),
}

/// What a remote caller is told of a storage failure ([`OpsError::withheld_message`]).
const STORAGE_UNAVAILABLE: &str = "the storage is unavailable (the database could not \
     be reached, or a file could not be read or written); retrying may work, and the server's \
     log has the details";

impl OpsError {
    /// An [`OpsError::InvalidInput`] with this message.
    pub fn invalid(message: impl Into<String>) -> OpsError {
        OpsError::InvalidInput {
            message: message.into(),
        }
    }

    /// The stable machine-readable code (docs/reference/rest.md#errors lists them all).
    pub fn code(&self) -> &'static str {
        match self {
            OpsError::InvalidInput { .. } => "invalid_input",
            OpsError::InvalidCursor => "invalid_cursor",
            OpsError::InvalidFilter { .. } => "invalid_filter",
            OpsError::AssetNotFound { .. } => "asset_not_found",
            OpsError::ArtifactNotFound { .. } => "artifact_not_found",
            OpsError::SessionNotFound { .. } => "session_not_found",
            OpsError::MessageNotFound { .. } => "message_not_found",
            OpsError::NoLibrary => "no_library",
            OpsError::NoEmbedder => "embedder_not_configured",
            OpsError::ResultTooLarge { .. }
            | OpsError::MessagesTooLarge { .. }
            | OpsError::HitsTooLarge { .. }
            | OpsError::LoadTooLarge { .. } => "result_too_large",
            OpsError::Unwritable { .. } => "internal",
            OpsError::LibraryModelMismatch { .. } => "embedding_model_mismatch",
            OpsError::Open(error) => match error {
                OpenError::Assets(StoreError::Storage { .. })
                | OpenError::Artifacts(ArtifactError::Database { .. })
                | OpenError::Memory(MemoryError::Storage { .. }) => "storage_unavailable",
                #[cfg(feature = "postgres")]
                OpenError::Database(_) => "storage_unavailable",
                _ => "internal",
            },
            OpsError::Store(error) => match error {
                StoreError::Resolve(ResolveError::AssetNotFound { .. }) => "asset_not_found",
                StoreError::Resolve(_) => "reference_unresolved",
                StoreError::Filter(_) => "invalid_filter",
                e if e.is_caller_error() => "invalid_asset",
                StoreError::Storage { .. } => "storage_unavailable",
                _ => "internal",
            },
            OpsError::Refs(error) => match error {
                RefsError::Unresolved {
                    error: StoreError::Resolve(ResolveError::AssetNotFound { .. }),
                    ..
                } => "asset_not_found",
                RefsError::Unresolved { error, .. } if !error.is_caller_error() => {
                    "storage_unavailable"
                }
                RefsError::Unresolved { .. } => "reference_unresolved",
                RefsError::RenderTooLarge { .. }
                | RefsError::ParamsTooLarge { .. }
                | RefsError::ReadTooLarge { .. } => "result_too_large",
                RefsError::TooManyMarkers { .. } | RefsError::TooManyReferences { .. } => {
                    "too_many_references"
                }
                e if e.is_caller_error() => "invalid_reference",
                _ => "internal",
            },
            OpsError::Artifact(error) => match error {
                ArtifactError::DuplicateId { .. } => "artifact_exists",
                ArtifactError::Filter(_) => "invalid_filter",
                // Content that is there but cannot be decoded is damaged: a fault to mend,
                // which retrying does not (as content gone missing is).
                ArtifactError::ContentIo { source, .. }
                    if source.kind() == std::io::ErrorKind::InvalidData =>
                {
                    "internal"
                }
                ArtifactError::Database { .. } | ArtifactError::ContentIo { .. } => {
                    "storage_unavailable"
                }
                ArtifactError::CorruptRecord { .. } | ArtifactError::SchemaTooNew { .. } => {
                    "internal"
                }
                ArtifactError::ContentNotFound { .. } => "artifact_content_missing",
                _ => "invalid_artifact",
            },
            OpsError::Memory(error) => match error {
                MemoryError::Storage { .. } => "storage_unavailable",
                MemoryError::SchemaVersion { .. } => "internal",
                MemoryError::Embedder { .. } | MemoryError::EmbedderContract { .. } => {
                    "embedder_failed"
                }
                MemoryError::QueryNeedsEmbedder => "embedder_not_configured",
                MemoryError::InvalidMark { .. } => "invalid_mark",
                MemoryError::DimensionMismatch { .. } => "dimension_mismatch",
                MemoryError::InvalidFilter { .. } => "invalid_filter",
                MemoryError::InvalidQuery { .. } => "invalid_query",
                MemoryError::EmbeddingModelMismatch { .. } => "embedding_model_mismatch",
                _ => "invalid_message",
            },
            OpsError::Library(error) if error.is_client_error() => "invalid_query",
            OpsError::Library(_) => "internal",
        }
    }

    /// What a caller on the other side of a network (REST, MCP) is told instead of the message,
    /// or `None` when the message is the caller's to read. A fault of the service
    /// ([`ErrorKind::Internal`]) or of a part it needs ([`ErrorKind::Unavailable`]) is the
    /// operator's to mend, and its message names what only the operator should see: files under
    /// the data directory, the database's host and user, the embedder's endpoint and what it
    /// answered. A transport logs the message and sends this text (docs/reference/rest.md#errors).
    pub fn withheld_message(&self) -> Option<&'static str> {
        match self.kind() {
            ErrorKind::Unavailable if self.code() == "embedder_failed" => Some(
                "the embedder failed: it could not be reached, or it refused the text (too \
                 long, for one); retrying may work, and the server's log has the details",
            ),
            ErrorKind::Unavailable => Some(STORAGE_UNAVAILABLE),
            ErrorKind::Internal => Some("internal error; the server's log has the details"),
            _ => None,
        }
    }

    /// The kind of failure, for a transport's status.
    pub fn kind(&self) -> ErrorKind {
        match self.code() {
            // Over a limit: 400, as the library host answers a result over its limit; the
            // message says which limit and how to stay under it.
            "invalid_input"
            | "invalid_cursor"
            | "invalid_reference"
            | "invalid_filter"
            | "result_too_large"
            | "too_many_references" => ErrorKind::BadRequest,
            "asset_not_found" | "artifact_not_found" | "session_not_found"
            | "message_not_found" | "no_library" => ErrorKind::NotFound,
            "artifact_exists" => ErrorKind::Conflict,
            "storage_unavailable" | "embedder_failed" => ErrorKind::Unavailable,
            "internal" | "artifact_content_missing" => ErrorKind::Internal,
            _ => ErrorKind::Unprocessable,
        }
    }
}

impl From<StoreError> for OpsError {
    fn from(error: StoreError) -> Self {
        OpsError::Store(error)
    }
}

impl From<RefsError> for OpsError {
    fn from(error: RefsError) -> Self {
        OpsError::Refs(error)
    }
}

impl From<ArtifactError> for OpsError {
    fn from(error: ArtifactError) -> Self {
        OpsError::Artifact(error)
    }
}

impl From<MemoryError> for OpsError {
    fn from(error: MemoryError) -> Self {
        OpsError::Memory(error)
    }
}

impl From<mnemon_library::LibraryError> for OpsError {
    fn from(error: mnemon_library::LibraryError) -> Self {
        OpsError::Library(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_kind_and_store_errors_keep_their_meaning() {
        let missing = OpsError::from(StoreError::Resolve(ResolveError::AssetNotFound {
            asset_id: "a".into(),
        }));
        assert_eq!(missing.code(), "asset_not_found");
        assert_eq!(missing.kind(), ErrorKind::NotFound);
        let empty = OpsError::from(StoreError::EmptyAssetId);
        assert_eq!(empty.code(), "invalid_asset");
        assert_eq!(empty.kind(), ErrorKind::Unprocessable);
        assert_eq!(OpsError::InvalidCursor.kind(), ErrorKind::BadRequest);
        assert_eq!(OpsError::NoEmbedder.kind(), ErrorKind::Unprocessable);
        let storage = OpsError::from(MemoryError::Storage {
            detail: "gone".into(),
        });
        assert_eq!(storage.kind(), ErrorKind::Unavailable);
        // Stores that did not open are the service's trouble, not the caller's: for now when
        // a connection could not be opened, for good when the file is from a newer Mnemon.
        let closed = OpsError::Open(OpenError::Assets(StoreError::Storage {
            action: "opening",
            error: "unable to open database file".into(),
        }));
        assert_eq!(
            (closed.code(), closed.kind()),
            ("storage_unavailable", ErrorKind::Unavailable)
        );
        let newer = OpsError::Open(OpenError::Memory(MemoryError::SchemaVersion {
            found: 99,
            supported: 13,
        }));
        assert_eq!(
            (newer.code(), newer.kind()),
            ("internal", ErrorKind::Internal)
        );
        // Over a limit is the caller's to fix, by asking for less: 400, as on the library host.
        for (error, code) in [
            (OpsError::ResultTooLarge { max: 1 }, "result_too_large"),
            (OpsError::MessagesTooLarge { max: 1 }, "result_too_large"),
            (OpsError::HitsTooLarge { max: 1 }, "result_too_large"),
            (OpsError::LoadTooLarge { max: 1 }, "result_too_large"),
            (
                OpsError::from(RefsError::RenderTooLarge { limit: 1 }),
                "result_too_large",
            ),
            (
                OpsError::from(RefsError::ParamsTooLarge { limit: 1 }),
                "result_too_large",
            ),
            (
                OpsError::from(RefsError::TooManyMarkers { limit: 1 }),
                "too_many_references",
            ),
            (
                OpsError::from(RefsError::TooManyReferences { found: 2, limit: 1 }),
                "too_many_references",
            ),
        ] {
            assert_eq!((error.code(), error.kind()), (code, ErrorKind::BadRequest));
        }
        let unwritable = OpsError::Unwritable { detail: "x".into() };
        assert_eq!(unwritable.kind(), ErrorKind::Internal);
        let mismatch = OpsError::LibraryModelMismatch {
            embedder: "a".into(),
            library: "b".into(),
        };
        assert_eq!(
            (mismatch.code(), mismatch.kind()),
            ("embedding_model_mismatch", ErrorKind::Unprocessable)
        );
    }

    /// The messages of unavailable parts name the operator's files, database and embedder:
    /// a transport sends a fixed text instead; the caller's errors keep their message.
    #[test]
    fn unavailable_and_internal_errors_withhold_their_details() {
        let io = |kind| ArtifactError::ContentIo {
            action: "read",
            path: "/srv/mnemon/artifacts/plans/p.json".into(),
            source: std::io::Error::new(kind, "boom"),
        };
        let withheld = [
            OpsError::from(io(std::io::ErrorKind::PermissionDenied)),
            OpsError::from(StoreError::Storage {
                action: "reading",
                error: "database \"mnemon\" on db.internal:5432 as user \"mnemon_app\": gone"
                    .into(),
            }),
            OpsError::from(MemoryError::Embedder {
                model: "openai.com:m".into(),
                detail: "http://10.0.0.5:11434/v1/embeddings returned HTTP 500: sk-abc".into(),
            }),
        ];
        for error in &withheld {
            assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
            let sent = error.withheld_message().unwrap();
            assert!(!sent.contains("  "), "{sent}");
            for secret in [
                "/srv/mnemon",
                "db.internal",
                "10.0.0.5",
                "sk-abc",
                "mnemon_app",
            ] {
                assert!(!sent.contains(secret), "{sent}");
            }
        }
        // Content that cannot be decoded is damaged, not unavailable: retrying does not mend it.
        let damaged = OpsError::from(io(std::io::ErrorKind::InvalidData));
        assert_eq!(
            (damaged.code(), damaged.kind()),
            ("internal", ErrorKind::Internal)
        );
        assert!(damaged.withheld_message().is_some());
        assert_eq!(OpsError::InvalidCursor.withheld_message(), None);
    }
}
