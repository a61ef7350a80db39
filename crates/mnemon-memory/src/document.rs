//! Message documents: what an add takes ([`MsgInput`]), where a load reads from
//! ([`LoadSource`]), where and how an export writes ([`ExportTarget`], [`ExportOptions`],
//! [`ExportFormat`], [`Exported`]); converting inputs and load documents into entries, and
//! writing export documents (§5.2, §5.4, §5.5). Everything here runs before the memory is
//! touched, so a failure changes nothing.

use std::cell::Cell;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use mnemon_db::atomic_file::write_atomic;
use mnemon_pyjson::{dumps, dumps_indent};
use mnemon_types::msg::{EMBEDDING_KEY, MsgUrl};
use mnemon_types::{Msg, MsgFactory};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::entry::Entry;
use crate::error::MemoryError;
use crate::marks::validate_mark;

/// One item for [`Memory::add`](crate::Memory::add): a built message, or a JSON object in any
/// accepted form (plain, `__type`, 0.1.x; a `List` adds several).
// Items are moved into the memory; boxing messages would add an allocation per message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum MsgInput {
    /// A message.
    Msg(Msg),
    /// A JSON message object.
    Json(Value),
}

impl From<Msg> for MsgInput {
    fn from(msg: Msg) -> Self {
        MsgInput::Msg(msg)
    }
}

impl From<Value> for MsgInput {
    fn from(value: Value) -> Self {
        MsgInput::Json(value)
    }
}

/// Where [`Memory::load`](crate::Memory::load) reads messages from.
#[derive(Debug, Clone)]
pub enum LoadSource {
    /// A UTF-8 file (a leading BOM is skipped).
    Path(PathBuf),
    /// JSON text.
    Json(String),
    /// Messages.
    Messages(Vec<Msg>),
}

/// Where [`Memory::export`](crate::Memory::export) writes.
#[derive(Debug, Clone)]
pub enum ExportTarget {
    /// Return clones of the messages.
    Messages,
    /// Return the export document as text.
    Json,
    /// Write the document to a file, atomically (temporary file, fsync, rename).
    File(PathBuf),
}

/// Options of [`Memory::export`](crate::Memory::export).
#[derive(Debug, Clone, Copy, Default)]
pub struct ExportOptions {
    /// Write each message's marks as a last `"__marks"` key (only when it has any).
    pub include_marks: bool,
    /// The document's layout.
    pub format: ExportFormat,
}

/// The layout of an export document. [`Memory::load`](crate::Memory::load) reads both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExportFormat {
    /// AgentScope 0.0.x (`TemporaryMemory.export` of 0.0.4): an array of plain message
    /// objects in Python's `json.dumps(…, indent=4)` layout, non-ASCII escaped.
    #[default]
    AgentScope00,
    /// AgentScope 0.1.x (`TemporaryMemory.export` of 0.1.6, which its `TemporaryMemory.load`
    /// reads): one line of `Msg.to_dict()` objects (`__module__`, `__name__`, `id`, `name`,
    /// `role`, `content`, `metadata`, `timestamp`), non-ASCII written as is. The embedding goes
    /// into `metadata`, where 0.1.x keeps it; a `url` is written only when set; other extras
    /// follow `timestamp` (0.1.6 ignores them). Loading such a file and exporting it again in
    /// this format gives the same bytes. 0.1.6 itself accepts only the roles `system`, `user`
    /// and `assistant` and string or block-list contents; other messages are written as they
    /// are, and 0.1.6 refuses them.
    AgentScope01,
}

/// What [`Memory::export`](crate::Memory::export) produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Exported {
    /// The messages.
    Messages(Vec<Msg>),
    /// The document.
    Json(String),
    /// The document was written to this file.
    File {
        /// The file.
        path: PathBuf,
        /// How many messages it holds.
        count: usize,
    },
}

/// The key under which exports carry marks.
pub(crate) const MARKS_KEY: &str = "__marks";

/// Converts a batch for `add`; the first failure is returned with its position.
pub(crate) fn convert_inputs(
    factory: &MsgFactory,
    items: Vec<MsgInput>,
    marks: &[String],
) -> Result<Vec<Entry>, MemoryError> {
    let mut entries = Vec::with_capacity(items.len());
    for (p, item) in items.into_iter().enumerate() {
        match item {
            MsgInput::Msg(msg) => entries.push(Entry::new(msg, marks.to_vec())),
            MsgInput::Json(value) => entries.extend(value_to_entries(factory, &value, p, marks)?),
        }
    }
    Ok(entries)
}

