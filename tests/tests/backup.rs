//! `mnemon-backup` (docs/reference/backup.md): a namespace exported from SQLite, imported into
//! PostgreSQL, exported again and imported into SQLite again is the same, field by field; a
//! damaged or cut file is refused and imports nothing; peak memory of a large export and
//! import (ignored measurement).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use mnemon_artifacts::{ArtifactStore, BackendRegistry, Expiry};
use mnemon_backup::{BackupError, ExportOptions, ImportOptions, NamespaceStores, Selection};
use mnemon_memory::{
    AddOptions, ExportFormat, ExportTarget, Exported, Memory, MemoryError, MsgInput, Scope,
};
use mnemon_ops::{OpenOptions, Stores};
use mnemon_store::AssetStore;
use mnemon_types::artifact::{Artifact, StorageLocation};
use mnemon_types::{Asset, Bytes, Value};
use serde_json::json;

/// A handle as the backup crate sees it.
struct Handle {
    stores: Stores,
    artifacts: Arc<dyn ArtifactStore>,
    source: &'static str,
}

impl Handle {
    fn sqlite(dir: &Path) -> Handle {
        let stores = Stores::open(dir).unwrap();
        Handle {
            artifacts: stores.artifacts(),
            stores,
            source: "sqlite",
        }
    }

    fn sqlite_with(dir: &Path, options: &OpenOptions) -> Handle {
        let stores = Stores::open_with(dir, options).unwrap();
        Handle {
            artifacts: stores.artifacts(),
            stores,
            source: "sqlite",
        }
    }

    fn postgres(url: &str, files: &Path) -> Handle {
        let options = OpenOptions::postgres(url).with_write_to_file_root(files);
        let stores = Stores::open_with(files, &options).unwrap();
        Handle {
            artifacts: stores.artifacts(),
            stores,
            source: "postgres",
        }
    }
}

impl NamespaceStores for Handle {
    fn namespace(&self) -> String {
        self.stores.namespace().to_string()
    }
    fn source(&self) -> String {
        self.source.to_owned()
    }
    fn assets(&self) -> &dyn AssetStore {
        self.stores.assets()
    }
    fn artifacts(&self) -> &dyn ArtifactStore {
        self.artifacts.as_ref()
    }
    fn backends(&self) -> &BackendRegistry {
        self.stores.backends()
    }
    fn threads(&self) -> Result<Vec<Scope>, MemoryError> {
        self.stores.threads()
    }
    fn memory(&self, scope: Scope) -> Result<Box<dyn Memory>, MemoryError> {
        self.stores.memory(scope)
    }
    fn existing_memory(&self, scope: Scope) -> Result<Option<Box<dyn Memory>>, MemoryError> {
        self.stores.existing_memory(scope)
    }
}

/// Far in the future, so nothing expires during the test.
const LATER: i64 = 4_102_444_800_000;

/// Assets with bytes (with and without a media type) deep inside, extra fields, expiry;
/// artifacts inline and in files, with expiry; two threads with embeddings that are not f32
/// values, marks, and an empty thread.
fn fill(handle: &Handle) {
    let mut photo = Asset::new(Value::Bytes(Bytes::with_media_type(
        (0..=255u8).collect::<Vec<_>>(),
        "image/png",
    )))
    .with_id("photo-1")
    .with_type("image")
    .with_content_type("image/png");
    photo
        .extra
        .insert("x_caption".into(), Value::String("a cat".into()));
    let table = Asset::from_json(json!({
        "asset_id": "table-1",
        "asset_type": "table",
        "content": {"rows": [[1, 2.5, "x"], [null, true, {"k": [0.1, 1e300]}]]},
        "x_note": "ünïcödé"
    }))
    .unwrap();
    let mut mixed = Asset::new(Value::Array(vec![
        Value::Bytes(Bytes::new(vec![0u8, 1, 2])),
        Value::String("between".into()),
        Value::Bytes(Bytes::new(Vec::new())),
    ]))
    .with_id("mixed-1");
    mixed.description = Some("bytes in a list".into());
    let assets = handle.assets();
    assets.put_expiring(&photo, Expiry::Never).unwrap();
    assets.put_expiring(&table, Expiry::At(LATER)).unwrap();
    assets.put_expiring(&mixed, Expiry::Never).unwrap();

    let artifacts = handle.artifacts();
    let inline = Artifact::new("chat-1", "plan", "plan", "The plan")
        .with_description("steps")
        .with_data(json!(["parse", "test"]));
    artifacts
        .save_expiring(&inline, Expiry::Never, &mut || Ok(()))
        .unwrap();
    let later =
        Artifact::new("chat-1", "plan", "plan", "The plan, again").with_data(json!({"v": 2}));
    artifacts
        .save_expiring(&later, Expiry::At(LATER), &mut || Ok(()))
        .unwrap();
    let file = Artifact::new("chat-2", "report", "file", "Report")
        .with_storage(StorageLocation::new("write_to_file", "reports/r1.json"));
    let backend = match handle.backends().resolve("write_to_file").unwrap() {
        mnemon_artifacts::Storage::External { backend, .. } => backend,
        mnemon_artifacts::Storage::Inline => panic!("write_to_file is not external"),
    };
    artifacts
        .save_expiring(&file, Expiry::Never, &mut || {
            backend.write("reports/r1.json", &json!({"total": 42, "items": [1, 2, 3]}))
        })
        .unwrap();

    let session = handle.memory(Scope::session("s1")).unwrap();
    let messages = (0..5)
        .map(|i| {
            MsgInput::Json(json!({
                "id": format!("m{i}"),
                "name": if i % 2 == 0 { "user" } else { "assistant" },
                "role": if i % 2 == 0 { "user" } else { "assistant" },
                "content": format!("message {i}"),
                "timestamp": format!("2026-01-0{} 10:00:0{i}", i + 1),
                "embedding": [0.1 * f64::from(i), 1.0 / 3.0, -2.5e-8, f64::from(i).sqrt()],
            }))
        })
        .collect();
    session.add(messages).unwrap();
    // Messages with an expiry, with a recorded embedding model, with both (another model: a
    // thread in the middle of a reembed holds two), and a plain one after them: each keeps
    // its own, and all keep their order.
    let stored = |i: u32| {
        MsgInput::Json(json!({
            "id": format!("m{i}"),
            "name": "user",
            "role": "user",
            "content": format!("message {i}"),
            "timestamp": format!("2026-01-0{i} 11:00:00"),
            "embedding": [1.0 / f64::from(i), 0.1, f64::from(i) * 1e-300, -0.0],
        }))
    };
    let expiring = |at: i64| AddOptions {
        expiry: Expiry::At(at),
        ..AddOptions::default()
    };
    session.add_with(vec![stored(5)], &expiring(LATER)).unwrap();
    session
        .add_with_model(vec![stored(6)], &AddOptions::default(), "model-a")
        .unwrap();
    session
        .add_with_model(vec![stored(7)], &expiring(LATER + 7), "model-b")
        .unwrap();
    session.add(vec![stored(8)]).unwrap();
    session.mark(&["m1", "m3"], "important").unwrap();
    session.mark(&["m7"], "done").unwrap();
    session.mark(&["m3"], "done").unwrap();
    let scoped = handle
        .memory(Scope {
            user_id: Some("u1".into()),
            agent_id: Some("a1".into()),
            session_id: Some("s2".into()),
        })
        .unwrap();
    scoped
        .add(vec![MsgInput::Json(json!({
            "id": "only", "name": "system", "role": "system",
            "content": [{"type": "text", "text": "hi"}],
            "timestamp": "2026-02-01 00:00:00", "metadata": {"k": 1}
        }))])
        .unwrap();
    handle.memory(Scope::session("empty")).unwrap();
}

