//! `mnemon artifact …`: save artifacts with SaveArtifact, load them with ArtifactMemory, and
//! inspect the store.
//!
//! The records live in `<data-dir>/mnemon.sqlite3` (tables prefixed `artifact_`), and content
//! saved with the `write_to_file` backend under `<data-dir>/artifacts/`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use clap::Subcommand;
use mnemon_artifacts::{
    ArtifactError, ArtifactMemory, ArtifactMemoryConfig, ArtifactStore, BackendRegistry,
    PostgresArtifactOptions, PostgresArtifactStore, SaveArtifact, SaveArtifactConfig,
    SqliteArtifactOptions, SqliteArtifactStore, Uuid,
};
use mnemon_types::Artifact;
use serde_json::{Map, Value};

use mnemon_ops::artifacts::{ArtifactIdInput, ArtifactQueryInput, ExpiringSaves};

use super::format::{FormatArg, Table, emit, ops_error, service_for_reading};
use super::{CliError, CliResult, Target, print_json};
// The data directory's layout is the `Mnemon` handle's (src/handle.rs).
use mnemon::{ARTIFACTS_DIR, DATABASE_FILE};

/// Commands on artifacts.
#[derive(Debug, Subcommand)]
pub(crate) enum ArtifactCommand {
    /// Run SaveArtifact over a JSON map of inputs and print its outputs map as JSON.
    Save {
        /// SaveArtifact config (JSON; the `class_path`/`config` wrapper is accepted).
        #[arg(long, value_name = "CFG.json")]
        config: PathBuf,
        /// The step's inputs: a JSON object of named inputs.
        #[arg(long, value_name = "INPUTS.json")]
        inputs: PathBuf,
        /// The chat or session the artifact belongs to.
        #[arg(long)]
        scope: String,
        /// Forget the record (and its content, at the next `mnemon gc`) this long after the
        /// save: a whole number and a unit, s, m, h, d or w (e.g. `90s`, `30d`, `1h30m`); or
        /// `never`, to keep it until deleted whatever --default-ttl says.
        #[arg(long, value_name = "DURATION", value_parser = parse_ttl)]
        ttl: Option<Ttl>,
    },
    /// Run ArtifactMemory over a JSON map of inputs and print the rendered text.
    Load {
        /// ArtifactMemory config (JSON; the `class_path`/`config` wrapper is accepted).
        #[arg(long, value_name = "CFG.json")]
        config: PathBuf,
        /// The inputs naming the artifacts (by default under `artifact_keys`).
        #[arg(long, value_name = "INPUTS.json")]
        inputs: PathBuf,
        /// The chat or session whose artifacts are visible.
        #[arg(long)]
        scope: String,
    },
    /// List a scope's artifact records as JSON, in save order; with --filter, the records a
    /// metadata filter selects (in --scope, or in every scope without it), each as
    /// `{"artifact", "expires_at_ms"}`.
    List {
        /// The chat or session to list (required without --filter).
        #[arg(long, required_unless_present = "filter")]
        scope: Option<String>,
        /// Only artifacts of this type.
        #[arg(long = "type", value_name = "TYPE", conflicts_with = "filter")]
        artifact_type: Option<String>,
        /// A filter (docs/reference/filters.md) as JSON, e.g.
        /// `{"eq": {"path": "key", "value": "plan"}}`.
        #[arg(long, value_name = "JSON")]
        filter: Option<String>,
    },
    /// Print one artifact record as JSON.
    Show {
        /// The artifact's id (a UUID).
        id: String,
    },
    /// Remove an artifact record (and content it keeps in the database).
    Rm {
        /// The artifact's id (a UUID).
        id: String,
        #[command(flatten)]
        output: FormatArg,
    },
}

