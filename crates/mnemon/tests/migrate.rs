//! `mnemon::migrate`: assets, artifacts and memory copied SQLite → PostgreSQL → SQLite lose
//! nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mnemon::artifacts::{SaveArtifact, SaveArtifactConfig};
use mnemon::memory::{ExportFormat, ExportOptions, ExportTarget, Exported, Scope};
use mnemon::migrate::{CopyError, artifact_scopes, copy};
use mnemon::types::{Artifact, Asset, Bytes, Map, Value};
use mnemon::{Mnemon, OpenOptions};
use serde_json::json;

/// Every thread's export document (ids, timestamps, marks, embeddings, order), by scope.
fn memory_of(mnemon: &Mnemon) -> Vec<(Scope, String, Vec<Vec<f32>>, String)> {
    let mut threads = mnemon.threads().unwrap();
    threads.sort_by_key(|s| format!("{s:?}"));
    let options = ExportOptions {
        include_marks: true,
        format: ExportFormat::AgentScope00,
    };
    threads
        .into_iter()
        .map(|scope| {
            let memory = mnemon.memory(scope.clone()).unwrap();
            let Exported::Json(document) = memory.export(ExportTarget::Json, &options).unwrap()
            else {
                panic!("a JSON export")
            };
            let embeddings = memory.get_embeddings(None).unwrap();
            let messages = format!("{:?}", memory.get_memory(&Default::default()).unwrap());
            (scope, document, embeddings, messages)
        })
        .collect()
}

/// Every artifact record with its content, by scope in save order.
fn artifacts_of(mnemon: &Mnemon) -> Vec<(Artifact, Option<serde_json::Value>)> {
    let scopes = artifact_scopes(mnemon).unwrap();
    scopes
        .iter()
        .flat_map(|scope| mnemon.artifacts().list(scope, None).unwrap())
        .map(|artifact| {
            let content = mnemon.backends().read_content(&artifact).unwrap();
            (artifact, content)
        })
        .collect()
}

fn assets_of(mnemon: &Mnemon) -> Vec<Asset> {
    let ids = mnemon.assets().list_ids(None).unwrap();
    ids.iter()
        .map(|id| mnemon.assets().get(id).unwrap().unwrap())
        .collect()
}

