//! Writing a backup (docs/reference/backup.md#exporting).

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use mnemon_artifacts::Storage;
use mnemon_memory::{ExportFormat, ExportTarget, Scope};
use serde::Serialize;
use serde::de::{DeserializeSeed, SeqAccess, Visitor};

use crate::NamespaceStores;
use crate::error::BackupError;
use crate::format::{
    ArtifactRecord, AssetRecord, EXPIRES_KEY, FORMAT, Header, MODEL_KEY, MessageRecord, Record,
    Selection, ThreadRecord, Trailer, VERSION,
};
use crate::io::{LineWriter, is_gzip};

/// How many asset ids are read per listing step (the ids themselves are listed at once: the
/// asset store has no cursor yet).
const ASSET_BATCH: usize = 256;

/// Options of [`export`].
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// What to export (the default: the whole namespace).
    pub selection: Selection,
    /// Where each memory thread's temporary export file goes (default: the backup's folder).
    pub temp_dir: Option<PathBuf>,
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExportReport {
    /// Assets written.
    pub assets: u64,
    /// Artifact records written.
    pub artifacts: u64,
    /// Memory threads written.
    pub threads: u64,
    /// Messages written.
    pub messages: u64,
    /// The file's size before compression, in bytes.
    pub bytes: u64,
    /// The trailer's checksum.
    pub sha256: String,
}

/// Writes `stores`' namespace (as `options.selection` narrows it) to a backup at `path`
/// (gzip when it ends in `.gz`), replacing any file there only once the backup is complete.
pub fn export(
    stores: &dyn NamespaceStores,
    path: &Path,
    options: &ExportOptions,
) -> Result<ExportReport, BackupError> {
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let partial = tempfile::Builder::new()
        .prefix(".mnemon-backup-")
        .suffix(".partial")
        .tempfile_in(&folder)
        .map_err(BackupError::io(&folder))?;
    let file = partial.reopen().map_err(BackupError::io(partial.path()))?;
    let temp_dir = options.temp_dir.clone().unwrap_or(folder);
    let mut writer = Writer {
        out: LineWriter::new(file, is_gzip(path)),
        path: partial.path().to_path_buf(),
        report: ExportReport::default(),
    };
    writer.record(&Record::Header(Header {
        format: FORMAT.to_owned(),
        version: VERSION,
        namespace: stores.namespace(),
        source: stores.source(),
        exported_at: now_millis(),
        selection: options.selection.clone(),
    }))?;
    let selection = &options.selection;
    if selection.is_everything() || selection.asset_id_prefix.is_some() {
        export_assets(stores, selection, &mut writer)?;
    }
    if selection.is_everything() || selection.artifact_scope_prefix.is_some() {
        export_artifacts(stores, selection, &mut writer)?;
    }
    if selection.is_everything() || selection.memory.is_some() {
        export_memory(stores, selection, &temp_dir, &mut writer)?;
    }
    let Writer {
        mut out,
        path: partial_path,
        mut report,
    } = writer;
    report.sha256 = out.digest();
    let trailer = Record::Trailer(Trailer {
        assets: report.assets,
        artifacts: report.artifacts,
        threads: report.threads,
        messages: report.messages,
        sha256: report.sha256.clone(),
    });
    out.line(&trailer, false)
        .map_err(BackupError::io(&partial_path))?;
    report.bytes = out.bytes;
    out.finish().map_err(BackupError::io(&partial_path))?;
    partial
        .persist(path)
        .map_err(|e| BackupError::io(path)(e.error))?;
    // The rename is durable once its folder is synced: without it, a power loss could leave
    // the folder without the finished backup although the export reported success.
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    mnemon_db::atomic_file::sync_dir(folder).map_err(BackupError::io(folder))?;
    Ok(report)
}

struct Writer {
    out: LineWriter,
    path: PathBuf,
    report: ExportReport,
}