/// Decodes a whole load source.
pub(crate) fn decode_source(
    factory: &MsgFactory,
    source: LoadSource,
) -> Result<Vec<Entry>, MemoryError> {
    let mut entries = Vec::new();
    decode_stream(factory, source, &mut |entry| {
        entries.push(entry);
        Ok(())
    })?;
    Ok(entries)
}

/// The buffer of a streamed load file: large enough that reads are few, small enough not to
/// matter next to the entries.
const READ_BUFFER: usize = 256 * 1024;

/// Decodes a load source (§5.4) and hands each entry to `sink` as soon as it is converted, in
/// document order. A file is read through a fixed buffer and each array element is parsed,
/// converted, handed over and dropped before the next is read, so neither the text nor the
/// JSON tree of a large export (about 72 bytes per number) ever exists whole. The first
/// failure (of the document or of `sink`) stops the decoding and is returned; entries already
/// handed over stay with the sink, whose caller must discard them (one transaction, rolled
/// back).
pub(crate) fn decode_stream(
    factory: &MsgFactory,
    source: LoadSource,
    sink: &mut dyn FnMut(Entry) -> Result<(), MemoryError>,
) -> Result<(), MemoryError> {
    match source {
        LoadSource::Messages(messages) => messages
            .into_iter()
            .try_for_each(|msg| sink(Entry::new(msg, vec![]))),
        LoadSource::Json(text) => {
            let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
            decode_document(
                factory,
                serde_json::Deserializer::from_str(text),
                sink,
                None,
            )
        }
        LoadSource::Path(path) => {
            let file = std::fs::File::open(&path).map_err(|e| io_error(&path, &e))?;
            let utf8 = Utf8Reader {
                inner: file,
                pending: Vec::new(),
            };
            let mut reader = std::io::BufReader::with_capacity(READ_BUFFER, utf8);
            let head = reader.fill_buf().map_err(|e| io_error(&path, &e))?;
            if head.starts_with(b"\xef\xbb\xbf") {
                reader.consume(3);
            }
            decode_document(
                factory,
                serde_json::Deserializer::from_reader(reader),
                sink,
                Some(&path),
            )
        }
    }
}

/// A reader that checks, as it goes, that a file is UTF-8, so that a load file with invalid
/// bytes anywhere fails as an I/O error ("stream did not contain valid UTF-8"), as reading the
/// whole text did, rather than as a JSON error at the first bad byte inside a string.
struct Utf8Reader<R> {
    inner: R,
    /// The start of a character split by the previous read (at most 3 bytes).
    pending: Vec<u8>,
}

impl<R: std::io::Read> std::io::Read for Utf8Reader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let invalid = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            )
        };
        let n = self.inner.read(buf)?;
        let Some(chunk) = buf.get(..n) else {
            return Err(invalid());
        };
        if n == 0 {
            return if self.pending.is_empty() {
                Ok(0)
            } else {
                Err(invalid())
            };
        }
        // Only a character split across reads needs a copy; the rest is checked in place.
        let joined;
        let checked: &[u8] = if self.pending.is_empty() {
            chunk
        } else {
            joined = [std::mem::take(&mut self.pending).as_slice(), chunk].concat();
            &joined
        };
        match std::str::from_utf8(checked) {
            Ok(_) => {}
            Err(e) if e.error_len().is_none() => {
                self.pending = checked.get(e.valid_up_to()..).unwrap_or_default().to_vec();
            }
            Err(_) => return Err(invalid()),
        }
        Ok(n)
    }
}

