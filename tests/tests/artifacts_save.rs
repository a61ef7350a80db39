//! SaveArtifact (docs/reference/artifacts.md#saveartifact) and its JSONPath dialect (RFC 9535 via
//! serde_json_path).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use mnemon_artifacts::{
    ArtifactError, ArtifactStore, BackendRegistry, InMemoryArtifactStore, SaveArtifact,
    SaveArtifactConfig, SqliteArtifactStore,
};
use mnemon_types::Artifact;
use serde_json::{Map, Value, json};
use serde_json_path::JsonPath;
use uuid::Uuid;

struct Env {
    dir: tempfile::TempDir,
    store: Arc<InMemoryArtifactStore>,
}

impl Env {
    fn new() -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
            store: Arc::new(InMemoryArtifactStore::new()),
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("artifacts")
    }

    fn step(&self, config: Value) -> Result<SaveArtifact, ArtifactError> {
        let config = SaveArtifactConfig::from_json(&config)?;
        SaveArtifact::new(
            config,
            self.store.clone(),
            BackendRegistry::with_defaults(self.root()),
        )
    }

    fn run(&self, config: Value, inputs: Value) -> Result<Map<String, Value>, ArtifactError> {
        self.step(config)?.run("chat-1", &inputs)
    }

    fn saved(&self) -> Vec<Artifact> {
        self.store.list("chat-1", None).unwrap()
    }
}

fn statics() -> Value {
    json!({"artifact_key": "plan", "artifact_type": "plan", "artifact_name": "The plan"})
}

fn with(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

// ---------------------------------------------------------------- config

#[test]
fn original_config_keys_deserialize_with_defaults() {
    let config = SaveArtifactConfig::from_json(&json!({
        "artifact_from_key": "generated_file",
        "artifact_key": "k", "artifact_type": "t", "artifact_name": "n",
        "artifact_description": "d", "artifact_storage": "write_to_file",
        "artifact_storage_id": "a.txt", "content_key": "text",
        "content_path": "x.y", "output_key": "out",
    }))
    .unwrap();
    assert_eq!(config.artifact_from_key.as_deref(), Some("generated_file"));
    assert_eq!(config.content_key, "text");
    assert_eq!(config.output_key, "out");
    let defaults = SaveArtifactConfig::from_json(&json!({})).unwrap();
    assert_eq!(defaults, SaveArtifactConfig::default());
    assert_eq!(defaults.content_key, "content");
    assert_eq!(defaults.output_key, "artifact");
}

#[test]
fn the_class_path_wrapper_is_accepted() {
    let inner = statics();
    let wrapped = json!({"class_path": "ix.chains.artifacts.SaveArtifact", "config": inner});
    assert_eq!(
        SaveArtifactConfig::from_json(&wrapped).unwrap(),
        SaveArtifactConfig::from_json(&inner).unwrap()
    );
    let other = json!({"class_path": "ix.chains.llm.LLMChain", "config": inner});
    let err = SaveArtifactConfig::from_json(&other).unwrap_err();
    assert!(err.to_string().contains("SaveArtifact"), "{err}");
}

#[test]
fn misspelt_keys_are_reported() {
    let err = SaveArtifactConfig::from_json(&json!({"artifact_nmae": "x"})).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("artifact_nmae") && text.contains("artifact_name"),
        "{text}"
    );
}

#[test]
fn bad_jsonpaths_and_backends_fail_at_construction() {
    let env = Env::new();
    let err = env
        .step(with(statics(), json!({"content_path": "$.a["})))
        .unwrap_err();
    assert!(matches!(
        err,
        ArtifactError::InvalidJsonPath {
            setting: "content_path",
            ..
        }
    ));
    let err = env
        .step(with(statics(), json!({"artifact_from_key": "$$"})))
        .unwrap_err();
    assert!(matches!(
        err,
        ArtifactError::InvalidJsonPath {
            setting: "artifact_from_key",
            ..
        }
    ));
    let err = env
        .step(with(statics(), json!({"artifact_storage": "s3"})))
        .unwrap_err();
    assert!(matches!(err, ArtifactError::UnknownBackend { .. }), "{err}");
}