/// Everything of a namespace, in the stores' own orders, embeddings as bits.
#[derive(Debug, PartialEq)]
struct Snapshot {
    assets: Vec<(Asset, Option<Option<i64>>)>,
    artifacts: Vec<(Artifact, Option<serde_json::Value>, Option<Option<i64>>)>,
    threads: Vec<Thread>,
}

/// One thread: its scope, its export document in the stored layout (every message's fields,
/// its marks, expiry and embedding model included), its embeddings as bits, each message's
/// marks.
type Thread = (Scope, String, Vec<Vec<u64>>, Vec<Option<Vec<String>>>);

fn snapshot(handle: &Handle) -> Snapshot {
    let assets = handle
        .assets()
        .list_ids(None)
        .unwrap()
        .into_iter()
        .map(|id| {
            let asset = handle.assets().get(&id).unwrap().unwrap();
            (asset, handle.assets().expires_at(&id).unwrap())
        })
        .collect();
    let mut artifacts = Vec::new();
    for scope in handle.artifacts().scopes().unwrap() {
        for artifact in handle.artifacts().list(&scope, None).unwrap() {
            let content = handle.backends().read_content(&artifact).unwrap();
            let expires = handle.artifacts().expires_at(artifact.id).unwrap();
            artifacts.push((artifact, content, expires));
        }
    }
    let mut threads = Vec::new();
    let mut scopes = handle.threads().unwrap();
    scopes.sort_by_key(|s| (s.user_id.clone(), s.agent_id.clone(), s.session_id.clone()));
    for scope in scopes {
        let memory = handle.memory(scope.clone()).unwrap();
        let Exported::Json(document) = memory
            .export(
                ExportTarget::Json,
                &mnemon_memory::ExportOptions {
                    include_marks: true,
                    format: ExportFormat::AgentScope00Stored,
                },
            )
            .unwrap()
        else {
            panic!("not a document")
        };
        let embeddings = memory
            .get_embeddings(None)
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.into_iter().map(|x| u64::from(x.to_bits())).collect())
            .collect();
        let Exported::Messages(messages) = memory
            .export(
                ExportTarget::Messages,
                &mnemon_memory::ExportOptions::default(),
            )
            .unwrap()
        else {
            panic!("not messages")
        };
        let marks = messages
            .iter()
            .map(|m| memory.marks_of(m.id()).unwrap())
            .collect();
        threads.push((scope, document, embeddings, marks));
    }
    Snapshot {
        assets,
        artifacts,
        threads,
    }
}

/// The embeddings of thread `s1` as the stored f64 numbers, read from its export document.
fn stored_embeddings(snapshot: &Snapshot) -> Vec<Vec<u64>> {
    let (_, document, _, _) = snapshot
        .threads
        .iter()
        .find(|(scope, ..)| scope.session_id.as_deref() == Some("s1"))
        .unwrap();
    let messages: serde_json::Value = serde_json::from_str(document).unwrap();
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap().to_bits())
                .collect()
        })
        .collect()
}

/// Each message of thread `s1` with its expiry and embedding model, read from its stored-layout
/// export document.
fn stored_fields(snapshot: &Snapshot) -> Vec<(String, Option<i64>, Option<String>)> {
    let (_, document, _, _) = snapshot
        .threads
        .iter()
        .find(|(scope, ..)| scope.session_id.as_deref() == Some("s1"))
        .unwrap();
    let messages: serde_json::Value = serde_json::from_str(document).unwrap();
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_owned(),
                m.get("__expires_at").map(|v| v.as_i64().unwrap()),
                m.get("__embedding_model")
                    .map(|v| v.as_str().unwrap().to_owned()),
            )
        })
        .collect()
}

