//! `mnemon library import`: builds a library from Markdown and text files.

use std::io::IsTerminal;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::{Args, ValueEnum};
use mnemon_embed::{Embedder, HashingEmbedder, OpenAiEmbedder};
use mnemon_library::{ChunkBounds, InsertOutcome, Library, chunk_text, encode_embedding};
use serde_json::json;

use super::{CliError, CliResult, print_json};

/// File extensions picked up when walking a directory (compared case-insensitively).
const EXTENSIONS: &[&str] = &["md", "markdown", "txt", "text"];

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
    /// *.txt and *.text (hidden entries skipped, sorted by path).
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

/// One file to import and the URL its bits get.
struct Source {
    path: PathBuf,
    url: String,
}

/// One chunk waiting for its vector.
struct Pending {
    text: String,
    url: String,
    title: String,
}

/// Appends the importable files under `dir` (sorted, hidden entries and directory symlinks
/// skipped) with their paths relative to the walk's root.
fn walk(dir: &Path, relative: &Path, out: &mut Vec<(PathBuf, PathBuf)>) -> anyhow::Result<()> {
    let mut entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read directory {}", dir.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("cannot read directory {}", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        let kind = entry
            .file_type()
            .with_context(|| format!("cannot stat {}", path.display()))?;
        if kind.is_dir() {
            walk(&path, &relative.join(&name), out)?;
        } else if path.is_file() && has_text_extension(&path) {
            out.push((path, relative.join(&name)));
        }
    }
    Ok(())
}

fn has_text_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

fn is_markdown(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("md") || e.eq_ignore_ascii_case("markdown"))
}

/// The path with `/` separators whatever the platform (`/abs/path`, `rel/path`), for bit URLs.
fn slash_path(path: &Path) -> String {
    let mut out = String::new();
    for component in path.components() {
        match component {
            Component::RootDir => out.push('/'),
            Component::CurDir => {}
            other => {
                if !out.is_empty() && !out.ends_with('/') {
                    out.push('/');
                }
                out.push_str(&other.as_os_str().to_string_lossy());
            }
        }
    }
    out
}

/// The files named by the inputs, in order, each with its bit URL.
fn sources(args: &ImportArgs) -> Result<Vec<Source>, CliError> {
    let mut sources = Vec::new();
    for input in &args.inputs {
        let meta = std::fs::metadata(input)
            .with_context(|| format!("cannot read {}", input.display()))
            .map_err(CliError::input)?;
        let files = if meta.is_dir() {
            let mut found = Vec::new();
            walk(input, Path::new(""), &mut found).map_err(CliError::input)?;
            found
        } else {
            let name = input.file_name().map(PathBuf::from).unwrap_or_default();
            vec![(input.clone(), name)]
        };
        for (path, relative) in files {
            let url = match &args.url_prefix {
                Some(prefix) => format!("{prefix}{}", slash_path(&relative)),
                None => slash_path(&path),
            };
            sources.push(Source { path, url });
        }
    }
    if sources.is_empty() {
        return Err(CliError::input(anyhow!(
            "no files to import: the directories hold no .md, .markdown, .txt or .text files"
        )));
    }
    Ok(sources)
}

/// The first ATX heading (`# Title`) outside fenced code blocks.
fn markdown_title(text: &str) -> Option<String> {
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        for marker in ["```", "~~~"] {
            if trimmed.starts_with(marker) {
                fence = match fence {
                    None => Some(marker),
                    Some(open) if open == marker => None,
                    other => other,
                };
            }
        }
        if fence.is_some() || line.len() - trimmed.len() > 3 {
            continue;
        }
        let hashes = trimmed.bytes().take_while(|&b| b == b'#').count();
        if !(1..=6).contains(&hashes) {
            continue;
        }
        let rest = &trimmed[hashes..];
        if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
            continue;
        }
        let title = rest.trim().trim_end_matches('#').trim_end();
        if !title.is_empty() {
            return Some(title.to_owned());
        }
    }
    None
}