/// Runs an `artifact` command.
pub(crate) fn run(command: ArtifactCommand, target: &Target<'_>, quiet: bool) -> CliResult {
    match command {
        ArtifactCommand::Save {
            config,
            inputs,
            scope,
            ttl,
        } => {
            let outputs = save(
                target,
                &read_json(&config)?,
                &read_json(&inputs)?,
                &scope,
                ttl,
            )?;
            print_json(&outputs)
        }
        ArtifactCommand::Load {
            config,
            inputs,
            scope,
        } => {
            let (text, missing) = load(target, &read_json(&config)?, &read_json(&inputs)?, &scope)?;
            if !missing.is_empty() && !quiet {
                eprintln!(
                    "warning: no artifact in scope {scope:?} for: {}",
                    missing.join(", ")
                );
            }
            print_text(&text)
        }
        ArtifactCommand::List {
            scope,
            // `--type` conflicts with `--filter` (write `{"eq": {"path": "type", …}}`).
            artifact_type: _,
            filter: Some(filter),
        } => {
            let filter: Value = serde_json::from_str(&filter)
                .with_context(|| "--filter is not JSON".to_owned())
                .map_err(CliError::input)?;
            let service = service_for_reading(target)?;
            let mut input = ArtifactQueryInput {
                scope,
                filter: Some(filter),
                limit: Some(mnemon_ops::page::MAX_LIMIT),
                cursor: None,
            };
            let mut all = Vec::new();
            loop {
                let page = service.artifact_query(input.clone()).map_err(ops_error)?;
                all.extend(page.artifacts);
                match page.next_cursor {
                    Some(next) => input.cursor = Some(next),
                    None => break,
                }
            }
            print_json(&all)
        }
        ArtifactCommand::List {
            scope,
            artifact_type,
            filter: None,
        } => print_json(&list(
            target,
            scope.as_deref().unwrap_or_default(),
            artifact_type.as_deref(),
        )?),
        ArtifactCommand::Show { id } => print_json(&show(target, &id)?),
        ArtifactCommand::Rm { id, output } => {
            let service = service_for_reading(target)?;
            let removed = service
                .artifact_delete(ArtifactIdInput { id: id.clone() })
                .map_err(ops_error)?;
            emit(output.format, &removed, |r| {
                let mut table = Table::new(&["id", "deleted"]);
                table.row(vec![id, r.deleted.to_string()]);
                table
            })
        }
    }
}

/// Runs SaveArtifact and returns its outputs.
fn save(
    target: &Target<'_>,
    config: &Value,
    inputs: &Value,
    scope: &str,
    ttl: Option<Ttl>,
) -> Result<Map<String, Value>, CliError> {
    let config = SaveArtifactConfig::from_json(config).map_err(artifact_error)?;
    let mut store = create_store(target)?;
    if let Some(ttl) = ttl {
        store = Arc::new(ExpiringSaves::new(store, ttl.expiry()));
    }
    let step = SaveArtifact::new(config, store, backends(target)).map_err(artifact_error)?;
    step.run(scope, inputs).map_err(artifact_error)
}

/// Runs ArtifactMemory and returns the rendered text and the keys that resolved to nothing.
fn load(
    target: &Target<'_>,
    config: &Value,
    inputs: &Value,
    scope: &str,
) -> Result<(String, Vec<String>), CliError> {
    let config = ArtifactMemoryConfig::from_json(config).map_err(artifact_error)?;
    let store: Arc<dyn ArtifactStore> = match existing_store(target)? {
        Some(store) => store,
        // No database yet: nothing was ever saved, so every key is missing.
        None => Arc::new(mnemon_artifacts::InMemoryArtifactStore::new()),
    };
    let memory = ArtifactMemory::new(config, store, backends(target), scope);
    let loaded = memory.load(inputs).map_err(artifact_error)?;
    Ok((loaded.text().to_owned(), loaded.missing_keys))
}

/// A scope's records.
fn list(
    target: &Target<'_>,
    scope: &str,
    artifact_type: Option<&str>,
) -> Result<Vec<Artifact>, CliError> {
    match existing_store(target)? {
        Some(store) => store.list(scope, artifact_type).map_err(artifact_error),
        None => Ok(Vec::new()),
    }
}

/// One record by id.
fn show(target: &Target<'_>, id: &str) -> Result<Artifact, CliError> {
    let uuid = Uuid::parse_str(id.trim())
        .with_context(|| {
            format!(
                "{id:?} is not an artifact id; ids are UUIDs as printed by `mnemon artifact list`"
            )
        })
        .map_err(CliError::input)?;
    let found = match existing_store(target)? {
        Some(store) => store.get(uuid).map_err(artifact_error)?,
        None => None,
    };
    found.ok_or_else(|| {
        CliError::input(anyhow!("no artifact has id {uuid} in {}", location(target)))
    })
}

/// Where the records are, for messages: the SQLite file, or the namespace of the database.
fn location(target: &Target<'_>) -> String {
    match target.database_url {
        Some(_) => format!(
            "namespace {:?} of the --database-url database",
            target.namespace.as_str()
        ),
        None => target.data_dir.join(DATABASE_FILE).display().to_string(),
    }
}