/// The lines of a backup between its header (which names the source and the time) and its
/// trailer (whose checksum covers the header).
fn body(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[1..lines.len() - 1].to_vec()
}

fn is_empty(handle: &Handle) -> bool {
    handle.assets().list_ids(None).unwrap().is_empty()
        && handle.artifacts().scopes().unwrap().is_empty()
        && handle.threads().unwrap().is_empty()
}

#[test]
fn sqlite_to_postgres_to_sqlite_is_the_same_field_by_field() {
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("backup_round_trip").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let first = Handle::sqlite(&dir.path().join("first"));
    fill(&first);
    let before = snapshot(&first);
    assert_eq!(before.assets.len(), 3);
    assert_eq!(before.artifacts.len(), 3);
    assert_eq!(before.threads.len(), 3);

    let file1 = dir.path().join("one.jsonl");
    let exported = mnemon_backup::export(&first, &file1, &ExportOptions::default()).unwrap();
    assert_eq!(
        (
            exported.assets,
            exported.artifacts,
            exported.threads,
            exported.messages
        ),
        (3, 3, 3, 10)
    );

    let pg = Handle::postgres(&url, &dir.path().join("pg-files"));
    assert!(is_empty(&pg));
    let imported = mnemon_backup::import(&pg, &file1, &ImportOptions::default()).unwrap();
    assert_eq!(
        (
            imported.assets,
            imported.artifacts,
            imported.threads,
            imported.messages
        ),
        (3, 3, 3, 10)
    );
    let middle = snapshot(&pg);
    assert_eq!(middle, before);

    let file2 = dir.path().join("two.jsonl.gz");
    mnemon_backup::export(&pg, &file2, &ExportOptions::default()).unwrap();
    let last = Handle::sqlite(&dir.path().join("last"));
    mnemon_backup::import(&last, &file2, &ImportOptions::default()).unwrap();
    let after = snapshot(&last);
    assert_eq!(after, before);

    // Embeddings bit for bit, f64s that are not f32 values included.
    let bits = stored_embeddings(&after);
    assert_eq!(bits, stored_embeddings(&before));
    assert_eq!(bits[1][1], (1.0f64 / 3.0).to_bits());
    assert_eq!(bits[4][3], 2.0f64.to_bits());
    assert_eq!(bits[8][3], (-0.0f64).to_bits());

    // Each message's expiry and model, in memory order, came through the two backends (the
    // snapshots compared them; this checks they were there to compare).
    assert_eq!(
        stored_fields(&after),
        vec![
            ("m0".to_owned(), None, None),
            ("m1".to_owned(), None, None),
            ("m2".to_owned(), None, None),
            ("m3".to_owned(), None, None),
            ("m4".to_owned(), None, None),
            ("m5".to_owned(), Some(LATER), None),
            ("m6".to_owned(), None, Some("model-a".to_owned())),
            ("m7".to_owned(), Some(LATER + 7), Some("model-b".to_owned())),
            ("m8".to_owned(), None, None),
        ]
    );
    let file1_text = std::fs::read_to_string(&file1).unwrap();
    assert!(
        file1_text.contains(&format!(r#""expires_at":{}"#, LATER + 7))
            && file1_text.contains(r#""embedding_model":"model-b""#),
        "the backup does not carry the expiry and the model as record fields"
    );

    // The two files carry the same records in the same order.
    let file3 = dir.path().join("three.jsonl");
    mnemon_backup::export(&pg, &file3, &ExportOptions::default()).unwrap();
    assert_eq!(body(&file3), body(&file1));
}

/// A backup as written before messages had an expiry and a model: `expires_at` always `null`
/// and no `embedding_model` field. It still imports, its messages never expiring and their
/// models unknown.
#[test]
fn a_backup_from_before_message_expiry_and_models_still_imports() {
    let dir = tempfile::tempdir().unwrap();
    let target = Handle::sqlite(&dir.path().join("target"));
    let header = json!({
        "type": "header", "format": "mnemon-backup", "version": 1,
        "namespace": target.namespace(), "source": "sqlite",
        "exported_at": 1_790_000_000_000_i64, "selection": {}
    });
    let lines = [
        header.to_string(),
        r#"{"type":"thread","user_id":null,"agent_id":null,"session_id":"old"}"#.to_owned(),
        r#"{"type":"message","message":{"id":"o1","timestamp":"2025-01-01 00:00:00","name":"user","content":"first","role":"user","url":null,"embedding":[0.5,0.3333333333333333],"__marks":["kept"]},"expires_at":null}"#.to_owned(),
        r#"{"type":"message","message":{"id":"o2","timestamp":"2025-01-01 00:00:01","name":"assistant","content":"second","role":"assistant","url":null},"expires_at":null}"#.to_owned(),
    ];
    let body = lines.join("\n") + "\n";
    let trailer = |sha256: &str| {
        json!({"type": "trailer", "assets": 0, "artifacts": 0, "threads": 1, "messages": 2,
               "sha256": sha256})
        .to_string()
    };
    // The checksum of the body, as the importer computes it (it names it when it differs).
    let file = dir.path().join("old.jsonl");
    std::fs::write(&file, format!("{body}{}\n", trailer("0"))).unwrap();
    let error = mnemon_backup::import(&target, &file, &ImportOptions::default()).unwrap_err();
    let BackupError::Mismatch { actual, .. } = error else {
        panic!("{error}")
    };
    assert!(is_empty(&target));
    std::fs::write(&file, format!("{body}{}\n", trailer(&actual))).unwrap();

    let imported = mnemon_backup::import(&target, &file, &ImportOptions::default()).unwrap();
    assert_eq!((imported.threads, imported.messages), (1, 2));
    let after = snapshot(&target);
    let (scope, document, _, marks) = &after.threads[0];
    assert_eq!(scope.session_id.as_deref(), Some("old"));
    let messages: serde_json::Value = serde_json::from_str(document).unwrap();
    assert_eq!(messages[0]["content"], "first");
    assert_eq!(
        messages[0]["embedding"][1].as_f64().unwrap().to_bits(),
        (1.0f64 / 3.0).to_bits()
    );
    assert!(
        messages
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m.get("__expires_at").is_none() && m.get("__embedding_model").is_none()),
        "{document}"
    );
    assert_eq!(marks, &vec![Some(vec!["kept".to_owned()]), Some(vec![])]);

    // Exported again, it is written as it was: no model field, a null expiry.
    let again = dir.path().join("again.jsonl");
    mnemon_backup::export(&target, &again, &ExportOptions::default()).unwrap();
    let again_body = std::fs::read_to_string(&again).unwrap();
    assert!(again_body.contains(&lines[2]), "{again_body}");
    assert!(again_body.contains(&lines[3]), "{again_body}");
}

/// A message that never expires stays so when imported through a handle with a default
/// time-to-live (`mnemon --default-ttl … import`), as assets and artifacts do; one with an
/// expiry keeps its instant. Before, the memory's load gave it the handle's default.
#[test]
fn an_import_through_a_default_ttl_keeps_what_never_expired() {
    let dir = tempfile::tempdir().unwrap();
    let source = Handle::sqlite(&dir.path().join("source"));
    let s1 = Scope {
        session_id: Some("s1".into()),
        ..Scope::default()
    };
    let memory = source.memory(s1).unwrap();
    let at = 4_000_000_000_000_i64;
    memory
        .add(vec![MsgInput::from(
            json!({"id": "never", "name": "u", "content": "kept"}),
        )])
        .unwrap();
    memory
        .add_with(
            vec![MsgInput::from(
                json!({"id": "later", "name": "u", "content": "until"}),
            )],
            &AddOptions {
                expiry: Expiry::At(at),
                ..AddOptions::default()
            },
        )
        .unwrap();
    let file = dir.path().join("backup.jsonl");
    mnemon_backup::export(&source, &file, &ExportOptions::default()).unwrap();

    let options = OpenOptions::default().with_default_ttl(Some(std::time::Duration::from_secs(60)));
    let target = Handle::sqlite_with(&dir.path().join("target"), &options);
    mnemon_backup::import(&target, &file, &ImportOptions::default()).unwrap();
    assert_eq!(
        stored_fields(&snapshot(&target)),
        [
            ("never".to_owned(), None, None),
            ("later".to_owned(), Some(at), None)
        ]
    );
}

/// An expired artifact record the target has not swept yet does not block the import of a
/// record with its id: before, the check passed it (it is invisible) and the save failed
/// half-way, after the assets were written.
#[test]
fn an_expired_unswept_record_does_not_block_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let source = Handle::sqlite(&dir.path().join("source"));
    let record = Artifact::new("chat", "plan", "plan", "The plan").with_data(json!(["a step"]));
    source.artifacts().save(&record).unwrap();
    source
        .assets()
        .put(&Asset::new(Value::from_json(json!({"n": 1}))).with_id("a1"))
        .unwrap();
    let file = dir.path().join("backup.jsonl");
    mnemon_backup::export(&source, &file, &ExportOptions::default()).unwrap();

    let target = Handle::sqlite(&dir.path().join("target"));
    target
        .artifacts()
        .save_expiring(&record, Expiry::At(1), &mut || Ok(()))
        .unwrap();
    let imported = mnemon_backup::import(&target, &file, &ImportOptions::default()).unwrap();
    assert_eq!((imported.assets, imported.artifacts), (1, 1));
    assert_eq!(target.artifacts().get(record.id).unwrap(), Some(record));
}

/// A file holding a record twice (a hand-edited or concatenated file; an export never writes
/// one) is refused whole, with its checksum and counts right: before, a repeated asset was
/// written twice and counted twice, a repeated thread merged into one.
#[test]
fn a_record_held_twice_is_refused_and_imports_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let source = Handle::sqlite(&dir.path().join("source"));
    source
        .assets()
        .put(&Asset::new(Value::from_json(json!({"n": 1}))).with_id("a1"))
        .unwrap();
    let scope = Scope {
        session_id: Some("s".into()),
        ..Scope::default()
    };
    source
        .memory(scope)
        .unwrap()
        .add(vec![MsgInput::from(
            json!({"id": "m1", "name": "u", "content": "x"}),
        )])
        .unwrap();
    let file = dir.path().join("backup.jsonl");
    mnemon_backup::export(&source, &file, &ExportOptions::default()).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (header, trailer) = (lines[0], lines[lines.len() - 1]);
    let body = &lines[1..lines.len() - 1];
    let kind =
        |line: &str| serde_json::from_str::<serde_json::Value>(line).unwrap()["type"].clone();
    let asset = *body.iter().find(|l| kind(l) == "asset").unwrap();
    let thread: Vec<&str> = body
        .iter()
        .copied()
        .filter(|l| kind(l) == "thread" || kind(l) == "message")
        .collect();
    for (what, extra, counts) in [
        ("asset \"a1\"", vec![asset], ("assets", 2)),
        ("thread /", thread.clone(), ("threads", 2)),
    ] {
        let mut lines: Vec<&str> = vec![header];
        lines.extend(body);
        lines.extend(extra);
        let mut trailer: serde_json::Value = serde_json::from_str(trailer).unwrap();
        trailer[counts.0] = json!(counts.1);
        if counts.0 == "threads" {
            trailer["messages"] = json!(2);
        }
        let twice = dir.path().join("twice.jsonl");
        let write = |sha: &str| {
            let mut trailer = trailer.clone();
            trailer["sha256"] = json!(sha);
            let text = lines.join("\n") + "\n" + &trailer.to_string() + "\n";
            std::fs::write(&twice, text).unwrap();
        };
        write("0");
        let BackupError::Mismatch { actual, .. } = mnemon_backup::verify(&twice).unwrap_err()
        else {
            panic!("a checksum mismatch expected")
        };
        write(&actual);
        mnemon_backup::verify(&twice).unwrap();
        let target = Handle::sqlite(&dir.path().join(format!("target-{}", counts.0)));
        let error = mnemon_backup::import(&target, &twice, &ImportOptions::default()).unwrap_err();
        assert!(
            matches!(&error, BackupError::Repeated { what: w } if w.starts_with(what)),
            "{error}"
        );
        assert!(
            error.to_string().contains("nothing was imported"),
            "{error}"
        );
        assert!(is_empty(&target));
    }
}

