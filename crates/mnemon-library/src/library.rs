//! The [`Library`] type and its operations (docs/reference/library.md#library-api).

use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use mnemon_vector::MatrixView;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};

use crate::ann::AnnFile;
use crate::builder::{Builder, EmbeddingField, FieldValue, Pushed, RawBit};
use crate::codec::encode_vector;
use crate::cut::CountType;
use crate::error::{LibraryError, Result};
use crate::fast::Int8Matrix;
use crate::id::BitId;
use crate::load::{Loaded, known_dimension, load_slice, load_value};
use crate::omit::Omit;
use crate::storage::{NO_TAG, Store};
use mnemon_pyjson::PythonFormatter;

/// The `embedding_model` of [`Library::default`]: the reference's default, OpenAI's
/// `text-embedding-ada-002` (1536 dimensions). A name in a library file, not a model Mnemon
/// embeds with (for that, see `mnemon_embed`).
pub const BLANK_LIBRARY_MODEL: &str = "openai.com:text-embedding-ada-002";

/// A load progress callback: called with the number of bytes of the file parsed so far.
pub type Progress = std::sync::Arc<dyn Fn(u64) + Send + Sync>;

/// Options for opening a library.
#[derive(Clone, Default)]
pub struct OpenOptions {
    /// Forces this `access_tag` onto every bit, replacing stored tags.
    pub force_tag: Option<String>,
    /// Ignore a packed sidecar (`<file>.mnx`) even when it is up to date.
    pub ignore_sidecar: bool,
    /// Called from the loading thread as [`Library::open`] parses a JSON file, with the bytes
    /// parsed so far (the file's length is the total), for a progress bar. Calls come with each
    /// decoded batch of 4,096 bits, so they cost nothing measurable; a file loaded another way
    /// (a sidecar, a version-0 file) may report nothing before the load returns.
    pub progress: Option<Progress>,
}

impl std::fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenOptions")
            .field("force_tag", &self.force_tag)
            .field("ignore_sidecar", &self.ignore_sidecar)
            .field("progress", &self.progress.as_ref().map(|_| ".."))
            .finish()
    }
}

impl OpenOptions {
    /// Options whose forced tag comes from a path relative to a served directory
    /// (docs/reference/host.md#serving-libraries): the component right after the first `access`
    /// component, if a file lies below it.
    pub(crate) fn for_relative_path(relative: &Path) -> Self {
        OpenOptions {
            force_tag: tag_from_relative_path(relative),
            ..OpenOptions::default()
        }
    }
}

/// The tag for a file at `relative` inside a served directory: `access/<tag>/…/x.json` gives
/// `<tag>`; a file directly in `access/` or outside it gives none. Only the components of
/// `relative` are looked at; [`tag_from_path`] applies the rule to a whole path.
pub fn tag_from_relative_path(relative: &Path) -> Option<String> {
    let parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let at = parts.iter().position(|p| p == "access")?;
    // The tag directory must be followed by at least the file name.
    if parts.len() > at + 2 {
        parts.get(at + 1).cloned()
    } else {
        None
    }
}

/// The tag for a library file at `path`, wherever it was found (issue 11 item 1): the
/// directory component right after the first `access` component gives the `access_tag` of every
/// bit in the file, as the reference does for every file it loads (`os.path.dirname(filename)`
/// split on `/`): `…/access/unpublished/x.json` → `unpublished`; a file directly in `access/`
/// gets none.
///
/// Which path: the path **as given, made absolute** (`std::path::absolute`: joined to the
/// current directory, `..` and symlinks left unresolved), not canonicalised. Made absolute so
/// that a relative path names the same tag whatever directory it is relative to (a host started
/// inside `…/access/team/` with `--library x.json` still tags `team`); not canonicalised,
/// because the operator's path is what says which tag the file is served under: resolving
/// symlinks would let a link from a public place (or a link target outside `access/`) change
/// or drop the tag. Both choices only ever add a tag, so the rule fails closed.
pub fn tag_from_path(path: &Path) -> Option<String> {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    tag_from_relative_path(&absolute)
}

/// The state of a library's approximate index ([`Library::index_state`],
/// docs/reference/library.md#ann-index).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexState {
    /// No `<file>.ann` beside the library (or the library was edited or built in memory).
    Absent,
    /// Verified: queries above the size threshold use it.
    Ready,
    /// Damaged, truncated or stale: never used; the reason, as logged.
    Refused(String),
}

/// A bit as typed values, for [`Library::insert_bit`]: what an importer has in hand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NewBit<'a> {
    /// The bit's text.
    pub text: &'a str,
    /// Its embedding, of the library's dimension.
    pub embedding: &'a [f32],
    /// Its `token_count` (cl100k_base tokens of `text`).
    pub token_count: i64,
    /// `info.url`: the source document; with `text`, it makes the bit's id.
    pub url: &'a str,
    /// `info.title`, if any.
    pub title: Option<&'a str>,
    /// Its `access_tag`, if it is restricted.
    pub access_tag: Option<&'a str>,
}

/// The result of [`Library::insert`] and [`Library::insert_bit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertOutcome {
    /// The bit was appended.
    Inserted(BitId),
    /// A bit with this id exists; nothing changed.
    Duplicate(BitId),
    /// The library's stored omit is `*`, so bits are ignored (as in the reference).
    Ignored,
}

