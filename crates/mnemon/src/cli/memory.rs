//! `mnemon memory …`: conversation memory in `<data-dir>/mnemon.sqlite3`, or an export file.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use mnemon::DATABASE_FILE;
use mnemon_embed::Cl100kTokenizer;
use mnemon_memory::{
    BudgetOptions, ExportFormat, ExportOptions, ExportTarget, Exported, InMemoryMemory, LoadSource,
    Memory, MemoryError, MemoryQuery, Metric, PostgresMemoryOptions, PostgresMemoryStore,
    RetrievalQuery, RetrieveOptions, Scope, SqliteMemoryOptions, SqliteMemoryStore,
};
use serde::Serialize;

use super::{CliError, CliResult, Target, print_json};

/// Commands on conversation memory.
#[derive(Debug, Subcommand)]
pub(crate) enum MemoryCommand {
    /// Load an export file (AgentScope 0.0.x array, `List` form or 0.1.x) into a session.
    Import {
        /// The export file.
        file: PathBuf,
        /// The session to load into (created if needed).
        #[arg(long)]
        session: String,
        /// Replace the session's messages instead of appending (duplicate ids are skipped).
        #[arg(long)]
        overwrite: bool,
    },
    /// Write a session's messages to a file, in AgentScope 0.0.x's export layout (or 0.1.x's).
    Export {
        /// The session to export (it must exist).
        #[arg(long)]
        session: String,
        /// The file to write (replaced atomically).
        file: PathBuf,
        /// Also write each message's marks, as `"__marks"`.
        #[arg(long)]
        include_marks: bool,
        /// The layout: `agentscope-0.0` (0.0.4's export) or `agentscope-0.1` (0.1.6's, which
        /// its `TemporaryMemory.load` reads).
        #[arg(long, value_enum, default_value_t = FormatArg::Agentscope00)]
        format: FormatArg,
    },
    /// Print messages as a JSON array.
    Show {
        #[command(flatten)]
        source: Source,
        /// Only the last N messages.
        #[arg(long, value_name = "N")]
        recent: Option<usize>,
        /// Only messages carrying this mark.
        #[arg(long, value_name = "M")]
        mark: Option<String>,
        /// Only the most recent messages that fit in N cl100k_base tokens.
        #[arg(long, value_name = "N")]
        tokens: Option<usize>,
    },
    /// Rank messages by embedding similarity to a query vector; prints [{score, index, id}].
    Retrieve {
        #[command(flatten)]
        source: Source,
        /// The query vector, as a JSON array of numbers.
        #[arg(long, value_name = "JSON")]
        query: String,
        /// How to score.
        #[arg(long, value_enum, default_value_t = MetricArg::Cosine)]
        metric: MetricArg,
        /// How many results.
        #[arg(long, value_name = "K", default_value_t = 1)]
        top_k: usize,
        /// Print the results in memory order instead of score order.
        #[arg(long)]
        preserve_order: bool,
        /// Only messages carrying this mark.
        #[arg(long, value_name = "M")]
        mark: Option<String>,
    },
}

/// Which messages to read: a session of the database, or an export file.
#[derive(Debug, Args)]
#[group(multiple = false)]
pub(crate) struct Source {
    /// A session in `<data-dir>/mnemon.sqlite3` (the default thread when neither is given); it
    /// must exist.
    #[arg(long, value_name = "S")]
    session: Option<String>,
    /// An export file, read directly.
    #[arg(long, value_name = "F")]
    file: Option<PathBuf>,
}

/// Export layouts.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum FormatArg {
    /// AgentScope 0.0.x: a 4-space indented array of plain message objects.
    #[value(name = "agentscope-0.0")]
    Agentscope00,
    /// AgentScope 0.1.x: one line of `__module__`/`__name__` objects with `metadata`.
    #[value(name = "agentscope-0.1")]
    Agentscope01,
}

/// Scoring metrics.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum MetricArg {
    /// Cosine similarity.
    Cosine,
    /// Dot product.
    Dot,
    /// Negative Euclidean distance.
    L2,
}

#[derive(Serialize)]
struct Hit {
    score: f64,
    index: usize,
    id: String,
}

