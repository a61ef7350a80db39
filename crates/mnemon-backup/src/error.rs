//! Why an export or an import stopped.

use std::path::PathBuf;

use mnemon_artifacts::ArtifactError;
use mnemon_memory::MemoryError;
use mnemon_store::StoreError;

/// Why an export or an import stopped.
///
/// An export that fails leaves no file behind (it writes a temporary file and renames it only
/// when complete). An import that fails while checking the file (every variant up to
/// [`Conflicts`](Self::Conflicts)) has written nothing; one that fails later keeps what it had
/// already written (docs/reference/backup.md#importing).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    /// Reading or writing a file failed.
    #[error("{}: {error}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// A line of the file is not a record of this format.
    #[error(
        "line {line} of the backup is damaged ({reason}); the file was changed or cut short \
         after it was written: nothing was imported"
    )]
    Damaged {
        /// The 1-based line number.
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The file does not start with a backup header.
    #[error("this is not a Mnemon backup (its first line is not a mnemon-backup header)")]
    NotABackup,
    /// The file was written by a newer version of the format.
    #[error(
        "the backup is in format version {found}, and this mnemon reads version {supported} only: \
         import it with a newer mnemon"
    )]
    UnsupportedVersion {
        /// The file's version.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The file ends before its trailer.
    #[error(
        "the backup is truncated: it ends after line {lines} without its trailer line; \
         nothing was imported (export it again)"
    )]
    Truncated {
        /// How many lines it has.
        lines: u64,
    },
    /// The trailer's checksum or counts disagree with the lines before it.
    #[error(
        "the backup is damaged: {what} (trailer says {expected}, the file has {actual}); \
         nothing was imported (export it again)"
    )]
    Mismatch {
        /// What disagrees.
        what: &'static str,
        /// What the trailer says.
        expected: String,
        /// What the lines before it give.
        actual: String,
    },
    /// The file changed between the check and the import.
    #[error(
        "the backup file changed while it was being imported; what was imported before the \
         change stays: do not write to the file during an import"
    )]
    ChangedDuringImport,
    /// The file holds one record more than once (an asset id, an artifact id or a memory
    /// thread), which an export never writes: a hand-edited or concatenated file.
    #[error(
        "the backup holds {what} more than once (an export never does: was the file edited or \
         joined with another?); nothing was imported"
    )]
    Repeated {
        /// The record, as `asset "a1"`, `artifact <uuid>`, `thread u/a/s`.
        what: String,
    },
    /// Records of the file already exist in the target namespace.
    #[error(
        "the target namespace already holds {total} of the backup's records (e.g. {examples}); \
         nothing was imported: import into an empty namespace, or forget those records first"
    )]
    Conflicts {
        /// How many records conflict.
        total: u64,
        /// The first few, as `asset a1`, `artifact <uuid>`, `thread u/a/s`.
        examples: String,
    },
    /// An artifact's content is kept in a storage backend the target does not have.
    #[error(
        "artifact {id} keeps its content in the {backend:?} storage backend, which the target \
         does not have: give the target a write_to_file root (--artifact-files); nothing was \
         imported"
    )]
    NoBackend {
        /// The artifact's id.
        id: String,
        /// The backend's name.
        backend: String,
    },
    /// An artifact to export keeps its content in a storage backend the source does not have.
    #[error(
        "artifact {id} keeps its content in the {backend:?} storage backend, which the source \
         does not have: give it the write_to_file root its content was saved in \
         (--artifact-files); nothing was exported"
    )]
    SourceNoBackend {
        /// The artifact's id.
        id: String,
        /// The backend's name.
        backend: String,
    },
    /// An asset holds a live object, which a file cannot carry.
    #[error(
        "asset {asset_id:?} holds a live object of type {type_name}, which a backup cannot \
         carry (only JSON and bytes): store it as bytes, or leave the asset out of the export"
    )]
    ObjectLeaf {
        /// The asset's id.
        asset_id: String,
        /// The object's type name.
        type_name: String,
    },
    /// An asset record does not decode.
    #[error("asset {asset_id:?} in the backup is damaged: {reason}")]
    Corrupt {
        /// The asset's id, as far as the record says.
        asset_id: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading or writing assets failed.
    #[error("assets: {0}")]
    Assets(StoreError),
    /// Reading or writing artifacts or their content failed.
    #[error("artifacts: {0}")]
    Artifacts(ArtifactError),
    /// Reading or writing a memory thread failed.
    #[error("memory thread {thread}: {error}")]
    Memory {
        /// The thread, as `user/agent/session`.
        thread: String,
        /// The underlying error.
        error: MemoryError,
    },
    /// A record could not be written as JSON.
    #[error("cannot write a record: {0}")]
    Encode(serde_json::Error),
}

impl BackupError {
    /// The I/O error of `path`.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> BackupError {
        let path = path.into();
        move |error| BackupError::Io { path, error }
    }
}
