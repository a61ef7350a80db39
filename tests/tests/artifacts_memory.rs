//! ArtifactMemory (docs/reference/artifacts.md#artifactmemory) and prompt templates
//! (docs/reference/artifacts.md#prompt-templates).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use mnemon_artifacts::{
    ArtifactError, ArtifactMemory, ArtifactMemoryConfig, ArtifactStore, BackendRegistry,
    InMemoryArtifactStore, PromptTemplate, SaveArtifact, SaveArtifactConfig, SqliteArtifactStore,
    render_block,
};
use mnemon_types::Artifact;
use mnemon_types::artifact::Timestamp;
use serde_json::{Map, Value, json};
use uuid::Uuid;

const SPEC_BLOCK: &str = "RELATED ARTIFACTS

id: 00000000-0000-0000-0000-000000000000
key: my_key
type: my_type
name: my_name
description: my_description
data:
data stored in artifact";

fn spec_artifact(scope: &str) -> Artifact {
    let mut a = Artifact::new(scope, "my_key", "my_type", "my_name")
        .with_description("my_description")
        .with_data(json!("data stored in artifact"));
    a.id = Uuid::nil();
    a
}

fn memory(store: Arc<dyn ArtifactStore>, scope: &str) -> ArtifactMemory {
    ArtifactMemory::new(
        ArtifactMemoryConfig::default(),
        store,
        BackendRegistry::new(),
        scope,
    )
}

#[test]
fn the_rendered_block_is_exactly_the_spec_example() {
    assert_eq!(
        render_block(&[spec_artifact("s")], &BackendRegistry::new()).unwrap(),
        SPEC_BLOCK
    );
    let store = Arc::new(InMemoryArtifactStore::new());
    store.save(&spec_artifact("chat-1")).unwrap();
    let loaded = memory(store, "chat-1")
        .load(&json!({"artifact_keys": ["my_key"]}))
        .unwrap();
    assert_eq!(loaded.variables["related_artifacts"], SPEC_BLOCK);
    assert_eq!(loaded.text(), SPEC_BLOCK);
    assert!(loaded.missing_keys.is_empty());
}

/// A `null` content renders as no content: the two cannot be told apart once the record has
/// been through JSON (a backup, `mnemon migrate`), so they must not render differently before.
#[test]
fn a_null_content_renders_as_no_content() {
    let mut none = spec_artifact("s");
    none.data = None;
    let null = spec_artifact("s").with_data(Value::Null);
    let registry = BackendRegistry::new();
    let expected = SPEC_BLOCK.replace("data stored in artifact", "");
    assert_eq!(render_block(&[none], &registry).unwrap(), expected);
    assert_eq!(render_block(&[null], &registry).unwrap(), expected);
}

fn two_artifacts() -> (Arc<InMemoryArtifactStore>, Artifact, Artifact) {
    let store = Arc::new(InMemoryArtifactStore::new());
    let plan = Artifact::new("chat-1", "plan", "plan", "The plan").with_data(json!("1. parse"));
    let files = Artifact::new("chat-1", "file_list", "artifact_list", "Files")
        .with_description("files to generate")
        .with_data(json!(["main.rs", "lib.rs"]));
    store.save(&plan).unwrap();
    store.save(&files).unwrap();
    (store, plan, files)
}

fn block_of(a: &Artifact, data: &str) -> String {
    format!(
        "id: {}\nkey: {}\ntype: {}\nname: {}\ndescription: {}\ndata:\n{data}",
        a.id, a.key, a.artifact_type, a.name, a.description
    )
}

#[test]
fn several_artifacts_in_the_order_given_separated_by_one_blank_line() {
    let (store, plan, files) = two_artifacts();
    let loaded = memory(store, "chat-1")
        .load(&json!({"artifact_keys": ["file_list", "plan"]}))
        .unwrap();
    let expected = format!(
        "RELATED ARTIFACTS\n\n{}\n\n{}",
        // Non-string data is shown as pretty JSON.
        block_of(&files, "[\n  \"main.rs\",\n  \"lib.rs\"\n]"),
        block_of(&plan, "1. parse"),
    );
    assert_eq!(loaded.text(), expected);
    assert_eq!(loaded.artifacts, [files, plan]);
}

#[test]
fn keys_as_a_single_key_or_mentioned_in_text() {
    let (store, plan, files) = two_artifacts();
    let memory = memory(store, "chat-1");
    let single = memory.load(&json!({"artifact_keys": "plan"})).unwrap();
    assert_eq!(single.artifacts, std::slice::from_ref(&plan));
    let text = memory
        .load(&json!({"artifact_keys": "Tell me about {plan} and {file_list}"}))
        .unwrap();
    assert_eq!(text.artifacts, [plan.clone(), files.clone()]);
    // De-duplicated, first mention first.
    let repeated = memory
        .load(&json!({"artifact_keys": ["file_list", "plan", "file_list", "plan"]}))
        .unwrap();
    assert_eq!(repeated.artifacts, [files, plan]);
}

