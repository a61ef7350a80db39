//! Copying one handle's assets and memory into another (SQLite ↔ PostgreSQL), the first part of
//! `mnemon migrate` (issue 13, item 4).
//!
//! Not yet copied: artifacts. The [`ArtifactStore`](mnemon_artifacts::ArtifactStore) trait lists
//! records per scope only and cannot name the scopes a store holds, so a copy could not know it
//! had found every record; until the stores can enumerate them, [`copy_assets_and_memory`] says
//! in its name what it covers.

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
    /// Memory threads copied.
    pub threads: usize,
    /// Messages added to the target (messages whose id the target's thread already held are
    /// skipped, so copying twice adds nothing).
    pub messages: usize,
}

/// How many assets go into one batch (one transaction in the target).
const ASSET_BATCH: usize = 256;

/// Copies every asset and every memory thread of `from`'s namespace into `to`'s: the same
/// asset ids and values; the same threads, with their messages in the same order, with the same
/// ids, timestamps, marks and embeddings. An asset the target already has is replaced; a
/// message id the target's thread already has is skipped.
pub fn copy_assets_and_memory(from: &Mnemon, to: &Mnemon) -> Result<CopyReport, CopyError> {
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