/// Runs the document visitor over one deserializer; `path` names the file in I/O errors.
fn decode_document<'de, R: serde_json::de::Read<'de>>(
    factory: &MsgFactory,
    mut de: serde_json::Deserializer<R>,
    sink: &mut dyn FnMut(Entry) -> Result<(), MemoryError>,
    path: Option<&Path>,
) -> Result<(), MemoryError> {
    let failure = Cell::new(None);
    let visitor = DocumentVisitor {
        factory,
        failure: &failure,
        sink,
    };
    let decoded = serde::Deserializer::deserialize_any(&mut de, visitor).and_then(|()| de.end());
    decoded.map_err(|e| {
        failure
            .take()
            .unwrap_or_else(|| match (e.io_error_kind(), path) {
                // A read failure of the file itself (not bad JSON) names the file.
                (Some(_), Some(path)) => MemoryError::Io {
                    path: path.display().to_string(),
                    detail: e.to_string(),
                },
                _ => MemoryError::InvalidJson {
                    detail: e.to_string(),
                },
            })
    })
}

/// Converts the document's items as the parser reaches them and hands the entries to `sink`.
/// A conversion or sink failure is parked in `failure` (the parser only carries its own error
/// type) and reported instead of the parse error it causes.
struct DocumentVisitor<'a> {
    factory: &'a MsgFactory,
    failure: &'a Cell<Option<MemoryError>>,
    sink: &'a mut dyn FnMut(Entry) -> Result<(), MemoryError>,
}

impl DocumentVisitor<'_> {
    fn fail<T, E: serde::de::Error>(&self, error: MemoryError) -> Result<T, E> {
        self.failure.set(Some(error));
        Err(E::custom("the document's messages are invalid"))
    }

    fn scalar<T, E: serde::de::Error>(&self, found: &str) -> Result<T, E> {
        self.fail(MemoryError::InvalidFormat {
            found: found.into(),
        })
    }

    /// Converts one item and hands its entries to the sink.
    fn take(&mut self, item: &Value, p: usize) -> Result<(), MemoryError> {
        for entry in value_to_entries(self.factory, item, p, &[])? {
            (self.sink)(entry)?;
        }
        Ok(())
    }
}

impl<'de> serde::de::Visitor<'de> for DocumentVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON array or object of messages")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let mut p = 0;
        while let Some(item) = seq.next_element::<Value>()? {
            if let Err(error) = self.take(&item, p) {
                return self.fail(error);
            }
            p += 1;
        }
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, map: A) -> Result<(), A::Error> {
        let document = Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        self.take(&document, 0).or_else(|error| self.fail(error))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.scalar("null")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar("a boolean")
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar("a number")
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar("a number")
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar("a number")
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar("a string")
    }
}

pub(crate) fn io_error(path: &Path, error: &std::io::Error) -> MemoryError {
    MemoryError::Io {
        path: path.display().to_string(),
        detail: error.to_string(),
    }
}

/// One JSON item: a message object in any accepted form, with its `__marks` added to `marks`.
fn value_to_entries(
    factory: &MsgFactory,
    value: &Value,
    p: usize,
    marks: &[String],
) -> Result<Vec<Entry>, MemoryError> {
    let object = value.as_object().ok_or(MemoryError::NotAnObject { p })?;
    let marks = item_marks(object, p, marks)?;
    Ok(factory
        .from_any_object(object, p)?
        .into_iter()
        .map(|msg| Entry::new(msg, marks.clone()))
        .collect())
}

fn item_marks(
    object: &Map<String, Value>,
    p: usize,
    base: &[String],
) -> Result<Vec<String>, MemoryError> {
    let mut marks = base.to_vec();
    let Some(value) = object.get(MARKS_KEY) else {
        return Ok(marks);
    };
    let invalid = || MemoryError::InvalidField {
        p,
        field: MARKS_KEY.into(),
        expected: "an array of mark strings".into(),
    };
    for mark in value.as_array().ok_or_else(invalid)? {
        let mark = mark.as_str().ok_or_else(invalid)?;
        validate_mark(mark)?;
        if !marks.iter().any(|m| m == mark) {
            marks.push(mark.to_owned());
        }
    }
    Ok(marks)
}

/// The module and class of AgentScope 0.1.x's serialized message (`Msg.to_dict`).
const V01_MODULE: &str = "agentscope.message.msg";
const V01_NAME: &str = "Msg";

/// The export document: the 0.0.x array in Python's layout, 4-space indent, no final newline.
#[cfg(test)]
pub(crate) fn render_export(entries: &[Entry], include_marks: bool) -> String {
    render_export_as(entries, include_marks, ExportFormat::AgentScope00)
}