#[test]
fn unresolved_keys_are_reported_not_rendered() {
    let (store, plan, _) = two_artifacts();
    let loaded = memory(store, "chat-1")
        .load(&json!({"artifact_keys": "Compare {nope} with {plan} and {gone}"}))
        .unwrap();
    assert_eq!(loaded.missing_keys, ["nope", "gone"]);
    assert_eq!(
        loaded.text(),
        format!("RELATED ARTIFACTS\n\n{}", block_of(&plan, "1. parse"))
    );
}

#[test]
fn no_artifacts_render_the_empty_string() {
    let (store, _, _) = two_artifacts();
    let memory = memory(store, "chat-1");
    for input in [
        json!([]),
        json!(null),
        json!("no mentions here {}"),
        json!(["nope"]),
    ] {
        let loaded = memory.load(&json!({ "artifact_keys": input })).unwrap();
        assert_eq!(loaded.variables["related_artifacts"], "", "{input}");
    }
}

#[test]
fn other_chats_artifacts_are_never_visible() {
    let (store, _, _) = two_artifacts();
    store
        .save(&Artifact::new("chat-2", "secret", "note", "Other chat's").with_data(json!("x")))
        .unwrap();
    store
        .save(&Artifact::new("chat-2", "plan", "plan", "Other chat's plan").with_data(json!("y")))
        .unwrap();
    let loaded = memory(store.clone(), "chat-1")
        .load(&json!({"artifact_keys": ["secret", "plan"]}))
        .unwrap();
    assert_eq!(loaded.missing_keys, ["secret"]);
    assert_eq!(loaded.artifacts.len(), 1);
    assert_eq!(loaded.artifacts[0].name, "The plan");
    assert!(!loaded.text().contains("Other chat"));
    let loaded = memory(store, "chat-2")
        .load(&json!({"artifact_keys": "plan"}))
        .unwrap();
    assert_eq!(loaded.artifacts[0].name, "Other chat's plan");
}

#[test]
fn the_most_recent_save_is_loaded_even_within_one_microsecond() {
    let store = Arc::new(InMemoryArtifactStore::new());
    let instant = Timestamp::now();
    for (i, text) in ["old", "new"].iter().enumerate() {
        let mut a = Artifact::new("chat-1", "plan", "plan", *text).with_data(json!(text));
        a.created_at = instant;
        a.id = Uuid::from_u128(10 - i as u128);
        store.save(&a).unwrap();
    }
    let loaded = memory(store, "chat-1")
        .load(&json!({"artifact_keys": "plan"}))
        .unwrap();
    assert!(loaded.text().ends_with("data:\nnew"), "{}", loaded.text());
}

#[test]
fn config_keys_and_load_artifact_false() {
    let (store, _, _) = two_artifacts();
    let config = ArtifactMemoryConfig::from_json(&json!({
        "class_path": "ix.memory.artifacts.ArtifactMemory",
        "config": {"input_key": "wanted", "memory_key": "context", "save_artifact": false},
    }))
    .unwrap();
    let memory = ArtifactMemory::new(config, store.clone(), BackendRegistry::new(), "chat-1");
    assert_eq!(memory.memory_variables(), ["context"]);
    let loaded = memory.load(&json!({"wanted": "plan"})).unwrap();
    assert!(
        loaded.variables["context"]
            .as_str()
            .unwrap()
            .contains("The plan")
    );

    let off = ArtifactMemoryConfig::from_json(&json!({"load_artifact": false})).unwrap();
    let memory = ArtifactMemory::new(off, store, BackendRegistry::new(), "chat-1");
    // Nothing is loaded, not even the input is required.
    let loaded = memory.load(&json!({})).unwrap();
    assert_eq!(
        loaded.variables,
        json!({"related_artifacts": ""})
            .as_object()
            .unwrap()
            .clone()
    );

    let defaults = ArtifactMemoryConfig::from_json(&json!({})).unwrap();
    assert!(defaults.load_artifact);
    assert_eq!(defaults.input_key, "artifact_keys");
    assert_eq!(defaults.memory_key, "related_artifacts");
    assert!(ArtifactMemoryConfig::from_json(&json!({"memroy_key": "x"})).is_err());
}

