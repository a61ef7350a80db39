//! One agent turn through every part of Mnemon, over a fresh data directory:
//!
//! 1. a tool's image is stored as an asset, and the model sees only its meta;
//! 2. the model's tool call points at it with `asset://` references, resolved before the tool runs;
//! 3. the tool's result is saved as an artifact and loaded into the next prompt;
//! 4. the turn goes into durable conversation memory and comes back by similarity;
//! 5. related knowledge comes from the sample embedding library.
//!
//! Run it with `cargo run --example agent_turn`.

use mnemon::Mnemon;
use mnemon::artifacts::{
    ArtifactMemory, ArtifactMemoryConfig, PromptTemplate, SaveArtifact, SaveArtifactConfig,
};
use mnemon::embed::{Embedder, HashingEmbedder};
use mnemon::library::{AccessGrant, QueryRequest};
use mnemon::memory::{RetrievalQuery, RetrieveOptions};
use mnemon::refs::{CommandSpec, Mode, resolve_params};
use mnemon::types::{Asset, Bytes, Map, Value, meta, render_meta_block};
use serde_json::json;

/// The first bytes of a PNG file, standing in for a tool's real output.
const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("mnemon-agent-turn-{}", std::process::id()));
    let outcome = turn(&dir);
    // The directory is scratch space: leave nothing behind, whatever happened.
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

fn turn(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let mnemon = Mnemon::open(dir)?;
    println!("data directory: {}", mnemon.dir().display());

    // 1. The image stays out of the chat; the model reads its meta block instead.
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
    mnemon.assets().put(&asset)?;
    println!(
        "\n# what the model sees\n{}",
        render_meta_block(&[meta(&asset)])
    );

    // 2. The model's tool call carries references; the tool receives the values themselves.
    let spec = CommandSpec::from_yaml(
        "name: resize_image\nparameters:\n  - name: image\n    asset_ref_acceptable: true\n  - name: width\n    asset_ref_acceptable: true\n",
    )?;
    let call = json!({
        "image": "<|asset://photo-1/content/image|>",
        "width": {"asset_id": "photo-1", "field_path": ["content", "size", "w"]},
    });
    let params = resolve_params(&spec, &call, mnemon.assets(), Mode::Strict)?;
    let width = params
        .get("width")
        .and_then(Value::to_json)
        .and_then(|w| w.as_u64())
        .ok_or("the width did not resolve to a number")?;
    let image_len = params
        .get("image")
        .and_then(Value::as_bytes)
        .map(|b| b.data().len())
        .ok_or("the image did not resolve to bytes")?;
    println!("\n# the tool receives\nimage: {image_len} bytes of image/png, width: {width}");

    // 3. The tool's result becomes an artifact, stored in a file under <dir>/artifacts/.
    let save = SaveArtifact::new(
        SaveArtifactConfig::from_json(&json!({
            "artifact_key": "resize_report",
            "artifact_type": "report",
            "artifact_name": "Resize report",
            "artifact_storage": "write_to_file",
            "artifact_storage_id": "reports/resize.json",
        }))?,
        mnemon.artifacts(),
        mnemon.backends().clone(),
    )?;
    save.run(
        "chat-1",
        &json!({"content": {"resized_to": width / 2, "source": "asset://photo-1"}}),
    )?;
    let recall = ArtifactMemory::new(
        ArtifactMemoryConfig::from_json(&json!({}))?,
        mnemon.artifacts(),
        mnemon.backends().clone(),
        "chat-1",
    );
    let loaded = recall.load(&json!({"artifact_keys": "Summarise {resize_report}."}))?;
    let template = PromptTemplate::parse("{related_artifacts}\nQuestion: {question}")?;
    let mut vars = serde_json::Map::new();
    vars.insert("related_artifacts".into(), json!(loaded.text()));
    vars.insert("question".into(), json!("How wide is the image now?"));
    println!("\n# the next prompt\n{}", template.render(&vars)?);

    // 4. The turn goes into durable memory, with embeddings, and comes back by similarity.
    let embedder = HashingEmbedder::new(HashingEmbedder::DEFAULT_DIMENSION)?;
    let session = mnemon.session("chat-1")?;
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
    let vectors = embedder.embed(&texts)?;
    let messages = turn
        .iter()
        .zip(vectors)
        .map(|((role, name, text), vector)| {
            json!({"name": name, "content": text, "role": role, "embedding": vector}).into()
        })
        .collect();
    session.add(messages)?;
    let question = embedder
        .embed(&["how wide is the ferry photo"])?
        .pop()
        .ok_or("the embedder returned no vector")?;
    let options = RetrieveOptions {
        top_k: Some(2),
        preserve_order: false,
        ..RetrieveOptions::default()
    };
    println!("\n# memory recalls, for \"how wide is the ferry photo\"");
    for hit in session.retrieve_by_embedding(RetrievalQuery::Vector(question), &options, None)? {
        println!("{:.3}  {}", hit.score, hit.message.to_str());
    }

    // 5. Knowledge comes from an embedding library in <dir>/libraries/.
    std::fs::create_dir_all(mnemon.libraries_dir())?;
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/sample-library/library.json"),
        mnemon.libraries_dir().join("sample.json"),
    )?;
    let library = mnemon.library("sample")?;
    let query = embedder
        .embed(&["why does a lighthouse lens have rings"])?
        .pop()
        .ok_or("the embedder returned no vector")?;
    let request = QueryRequest::new(library.model(), query, 2);
    let result = library.query(&request, &AccessGrant::default())?;
    println!("\n# the library answers \"why does a lighthouse lens have rings\"");
    for (bit, hit) in result.bits() {
        let first_line = bit.text()?.lines().next().unwrap_or_default();
        println!("{:.3}  {first_line}", hit.similarity);
    }
    Ok(())
}