#[test]
fn a_damaged_or_cut_backup_is_refused_and_imports_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let source = Handle::sqlite(&dir.path().join("source"));
    fill(&source);
    let file = dir.path().join("backup.jsonl");
    mnemon_backup::export(&source, &file, &ExportOptions::default()).unwrap();
    let bytes = std::fs::read(&file).unwrap();
    let target = Handle::sqlite(&dir.path().join("target"));

    let damaged = dir.path().join("damaged.jsonl");
    let refused = |content: &[u8]| {
        std::fs::write(&damaged, content).unwrap();
        let error = mnemon_backup::import(&target, &damaged, &ImportOptions::default())
            .expect_err("a damaged backup was imported");
        assert!(is_empty(&target), "a refused import wrote something");
        error
    };

    // Cut anywhere: before the trailer, inside a line, at a line end.
    for cut in [bytes.len() - 1, bytes.len() / 2, bytes.len() / 3, 10] {
        let error = refused(&bytes[..cut]);
        assert!(
            matches!(
                error,
                BackupError::Truncated { .. } | BackupError::Damaged { .. }
            ),
            "cut at {cut}: {error}"
        );
    }
    let without_trailer = bytes[..bytes.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap();
    let error = refused(&bytes[..=without_trailer]);
    assert!(matches!(error, BackupError::Truncated { .. }), "{error}");
    assert!(error.to_string().contains("truncated"), "{error}");

    // One character changed inside a record that still parses: the checksum catches it.
    let text = String::from_utf8(bytes.clone()).unwrap();
    let changed = text.replacen("message 3", "message 4", 1);
    assert_ne!(changed, text);
    let error = refused(changed.as_bytes());
    assert!(
        matches!(
            error,
            BackupError::Mismatch {
                what: "the checksum",
                ..
            }
        ),
        "{error}"
    );

    // A line dropped from the middle: the checksum again.
    let lines: Vec<&str> = text.lines().collect();
    let mut dropped = lines.clone();
    dropped.remove(3);
    let error = refused((dropped.join("\n") + "\n").as_bytes());
    assert!(matches!(error, BackupError::Mismatch { .. }), "{error}");

    // Not a backup at all: another JSON file, with or without its last line break, or an
    // empty one (before, the last two were called cut backups to export again).
    for other in [&b"{\"hello\": 1}\n"[..], b"[{\"id\": \"m1\"}]", b""] {
        let error = refused(other);
        assert!(matches!(error, BackupError::NotABackup), "{error}");
    }

    // A cut gzip file.
    let gz = dir.path().join("backup.jsonl.gz");
    mnemon_backup::export(&source, &gz, &ExportOptions::default()).unwrap();
    let compressed = std::fs::read(&gz).unwrap();
    let cut_gz = dir.path().join("cut.jsonl.gz");
    std::fs::write(&cut_gz, &compressed[..compressed.len() * 2 / 3]).unwrap();
    let error = mnemon_backup::import(&target, &cut_gz, &ImportOptions::default()).unwrap_err();
    assert!(is_empty(&target), "{error}");

    // The whole file still imports.
    mnemon_backup::import(&target, &file, &ImportOptions::default()).unwrap();
    assert_eq!(snapshot(&target), snapshot(&source));
}