fn build_embedder(args: &ImportArgs) -> Result<Box<dyn Embedder>, CliError> {
    match args.embedder {
        EmbedderKind::Hash => {
            let embedder = match (&args.model, args.dimension) {
                (Some(model), dimension) => {
                    let e = HashingEmbedder::from_model_name(model).ok_or_else(|| {
                        CliError::input(anyhow!(
                            "--model {model:?} is not a hashing model; use a name such as \
                             mnemon:hashing-v1-512, or --dimension"
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

/// Runs `mnemon library import`.
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
    let tokenizer = tiktoken_rs::cl100k_base()
        .map_err(|e| CliError::failure(anyhow!("cannot load the cl100k_base tokenizer: {e}")))?;
    let bounds = ChunkBounds {
        min: args.min_chars,
        max: args.max_chars,
    };

    let sources = sources(&args)?;
    let mut pending = Vec::new();
    for source in &sources {
        let bytes = std::fs::read(&source.path)
            .with_context(|| format!("cannot read {}", source.path.display()))
            .map_err(CliError::input)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| anyhow!("{} is not UTF-8 text", source.path.display()))
            .map_err(CliError::input)?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        let title = is_markdown(&source.path)
            .then(|| markdown_title(text))
            .flatten()
            .unwrap_or_else(|| {
                source
                    .path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
        for chunk in chunk_text(text, bounds) {
            pending.push(Pending {
                text: chunk.to_owned(),
                url: source.url.clone(),
                title: title.clone(),
            });
        }
    }

    let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(pending.len() as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "embedding {bar:40} {pos}/{len} chunks, {elapsed} elapsed, ETA {eta}",
        ) {
            bar.set_style(style);
        }
        bar
    });
    let mut library = Library::blank(embedder.model());
    let (mut inserted, mut duplicates, mut tokens) = (0usize, 0usize, 0usize);
    for batch in pending.chunks(args.batch_size) {
        let texts: Vec<&str> = batch.iter().map(|p| p.text.as_str()).collect();
        let vectors = embedder.embed(&texts).map_err(CliError::failure)?;
        if vectors.len() != batch.len() {
            return Err(CliError::failure(anyhow!(
                "the embedder returned {} vectors for {} texts",
                vectors.len(),
                batch.len()
            )));
        }
        for (chunk, vector) in batch.iter().zip(vectors) {
            let token_count = tokenizer.encode_ordinary(&chunk.text).len();
            let bit = json!({
                "text": chunk.text,
                "embedding": encode_embedding(&vector),
                "token_count": token_count,
                "info": {"url": chunk.url, "title": chunk.title},
            });
            match library.insert(&bit).map_err(CliError::failure)? {
                InsertOutcome::Duplicate(_) => duplicates += 1,
                _ => {
                    inserted += 1;
                    tokens += token_count;
                }
            }
        }
        if let Some(bar) = &bar {
            bar.inc(batch.len() as u64);
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }

    // Write next to the target and rename, so a failed import never leaves half a library.
    let mut temporary = args.out.clone().into_os_string();
    temporary.push(".partial");
    let temporary = PathBuf::from(temporary);
    if let Some(parent) = args.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create the folder {}", parent.display()))
            .map_err(CliError::failure)?;
    }
    let written = library
        .save(&temporary, false)
        .map_err(anyhow::Error::from)
        .and_then(|()| {
            std::fs::rename(&temporary, &args.out)
                .with_context(|| format!("cannot write {}", args.out.display()))
        });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(CliError::failure(e));
    }
    if !quiet {
        eprintln!(
            "imported {} file(s) into {}: {inserted} bits, {tokens} tokens",
            sources.len(),
            args.out.display()
        );
    }
    print_json(&json!({
        "out": args.out.display().to_string(),
        "files": sources.len(),
        "bits": inserted,
        "duplicates": duplicates,
        "token_count": tokens,
        "embedding_model": library.model(),
        "dimension": embedder.dimension(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash_paths_have_single_separators() {
        assert_eq!(slash_path(Path::new("/work/docs/a.md")), "/work/docs/a.md");
        assert_eq!(slash_path(Path::new("./docs/a.md")), "docs/a.md");
        assert_eq!(slash_path(Path::new("docs//a.md")), "docs/a.md");
        assert_eq!(slash_path(Path::new("../a.md")), "../a.md");
    }

    #[test]
    fn title_is_the_first_heading_outside_code() {
        let text = "Intro\n```\n# not a title\n```\n    # indented code\n## Real title ##\n# Later";
        assert_eq!(markdown_title(text).as_deref(), Some("Real title"));
        assert_eq!(markdown_title("#hashtag\nplain"), None);
        assert_eq!(markdown_title("####### seven"), None);
        assert_eq!(markdown_title("#\n# Second"), Some("Second".into()));
    }

    #[test]
    fn extensions_are_matched_case_insensitively() {
        assert!(has_text_extension(Path::new("a/B.MD")));
        assert!(has_text_extension(Path::new("notes.txt")));
        assert!(!has_text_extension(Path::new("image.png")));
        assert!(!has_text_extension(Path::new("README")));
        assert!(is_markdown(Path::new("x.Markdown")));
    }
}
