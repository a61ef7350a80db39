//! `mnemon library …`: embedding library files.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Subcommand;
use mnemon_library::{AccessPolicy, Library, OpenOptions, Progress, QueryOptions, wire};
use serde_json::{Map, Value, json};

use super::{CliError, CliResult, print_json};

/// The `count` a query gets when its arguments have none, as on the host.
const HOST_DEFAULT_COUNT: i64 = 1000;

/// Commands on embedding library files.
#[derive(Debug, Subcommand)]
pub(crate) enum LibraryCommand {
    /// Check a library file: prints `ok`, or every problem with the bit index and field.
    Validate {
        /// The library JSON file.
        file: PathBuf,
    },
    /// Print bits, dimension, model, token total and access tags as JSON.
    Stats {
        /// The library JSON file.
        file: PathBuf,
    },
    /// Run one query with an arguments object exactly as the host would receive it and print
    /// the result JSON (`count` defaults to 1000). `--text` embeds a question with the
    /// embedder the library's model names, instead of passing a `query_embedding`.
    Query {
        /// The library JSON file (its packed sidecar is used when up to date).
        file: PathBuf,
        /// A JSON file holding the arguments object.
        #[arg(long, value_name = "ARGS.json", required_unless_present = "text")]
        args: Option<PathBuf>,
        #[command(flatten)]
        question: QuestionArgs,
        /// A host config (`host.SECRET.json` format) supplying tokens and restriction details.
        #[arg(long, value_name = "CFG.json")]
        host_config: Option<PathBuf>,
        /// Use the fast int8 pre-scan with exact re-ranking.
        #[arg(long)]
        fast: bool,
        /// Never use the library's ANN index (`<FILE>.ann`): scan exactly, as the argument
        /// `exact: true` does.
        #[arg(long)]
        exact: bool,
        /// Search the library's ANN index (when it has a current one) from this many bits up.
        #[arg(long, value_name = "BITS", default_value_t = mnemon_library::DEFAULT_INDEX_MIN_BITS)]
        index_min_bits: usize,
        /// The ANN index's search beam (the candidates the walk keeps; the best are re-ranked
        /// exactly): larger is slower and finds more of the true nearest bits. Default: by
        /// library size, 128 up to 100,000 bits, 416 at 1,000,000.
        #[arg(long, value_name = "EF", value_parser = clap::value_parser!(u32).range(1..=100_000))]
        index_ef: Option<u32>,
        /// Seed for the random query vector drawn when no embedding is given.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Print the arguments object of a query for `TEXT`, embedded with the embedder that the
    /// model names; pipe it to a host: `… | curl --json @- http://127.0.0.1:8080/`.
    Args {
        /// The library's `embedding_model` (see `mnemon library stats`).
        #[arg(long, default_value = "mnemon:hashing-v1-512")]
        model: String,
        #[command(flatten)]
        question: QuestionArgs,
    },
    /// Write `<FILE>.mnx`, a binary sidecar that later opens memory-mapped; with `--index`,
    /// also `<FILE>.ann`, the approximate index large libraries are searched through. Given a
    /// directory (served as one library by `mnemon serve`), packs each of its library files,
    /// and with `--index` builds one index over the merged library into `<DIR>/.library.ann`.
    Pack {
        /// The library JSON file, or a directory of them.
        file: PathBuf,
        /// Also build the ANN index (HNSW over int8 codes, exact re-rank) into `<FILE>.ann`
        /// (`<DIR>/.library.ann` for a directory).
        #[arg(long)]
        index: bool,
    },
    /// Build a library from Markdown and text files: split into chunks of 1,000 to 2,000
    /// characters at sentence ends, count cl100k_base tokens, embed, and write the library.
    Import(super::library_import::ImportArgs),
}

/// A question in words, and the cut of its result.
#[derive(Debug, clap::Args)]
pub(crate) struct QuestionArgs {
    /// The question, embedded with the embedder the library's model names.
    #[arg(long)]
    text: Option<String>,
    /// How many bits (or tokens, with `--count-type token`) to return.
    #[arg(long)]
    count: Option<i64>,
    /// Whether `--count` counts bits or tokens.
    #[arg(long, value_parser = ["bit", "token"])]
    count_type: Option<String>,
}

impl QuestionArgs {
    /// The question's embedding (`--text`), made with the embedder `model` names.
    fn embedding(&self, model: &str) -> Result<Option<Vec<f32>>, CliError> {
        let Some(text) = &self.text else {
            return Ok(None);
        };
        let embedder = mnemon_embed::embedder_for_model(model).map_err(CliError::input)?;
        let vector = embedder
            .embed(&[text.as_str()])
            .map_err(CliError::failure)?
            .into_iter()
            .next()
            .ok_or_else(|| CliError::failure(anyhow!("the embedder returned no vector")))?;
        Ok(Some(vector))
    }

