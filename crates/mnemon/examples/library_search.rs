//! Build an embedding library from text, save it, open it again and search it: what
//! `mnemon library import` and `mnemon library query --text` do, as library calls.
//!
//! Run it with `cargo run --example library_search -- [QUESTION] [FILE.md|FILE.txt|DIR]...`.
//! Without files it indexes the sample library's source text; without a question it asks about
//! sourdough.
//!
//! The hashing embedder is lexical, not semantic: it matches shared words, not meanings. For
//! real use, embed with `mnemon::embed::OpenAiEmbedder` (any OpenAI-compatible server).

use std::path::{Path, PathBuf};

use mnemon::embed::{Cl100kTokenizer, Embedder, HashingEmbedder};
use mnemon::import::{Document, ImportOptions, Importer, find_sources, save_library};
use mnemon::library::{AccessGrant, ChunkBounds, Library, QueryRequest};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let question = args
        .next()
        .unwrap_or_else(|| "how long should sourdough rise".to_owned());
    let files: Vec<PathBuf> = args.map(PathBuf::from).collect();

    // The documents: the files given, read as `mnemon library import` reads them (a Markdown
    // file's front matter gives its title and is not embedded), or the sample's source.
    let documents = if files.is_empty() {
        vec![sample_source()?]
    } else {
        find_sources(&files, None)?
            .iter()
            .map(Document::read)
            .collect::<Result<Vec<_>, _>>()?
    };

    // Chunk at sentence ends, embed in checked batches, count cl100k_base tokens: the import
    // pipeline. `mnemon library import` uses 1,000 to 2,000 characters (the default); short
    // chunks suit a lexical embedder better.
    let embedder = HashingEmbedder::new(HashingEmbedder::DEFAULT_DIMENSION)?;
    let options = ImportOptions {
        bounds: ChunkBounds { min: 300, max: 800 },
        ..ImportOptions::default()
    };
    let imported = Importer::new(&embedder, &Cl100kTokenizer)
        .with_options(options)
        .import(&documents)?;
    if imported.duplicates > 0 {
        eprintln!("skipped {} chunks that appear twice", imported.duplicates);
    }
    println!(
        "indexed {} chunks ({} tokens) from {} document(s) with {}",
        imported.bits,
        imported.token_count,
        documents.len(),
        imported.library.model()
    );

    // Save and reopen, as a host would: the file is a portable Polymath-format library.
    let path = std::env::temp_dir().join(format!("mnemon-example-{}.json", std::process::id()));
    save_library(&imported.library, &path)?;
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

/// The sample library's source text as one document. The file has `#` comments, `url:` and
/// `title:` headers and `---` separators (its own format, read by the sample's generator);
/// keep only its prose.
fn sample_source() -> Result<Document, Box<dyn std::error::Error>> {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/sample-library/source.txt"
    ));
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let prose: String = text
        .lines()
        .filter(|line| {
            !(line.starts_with('#')
                || line.starts_with("url: ")
                || line.starts_with("title: ")
                || *line == "---")
        })
        .map(|line| format!("{line}\n"))
        .collect();
    Ok(Document::from_text(
        format!("file://{}", path.display()),
        path,
        &prose,
    ))
}
