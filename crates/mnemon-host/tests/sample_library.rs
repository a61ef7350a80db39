//! The sample library shipped in `crates/mnemon/sample-library/` (linked from
//! `examples/sample-library/`; served by `mnemon serve` when no library is given) is generated from `source.txt` with the hashing embedder and real
//! cl100k_base token counts. This test rebuilds it and fails when the committed file is stale.
//!
//! Regenerate after editing the source:
//! `MNEMON_UPDATE_SAMPLE=1 cargo test -p mnemon-host --test sample_library`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use mnemon_embed::{Embedder, HashingEmbedder};
use mnemon_library::{AccessPolicy, Library, encode_embedding};
use serde_json::{Map, Value, json};

fn sample_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../mnemon/sample-library")
}

/// One bit of the source: header fields and text.
struct SourceBit {
    url: String,
    title: String,
    access_tag: Option<String>,
    text: String,
}

/// Parses `source.txt`: `---` separates bits; each has `key: value` headers, a blank line, and
/// the text (its lines joined with spaces). `#` lines are comments.
fn parse_source(source: &str) -> Vec<SourceBit> {
    let mut bits = Vec::new();
    let lines: Vec<&str> = source.lines().filter(|l| !l.starts_with('#')).collect();
    for chunk in lines.split(|l| l.trim() == "---") {
        if chunk.iter().all(|l| l.trim().is_empty()) {
            continue;
        }
        let mut headers = Map::new();
        let mut rest = chunk.iter();
        for line in rest.by_ref() {
            if line.trim().is_empty() {
                break;
            }
            let (key, value) = line
                .split_once(':')
                .unwrap_or_else(|| panic!("header line without a colon: {line:?}"));
            headers.insert(key.trim().to_owned(), Value::from(value.trim()));
        }
        let text = rest
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(!text.is_empty(), "a bit without text: {headers:?}");
        let field = |k: &str| headers.get(k).and_then(Value::as_str).map(str::to_owned);
        bits.push(SourceBit {
            url: field("url").expect("every bit needs a url"),
            title: field("title").expect("every bit needs a title"),
            access_tag: field("access_tag"),
            text,
        });
    }
    bits
}

/// Builds the library file's bytes from the source, deterministically.
fn build() -> Vec<u8> {
    let source = std::fs::read_to_string(sample_dir().join("source.txt")).unwrap();
    let bits = parse_source(&source);
    let embedder = HashingEmbedder::default();
    let tokenizer = tiktoken_rs::cl100k_base().unwrap();
    let texts: Vec<&str> = bits.iter().map(|b| b.text.as_str()).collect();
    let vectors = embedder.embed(&texts).unwrap();
    let mut library = Library::blank(embedder.model());
    for (bit, vector) in bits.iter().zip(vectors) {
        let mut value = json!({
            "text": bit.text,
            "info": {"url": bit.url, "title": bit.title},
            "embedding": encode_embedding(&vector),
            "token_count": tokenizer.encode_ordinary(&bit.text).len(),
        });
        if let Some(tag) = &bit.access_tag {
            value["access_tag"] = Value::from(tag.as_str());
        }
        library.insert(&value).unwrap();
    }
    let mut out = Vec::new();
    library.to_writer(&mut out, true).unwrap();
    out
}

#[test]
fn committed_sample_library_is_current() {
    let built = build();
    let path = sample_dir().join("library.json");
    if std::env::var_os("MNEMON_UPDATE_SAMPLE").is_some() {
        std::fs::write(&path, &built).unwrap();
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == built,
        "{} is stale; regenerate it with \
         `MNEMON_UPDATE_SAMPLE=1 cargo test -p mnemon-host --test sample_library`",
        path.display()
    );
}

#[test]
fn sample_library_answers_topic_queries() {
    let library = Library::open(sample_dir().join("library.json")).unwrap();
    let embedder = HashingEmbedder::default();
    assert_eq!(library.model(), embedder.model());
    assert!((20..=40).contains(&library.len()), "{}", library.len());
    let tagged = library.bits().filter(|b| b.access_tag().is_some()).count();
    assert!((1..=2).contains(&tagged));

    let ask = |question: &str| {
        let query = embedder.embed(&[question]).unwrap().remove(0);
        let args = json!({
            "version": 1,
            "query_embedding_model": embedder.model(),
            "query_embedding": encode_embedding(&query),
            "count": 1,
            "count_type": "bit",
        });
        let result = mnemon_library::wire::query(
            &library,
            args.as_object().unwrap(),
            &AccessPolicy::default(),
            &mnemon_library::QueryOptions::default(),
        )
        .unwrap();
        result["bits"][0]["info"]["url"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(ask("how do honey bees keep warm in winter").contains("apiary-notes"));
    assert!(ask("when is my sourdough starter ready to feed").contains("crumb-journal"));
    assert!(ask("how does a fresnel lens focus the lighthouse lamp").contains("lamp-and-rock"));
    assert!(ask("what is an embedding library").contains("mnemon.example"));
}
