//! Reading a backup into a namespace (docs/reference/backup.md#importing).

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use mnemon_artifacts::{ArtifactError, Storage};
use mnemon_db::Expiry;
use mnemon_memory::{LoadSource, Scope};
use mnemon_types::Asset;
use serde::Serialize;

use crate::NamespaceStores;
use crate::error::BackupError;
use crate::format::{
    ArtifactRecord, AssetRecord, EXPIRES_KEY, FORMAT, Header, MODEL_KEY, Record, ThreadRecord,
    Trailer, VERSION,
};
use crate::io::LineReader;

/// How many assets go into one write (one transaction), at most.
const ASSET_BATCH: usize = 256;

/// How many bytes of assets (their JSON and their leaves' base64, as in the file) one write
/// gathers, at most: a batch of 256 large assets would otherwise hold them all in memory at
/// once (measured: 292 MiB peak importing 1 MiB assets, docs/reference/backup.md#memory-use).
const ASSET_BATCH_BYTES: usize = 16 << 20;

/// How many conflicting records an error names.
const EXAMPLES: usize = 5;

/// Options of [`import`].
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Where each memory thread's temporary load file goes (default: the system's temporary
    /// folder).
    pub temp_dir: Option<PathBuf>,
}

/// What an import wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// Assets written.
    pub assets: u64,
    /// Artifact records saved.
    pub artifacts: u64,
    /// Memory threads written.
    pub threads: u64,
    /// Messages added.
    pub messages: u64,
}

/// What a whole, undamaged backup says about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// Its header.
    pub header: Header,
    /// Its trailer (counts and checksum).
    pub trailer: Trailer,
}

/// Checks the backup at `path` end to end (header, every record, the trailer's counts and
/// checksum) without touching any store.
pub fn verify(path: &Path) -> Result<Verified, BackupError> {
    scan(path, LineReader::open(path)?, &mut |_| Ok(()))
}

/// Writes the backup at `path` into `stores`' namespace.
///
/// First the target's expired artifact records are swept (their ids would otherwise block
/// records of the file). Then the whole file is checked, as [`verify`] does, together with the
/// target: no asset id,
/// artifact id or memory thread of the file may exist there already
/// ([`BackupError::Conflicts`]), and every storage backend an artifact names must exist
/// ([`BackupError::NoBackend`]); any failure here writes nothing. Then the records are written:
/// assets in batches of up to 256 assets or 16 MiB of bytes (one transaction each), each artifact record with its content,
/// each memory thread's messages in one transaction. Expiry instants are kept as they are (a
/// record without one never expires, whatever the target's default time-to-live).
pub fn import(
    stores: &dyn NamespaceStores,
    path: &Path,
    options: &ImportOptions,
) -> Result<ImportReport, BackupError> {
    // One open file for both passes: a file renamed over `path` between them (a newer backup
    // written to the same name) was written by the second pass, though only the first had
    // checked it (the trailers' mismatch said so afterwards, with its records written).
    let file = File::open(path).map_err(BackupError::io(path))?;
    let checked = check(stores, path, &file)?;
    let temp_dir = options.temp_dir.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = tempfile::Builder::new()
        .prefix(".mnemon-import-")
        .tempdir_in(&temp_dir)
        .map_err(BackupError::io(&temp_dir))?;
    let mut importer = Importer {
        stores,
        report: ImportReport::default(),
        assets: Vec::new(),
        asset_bytes: 0,
        thread: None,
        document: scratch.path().join("thread.json"),
    };
    let result = scan(path, LineReader::rewound(&file, path)?, &mut |record| {
        importer.write(record)
    });
    let written = result.and_then(|verified| {
        importer.flush()?;
        Ok(verified)
    });
    match written {
        Ok(verified) if verified.trailer == checked.trailer => Ok(importer.report),
        // The first pass found the file whole: damage now means it changed since, and what
        // was written before the damage stays.
        Ok(_)
        | Err(
            BackupError::Mismatch { .. }
            | BackupError::Damaged { .. }
            | BackupError::Truncated { .. }
            | BackupError::NotABackup
            | BackupError::UnsupportedVersion { .. },
        ) => Err(BackupError::ChangedDuringImport),
        Err(other) => Err(other),
    }
}

