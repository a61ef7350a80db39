//! Writing export documents (docs/reference/memory.md#exporting): AgentScope 0.0.x and 0.1.x
//! layouts, one message at a time, into text or atomically into a file.

use std::io::Write;
use std::path::Path;

use mnemon_db::atomic_file::write_atomic;
use mnemon_pyjson::{dumps, dumps_indent};
use mnemon_types::Msg;
use mnemon_types::msg::{EMBEDDING_KEY, MsgUrl};
use serde_json::{Map, Value};

use crate::document::{EXPIRES_KEY, ExportFormat, ExportOptions, MARKS_KEY, MODEL_KEY, io_error};
use crate::entry::Entry;
use crate::error::MemoryError;

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
            (0, ExportFormat::AgentScope00 | ExportFormat::AgentScope00Stored) => b"[\n    ",
            (_, ExportFormat::AgentScope00 | ExportFormat::AgentScope00Stored) => b",\n    ",
            (0, ExportFormat::AgentScope01) => b"[",
            (_, ExportFormat::AgentScope01) => b", ",
        };
        self.out.write_all(opening)?;
        match self.format {
            ExportFormat::AgentScope00 | ExportFormat::AgentScope00Stored => {
                // The 0.0.x object, then the stored fields, then the marks as the last key.
                let mut object = entry.full().to_json();
                if let Value::Object(map) = &mut object {
                    if self.format == ExportFormat::AgentScope00Stored {
                        // Written when set, and as `null` when the message holds a field of
                        // that name itself (any extra field is allowed): left there, a load
                        // took it for the store's (a field `1` expired the message in 1970).
                        match entry.expires_at {
                            Some(expires_at) => {
                                map.insert(EXPIRES_KEY.into(), expires_at.into());
                            }
                            None if map.contains_key(EXPIRES_KEY) => {
                                map.insert(EXPIRES_KEY.into(), Value::Null);
                            }
                            None => {}
                        }
                        match &entry.embedding_model {
                            Some(model) => {
                                map.insert(MODEL_KEY.into(), model.as_str().into());
                            }
                            None if map.contains_key(MODEL_KEY) => {
                                map.insert(MODEL_KEY.into(), Value::Null);
                            }
                            None => {}
                        }
                    }
                    if let Some(marks) = marks {
                        map.insert(MARKS_KEY.into(), marks_json(marks));
                    }
                }
                let text = dumps_indent(&object, 4);
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
            (_, ExportFormat::AgentScope00 | ExportFormat::AgentScope00Stored) => b"\n]",
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

pub(crate) fn marks_json(marks: &[String]) -> Value {
    Value::Array(marks.iter().cloned().map(Value::String).collect())
}

/// The 0.1.x object of a message: `Msg.to_dict()`'s keys in its order (`__module__`,
/// `__name__`, `id`, `name`, `role`, `content`, `metadata`, `timestamp`). The inverse of the
/// loader's 0.1.x rule (docs/reference/memory.md, `mnemon_types::msg`): the `embedding` extra goes
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
pub(crate) fn unescape_non_ascii(text: &str) -> String {
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