/// The PostgreSQL store of `--database-url`, for the target's namespace.
fn open_postgres(url: &str, target: &Target<'_>) -> Result<Arc<dyn ArtifactStore>, CliError> {
    let options = PostgresArtifactOptions {
        namespace: target.namespace.clone(),
        default_ttl: target.default_ttl,
        ..PostgresArtifactOptions::default()
    };
    let store = PostgresArtifactStore::open(url, options)
        .context("cannot open the artifact store in the --database-url database")
        .map_err(CliError::failure)?;
    Ok(Arc::new(store))
}

fn sqlite_options(target: &Target<'_>) -> SqliteArtifactOptions {
    SqliteArtifactOptions {
        namespace: target.namespace.clone(),
        default_ttl: target.default_ttl,
        ..SqliteArtifactOptions::default()
    }
}

/// The store for writing: PostgreSQL with `--database-url`, else the SQLite store in the data
/// directory, created with the directory if needed.
fn create_store(target: &Target<'_>) -> Result<Arc<dyn ArtifactStore>, CliError> {
    if let Some(url) = target.database_url {
        return open_postgres(url, target);
    }
    let data_dir = target.data_dir;
    let path = data_dir.join(DATABASE_FILE);
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create the data directory {}", data_dir.display()))
        .map_err(CliError::failure)?;
    let store = SqliteArtifactStore::open_with(&path, sqlite_options(target))
        .with_context(|| format!("cannot open the artifact store {}", path.display()))
        .map_err(CliError::failure)?;
    Ok(Arc::new(store))
}

/// The store for reading: PostgreSQL with `--database-url`; else the SQLite store in the data
/// directory, opened read-only, if its database exists: reads never leave an empty database
/// behind, never wait for another process's write, and work on a read-only data directory or
/// mount.
fn existing_store(target: &Target<'_>) -> Result<Option<Arc<dyn ArtifactStore>>, CliError> {
    if let Some(url) = target.database_url {
        return open_postgres(url, target).map(Some);
    }
    let path = target.data_dir.join(DATABASE_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let store = SqliteArtifactStore::open_read_only_with(&path, sqlite_options(target))
        .with_context(|| format!("cannot open the artifact store {}", path.display()))
        .map_err(CliError::failure)?;
    Ok(Some(Arc::new(store)))
}

/// The storage backends: `inline`, and `write_to_file` under `--artifact-files`, or with SQLite
/// by default under `<data dir>/artifacts/` (a non-default namespace's own folder of it). With
/// PostgreSQL and no `--artifact-files` content stays in the database.
fn backends(target: &Target<'_>) -> BackendRegistry {
    let root = match (target.artifact_files, target.database_url) {
        (Some(root), _) => Some(root.to_path_buf()),
        (None, Some(_)) => None,
        (None, None) => Some(target.data_dir.join(ARTIFACTS_DIR)),
    };
    mnemon::artifact_backends(root, target.namespace)
}

/// Maps a library error to the exit code its cause calls for.
pub(crate) fn artifact_error(error: ArtifactError) -> CliError {
    if error.is_caller_error() {
        CliError::input(error)
    } else {
        CliError::failure(error)
    }
}

/// Reads a JSON file; a missing file or bad JSON is an input error.
pub(crate) fn read_json(file: &Path) -> Result<Value, CliError> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read {}", file.display()))
        .map_err(CliError::input)?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", file.display()))
        .map_err(CliError::input)
}

/// Writes `text` on stdout, followed by a newline unless it is empty.
fn print_text(text: &str) -> CliResult {
    let mut out = std::io::stdout().lock();
    let written = if text.is_empty() {
        Ok(())
    } else {
        writeln!(out, "{text}")
    };
    written
        .and_then(|()| out.flush())
        .map_err(CliError::failure)
}

/// A `--ttl` value: a time-to-live, or `never` (kept until deleted, whatever `--default-ttl`
/// says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ttl {
    /// Expire this long after the write.
    After(std::time::Duration),
    /// Never expire.
    Never,
}

impl Ttl {
    /// The stores' expiry for it.
    pub(crate) fn expiry(self) -> mnemon_artifacts::Expiry {
        match self {
            Ttl::After(ttl) => mnemon_artifacts::Expiry::After(ttl),
            Ttl::Never => mnemon_artifacts::Expiry::Never,
        }
    }

    /// The operations' expiry input for it.
    pub(crate) fn input(self) -> mnemon_ops::expiry::ExpiryInput {
        match self {
            Ttl::After(ttl) => mnemon_ops::expiry::ExpiryInput::after(ttl),
            Ttl::Never => mnemon_ops::expiry::ExpiryInput::never(),
        }
    }
}

