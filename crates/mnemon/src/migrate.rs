//! Copying one handle's namespace into another's (SQLite ↔ PostgreSQL): what `mnemon migrate`
//! runs (docs/postgres.md, "Choosing the backend").
//!
//! Artifacts are copied scope by scope: the source store names its scopes
//! ([`ArtifactStore::scopes`](mnemon_artifacts::ArtifactStore::scopes), through the handle's
//! namespace only) and lists each one's records in save order.

use mnemon_artifacts::{ArtifactError, Expiry, Storage};
use mnemon_memory::{ExportFormat, ExportOptions, ExportTarget, Exported, LoadSource, MemoryError};
use mnemon_store::StoreError;
use mnemon_types::{Asset, Value};

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
    /// An artifact's content is in a `write_to_file` file and the source was opened without
    /// that backend, so its content cannot be read.
    #[error(
        "artifact {id} keeps its content in the {backend:?} backend, which the source was \
         opened without: give the source its write_to_file root (`mnemon migrate --from-files`)"
    )]
    SourceNoBackend {
        /// The artifact's id.
        id: String,
        /// The backend's name.
        backend: String,
    },
    /// An artifact's content location (a `write_to_file` path, the saver's to choose) already
    /// holds other content in the target.
    #[error(
        "artifact {id}'s content location {location} already holds other content in the target \
         (another record's, or a file left there): the copy stops rather than write over it; \
         move that file away, or copy into another files root (--to-files)"
    )]
    ContentTaken {
        /// The artifact's id.
        id: String,
        /// The location, as `backend:storage id`.
        location: String,
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

/// The most bytes of assets one batch gathers (as [`asset_bytes`] counts them).
const ASSET_BATCH_BYTES: usize = 16 << 20;

/// Refuses, before anything is copied, an artifact record whose content backend either end
/// lacks: the copy would otherwise stop half-way, after the assets. Reads the records a page
/// at a time without their content; the copy checks each record again as it goes.
fn check_backends(from: &Mnemon, to: &Mnemon) -> Result<(), CopyError> {
    const PAGE: usize = 1000;
    let mut checked = std::collections::HashSet::new();
    let mut after = None;
    loop {
        let page = from
            .artifacts()
            .list_page(&mnemon_artifacts::PageQuery {
                after,
                limit: PAGE,
                ..mnemon_artifacts::PageQuery::default()
            })
            .map_err(CopyError::Artifacts)?
            // The cursor's record went meanwhile: the copy's own checks cover the rest.
            .unwrap_or_default();
        for listed in &page {
            let Some(location) = &listed.artifact.storage else {
                continue;
            };
            if !checked.insert(location.backend.clone()) {
                continue;
            }
            let (id, backend) = (listed.artifact.id.to_string(), location.backend.clone());
            if from.backends().resolve(&location.backend).is_err() {
                return Err(CopyError::SourceNoBackend { id, backend });
            }
            if to.backends().resolve(&location.backend).is_err() {
                return Err(CopyError::NoBackend { id, backend });
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE => after = Some(last.artifact.id),
            _ => return Ok(()),
        }
    }
}

/// Writes `assets` to `to`, one batch per run of equal expiry (a copy never expires where the
/// source did not, whatever the target's default time-to-live), each moved into its batch
/// rather than copied; returns how many were written.
fn put_assets(to: &Mnemon, assets: Vec<(Asset, Option<i64>)>) -> Result<usize, CopyError> {
    let mut written = 0;
    let mut assets = assets.into_iter().peekable();
    while let Some((first, expires_at)) = assets.next() {
        let mut batch = vec![first];
        while let Some((asset, _)) = assets.next_if(|(_, at)| *at == expires_at) {
            batch.push(asset);
        }
        let expiry = expires_at.map_or(Expiry::Never, Expiry::At);
        to.assets()
            .put_batch_expiring(&batch, expiry)
            .map_err(CopyError::Assets)?;
        written += batch.len();
    }
    Ok(written)
}

/// About how many bytes `asset` takes: its texts and buffers, and a little per value. What a
/// batch of assets holds grows with it, whether the assets hold bytes or JSON.
fn asset_bytes(asset: &Asset) -> usize {
    fn value_bytes(value: &Value) -> usize {
        16 + match value {
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_) => 0,
            Value::String(text) => text.len(),
            Value::Bytes(bytes) => bytes.data().len(),
            Value::Array(items) => items.iter().map(value_bytes).sum(),
            Value::Map(map) => map.iter().map(|(k, v)| k.len() + value_bytes(v)).sum(),
        }
    }
    let texts = [
        &asset.asset_type,
        &asset.asset_name,
        &asset.description,
        &asset.content_type,
    ];
    asset.asset_id.len()
        + texts
            .iter()
            .map(|t| t.as_ref().map_or(0, String::len))
            .sum::<usize>()
        + value_bytes(&asset.content)
        + asset
            .extra
            .iter()
            .map(|(k, v)| k.len() + value_bytes(v))
            .sum::<usize>()
}

/// Copies everything of `from`'s namespace into `to`'s: the same asset ids and values; every
/// artifact record (same id, key, type, names, storage, timestamp; in save order within its
/// scope) with its content, written to the target's backend of the same name; the same memory
/// threads, with their messages in the same order, with the same ids, timestamps, marks,
/// embeddings and embedding models. Every asset, artifact record and message keeps its expiry
/// instant, and one that never expires never does in the target, whatever its default
/// time-to-live. An asset's `created_at` and `updated_at` are the copy's time (the asset store
/// has no call to set them). An asset the target already has is replaced; an artifact or
/// message id the target already has is skipped, so running a copy again adds nothing; the
/// target's expired artifact records are swept first, so that their ids are free.
pub fn copy(from: &Mnemon, to: &Mnemon) -> Result<CopyReport, CopyError> {
    check_backends(from, to)?;
    let mut report = CopyReport::default();
    let ids = from.assets().list_ids(None).map_err(CopyError::Assets)?;
    // Batches of up to ASSET_BATCH assets or ASSET_BATCH_BYTES, whichever comes first, so a
    // batch of large assets never holds hundreds of them at once.
    let mut pending: Vec<(Asset, Option<i64>)> = Vec::new();
    let mut pending_bytes = 0usize;
    for id in &ids {
        // An asset deleted or expired since the listing is simply not copied.
        let asset = from.assets().get(id).map_err(CopyError::Assets)?;
        let expires_at = from.assets().expires_at(id).map_err(CopyError::Assets)?;
        if let (Some(asset), Some(expires_at)) = (asset, expires_at) {
            pending_bytes = pending_bytes.saturating_add(asset_bytes(&asset));
            pending.push((asset, expires_at));
        }
        if pending.len() >= ASSET_BATCH || pending_bytes >= ASSET_BATCH_BYTES {
            report.assets += put_assets(to, std::mem::take(&mut pending))?;
            pending_bytes = 0;
        }
    }
    report.assets += put_assets(to, pending)?;

    // Expired records the target has not swept yet still hold their ids: removed first, so
    // that a record the source holds under such an id is copied instead of refused.
    to.artifacts()
        .gc(to.backends())
        .map_err(CopyError::Artifacts)?;
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
            // Expired since the listing: not copied.
            let Some(expires_at) = from
                .artifacts()
                .expires_at(artifact.id)
                .map_err(CopyError::Artifacts)?
            else {
                continue;
            };
            let expiry = expires_at.map_or(Expiry::Never, Expiry::At);
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
            let content = match external {
                Some(_) => from
                    .backends()
                    .read_content(&artifact)
                    .map_err(CopyError::Artifacts)?,
                None => None,
            };
            // What the target holds at the location already: the same content (a files root
            // both ends share) is left as it is; other content is another record's, which the
            // write would replace under it.
            let in_place = match (&external, &content) {
                (Some((backend, storage_id)), Some(content)) => match backend.read(storage_id) {
                    Ok(held) if held == *content => true,
                    Ok(_) => {
                        return Err(CopyError::ContentTaken {
                            id: artifact.id.to_string(),
                            location: artifact
                                .storage
                                .as_ref()
                                .map(|l| format!("{}:{}", l.backend, l.id))
                                .unwrap_or_default(),
                        });
                    }
                    Err(ArtifactError::ContentNotFound { .. }) => false,
                    Err(e) => return Err(CopyError::Artifacts(e)),
                },
                _ => false,
            };
            to.artifacts()
                .save_expiring(&artifact, expiry, &mut || match (&external, &content) {
                    (Some((backend, storage_id)), Some(content)) if !in_place => {
                        backend.write(storage_id, content)
                    }
                    _ => Ok(()),
                })
                .map_err(CopyError::Artifacts)?;
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
        // The stored export layout carries ids, timestamps, embeddings, marks
        // (`include_marks`), each message's expiry and its embedding's model, and loading it
        // adds the messages in its order in one transaction (docs/reference/memory.md#exporting).
        let options = ExportOptions {
            include_marks: true,
            format: ExportFormat::AgentScope00Stored,
        };
        // A thread deleted since the listing is not copied, nor recreated empty in the source.
        let Some(source) = from.existing_memory(scope.clone()).map_err(failed)? else {
            continue;
        };
        let exported = source
            .export(ExportTarget::Json, &options)
            .map_err(failed)?;
        let Exported::Json(document) = exported else {
            continue;
        };
        let document = never_unless_stated(&document).map_err(failed)?;
        let added = to
            .memory(scope)
            .and_then(|target| target.load(LoadSource::Json(document), false))
            .map_err(failed)?;
        report.threads += 1;
        report.messages += added.added;
    }
    Ok(report)
}

