//! Converting inputs and load documents into entries, and writing export documents (§5.2, §5.4,
//! §5.5). Everything here runs before the memory is touched, so a failure changes nothing.

use std::io::Write;
use std::path::Path;

use mnemon_types::msg::pyjson_pretty;
use mnemon_types::{MsgFactory, MsgKind};
use serde_json::{Map, Value};

use crate::error::MemoryError;
use crate::marks::validate_mark;
use crate::memory::{LoadSource, MsgInput};
use crate::thread::Entry;

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
            MsgInput::Msg(msg) => entries.push(Entry {
                msg,
                marks: marks.to_vec(),
            }),
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
    let text = match source {
        LoadSource::Messages(messages) => {
            return Ok(messages
                .into_iter()
                .map(|msg| Entry { msg, marks: vec![] })
                .collect());
        }
        LoadSource::Json(text) => text,
        LoadSource::Path(path) => read_text(&path)?,
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let document: Value = serde_json::from_str(text).map_err(|e| MemoryError::InvalidJson {
        detail: e.to_string(),
    })?;
    match &document {
        Value::Array(items) => {
            let mut entries = Vec::with_capacity(items.len());
            for (p, item) in items.iter().enumerate() {
                entries.extend(value_to_entries(factory, item, p, &[])?);
            }
            Ok(entries)
        }
        Value::Object(_) => value_to_entries(factory, &document, 0, &[]),
        other => Err(MemoryError::InvalidFormat {
            found: describe(other).into(),
        }),
    }
}

fn read_text(path: &Path) -> Result<String, MemoryError> {
    std::fs::read_to_string(path).map_err(|e| io_error(path, &e))
}

pub(crate) fn io_error(path: &Path, error: &std::io::Error) -> MemoryError {
    MemoryError::Io {
        path: path.display().to_string(),
        detail: error.to_string(),
    }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
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
        .map(|msg| Entry {
            msg,
            marks: marks.clone(),
        })
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

/// The export document: the 0.0.x array in Python's layout, 4-space indent, no final newline.
pub(crate) fn render_export(entries: &[Entry], include_marks: bool) -> String {
    let items = entries
        .iter()
        .map(|entry| {
            let mut value = entry.msg.to_json();
            if let (true, Value::Object(object)) =
                (include_marks && !entry.marks.is_empty(), &mut value)
            {
                object.insert(
                    MARKS_KEY.into(),
                    Value::Array(entry.marks.iter().cloned().map(Value::String).collect()),
                );
            }
            value
        })
        .collect();
    pyjson_pretty(&Value::Array(items), 4)
}

/// Writes `text` to `path` atomically: a temporary file in the same directory, fsynced, then
/// renamed over the target (and the directory fsynced, where the platform allows).
pub(crate) fn write_atomically(path: &Path, text: &str) -> Result<(), MemoryError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "export".into());
    let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, path)?;
        // Makes the rename itself durable; directories cannot be opened this way everywhere.
        if let Ok(dir) = std::fs::File::open(&dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    })();
    result.map_err(|e: std::io::Error| {
        let _ = std::fs::remove_file(&temp);
        io_error(path, &e)
    })
}

/// The kind recorded for entries read back from storage.
pub(crate) fn kind_from_str(kind: &str) -> MsgKind {
    MsgKind::from_marker(kind).unwrap_or_default()
}