// ---------------------------------------------------------------- the six steps

#[test]
fn static_attributes_and_inline_content() {
    let env = Env::new();
    let out = env
        .run(
            with(statics(), json!({"artifact_description": "what to do"})),
            json!({"content": {"steps": ["parse", "test"]}}),
        )
        .unwrap();
    let dict = &out["artifact"];
    assert_eq!(dict["key"], "plan");
    assert_eq!(dict["type"], "plan");
    assert_eq!(dict["name"], "The plan");
    assert_eq!(dict["description"], "what to do");
    assert_eq!(dict["storage"], Value::Null);
    assert_eq!(dict["storage_id"], Value::Null);
    assert_eq!(dict["data"], json!({"steps": ["parse", "test"]}));
    // The output carries the saved record's id.
    let saved = env.saved();
    assert_eq!(saved.len(), 1);
    assert_eq!(dict["id"], saved[0].id.to_string());
    assert_eq!(saved[0].scope, "chat-1");
    assert_eq!(out.len(), 1);
}

#[test]
fn output_key_and_content_key_are_honoured() {
    let env = Env::new();
    let out = env
        .run(
            with(
                statics(),
                json!({"output_key": "saved_plan", "content_key": "text"}),
            ),
            json!({"text": "hello", "content": "not this"}),
        )
        .unwrap();
    assert_eq!(out["saved_plan"]["data"], "hello");
}

#[test]
fn description_defaults_to_empty() {
    let env = Env::new();
    let out = env.run(statics(), json!({"content": 1})).unwrap();
    assert_eq!(out["artifact"]["description"], "");
}

#[test]
fn one_error_lists_every_missing_attribute() {
    let env = Env::new();
    let err = env
        .run(json!({"artifact_type": "t"}), json!({"content": 1}))
        .unwrap_err();
    match &err {
        ArtifactError::MissingAttributes { missing } => assert_eq!(missing, &["key", "name"]),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("key, name"));
    let err = env.run(json!({}), json!({"content": 1})).unwrap_err();
    assert!(err.to_string().contains("key, type, name"), "{err}");
    // An empty static value does not count as given.
    let err = env
        .run(
            with(statics(), json!({"artifact_name": ""})),
            json!({"content": 1}),
        )
        .unwrap_err();
    assert!(
        matches!(err, ArtifactError::MissingAttributes { ref missing } if missing == &["name"])
    );
    assert!(env.saved().is_empty());
}

#[test]
fn artifact_from_key_starts_from_an_artifact_dictionary() {
    let env = Env::new();
    let inputs = json!({
        "generated_file": {
            "key": "main_rs", "type": "file", "name": "main.rs",
            "description": "entry point", "storage": "write_to_file",
            "storage_id": "src/main.rs", "identifier": "ignored-when-storage_id-given",
        },
        "content": "fn main() {}\n",
    });
    let out = env
        .run(json!({"artifact_from_key": "generated_file"}), inputs)
        .unwrap();
    let dict = &out["artifact"];
    assert_eq!(dict["key"], "main_rs");
    assert_eq!(dict["type"], "file");
    assert_eq!(dict["name"], "main.rs");
    assert_eq!(dict["description"], "entry point");
    assert_eq!(dict["storage"], "write_to_file");
    assert_eq!(dict["storage_id"], "src/main.rs");
    assert_eq!(dict["data"], Value::Null);
    assert_eq!(
        fs::read_to_string(env.root().join("src/main.rs")).unwrap(),
        "fn main() {}\n"
    );
}