/// An embedding library: bits of text with embeddings and metadata, in file order.
///
/// Embeddings live in one contiguous 64-byte-aligned matrix; per-bit metadata lives in parallel
/// arrays and a JSON arena. `Library` is `Send + Sync`; [`Library::query`] takes `&self`.
pub struct Library {
    /// Top-level keys in stored order; `bits` holds a `null` placeholder for its position.
    pub(crate) top: Map<String, Value>,
    pub(crate) model: String,
    pub(crate) omit: Option<Omit>,
    pub(crate) store: Store,
    upgraded: bool,
    /// The int8 copy for fast mode, built by the first fast query.
    pub(crate) int8: OnceLock<Int8Matrix>,
    /// The approximate index opened beside the file (`<file>.ann`), verified by its first use;
    /// dropped by every edit (docs/reference/library.md#ann-index).
    pub(crate) ann: Option<AnnFile>,
    /// The largest Euclidean length of a stored embedding (in f64), computed by the first query
    /// that needs it; see [`Library::max_row_norm`].
    pub(crate) max_norm: OnceLock<f64>,
    /// Bits per tag index (one more slot for indices past the tag table), counted by the first
    /// query: a query's restricted count is then a sum over the tags its grant closes, not a
    /// pass over every bit, which an indexed query (reading only its candidates) would
    /// otherwise pay on top of its search.
    pub(crate) tag_counts: OnceLock<Vec<usize>>,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("model", &self.model)
            .field("bits", &self.len())
            .field("dimension", &self.store.dim)
            .finish_non_exhaustive()
    }
}

impl Default for Library {
    fn default() -> Self {
        Library::blank(BLANK_LIBRARY_MODEL)
    }
}

impl Clone for Library {
    fn clone(&self) -> Self {
        let order: Vec<usize> = (0..self.len()).collect();
        Library {
            top: self.top.clone(),
            model: self.model.clone(),
            omit: self.omit.clone(),
            store: self.store.reordered(&order, &|_| None),
            upgraded: self.upgraded,
            int8: OnceLock::new(),
            ann: None,
            max_norm: OnceLock::new(),
            tag_counts: OnceLock::new(),
        }
    }
}

impl Library {
    fn from_loaded(l: Loaded) -> Self {
        Library {
            top: l.top,
            model: l.model,
            omit: l.omit,
            store: l.store,
            upgraded: l.upgraded,
            int8: OnceLock::new(),
            ann: None,
            max_norm: OnceLock::new(),
            tag_counts: OnceLock::new(),
        }
    }

    pub(crate) fn from_parts(
        top: Map<String, Value>,
        model: String,
        omit: Option<Omit>,
        store: Store,
    ) -> Self {
        Library {
            top,
            model,
            omit,
            store,
            upgraded: false,
            int8: OnceLock::new(),
            ann: None,
            max_norm: OnceLock::new(),
            tag_counts: OnceLock::new(),
        }
    }

    /// An empty library: `{version: 1, embedding_model, bits: []}`.
    pub fn blank(model: &str) -> Self {
        let mut top = Map::new();
        top.insert("version".into(), Value::from(1));
        top.insert("embedding_model".into(), Value::from(model));
        top.insert("bits".into(), Value::Null);
        Library::from_parts(
            top,
            model.to_owned(),
            None,
            Store::new(known_dimension(model)),
        )
    }

