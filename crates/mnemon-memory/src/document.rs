//! Message documents: what an add takes ([`MsgInput`]), where a load reads from ([`LoadSource`]),
//! where and how an export writes ([`ExportTarget`], [`ExportOptions`], [`ExportFormat`],
//! [`Exported`]) (docs/reference/memory.md#adding-messages,
//! docs/reference/memory.md#loading-documents, docs/reference/memory.md#exporting). Reading them
//! into entries is
//! [`crate::load`]'s; writing export documents is [`crate::export`]'s.

use std::path::{Path, PathBuf};

use mnemon_types::Msg;
use serde_json::Value;

use crate::error::MemoryError;

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
    /// The 0.0.x layout of [`ExportFormat::AgentScope00`] carrying, besides, what the store
    /// keeps of each message outside the message itself: its expiry as an
    /// `"__expires_at"` key (milliseconds since the Unix epoch) and the model that made its
    /// embedding as `"__embedding_model"`, each written when set (and as `null` when unset but
    /// the message holds a field of that name itself, which a load would otherwise take for
    /// the store's) and placed after the message's own keys, before `"__marks"`. [`Memory::load`](crate::Memory::load) restores
    /// both, so an export → load round trip keeps every stored field of a message; backups
    /// (`mnemon-backup`) are written through it (docs/reference/memory.md#exporting).
    AgentScope00Stored,
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

/// The key under which [`ExportFormat::AgentScope00Stored`] carries a message's expiry
/// (milliseconds since the Unix epoch; in a loaded document, `null` for never and absent for
/// the loading handle's default: docs/reference/memory.md#loading-documents).
pub const EXPIRES_KEY: &str = "__expires_at";

/// The key under which [`ExportFormat::AgentScope00Stored`] carries the model of a message's
/// embedding.
pub const MODEL_KEY: &str = "__embedding_model";

/// The I/O error of `path`, as a memory error.
pub(crate) fn io_error(path: &Path, error: &std::io::Error) -> MemoryError {
    MemoryError::Io {
        path: path.display().to_string(),
        detail: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    //! Loads and exports together: round trips, the streamed forms against the whole ones.

    use super::*;
    use crate::clock::test_factory;
    use crate::entry::Entry;
    use crate::export::{
        marks_json, render_export, render_export_as, unescape_non_ascii, write_atomically,
    };
    use crate::load::{Utf8Reader, decode_source};
    use mnemon_pyjson::{dumps, dumps_indent};
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
        let mut reader = Utf8Reader::new(Chunked { bytes, step });
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

        /// The stored layout gives back each entry whole: message, marks, expiry and model
        /// (a model only where there is an embedding, as a store keeps it), and the same bytes
        /// when written again; without stored fields it is the 0.0.x document.
        #[test]
        fn stored_export_then_load_gives_equal_entries(
            messages in proptest::collection::vec(message(), 0..5),
            marks in proptest::collection::vec(proptest::collection::vec("[a-z]{1,5}", 0..3), 5),
            expiries in proptest::collection::vec(proptest::option::of(any::<i64>()), 5),
            models in proptest::collection::vec(proptest::option::of(".{0,12}"), 5),
        ) {
            let mut seen = std::collections::HashSet::new();
            let entries: Vec<Entry> = messages
                .into_iter()
                .filter(|m| seen.insert(m.id().to_owned()))
                .zip(marks)
                .zip(expiries.into_iter().zip(models))
                .map(|((msg, marks), (expires_at, model))| {
                    let mut unique = Vec::new();
                    for m in marks {
                        if !unique.contains(&m) {
                            unique.push(m);
                        }
                    }
                    Entry::new(msg, unique).expiring(expires_at).embedded_by(model)
                })
                .collect();
            let text = render_export_as(&entries, true, ExportFormat::AgentScope00Stored);
            let mut back = decode(text.clone()).unwrap();
            // The layout states an expiry only where there is one (a load of it then keeps it
            // over the handle's default); otherwise the entries are the ones written.
            for entry in &mut back {
                prop_assert_eq!(entry.expiry_stated, entry.expires_at.is_some());
                entry.expiry_stated = false;
            }
            prop_assert_eq!(&back, &entries);
            prop_assert_eq!(
                render_export_as(&back, true, ExportFormat::AgentScope00Stored),
                text
            );
            let bare: Vec<Entry> = entries
                .iter()
                .map(|e| e.clone().expiring(None).embedded_by(None))
                .collect();
            prop_assert_eq!(
                render_export_as(&bare, true, ExportFormat::AgentScope00Stored),
                render_export(&bare, true)
            );
        }
    }
}