#[test]
fn static_attributes_override_the_start_artifact() {
    let env = Env::new();
    let inputs = json!({
        "start": {"key": "old_key", "artifact_type": "old_type", "name": "old name",
                  "description": "old description", "storage_id": "old.txt"},
        "content": "x",
    });
    let config = json!({
        "artifact_from_key": "$.start",
        "artifact_key": "new_key", "artifact_name": "new name",
        "artifact_description": "new description",
        "artifact_storage": "write_to_file", "artifact_storage_id": "new.txt",
    });
    let out = env.run(config, inputs).unwrap();
    let dict = &out["artifact"];
    assert_eq!(dict["key"], "new_key");
    assert_eq!(
        dict["type"], "old_type",
        "`artifact_type` in the start object is read too"
    );
    assert_eq!(dict["name"], "new name");
    assert_eq!(dict["description"], "new description");
    assert_eq!(dict["storage_id"], "new.txt");
    assert!(env.root().join("new.txt").exists());
    assert!(!env.root().join("old.txt").exists());
}

#[test]
fn storage_id_falls_back_to_the_identifier() {
    let env = Env::new();
    let inputs = json!({"start": {"key": "k", "type": "file", "name": "n",
                                  "storage": "write_to_file", "identifier": "by-identifier.txt"},
                        "content": "x"});
    let out = env
        .run(json!({"artifact_from_key": "start"}), inputs)
        .unwrap();
    assert_eq!(out["artifact"]["storage_id"], "by-identifier.txt");
    assert!(env.root().join("by-identifier.txt").exists());
}

#[test]
fn the_start_artifact_data_is_the_content_when_no_content_input_exists() {
    let env = Env::new();
    let inputs = json!({"prior": {"key": "k", "type": "t", "name": "n", "data": [1, 2]}});
    let out = env
        .run(json!({"artifact_from_key": "prior"}), inputs)
        .unwrap();
    assert_eq!(out["artifact"]["data"], json!([1, 2]));
}

#[test]
fn start_selection_errors_name_the_path() {
    let env = Env::new();
    let art = json!({"key": "k", "type": "t", "name": "n"});
    let cases = [
        (json!({"content": 1}), "$.missing", "selected 0"),
        (
            json!({"a": art, "b": art, "content": 1}),
            "$[?@.key]",
            "selected 2",
        ),
        (json!({"list": [1], "content": 1}), "list", "an array"),
    ];
    for (inputs, path, expected) in cases {
        let err = env
            .run(json!({"artifact_from_key": path}), inputs)
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(path) && text.contains(expected),
            "{path}: {text}"
        );
    }
    let err = env
        .run(
            json!({"artifact_from_key": "a"}),
            json!({"a": {"key": 7, "type": "t", "name": "n"}, "content": 1}),
        )
        .unwrap_err();
    assert!(err.to_string().contains("\"key\""), "{err}");
    assert!(env.saved().is_empty());
}