    /// Adds the question's model and cut to `arguments` (the vector itself is added by the
    /// caller: typed for a query, encoded for the wire), leaving other keys as they are.
    fn apply(&self, model: &str, arguments: &mut Map<String, Value>) {
        if self.text.is_some() {
            arguments.entry("version").or_insert_with(|| Value::from(1));
            arguments.insert("query_embedding_model".into(), Value::from(model));
        }
        if let Some(count) = self.count {
            arguments.insert("count".into(), Value::from(count));
        }
        if let Some(count_type) = &self.count_type {
            arguments.insert("count_type".into(), Value::from(count_type.as_str()));
        }
    }
}

/// Opens a library. On a terminal, and unless `--quiet`, a bar shows the bytes parsed; nothing
/// is drawn when stderr is piped. A load error names the bit and field at fault.
fn open(file: &Path, quiet: bool) -> Result<Library, CliError> {
    show_warnings(quiet);
    if file.is_dir() {
        // A directory is one library, as `mnemon serve` serves it (docs/reference/host.md).
        return Library::open_dir(file).map_err(|e| located(file, e));
    }
    let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
        let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
        let bar = indicatif::ProgressBar::new(size);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg} {bar:40} {bytes}/{total_bytes}, {elapsed} elapsed, ETA {eta}",
        ) {
            bar.set_style(style);
        }
        bar.set_message(format!("loading {}", file.display()));
        // The loader reports once per batch of bits; the tick keeps the clock moving between.
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    });
    let options = OpenOptions {
        progress: bar
            .clone()
            .map(|bar| -> Progress { Arc::new(move |parsed| bar.set_position(parsed)) }),
        ..OpenOptions::default()
    };
    let result = Library::open_with(file, &options);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result.map_err(|e| located(file, e))
}

/// A library error as the CLI reports it: the reader's to fix (naming the file and place) or a
/// failure.
fn located(file: &Path, e: mnemon_library::LibraryError) -> CliError {
    if e.is_client_error() {
        CliError::input(anyhow!("{}: {}", file.display(), e.located()))
    } else {
        CliError::failure(e)
    }
}

/// Builds the library's ANN index beside `file`. On a terminal, and unless `--quiet`, a bar
/// shows the bits inserted into the graph.
fn pack_index(lib: &Library, file: &Path, quiet: bool) -> Result<PathBuf, CliError> {
    let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(lib.len() as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg} {bar:40} {pos}/{len} bits, {elapsed} elapsed, ETA {eta}",
        ) {
            bar.set_style(style);
        }
        bar.set_message("indexing");
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    });
    let progress = |done: usize, _total: usize| {
        if let Some(bar) = &bar {
            bar.set_position(done as u64);
        }
    };
    let result = lib.pack_index(file, &progress);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result.map_err(CliError::failure)
}

/// Sends the library's warnings (such as a stale sidecar being ignored) to stderr, unless
/// `--quiet`; `RUST_LOG` overrides the level.
fn show_warnings(quiet: bool) {
    super::log_to_stderr(if quiet { "error" } else { "warn" }, false);
}

/// Reads a JSON object of query arguments from a file.
fn read_arguments(path: &Path) -> Result<Map<String, Value>, CliError> {
    let text = std::fs::read(path)
        .with_context(|| format!("cannot read {}", path.display()))
        .map_err(CliError::input)?;
    let value: Value = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not JSON", path.display()))
        .map_err(CliError::input)?;
    match value {
        Value::Object(arguments) => Ok(arguments),
        _ => Err(CliError::input(anyhow!(
            "{} must hold a JSON object of query arguments",
            path.display()
        ))),
    }
}