#[test]
fn an_import_over_existing_records_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let source = Handle::sqlite(&dir.path().join("source"));
    fill(&source);
    let file = dir.path().join("backup.jsonl");
    mnemon_backup::export(&source, &file, &ExportOptions::default()).unwrap();
    let target = Handle::sqlite(&dir.path().join("target"));
    target
        .assets()
        .put(&Asset::new(Value::Null).with_id("table-1"))
        .unwrap();
    let error = mnemon_backup::import(&target, &file, &ImportOptions::default()).unwrap_err();
    assert!(
        matches!(error, BackupError::Conflicts { total: 1, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("table-1"), "{error}");
    assert_eq!(target.assets().list_ids(None).unwrap(), ["table-1"]);
    assert!(target.threads().unwrap().is_empty());
    // Into the source itself: every record conflicts.
    let error = mnemon_backup::import(&source, &file, &ImportOptions::default()).unwrap_err();
    assert!(
        matches!(error, BackupError::Conflicts { total: 9, .. }),
        "{error}"
    );
}

/// An artifact of the backup whose content location (a `write_to_file` path, chosen by the
/// saver) holds another record's content in the target is a conflict: the import wrote over it,
/// and the target's record then read the backup's content.
#[test]
fn an_import_over_another_records_content_file_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let save = |handle: &Handle, name: &str, content: serde_json::Value| {
        let artifact = Artifact::new("chat-9", "notes", "file", name)
            .with_storage(StorageLocation::new("write_to_file", "notes/plan.md"));
        let mnemon_artifacts::Storage::External { backend, .. } =
            handle.backends().resolve("write_to_file").unwrap()
        else {
            panic!("write_to_file is not external")
        };
        handle
            .artifacts()
            .save_expiring(&artifact, Expiry::Never, &mut || {
                backend.write("notes/plan.md", &content)
            })
            .unwrap();
        artifact
    };
    let source = Handle::sqlite(&dir.path().join("source"));
    save(&source, "theirs", json!("their plan"));
    let file = dir.path().join("backup.jsonl");
    mnemon_backup::export(&source, &file, &ExportOptions::default()).unwrap();
    let target = Handle::sqlite(&dir.path().join("target"));
    let mine = save(&target, "mine", json!("my plan"));
    let error = mnemon_backup::import(&target, &file, &ImportOptions::default()).unwrap_err();
    assert!(
        matches!(error, BackupError::Conflicts { total: 1, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("notes/plan.md"), "{error}");
    let kept = target.artifacts().get(mine.id).unwrap().unwrap();
    assert_eq!(
        target.backends().read_content(&kept).unwrap(),
        Some(json!("my plan"))
    );
    // The same content there (the record's own file, left when it was deleted) is no conflict.
    let restored = Handle::sqlite(&dir.path().join("restored"));
    save(&restored, "left", json!("their plan"));
    let left = restored.artifacts().list("chat-9", None).unwrap();
    restored.artifacts().delete(left[0].id).unwrap();
    mnemon_backup::import(&restored, &file, &ImportOptions::default()).unwrap();
}

/// Renames `with` over `path` the first time the import asks for the asset store: during the
/// first pass, after it opened the file (as a scheduled export of a newer backup to the same
/// name would).
struct Swapping<'a> {
    inner: &'a Handle,
    swap: std::sync::Mutex<Option<(std::path::PathBuf, std::path::PathBuf)>>,
}

impl NamespaceStores for Swapping<'_> {
    fn namespace(&self) -> String {
        self.inner.namespace()
    }
    fn source(&self) -> String {
        self.inner.source()
    }
    fn assets(&self) -> &dyn AssetStore {
        if let Some((with, path)) = self.swap.lock().unwrap().take() {
            std::fs::rename(with, path).unwrap();
        }
        self.inner.assets()
    }
    fn artifacts(&self) -> &dyn ArtifactStore {
        self.inner.artifacts()
    }
    fn backends(&self) -> &BackendRegistry {
        self.inner.backends()
    }
    fn threads(&self) -> Result<Vec<Scope>, MemoryError> {
        self.inner.threads()
    }
    fn memory(&self, scope: Scope) -> Result<Box<dyn Memory>, MemoryError> {
        self.inner.memory(scope)
    }
    fn existing_memory(&self, scope: Scope) -> Result<Option<Box<dyn Memory>>, MemoryError> {
        self.inner.existing_memory(scope)
    }
}