#[test]
fn content_path_selects_exactly_one_value() {
    let env = Env::new();
    let inputs = json!({"generated_file_json": {"data": "print('hi')", "files": ["a", "b"]}});
    // The original configs' `$`-less form.
    let out = env
        .run(
            with(
                statics(),
                json!({"content_path": "generated_file_json.data"}),
            ),
            inputs.clone(),
        )
        .unwrap();
    assert_eq!(out["artifact"]["data"], "print('hi')");
    // Zero and several matches are errors naming the path and the count.
    for (path, count) in [("$.nothing", 0), ("generated_file_json.files[*]", 2)] {
        let err = env
            .run(
                with(statics(), json!({"content_path": path})),
                inputs.clone(),
            )
            .unwrap_err();
        match &err {
            ArtifactError::MatchCount {
                path: p, count: c, ..
            } => {
                assert_eq!((p.as_str(), *c), (path, count));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            err.to_string().contains(&format!("selected {count}")),
            "{err}"
        );
    }
    assert_eq!(env.saved().len(), 1);
}

#[test]
fn missing_content_is_an_error_naming_the_key() {
    let env = Env::new();
    let err = env.run(statics(), json!({"other": 1})).unwrap_err();
    assert!(matches!(err, ArtifactError::ContentMissing { ref key } if key == "content"));
    let err = env.run(statics(), json!([1])).unwrap_err();
    assert!(matches!(err, ArtifactError::InputsNotObject { .. }));
}

#[test]
fn a_named_backend_writes_the_content_and_the_record_points_at_it() {
    let env = Env::new();
    let config = with(
        statics(),
        json!({"artifact_storage": "write_to_file", "artifact_storage_id": "plans/plan.json"}),
    );
    let out = env
        .run(config, json!({"content": {"steps": ["a", "b"]}}))
        .unwrap();
    assert_eq!(out["artifact"]["storage"], "write_to_file");
    assert_eq!(out["artifact"]["storage_id"], "plans/plan.json");
    let text = fs::read_to_string(env.root().join("plans/plan.json")).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"steps": ["a", "b"]})
    );
    assert!(text.contains("\n  \"steps\""), "pretty JSON: {text}");
    let saved = &env.saved()[0];
    assert_eq!(saved.data, None);
    assert_eq!(saved.storage.as_ref().unwrap().id, "plans/plan.json");
}

#[test]
fn the_inline_backend_by_name_keeps_content_in_the_record() {
    let env = Env::new();
    let out = env
        .run(
            with(statics(), json!({"artifact_storage": "inline"})),
            json!({"content": "x"}),
        )
        .unwrap();
    assert_eq!(out["artifact"]["data"], "x");
    assert_eq!(out["artifact"]["storage"], Value::Null);
}