/// Runs a `library` command.
pub(crate) fn run(command: LibraryCommand, quiet: bool) -> CliResult {
    match command {
        LibraryCommand::Import(args) => super::library_import::run(args, quiet),
        LibraryCommand::Validate { file } => {
            let bytes = std::fs::read(&file)
                .with_context(|| format!("cannot read {}", file.display()))
                .map_err(CliError::input)?;
            let problems = Library::problems(&bytes);
            for problem in &problems {
                println!("{problem}");
            }
            let errors = problems.iter().filter(|p| p.is_error()).count();
            if errors == 0 {
                println!("ok");
                Ok(())
            } else {
                Err(CliError::failure(anyhow!(
                    "{}: {errors} problem(s)",
                    file.display()
                )))
            }
        }
        LibraryCommand::Stats { file } => {
            let lib = open(&file, quiet)?;
            let tags: Map<String, Value> = lib
                .access_tags()
                .into_iter()
                .map(|(t, n)| (t, Value::from(n)))
                .collect();
            print_json(&json!({
                "bits": lib.len(),
                "dimension": lib.dimension(),
                "embedding_model": lib.model(),
                "token_count": lib.total_tokens(),
                "access_tags": tags,
                "untagged_bits": lib.bits().filter(|b| b.access_tag().is_none()).count(),
                "sort": lib.sort(),
                "upgraded": lib.upgraded(),
            }))
        }
        LibraryCommand::Query {
            file,
            args,
            question,
            host_config,
            fast,
            exact,
            index_min_bits,
            index_ef,
            seed,
        } => {
            let mut arguments = match &args {
                Some(args) => read_arguments(args)?,
                None => Map::new(),
            };
            let policy = match &host_config {
                Some(path) => AccessPolicy::from_host_config_file(path).map_err(CliError::input)?,
                None => AccessPolicy::default(),
            };
            let lib = open(&file, quiet)?;
            let vector = question.embedding(lib.model())?;
            question.apply(lib.model(), &mut arguments);
            if vector.is_some() {
                // The question's vector replaces any the arguments hold; it is set typed below.
                arguments.shift_remove("query_embedding");
            }
            let options = QueryOptions {
                seed,
                default_count: Some(HOST_DEFAULT_COUNT),
                fast,
                exact,
                index: mnemon_library::IndexUse {
                    min_bits: index_min_bits,
                    ef: index_ef.map(|ef| ef as usize),
                },
            };
            let parsed = wire::parse_query(&lib, &arguments, &options).map_err(CliError::input)?;
            let grant = parsed.grant(&policy);
            let mut request = parsed.request;
            if vector.is_some() {
                request.embedding = vector;
            }
            let result = lib.query(&request, &grant).map_err(CliError::input)?;
            print_json(&wire::render(&result).map_err(CliError::input)?)
        }
        LibraryCommand::Args { model, question } => {
            if question.text.is_none() {
                return Err(CliError::input(anyhow!(
                    "give the question with --text \"…\""
                )));
            }
            let mut arguments = Map::new();
            arguments.insert("version".into(), Value::from(1));
            arguments.insert("query_embedding_model".into(), Value::from(model.as_str()));
            // Printed for a host: the vector in the wire's encoding.
            if let Some(vector) = question.embedding(&model)? {
                arguments.insert(
                    "query_embedding".into(),
                    Value::from(mnemon_library::encode_embedding(&vector)),
                );
            }
            question.apply(&model, &mut arguments);
            let text = serde_json::to_string(&arguments).map_err(CliError::failure)?;
            println!("{text}");
            Ok(())
        }
        LibraryCommand::Pack { file, index } if file.is_dir() => {
            let files = mnemon_library::dir_files(&file).map_err(CliError::failure)?;
            if files.is_empty() {
                return Err(CliError::input(anyhow!(
                    "{} holds no library files (*.json)",
                    file.display()
                )));
            }
            for rel in files {
                let path = file.join(rel);
                let path = open(&path, quiet)?.pack(&path).map_err(CliError::failure)?;
                if !quiet {
                    eprintln!("wrote {}", path.display());
                }
            }
            if index {
                // Opened after packing, so each file loads from its new sidecar.
                let lib = open(&file, quiet)?;
                let path = pack_index(&lib, &file, quiet)?;
                if !quiet {
                    eprintln!("wrote {}", path.display());
                }
            }
            Ok(())
        }
        LibraryCommand::Pack { file, index } => {
            let lib = open(&file, quiet)?;
            let path = lib.pack(&file).map_err(CliError::failure)?;
            if !quiet {
                eprintln!("wrote {}", path.display());
            }
            if index {
                let path = pack_index(&lib, &file, quiet)?;
                if !quiet {
                    eprintln!("wrote {}", path.display());
                }
            }
            Ok(())
        }
    }
}
