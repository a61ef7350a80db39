//! `mnemon keys …`: the server's API keys (docs/reference/keys.md). Keys live in the data
//! directory's database, or in the `--database-url` database shared by several servers.

use std::io::Write as _;

use anyhow::Context as _;
use clap::parser::ValueSource;
use clap::{Subcommand, ValueEnum};
use mnemon::DATABASE_FILE;
use mnemon::db::Namespace;
use mnemon_keys::{KeyError, KeyInfo, KeyStore, KeyStoreOptions, KeyTime, Revocation, Role};
use serde_json::json;

use super::{CliError, CliResult, Target, print_json};

/// Commands on API keys.
#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Create a key bound to one namespace and a role. The key is printed once, on stdout:
    /// only its SHA-256 digest is stored, so it cannot be shown again.
    Create {
        /// The namespace (tenant) the key gives access to, and no other.
        #[arg(long, value_name = "NAME")]
        namespace: Namespace,
        /// What the key may do there: read < write < admin.
        #[arg(long, value_enum)]
        role: RoleArg,
        /// A note for `keys list` (who or what uses the key).
        #[arg(long, default_value = "", value_name = "TEXT")]
        label: String,
    },
    /// List the keys (never their secrets): id, namespace, role, label, times, revocation.
    List {
        /// Only the keys of this namespace (default: every namespace).
        #[arg(long, value_name = "NAME")]
        namespace: Option<Namespace>,
        /// `table` for people, `json` for programs.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Revoke a key: servers refuse it from their next request (within 1 s for other servers
    /// sharing a PostgreSQL database).
    Revoke {
        /// The key's id: the 16 hex digits after `mnk_`, as `keys list` shows it.
        id: String,
    },
}

/// A role on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum RoleArg {
    /// Read, list, resolve and search.
    Read,
    /// Read, plus add, change and delete.
    Write,
    /// Write, plus the namespace-wide operations.
    Admin,
}

impl From<RoleArg> for Role {
    fn from(role: RoleArg) -> Role {
        match role {
            RoleArg::Read => Role::Read,
            RoleArg::Write => Role::Write,
            RoleArg::Admin => Role::Admin,
        }
    }
}

/// How `keys list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Aligned columns.
    Table,
    /// A JSON array.
    Json,
}

/// Runs a `keys` command.
pub(crate) fn run(command: KeysCommand, target: &Target<'_>, quiet: bool) -> CliResult {
    match command {
        KeysCommand::Create {
            namespace,
            role,
            label,
        } => {
            let keys = open(target, true)?.ok_or_else(|| {
                CliError::failure(anyhow::anyhow!("the key store could not be created"))
            })?;
            // Best effort, for the message below only.
            let first = !keys.requires_keys().unwrap_or(true);
            let created = keys
                .create(&namespace, role.into(), &label)
                .map_err(key_error)?;
            let info = &created.info;
            print_json(&json!({
                "key": created.key(),
                "id": info.id,
                "namespace": info.namespace.as_str(),
                "role": info.role,
                "label": info.label,
                "created": info.created,
            }))?;
            if !quiet {
                eprintln!(
                    "Store this key now: it is shown only once (only its hash is kept). Send it \
                     as `Authorization: Bearer <key>`, over TLS when it leaves this machine."
                );
                if first {
                    eprintln!(
                        "This is the first key of these stores: a `mnemon serve` or `mnemon mcp \
                         --http` running on them since before it runs without keys, and from \
                         now on refuses the requests that need a key until it is restarted \
                         (then it requires one)."
                    );
                }
            }
            Ok(())
        }
        KeysCommand::List { namespace, format } => {
            let namespace = namespace.filter(|_| namespace_given());
            let keys = match open(target, false)? {
                Some(keys) => keys.list(namespace.as_ref()).map_err(key_error)?,
                None => Vec::new(),
            };
            match format {
                Format::Json => print_json(&keys),
                Format::Table => print_table(&keys),
            }
        }
        KeysCommand::Revoke { id } => {
            // Revoking in a data directory without a database finds nothing: say so rather
            // than create one.
            if target.database_url.is_none() && !target.data_dir.join(DATABASE_FILE).exists() {
                return Err(key_error(KeyError::not_found(&id)));
            }
            let keys = open(target, true)?.ok_or_else(|| {
                CliError::failure(anyhow::anyhow!("the key store could not be opened"))
            })?;
            let status = match keys.revoke(&id).map_err(key_error)? {
                Revocation::Revoked => "revoked",
                _ => "already_revoked",
            };
            // Best effort: the revocation is done whatever this read says.
            if !quiet && !keys.any_keys().unwrap_or(true) {
                eprintln!(
                    "That was the last active key: a server over these stores now refuses every \
                     request until a key is created (it never falls back to running open)."
                );
            }
            print_json(&json!({"id": id, "status": status}))
        }
    }
}