/// An import writes the file it checked: one renamed over its path between the passes (a newer
/// backup exported to the same name) was written by the second pass, which then reported the
/// change, with the other file's records written.
#[test]
fn an_import_writes_the_file_it_checked() {
    let dir = tempfile::tempdir().unwrap();
    let export_of = |name: &str, asset_id: &str| {
        let source = Handle::sqlite(&dir.path().join(name));
        source
            .assets()
            .put(&Asset::new(Value::from("x")).with_id(asset_id))
            .unwrap();
        let file = dir.path().join(format!("{name}.jsonl"));
        mnemon_backup::export(&source, &file, &ExportOptions::default()).unwrap();
        file
    };
    let checked = export_of("first", "from-the-first");
    let newer = export_of("newer", "from-the-newer");
    let target = Handle::sqlite(&dir.path().join("target"));
    let swapping = Swapping {
        inner: &target,
        swap: std::sync::Mutex::new(Some((newer, checked.clone()))),
    };
    mnemon_backup::import(&swapping, &checked, &ImportOptions::default()).unwrap();
    assert_eq!(target.assets().list_ids(None).unwrap(), ["from-the-first"]);
}

/// A message holding fields of its own named `__expires_at` and `__embedding_model` (inside a
/// `List`, an item's keys are its own) goes through a backup live: the export failed on a field
/// that was not an integer, and a field `1` made the imported message expire in 1970.
#[test]
fn own_fields_named_like_stored_ones_go_through_a_backup() {
    let dir = tempfile::tempdir().unwrap();
    let source = Handle::sqlite(&dir.path().join("source"));
    let own = |id: &str, expires: serde_json::Value| {
        let item = json!({"__type": "Msg", "id": id, "name": "n", "content": id,
                          "__expires_at": expires, "__embedding_model": 7});
        MsgInput::Json(json!({"__type": "List", "__value": [item.to_string()]}))
    };
    let session = source.memory(Scope::session("own")).unwrap();
    session
        .add(vec![own("a", json!(1)), own("b", json!("x"))])
        .unwrap();
    let file = dir.path().join("backup.jsonl");
    mnemon_backup::export(&source, &file, &ExportOptions::default()).unwrap();
    let target = Handle::sqlite(&dir.path().join("target"));
    mnemon_backup::import(&target, &file, &ImportOptions::default()).unwrap();
    let imported = target.memory(Scope::session("own")).unwrap();
    let ids: Vec<String> = imported
        .get_memory(&Default::default())
        .unwrap()
        .iter()
        .map(|m| m.id().to_owned())
        .collect();
    assert_eq!(ids, ["a", "b"]);
}

