//! Copying one handle's namespace into another's (SQLite ↔ PostgreSQL): what `mnemon migrate`
//! runs (docs/postgres.md, "Choosing the backend").
//!
//! Artifacts are copied scope by scope: the source store names its scopes
//! ([`ArtifactStore::scopes`](mnemon_artifacts::ArtifactStore::scopes), through the handle's
//! namespace only) and lists each one's records in save order.

use mnemon_artifacts::{ArtifactError, Storage};
use mnemon_memory::{ExportFormat, ExportOptions, ExportTarget, Exported, LoadSource, MemoryError};
use mnemon_store::StoreError;

use crate::Mnemon;

/// Why a copy stopped. Whatever was copied before stays in the target.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CopyError {
    /// Reading or writing assets failed.
    #[error("copying assets failed: {0}")]
    Assets(StoreError),
    /// Reading or writing artifacts or their content failed.
    #[error("copying artifacts failed: {0}")]
    Artifacts(ArtifactError),
    /// An artifact's content is in a `write_to_file` file and the target has no such backend.
    #[error(
        "artifact {id} keeps its content in the {backend:?} backend, which the target does not \
         have: give the target a write_to_file root (shared by every machine using the database)"
    )]
    NoBackend {
        /// The artifact's id.
        id: String,
        /// The backend's name.
        backend: String,
    },
    /// Reading or writing memory failed.
    #[error("copying memory thread {scope} failed: {error}")]
    Memory {
        /// The thread, as `user/agent/session`.
        scope: String,
        /// The underlying error.
        error: MemoryError,
    },
}

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CopyReport {
    /// Assets written to the target.
    pub assets: usize,
    /// Artifact records saved in the target (records whose id it already held are skipped).
    pub artifacts: usize,
    /// Memory threads copied.
    pub threads: usize,
    /// Messages added to the target (messages whose id the target's thread already held are
    /// skipped, so copying twice adds nothing).
    pub messages: usize,
}

/// How many assets go into one batch (one transaction in the target).
const ASSET_BATCH: usize = 256;

/// Copies everything of `from`'s namespace into `to`'s: the same asset ids and values; every
/// artifact record (same id, key, type, names, storage, timestamp; in save order within its
/// scope) with its content, written to the target's backend of the same name; the same memory
/// threads, with their messages in the same order, with the same ids, timestamps, marks and
/// embeddings. An asset the target already has is replaced; an artifact or message id the
/// target already has is skipped, so running a copy again adds nothing.
pub fn copy(from: &Mnemon, to: &Mnemon) -> Result<CopyReport, CopyError> {
    let mut report = CopyReport::default();
    let ids = from.assets().list_ids(None).map_err(CopyError::Assets)?;
    for chunk in ids.chunks(ASSET_BATCH) {
        let mut assets = Vec::with_capacity(chunk.len());
        for id in chunk {
            // An asset deleted since the listing is simply not copied.
            if let Some(asset) = from.assets().get(id).map_err(CopyError::Assets)? {
                assets.push(asset);
            }
        }
        to.assets().put_batch(&assets).map_err(CopyError::Assets)?;
        report.assets += assets.len();
    }

    for scope in artifact_scopes(from)? {
        for artifact in from
            .artifacts()
            .list(&scope, None)
            .map_err(CopyError::Artifacts)?
        {
            if to
                .artifacts()
                .get(artifact.id)
                .map_err(CopyError::Artifacts)?
                .is_some()
            {
                continue;
            }
            let external = match &artifact.storage {
                Some(location) => match to.backends().resolve(&location.backend) {
                    Ok(Storage::External { backend, .. }) => Some((backend, location.id.clone())),
                    Ok(Storage::Inline) => None,
                    Err(_) => {
                        return Err(CopyError::NoBackend {
                            id: artifact.id.to_string(),
                            backend: location.backend.clone(),
                        });
                    }
                },
                None => None,
            };
            match external {
                Some((backend, storage_id)) => {
                    let content = from
                        .backends()
                        .read_content(&artifact)
                        .map_err(CopyError::Artifacts)?;
                    to.artifacts()
                        .save_with_content(&artifact, &mut || match &content {
                            Some(content) => backend.write(&storage_id, content),
                            None => Ok(()),
                        })
                        .map_err(CopyError::Artifacts)?;
                }
                None => {
                    to.artifacts()
                        .save(&artifact)
                        .map_err(CopyError::Artifacts)?;
                }
            }
            report.artifacts += 1;
        }
    }

    let threads = from.threads().map_err(|error| CopyError::Memory {
        scope: "(listing threads)".to_owned(),
        error,
    })?;
    for scope in threads {
        let name = format!(
            "{}/{}/{}",
            scope.user_id.as_deref().unwrap_or(""),
            scope.agent_id.as_deref().unwrap_or(""),
            scope.session_id.as_deref().unwrap_or("")
        );
        let failed = |error| CopyError::Memory {
            scope: name.clone(),
            error,
        };
        // The export document carries ids, timestamps, embeddings and (`include_marks`) marks,
        // and loading it adds the messages in its order in one transaction.
        let options = ExportOptions {
            include_marks: true,
            format: ExportFormat::AgentScope00,
        };
        let exported = from
            .memory(scope.clone())
            .and_then(|source| source.export(ExportTarget::Json, &options))
            .map_err(failed)?;
        let Exported::Json(document) = exported else {
            continue;
        };
        let added = to
            .memory(scope)
            .and_then(|target| target.load(LoadSource::Json(document), false))
            .map_err(failed)?;
        report.threads += 1;
        report.messages += added.added;
    }
    Ok(report)
}

/// The scopes holding artifact records in `mnemon`'s namespace, in ascending byte order:
/// [`ArtifactStore::scopes`](mnemon_artifacts::ArtifactStore::scopes) of its artifact store, on
/// either backend.
pub fn artifact_scopes(mnemon: &Mnemon) -> Result<Vec<String>, CopyError> {
    mnemon.artifacts().scopes().map_err(CopyError::Artifacts)
}