/// The key store of `--database-url`, or of the data directory's SQLite file. For writing, the
/// directory and file are created if needed; for reading, a missing file gives `None` (no
/// keys) and an existing one is opened read-only, so listing never creates anything.
fn open(target: &Target<'_>, write: bool) -> Result<Option<KeyStore>, CliError> {
    let options = KeyStoreOptions::default();
    if let Some(url) = target.database_url {
        return KeyStore::open_postgres(url, options)
            .context("cannot open the key store in the --database-url database")
            .map(Some)
            .map_err(CliError::failure);
    }
    let database = target.data_dir.join(DATABASE_FILE);
    if write {
        std::fs::create_dir_all(target.data_dir)
            .with_context(|| {
                format!(
                    "cannot create the data directory {}",
                    target.data_dir.display()
                )
            })
            .map_err(CliError::failure)?;
        KeyStore::open_sqlite(&database, options)
            .map(Some)
            .map_err(key_error)
    } else if database.exists() {
        KeyStore::open_sqlite_read_only(&database, options)
            .map(Some)
            .map_err(key_error)
    } else {
        Ok(None)
    }
}

/// Whether `keys list` was given a namespace (`--namespace`, before or after `keys list`, or
/// `MNEMON_NAMESPACE`). clap fills the subcommand's `--namespace` from the global one's default
/// (`default`), so the parsed value alone cannot tell "every namespace" from `default`: the
/// command line is parsed again for the value's source (it parsed once already, so it parses).
fn namespace_given() -> bool {
    let Ok(matches) =
        <super::Cli as clap::CommandFactory>::command().try_get_matches_from(std::env::args_os())
    else {
        return true;
    };
    let source = matches
        .subcommand_matches("keys")
        .and_then(|keys| keys.subcommand_matches("list"))
        .and_then(|list| list.value_source("namespace"));
    matches!(
        source,
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

fn key_error(error: KeyError) -> CliError {
    if error.is_caller_error() {
        CliError::input(error)
    } else {
        CliError::failure(error)
    }
}

/// Aligned columns, one key per line, never a secret.
fn print_table(keys: &[KeyInfo]) -> CliResult {
    let header = [
        "ID",
        "NAMESPACE",
        "ROLE",
        "CREATED",
        "LAST USED",
        "REVOKED",
        "LABEL",
    ];
    let rows: Vec<[String; 7]> = keys
        .iter()
        .map(|k| {
            [
                k.id.clone(),
                k.namespace.to_string(),
                k.role.to_string(),
                show(Some(k.created)),
                show(k.last_used),
                show(k.revoked),
                k.label.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    let mut line = |cells: &[&str]| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        writeln!(out, "{}", text.trim_end())
    };
    line(&header)
        .and_then(|()| {
            rows.iter().try_for_each(|row| {
                let cells: Vec<&str> = row.iter().map(String::as_str).collect();
                line(&cells)
            })
        })
        .and_then(|()| out.flush())
        .map_err(CliError::failure)
}

/// A key's time as the table shows it: `2026-11-23 21:06:07Z` (to the second, UTC), or `-`.
fn show(time: Option<KeyTime>) -> String {
    time.map_or_else(
        || "-".to_owned(),
        |t| t.format("%Y-%m-%d %H:%M:%SZ").to_string(),
    )
}