/// `document` (a stored-layout export) with `"__expires_at": null` on every message that has
/// no expiry, so that the target's load keeps it never expiring instead of giving it the
/// target handle's default time-to-live (docs/reference/memory.md#loading-documents).
fn never_unless_stated(document: &str) -> Result<String, MemoryError> {
    let invalid = |error: serde_json::Error| MemoryError::InvalidFormat {
        found: format!("an export this copy cannot read back: {error}"),
    };
    let mut messages: Vec<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_str(document).map_err(invalid)?;
    for message in &mut messages {
        message
            .entry(mnemon_memory::STORED_EXPIRES_KEY)
            .or_insert(serde_json::Value::Null);
    }
    serde_json::to_string(&messages).map_err(invalid)
}

/// The scopes holding artifact records in `mnemon`'s namespace, in ascending byte order:
/// [`ArtifactStore::scopes`](mnemon_artifacts::ArtifactStore::scopes) of its artifact store, on
/// either backend.
pub fn artifact_scopes(mnemon: &Mnemon) -> Result<Vec<String>, CopyError> {
    mnemon.artifacts().scopes().map_err(CopyError::Artifacts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch is bounded by what its assets hold, JSON as well as bytes: before, migrate
    /// gathered 256 assets whatever their size.
    #[test]
    fn an_assets_size_counts_its_texts_and_bytes() {
        let json = Asset::from_json(serde_json::json!({
            "asset_id": "a", "content": {"text": "x".repeat(1 << 20)}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let bytes = Asset::new(Value::Bytes(mnemon_types::Bytes::new(vec![0u8; 1 << 20])));
        for asset in [json, bytes] {
            let size = asset_bytes(&asset);
            assert!((1 << 20..(1 << 20) + 256).contains(&size), "{size}");
        }
    }
}
