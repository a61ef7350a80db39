//! Build an embedding library from text, save it, open it again and search it: what
//! `mnemon library import` and `mnemon library query --text` do, as library calls.
//!
//! Run it with `cargo run --example library_search -- [QUESTION] [FILE.md|FILE.txt]...`.
//! Without files it indexes the sample library's source text; without a question it asks about
//! sourdough.
//!
//! The hashing embedder is lexical, not semantic: it matches shared words, not meanings. For
//! real use, embed with `mnemon::embed::OpenAiEmbedder` (any OpenAI-compatible server).

use std::path::PathBuf;

use mnemon::embed::{Embedder, HashingEmbedder};
use mnemon::library::{
    AccessGrant, ChunkBounds, InsertOutcome, Library, NewBit, QueryRequest, chunk_text,
};
use mnemon::memory::{Cl100kTokenizer, Tokenizer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let question = args
        .next()
        .unwrap_or_else(|| "how long should sourdough rise".to_owned());
    let mut files: Vec<PathBuf> = args.map(PathBuf::from).collect();
    if files.is_empty() {
        files.push(concat!(env!("CARGO_MANIFEST_DIR"), "/sample-library/source.txt").into());
    }

    // Chunk every file at sentence ends, embed the chunks in one batch per file, and insert them
    // as bits with real cl100k_base token counts. `mnemon library import` uses 1,000 to 2,000
    // characters (`ChunkBounds::default()`); short chunks suit a lexical embedder better.
    let bounds = ChunkBounds { min: 300, max: 800 };
    let embedder = HashingEmbedder::new(HashingEmbedder::DEFAULT_DIMENSION)?;
    let tokenizer = Cl100kTokenizer;
    let mut library = Library::blank(embedder.model());
    for file in &files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        // The sample's source has `#` comments, `url:`/`title:` headers and `---` separators;
        // keep only its prose.
        let text: String = text
            .lines()
            .filter(|line| {
                !(line.starts_with('#')
                    || line.starts_with("url: ")
                    || line.starts_with("title: ")
                    || *line == "---")
            })
            .map(|line| format!("{line}\n"))
            .collect();
        let chunks = chunk_text(&text, bounds);
        let vectors = embedder.embed(&chunks)?;
        for (chunk, vector) in chunks.iter().zip(vectors) {
            let url = format!("file://{}", file.display());
            let bit = NewBit {
                text: chunk,
                embedding: &vector,
                token_count: tokenizer.count(chunk) as i64,
                url: &url,
                title: None,
                access_tag: None,
            };
            if let InsertOutcome::Duplicate(_) = library.insert_bit(&bit)? {
                eprintln!("skipped a chunk that appears twice");
            }
        }
    }
    println!(
        "indexed {} chunks from {} file(s) with {}",
        library.len(),
        files.len(),
        library.model()
    );

    // Save and reopen, as a host would: the file is a portable Polymath-format library.
    let path = std::env::temp_dir().join(format!("mnemon-example-{}.json", std::process::id()));
    library.save(&path, true)?;
    let reopened = Library::open(&path);
    std::fs::remove_file(&path)?;
    let library = reopened?;

    // Ask: the question is embedded with the library's own embedder.
    let query = embedder
        .embed(&[question.as_str()])?
        .pop()
        .ok_or("the embedder returned no vector")?;
    let request = QueryRequest::new(library.model(), query, 3);
    let result = library.query(&request, &AccessGrant::default())?;
    println!("\nbest matches for {question:?}:");
    for (bit, hit) in result.bits() {
        let preview: String = bit.text()?.chars().take(100).collect();
        println!("{:.3}  {}…", hit.similarity, preview.replace('\n', " "));
    }
    Ok(())
}
