//! One agent turn through every component, over one data directory:
//! store an image asset, resolve a reference to it in a tool call's parameters, save the tool's
//! result as an artifact, load it into a prompt, add the turn to memory and recall it, and
//! query an embedding library for related knowledge.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use mnemon::artifacts::{
    ArtifactMemory, ArtifactMemoryConfig, PromptTemplate, SaveArtifact, SaveArtifactConfig,
};
use mnemon::embed::{Embedder, HashingEmbedder};
use mnemon::library::{AccessPolicy, Library};
use mnemon::memory::{MemoryQuery, RetrievalQuery, RetrieveOptions};
use mnemon::refs::{CommandSpec, Mode, render_default, resolve_params};
use mnemon::types::{Asset, Bytes, Map, Value, meta, render_meta_block};
use mnemon::{Mnemon, OpenOptions};
use serde_json::json;

/// A 1×1 PNG, as a tool would have produced it.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
];

#[test]
fn one_agent_turn_through_every_component() {
    let dir = tempfile::tempdir().unwrap();
    let open = || Mnemon::open(dir.path()).unwrap();
    agent_turn(&open, &dir.path().join("artifacts"));
}

/// The same turn with the stores in PostgreSQL (the tests' server, docs/postgres.md) and the
/// artifact files under a root given explicitly, as several machines would share it.
#[test]
fn one_agent_turn_on_postgresql() {
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("facade_turn").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared-artifacts");
    let options = OpenOptions::postgres(&url).with_write_to_file_root(&shared);
    let open = || Mnemon::open_with(dir.path().join("data"), &options).unwrap();
    agent_turn(&open, &shared);
    // Nothing of the stores went into the data directory: it holds only the libraries.
    assert!(!dir.path().join("data").join(mnemon::DATABASE_FILE).exists());
    assert!(!dir.path().join("data").join(mnemon::ARTIFACTS_DIR).exists());

    // Without a root, content stays in the database: `write_to_file` is not offered.
    let inline = Mnemon::open_with(dir.path().join("data"), &OpenOptions::postgres(&url)).unwrap();
    assert!(inline.backends().resolve("write_to_file").is_err());
    assert!(inline.backends().resolve("inline").is_ok());
}