    /// Parses, upgrades and validates library JSON held in memory.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        load_slice(bytes, None, None).map(Self::from_loaded)
    }

    /// Validates a parsed JSON value as a library.
    pub fn from_value(value: Value) -> Result<Self> {
        load_value(value, None).map(Self::from_loaded)
    }

    /// Opens a library file. The file is memory-mapped and parsed in place; pages already parsed
    /// are released as loading goes, so the file and the matrix are never both resident. A
    /// packed sidecar (`<path>.mnx`, see [`Library::pack`]) is used instead when it is up to date.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, &OpenOptions::default())
    }

    /// Like [`Library::open`], with options.
    ///
    /// Unless `options.force_tag` is set, a file under `access/<tag>/` has `<tag>` forced onto
    /// every bit ([`tag_from_path`]): this is the one place every path-based open goes through
    /// (`mnemon serve --library`, `$LIBRARY_FILENAME`, `mnemon library query`, directories),
    /// so restricted bits cannot be served untagged however the file was named.
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Self> {
        let path = path.as_ref();
        let with_path_tag;
        let options = match (&options.force_tag, tag_from_path(path)) {
            (None, Some(tag)) => {
                with_path_tag = OpenOptions {
                    force_tag: Some(tag),
                    ..options.clone()
                };
                &with_path_tag
            }
            _ => options,
        };
        // A sidecar holds the tags as packed; a forced tag needs the JSON.
        let sidecar = if options.ignore_sidecar || options.force_tag.is_some() {
            None
        } else {
            crate::sidecar::open_if_fresh(path)?
        };
        let loaded = match sidecar {
            Some(loaded) => loaded,
            None => {
                let progress = options.progress.as_deref();
                crate::mapped::load_file(path, options.force_tag.as_deref(), progress)?
            }
        };
        let mut library = Self::from_loaded(loaded);
        // The index covers the vectors only, so it serves a library loaded either way (and
        // with any forced tag); it is checked against these vectors before its first use.
        library.ann = AnnFile::open_beside(path);
        Ok(library)
    }

    /// Whether the source was a version-0 file that was upgraded on load.
    pub fn upgraded(&self) -> bool {
        self.upgraded
    }

    /// The embedding model.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The embedding dimension, once known.
    pub fn dimension(&self) -> Option<usize> {
        self.store.dim
    }

    /// The number of bits.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether there are no bits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stored `sort` value, if any.
    pub fn sort(&self) -> Option<&str> {
        self.top.get("sort").and_then(Value::as_str)
    }

    /// The top-level JSON without `bits` (its position holds `null`).
    #[cfg(test)]
    pub(crate) fn top_level(&self) -> &Map<String, Value> {
        &self.top
    }

    /// The matrix of embeddings, one row per bit in file order.
    pub fn embeddings(&self) -> MatrixView<'_> {
        self.store.embeddings.view()
    }

    /// The sum of every bit's `token_count`.
    pub fn total_tokens(&self) -> i64 {
        self.store
            .token_counts
            .iter()
            .fold(0i64, |a, &b| a.saturating_add(b))
    }

    /// Each access tag with its number of bits, in first-seen order (bits without a tag are not
    /// counted).
    pub fn access_tags(&self) -> Vec<(String, usize)> {
        let mut counts = vec![0usize; self.store.tag_names.len()];
        for &t in &self.store.tags {
            if t != NO_TAG
                && let Some(c) = counts.get_mut(t as usize)
            {
                *c += 1;
            }
        }
        self.store
            .tag_names
            .iter()
            .cloned()
            .zip(counts)
            .filter(|(_, c)| *c > 0)
            .collect()
    }

    /// Bit `i` as JSON: stored keys in order, the embedding re-encoded in place (when `embed`),
    /// `access_tag` kept only when `include_tag`.
    pub(crate) fn bit_json(
        &self,
        i: usize,
        include_tag: bool,
        embed: bool,
    ) -> Result<Map<String, Value>> {
        let mut map = self.store.json(i)?;
        if map.contains_key("embedding") {
            if embed {
                let row = self.store.embeddings.view().row(i).unwrap_or(&[]);
                map.insert("embedding".into(), Value::String(encode_vector(row)));
            } else {
                map.shift_remove("embedding");
            }
        }
        if !include_tag {
            map.shift_remove("access_tag");
        }
        Ok(map)
    }

    /// Iterates the bits in file order.
    pub fn bits(&self) -> impl ExactSizeIterator<Item = BitRef<'_>> + '_ {
        (0..self.len()).map(move |index| self.bit_at(index))
    }

    /// Bit `index` (in file order), which the caller knows exists.
    pub(crate) fn bit_at(&self, index: usize) -> BitRef<'_> {
        BitRef {
            lib: self,
            index,
            json: std::cell::OnceCell::new(),
        }
    }

    /// Iterates the bits' texts in file order.
    pub fn texts(&self) -> impl Iterator<Item = Result<String>> + '_ {
        self.bits().map(|b| b.text().map(str::to_owned))
    }

    /// Where the bit with this id is, in file order (the index [`BitRef::index`] gives).
    pub fn position(&self, id: &BitId) -> Option<usize> {
        self.store.index.get(id).copied()
    }

    /// The bit with this id, as JSON (with its embedding and access tag).
    pub fn get(&self, id: &BitId) -> Result<Option<Map<String, Value>>> {
        match self.store.index.get(id) {
            Some(&i) => self.bit_json(i, true, true).map(Some),
            None => Ok(None),
        }
    }

    /// Removes the bit with this id and returns it; the other bits keep their order.
    pub fn remove(&mut self, id: &BitId) -> Result<Option<Map<String, Value>>> {
        let Some(&i) = self.store.index.get(id) else {
            return Ok(None);
        };
        let bit = self.bit_json(i, true, true)?;
        self.store.remove(i);
        self.int8 = OnceLock::new();
        // The index was built over the vectors as they were.
        self.ann = None;
        self.max_norm = OnceLock::new();
        self.tag_counts = OnceLock::new();
        Ok(Some(bit))
    }

    /// Appends a bit given as typed values (an importer's chunk and its embedding), validated
    /// as [`Library::insert`] validates a JSON bit, with the same outcomes and errors.
    pub fn insert_bit(&mut self, bit: &NewBit<'_>) -> Result<InsertOutcome> {
        let mut info = Map::new();
        info.insert("url".into(), Value::from(bit.url));
        if let Some(title) = bit.title {
            info.insert("title".into(), Value::from(title));
        }
        let json = |v: Value| FieldValue::Json(Cow::Owned(v));
        // The fields in the order a JSON bit has them; the vector goes into the matrix as it is.
        let mut fields = vec![
            (Cow::Borrowed("text"), json(Value::from(bit.text))),
            (
                Cow::Borrowed("embedding"),
                FieldValue::Embedding(EmbeddingField::Floats(bit.embedding)),
            ),
            (
                Cow::Borrowed("token_count"),
                json(Value::from(bit.token_count)),
            ),
            (Cow::Borrowed("info"), json(Value::Object(info))),
        ];
        if let Some(tag) = bit.access_tag {
            fields.push((Cow::Borrowed("access_tag"), json(Value::from(tag))));
        }
        self.push_eager(RawBit::Object(fields))
    }

    /// Validates a bit against this library (dimension, stored omit) and appends it.
    pub fn insert(&mut self, bit: &Value) -> Result<InsertOutcome> {
        self.push_eager(RawBit::from_value(bit))
    }

    /// Validates one bit and appends it, all or nothing.
    fn push_eager(&mut self, bit: RawBit<'_>) -> Result<InsertOutcome> {
        if self.omit.as_ref().is_some_and(Omit::all) {
            return Ok(InsertOutcome::Ignored);
        }
        let store = std::mem::replace(&mut self.store, Store::new(None));
        let mut builder = Builder::eager(store, self.omit.clone());
        let pushed = builder.push(builder.store.len(), bit);
        self.store = builder.into_store();
        self.int8 = OnceLock::new();
        // The index was built over the vectors as they were.
        self.ann = None;
        self.max_norm = OnceLock::new();
        self.tag_counts = OnceLock::new();
        Ok(match pushed? {
            Pushed::Added => {
                let id = self.store.ids.last().copied().unwrap_or(BitId([0; 32]));
                InsertOutcome::Inserted(id)
            }
            Pushed::Duplicate(id) => InsertOutcome::Duplicate(id),
        })
    }

    /// Appends copies of `other`'s bits, skipping ids already present. Needs the same model and
    /// dimension; adopts `other`'s `sort` if this library has none and its `omit` if this one's
    /// is absent or empty. Atomic: on error nothing changes, for which it works on a copy of this
    /// library (merge many files with [`Library::open_dir`], which does not copy).
    pub fn extend(&mut self, other: &Library) -> Result<()> {
        let mut next = self.clone();
        next.append_from(other)?;
        *self = next;
        Ok(())
    }

    /// [`Library::extend`] without the copy of `self` that makes it atomic: on an error `self`
    /// is left part-way (possibly emptied), for callers that then discard it. Opening a
    /// directory merges file after file into one library this way; through `extend` every file
    /// copied everything merged before it, quadratic in the number of files
    /// (docs/reference/host.md#serving-libraries).
    pub(crate) fn append_from(&mut self, other: &Library) -> Result<()> {
        if other.model != self.model {
            return Err(LibraryError::DifferentModel);
        }
        if let (Some(a), Some(b)) = (self.store.dim, other.store.dim)
            && a != b
            && !other.is_empty()
        {
            return Err(LibraryError::DifferentDimension {
                expected: a,
                found: b,
            });
        }
        // What was derived from the vectors as they were.
        self.int8 = OnceLock::new();
        self.ann = None;
        self.max_norm = OnceLock::new();
        self.tag_counts = OnceLock::new();
        if self.top.get("sort").is_none()
            && let Some(sort) = other.top.get("sort")
        {
            self.top.insert("sort".into(), sort.clone());
        }
        let own_omit_empty = self
            .top
            .get("omit")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if own_omit_empty
            && let Some(o) = other
                .top
                .get("omit")
                .and_then(Value::as_str)
                .filter(|o| !o.is_empty())
        {
            self.top.insert("omit".into(), Value::from(o));
            self.omit = other.omit.clone();
        }
        if self.omit.as_ref().is_some_and(Omit::all) {
            return Ok(());
        }
        let bits: Vec<Value> = (0..other.len())
            .map(|i| other.bit_json(i, true, true).map(Value::Object))
            .collect::<Result<_>>()?;
        let store = std::mem::replace(&mut self.store, Store::new(None));
        let mut builder = Builder::eager(store, self.omit.clone());
        // Errors name the bit by its index in `other`, where the caller can find it.
        for (index, bit) in bits.iter().enumerate() {
            builder.push(index, RawBit::from_value(bit))?;
        }
        self.store = builder.into_store();
        Ok(())
    }

    /// Re-runs the load checks (docs/reference/library.md#load-errors) on the current content.
    pub fn validate(&self) -> Result<()> {
        Library::from_value(Value::Object(self.to_value(true)?)).map(|_| ())
    }

    /// The library as a JSON object (the embedding of every bit encoded).
    pub(crate) fn to_value(&self, include_access_tag: bool) -> Result<Map<String, Value>> {
        let mut out = Map::new();
        for (k, v) in &self.top {
            if k == "bits" {
                let bits = (0..self.len())
                    .map(|i| {
                        self.bit_json(i, include_access_tag, true)
                            .map(Value::Object)
                    })
                    .collect::<Result<_>>()?;
                out.insert(k.clone(), Value::Array(bits));
            } else {
                out.insert(k.clone(), v.clone());
            }
        }
        Ok(out)
    }

    /// Writes the library as Python's `json.dump(data, f, indent='\t')` would
    /// (docs/reference/library.md#saving).
    pub fn to_writer(&self, writer: impl Write, include_access_tag: bool) -> Result<()> {
        let mut ser =
            serde_json::Serializer::with_formatter(writer, PythonFormatter::indented("\t"));
        SaveView {
            lib: self,
            include_access_tag,
        }
        .serialize(&mut ser)
        .map_err(|e| LibraryError::Io {
            path: "<writer>".into(),
            source: std::io::Error::other(e),
        })
    }

    /// Saves the library to a file (docs/reference/library.md#saving).
    pub fn save(&self, path: impl AsRef<Path>, include_access_tag: bool) -> Result<()> {
        let path = path.as_ref();
        let file = std::fs::File::create(path).map_err(|e| LibraryError::io(path, e))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        self.to_writer(&mut w, include_access_tag)?;
        w.flush().map_err(|e| LibraryError::io(path, e))
    }

    fn reorder(&mut self, order: &[usize]) {
        self.store = self.store.reordered(order, &|_| None);
        self.int8 = OnceLock::new();
        // The index was built over the vectors as they were.
        self.ann = None;
        self.max_norm = OnceLock::new();
        self.tag_counts = OnceLock::new();
    }

    /// Writes the sidecar for this library, loaded from `source`, next to it as
    /// `<source>.mnx`, and returns its path. [`Library::open`] uses it while `source` keeps the
    /// size and modification time it has now.
    pub fn pack(&self, source: impl AsRef<Path>) -> Result<PathBuf> {
        crate::sidecar::write(source.as_ref(), &self.top, &self.store)
    }

    /// Builds the approximate index over this library's vectors and writes it next to `source`
    /// as `<source>.ann` (replaced atomically; for a library opened with
    /// [`Library::open_dir`], `source` is the directory and the index is
    /// `<source>/.library.ann`), returning its path
    /// (docs/reference/library.md#ann-index). `progress` gets the bits inserted so far and the
    /// total after each batch. The build is parallel (rayon) and deterministic: the same vectors
    /// give the same bytes. [`Library::open`] of `source` maps it and uses it while it matches
    /// the vectors the library then holds.
    pub fn pack_index(
        &self,
        source: impl AsRef<Path>,
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<PathBuf> {
        let source = source.as_ref();
        let failed = |reason: String| LibraryError::IndexBuild {
            path: source.display().to_string(),
            reason,
        };
        if self.is_empty() {
            return Err(failed("the library has no bits".into()));
        }
        let bytes = mnemon_ann::build(
            self.embeddings(),
            &mnemon_ann::BuildParams::default(),
            &|p: mnemon_ann::BuildProgress| progress(p.inserted, p.total),
        )
        .map_err(|e| failed(e.to_string()))?;
        let target = crate::ann::index_path(source);
        mnemon_db::atomic_file::write_atomic(&target, |w| w.write_all(bytes.as_bytes()))
            .map_err(|e| LibraryError::io(&target, e.into()))?;
        Ok(target)
    }

    /// The state of the approximate index opened with this library, verifying it (every
    /// checksum, and that it was built over the vectors the library holds) the first time:
    /// that reads the whole index and every vector once, so a host calls it after loading,
    /// before serving, rather than leave it to the first query.
    pub fn index_state(&self) -> IndexState {
        match &self.ann {
            None => IndexState::Absent,
            Some(ann) => match ann.verify(self.embeddings()) {
                Ok(()) => IndexState::Ready,
                Err(why) => IndexState::Refused(why),
            },
        }
    }

    /// Sorts bits by stored similarity, descending (stable), and sets `sort` to `similarity`.
    fn sort_by_similarity(&mut self) -> Result<()> {
        let mut sims = Vec::with_capacity(self.len());
        for i in 0..self.len() {
            match self
                .store
                .json(i)?
                .get("similarity")
                .and_then(Value::as_f64)
            {
                Some(s) => sims.push(s),
                None => return Err(LibraryError::NoSimilarity(self.store.ids[i].to_string())),
            }
        }
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.sort_by(|&a, &b| sims[b].total_cmp(&sims[a]));
        self.reorder(&order);
        self.top.insert("sort".into(), Value::from("similarity"));
        Ok(())
    }

    /// Shuffles the bits with `ChaCha8Rng::seed_from_u64(seed)` and sets `sort` to `random`.
    fn shuffle(&mut self, seed: u64) {
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        self.reorder(&order);
        self.top.insert("sort".into(), Value::from("random"));
    }

    /// Sets `sort`: `similarity` sorts, `random` shuffles with a random seed, `manual` keeps the
    /// order, `any` removes the key; anything else fails with `Illegal sort: <s>`.
    pub fn set_sort(&mut self, sort: &str) -> Result<()> {
        match sort {
            "similarity" => self.sort_by_similarity(),
            "random" => {
                self.shuffle(rand::random());
                Ok(())
            }
            "manual" => {
                self.top.insert("sort".into(), Value::from("manual"));
                Ok(())
            }
            "any" => {
                self.top.shift_remove("sort");
                Ok(())
            }
            other => Err(LibraryError::IllegalSort(other.to_owned())),
        }
    }

    /// A new library holding the first bits of the current order, cut as a query cuts
    /// (docs/reference/library.md#query-pipeline step 5). A negative `count` keeps everything.
    pub fn slice(&self, count: i64, count_type: CountType) -> Result<Library> {
        let (keep, truncate) = crate::cut::cut(
            &mut (0..self.len()),
            count,
            count_type,
            &self.store.token_counts,
        );
        // The first bit's text, cut, when it alone is over a token budget.
        let first = match (truncate, keep.first()) {
            (Some(n), Some(&i)) => {
                let mut bit = self.store.json(i)?;
                let text = bit.get("text").and_then(Value::as_str).unwrap_or("");
                let cut: String = text.chars().take(n).collect();
                bit.insert("text".into(), Value::String(cut));
                serde_json::to_vec(&bit).ok().map(|bytes| (i, bytes))
            }
            _ => None,
        };
        let replace = |i: usize| -> Option<Vec<u8>> {
            first
                .as_ref()
                .filter(|(at, _)| *at == i)
                .map(|(_, bytes)| bytes.clone())
        };
        let store = self.store.reordered(&keep, &replace);
        Ok(Library::from_parts(
            self.top.clone(),
            self.model.clone(),
            self.omit.clone(),
            store,
        ))
    }

    /// The largest Euclidean length of a stored embedding, computed in f64 (so it is finite
    /// for any finite embedding) by one parallel pass at the first query and then cached.
    pub(crate) fn max_row_norm(&self) -> f64 {
        use rayon::prelude::*;
        *self.max_norm.get_or_init(|| {
            let view = self.store.embeddings.view();
            (0..view.rows())
                .into_par_iter()
                .map(|i| norm_f64(view.row(i).unwrap_or(&[])))
                .reduce(|| 0.0, f64::max)
        })
    }

    pub(crate) fn int8_matrix(&self) -> &Int8Matrix {
        self.int8
            .get_or_init(|| Int8Matrix::build(&self.store.embeddings.view()))
    }
}