/// Parses `--ttl`: `never`, or a duration ([`mnemon_ops::expiry::parse_duration`]); zero is
/// refused (it would expire at once).
pub(crate) fn parse_ttl(text: &str) -> Result<Ttl, String> {
    if text.trim() == "never" {
        return Ok(Ttl::Never);
    }
    match mnemon_ops::expiry::parse_duration(text)? {
        ttl if ttl.is_zero() => Err(
            "a time-to-live of 0 would expire at once; write --ttl never \
             (or leave --ttl out, without --default-ttl) to keep the record until deleted"
                .to_owned(),
        ),
        ttl => Ok(Ttl::After(ttl)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon::db::Namespace;
    use serde_json::json;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            let dir = std::env::temp_dir().join(format!("mnemon-cli-artifact-{}", Uuid::now_v7()));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn is_input(result: Result<impl std::fmt::Debug, CliError>) -> bool {
        matches!(result, Err(CliError::Input(_)))
    }

    #[test]
    fn save_then_load_list_and_show() {
        let tmp = TempDir::new();
        let data = tmp.0.join("data");
        let ns = Namespace::default();
        let target = Target {
            data_dir: &data,
            database_url: None,
            namespace: &ns,
            artifact_files: None,
            default_ttl: None,
            durability: mnemon::db::Durability::Full,
        };
        let config = json!({
            "class_path": "ix.chains.artifacts.SaveArtifact",
            "config": {
                "artifact_key": "plan", "artifact_type": "plan", "artifact_name": "The plan",
                "artifact_storage": "write_to_file", "artifact_storage_id": "plans/plan.txt",
            }
        });
        let outputs = save(
            &target,
            &config,
            &json!({"content": "1. parse"}),
            "chat-1",
            None,
        )
        .unwrap();
        let dict = &outputs["artifact"];
        assert_eq!(dict["storage_id"], "plans/plan.txt");
        assert_eq!(
            std::fs::read_to_string(data.join("artifacts/plans/plan.txt")).unwrap(),
            "1. parse"
        );
        assert!(data.join("mnemon.sqlite3").is_file());

        let (text, missing) = load(
            &target,
            &json!({}),
            &json!({"artifact_keys": "Tell me about {plan} and {nope}"}),
            "chat-1",
        )
        .unwrap();
        assert!(text.starts_with("RELATED ARTIFACTS\n\nid: "), "{text}");
        assert!(text.ends_with("data:\n1. parse"), "{text}");
        assert_eq!(missing, ["nope"]);

        let listed = list(&target, "chat-1", None).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(list(&target, "chat-1", Some("file")).unwrap().is_empty());
        assert!(list(&target, "chat-2", None).unwrap().is_empty());

        let id = dict["id"].as_str().unwrap();
        assert_eq!(show(&target, id).unwrap(), listed[0]);
    }

    #[test]
    fn reads_do_not_create_a_database() {
        let tmp = TempDir::new();
        let data = tmp.0.join("never");
        let ns = Namespace::default();
        let target = Target {
            data_dir: &data,
            database_url: None,
            namespace: &ns,
            artifact_files: None,
            default_ttl: None,
            durability: mnemon::db::Durability::Full,
        };
        assert!(list(&target, "s", None).unwrap().is_empty());
        let (text, missing) =
            load(&target, &json!({}), &json!({"artifact_keys": ["a"]}), "s").unwrap();
        assert_eq!(
            (text.as_str(), missing.as_slice()),
            ("", ["a".to_owned()].as_slice())
        );
        assert!(is_input(show(&target, &Uuid::now_v7().to_string())));
        assert!(!data.exists());
    }

    #[test]
    fn caller_mistakes_are_input_errors() {
        let tmp = TempDir::new();
        let data = tmp.0.join("data");
        let ns = Namespace::default();
        let target = Target {
            data_dir: &data,
            database_url: None,
            namespace: &ns,
            artifact_files: None,
            default_ttl: None,
            durability: mnemon::db::Durability::Full,
        };
        assert!(is_input(show(&target, "not-a-uuid")));
        assert!(is_input(save(
            &target,
            &json!({"artifact_nmae": "x"}),
            &json!({}),
            "s",
            None
        )));
        let attack = json!({
            "artifact_key": "k", "artifact_type": "t", "artifact_name": "n",
            "artifact_storage": "write_to_file", "artifact_storage_id": "../../escape.txt",
        });
        assert!(is_input(save(
            &target,
            &attack,
            &json!({"content": "x"}),
            "s",
            None
        )));
        assert!(!tmp.0.join("escape.txt").exists());
        assert!(is_input(read_json(&tmp.0.join("missing.json"))));
    }
}