/// The export document in `format`.
#[cfg(test)]
pub(crate) fn render_export_as(
    entries: &[Entry],
    include_marks: bool,
    format: ExportFormat,
) -> String {
    let mut writer = ExportWriter::new(
        Vec::new(),
        &ExportOptions {
            include_marks,
            format,
        },
    );
    for entry in entries {
        // Writing to a Vec cannot fail.
        let _ = writer.push(entry);
    }
    let bytes = writer.finish().unwrap_or_default();
    String::from_utf8(bytes).unwrap_or_default()
}

/// Writes an export document one message at a time, so that a memory of any size is exported
/// through a bounded buffer (see `docs/ARCHITECTURE.md`, memory). The bytes equal those of
/// serializing the whole array at once:
///
/// - [`ExportFormat::AgentScope00`]: Python's `json.dumps(messages, indent=4)` with
///   `ensure_ascii`. An element of that array is its own 4-space pretty form with every line
///   after the first indented one level more; JSON strings never hold a raw newline, so
///   indenting after each `\n` is exact.
/// - [`ExportFormat::AgentScope01`]: `json.dumps(messages, ensure_ascii=False)` of 0.1.x's
///   `Msg.to_dict()` objects, on one line.
pub(crate) struct ExportWriter<W: Write> {
    out: W,
    format: ExportFormat,
    include_marks: bool,
    count: usize,
}

impl<W: Write> ExportWriter<W> {
    /// A writer of the document `options` asks for; nothing is written until the first push.
    pub(crate) fn new(out: W, options: &ExportOptions) -> Self {
        ExportWriter {
            out,
            format: options.format,
            include_marks: options.include_marks,
            count: 0,
        }
    }

    /// Writes one message.
    pub(crate) fn push(&mut self, entry: &Entry) -> std::io::Result<()> {
        let marks = (self.include_marks && !entry.marks.is_empty()).then_some(&entry.marks[..]);
        let opening: &[u8] = match (self.count, self.format) {
            (0, ExportFormat::AgentScope00) => b"[\n    ",
            (_, ExportFormat::AgentScope00) => b",\n    ",
            (0, ExportFormat::AgentScope01) => b"[",
            (_, ExportFormat::AgentScope01) => b", ",
        };
        self.out.write_all(opening)?;
        match self.format {
            ExportFormat::AgentScope00 => {
                let text = dumps_indent(&v00_object(&entry.full(), marks), 4);
                let mut lines = text.split('\n');
                if let Some(first) = lines.next() {
                    self.out.write_all(first.as_bytes())?;
                }
                for line in lines {
                    self.out.write_all(b"\n    ")?;
                    self.out.write_all(line.as_bytes())?;
                }
            }
            ExportFormat::AgentScope01 => {
                let text = dumps(&v01_object(&entry.full(), marks));
                self.out.write_all(unescape_non_ascii(&text).as_bytes())?;
            }
        }
        self.count += 1;
        Ok(())
    }