#[test]
fn a_selection_exports_only_its_parts() {
    let dir = tempfile::tempdir().unwrap();
    let source = Handle::sqlite(&dir.path().join("source"));
    fill(&source);
    let file = dir.path().join("part.jsonl");
    let selection = Selection {
        asset_id_prefix: Some("photo".into()),
        artifact_scope_prefix: Some("chat-2".into()),
        memory: Some(mnemon_backup::ThreadFilter {
            user_id: Some("u1".into()),
            ..Default::default()
        }),
    };
    let report = mnemon_backup::export(
        &source,
        &file,
        &ExportOptions {
            selection: selection.clone(),
            ..ExportOptions::default()
        },
    )
    .unwrap();
    assert_eq!(
        (
            report.assets,
            report.artifacts,
            report.threads,
            report.messages
        ),
        (1, 1, 1, 1)
    );
    let verified = mnemon_backup::verify(&file).unwrap();
    assert_eq!(verified.header.selection, selection);
    let target = Handle::sqlite(&dir.path().join("target"));
    mnemon_backup::import(&target, &file, &ImportOptions::default()).unwrap();
    assert_eq!(target.assets().list_ids(None).unwrap(), ["photo-1"]);
    assert_eq!(target.artifacts().scopes().unwrap(), ["chat-2"]);
    assert_eq!(target.threads().unwrap().len(), 1);
}

/// Peak resident memory of exporting and importing a large namespace (SQLite, in this test
/// process): `MNEMON_BACKUP_BENCH_MB` MB of asset bytes (default 1024) plus
/// `MNEMON_BACKUP_BENCH_MESSAGES` messages (default 100,000) in 10 threads, with 64-dimension
/// embeddings. Run alone:
/// `cargo test -p mnemon-tests --test integration backup::peak_memory -- --ignored --nocapture`.
#[test]
#[ignore = "measurement: writes several GB to the temporary folder"]
fn peak_memory_of_a_large_export_and_import() {
    let megabytes: usize = std::env::var("MNEMON_BACKUP_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let per_thread: usize = std::env::var("MNEMON_BACKUP_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
        / 10;
    let dir = tempfile::tempdir_in(
        std::env::var("MNEMON_BACKUP_BENCH_DIR")
            .unwrap_or_else(|_| std::env::temp_dir().to_string_lossy().into_owned()),
    )
    .unwrap();
    let source = Handle::sqlite(&dir.path().join("source"));
    let blob: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    for chunk in 0..megabytes.div_ceil(16) {
        let assets: Vec<Asset> = (0..16.min(megabytes - chunk * 16))
            .map(|i| {
                Asset::new(Value::Bytes(Bytes::new(blob.clone())))
                    .with_id(format!("blob-{chunk:05}-{i:02}"))
            })
            .collect();
        source.assets().put_batch(&assets).unwrap();
    }
    for thread in 0..10 {
        let memory = source.memory(Scope::session(format!("t{thread}"))).unwrap();
        let messages = (0..per_thread)
            .map(|i| {
                MsgInput::Json(json!({
                    "id": format!("m{i}"), "name": "user", "role": "user",
                    "content": format!("message {i} of thread {thread}"),
                    "timestamp": "2026-01-01 00:00:00",
                    "embedding": (0..64usize).map(|d| (i * 64 + d) as f64 / 7.0).collect::<Vec<_>>(),
                }))
            })
            .collect();
        memory.add(messages).unwrap();
    }
    let file = dir.path().join("big.jsonl");
    reset_peak();
    let start = std::time::Instant::now();
    let report = mnemon_backup::export(&source, &file, &ExportOptions::default()).unwrap();
    let export_peak = peak_kib();
    let export_time = start.elapsed();
    drop(source);
    let target = Handle::sqlite(&dir.path().join("target"));
    reset_peak();
    let start = std::time::Instant::now();
    let imported = mnemon_backup::import(&target, &file, &ImportOptions::default()).unwrap();
    let import_peak = peak_kib();
    eprintln!(
        "backup of {megabytes} MB of assets + {} messages: file {} MB; export {:.1?}, peak RSS \
         {} MiB; import {:.1?}, peak RSS {} MiB",
        report.messages,
        report.bytes >> 20,
        export_time,
        export_peak >> 10,
        start.elapsed(),
        import_peak >> 10,
    );
    assert_eq!(imported.assets, report.assets);
    assert_eq!(imported.messages, report.messages);
}

/// Resets this process's peak resident set size (`VmHWM`), Linux 4.0 and later.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// This process's peak resident set size since the last [`reset_peak`], in KiB.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Where [`export_once_for_strace`] writes, when it runs under strace.
const STRACE_DIR: &str = "MNEMON_BACKUP_STRACE_DIR";

/// One export into a folder: run alone, under strace, by
/// [`an_export_syncs_the_folder_it_renamed_into`]; without its directory it does nothing.
#[test]
#[ignore = "run under strace by an_export_syncs_the_folder_it_renamed_into"]
fn export_once_for_strace() {
    let Some(dir) = std::env::var_os(STRACE_DIR) else {
        return;
    };
    let dir = Path::new(&dir);
    let source = Handle::sqlite(&dir.join("source"));
    source
        .assets()
        .put(&Asset::new(Value::from_json(json!({"n": 1}))).with_id("a1"))
        .unwrap();
    std::fs::create_dir_all(dir.join("out")).unwrap();
    mnemon_backup::export(
        &source,
        &dir.join("out/backup.jsonl"),
        &ExportOptions::default(),
    )
    .unwrap();
}

/// A finished export is renamed into place and its folder synced, so the backup it reported
/// survives a power loss (docs/reference/backup.md): before, the folder was never synced.
/// Traced with strace (`-y` names each call's file); without strace, or where tracing is
/// refused, it says so in one `SKIPPED:` line, and fails when `MNEMON_REQUIRE_STRACE=1`
/// (`cargo xtask test`, CI).
#[test]
fn an_export_syncs_the_folder_it_renamed_into() {
    let dir = tempfile::tempdir().unwrap();
    let Some(calls) = crate::syncs_under_strace(
        "the folder-sync check of backup export",
        module_path!(),
        "export_once_for_strace",
        STRACE_DIR,
        dir.path(),
    ) else {
        return;
    };
    assert!(
        dir.path().join("out/backup.jsonl").is_file(),
        "the traced export wrote nothing"
    );
    // `fsync(7</tmp/…/out>) = 0`: the folder itself, by its path.
    let folder = format!("<{}>", dir.path().join("out").display());
    assert!(
        calls
            .lines()
            .any(|l| l.contains("fsync(") && l.contains(&folder)),
        "no fsync of {folder} in:\n{calls}"
    );
}

/// An export whose source lacks a record's storage backend says so, as an export: before, it
/// gave the import's message ("the target does not have …; nothing was imported").
#[test]
fn an_export_missing_a_backend_says_what_to_give_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let source = Handle::sqlite(&dir.path().join("source"));
    let record = Artifact::new("chat", "plan", "plan", "The plan")
        .with_storage(StorageLocation::new("elsewhere", "plan.json"));
    source.artifacts().save(&record).unwrap();
    let file = dir.path().join("backup.jsonl");
    let error = mnemon_backup::export(&source, &file, &ExportOptions::default()).unwrap_err();
    assert!(
        matches!(error, BackupError::SourceNoBackend { .. }),
        "{error}"
    );
    let text = error.to_string();
    assert!(
        text.contains("the source") && text.contains("nothing was exported"),
        "{text}"
    );
    assert!(!file.exists(), "a failed export left a file");
}