/// The Euclidean length of `v`, accumulated in f64: finite for every finite f32 vector.
pub(crate) fn norm_f64(v: &[f32]) -> f64 {
    v.iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt()
}

/// A borrowed bit. Its stored JSON (text, info, similarity, extra keys) is parsed at the first
/// accessor that needs it and kept for the others; a bit whose stored data no longer parses (a
/// sidecar damaged after it was opened) gives [`LibraryError::CorruptBit`].
#[derive(Clone)]
pub struct BitRef<'a> {
    lib: &'a Library,
    index: usize,
    json: std::cell::OnceCell<Map<String, Value>>,
}

impl std::fmt::Debug for BitRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BitRef")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl<'a> BitRef<'a> {
    /// Its position in file order.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Its id.
    pub fn id(&self) -> BitId {
        self.lib.store.ids[self.index]
    }

    /// Its embedding row.
    pub fn embedding(&self) -> &'a [f32] {
        self.lib
            .store
            .embeddings
            .view()
            .row(self.index)
            .unwrap_or(&[])
    }

    /// Its `token_count` (0 when the library omits it).
    pub fn token_count(&self) -> i64 {
        self.lib.store.token_counts[self.index]
    }

    /// Its access tag, if any.
    pub fn access_tag(&self) -> Option<&'a str> {
        self.lib.store.tag_name(self.index)
    }

    /// Its stored JSON object (with the `embedding: null` placeholder), parsed once.
    fn stored(&self) -> Result<&Map<String, Value>> {
        if let Some(json) = self.json.get() {
            return Ok(json);
        }
        let json = self.lib.store.json(self.index)?;
        Ok(self.json.get_or_init(|| json))
    }

    /// Its stored JSON without the embedding (text, info, similarity and any extra keys).
    pub fn json(&self) -> Result<Map<String, Value>> {
        let mut json = self.stored()?.clone();
        json.shift_remove("embedding");
        Ok(json)
    }

    /// Its text (empty when the bit has none).
    pub fn text(&self) -> Result<&str> {
        Ok(self
            .stored()?
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or(""))
    }

    /// Its `info` object, if it has one.
    pub fn info(&self) -> Result<Option<&Map<String, Value>>> {
        Ok(self.stored()?.get("info").and_then(Value::as_object))
    }

    /// Its stored similarity, if any.
    pub fn similarity(&self) -> Result<Option<f64>> {
        Ok(self.stored()?.get("similarity").and_then(Value::as_f64))
    }
}