/// Maps a memory error to an exit code: storage trouble is a failure, the rest bad input.
fn memory_error(error: MemoryError) -> CliError {
    match error {
        MemoryError::Storage { .. } | MemoryError::SchemaVersion { .. } => CliError::failure(error),
        _ => CliError::input(error),
    }
}

/// The session's memory for writing: the data directory and the database are created as
/// needed; the session is created by the write itself, in its transaction, so a write that
/// fails (an import of a bad file) leaves no empty session behind.
fn session_memory(target: &Target<'_>, scope: Scope) -> Result<Box<dyn Memory>, CliError> {
    if let Some(url) = target.database_url {
        let store = open_postgres(url, target)?;
        return Ok(Box::new(
            store.memory_created_on_write(scope).map_err(memory_error)?,
        ));
    }
    let data_dir = target.data_dir;
    std::fs::create_dir_all(data_dir).map_err(|e| {
        CliError::failure(anyhow::anyhow!("cannot create {}: {e}", data_dir.display()))
    })?;
    let store = SqliteMemoryStore::open(data_dir.join(DATABASE_FILE), sqlite_options(target))
        .map_err(memory_error)?;
    Ok(Box::new(
        store.memory_created_on_write(scope).map_err(memory_error)?,
    ))
}

/// How many known sessions an error message lists before eliding the rest.
const LISTED_SESSIONS: usize = 20;

/// The session's memory for reading. Reads never create the database or the session, so a
/// mistyped `--session` is an input error naming the known sessions, rather than an empty
/// session silently created (and, for `export`, an empty `[]` file written).
fn existing_session_memory(target: &Target<'_>, scope: Scope) -> Result<Box<dyn Memory>, CliError> {
    let wanted = match &scope.session_id {
        Some(session) => format!("no memory session {session:?}"),
        None => "no default memory session (the one used without --session)".to_owned(),
    };
    if let Some(url) = target.database_url {
        let store = open_postgres(url, target)?;
        if let Some(memory) = store.existing_memory(scope).map_err(memory_error)? {
            return Ok(Box::new(memory));
        }
        let known = store.threads().map_err(memory_error)?;
        return Err(missing_session(
            &wanted,
            &format!(
                "namespace {:?} of the --database-url database",
                target.namespace.as_str()
            ),
            known,
        ));
    }
    let path = target.data_dir.join(DATABASE_FILE);
    if !path.exists() {
        return Err(CliError::input(anyhow::anyhow!(
            "{wanted}: {} does not exist; create a session with `mnemon memory import FILE \
             --session S`, or read an export file with --file",
            path.display()
        )));
    }
    // Read-only: no write lock (a writer in another process does not block the read), and a
    // read-only data directory or mount works. The CLI's readers never embed, so never write.
    let store =
        SqliteMemoryStore::open_read_only(&path, sqlite_options(target)).map_err(memory_error)?;
    if let Some(memory) = store.existing_memory(scope).map_err(memory_error)? {
        return Ok(Box::new(memory));
    }
    let known = store.threads().map_err(memory_error)?;
    Err(missing_session(&wanted, &path.display().to_string(), known))
}

fn sqlite_options(target: &Target<'_>) -> SqliteMemoryOptions {
    SqliteMemoryOptions {
        namespace: target.namespace.clone(),
        ..SqliteMemoryOptions::default()
    }
}

/// The PostgreSQL memory store of `--database-url`, for the target's namespace.
fn open_postgres(
    url: &str,
    target: &Target<'_>,
) -> Result<std::sync::Arc<PostgresMemoryStore>, CliError> {
    let options = PostgresMemoryOptions {
        namespace: target.namespace.clone(),
        ..PostgresMemoryOptions::default()
    };
    PostgresMemoryStore::open(url, options).map_err(|e| {
        CliError::failure(
            anyhow::Error::new(e)
                .context("cannot open the memory store in the --database-url database"),
        )
    })
}

