//! The `Memory` operations, written once over a [`Backend`]: a backend only knows how to read
//! a thread's state and how to persist and apply a planned [`Change`]. Every type implementing
//! [`Backend`] ([`InMemoryMemory`](crate::InMemoryMemory), `SqliteMemory`) is a [`Memory`]
//! through the one generic implementation below.

use mnemon_db::Expiry;
use mnemon_types::{Embedder, Msg, MsgFactory};

use crate::document::{ExportOptions, ExportTarget, Exported, LoadSource, MsgInput, io_error};
use crate::entry::Entry;
use crate::error::MemoryError;
use crate::export::{ExportWriter, write_atomically_with};
use crate::load::{convert_inputs, decode_source};
use crate::marks::{unique_marks, validate_mark};
use crate::memory::{AddOptions, Memory, MemoryQuery};
use crate::recall_index::RecallIndexOptions;
use crate::report::{AddReport, DeleteByIdReport, DeleteReport};
use crate::retrieval::{
    self, RetrievalQuery, RetrieveOptions, Retrieved, embed_texts, missing_embeddings,
};
use crate::thread::{Change, ThreadState};

/// Storage of one thread.
pub(crate) trait Backend: Send + Sync {
    /// The factory that fills in missing ids and timestamps.
    fn factory(&self) -> &MsgFactory;

    /// When a large thread's recall uses the approximate index (`crate::recall_index`):
    /// `None` never (PostgreSQL, which has pgvector's).
    fn recall_index(&self) -> Option<&RecallIndexOptions> {
        None
    }

    /// Runs `f` on the current state (synchronised with storage), under a read lock.
    fn read<R>(&self, f: impl FnOnce(&ThreadState) -> R) -> Result<R, MemoryError>;

    /// Plans a change with `f` under the write lock, persists it (all or nothing), then applies
    /// it to the state.
    fn write<R>(
        &self,
        f: impl FnOnce(&ThreadState) -> Result<(Option<Change>, R), MemoryError>,
    ) -> Result<R, MemoryError>;

    /// Calls `f` with every entry in memory order, from one consistent snapshot, and returns
    /// how many there were. `with_marks` says whether `f` reads the entries' marks (a durable
    /// backend may then skip reading them). A durable backend reads its rows as it goes, so an
    /// export holds one message at a time; the default runs over the state under the read lock.
    fn scan(
        &self,
        with_marks: bool,
        f: &mut dyn FnMut(&Entry) -> Result<(), MemoryError>,
    ) -> Result<usize, MemoryError> {
        let _ = with_marks;
        self.read(|s| {
            s.entries().iter().try_for_each(&mut *f)?;
            Ok(s.len())
        })?
    }

    /// Steps 1 and 2 of docs/reference/memory.md#reading-messages with a bound: the last `n`
    /// messages passing the mark filters. A durable backend reads only those rows (`ORDER BY … DESC
    /// LIMIT n`) unless its mirror is already current.
    fn select_recent(
        &self,
        mark: Option<&str>,
        exclude_mark: Option<&str>,
        n: usize,
    ) -> Result<Vec<Msg>, MemoryError> {
        self.read(|s| s.select(mark, exclude_mark, Some(n)))
    }

    /// A cut to `top_k` answered from the backend's own vector index, scored exactly with the
    /// crate's kernel, or `None` to score the mirrored state (the default, and what a backend
    /// must answer whenever its index could return fewer than the `top_k` that exist). `query`
    /// is the query vector, already checked non-empty.
    fn retrieve_from_index(
        &self,
        query: &[f32],
        options: &RetrieveOptions,
    ) -> Result<Option<Vec<Retrieved>>, MemoryError> {
        let _ = (query, options);
        Ok(None)
    }

    /// The `expires_at` of messages added now with `expiry` (`None`: never). A backend
    /// without a clock (the default) accepts only what never expires.
    fn deadline(&self, expiry: Expiry) -> Result<Option<i64>, MemoryError> {
        match expiry {
            Expiry::Default | Expiry::Never => Ok(None),
            Expiry::After(_) | Expiry::At(_) => Err(MemoryError::ExpiryUnsupported),
        }
    }