    /// Closes the array; returns the output.
    pub(crate) fn finish(mut self) -> std::io::Result<W> {
        let closing: &[u8] = match (self.count, self.format) {
            (0, _) => b"[]",
            (_, ExportFormat::AgentScope00) => b"\n]",
            (_, ExportFormat::AgentScope01) => b"]",
        };
        self.out.write_all(closing)?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// How many messages were written.
    pub(crate) fn count(&self) -> usize {
        self.count
    }
}

/// The 0.0.x object of a message, with its marks as a last `"__marks"` key.
fn v00_object(msg: &Msg, marks: Option<&[String]>) -> Value {
    let mut value = msg.to_json();
    if let (Some(marks), Value::Object(object)) = (marks, &mut value) {
        object.insert(MARKS_KEY.into(), marks_json(marks));
    }
    value
}

fn marks_json(marks: &[String]) -> Value {
    Value::Array(marks.iter().cloned().map(Value::String).collect())
}

/// The 0.1.x object of a message: `Msg.to_dict()`'s keys in its order (`__module__`,
/// `__name__`, `id`, `name`, `role`, `content`, `metadata`, `timestamp`). The inverse of the
/// loader's 0.1.x rule (`docs/` spec of memory, `mnemon_types::msg`): the `embedding` extra goes
/// back into `metadata` (first, before the keys of a `metadata` object extra), a `url` is
/// written only when set (0.1.0 wrote it; 0.1.6 ignores it), and any other extra follows
/// `timestamp` (0.1.6's model ignores unknown keys). A thought is written as a `Msg`: 0.1.x has
/// no other class.
fn v01_object(msg: &Msg, marks: Option<&[String]>) -> Value {
    let mut object = Map::new();
    object.insert("__module__".into(), V01_MODULE.into());
    object.insert("__name__".into(), V01_NAME.into());
    object.insert("id".into(), msg.id().into());
    object.insert("name".into(), msg.name().into());
    object.insert("role".into(), msg.role().into());
    object.insert("content".into(), msg.content().clone());
    match msg.url() {
        None => {}
        Some(MsgUrl::One(url)) => {
            object.insert("url".into(), url.as_str().into());
        }
        Some(MsgUrl::Many(urls)) => {
            object.insert("url".into(), urls.clone().into());
        }
    }
    let embedding = msg.extra(EMBEDDING_KEY).filter(|v| !v.is_null());
    let (metadata, embedding_left) = match (msg.extra("metadata"), embedding) {
        (None, None) => (Value::Null, None),
        (None, Some(embedding)) => {
            let mut metadata = Map::new();
            metadata.insert(EMBEDDING_KEY.into(), embedding.clone());
            (Value::Object(metadata), None)
        }
        (Some(Value::Object(rest)), Some(embedding)) if !rest.contains_key(EMBEDDING_KEY) => {
            let mut metadata = Map::with_capacity(rest.len() + 1);
            metadata.insert(EMBEDDING_KEY.into(), embedding.clone());
            metadata.extend(rest.iter().map(|(k, v)| (k.clone(), v.clone())));
            (Value::Object(metadata), None)
        }
        // A metadata that cannot take the embedding keeps it as a key of its own, which the
        // loader reads back as the same extra.
        (Some(metadata), embedding) => (metadata.clone(), embedding),
    };
    object.insert("metadata".into(), metadata);
    object.insert("timestamp".into(), msg.timestamp().into());
    if let Some(embedding) = embedding_left {
        object.insert(EMBEDDING_KEY.into(), embedding.clone());
    }
    for (key, value) in msg.extras() {
        if key != EMBEDDING_KEY && key != "metadata" {
            object.insert(key.clone(), value.clone());
        }
    }
    if let Some(marks) = marks {
        object.insert(MARKS_KEY.into(), marks_json(marks));
    }
    Value::Object(object)
}

/// Turns Python's `ensure_ascii=True` text into its `ensure_ascii=False` form: every `\uXXXX`
/// escape of a character from U+007F up (surrogate pairs joined) becomes the character itself;
/// control characters and the escapes `\"`, `\\` and `\n`-style stay. Backslashes occur only
/// inside strings, so no parsing beyond the escapes is needed.
fn unescape_non_ascii(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let escape = &rest[at..];
        let code = |from: usize| {
            escape
                .get(from..from + 4)
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        };
        let unicode = escape.starts_with("\\u").then(|| code(2)).flatten();
        let low = (escape.get(6..8) == Some("\\u")).then(|| code(8)).flatten();
        let (decoded, used) = match (unicode, low) {
            (Some(high @ 0xd800..=0xdbff), Some(low @ 0xdc00..=0xdfff)) => (
                char::from_u32(0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00)),
                12,
            ),
            (Some(c @ 0x7f..), _) => (char::from_u32(c), 6),
            _ => (None, 0),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &escape[used..];
            }
            None => {
                // An escape kept as it is: `\uXXXX` of a control character, or a two-character
                // escape such as `\"` or `\\` (whose second character must not start another).
                let keep = if unicode.is_some() { 6 } else { 2 };
                let keep = escape.get(..keep).map_or(escape.len(), str::len);
                out.push_str(&escape[..keep]);
                rest = &escape[keep..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Writes an export file atomically and durably through `mnemon_db`'s one helper for replacing
/// a whole file ([`mnemon_db::atomic_file::write_atomic`]): the document streams from `write`
/// into a temporary file beside the target, which is synced and renamed over it. When `write`
/// or any step fails, the target is untouched and no temporary file is left.
pub(crate) fn write_atomically_with<T>(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<T, MemoryError>,
) -> Result<T, MemoryError> {
    write_atomic(path, |out| write(out))
        .map_err(|e| e.unify(|file| io_error(file.path(), file.io_error())))
}

/// [`write_atomically_with`] of a whole text.
#[cfg(test)]
pub(crate) fn write_atomically(path: &Path, text: &str) -> Result<(), MemoryError> {
    write_atomically_with(path, |out| {
        out.write_all(text.as_bytes())
            .map_err(|e| io_error(path, &e))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::test_factory;
    use mnemon_types::Msg;
    use proptest::prelude::*;

    /// Any JSON value: finite numbers (JSON has no others), strings with any characters.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((".{0,6}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// A message with every kind of field: optional id, role, urls, extras and embedding.
    fn message() -> impl Strategy<Value = Msg> {
        (
            ".{0,10}",
            json_value(),
            proptest::option::of("[0-9a-f]{1,32}"),
            proptest::option::of(".{0,8}"),
            proptest::collection::vec(".{1,8}", 0..3),
            proptest::collection::vec(("[a-z]{1,6}", json_value()), 0..3),
            proptest::option::of(proptest::collection::vec(-1e6f32..1e6, 1..8)),
        )
            .prop_map(|(name, content, id, role, urls, extras, embedding)| {
                let f = test_factory();
                let mut b = f.msg(name, content);
                if let Some(id) = id {
                    b = b.id(id);
                }
                if let Some(role) = role {
                    b = b.role(role);
                }
                match urls.len() {
                    0 => {}
                    1 => b = b.url(urls[0].clone()),
                    _ => b = b.urls(urls),
                }
                for (key, value) in extras {
                    b = b.extra(format!("x_{key}"), value);
                }
                if let Some(v) = embedding {
                    b = b.embedding(v);
                }
                b.build().unwrap()
            })
    }

    fn decode(text: String) -> Result<Vec<Entry>, MemoryError> {
        decode_source(&test_factory(), LoadSource::Json(text))
    }

    #[test]
    fn typed_errors_from_the_streaming_decoder() {
        let found = |text: &str| match decode(text.into()) {
            Err(MemoryError::InvalidFormat { found }) => found,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(found("5"), "a number");
        assert_eq!(found("-5"), "a number");
        assert_eq!(found("1.5"), "a number");
        assert_eq!(found("null"), "null");
        assert_eq!(found(" true "), "a boolean");
        assert_eq!(found("\"x\""), "a string");
        let ok = r#"{"name": "a", "content": 1}"#;
        assert!(matches!(
            decode(format!("[{ok}, 3]")),
            Err(MemoryError::NotAnObject { p: 1 })
        ));
        assert!(matches!(
            decode(format!("[{ok}, {{\"name\": \"b\"}}]")),
            Err(MemoryError::MissingField { p: 1, .. })
        ));
        for broken in [
            format!("[{ok}, {ok}"),
            format!("[{ok}] x"),
            String::new(),
            "[".into(),
        ] {
            assert!(
                matches!(decode(broken.clone()), Err(MemoryError::InvalidJson { .. })),
                "{broken}"
            );
        }
        assert_eq!(decode("[]".into()).unwrap().len(), 0);
        assert_eq!(decode(format!(" [{ok}, {ok}] \n")).unwrap().len(), 2);
        assert_eq!(decode(ok.into()).unwrap().len(), 1);
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn concurrent_exports_to_one_path_never_collide() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("export.json");
        let texts: Vec<String> = (0..8)
            .map(|i| format!("[{}]", i.to_string().repeat(50_000)))
            .collect();
        std::thread::scope(|scope| {
            for text in &texts {
                let path = &path;
                scope.spawn(move || {
                    for _ in 0..5 {
                        write_atomically(path, text).unwrap();
                    }
                });
            }
        });
        // Whole documents only: the last rename wins, never a mixture of two writers.
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(texts.contains(&written));
        assert!(leftovers(dir.path()).is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn planted_symlinks_are_not_followed() {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        // The temporary name the old implementation used, planted as a symlink.
        let path = dir.path().join("export.json");
        let planted = dir
            .path()
            .join(format!(".export.json.{}.tmp", std::process::id()));
        symlink(&victim, &planted).unwrap();
        write_atomically(&path, "[]").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[]");
        // A symlink at the target is replaced, not written through.
        let link = dir.path().join("link.json");
        symlink(&victim, &link).unwrap();
        write_atomically(&link, "[1]").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(
            !std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "[1]");
        // The export gets the permissions `File::create` gives (0666 less the umask), not 0600.
        let reference = dir.path().join("reference");
        std::fs::File::create(&reference).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), mode(&reference));
        std::fs::remove_file(&planted).unwrap();
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_failed_export_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // Renaming a file over a non-empty directory fails after the temporary file is written.
        let target = dir.path().join("occupied");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("inside"), "x").unwrap();
        let err = write_atomically(&target, "[]").unwrap_err();
        assert!(matches!(err, MemoryError::Io { .. }), "{err:?}");
        assert!(leftovers(dir.path()).is_empty());
        let missing = dir.path().join("no/such/dir/export.json");
        assert!(matches!(
            write_atomically(&missing, "[]"),
            Err(MemoryError::Io { .. })
        ));
    }

    /// Marks for `entries`: unique, in order.
    fn with_marks(messages: Vec<Msg>, marks: Vec<Vec<String>>) -> Vec<Entry> {
        let mut seen = std::collections::HashSet::new();
        messages
            .into_iter()
            .filter(|m| seen.insert(m.id().to_owned()))
            .zip(marks)
            .map(|(msg, marks)| {
                let mut unique = Vec::new();
                for m in marks {
                    if !unique.contains(&m) {
                        unique.push(m);
                    }
                }
                Entry::new(msg, unique)
            })
            .collect()
    }

    #[test]
    fn the_v01_layout_is_0_1_6s() {
        let f = test_factory();
        let plain = f
            .msg("Kenji", "今日 \u{7f}\u{1f} \"q\" \\u00e9 🚢")
            .id("a1")
            .timestamp("2024-03-05 08:16:30")
            .role("user")
            .extra("embedding", serde_json::json!([0.12, -0.5, 1e-07]))
            .build()
            .unwrap();
        let text = render_export_as(
            &[Entry::new(plain, vec!["pin".into()])],
            true,
            ExportFormat::AgentScope01,
        );
        assert_eq!(
            text,
            "[{\"__module__\": \"agentscope.message.msg\", \"__name__\": \"Msg\", \"id\": \"a1\", \
             \"name\": \"Kenji\", \"role\": \"user\", \"content\": \"今日 \u{7f}\\u001f \\\"q\\\" \
             \\\\u00e9 🚢\", \"metadata\": {\"embedding\": [0.12, -0.5, 1e-07]}, \
             \"timestamp\": \"2024-03-05 08:16:30\", \"__marks\": [\"pin\"]}]"
        );
        assert_eq!(
            render_export_as(&[], true, ExportFormat::AgentScope01),
            "[]"
        );
        assert_eq!(
            render_export_as(&[], true, ExportFormat::AgentScope00),
            "[]"
        );
    }

    /// A reader handing out at most `step` bytes per read.
    struct Chunked<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl std::io::Read for Chunked<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.bytes.len());
            let (head, tail) = self.bytes.split_at(n);
            buf[..n].copy_from_slice(head);
            self.bytes = tail;
            Ok(n)
        }
    }

    fn read_checked(bytes: &[u8], step: usize) -> std::io::Result<Vec<u8>> {
        let mut reader = Utf8Reader {
            inner: Chunked { bytes, step },
            pending: Vec::new(),
        };
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut reader, &mut out)?;
        Ok(out)
    }

    proptest! {
        /// Valid UTF-8 passes whatever the read sizes (characters split across reads
        /// included); any invalid byte, or a character cut at the end, is an error.
        #[test]
        fn the_utf8_reader_checks_across_reads(
            text in any::<String>(),
            step in 1usize..8,
            at in any::<prop::sample::Index>(),
            bad in prop_oneof![Just(0xffu8), Just(0xc0), Just(0x80)],
        ) {
            prop_assert_eq!(read_checked(text.as_bytes(), step).unwrap(), text.as_bytes());
            let mut broken = text.clone().into_bytes();
            broken.insert(at.index(broken.len() + 1), bad);
            if std::str::from_utf8(&broken).is_err() {
                prop_assert!(read_checked(&broken, step).is_err());
            }
            let mut cut = "é".as_bytes().to_vec();
            cut.pop();
            let mut truncated = text.into_bytes();
            truncated.extend(cut);
            prop_assert!(read_checked(&truncated, step).is_err());
        }

        /// The streamed 0.0.x document equals serializing the whole array at once, as the
        /// export did before it streamed.
        #[test]
        fn streamed_export_equals_the_whole_array(
            messages in proptest::collection::vec(message(), 0..5),
            marks in proptest::collection::vec(proptest::collection::vec("[a-z]{1,5}", 0..3), 5),
            include_marks in any::<bool>(),
        ) {
            let entries = with_marks(messages, marks);
            let items = entries
                .iter()
                .map(|entry| {
                    let mut value = entry.full().to_json();
                    if let (true, Value::Object(object)) =
                        (include_marks && !entry.marks.is_empty(), &mut value)
                    {
                        object.insert(MARKS_KEY.into(), marks_json(&entry.marks));
                    }
                    value
                })
                .collect();
            prop_assert_eq!(
                render_export(&entries, include_marks),
                dumps_indent(&Value::Array(items), 4)
            );
        }

        /// `ensure_ascii=False` text: exactly what serde_json writes for a string (it escapes
        /// the same characters as Python: `"`, `\\` and controls below U+0020).
        #[test]
        fn unescaping_gives_pythons_non_ascii_form(text in any::<String>()) {
            let value = Value::String(text.clone());
            prop_assert_eq!(
                unescape_non_ascii(&dumps(&value)),
                serde_json::to_string(&text).unwrap()
            );
        }

        /// The 0.1.x document loads back to the same messages and marks, and exports again to
        /// the same bytes.
        #[test]
        fn v01_export_then_load_gives_equal_messages(
            messages in proptest::collection::vec(message(), 0..5),
            marks in proptest::collection::vec(proptest::collection::vec("[a-z]{1,5}", 0..3), 5),
        ) {
            let entries = with_marks(messages, marks);
            let text = render_export_as(&entries, true, ExportFormat::AgentScope01);
            let loaded = decode(text.clone()).unwrap();
            prop_assert_eq!(&loaded, &entries);
            prop_assert_eq!(render_export_as(&loaded, true, ExportFormat::AgentScope01), text);
        }

        #[test]
        fn never_panics_on_arbitrary_text(text in ".{0,200}") {
            let _ = decode(text);
        }

        #[test]
        fn never_panics_on_arbitrary_json(value in json_value()) {
            let _ = decode(value.to_string());
            let _ = decode(Value::Array(vec![value.clone(), value]).to_string());
        }

        #[test]
        fn never_panics_on_damaged_exports(
            messages in proptest::collection::vec(message(), 1..4),
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let entries: Vec<Entry> =
                messages.into_iter().map(|msg| Entry::new(msg, vec![])).collect();
            let text = render_export(&entries, false);
            let mut bytes = text.into_bytes();
            let at = flip.index(bytes.len());
            bytes[at] = byte;
            bytes.truncate(cut.index(bytes.len() + 1));
            let _ = decode(String::from_utf8_lossy(&bytes).into_owned());
        }

        #[test]
        fn export_then_load_gives_equal_messages(
            messages in proptest::collection::vec(message(), 0..5),
            marks in proptest::collection::vec(proptest::collection::vec("[a-z]{1,5}", 0..3), 5),
        ) {
            let mut seen = std::collections::HashSet::new();
            let entries: Vec<Entry> = messages
                .into_iter()
                .filter(|m| seen.insert(m.id().to_owned()))
                .zip(marks)
                .map(|(msg, mut marks)| {
                    marks.dedup();
                    let mut unique = Vec::new();
                    for m in marks {
                        if !unique.contains(&m) {
                            unique.push(m);
                        }
                    }
                    Entry::new(msg, unique)
                })
                .collect();
            let plain: Vec<Msg> = decode(render_export(&entries, false))
                .unwrap()
                .into_iter()
                .map(|e| e.message())
                .collect();
            let want: Vec<Msg> = entries.iter().map(Entry::message).collect();
            prop_assert_eq!(plain, want);
            let text = render_export(&entries, true);
            let with_marks = decode(text.clone()).unwrap();
            prop_assert_eq!(&with_marks, &entries);
            prop_assert_eq!(render_export(&with_marks, true), text);
        }
    }
}
