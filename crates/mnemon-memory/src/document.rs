//! Converting inputs and load documents into entries, and writing export documents (§5.2, §5.4,
//! §5.5). Everything here runs before the memory is touched, so a failure changes nothing.

use std::cell::Cell;
use std::io::Write;
use std::path::Path;

use mnemon_types::msg::pyjson_pretty;
use mnemon_types::{MsgFactory, MsgKind};
use serde::Deserialize;
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
    let text = match source {
        LoadSource::Messages(messages) => {
            return Ok(messages
                .into_iter()
                .map(|msg| Entry::new(msg, vec![]))
                .collect());
        }
        LoadSource::Json(text) => text,
        LoadSource::Path(path) => read_text(&path)?,
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    decode_document(factory, text)
}

/// Decodes a load document (§5.4) element by element: each array element is parsed, converted
/// and dropped before the next is read, so the JSON tree of a large export (about 72 bytes per
/// number) never exists whole; only the compact entries accumulate. Loading a 377 MB export of
/// 10,000 messages × 1536 dimensions peaks at about 130 MB beyond the text, where parsing the
/// whole tree first took 1.5 GB.
fn decode_document(factory: &MsgFactory, text: &str) -> Result<Vec<Entry>, MemoryError> {
    let failure = Cell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let visitor = DocumentVisitor {
        factory,
        failure: &failure,
    };
    let decoded = serde::Deserializer::deserialize_any(&mut de, visitor).and_then(|entries| {
        de.end()?;
        Ok(entries)
    });
    decoded.map_err(|e| {
        failure.take().unwrap_or_else(|| MemoryError::InvalidJson {
            detail: e.to_string(),
        })
    })
}

/// Converts the document's items as the parser reaches them. A conversion failure is parked in
/// `failure` (the parser only carries its own error type) and reported instead of the parse
/// error it causes.
struct DocumentVisitor<'a> {
    factory: &'a MsgFactory,
    failure: &'a Cell<Option<MemoryError>>,
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
}

impl<'de> serde::de::Visitor<'de> for DocumentVisitor<'_> {
    type Value = Vec<Entry>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON array or object of messages")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Entry>, A::Error> {
        let mut entries = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        let mut p = 0;
        while let Some(item) = seq.next_element::<Value>()? {
            match value_to_entries(self.factory, &item, p, &[]) {
                Ok(converted) => entries.extend(converted),
                Err(error) => return self.fail(error),
            }
            p += 1;
        }
        Ok(entries)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Vec<Entry>, A::Error> {
        let document = Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        value_to_entries(self.factory, &document, 0, &[]).or_else(|error| self.fail(error))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Vec<Entry>, E> {
        self.scalar("null")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Vec<Entry>, E> {
        self.scalar("a boolean")
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Vec<Entry>, E> {
        self.scalar("a number")
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Vec<Entry>, E> {
        self.scalar("a number")
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Vec<Entry>, E> {
        self.scalar("a number")
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Vec<Entry>, E> {
        self.scalar("a string")
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

/// The export document: the 0.0.x array in Python's layout, 4-space indent, no final newline.
pub(crate) fn render_export(entries: &[Entry], include_marks: bool) -> String {
    let items = entries
        .iter()
        .map(|entry| {
            let mut value = entry.full().to_json();
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
/// renamed over the target, and the directory fsynced so that the rename itself is durable.
///
/// The temporary file has a random name and is created with `O_EXCL` (tempfile), so concurrent
/// exports to the same path never share a temporary file, and a file or symlink planted under a
/// predictable name is never opened or followed. The rename replaces a symlink at `path` itself
/// rather than writing through it.
pub(crate) fn write_atomically(path: &Path, text: &str) -> Result<(), MemoryError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "export".into());
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    // tempfile creates files 0600; an export is an ordinary document, so ask for 0666 and let
    // the umask narrow it, as `File::create` would.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let written = (|| {
        let mut file = builder.tempfile_in(&dir)?;
        file.write_all(text.as_bytes())?;
        file.as_file().sync_all()?;
        // On failure `persist` hands the file back; dropping it removes the temporary file.
        file.persist(path).map_err(|e| e.error)?;
        Ok(())
    })();
    written.map_err(|e: std::io::Error| io_error(path, &e))?;
    sync_dir(&dir).map_err(|e| io_error(&dir, &e))
}

/// Fsyncs a directory, making a rename inside it durable. Only Unix can open a directory as a
/// file; elsewhere the rename's durability is the file system's business.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    match std::fs::File::open(dir)?.sync_all() {
        // Some file systems (e.g. some network mounts) cannot fsync a directory at all; the
        // file's data is already synced, so that is no reason to fail the export.
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {}
        other => other?,
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// The kind recorded for entries read back from storage.
pub(crate) fn kind_from_str(kind: &str) -> MsgKind {
    MsgKind::from_marker(kind).unwrap_or_default()
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

    proptest! {
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