/// One turn through every component; `open` opens the same stores each time and
/// `artifacts_root` is where `write_to_file` content lands.
fn agent_turn(open: &dyn Fn() -> Mnemon, artifacts_root: &Path) {
    let mnemon = open();

    // 1. A tool produced an image: keep it out of the chat as an asset; the model sees its meta.
    let mut content = Map::new();
    content.insert(
        "image".into(),
        Bytes::with_media_type(PNG.to_vec(), "image/png").into(),
    );
    content.insert("caption".into(), "a ferry leaving the harbour".into());
    content.insert("size".into(), Value::from_json(json!({"w": 640, "h": 480})));
    let asset = Asset::new(Value::Map(content))
        .with_id("photo-1")
        .with_type("image");
    mnemon.assets().put(&asset).unwrap();
    let prompt_block = render_meta_block(&[meta(&asset)]);
    assert!(prompt_block.contains("<class 'bytes'>"));
    assert!(!prompt_block.contains("iVBOR"), "no payload in the prompt");

    // 2. The model calls a tool with references; the tool receives the objects themselves.
    let spec = CommandSpec::from_yaml(
        "name: resize_image\nparameters:\n  - name: image\n    asset_ref_acceptable: true\n  - name: width\n    asset_ref_acceptable: true\n",
    )
    .unwrap();
    let call = json!({
        "image": "<|asset://photo-1/content/image|>",
        "width": {"asset_id": "photo-1", "field_path": ["content", "size", "w"]},
    });
    let params = resolve_params(&spec, &call, mnemon.assets(), Mode::Strict).unwrap();
    let image = params["image"]
        .as_bytes()
        .expect("the image arrives as bytes");
    assert_eq!(image.data(), PNG);
    assert_eq!(image.media_type(), Some("image/png"));
    assert_eq!(params["width"].to_json(), Some(json!(640)));

    // A reply shown to a person embeds the image.
    let rendered = render_default(
        "Here it is: ![ferry](<|asset://photo-1/content/image|>)",
        mnemon.assets(),
    );
    assert!(rendered.text.contains("(data:image/png;base64,"));

    // 3. The tool's result is saved as an artifact, content in a root-confined file.
    let save = SaveArtifact::new(
        SaveArtifactConfig::from_json(&json!({
            "artifact_key": "resize_report",
            "artifact_type": "report",
            "artifact_name": "Resize report",
            "artifact_storage": "write_to_file",
            "artifact_storage_id": "reports/resize.json",
        }))
        .unwrap(),
        mnemon.artifacts(),
        mnemon.backends().clone(),
    )
    .unwrap();
    let outputs = save
        .run(
            "chat-1",
            &json!({"content": {"resized_to": 320, "source": "asset://photo-1"}}),
        )
        .unwrap();
    assert_eq!(outputs["artifact"]["key"], "resize_report");
    assert!(artifacts_root.join("reports/resize.json").is_file());

    // 4. The next step loads it into its prompt by mentioning its key.
    let memory = ArtifactMemory::new(
        ArtifactMemoryConfig::from_json(&json!({})).unwrap(),
        mnemon.artifacts(),
        mnemon.backends().clone(),
        "chat-1",
    );
    let loaded = memory
        .load(&json!({"artifact_keys": "Summarise {resize_report}."}))
        .unwrap();
    assert!(loaded.missing_keys.is_empty());
    let template = PromptTemplate::parse("{related_artifacts}\nQuestion: {question}").unwrap();
    let mut vars = serde_json::Map::new();
    vars.insert("related_artifacts".into(), json!(loaded.text()));
    vars.insert("question".into(), json!("How large is the image now?"));
    let prompt = template.render(&vars).unwrap();
    assert!(prompt.starts_with("RELATED ARTIFACTS\n"));
    assert!(prompt.contains("key: resize_report"));
    assert!(prompt.contains("\"resized_to\": 320"));
    // Another chat sees nothing.
    let other = ArtifactMemory::new(
        ArtifactMemoryConfig::from_json(&json!({})).unwrap(),
        mnemon.artifacts(),
        mnemon.backends().clone(),
        "chat-2",
    );
    assert_eq!(
        other
            .load(&json!({"artifact_keys": ["resize_report"]}))
            .unwrap()
            .text(),
        ""
    );

    // 5. The turn goes into durable memory, with embeddings, and comes back by similarity.
    let embedder = HashingEmbedder::new(HashingEmbedder::DEFAULT_DIMENSION).unwrap();
    let session = mnemon.session("chat-1").unwrap();
    let turn = [
        (
            "user",
            "Mara",
            "Please shrink the ferry photo to half its width.",
        ),
        (
            "assistant",
            "Agent",
            "Done: the ferry photo is now 320 pixels wide.",
        ),
        ("user", "Mara", "What time does the bakery open tomorrow?"),
    ];
    let texts: Vec<&str> = turn.iter().map(|(_, _, text)| *text).collect();
    let vectors = embedder.embed(&texts).unwrap();
    let messages = turn
        .iter()
        .zip(&vectors)
        .map(|((role, name, text), vector)| {
            json!({"name": name, "content": text, "role": role, "embedding": vector}).into()
        })
        .collect();
    session.add(messages).unwrap();
    assert_eq!(session.size().unwrap(), 3);
    let query = embedder.embed(&["how wide is the ferry photo"]).unwrap();
    let best = session
        .retrieve_by_embedding(
            RetrievalQuery::Vector(query.into_iter().next().unwrap()),
            &RetrieveOptions::default(),
            None,
        )
        .unwrap();
    assert!(best[0].message.content_text().contains("ferry photo"));
    // Reopening the directory finds the same thread.
    drop(session);
    let reopened = open();
    let recent = reopened
        .session("chat-1")
        .unwrap()
        .render(&MemoryQuery {
            recent_n: Some(1),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(recent, "Mara: What time does the bakery open tomorrow?");

    // 6. Knowledge comes from an embedding library in the data directory.
    std::fs::create_dir_all(reopened.libraries_dir()).unwrap();
    let sample = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/sample-library/library.json"
    );
    std::fs::copy(sample, reopened.libraries_dir().join("sample.json")).unwrap();
    let library: Library = reopened.library("sample").unwrap();
    let question = embedder.embed(&["ferry harbour timetable"]).unwrap();
    let args = json!({
        "version": 1,
        "query_embedding_model": library.model(),
        "query_embedding": mnemon::library::encode_embedding(&question[0]),
        "count": 2,
        "count_type": "bit",
    });
    let result = mnemon::library::wire::query(
        &library,
        args.as_object().unwrap(),
        &AccessPolicy::default(),
        &mnemon::library::QueryOptions::default(),
    )
    .unwrap();
    let bits = result["bits"].as_array().unwrap();
    assert_eq!(bits.len(), 2);
    assert!(bits[0]["similarity"].as_f64().unwrap() >= bits[1]["similarity"].as_f64().unwrap());
    assert!(reopened.library("../escape").is_err());
}