#[test]
fn a_missing_or_malformed_keys_input_is_an_error() {
    let (store, _, _) = two_artifacts();
    let memory = memory(store, "chat-1");
    let err = memory.load(&json!({"question": "hi"})).unwrap_err();
    assert!(matches!(err, ArtifactError::BadKeysInput { .. }), "{err}");
    assert!(err.to_string().contains("artifact_keys"));
    assert!(memory.load(&json!({"artifact_keys": {"a": 1}})).is_err());
}

#[test]
fn content_in_a_file_is_read_through_its_backend() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("artifacts");
    let store = Arc::new(SqliteArtifactStore::open(dir.path().join("mnemon.sqlite3")).unwrap());
    let backends = BackendRegistry::with_defaults(&root);
    let save = |key: &str, id: &str, content: Value| {
        let config = SaveArtifactConfig::from_json(&json!({
            "artifact_key": key, "artifact_type": "file", "artifact_name": id,
            "artifact_storage": "write_to_file", "artifact_storage_id": id,
        }))
        .unwrap();
        SaveArtifact::new(config, store.clone(), backends.clone())
            .unwrap()
            .run("chat-1", &json!({ "content": content }))
            .unwrap()
    };
    save("code", "src/main.rs", json!("fn main() {}\n"));
    save("manifest", "files.json", json!({"files": ["src/main.rs"]}));
    let memory = ArtifactMemory::new(
        ArtifactMemoryConfig::default(),
        store.clone(),
        backends.clone(),
        "chat-1",
    );
    let loaded = memory
        .load(&json!({"artifact_keys": ["code", "manifest"]}))
        .unwrap();
    let text = loaded.text();
    assert!(
        text.contains("name: src/main.rs\ndescription: \ndata:\nfn main() {}\n\n\nid: "),
        "{text}"
    );
    assert!(
        text.ends_with("data:\n{\n  \"files\": [\n    \"src/main.rs\"\n  ]\n}"),
        "{text}"
    );

    // A record whose file was removed behind our back is reported, not rendered as empty.
    std::fs::remove_file(root.join("files.json")).unwrap();
    let err = memory
        .load(&json!({"artifact_keys": ["manifest"]}))
        .unwrap_err();
    assert!(
        matches!(err, ArtifactError::ContentNotFound { .. }),
        "{err}"
    );
}

// ---------------------------------------------------------------- templates

const SPEC_TEMPLATE: &str = "{related_artifacts}\n\nTell me about the artifact [{artifact_keys}]";

#[test]
fn the_spec_template_lists_its_input_variables() {
    let template = PromptTemplate::parse(SPEC_TEMPLATE).unwrap();
    assert_eq!(
        template.input_variables(),
        ["related_artifacts", "artifact_keys"]
    );
}

#[test]
fn a_chain_checks_before_running_that_memory_provides_the_variables() {
    let (store, plan, _) = two_artifacts();
    let template = PromptTemplate::parse(SPEC_TEMPLATE).unwrap();
    let memory = memory(store, "chat-1");
    // The chain's own input plus what the memory provides cover the template.
    let mut provided = memory.memory_variables();
    provided.push("artifact_keys");
    assert!(template.missing_variables(&provided).is_empty());
    // Without the memory, the check names what is missing.
    assert_eq!(
        template.missing_variables(&["artifact_keys"]),
        ["related_artifacts"]
    );

    let inputs = json!({"artifact_keys": "plan"});
    let mut variables: Map<String, Value> = inputs.as_object().unwrap().clone();
    variables.extend(memory.load(&inputs).unwrap().variables);
    let prompt = template.render(&variables).unwrap();
    assert_eq!(
        prompt,
        format!(
            "RELATED ARTIFACTS\n\n{}\n\nTell me about the artifact [plan]",
            block_of(&plan, "1. parse")
        )
    );
}

#[test]
fn rendering_without_a_variable_names_it() {
    let template = PromptTemplate::parse(SPEC_TEMPLATE).unwrap();
    let err = template
        .render(json!({"artifact_keys": "plan"}).as_object().unwrap())
        .unwrap_err();
    assert!(
        matches!(&err, ArtifactError::MissingVariables { names } if names == &["related_artifacts"])
    );
    assert!(err.to_string().contains("related_artifacts"));
}

#[test]
fn doubled_braces_are_literal_braces() {
    let template = PromptTemplate::parse("Return JSON like {{\"key\": \"{key}\"}}").unwrap();
    assert_eq!(template.input_variables(), ["key"]);
    assert_eq!(
        template
            .render(json!({"key": "plan"}).as_object().unwrap())
            .unwrap(),
        "Return JSON like {\"key\": \"plan\"}"
    );
}