#[test]
fn a_backend_without_a_storage_id_is_an_error() {
    let env = Env::new();
    let err = env
        .run(
            with(statics(), json!({"artifact_storage": "write_to_file"})),
            json!({"content": "x"}),
        )
        .unwrap_err();
    assert!(
        matches!(err, ArtifactError::StorageIdRequired { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("artifact_storage_id"));
    assert!(env.saved().is_empty());
}

#[test]
fn an_unsafe_storage_id_saves_nothing() {
    let env = Env::new();
    let config = with(
        statics(),
        json!({"artifact_storage": "write_to_file", "artifact_storage_id": "../escape.txt"}),
    );
    let err = env.run(config, json!({"content": "x"})).unwrap_err();
    assert!(
        matches!(err, ArtifactError::UnsafeStorageId { .. }),
        "{err}"
    );
    assert!(env.saved().is_empty());
    assert!(!env.dir.path().join("escape.txt").exists());
}

#[test]
fn saving_a_key_again_makes_the_new_artifact_the_latest() {
    let env = Env::new();
    for version in ["v1", "v2"] {
        env.run(statics(), json!({"content": version})).unwrap();
    }
    let latest = env.store.latest("chat-1", "plan").unwrap().unwrap();
    assert_eq!(latest.data, Some(json!("v2")));
    assert_eq!(env.saved().len(), 2);
}

// ---------------------------------------------------------------- crash safety

/// A store that checks, at the moment the record is saved, that the content it points at is
/// already on disk, then delegates to the real SQLite store.
struct ContentFirstProbe {
    inner: SqliteArtifactStore,
    root: PathBuf,
}

impl ArtifactStore for ContentFirstProbe {
    fn save(&self, artifact: &Artifact) -> Result<u64, ArtifactError> {
        let location = artifact.storage.as_ref().expect("stored in a backend");
        assert!(
            self.root.join(&location.id).is_file(),
            "the record was saved before its content was written"
        );
        self.inner.save(artifact)
    }
    fn get(&self, id: Uuid) -> Result<Option<Artifact>, ArtifactError> {
        self.inner.get(id)
    }
    fn latest(&self, scope: &str, key: &str) -> Result<Option<Artifact>, ArtifactError> {
        self.inner.latest(scope, key)
    }
    fn list(&self, scope: &str, t: Option<&str>) -> Result<Vec<Artifact>, ArtifactError> {
        self.inner.list(scope, t)
    }
    fn scopes(&self) -> Result<Vec<String>, ArtifactError> {
        self.inner.scopes()
    }
    fn delete(&self, id: Uuid) -> Result<bool, ArtifactError> {
        self.inner.delete(id)
    }
    fn list_page(
        &self,
        query: &mnemon_artifacts::PageQuery<'_>,
    ) -> Result<Option<Vec<mnemon_artifacts::ListedArtifact>>, ArtifactError> {
        self.inner.list_page(query)
    }
    fn save_expiring(
        &self,
        artifact: &Artifact,
        expiry: mnemon_artifacts::Expiry,
        write_content: &mut dyn FnMut() -> Result<(), ArtifactError>,
    ) -> Result<u64, ArtifactError> {
        self.inner.save_expiring(artifact, expiry, write_content)
    }
    fn expires_at(&self, id: Uuid) -> Result<Option<Option<i64>>, ArtifactError> {
        self.inner.expires_at(id)
    }
    fn list_where(
        &self,
        scope: Option<&str>,
        filter: Option<&mnemon_artifacts::Filter>,
        limit: Option<usize>,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        self.inner.list_where(scope, filter, limit)
    }
    fn count_where(
        &self,
        scope: Option<&str>,
        filter: Option<&mnemon_artifacts::Filter>,
    ) -> Result<u64, ArtifactError> {
        self.inner.count_where(scope, filter)
    }
    fn gc(
        &self,
        backends: &BackendRegistry,
    ) -> Result<mnemon_artifacts::ArtifactSweep, ArtifactError> {
        self.inner.gc(backends)
    }
    fn forget(
        &self,
        scope_prefix: &str,
        backends: &BackendRegistry,
    ) -> Result<mnemon_artifacts::ArtifactSweep, ArtifactError> {
        self.inner.forget(scope_prefix, backends)
    }
}

fn file_config() -> SaveArtifactConfig {
    SaveArtifactConfig::from_json(&with(
        statics(),
        json!({"artifact_storage": "write_to_file", "artifact_storage_id": "plans/plan.txt"}),
    ))
    .unwrap()
}

#[test]
fn content_is_written_before_the_record_is_saved() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("artifacts");
    let store = Arc::new(ContentFirstProbe {
        inner: SqliteArtifactStore::open(dir.path().join("mnemon.sqlite3")).unwrap(),
        root: root.clone(),
    });
    let step = SaveArtifact::new(
        file_config(),
        store.clone(),
        BackendRegistry::with_defaults(&root),
    )
    .unwrap();
    step.run("chat-1", &json!({"content": "the plan"})).unwrap();
    assert_eq!(store.list("chat-1", None).unwrap().len(), 1);
}

#[test]
fn a_failed_record_save_leaves_no_record_pointing_at_missing_content() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mnemon.sqlite3");
    let root = dir.path().join("artifacts");
    let store = Arc::new(SqliteArtifactStore::open(&db).unwrap());
    // Inject the failure into the real store: SQLite aborts every insert of a record.
    let admin = rusqlite::Connection::open(&db).unwrap();
    admin
        .execute_batch(
            "CREATE TRIGGER injected_crash BEFORE INSERT ON artifact_records
             BEGIN SELECT RAISE(ABORT, 'injected crash between content write and record save'); END;",
        )
        .unwrap();
    let step = SaveArtifact::new(
        file_config(),
        store.clone(),
        BackendRegistry::with_defaults(&root),
    )
    .unwrap();
    let err = step
        .run("chat-1", &json!({"content": "the plan"}))
        .unwrap_err();
    assert!(matches!(err, ArtifactError::Database { .. }), "{err}");
    assert!(err.to_string().contains("injected crash"), "{err}");
    // The content may remain as an orphan...
    assert_eq!(
        fs::read_to_string(root.join("plans/plan.txt")).unwrap(),
        "the plan"
    );
    // ...but no record exists, before or after the failure is removed, in this handle or a
    // fresh one (as after a restart).
    admin.execute_batch("DROP TRIGGER injected_crash").unwrap();
    assert!(store.list("chat-1", None).unwrap().is_empty());
    assert!(store.latest("chat-1", "plan").unwrap().is_none());
    let reopened = SqliteArtifactStore::open(&db).unwrap();
    assert!(reopened.list("chat-1", None).unwrap().is_empty());
    // And every record that does exist has its content: save again, then check all.
    step.run("chat-1", &json!({"content": "v2"})).unwrap();
    let registry = BackendRegistry::with_defaults(&root);
    for record in reopened.list("chat-1", None).unwrap() {
        assert!(registry.read_content(&record).unwrap().is_some());
    }
}