/// The stores of a handle whose thread listing names one more thread, deleted since it was
/// listed (as a thread deleted while an export runs).
struct ListsAGoneThread<'a>(&'a Handle);

impl NamespaceStores for ListsAGoneThread<'_> {
    fn namespace(&self) -> String {
        self.0.namespace()
    }
    fn source(&self) -> String {
        self.0.source()
    }
    fn assets(&self) -> &dyn AssetStore {
        self.0.assets()
    }
    fn artifacts(&self) -> &dyn ArtifactStore {
        self.0.artifacts()
    }
    fn backends(&self) -> &BackendRegistry {
        self.0.backends()
    }
    fn threads(&self) -> Result<Vec<Scope>, MemoryError> {
        let mut threads = self.0.threads()?;
        threads.push(Scope::session("gone"));
        Ok(threads)
    }
    fn memory(&self, scope: Scope) -> Result<Box<dyn Memory>, MemoryError> {
        self.0.memory(scope)
    }
    fn existing_memory(&self, scope: Scope) -> Result<Option<Box<dyn Memory>>, MemoryError> {
        self.0.existing_memory(scope)
    }
}

/// A thread deleted between the listing and its export is left out of the backup, not
/// recreated empty in the source (before, the export opened it with `memory`, which creates).
#[test]
fn an_export_leaves_out_a_thread_gone_since_the_listing() {
    let dir = tempfile::tempdir().unwrap();
    let source = Handle::sqlite(&dir.path().join("source"));
    let kept = source.memory(Scope::session("kept")).unwrap();
    kept.add(vec![MsgInput::from(
        json!({"name": "u", "content": "hello"}),
    )])
    .unwrap();
    let file = dir.path().join("backup.jsonl");
    let report =
        mnemon_backup::export(&ListsAGoneThread(&source), &file, &ExportOptions::default())
            .unwrap();
    assert_eq!((report.threads, report.messages), (1, 1));
    assert_eq!(source.threads().unwrap(), [Scope::session("kept")]);
}

/// An asset as deep as a store takes (`mnemon_store::MAX_NESTING`, counting its root) goes
/// through a backup and back: its line nests one level more (the record around it), which
/// serde_json's default recursion limit of 128 refused, so such a backup exported and could
/// not be imported.
#[test]
fn an_asset_at_the_nesting_limit_goes_through_a_backup() {
    let dir = tempfile::tempdir().unwrap();
    let source = Handle::sqlite(&dir.path().join("source"));
    // The asset's root object is the first level, so its content nests one less.
    let deepest = (0..mnemon_store::MAX_NESTING - 1).fold(
        Value::Bytes(Bytes::with_media_type(
            vec![1, 2, 3],
            "application/octet-stream",
        )),
        |inner, _| Value::Array(vec![inner]),
    );
    let asset = Asset::new(deepest).with_id("deep");
    source.assets().put(&asset).unwrap();
    let file = dir.path().join("backup.jsonl");
    mnemon_backup::export(&source, &file, &ExportOptions::default()).unwrap();

    let target = Handle::sqlite(&dir.path().join("target"));
    let imported = mnemon_backup::import(&target, &file, &ImportOptions::default()).unwrap();
    assert_eq!(imported.assets, 1);
    assert_eq!(target.assets().get("deep").unwrap(), Some(asset));
}