/// The first pass of [`import`]: the file is whole, and it fits the target.
fn check(stores: &dyn NamespaceStores, path: &Path, file: &File) -> Result<Verified, BackupError> {
    // Expired artifact records the target has not swept yet are invisible, so they pass the
    // conflict check below, yet still hold their ids: a record of the file under such an id
    // would then fail half-way through the writes. Swept first (what the next sweep would do).
    stores
        .artifacts()
        .gc(stores.backends())
        .map_err(BackupError::Artifacts)?;
    let existing: HashSet<Scope> = stores
        .threads()
        .map_err(|error| BackupError::Memory {
            thread: "(listing threads)".to_owned(),
            error,
        })?
        .into_iter()
        .collect();
    let mut conflicts = 0u64;
    let mut examples = Vec::new();
    let mut conflict = |what: String| {
        conflicts += 1;
        if examples.len() < EXAMPLES {
            examples.push(what);
        }
    };
    // What the file holds so far: a record it holds twice would overwrite itself (an asset),
    // fail half-way (an artifact) or merge two threads into one.
    let mut seen_assets = HashSet::new();
    let mut seen_artifacts = HashSet::new();
    let mut seen_threads = HashSet::new();
    let verified = scan(path, LineReader::rewound(file, path)?, &mut |record| {
        match record {
            Record::Asset(record) => {
                let asset = record.decode()?;
                if !seen_assets.insert(asset.asset_id.clone()) {
                    return Err(BackupError::Repeated {
                        what: format!("asset {:?}", asset.asset_id),
                    });
                }
                if stores
                    .assets()
                    .expires_at(&asset.asset_id)
                    .map_err(BackupError::Assets)?
                    .is_some()
                {
                    conflict(format!("asset {:?}", asset.asset_id));
                }
            }
            Record::Artifact(record) => {
                let artifact = &record.artifact;
                if !seen_artifacts.insert(artifact.id) {
                    return Err(BackupError::Repeated {
                        what: format!("artifact {}", artifact.id),
                    });
                }
                let taken = stores
                    .artifacts()
                    .expires_at(artifact.id)
                    .map_err(BackupError::Artifacts)?
                    .is_some();
                if taken {
                    conflict(format!("artifact {}", artifact.id));
                }
                if let Some(location) = &artifact.storage {
                    let Ok(storage) = stores.backends().resolve(&location.backend) else {
                        return Err(BackupError::NoBackend {
                            id: artifact.id.to_string(),
                            backend: location.backend.clone(),
                        });
                    };
                    // Storage ids are the saver's to choose (a file's path), so another
                    // record of the target may hold content at the same place, which the
                    // write pass would overwrite under it. The same content (a file left by
                    // the record itself, deleted since) is written over harmlessly.
                    if !taken && holds_other(&storage, &location.id, record.content.as_ref())? {
                        conflict(format!(
                            "artifact {}'s content location {}:{} (it holds other content: \
                             move that file away)",
                            artifact.id, location.backend, location.id
                        ));
                    }
                }
            }
            Record::Thread(thread) => {
                let scope = scope_of(thread);
                if existing.contains(&scope) {
                    conflict(format!("thread {}", thread.display()));
                }
                if !seen_threads.insert(scope) {
                    return Err(BackupError::Repeated {
                        what: format!("thread {}", thread.display()),
                    });
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    if conflicts > 0 {
        return Err(BackupError::Conflicts {
            total: conflicts,
            examples: examples.join(", "),
        });
    }
    Ok(verified)
}

fn scope_of(thread: &ThreadRecord) -> Scope {
    Scope {
        user_id: thread.user_id.clone(),
        agent_id: thread.agent_id.clone(),
        session_id: thread.session_id.clone(),
    }
}

/// Reads every line of the backup at `path`, handing each body record (not the header or the
/// trailer) to `each`, and checks the structure, the counts and the checksum.
fn scan(
    path: &Path,
    mut reader: LineReader,
    each: &mut dyn FnMut(&Record) -> Result<(), BackupError>,
) -> Result<Verified, BackupError> {
    let mut header = None;
    let mut counts = Trailer {
        assets: 0,
        artifacts: 0,
        threads: 0,
        messages: 0,
        sha256: String::new(),
    };
    let mut in_thread = false;
    loop {
        let Some(complete) = reader.next(path)? else {
            // An empty file is no backup, not a cut one.
            return Err(if header.is_none() {
                BackupError::NotABackup
            } else {
                BackupError::Truncated {
                    lines: reader.number,
                }
            });
        };
        if !complete {
            // A last line without its line break: a cut backup if a header came first (or
            // this line is one, whole or cut: it starts as an export writes it), otherwise
            // another file (a one-line JSON document).
            const HEADER_START: &[u8] = br#"{"type":"header""#;
            let line = reader.line.as_slice();
            let cut_header = header.is_none()
                && (line.starts_with(HEADER_START) || HEADER_START.starts_with(line));
            return Err(if header.is_some() || cut_header {
                BackupError::Truncated {
                    lines: reader.number.saturating_sub(1),
                }
            } else {
                BackupError::NotABackup
            });
        }
        let line = reader.number;
        let damaged = |reason: String| BackupError::Damaged { line, reason };
        let record = match Record::from_line(&reader.line) {
            Ok(record) => record,
            Err(_) if header.is_none() => return Err(BackupError::NotABackup),
            Err(reason) => return Err(damaged(reason)),
        };
        match (&record, &header) {
            (Record::Header(found), None) => {
                if found.format != FORMAT {
                    return Err(BackupError::NotABackup);
                }
                if found.version != VERSION {
                    return Err(BackupError::UnsupportedVersion {
                        found: found.version,
                        supported: VERSION,
                    });
                }
                header = Some(found.clone());
                continue;
            }
            (_, None) => return Err(BackupError::NotABackup),
            (Record::Header(_), Some(_)) => {
                return Err(damaged("a second header".to_owned()));
            }
            (Record::Trailer(trailer), Some(header)) => {
                counts.sha256 = reader.digest_before();
                let compare = |what, expected: String, actual: String| {
                    if expected == actual {
                        Ok(())
                    } else {
                        Err(BackupError::Mismatch {
                            what,
                            expected,
                            actual,
                        })
                    }
                };
                compare(
                    "the checksum",
                    trailer.sha256.clone(),
                    counts.sha256.clone(),
                )?;
                for (what, expected, actual) in [
                    ("the asset count", trailer.assets, counts.assets),
                    ("the artifact count", trailer.artifacts, counts.artifacts),
                    ("the thread count", trailer.threads, counts.threads),
                    ("the message count", trailer.messages, counts.messages),
                ] {
                    compare(what, expected.to_string(), actual.to_string())?;
                }
                if reader.next(path)?.is_some() {
                    return Err(BackupError::Damaged {
                        line: reader.number,
                        reason: "a line after the trailer".to_owned(),
                    });
                }
                return Ok(Verified {
                    header: header.clone(),
                    trailer: counts,
                });
            }
            (Record::Asset(_), _) => counts.assets += 1,
            (Record::Artifact(_), _) => counts.artifacts += 1,
            (Record::Thread(_), _) => counts.threads += 1,
            (Record::Message(_), _) => {
                if !in_thread {
                    return Err(damaged("a message before any thread".to_owned()));
                }
                counts.messages += 1;
            }
        }
        match &record {
            Record::Thread(_) => in_thread = true,
            Record::Message(_) => {}
            _ => in_thread = false,
        }
        each(&record)?;
    }
}

/// An asset record's size in the file, near enough: its JSON (counted as it is written, without
/// a copy) and its leaves' base64. What a batch holds grows with it, whether the asset is bytes
/// or JSON.
fn record_bytes(record: &AssetRecord) -> usize {
    /// Counts what is written to it.
    struct Count(usize);
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a JSON map to a counter cannot fail; were it to, the leaves still count.
    let _ = serde_json::to_writer(&mut count, &record.asset);
    record
        .leaves
        .iter()
        .fold(count.0, |n, leaf| n.saturating_add(leaf.data.len()))
}

/// The second pass of [`import`]: writes the records, batching assets and gathering each
/// thread's messages into a load document.
struct Importer<'a> {
    stores: &'a dyn NamespaceStores,
    report: ImportReport,
    assets: Vec<(Asset, Option<i64>)>,
    /// The gathered assets' size in the file: their JSON and their leaves' base64.
    asset_bytes: usize,
    thread: Option<OpenThread>,
    document: PathBuf,
}

/// The thread whose messages are being gathered.
struct OpenThread {
    record: ThreadRecord,
    out: BufWriter<File>,
    messages: u64,
}

impl Importer<'_> {
    fn write(&mut self, record: &Record) -> Result<(), BackupError> {
        if !matches!(record, Record::Asset(_)) {
            self.flush_assets()?;
        }
        if !matches!(record, Record::Message(_)) {
            self.finish_thread()?;
        }
        match record {
            Record::Asset(record) => {
                self.assets.push((record.decode()?, record.expires_at));
                self.asset_bytes = self.asset_bytes.saturating_add(record_bytes(record));
                if self.assets.len() >= ASSET_BATCH || self.asset_bytes >= ASSET_BATCH_BYTES {
                    self.flush_assets()?;
                }
            }
            Record::Artifact(record) => self.save_artifact(record)?,
            Record::Thread(thread) => {
                let file = File::create(&self.document).map_err(BackupError::io(&self.document))?;
                let mut out = BufWriter::with_capacity(1 << 16, file);
                out.write_all(b"[")
                    .map_err(BackupError::io(&self.document))?;
                self.thread = Some(OpenThread {
                    record: thread.clone(),
                    out,
                    messages: 0,
                });
            }
            Record::Message(message) => {
                let Some(thread) = self.thread.as_mut() else {
                    // `scan` refuses a message outside a thread before it gets here.
                    return Ok(());
                };
                if thread.messages > 0 {
                    thread
                        .out
                        .write_all(b",")
                        .map_err(BackupError::io(&self.document))?;
                }
                // The load document is the memory's stored export layout: the expiry and the
                // model go back under the keys the export took them from, which the memory's
                // load restores per message. The expiry is always stated, `null` for never, so
                // that the target handle's default time-to-live does not apply to a message
                // that never expired (docs/reference/memory.md#loading-documents).
                let stored = StoredMessage {
                    message: &message.message,
                    expires_at: message.expires_at,
                    model: message.embedding_model.as_deref(),
                };
                serde_json::to_writer(&mut thread.out, &stored).map_err(BackupError::Encode)?;
                thread.messages += 1;
            }
            Record::Header(_) | Record::Trailer(_) => {}
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), BackupError> {
        self.flush_assets()?;
        self.finish_thread()
    }

    /// Writes the gathered assets, one transaction per run of equal expiry.
    fn flush_assets(&mut self) -> Result<(), BackupError> {
        self.asset_bytes = 0;
        // Moved into each run, not copied: the batch is held once.
        let mut pending = std::mem::take(&mut self.assets).into_iter().peekable();
        while let Some((first, expires_at)) = pending.next() {
            let mut run = vec![first];
            while let Some((asset, _)) = pending.next_if(|(_, e)| *e == expires_at) {
                run.push(asset);
            }
            let expiry = match expires_at {
                Some(at) => Expiry::At(at),
                None => Expiry::Never,
            };
            self.stores
                .assets()
                .put_batch_expiring(&run, expiry)
                .map_err(BackupError::Assets)?;
            self.report.assets += run.len() as u64;
        }
        Ok(())
    }

    /// Loads the gathered thread's messages in one transaction.
    fn finish_thread(&mut self) -> Result<(), BackupError> {
        let Some(mut thread) = self.thread.take() else {
            return Ok(());
        };
        thread
            .out
            .write_all(b"]")
            .and_then(|()| thread.out.flush())
            .map_err(BackupError::io(&self.document))?;
        drop(thread.out);
        let name = thread.record.display();
        let added = self
            .stores
            .memory(scope_of(&thread.record))
            .and_then(|memory| memory.load(LoadSource::Path(self.document.clone()), false))
            .map_err(|error| BackupError::Memory {
                thread: name,
                error,
            })?;
        self.report.threads += 1;
        self.report.messages += added.added as u64;
        Ok(())
    }

    fn save_artifact(&mut self, record: &ArtifactRecord) -> Result<(), BackupError> {
        let artifact = &record.artifact;
        let expiry = match record.expires_at {
            Some(at) => Expiry::At(at),
            None => Expiry::Never,
        };
        let external = match &artifact.storage {
            Some(location) => match self.stores.backends().resolve(&location.backend) {
                Ok(Storage::External { backend, .. }) => Some((backend, location.id.clone())),
                Ok(Storage::Inline) => None,
                Err(_) => {
                    return Err(BackupError::NoBackend {
                        id: artifact.id.to_string(),
                        backend: location.backend.clone(),
                    });
                }
            },
            None => None,
        };
        let mut write_content = || match (&external, &record.content) {
            (Some((backend, storage_id)), Some(content)) => backend.write(storage_id, content),
            _ => Ok(()),
        };
        self.stores
            .artifacts()
            .save_expiring(artifact, expiry, &mut write_content)
            .map_err(BackupError::Artifacts)?;
        self.report.artifacts += 1;
        Ok(())
    }
}

/// A message of a backup as the memory's stored export layout writes it: the message's own
/// keys, then `"__expires_at"` (always, `null` for never) and `"__embedding_model"` (when
/// known), written without copying the message.
struct StoredMessage<'a> {
    message: &'a serde_json::Map<String, serde_json::Value>,
    expires_at: Option<i64>,
    model: Option<&'a str>,
}

impl serde::Serialize for StoredMessage<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        // A hand-made file's message may carry the keys itself: the record's fields win.
        for (key, value) in self
            .message
            .iter()
            .filter(|(key, _)| *key != EXPIRES_KEY && *key != MODEL_KEY)
        {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry(EXPIRES_KEY, &self.expires_at)?;
        if let Some(model) = self.model {
            map.serialize_entry(MODEL_KEY, model)?;
        }
        map.end()
    }
}

/// Whether the target's `storage` already holds content under `id` other than `content` (a
/// storage backend has no cheaper question than a read; a location that holds nothing answers
/// at once).
fn holds_other(
    storage: &Storage,
    id: &str,
    content: Option<&serde_json::Value>,
) -> Result<bool, BackupError> {
    let Storage::External { backend, .. } = storage else {
        return Ok(false);
    };
    match backend.read(id) {
        Ok(held) => Ok(Some(&held) != content),
        Err(ArtifactError::ContentNotFound { .. }) => Ok(false),
        Err(e) => Err(BackupError::Artifacts(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch is bounded by what its assets take, JSON included: an asset of a megabyte of
    /// JSON and no bytes counted as nothing, so 256 of them were held at once.
    #[test]
    fn an_assets_json_counts_toward_its_batch() {
        let mut asset = serde_json::Map::new();
        asset.insert("asset_id".into(), serde_json::json!("a"));
        asset.insert("content".into(), serde_json::json!("x".repeat(1 << 20)));
        let record = AssetRecord {
            asset,
            leaves: Vec::new(),
            expires_at: None,
        };
        let bytes = record_bytes(&record);
        assert!((1 << 20..(1 << 20) + 64).contains(&bytes), "{bytes}");
    }
}