struct SaveView<'a> {
    lib: &'a Library,
    include_access_tag: bool,
}

impl Serialize for SaveView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.lib.top.len()))?;
        for (k, v) in &self.lib.top {
            if k == "bits" {
                map.serialize_entry(k, &BitsView(self))?;
            } else {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

struct BitsView<'a, 'b>(&'b SaveView<'a>);

impl Serialize for BitsView<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let lib = self.0.lib;
        let mut seq = s.serialize_seq(Some(lib.len()))?;
        for i in 0..lib.len() {
            let bit = lib
                .bit_json(i, self.0.include_access_tag, true)
                .map_err(serde::ser::Error::custom)?;
            seq.serialize_element(&bit)?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_vector;
    use proptest::prelude::*;
    use serde_json::json;

    fn bit(text: &str, v: &[f32]) -> Value {
        json!({"text": text, "info": {"url": format!("https://x/{text}")}, "embedding": encode_vector(v), "token_count": 3})
    }

    fn load_err(v: Value) -> String {
        let bytes = serde_json::to_vec(&v).unwrap();
        let streamed = Library::from_bytes(&bytes).unwrap_err().to_string();
        let tree = Library::from_value(v).unwrap_err().to_string();
        assert_eq!(streamed, tree, "streaming and tree loads disagree");
        streamed
    }

    /// Issue 11 item 16: Python's `json.dump` writes U+007F as `\u007f` (ensure_ascii escapes
    /// everything outside 0x20..0x7e); the library writer used to write it raw.
    #[test]
    fn save_escapes_del_like_python() {
        let mut lib = Library::blank("m");
        lib.insert(&bit("a\u{7f}b", &[1.0])).unwrap();
        let mut out = Vec::new();
        lib.to_writer(&mut out, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\"text\": \"a\\u007fb\""), "{text}");
        assert!(!text.contains('\u{7f}'), "{text}");
    }

    /// Issue 12 item 4: `BitRef`'s accessors parsed the bit's stored JSON again on every call,
    /// and a bit whose JSON no longer parsed read as empty (`unwrap_or_default`). Now one parse
    /// serves every accessor, and a corrupt bit is an error from each of them.
    #[test]
    fn bit_refs_parse_once_and_surface_corruption() {
        let mut lib = Library::blank("m");
        lib.insert(&bit("a", &[1.0])).unwrap();
        let first = lib.bits().next().unwrap();
        assert!(first.json.get().is_none());
        assert_eq!(first.text().unwrap(), "a");
        assert!(first.json.get().is_some(), "the parse is kept");
        assert_eq!(first.info().unwrap().unwrap()["url"], "https://x/a");
        assert_eq!(first.similarity().unwrap(), None);
        assert!(!first.json().unwrap().contains_key("embedding"));

        lib.store.arena.make_owned().fill(b'#');
        let corrupt = lib.bits().next().unwrap();
        for err in [
            corrupt.text().map(|_| ()).unwrap_err(),
            corrupt.info().map(|_| ()).unwrap_err(),
            corrupt.similarity().map(|_| ()).unwrap_err(),
            corrupt.json().map(|_| ()).unwrap_err(),
            lib.texts().next().unwrap().map(|_| ()).unwrap_err(),
            lib.to_value(true).map(|_| ()).unwrap_err(),
            lib.get(&first_id(&lib)).map(|_| ()).unwrap_err(),
            lib.to_writer(Vec::new(), false).unwrap_err(),
        ] {
            assert!(
                err.to_string().contains("bit 0's stored data is corrupt"),
                "{err}"
            );
        }
    }

    /// A typed bit is stored exactly as the same bit given as JSON, and refused with the same
    /// messages, without the caller (or the library) encoding the vector.
    #[test]
    fn insert_bit_matches_insert() {
        let (mut typed, mut json) = (Library::blank("m"), Library::blank("m"));
        for (text, v, title, tag) in [
            ("a", [0.5f32, -1.25], Some("T"), None),
            ("b", [3.0, 1e-3], None, Some("team")),
        ] {
            let new = NewBit {
                text,
                embedding: &v,
                token_count: 7,
                url: "https://x",
                title,
                access_tag: tag,
            };
            let mut info = json!({"url": "https://x"});
            if let Some(t) = title {
                info["title"] = json!(t);
            }
            let mut bit = json!({"text": text, "embedding": encode_vector(&v),
                                 "token_count": 7, "info": info});
            if let Some(t) = tag {
                bit["access_tag"] = json!(t);
            }
            assert_eq!(typed.insert_bit(&new).unwrap(), json.insert(&bit).unwrap());
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        typed.to_writer(&mut a, true).unwrap();
        json.to_writer(&mut b, true).unwrap();
        assert_eq!(String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap());
        let refuse = |v: &[f32]| {
            let mut lib = typed.clone();
            let new = NewBit {
                text: "z",
                embedding: v,
                token_count: 1,
                url: "u",
                title: None,
                access_tag: None,
            };
            let typed_err = lib.insert_bit(&new).unwrap_err().to_string();
            let bit = json!({"text": "z", "embedding": encode_vector(v), "token_count": 1,
                             "info": {"url": "u"}});
            let json_err = lib.insert(&bit).unwrap_err().to_string();
            assert_eq!(typed_err, json_err);
            assert_eq!(lib.len(), 2, "nothing was added");
            typed_err
        };
        assert!(refuse(&[1.0]).contains("wrong length of embedding, expected 2"));
        assert!(refuse(&[f32::NAN, 1.0]).contains("contains a non-finite value"));
        assert!(refuse(&[]).contains("is missing embedding"));
    }

    fn first_id(lib: &Library) -> BitId {
        lib.store.ids[0]
    }

    #[test]
    fn load_errors_name_the_bit_and_field() {
        let ok = bit("a", &[1.0, 2.0]);
        let id = BitId::of("https://x/a", "a").to_string();
        let lib = |bits: Value| json!({"version": 1, "embedding_model": "m", "bits": bits});
        assert_eq!(
            Library::from_bytes(b"{")
                .unwrap_err()
                .to_string()
                .split(':')
                .next(),
            Some("invalid JSON")
        );
        assert!(
            Library::from_bytes(b"[]")
                .unwrap_err()
                .to_string()
                .starts_with("invalid JSON")
        );
        assert!(
            Library::from_bytes(br#"{"a":"\ud800"}"#)
                .unwrap_err()
                .to_string()
                .starts_with("invalid JSON")
        );
        assert_eq!(
            load_err(json!({"version": "1", "embedding_model": "m", "bits": []})),
            "Version invalid"
        );
        assert_eq!(
            load_err(json!({"version": 2, "embedding_model": "m", "bits": []})),
            "Version invalid"
        );
        assert_eq!(
            load_err(json!({"version": 1, "embedding_model": "", "bits": []})),
            "Invalid model name"
        );
        assert_eq!(
            load_err(json!({"version": 1, "embedding_model": "m"})),
            "bits is a required field"
        );
        assert_eq!(
            load_err(json!({"version": 1, "embedding_model": "m", "bits": {}})),
            "bits not list as expected"
        );
        assert_eq!(
            load_err(json!({"version": 1, "embedding_model": "m", "omit": 3, "bits": []})),
            "omit not str as expected"
        );
        assert_eq!(
            load_err(json!({"version": 1, "embedding_model": "m", "omit": "*", "bits": [ok]})),
            "omit configured to omit all bits but they were present"
        );
        assert_eq!(
            load_err(json!({"version": 0, "embedding_model": "m"})),
            "version 0 library is missing content"
        );
        assert_eq!(load_err(lib(json!([ok, 5]))), "bit 1 is not an object");
        let mut b = bit("a", &[1.0, 2.0]);
        b["embedding"] = json!("AA-A");
        assert_eq!(
            load_err(lib(json!([b]))),
            format!(
                "{id} has an invalid embedding: not valid base64: invalid character '-' at offset 2"
            )
        );
        b["embedding"] = json!(null);
        assert_eq!(
            load_err(lib(json!([b]))),
            format!("{id} is missing embedding")
        );
        b["embedding"] = json!(encode_vector(&[f32::NAN, 1.0]));
        assert_eq!(
            load_err(lib(json!([b]))),
            format!("{id} has an invalid embedding: contains a non-finite value")
        );
        assert_eq!(
            load_err(lib(json!([ok, bit("a", &[1.0, 2.0, 3.0])]))),
            format!("{id} had the wrong length of embedding, expected 2")
        );
        let mut b = bit("a", &[1.0, 2.0]);
        b["token_count"] = json!(3.0);
        assert_eq!(load_err(lib(json!([b]))), "token_count not int as expected");
        b["token_count"] = json!(3);
        b["info"] = json!({"title": "t"});
        assert_eq!(
            load_err(lib(json!([b]))),
            format!("{} info is missing required url", BitId::of("", "a"))
        );
        b["info"] = json!([]);
        assert_eq!(load_err(lib(json!([b]))), "info not dict as expected");
        let mut b = bit("a", &[1.0, 2.0]);
        b["access_tag"] = json!(1);
        assert_eq!(
            load_err(lib(json!([b]))),
            format!("{id} access_tag not str as expected")
        );
        let mut b = bit("a", &[1.0, 2.0]);
        b["text"] = json!(1);
        assert_eq!(load_err(lib(json!([b]))), "bit 0 text not str as expected");
        // The wrong model's dimension: ada-002 expects 1536.
        assert_eq!(
            load_err(json!({"version": 1, "embedding_model": BLANK_LIBRARY_MODEL, "bits": [ok]})),
            format!("{id} had the wrong length of embedding, expected 1536")
        );
        let mut b = bit("a", &[1.0, 2.0]);
        b["similarity"] = json!(0.5);
        assert_eq!(
            load_err(
                json!({"version": 1, "embedding_model": "m", "omit": "similarity", "bits": [b]})
            ),
            "Expected similarity to be omitted but it was included"
        );
    }

    /// Load errors keep the spec's text but carry the bit index and field, on every path:
    /// streaming (with the deferred, batched decode), the tree, and insert.
    #[test]
    fn load_errors_carry_bit_index_and_field() {
        let located = |doc: &Value| {
            let bytes = serde_json::to_vec(doc).unwrap();
            let streamed = Library::from_bytes(&bytes).unwrap_err();
            let tree = Library::from_value(doc.clone()).unwrap_err();
            assert_eq!(streamed.located().to_string(), tree.located().to_string());
            assert_eq!(streamed.bit_index(), tree.bit_index());
            streamed
        };
        let mut bits: Vec<Value> = (0..9).map(|i| bit(&format!("b{i}"), &[1.0, 2.0])).collect();
        // Canonical length, so streaming defers its decoding to a batch.
        bits[6]["embedding"] = json!("AACAP-AAAEA=");
        let doc = json!({"version": 1, "embedding_model": "m", "bits": bits});
        let e = located(&doc);
        let id = BitId::of("https://x/b6", "b6");
        assert_eq!((e.bit_index(), e.field()), (Some(6), Some("embedding")));
        assert!(matches!(e.kind(), LibraryError::InvalidEmbedding { .. }));
        assert!(
            e.to_string()
                .starts_with(&format!("{id} has an invalid embedding"))
        );
        assert!(
            e.located()
                .to_string()
                .starts_with(&format!("bit 6, field \"embedding\": {id} has")),
            "{}",
            e.located()
        );
        bits[6] = bit("b6", &[1.0, 2.0]);
        bits[3]["info"] = json!({});
        let e = located(&json!({"version": 1, "embedding_model": "m", "bits": bits}));
        assert_eq!((e.bit_index(), e.field()), (Some(3), Some("info.url")));
        bits[3] = bit("b3", &[1.0, 2.0]);
        bits[8]["token_count"] = json!("3");
        let e = located(&json!({"version": 1, "embedding_model": "m", "bits": bits}));
        assert_eq!(
            e.located().to_string(),
            "bit 8, field \"token_count\": token_count not int as expected"
        );
        let e = located(&json!({"version": 1, "embedding_model": 5, "bits": []}));
        assert_eq!(e.bit_index(), None);
        assert_eq!(
            e.located().to_string(),
            "field \"embedding_model\": Invalid model name"
        );
        let mut lib = Library::blank("m");
        lib.insert(&bit("a", &[1.0])).unwrap();
        let e = lib.insert(&bit("b", &[1.0, 2.0])).unwrap_err();
        assert_eq!((e.bit_index(), e.field()), (Some(1), Some("embedding")));
        assert!(e.is_client_error());
    }

    #[test]
    fn version_zero_upgrade_and_duplicates() {
        let x = bit("x", &[1.0]);
        let y = bit("y", &[2.0]);
        let v0 = json!({"version": 0, "embedding_model": "m", "content": {"x": x, "y": y}, "sort": {"type": "manual", "ids": ["y", "x"]}});
        let lib = Library::from_value(v0).unwrap();
        assert!(lib.upgraded());
        assert_eq!(lib.texts().collect::<Result<Vec<_>>>().unwrap(), ["y", "x"]);
        let keys: Vec<&String> = lib.top_level().keys().collect();
        assert_eq!(keys, ["version", "embedding_model", "bits", "sort"]);
        assert_eq!(lib.sort(), Some("manual"));
        let bad = json!({"embedding_model": "m", "content": {"x": bit("x", &[1.0])}, "sort": {"ids": ["z"]}});
        assert_eq!(
            Library::from_value(bad).unwrap_err().to_string(),
            "sort.ids names unknown bit z"
        );
        let dup = json!({"version": 1, "embedding_model": "m", "bits": [bit("a", &[1.0]), bit("a", &[2.0])]});
        let lib = Library::from_value(dup).unwrap();
        assert_eq!(lib.len(), 1);
        assert_eq!(lib.bits().next().unwrap().embedding(), &[1.0]);
    }

    #[test]
    fn edit_operations() {
        let mut lib = Library::blank("m");
        assert!(matches!(
            lib.insert(&bit("a", &[1.0, 0.0])).unwrap(),
            InsertOutcome::Inserted(_)
        ));
        assert!(matches!(
            lib.insert(&bit("a", &[1.0, 0.0])).unwrap(),
            InsertOutcome::Duplicate(_)
        ));
        assert!(lib.insert(&bit("b", &[1.0])).is_err());
        assert_eq!(lib.len(), 1);
        lib.insert(&bit("b", &[0.0, 1.0])).unwrap();
        lib.insert(&bit("c", &[0.5, 0.5])).unwrap();
        let id_b = BitId::of("https://x/b", "b");
        assert!(lib.get(&id_b).unwrap().is_some());
        assert!(lib.remove(&id_b).unwrap().is_some());
        assert!(lib.remove(&id_b).unwrap().is_none());
        assert_eq!(lib.texts().collect::<Result<Vec<_>>>().unwrap(), ["a", "c"]);
        let mut other = Library::blank("m");
        other.insert(&bit("c", &[0.5, 0.5])).unwrap();
        other.insert(&bit("d", &[0.2, 0.5])).unwrap();
        lib.extend(&other).unwrap();
        assert_eq!(
            lib.texts().collect::<Result<Vec<_>>>().unwrap(),
            ["a", "c", "d"]
        );
        assert!(lib.extend(&Library::blank("other")).is_err());
        lib.shuffle(3);
        assert_eq!(lib.sort(), Some("random"));
        assert_eq!(lib.len(), 3);
        assert!(lib.sort_by_similarity().is_err());
        assert!(lib.set_sort("sideways").is_err());
        lib.set_sort("any").unwrap();
        assert_eq!(lib.sort(), None);
        let s = lib.slice(2, CountType::Bit).unwrap();
        assert_eq!(s.len(), 2);
        let t = lib.slice(1, CountType::Token).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t.texts().next().unwrap().unwrap().chars().count(), 1);
        lib.validate().unwrap();
    }

    proptest! {
        #[test]
        fn load_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Library::from_bytes(&bytes);
            let _ = Library::problems(&bytes);
        }

        #[test]
        fn load_never_panics_on_near_valid(text in "[ -~]{0,40}", emb in "[A-Za-z0-9+/=\\- ]{0,24}", tc in any::<i64>(), cut in 0usize..200) {
            let doc = json!({"version": 1, "embedding_model": "m", "omit": "", "bits": [
                {"text": text, "info": {"url": "u"}, "embedding": emb, "token_count": tc}]});
            let bytes = serde_json::to_vec(&doc).unwrap();
            let _ = Library::from_bytes(&bytes);
            let _ = Library::from_bytes(&bytes[..cut.min(bytes.len())]);
        }

        #[test]
        fn save_then_load_is_identity(
            texts in proptest::collection::vec("\\PC{0,30}", 1..6),
            vals in proptest::collection::vec(-1e6f32..1e6, 3),
            sim in proptest::option::of(-1.0f64..1.0),
            tag in proptest::option::of("[a-z]{0,5}"),
        ) {
            let mut lib = Library::blank("model-x");
            for (i, t) in texts.iter().enumerate() {
                let mut b = json!({"text": t, "info": {"url": format!("u{i}"), "extra": [1, 2.5, null]},
                                   "embedding": encode_vector(&vals), "token_count": i, "zz": {"k": "ü"}});
                if let Some(s) = sim { b["similarity"] = json!(s); }
                if let Some(t) = &tag { b["access_tag"] = json!(t); }
                lib.insert(&b).unwrap();
            }
            let mut out = Vec::new();
            lib.to_writer(&mut out, true).unwrap();
            let again = Library::from_bytes(&out).unwrap();
            let mut out2 = Vec::new();
            again.to_writer(&mut out2, true).unwrap();
            prop_assert!(out == out2);
            prop_assert_eq!(again.to_value(true).unwrap(), lib.to_value(true).unwrap());
        }
    }
}