impl Writer {
    fn record(&mut self, record: &Record) -> Result<(), BackupError> {
        self.out
            .line(record, true)
            .map_err(BackupError::io(&self.path))
    }
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn export_assets(
    stores: &dyn NamespaceStores,
    selection: &Selection,
    writer: &mut Writer,
) -> Result<(), BackupError> {
    let assets = stores.assets();
    let ids = assets.list_ids(None).map_err(BackupError::Assets)?;
    for chunk in ids.chunks(ASSET_BATCH) {
        for id in chunk.iter().filter(|id| selection.takes_asset(id)) {
            // An asset deleted (or expired) since the listing is not written.
            let Some(expires_at) = assets.expires_at(id).map_err(BackupError::Assets)? else {
                continue;
            };
            let Some(asset) = assets.get(id).map_err(BackupError::Assets)? else {
                continue;
            };
            writer.record(&Record::Asset(AssetRecord::encode(&asset, expires_at)?))?;
            writer.report.assets += 1;
        }
    }
    Ok(())
}

fn export_artifacts(
    stores: &dyn NamespaceStores,
    selection: &Selection,
    writer: &mut Writer,
) -> Result<(), BackupError> {
    let artifacts = stores.artifacts();
    let scopes = artifacts.scopes().map_err(BackupError::Artifacts)?;
    for scope in scopes
        .iter()
        .filter(|scope| selection.takes_artifact_scope(scope))
    {
        for artifact in artifacts
            .list(scope, None)
            .map_err(BackupError::Artifacts)?
        {
            let Some(expires_at) = artifacts
                .expires_at(artifact.id)
                .map_err(BackupError::Artifacts)?
            else {
                continue;
            };
            let content = match &artifact.storage {
                Some(location) => match stores.backends().resolve(&location.backend) {
                    Ok(Storage::Inline) => None,
                    Ok(Storage::External { backend, .. }) => {
                        Some(backend.read(&location.id).map_err(BackupError::Artifacts)?)
                    }
                    Err(_) => {
                        return Err(BackupError::SourceNoBackend {
                            id: artifact.id.to_string(),
                            backend: location.backend.clone(),
                        });
                    }
                },
                None => None,
            };
            writer.record(&Record::Artifact(ArtifactRecord {
                artifact,
                content,
                expires_at,
            }))?;
            writer.report.artifacts += 1;
        }
    }
    Ok(())
}

fn export_memory(
    stores: &dyn NamespaceStores,
    selection: &Selection,
    temp_dir: &Path,
    writer: &mut Writer,
) -> Result<(), BackupError> {
    let threads = stores.threads().map_err(|error| BackupError::Memory {
        thread: "(listing threads)".to_owned(),
        error,
    })?;
    let scratch = tempfile::Builder::new()
        .prefix(".mnemon-backup-")
        .tempdir_in(temp_dir)
        .map_err(BackupError::io(temp_dir))?;
    let document = scratch.path().join("thread.json");
    for scope in threads {
        let thread = ThreadRecord {
            user_id: scope.user_id.clone(),
            agent_id: scope.agent_id.clone(),
            session_id: scope.session_id.clone(),
        };
        if !selection.takes_thread(&thread) {
            continue;
        }
        let name = thread.display();
        let failed = |error| BackupError::Memory {
            thread: name.clone(),
            error,
        };
        // The memory's export writes the document as it reads the messages, from one
        // snapshot, and carries ids, timestamps, embeddings, (`include_marks`) marks and, in
        // the stored layout, each message's expiry and embedding model, which the records
        // keep in fields of their own.
        let options = mnemon_memory::ExportOptions {
            include_marks: true,
            format: ExportFormat::AgentScope00Stored,
        };
        // A thread deleted since the listing is left out, never recreated empty.
        let Some(memory) = stores
            .existing_memory(Scope::clone(&scope))
            .map_err(failed)?
        else {
            continue;
        };
        memory
            .export(ExportTarget::File(document.clone()), &options)
            .map_err(failed)?;
        writer.record(&Record::Thread(thread))?;
        writer.report.threads += 1;
        let file = File::open(&document).map_err(BackupError::io(&document))?;
        let mut failure = None;
        let mut reader = serde_json::Deserializer::from_reader(BufReader::new(file));
        let streamed = EachMessage {
            writer,
            failure: &mut failure,
        }
        .deserialize(&mut reader);
        if let Some(error) = failure {
            return Err(error);
        }
        streamed.map_err(|e| BackupError::Damaged {
            line: 0,
            reason: format!("the memory's export of thread {name} did not parse: {e}"),
        })?;
    }
    Ok(())
}

/// Reads an export document's array one message at a time, writing each as a record.
struct EachMessage<'a> {
    writer: &'a mut Writer,
    failure: &'a mut Option<BackupError>,
}

impl<'de> DeserializeSeed<'de> for EachMessage<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EachMessage<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array of message objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(mut message) =
            seq.next_element::<serde_json::Map<String, serde_json::Value>>()?
        {
            // The memory writes these keys when set, as an integer and a string, and as
            // `null` when unset but the message holds a field of that name itself; anything
            // else would be its bug, and is refused rather than dropped.
            let expires_at = match message.remove(EXPIRES_KEY) {
                None | Some(serde_json::Value::Null) => None,
                Some(value) => Some(value.as_i64().ok_or_else(|| {
                    serde::de::Error::custom(format!("{EXPIRES_KEY} is not an integer: {value}"))
                })?),
            };
            let embedding_model = match message.remove(MODEL_KEY) {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(model)) => Some(model),
                Some(value) => {
                    return Err(serde::de::Error::custom(format!(
                        "{MODEL_KEY} is not a string: {value}"
                    )));
                }
            };
            let record = Record::Message(MessageRecord {
                message,
                expires_at,
                embedding_model,
            });
            if let Err(error) = self.writer.record(&record) {
                *self.failure = Some(error);
                return Err(serde::de::Error::custom(
                    "stopped: the backup could not be written",
                ));
            }
            self.writer.report.messages += 1;
        }
        Ok(())
    }
}