#[test]
fn assets_artifacts_and_memory_round_trip_sqlite_postgresql_sqlite() {
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("migrate_round_trip").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let source = Mnemon::open(dir.path().join("a")).unwrap();

    let mut content = Map::new();
    content.insert(
        "image".into(),
        Bytes::with_media_type(vec![0, 1, 2, 255], "image/png").into(),
    );
    content.insert("caption".into(), "ünïcode and \"quotes\"".into());
    content.insert("size".into(), Value::from_json(json!({"w": 1.5, "h": -3})));
    let assets: Vec<Asset> = (0..300)
        .map(|i| {
            Asset::new(Value::Map(content.clone()))
                .with_id(format!("asset-{i:03}"))
                .with_type(if i % 2 == 0 { "image" } else { "note" })
        })
        .collect();
    source.assets().put_batch(&assets).unwrap();

    let scopes = [
        Scope::session("chat-1"),
        Scope {
            user_id: Some("mara".into()),
            agent_id: Some("helper".into()),
            session_id: Some("s2".into()),
        },
    ];
    for (t, scope) in scopes.iter().enumerate() {
        let memory = source.memory(scope.clone()).unwrap();
        let messages = (0..5)
            .map(|i| {
                json!({
                    "id": format!("m{t}-{i}"),
                    "name": "Mara",
                    "role": "user",
                    "content": format!("message {i} of thread {t}"),
                    "timestamp": format!("2024-01-0{} 10:00:0{i}", t + 1),
                    "embedding": [0.1f32 * i as f32, -1.0e-7f32, 3.3333333f32],
                })
                .into()
            })
            .collect();
        memory.add(messages).unwrap();
        // Every kind of field a message can carry.
        memory
            .add(vec![
                json!({
                    "id": format!("rich-{t}"),
                    "name": "tool",
                    "role": "system",
                    "content": [{"type": "text", "text": "a block"}, {"type": "image", "url": "x.png"}],
                    "metadata": {"k": [1, 2.5, null, "NUL \u{0} inside"]},
                    "url": "https://example.com/a.png",
                    "timestamp": "2024-02-29 23:59:59",
                    "extra_field": {"nested": true},
                    "embedding": [f32::MIN_POSITIVE, f32::MAX, -0.0f32],
                })
                .into(),
            ])
            .unwrap();
        memory
            .mark(&[&format!("m{t}-1"), &format!("m{t}-3")], "important")
            .unwrap();
        memory.mark(&[&format!("m{t}-3")], "todo").unwrap();
    }

    for (i, (scope, storage)) in [
        ("chat-1", "inline"),
        ("chat-2", "inline"),
        ("chat-1", "write_to_file"),
        ("chat-3 ü", "write_to_file"),
        ("chat-1", "inline"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut config = json!({
            "artifact_key": format!("key-{}", i % 2),
            "artifact_type": "plan",
            "artifact_name": format!("Plan {i}"),
            "artifact_storage": storage,
        });
        if storage == "write_to_file" {
            config["artifact_storage_id"] = json!(format!("plans/{i}.json"));
        }
        SaveArtifact::new(
            SaveArtifactConfig::from_json(&config).unwrap(),
            source.artifacts(),
            source.backends().clone(),
        )
        .unwrap()
        .run(scope, &json!({"content": {"step": i, "text": "ünïcode"}}))
        .unwrap();
    }
    assert_eq!(artifacts_of(&source).len(), 5);

    // A PostgreSQL target without a write_to_file root cannot take file content: it says so,
    // before copying anything (before, it stopped half-way, after the assets).
    let no_root = Mnemon::open_with(dir.path().join("pg"), &OpenOptions::postgres(&url)).unwrap();
    let error = copy(&source, &no_root).unwrap_err();
    assert!(matches!(error, CopyError::NoBackend { .. }), "{error}");
    assert!(error.to_string().contains("write_to_file root"), "{error}");
    assert_eq!(record_count(&no_root), 0);
    assert!(no_root.assets().list_ids(None).unwrap().is_empty());

    // A thread without messages is a thread too.
    drop(source.session("empty").unwrap());
    let shared = dir.path().join("shared");
    let postgres = Mnemon::open_with(
        dir.path().join("pg"),
        &OpenOptions::postgres(&url).with_write_to_file_root(&shared),
    )
    .unwrap();
    let there = copy(&source, &postgres).unwrap();
    assert_eq!((there.assets, there.threads, there.messages), (300, 3, 12));
    assert_eq!(there.artifacts, 5);
    // A PostgreSQL source opened without its files root cannot read file content: it says
    // what to give, before copying anything.
    let blind = Mnemon::open_with(dir.path().join("pg"), &OpenOptions::postgres(&url)).unwrap();
    let nowhere = Mnemon::open(dir.path().join("nowhere")).unwrap();
    let error = copy(&blind, &nowhere).unwrap_err();
    assert!(
        matches!(error, CopyError::SourceNoBackend { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("--from-files"), "{error}");
    assert!(nowhere.assets().list_ids(None).unwrap().is_empty());
    let back = Mnemon::open(dir.path().join("b")).unwrap();
    let again = copy(&postgres, &back).unwrap();
    assert_eq!(
        (again.assets, again.artifacts, again.threads, again.messages),
        (300, 5, 3, 12)
    );
    assert!(shared.join("plans/2.json").is_file());

    for copy in [&postgres, &back] {
        assert_eq!(assets_of(copy), assets_of(&source));
        assert_eq!(memory_of(copy), memory_of(&source));
        assert_eq!(artifacts_of(copy), artifacts_of(&source));
    }
    assert!(memory_of(&source)[0].1.contains("__marks"));

    // Copying again adds nothing and changes nothing.
    let twice = copy(&source, &back).unwrap();
    assert_eq!((twice.messages, twice.artifacts), (0, 0));
    assert_eq!(memory_of(&back), memory_of(&source));
}

/// How many artifact records a handle holds.
fn record_count(mnemon: &Mnemon) -> usize {
    artifact_scopes(mnemon)
        .unwrap()
        .iter()
        .map(|scope| mnemon.artifacts().list(scope, None).unwrap().len())
        .sum()
}

/// Expiries and embedding models survive a copy SQLite → PostgreSQL → SQLite, the last target
/// with a default time-to-live: what expires keeps its instant, what never expires stays so.
/// An expired artifact record the target has not swept does not block the copy of its id.
/// Before, every expiry and model was dropped (and the last target's default applied).
#[test]
fn expiries_and_embedding_models_survive_a_copy() {
    use mnemon::artifacts::Expiry;
    use mnemon::memory::AddOptions;
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("migrate_expiries").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let source = Mnemon::open(dir.path().join("a")).unwrap();
    let at = 4_000_000_000_000_i64;

    let asset = |id: &str| Asset::new(Value::from_json(json!({"id": id}))).with_id(id);
    source
        .assets()
        .put_expiring(&asset("kept"), Expiry::Never)
        .unwrap();
    source
        .assets()
        .put_expiring(&asset("until"), Expiry::At(at))
        .unwrap();

    let record = |name: &str| {
        Artifact::new("chat", format!("key-{name}"), "note", name).with_data(json!({"name": name}))
    };
    let (forever, expiring) = (record("forever"), record("expiring"));
    source
        .artifacts()
        .save_expiring(&forever, Expiry::Never, &mut || Ok(()))
        .unwrap();
    source
        .artifacts()
        .save_expiring(&expiring, Expiry::At(at), &mut || Ok(()))
        .unwrap();

    let memory = source.memory(Scope::session("s")).unwrap();
    memory
        .add(vec![
            json!({"id": "plain", "name": "u", "content": "x"}).into(),
        ])
        .unwrap();
    memory
        .add_with_model(
            vec![
                json!({"id": "made", "name": "u", "content": "y", "embedding": [1.0, 0.5]}).into(),
            ],
            &AddOptions {
                expiry: Expiry::At(at),
                ..AddOptions::default()
            },
            "model-1",
        )
        .unwrap();

    let postgres = Mnemon::open_with(dir.path().join("pg"), &OpenOptions::postgres(&url)).unwrap();
    copy(&source, &postgres).unwrap();
    let options = OpenOptions::default().with_default_ttl(Some(std::time::Duration::from_secs(60)));
    let back = Mnemon::open_with(dir.path().join("b"), &options).unwrap();
    // An expired record under the id the copy brings, not yet swept.
    back.artifacts()
        .save_expiring(&forever, Expiry::At(1), &mut || Ok(()))
        .unwrap();
    let report = copy(&postgres, &back).unwrap();
    assert_eq!(
        (report.assets, report.artifacts, report.messages),
        (2, 2, 2)
    );

    for copy in [&postgres, &back] {
        assert_eq!(copy.assets().expires_at("kept").unwrap(), Some(None));
        assert_eq!(copy.assets().expires_at("until").unwrap(), Some(Some(at)));
        assert_eq!(copy.artifacts().expires_at(forever.id).unwrap(), Some(None));
        assert_eq!(
            copy.artifacts().expires_at(expiring.id).unwrap(),
            Some(Some(at))
        );
        let options = ExportOptions {
            include_marks: true,
            format: ExportFormat::AgentScope00Stored,
        };
        let Exported::Json(document) = copy
            .memory(Scope::session("s"))
            .unwrap()
            .export(ExportTarget::Json, &options)
            .unwrap()
        else {
            panic!("a JSON export")
        };
        let messages: Vec<serde_json::Value> = serde_json::from_str(&document).unwrap();
        let fields: Vec<_> = messages
            .iter()
            .map(|m| {
                (
                    m["id"].clone(),
                    m.get("__expires_at").cloned(),
                    m.get("__embedding_model").cloned(),
                )
            })
            .collect();
        assert_eq!(
            fields,
            [
                (json!("plain"), None, None),
                (json!("made"), Some(json!(at)), Some(json!("model-1"))),
            ]
        );
    }
}

/// An artifact whose content location (a `write_to_file` path, the saver's to choose) holds
/// another record's content in the target stops the copy: it was written over, and the
/// target's record then read the source's content.
#[test]
fn a_copy_does_not_write_over_another_records_content() {
    use mnemon::artifacts::{Expiry, Storage};
    use mnemon::types::artifact::StorageLocation;
    let dir = tempfile::tempdir().unwrap();
    let save = |mnemon: &Mnemon, name: &str, content: serde_json::Value| {
        let artifact = Artifact::new("chat-9", "notes", "file", name)
            .with_storage(StorageLocation::new("write_to_file", "notes/plan.md"));
        let Storage::External { backend, .. } = mnemon.backends().resolve("write_to_file").unwrap()
        else {
            panic!("write_to_file is not external")
        };
        mnemon
            .artifacts()
            .save_expiring(&artifact, Expiry::Never, &mut || {
                backend.write("notes/plan.md", &content)
            })
            .unwrap();
        artifact
    };
    let source = Mnemon::open(dir.path().join("a")).unwrap();
    save(&source, "theirs", json!("their plan"));
    let target = Mnemon::open(dir.path().join("b")).unwrap();
    let mine = save(&target, "mine", json!("my plan"));
    let error = copy(&source, &target).unwrap_err();
    assert!(matches!(error, CopyError::ContentTaken { .. }), "{error}");
    assert!(error.to_string().contains("notes/plan.md"), "{error}");
    let kept = target.artifacts().get(mine.id).unwrap().unwrap();
    assert_eq!(
        target.backends().read_content(&kept).unwrap(),
        Some(json!("my plan"))
    );
}