    /// Refuses a recall with `model` when a stored embedding of the thread was made by another
    /// model ([`MemoryError::EmbeddingModelMismatch`]); embeddings of unknown origin pass. A
    /// durable backend answers from an index, without reading the thread.
    fn check_model(&self, model: &str) -> Result<(), MemoryError> {
        let other = self.read(|s| {
            s.entries()
                .iter()
                .filter_map(|e| e.embedding_model.as_deref())
                .find(|m| *m != model)
                .map(str::to_owned)
        })?;
        match other {
            Some(stored) => Err(MemoryError::EmbeddingModelMismatch {
                stored,
                requested: model.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// [`Memory::load`]: decodes the whole source, then adds it in one
    /// write. A durable backend instead streams the source into one transaction.
    fn load_document(&self, source: LoadSource, overwrite: bool) -> Result<AddReport, MemoryError> {
        let entries = decode_source(self.factory(), source)?;
        accepts_expiries(self, &entries)?;
        self.write(|s| Ok(s.plan_add(entries, overwrite)))
    }
}

/// The one implementation of [`Memory`]: every backend gets the same semantics (the
/// conformance suite runs against each).
impl<B: Backend> Memory for B {
    fn get_memory(&self, query: &MemoryQuery<'_>) -> Result<Vec<Msg>, MemoryError> {
        let selected = match query.recent_n {
            Some(n) => self.select_recent(query.mark, query.exclude_mark, n)?,
            None => self.read(|s| s.select(query.mark, query.exclude_mark, None))?,
        };
        // The filter runs here, after the lock is released.
        Ok(match query.filter {
            None => selected,
            Some(filter) => selected
                .into_iter()
                .enumerate()
                .filter(|(i, m)| filter(*i, m))
                .map(|(_, m)| m)
                .collect(),
        })
    }

    fn for_each_message(
        &self,
        query: &MemoryQuery<'_>,
        f: &mut dyn FnMut(Msg) -> bool,
    ) -> Result<usize, MemoryError> {
        if query.recent_n.is_some() {
            // The last `n`: `select_recent` reads only those.
            let mut given = 0;
            for message in self.get_memory(query)? {
                given += 1;
                if !f(message) {
                    break;
                }
            }
            return Ok(given);
        }
        let has = |e: &Entry, m: &str| e.marks.iter().any(|x| x == m);
        let (mut position, mut given, mut stopped) = (0, 0, false);
        let scanned = self.scan(
            query.mark.is_some() || query.exclude_mark.is_some(),
            &mut |entry| {
                if query.mark.is_some_and(|m| !has(entry, m))
                    || query.exclude_mark.is_some_and(|m| has(entry, m))
                {
                    return Ok(());
                }
                let message = entry.message();
                let i = position;
                position += 1;
                if query.filter.is_some_and(|keep| !keep(i, &message)) {
                    return Ok(());
                }
                given += 1;
                if f(message) {
                    Ok(())
                } else {
                    stopped = true;
                    // Ends the scan; told apart from a failure by `stopped`.
                    Err(MemoryError::Storage {
                        detail: "stopped by the caller".into(),
                    })
                }
            },
        );
        match scanned {
            Err(_) if stopped => Ok(given),
            Err(e) => Err(e),
            Ok(_) => Ok(given),
        }
    }

    fn add_with(
        &self,
        items: Vec<MsgInput>,
        options: &AddOptions,
    ) -> Result<AddReport, MemoryError> {
        add_entries(self, items, options, None)
    }

    fn add_with_model(
        &self,
        items: Vec<MsgInput>,
        options: &AddOptions,
        embedding_model: &str,
    ) -> Result<AddReport, MemoryError> {
        add_entries(self, items, options, Some(embedding_model))
    }

    fn delete(&self, indices: &[usize]) -> Result<DeleteReport, MemoryError> {
        self.write(|s| Ok(s.plan_delete(indices)))
    }

    fn delete_by_id(&self, ids: &[&str]) -> Result<DeleteByIdReport, MemoryError> {
        self.write(|s| Ok(s.plan_delete_ids(ids)))
    }

    fn load(&self, source: LoadSource, overwrite: bool) -> Result<AddReport, MemoryError> {
        self.load_document(source, overwrite)
    }

    fn export(
        &self,
        target: ExportTarget,
        options: &ExportOptions,
    ) -> Result<Exported, MemoryError> {
        match target {
            ExportTarget::Messages => Ok(Exported::Messages(
                self.read(|s| s.select(None, None, None))?,
            )),
            ExportTarget::Json => {
                // Writing into a Vec cannot fail; the error only satisfies the types.
                let failed = |e: std::io::Error| MemoryError::Io {
                    path: "(export text)".into(),
                    detail: e.to_string(),
                };
                let mut writer = ExportWriter::new(Vec::new(), options);
                self.scan(options.include_marks, &mut |entry| {
                    writer.push(entry).map_err(failed)
                })?;
                let bytes = writer.finish().map_err(failed)?;
                // The writer only writes `str`s.
                let text = String::from_utf8(bytes).map_err(|e| MemoryError::Io {
                    path: "(export text)".into(),
                    detail: e.to_string(),
                })?;
                Ok(Exported::Json(text))
            }
            ExportTarget::File(path) => {
                let count = write_atomically_with(&path, |out| {
                    let mut writer = ExportWriter::new(out, options);
                    self.scan(options.include_marks, &mut |entry| {
                        writer.push(entry).map_err(|e| io_error(&path, &e))
                    })?;
                    let count = writer.count();
                    writer.finish().map_err(|e| io_error(&path, &e))?;
                    Ok(count)
                })?;
                Ok(Exported::File { path, count })
            }
        }
    }

    fn clear(&self) -> Result<(), MemoryError> {
        self.write(|s| Ok(((s.len() > 0).then(|| Change::Replace(Vec::new())), ())))
    }

    fn size(&self) -> Result<usize, MemoryError> {
        self.read(ThreadState::len)
    }

    fn retrieve_by_embedding(
        &self,
        query: RetrievalQuery,
        options: &RetrieveOptions,
        embedder: Option<&dyn Embedder>,
    ) -> Result<Vec<Retrieved>, MemoryError> {
        if let Some(mark) = &options.mark {
            validate_mark(mark)?;
        }
        if let Some(embedder) = embedder {
            self.check_model(embedder.model())?;
        }
        let query = retrieval::query_vector(query, embedder)?;
        if let Some(found) = self.retrieve_from_index(&query, options)? {
            return Ok(found);
        }
        ensure_embeddings(self, options.mark.as_deref(), embedder)?;
        if embedder.is_some() {
            // Every message present when this recall began has been embedded by now; one
            // still without an embedding was added by another writer while the embedder ran,
            // so the recall is ordered before that add instead of failing on it.
            self.read(|s| retrieval::score_embedded(s, &query, options, self.recall_index()))?
        } else {
            self.read(|s| retrieval::score(s, &query, options, self.recall_index()))?
        }
    }

    fn get_embeddings(
        &self,
        embedder: Option<&dyn Embedder>,
    ) -> Result<Vec<Vec<f32>>, MemoryError> {
        if let Some(embedder) = embedder {
            self.check_model(embedder.model())?;
        }
        ensure_embeddings(self, None, embedder)?;
        self.read(retrieval::all_embeddings)?
    }

    fn mark(&self, ids: &[&str], mark: &str) -> Result<usize, MemoryError> {
        validate_mark(mark)?;
        self.write(|s| Ok(s.plan_mark(ids, mark)))
    }

    fn unmark(&self, ids: Option<&[&str]>, mark: &str) -> Result<usize, MemoryError> {
        validate_mark(mark)?;
        self.write(|s| Ok(s.plan_unmark(ids, mark)))
    }

    fn marks_of(&self, id: &str) -> Result<Option<Vec<String>>, MemoryError> {
        self.read(|s| {
            s.position(id)
                .and_then(|i| s.entries().get(i))
                .map(|e| e.marks.clone())
        })
    }

    fn delete_by_mark(&self, mark: &str) -> Result<DeleteByIdReport, MemoryError> {
        validate_mark(mark)?;
        self.write(|s| Ok(s.plan_delete_by_mark(mark)))
    }
}

/// Re-embeds with `embedder`, `batch` messages at a time, every live message of the thread
/// whose embedding was not made by `embedder`'s model (none, another model, or an unknown
/// one), each batch embedded outside any lock and stored in one write (which records the
/// model); calls `progress` with the size of each stored batch and returns how many were
/// re-embedded. Resumable: a message stored with the model is never picked again, so a run
/// cut short (a kill, an embedder error) leaves its finished batches and the next run does
/// only the rest.
pub(crate) fn reembed_thread<B: Backend>(
    b: &B,
    embedder: &dyn Embedder,
    batch: usize,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, MemoryError> {
    let model = embedder.model();
    let batch = batch.max(1);
    let mut done = 0u64;
    // Each message once per run, whatever happens to it meanwhile: the loop always ends.
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    loop {
        let todo: Vec<(String, String)> = b.read(|s| {
            s.entries()
                .iter()
                .filter(|e| e.embedding_model.as_deref() != Some(model) && !seen.contains(e.id()))
                .take(batch)
                .map(|e| (e.id().to_owned(), e.msg_without_embedding().content_text()))
                .collect()
        })?;
        if todo.is_empty() {
            return Ok(done);
        }
        seen.extend(todo.iter().map(|(id, _)| id.clone()));
        let texts: Vec<&str> = todo.iter().map(|(_, t)| t.as_str()).collect();
        let vectors = embed_texts(embedder, &texts)?;
        let stored = b.write(|s| {
            let mut updates = Vec::with_capacity(todo.len());
            for ((id, _), vector) in todo.iter().zip(&vectors) {
                // A message removed (or re-embedded by another run) meanwhile is left alone.
                let Some(i) = s.position(id) else { continue };
                let Some(entry) = s.entries().get(i) else {
                    continue;
                };
                if entry.embedding_model.as_deref() == Some(model) {
                    continue;
                }
                let mut msg = entry.message();
                msg.set_embedding(vector)
                    .map_err(|e| MemoryError::EmbedderContract {
                        model: model.to_owned(),
                        detail: e.to_string(),
                    })?;
                updates.push((i, msg));
            }
            let n = u64::try_from(updates.len()).unwrap_or(u64::MAX);
            Ok((
                (!updates.is_empty()).then(|| Change::SetMessages(updates, Some(model.to_owned()))),
                n,
            ))
        })?;
        done += stored;
        if stored > 0 {
            progress(stored);
        }
    }
}

/// Refuses entries carrying an expiry when the backend cannot keep one (a backend without a
/// clock answers [`MemoryError::ExpiryUnsupported`]), so that no expiry is silently dropped.
fn accepts_expiries<B: Backend + ?Sized>(b: &B, entries: &[Entry]) -> Result<(), MemoryError> {
    match entries.iter().find_map(|e| e.expires_at) {
        Some(at) => b.deadline(Expiry::At(at)).map(|_| ()),
        None => Ok(()),
    }
}

/// Adds `items` with `options`, their embeddings made by `model` when known.
fn add_entries<B: Backend>(
    b: &B,
    items: Vec<MsgInput>,
    options: &AddOptions,
    model: Option<&str>,
) -> Result<AddReport, MemoryError> {
    let marks = unique_marks(&options.marks)?;
    let deadline = b.deadline(options.expiry)?;
    let mut entries = convert_inputs(b.factory(), items, &marks)?;
    // The options' expiry and model win; an item's own (`"__expires_at"`, `null` for never,
    // and `"__embedding_model"`, as an `AgentScope00Stored` export writes them) stands
    // otherwise, before the handle's default time-to-live (docs/reference/memory.md#loading-documents).
    let explicit = !matches!(options.expiry, Expiry::Default);
    if explicit || deadline.is_some() || model.is_some() {
        entries = entries
            .into_iter()
            .map(|mut e| {
                let expires_at = if explicit {
                    deadline
                } else {
                    e.loaded_expiry(deadline)
                };
                let own = e.embedding_model.take();
                e.expiring(expires_at)
                    .embedded_by(model.map(str::to_owned).or(own))
            })
            .collect();
    }
    accepts_expiries(b, &entries)?;
    b.write(|s| Ok(s.plan_add(entries, false)))
}

/// Makes sure every candidate has an embedding, embedding missing ones outside any lock.
fn ensure_embeddings<B: Backend>(
    b: &B,
    mark: Option<&str>,
    embedder: Option<&dyn Embedder>,
) -> Result<(), MemoryError> {
    // Another writer may add messages while the embedder runs; a few rounds catch up with it,
    // after which scoring reports whatever is still missing.
    for _ in 0..3 {
        let missing = b.read(|s| missing_embeddings(s, mark))?;
        let Some((first_id, _)) = missing.first() else {
            return Ok(());
        };
        let Some(embedder) = embedder else {
            return Err(MemoryError::MissingEmbedding {
                id: first_id.clone(),
                missing: missing.len(),
            });
        };
        let texts: Vec<&str> = missing.iter().map(|(_, t)| t.as_str()).collect();
        let vectors = embed_texts(embedder, &texts)?;
        b.write(|s| {
            let mut updates = Vec::new();
            for ((id, _), vector) in missing.iter().zip(&vectors) {
                let Some(i) = s.position(id) else { continue };
                let Some(entry) = s.entries().get(i) else {
                    continue;
                };
                if !entry.has_embedding() {
                    let mut msg = entry.message();
                    msg.set_embedding(vector)
                        .map_err(|e| MemoryError::EmbedderContract {
                            model: embedder.model().to_owned(),
                            detail: e.to_string(),
                        })?;
                    updates.push((i, msg));
                }
            }
            Ok((
                (!updates.is_empty())
                    .then(|| Change::SetMessages(updates, Some(embedder.model().to_owned()))),
                (),
            ))
        })?;
    }
    Ok(())
}