// ---------------------------------------------------------------- RFC 9535

fn bookstore() -> Value {
    // RFC 9535, Figure 1.
    json!({ "store": {
        "book": [
          { "category": "reference", "author": "Nigel Rees",
            "title": "Sayings of the Century", "price": 8.95 },
          { "category": "fiction", "author": "Evelyn Waugh",
            "title": "Sword of Honour", "price": 12.99 },
          { "category": "fiction", "author": "Herman Melville",
            "title": "Moby Dick", "isbn": "0-553-21311-3", "price": 8.99 },
          { "category": "fiction", "author": "J. R. R. Tolkien",
            "title": "The Lord of the Rings", "isbn": "0-395-19395-8", "price": 22.99 }
        ],
        "bicycle": { "color": "red", "price": 399 }
    }})
}

fn query(path: &str, value: &Value) -> Vec<Value> {
    JsonPath::parse(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .query(value)
        .all()
        .into_iter()
        .cloned()
        .collect()
}

#[test]
fn rfc9535_table_2_examples() {
    let doc = bookstore();
    let authors = json!([
        "Nigel Rees",
        "Evelyn Waugh",
        "Herman Melville",
        "J. R. R. Tolkien"
    ]);
    assert_eq!(json!(query("$.store.book[*].author", &doc)), authors);
    assert_eq!(json!(query("$..author", &doc)), authors);
    assert_eq!(query("$.store.*", &doc).len(), 2);
    let mut prices: Vec<f64> = query("$.store..price", &doc)
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    prices.sort_by(f64::total_cmp);
    assert_eq!(prices, [8.95, 8.99, 12.99, 22.99, 399.0]);
    assert_eq!(query("$..book[2]", &doc)[0]["title"], "Moby Dick");
    assert_eq!(query("$..book[2].author", &doc), [json!("Herman Melville")]);
    assert!(query("$..book[2].publisher", &doc).is_empty());
    assert_eq!(
        query("$..book[-1]", &doc)[0]["title"],
        "The Lord of the Rings"
    );
    assert_eq!(query("$..book[0,1]", &doc).len(), 2);
    assert_eq!(query("$..book[:2]", &doc).len(), 2);
    assert_eq!(query("$..book[?@.isbn]", &doc).len(), 2);
    let cheap: Vec<Value> = query("$..book[?@.price<10]", &doc)
        .iter()
        .map(|b| b["title"].clone())
        .collect();
    assert_eq!(cheap, [json!("Sayings of the Century"), json!("Moby Dick")]);
    assert_eq!(query("$..*", &doc).len(), 27);
}

#[test]
fn rfc9535_name_slice_and_function_examples() {
    // §2.3.1.3
    let doc = json!({"o": {"j j": {"k.k": 3}}, "'": {"@": 2}});
    assert_eq!(query("$.o['j j']", &doc), [json!({"k.k": 3})]);
    assert_eq!(query("$.o['j j']['k.k']", &doc), [json!(3)]);
    assert_eq!(query("$.o[\"j j\"][\"k.k\"]", &doc), [json!(3)]);
    assert_eq!(query("$[\"'\"][\"@\"]", &doc), [json!(2)]);
    // §2.3.4.3
    let arr = json!(["a", "b", "c", "d", "e", "f", "g"]);
    assert_eq!(query("$[1:3]", &arr), [json!("b"), json!("c")]);
    assert_eq!(query("$[5:]", &arr), [json!("f"), json!("g")]);
    assert_eq!(query("$[1:5:2]", &arr), [json!("b"), json!("d")]);
    assert_eq!(query("$[5:1:-2]", &arr), [json!("f"), json!("d")]);
    assert_eq!(query("$[::-1]", &arr).len(), 7);
    assert_eq!(query("$[::-1]", &arr)[0], "g");
    // §2.4.4 length()
    let doc = json!([{"authors": ["a", "b", "c", "d", "e"]}, {"authors": ["a"]}]);
    assert_eq!(query("$[?length(@.authors) >= 5]", &doc).len(), 1);
}

#[test]
fn rfc9535_rejects_what_the_grammar_does_not_allow() {
    for bad in [
        "$.a[01]",
        " $.a",
        "$.a.",
        "$[?@.a==]",
        "$.store.book[0",
        "$['a'",
    ] {
        assert!(JsonPath::parse(bad).is_err(), "{bad:?} should not parse");
    }
}

#[test]
fn rfc9535_paths_work_in_save_artifact() {
    let env = Env::new();
    let out = env
        .run(
            with(
                statics(),
                json!({"content_path": "$.response.store.book[?@.isbn && @.price > 20].title"}),
            ),
            json!({"response": bookstore()}),
        )
        .unwrap();
    assert_eq!(out["artifact"]["data"], "The Lord of the Rings");
    let err = env
        .run(
            with(statics(), json!({"content_path": "response..author"})),
            json!({"response": bookstore()}),
        )
        .unwrap_err();
    assert!(err.to_string().contains("selected 4"), "{err}");
}

/// Saves with one storage id from several connections at once (as from several processes):
/// the newest record for the key must show its own content, every round (issue 11 item 11).
#[test]
fn concurrent_saves_to_one_storage_id_keep_each_record_with_its_own_content() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("db.sqlite3");
    let root = dir.path().join("artifacts");
    drop(SqliteArtifactStore::open(&database).unwrap());
    let mut mixed = Vec::new();
    for round in 0..ROUNDS {
        let barrier = Arc::new(std::sync::Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (database, root, barrier) = (database.clone(), root.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let store = Arc::new(SqliteArtifactStore::open(&database).unwrap());
                    let marker = format!("round {round} thread {thread}");
                    let config = SaveArtifactConfig::from_json(&with(
                        statics(),
                        json!({"artifact_storage": "write_to_file",
                               "artifact_storage_id": "plans/plan.txt",
                               "artifact_description": marker}),
                    ))
                    .unwrap();
                    let step =
                        SaveArtifact::new(config, store, BackendRegistry::with_defaults(&root))
                            .unwrap();
                    barrier.wait();
                    step.run(&format!("chat-{round}"), &json!({"content": marker}))
                        .unwrap();
                    marker
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        let store = SqliteArtifactStore::open(&database).unwrap();
        let latest = store
            .latest(&format!("chat-{round}"), "plan")
            .unwrap()
            .unwrap();
        let content = fs::read_to_string(root.join("plans/plan.txt")).unwrap();
        let own = store
            .list(&format!("chat-{round}"), None)
            .unwrap()
            .into_iter()
            .filter(|a| a.id == latest.id)
            .count();
        assert_eq!(own, 1);
        if latest.description != content {
            mixed.push((round, latest.description, content));
        }
    }
    assert!(
        mixed.is_empty(),
        "newest record shows another save's content: {mixed:?}"
    );
}
