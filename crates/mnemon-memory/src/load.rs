//! Reading messages in: the inputs of an add and load documents
//! (docs/reference/memory.md#adding-messages, docs/reference/memory.md#loading-documents) become
//! entries. Everything here runs before the memory is touched, so a failure changes nothing.

use std::cell::Cell;
use std::io::BufRead;
use std::path::Path;

use mnemon_types::MsgFactory;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::document::{EXPIRES_KEY, LoadSource, MARKS_KEY, MODEL_KEY, MsgInput, io_error};
use crate::entry::Entry;
use crate::error::MemoryError;
use crate::marks::validate_mark;

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
            MsgInput::Json(value) => entries.extend(value_to_entries(factory, value, p, marks)?),
        }
    }
    Ok(entries)
}

/// Checks that every value is a message an add would take (docs/reference/memory.md#message-fields),
/// storing nothing: for a caller that does costly work per message (embedding it through a
/// remote API) before the add, so that an invalid message is refused first. The add checks
/// again.
pub fn check_messages<'a>(
    messages: impl IntoIterator<Item = &'a Value>,
) -> Result<(), MemoryError> {
    let factory = crate::clock::default_factory();
    for (p, value) in messages.into_iter().enumerate() {
        value_to_entries(&factory, value.clone(), p, &[])?;
    }
    Ok(())
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

/// Decodes a load source (docs/reference/memory.md#loading-documents) and hands each entry to
/// `sink` as soon as it is converted, in document order. A file is read through a fixed buffer and
/// each array element is parsed, converted, handed over and dropped before the next is read, so
/// neither the text nor the JSON tree of a large export (about 72 bytes per number) ever exists
/// whole. The first failure (of the document or of `sink`) stops the decoding and is returned;
/// entries already handed over stay with the sink, whose caller must discard them (one transaction,
/// rolled back).
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
            let utf8 = Utf8Reader::new(file);
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
pub(crate) struct Utf8Reader<R> {
    inner: R,
    /// The start of a character split by the previous read (at most 3 bytes).
    pending: Vec<u8>,
}

impl<R> Utf8Reader<R> {
    /// A checking reader over `inner`.
    pub(crate) fn new(inner: R) -> Self {
        Utf8Reader {
            inner,
            pending: Vec::new(),
        }
    }
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
    fn take(&mut self, item: Value, p: usize) -> Result<(), MemoryError> {
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
            if let Err(error) = self.take(item, p) {
                return self.fail(error);
            }
            p += 1;
        }
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, map: A) -> Result<(), A::Error> {
        let document = Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        self.take(document, 0).or_else(|error| self.fail(error))
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

/// One JSON item: a message object in any accepted form, with its `__marks` added to `marks`.
fn value_to_entries(
    factory: &MsgFactory,
    value: Value,
    p: usize,
    marks: &[String],
) -> Result<Vec<Entry>, MemoryError> {
    let Value::Object(mut object) = value else {
        return Err(MemoryError::NotAnObject { p });
    };
    let marks = item_marks(&object, p, marks)?;
    let (expires_at, model) = stored_fields(&object, p)?;
    // The stored fields are not the message's: they are taken out before it is built.
    object.remove(EXPIRES_KEY);
    object.remove(MODEL_KEY);
    Ok(factory
        .from_any_object(&object, p)?
        .into_iter()
        .map(|msg| {
            let mut entry = Entry::new(msg, marks.clone())
                .expiring(expires_at.flatten())
                .embedded_by(model.clone());
            entry.expiry_stated = expires_at.is_some();
            entry
        })
        .collect())
}

/// The `"__expires_at"` and `"__embedding_model"` of an item (written by
/// [`ExportFormat::AgentScope00Stored`](crate::ExportFormat::AgentScope00Stored)). The expiry
/// is `None` when absent (the loading handle's default applies), `Some(None)` for `null`
/// (never: what a backup's import writes for a message that never expires), `Some(Some(ms))`
/// for an instant. A model of `null` or absent is `None`.
fn stored_fields(
    object: &Map<String, Value>,
    p: usize,
) -> Result<(Option<Option<i64>>, Option<String>), MemoryError> {
    let expires_at = match object.get(EXPIRES_KEY) {
        None => None,
        Some(Value::Null) => Some(None),
        Some(value) => Some(Some(value.as_i64().ok_or_else(|| {
            MemoryError::InvalidField {
                p,
                field: EXPIRES_KEY.into(),
                expected: "an integer (milliseconds since the Unix epoch) or null".into(),
            }
        })?)),
    };
    let model = match object.get(MODEL_KEY) {
        None | Some(Value::Null) => None,
        Some(Value::String(model)) => Some(model.clone()),
        Some(_) => {
            return Err(MemoryError::InvalidField {
                p,
                field: MODEL_KEY.into(),
                expected: "the name of an embedding model (a string) or null".into(),
            });
        }
    };
    Ok((expires_at, model))
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
    // A set beside the list: a linear search per mark made a document of many marks (an
    // import's 2 MiB body holds 200,000) cost their square in comparisons.
    let mut seen: std::collections::HashSet<String> = marks.iter().cloned().collect();
    for mark in value.as_array().ok_or_else(invalid)? {
        let mark = mark.as_str().ok_or_else(invalid)?;
        validate_mark(mark)?;
        if seen.insert(mark.to_owned()) {
            marks.push(mark.to_owned());
        }
    }
    Ok(marks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_s_marks_are_added_once_each_in_order() {
        let object = serde_json::json!({"__marks": ["b", "a", "b", "c", "a"]});
        let object = object.as_object().unwrap();
        let marks = item_marks(object, 0, &["a".to_owned()]).unwrap();
        assert_eq!(marks, ["a", "b", "c"]);
        // Many marks: one pass, not a search through the list per mark.
        let many: Vec<String> = (0..50_000).map(|i| format!("m{i}")).collect();
        let object = serde_json::json!({ "__marks": many });
        let marks = item_marks(object.as_object().unwrap(), 0, &[]).unwrap();
        assert_eq!(marks.len(), 50_000);
        assert!(
            item_marks(
                &serde_json::json!({"__marks": "x"})
                    .as_object()
                    .unwrap()
                    .clone(),
                0,
                &[]
            )
            .is_err()
        );
    }
}
