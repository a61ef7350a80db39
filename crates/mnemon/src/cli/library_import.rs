//! `mnemon library import`: builds a library from Markdown and text files.
//!
//! The pipeline (sources, front matter and titles, chunking, checked batch embedding, token
//! counts, the atomic save) is `mnemon_import`'s; this module parses the flags, picks the
//! embedder, shows progress and prints the summary.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::anyhow;
use clap::{Args, ValueEnum};
use mnemon_embed::{Cl100kTokenizer, Embedder, HashingEmbedder, OpenAiEmbedder};
use mnemon_import::{Document, ImportError, ImportOptions, Importer, find_sources, save_library};
use mnemon_library::ChunkBounds;
use serde_json::json;

use super::{CliError, CliResult, print_json};

/// Which embedder turns chunks into vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum EmbedderKind {
    /// Offline hashing embedder: deterministic and free, but lexical, not semantic.
    Hash,
    /// An OpenAI-compatible API (key from OPENAI_API_KEY, API root from OPENAI_BASE_URL, model
    /// from --model or OPENAI_EMBEDDING_MODEL).
    Openai,
}

/// Arguments of `mnemon library import`.
#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// Markdown or text files, or directories searched recursively for *.md, *.markdown,
    /// *.txt and *.text (hidden entries skipped, sorted by path). A Markdown file's title is
    /// its YAML front matter's `title:`, else its first heading, else its file name; the front
    /// matter itself is not embedded.
    #[arg(required = true, value_name = "DIR|FILE")]
    inputs: Vec<PathBuf>,
    /// The library file to write.
    #[arg(long, value_name = "LIB.json")]
    out: PathBuf,
    /// Replace `--out` if it exists.
    #[arg(long)]
    force: bool,
    /// The embedder.
    #[arg(long, value_enum, default_value_t = EmbedderKind::Hash)]
    embedder: EmbedderKind,
    /// The model: for openai an API model name (default text-embedding-3-small; a leading
    /// `openai.com:` is accepted); for hash a name such as `mnemon:hashing-v1-512`.
    #[arg(long, value_name = "M")]
    model: Option<String>,
    /// The vector length (hash: default 512; openai: needed for models it does not know, and
    /// shortens text-embedding-3 vectors).
    #[arg(long, value_name = "N")]
    dimension: Option<usize>,
    /// Prefix for each bit's `info.url`, followed by the file's path relative to the input
    /// directory (default: the file's path as found).
    #[arg(long, value_name = "URL")]
    url_prefix: Option<String>,
    /// Shortest chunk, in characters (a file's last chunk may be shorter).
    #[arg(long, default_value_t = 1000, value_name = "CHARS")]
    min_chars: usize,
    /// Longest chunk, in characters.
    #[arg(long, default_value_t = 2000, value_name = "CHARS")]
    max_chars: usize,
    /// Chunks embedded per call.
    #[arg(long, default_value_t = 64, value_name = "N")]
    batch_size: usize,
}

fn build_embedder(args: &ImportArgs) -> Result<Box<dyn Embedder>, CliError> {
    match args.embedder {
        EmbedderKind::Hash => {
            let embedder = match (&args.model, args.dimension) {
                (Some(model), dimension) => {
                    let e = HashingEmbedder::from_model_name(model).ok_or_else(|| {
                        CliError::input(anyhow!(
                            "--model {model:?} is not a hashing model of 1 to {} dimensions; \
                             use a name such as mnemon:hashing-v1-512, or --dimension",
                            HashingEmbedder::MAX_DIMENSION
                        ))
                    })?;
                    if dimension.is_some_and(|d| d != e.dimension()) {
                        return Err(CliError::input(anyhow!(
                            "--dimension disagrees with the model {model}"
                        )));
                    }
                    e
                }
                (None, Some(d)) => HashingEmbedder::new(d).map_err(CliError::input)?,
                (None, None) => HashingEmbedder::default(),
            };
            Ok(Box::new(embedder))
        }
        EmbedderKind::Openai => {
            let mut builder = OpenAiEmbedder::from_env().map_err(CliError::input)?;
            if let Some(model) = &args.model {
                builder = builder.model(model.as_str());
            }
            if let Some(d) = args.dimension {
                builder = builder.dimension(d);
            }
            Ok(Box::new(builder.build().map_err(CliError::input)?))
        }
    }
}

/// An import error as the CLI reports it: the input's fault exits with 2, the rest with 1.
fn cli_error(error: ImportError) -> CliError {
    if error.is_input() {
        CliError::input(error)
    } else {
        CliError::failure(error)
    }
}

/// Runs `mnemon library import`: the pipeline is `mnemon_import`'s; this adds the flags, the
/// progress bar and the summary.
pub(crate) fn run(args: ImportArgs, quiet: bool) -> CliResult {
    if args.out.exists() && !args.force {
        return Err(CliError::input(anyhow!(
            "{} exists; pass --force to replace it",
            args.out.display()
        )));
    }
    if args.batch_size == 0 || args.max_chars == 0 || args.min_chars > args.max_chars {
        return Err(CliError::input(anyhow!(
            "need --batch-size ≥ 1 and 1 ≤ --max-chars, with --min-chars ≤ --max-chars"
        )));
    }
    let embedder = build_embedder(&args)?;
    let options = ImportOptions {
        bounds: ChunkBounds {
            min: args.min_chars,
            max: args.max_chars,
        },
        batch_size: args.batch_size,
    };
    let importer = Importer::new(embedder.as_ref(), &Cl100kTokenizer).with_options(options);

    let sources = find_sources(&args.inputs, args.url_prefix.as_deref()).map_err(cli_error)?;
    let documents = sources
        .iter()
        .map(Document::read)
        .collect::<Result<Vec<_>, _>>()
        .map_err(cli_error)?;
    let chunks = importer.chunks(&documents);

    let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(chunks.len() as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "embedding {bar:40} {pos}/{len} chunks, {elapsed} elapsed, ETA {eta}",
        ) {
            bar.set_style(style);
        }
        bar
    });
    let built = importer.build(&chunks, |done| {
        if let Some(bar) = &bar {
            bar.inc(done as u64);
        }
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let imported = built.map_err(cli_error)?;
    save_library(&imported.library, &args.out).map_err(cli_error)?;

    if !quiet {
        eprintln!(
            "imported {} file(s) into {}: {} bits, {} tokens",
            sources.len(),
            args.out.display(),
            imported.bits,
            imported.token_count
        );
    }
    print_json(&json!({
        "out": args.out.display().to_string(),
        "files": sources.len(),
        "bits": imported.bits,
        "duplicates": imported.duplicates,
        "token_count": imported.token_count,
        "embedding_model": imported.library.model(),
        "dimension": embedder.dimension(),
    }))
}