/// The input error for a session that is not there, listing the known ones (`location` says
/// where they were looked for).
fn missing_session(wanted: &str, location: &str, known: Vec<Scope>) -> CliError {
    // Only sessions without a user or agent id can be named with --session.
    let known: Vec<String> = known
        .into_iter()
        .filter(|s| s.user_id.is_none() && s.agent_id.is_none())
        .filter_map(|s| s.session_id)
        .collect();
    let listed = match known.len() {
        0 => "there are no sessions yet".to_owned(),
        n if n <= LISTED_SESSIONS => format!("known sessions: {}", known.join(", ")),
        n => format!(
            "known sessions: {}, and {} more",
            known[..LISTED_SESSIONS].join(", "),
            n - LISTED_SESSIONS
        ),
    };
    CliError::input(anyhow::anyhow!("{wanted} in {location}; {listed}"))
}

fn open_source(target: &Target<'_>, source: Source) -> Result<Box<dyn Memory>, CliError> {
    match (source.file, source.session) {
        (Some(file), _) => {
            let memory = InMemoryMemory::new();
            memory
                .load(LoadSource::Path(file), false)
                .map_err(memory_error)?;
            Ok(Box::new(memory))
        }
        (None, Some(session)) => existing_session_memory(target, Scope::session(session)),
        (None, None) => existing_session_memory(target, Scope::default()),
    }
}

/// Runs a `memory` command.
pub(crate) fn run(command: MemoryCommand, target: &Target<'_>) -> CliResult {
    match command {
        MemoryCommand::Import {
            file,
            session,
            overwrite,
        } => {
            let memory = session_memory(target, Scope::session(session))?;
            let report = memory
                .load(LoadSource::Path(file), overwrite)
                .map_err(memory_error)?;
            print_json(&report)
        }
        MemoryCommand::Export {
            session,
            file,
            include_marks,
            format,
        } => {
            let memory = existing_session_memory(target, Scope::session(session))?;
            // The count is the one written, even if another process writes meanwhile.
            let exported = memory
                .export(
                    ExportTarget::File(file.clone()),
                    &ExportOptions {
                        include_marks,
                        format: match format {
                            FormatArg::Agentscope00 => ExportFormat::AgentScope00,
                            FormatArg::Agentscope01 => ExportFormat::AgentScope01,
                        },
                    },
                )
                .map_err(memory_error)?;
            let count = match exported {
                Exported::File { count, .. } => count,
                _ => 0,
            };
            print_json(&serde_json::json!({"file": file, "count": count}))
        }
        MemoryCommand::Show {
            source,
            recent,
            mark,
            tokens,
        } => {
            let memory = open_source(target, source)?;
            let mut messages = match tokens {
                Some(budget) => {
                    let options = BudgetOptions {
                        mark: mark.clone(),
                        ..BudgetOptions::default()
                    };
                    memory
                        .recall_within_budget(budget, &Cl100kTokenizer, &options)
                        .map_err(memory_error)?
                        .messages
                }
                // The memory applies `--recent` itself, so a session reads only those rows.
                None => memory
                    .get_memory(&MemoryQuery {
                        mark: mark.as_deref(),
                        recent_n: recent,
                        ..MemoryQuery::default()
                    })
                    .map_err(memory_error)?,
            };
            if let Some(n) = recent {
                messages.drain(..messages.len().saturating_sub(n));
            }
            print_json(&messages)
        }
        MemoryCommand::Retrieve {
            source,
            query,
            metric,
            top_k,
            preserve_order,
            mark,
        } => {
            let vector: Vec<f32> = serde_json::from_str(&query).map_err(|e| {
                CliError::input(anyhow::anyhow!(
                    "--query must be a JSON array of numbers, e.g. [0.2, -0.4]: {e}"
                ))
            })?;
            let memory = open_source(target, source)?;
            let options = RetrieveOptions {
                metric: match metric {
                    MetricArg::Cosine => Metric::Cosine,
                    MetricArg::Dot => Metric::Dot,
                    MetricArg::L2 => Metric::NegEuclidean,
                },
                top_k: Some(top_k),
                preserve_order,
                mark,
            };
            let hits: Vec<Hit> = memory
                .retrieve_by_embedding(RetrievalQuery::Vector(vector), &options, None)
                .map_err(memory_error)?
                .into_iter()
                .map(|r| Hit {
                    score: r.score,
                    index: r.index,
                    id: r.message.id().to_owned(),
                })
                .collect();
            print_json(&hits)
        }
    }
}
