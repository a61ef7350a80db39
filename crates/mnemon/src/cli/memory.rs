//! `mnemon memory …`: conversation memory in `<data-dir>/mnemon.sqlite3`, or an export file.

use std::io::IsTerminal as _;
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

use mnemon_ops::Service;
use mnemon_ops::memory::{
    AddWith, DeleteMessagesInput, HybridInput, MarkInput, MemoryAddInput, MemorySearchAcrossInput,
    MemorySearchInput, MessageBody, MetricName, ReembedInput, SearchModeName, SearchQuery,
    SessionInput, SessionListInput,
};

use super::format::{
    FormatArg as OutputArg, Table, cell, emit, ops_error, service_for_reading, service_for_writing,
    with_embedder,
};
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
        /// Also print each message's embedding (left out by default: it is long and rarely
        /// read).
        #[arg(long)]
        include_embeddings: bool,
    },
    /// Append messages to a session (created if needed), atomically.
    Add {
        /// The session to add to.
        #[arg(long)]
        session: String,
        /// A JSON file holding one message object or an array of them (`-` for stdin).
        #[arg(long, value_name = "F", conflicts_with = "content")]
        json: Option<PathBuf>,
        /// The text of one message to add.
        #[arg(long, required_unless_present = "json")]
        content: Option<String>,
        /// With --content: the speaker's name.
        #[arg(long, default_value = "user", requires = "content")]
        name: String,
        /// With --content: the role (`user`, `assistant` or `system`).
        #[arg(long, default_value = "user", requires = "content")]
        role: String,
        /// A mark to put on every added message (repeatable).
        #[arg(long = "mark", value_name = "M")]
        marks: Vec<String>,
        /// Embed every message without an `embedding` with --embedding-model before storing
        /// it, so that `memory search` across sessions (which never embeds stored messages)
        /// finds it. This is the default whenever --embedding-model is given; the flag is kept
        /// for scripts that pass it.
        #[arg(long, requires = "embedding_model", conflicts_with = "no_embed")]
        embed: bool,
        /// Store the messages as they are even though --embedding-model is given: a search
        /// across sessions then skips those without an embedding.
        #[arg(long)]
        no_embed: bool,
        /// The model that embeds the added messages, e.g. `mnemon:hashing-v1-256`; given, the
        /// messages without an `embedding` are embedded (unless --no-embed) and the model is
        /// recorded.
        #[arg(long, env = "MNEMON_EMBEDDING_MODEL", value_name = "MODEL")]
        embedding_model: Option<String>,
        /// Forget the added messages this long after the add: a whole number and a unit, s,
        /// m, h, d or w (e.g. `90s`, `30d`, `1h30m`); or `never`, to keep them until deleted
        /// whatever --default-ttl says.
        #[arg(long, value_name = "DURATION", value_parser = super::artifact::parse_ttl)]
        ttl: Option<super::artifact::Ttl>,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Remove messages from a session by id.
    Delete {
        /// The session.
        #[arg(long)]
        session: String,
        /// The messages' ids.
        #[arg(required = true)]
        ids: Vec<String>,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Delete a session with all its messages and marks.
    Clear {
        /// The session.
        #[arg(long)]
        session: String,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Put a mark on messages.
    Mark {
        /// The session.
        #[arg(long)]
        session: String,
        /// The mark.
        #[arg(long = "mark", value_name = "M")]
        mark: String,
        /// The messages' ids.
        #[arg(required = true)]
        ids: Vec<String>,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Take a mark off messages (off every message of the session when no id is given).
    Unmark {
        /// The session.
        #[arg(long)]
        session: String,
        /// The mark.
        #[arg(long = "mark", value_name = "M")]
        mark: String,
        /// The messages' ids.
        ids: Vec<String>,
        #[command(flatten)]
        output: OutputArg,
    },
    /// List the namespace's memory threads, oldest first.
    Sessions {
        #[command(flatten)]
        output: OutputArg,
    },
    /// Rank messages by embedding similarity to a text or a vector: in one session
    /// (`--session` alone), or across every session of the namespace, narrowed by `--user`,
    /// `--agent` and `--session` (cosine only; messages without an embedding are skipped).
    Search {
        /// The session. Alone, it searches that session (embedding its messages that have no
        /// embedding yet); with --user or --agent, it narrows a search across sessions.
        #[arg(long)]
        session: Option<String>,
        /// Search across sessions: only threads of this user.
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// Search across sessions: only threads of this agent.
        #[arg(long, value_name = "AGENT")]
        agent: Option<String>,
        /// Search across sessions (also with --session alone): only messages this filter
        /// selects (docs/reference/filters.md, as JSON), applied before the top-k cut, e.g.
        /// `{"eq": {"path": "role", "value": "user"}}`.
        #[arg(long, value_name = "JSON")]
        filter: Option<String>,
        /// Search across sessions (also with --session alone): `vector` (by the embedding of
        /// --text or --vector), `keyword` (by the words of --text or --keywords; no embedder
        /// needed) or `hybrid` (both rankings fused).
        #[arg(long, value_enum)]
        mode: Option<ModeArg>,
        /// The words of a keyword or hybrid search (default: --text).
        #[arg(long, value_name = "WORDS")]
        keywords: Option<String>,
        /// With --mode hybrid: the vector ranking's weight in the fusion (default 1).
        #[arg(long, value_name = "W")]
        vector_weight: Option<f64>,
        /// With --mode hybrid: the keyword ranking's weight in the fusion (default 1).
        #[arg(long, value_name = "W")]
        keyword_weight: Option<f64>,
        /// With --mode hybrid: the reciprocal rank fusion constant k (default 60); each ranking
        /// adds weight / (k + rank), so a larger k flattens the first ranks' differences.
        #[arg(long, value_name = "K")]
        rrf_k: Option<f64>,
        /// With --mode hybrid: how many hits of each ranking are fused (default 100, at least
        /// --top-k).
        #[arg(long, value_name = "N")]
        candidates: Option<usize>,
        /// The query text, embedded with --embedding-model.
        #[arg(long, required_unless_present = "vector", conflicts_with = "vector")]
        text: Option<String>,
        /// The query vector, as a JSON array of numbers.
        #[arg(long, value_name = "JSON")]
        vector: Option<String>,
        /// The model that embeds --text, e.g. `mnemon:hashing-v1-256` (offline) or
        /// `openai.com:text-embedding-3-small` (with OPENAI_API_KEY); it must be the model the
        /// session's embeddings were made with.
        #[arg(long, env = "MNEMON_EMBEDDING_MODEL", value_name = "MODEL")]
        embedding_model: Option<String>,
        /// How to score.
        #[arg(long, value_enum, default_value_t = MetricArg::Cosine)]
        metric: MetricArg,
        /// How many results.
        #[arg(long, value_name = "K", default_value_t = 5)]
        top_k: usize,
        /// Only messages carrying this mark.
        #[arg(long, value_name = "M")]
        mark: Option<String>,
        /// Scan every message exactly instead of searching large sessions'
        /// recall indexes (docs/reference/memory.md#the-recall-index).
        #[arg(long)]
        exact: bool,
        /// Also print each message's embedding.
        #[arg(long)]
        include_embeddings: bool,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Re-embed with --embedding-model every message of the namespace (or of --user, --agent,
    /// --session) whose embedding another model (or none, or an unknown one) made, in batches
    /// with a progress bar; resumable: run it again after a kill and it does only what is left.
    Reembed {
        /// The model to embed with, e.g. `openai.com:text-embedding-3-small`.
        #[arg(long, env = "MNEMON_EMBEDDING_MODEL", value_name = "MODEL")]
        embedding_model: String,
        /// Only threads of this user.
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// Only threads of this agent.
        #[arg(long, value_name = "AGENT")]
        agent: Option<String>,
        /// Only threads of this session.
        #[arg(long, value_name = "SESSION")]
        session: Option<String>,
        /// Messages embedded and stored per transaction.
        #[arg(long, value_name = "N", default_value_t = 256)]
        batch: usize,
        #[command(flatten)]
        output: OutputArg,
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
        /// Scan every message exactly instead of searching a large session's recall index
        /// (docs/reference/memory.md#the-recall-index).
        #[arg(long)]
        exact: bool,
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

/// How `memory search` ranks across sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ModeArg {
    /// By embedding (cosine).
    Vector,
    /// By the words (full-text relevance).
    Keyword,
    /// Both rankings, fused (reciprocal rank fusion).
    Hybrid,
}

/// Scoring metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
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

/// Parses a query vector given as a JSON array of numbers; `option` names it in the message.
fn parse_vector(text: &str, option: &str) -> Result<Vec<f32>, CliError> {
    serde_json::from_str(text).map_err(|e| {
        CliError::input(anyhow::anyhow!(
            "{option} must be a JSON array of numbers, e.g. [0.2, -0.4]: {e}"
        ))
    })
}

/// Reads `memory add --json`: one message object or an array of them, from a file or stdin.
fn read_messages(file: &std::path::Path) -> Result<Vec<MessageBody>, CliError> {
    let text = if file == std::path::Path::new("-") {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| CliError::input(anyhow::anyhow!("cannot read stdin: {e}")))?
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| CliError::input(anyhow::anyhow!("cannot read {}: {e}", file.display())))?
    };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        CliError::input(anyhow::anyhow!(
            "{} is not valid JSON: {e}; give one message object or an array of them",
            file.display()
        ))
    })?;
    Ok(match json {
        serde_json::Value::Array(items) => items.into_iter().map(MessageBody).collect(),
        other => vec![MessageBody(other)],
    })
}

/// The table of a mark or unmark: how many messages changed.
fn changed_table(output: &mnemon_ops::memory::MarkOutput) -> Table {
    let mut table = Table::new(&["changed"]);
    table.row(vec![output.changed.to_string()]);
    table
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
        default_ttl: target.default_ttl,
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
        default_ttl: target.default_ttl,
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

/// `memory search` across sessions: the threads the input's scope selects (every thread of
/// the namespace when none is given), in one store query.
fn search_across(
    service: &Service,
    input: MemorySearchAcrossInput,
    output: OutputArg,
) -> CliResult {
    let found = service.memory_search_across(input).map_err(ops_error)?;
    if !found.complete {
        // On stderr, so that the JSON on stdout stays one document (it carries `complete`).
        eprintln!(
            "note: more messages have these words than the {} a keyword ranking reads; the hits \
             rank the newest of them (narrow --user/--agent/--session, or search rarer words)",
            mnemon_memory::MAX_KEYWORD_MATCHES
        );
    }
    emit(output.format, &found, |f| {
        let mut table = Table::new(&[
            "score", "session", "user", "agent", "index", "id", "name", "content",
        ]);
        for hit in &f.hits {
            let m = &hit.message.0;
            table.row(vec![
                format!("{:.4}", hit.score),
                hit.session_id.clone().unwrap_or_default(),
                hit.user_id.clone().unwrap_or_default(),
                hit.agent_id.clone().unwrap_or_default(),
                hit.index.to_string(),
                cell(m.get("id")),
                cell(m.get("name")),
                cell(m.get("content")),
            ]);
        }
        table
    })
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
            include_embeddings,
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
            let messages: Vec<serde_json::Value> = messages
                .iter()
                .map(|m| {
                    let mut json = m.to_json();
                    if !include_embeddings && let Some(object) = json.as_object_mut() {
                        object.shift_remove("embedding");
                    }
                    json
                })
                .collect();
            print_json(&messages)
        }
        MemoryCommand::Add {
            session,
            json,
            content,
            name,
            role,
            marks,
            embed: _,
            no_embed,
            embedding_model,
            ttl,
            output,
        } => {
            // Embedding is the default whenever a model is named (--embed only restates it),
            // so that a search across sessions finds what was added.
            let embed = embedding_model.is_some() && !no_embed;
            let messages = match (json, content) {
                (Some(file), _) => read_messages(&file)?,
                (None, Some(content)) => vec![MessageBody(
                    serde_json::json!({"name": name, "content": content, "role": role}),
                )],
                (None, None) => Vec::new(),
            };
            let service = service_for_writing(target)?;
            let input = MemoryAddInput {
                session,
                messages,
                marks,
            };
            let with = AddWith {
                embed,
                expiry: ttl.map(super::artifact::Ttl::input).unwrap_or_default(),
            };
            let service = if embed {
                with_embedder(service, embedding_model.as_deref())?
            } else {
                service
            };
            let added = service.memory_add_with(input, &with).map_err(ops_error)?;
            emit(output.format, &added, |a| {
                let mut table = Table::new(&["added", "skipped_duplicates"]);
                table.row(vec![a.added.to_string(), a.skipped_duplicates.join(", ")]);
                table
            })
        }
        MemoryCommand::Delete {
            session,
            ids,
            output,
        } => {
            let service = service_for_reading(target)?;
            let report = service
                .memory_delete_messages(DeleteMessagesInput { session, ids })
                .map_err(ops_error)?;
            emit(output.format, &report, |r| {
                let mut table = Table::new(&["id", "outcome"]);
                for id in &r.deleted {
                    table.row(vec![id.clone(), "deleted".into()]);
                }
                for id in &r.not_found {
                    table.row(vec![id.clone(), "not found".into()]);
                }
                table
            })
        }
        MemoryCommand::Clear { session, output } => {
            let service = service_for_reading(target)?;
            let report = service
                .memory_session_delete(SessionInput {
                    session: session.clone(),
                })
                .map_err(ops_error)?;
            emit(output.format, &report, |r| {
                let mut table = Table::new(&["session", "deleted"]);
                table.row(vec![session, r.deleted.to_string()]);
                table
            })
        }
        MemoryCommand::Mark {
            session,
            mark,
            ids,
            output,
        } => {
            let service = service_for_reading(target)?;
            let report = service
                .memory_mark(MarkInput {
                    session,
                    mark,
                    ids: Some(ids),
                })
                .map_err(ops_error)?;
            emit(output.format, &report, changed_table)
        }
        MemoryCommand::Unmark {
            session,
            mark,
            ids,
            output,
        } => {
            let service = service_for_reading(target)?;
            let report = service
                .memory_unmark(MarkInput {
                    session,
                    mark,
                    ids: (!ids.is_empty()).then_some(ids),
                })
                .map_err(ops_error)?;
            emit(output.format, &report, changed_table)
        }
        MemoryCommand::Sessions { output } => {
            let service = service_for_reading(target)?;
            // Every page: the CLI prints the whole list.
            let mut all = service
                .memory_sessions(SessionListInput::default())
                .map_err(ops_error)?;
            while let Some(cursor) = all.next_cursor.take() {
                let next = service
                    .memory_sessions(SessionListInput {
                        cursor: Some(cursor),
                        ..SessionListInput::default()
                    })
                    .map_err(ops_error)?;
                all.sessions.extend(next.sessions);
                all.next_cursor = next.next_cursor;
            }
            emit(output.format, &all, |a| {
                let mut table = Table::new(&["session_id", "user_id", "agent_id"]);
                for s in &a.sessions {
                    table.row(vec![
                        s.session_id.clone().unwrap_or_default(),
                        s.user_id.clone().unwrap_or_default(),
                        s.agent_id.clone().unwrap_or_default(),
                    ]);
                }
                table
            })
        }
        MemoryCommand::Search {
            session,
            user,
            agent,
            filter,
            mode,
            keywords,
            vector_weight,
            keyword_weight,
            rrf_k,
            candidates,
            text,
            vector,
            embedding_model,
            metric,
            top_k,
            mark,
            exact,
            include_embeddings,
            output,
        } => {
            let hybrid = (vector_weight.is_some()
                || keyword_weight.is_some()
                || rrf_k.is_some()
                || candidates.is_some())
            .then_some(HybridInput {
                vector_weight,
                keyword_weight,
                k: rrf_k,
                candidates,
            });
            if hybrid.is_some() && mode != Some(ModeArg::Hybrid) {
                return Err(CliError::input(anyhow::anyhow!(
                    "--vector-weight, --keyword-weight, --rrf-k and --candidates tune the fusion \
                     of a hybrid search: add --mode hybrid, or leave them out"
                )));
            }
            let query = match (text, vector) {
                (Some(text), _) => SearchQuery::Text(text),
                (None, Some(vector)) => SearchQuery::Vector(parse_vector(&vector, "--vector")?),
                (None, None) => {
                    return Err(CliError::input(anyhow::anyhow!(
                        "give the query as --text or --vector"
                    )));
                }
            };
            let service = with_embedder(service_for_reading(target)?, embedding_model.as_deref())?;
            let within_one = user.is_none()
                && agent.is_none()
                && filter.is_none()
                && mode.is_none()
                && keywords.is_none();
            let (Some(session), true) = (session.clone(), within_one) else {
                if metric != MetricArg::Cosine {
                    return Err(CliError::input(anyhow::anyhow!(
                        "--metric works within one session only: give --session without \
                         --user, --agent or --filter, or leave --metric out to search across \
                         sessions (by cosine)"
                    )));
                }
                let filter = filter
                    .map(|f| serde_json::from_str::<serde_json::Value>(&f))
                    .transpose()
                    .map_err(|e| CliError::input(anyhow::anyhow!("--filter is not JSON: {e}")))?;
                let mark =
                    mark.map(|m| serde_json::json!({"contains": {"path": "marks", "value": m}}));
                let filter = match (filter, mark) {
                    (Some(f), Some(m)) => Some(serde_json::json!({"and": [f, m]})),
                    (f, m) => f.or(m),
                };
                let input = MemorySearchAcrossInput {
                    user_id: user,
                    agent_id: agent,
                    session_id: session,
                    query,
                    top_k: Some(top_k),
                    filter,
                    mode: match mode {
                        None | Some(ModeArg::Vector) => SearchModeName::Vector,
                        Some(ModeArg::Keyword) => SearchModeName::Keyword,
                        Some(ModeArg::Hybrid) => SearchModeName::Hybrid,
                    },
                    keywords,
                    hybrid,
                    include_embeddings,
                    exact,
                };
                return search_across(&service, input, output);
            };
            let found = service
                .memory_search(MemorySearchInput {
                    session,
                    query,
                    top_k: Some(top_k),
                    metric: match metric {
                        MetricArg::Cosine => MetricName::Cosine,
                        MetricArg::Dot => MetricName::Dot,
                        MetricArg::L2 => MetricName::L2,
                    },
                    mark,
                    exact,
                    include_embeddings,
                })
                .map_err(ops_error)?;
            emit(output.format, &found, |f| {
                let mut table = Table::new(&["score", "index", "id", "name", "content"]);
                for hit in &f.hits {
                    let m = &hit.message.0;
                    table.row(vec![
                        format!("{:.4}", hit.score),
                        hit.index.to_string(),
                        cell(m.get("id")),
                        cell(m.get("name")),
                        cell(m.get("content")),
                    ]);
                }
                table
            })
        }
        MemoryCommand::Reembed {
            embedding_model,
            user,
            agent,
            session,
            batch,
            output,
        } => {
            let service = with_embedder(service_for_writing(target)?, Some(&embedding_model))?;
            let bar = std::io::stderr().is_terminal().then(|| {
                let bar = indicatif::ProgressBar::new(0);
                if let Ok(style) = indicatif::ProgressStyle::with_template(
                    "re-embedding {bar:40} {pos}/{len} messages, {elapsed} elapsed, ETA {eta}",
                ) {
                    bar.set_style(style);
                }
                bar
            });
            let done = service.memory_reembed(
                ReembedInput {
                    user_id: user,
                    agent_id: agent,
                    session_id: session,
                    batch: Some(batch),
                },
                |done, total| {
                    if let Some(bar) = &bar {
                        bar.set_length(total);
                        bar.set_position(done);
                    }
                },
            );
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            let done = done.map_err(ops_error)?;
            emit(output.format, &done, |d| {
                let mut table = Table::new(&["model", "reembedded"]);
                table.row(vec![d.model.clone(), d.reembedded.to_string()]);
                table
            })
        }
        MemoryCommand::Retrieve {
            source,
            query,
            metric,
            top_k,
            preserve_order,
            mark,
            exact,
        } => {
            let vector = parse_vector(&query, "--query")?;
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
                exact,
                // Only ids and scores are printed.
                with_embeddings: false,
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
