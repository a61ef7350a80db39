//! `mnemon.toml`: the command line's settings in a file, below flags and the environment
//! (docs/reference/config.md).
//!
//! The file's keys are the long flags without their dashes: top-level keys are the global
//! options (`data-dir`, `database-url`, `namespace`, `artifact-files`, `quiet`) and apply to
//! every command; the `[serve]` table holds `mnemon serve`'s own flags. A setting is used only
//! where neither the command line nor the flag's environment variable gave one, so the order is
//! flags, then environment, then the file, then the built-in defaults.
//!
//! It works on the command line itself: the arguments are parsed once to learn which options
//! are already set (clap's value sources), the file's other settings are appended as flags, and
//! the result is parsed again by the derived parser, which so validates a file value exactly as
//! it validates the same flag typed by hand.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory};
use toml_edit::{DocumentMut, Item, Value};

use super::{Cli, CliError};

/// The file looked for in the current directory when no `--config-file` is given.
pub(crate) const DEFAULT_FILE: &str = "mnemon.toml";

/// The file's table for `mnemon serve`'s flags.
const SERVE_TABLE: &str = "serve";

/// A file whose settings were added to the command line.
#[derive(Debug)]
pub(crate) struct Applied {
    /// The file read.
    pub(crate) path: PathBuf,
    /// The settings taken from it (`key` or `serve.key`), in file order.
    pub(crate) keys: Vec<String>,
}

/// `argv` with the config file's settings appended where the command line and the environment
/// set nothing, and which file that was (`None` without one). A command line clap refuses is
/// returned unchanged, for the real parse to report.
pub(crate) fn apply(argv: Vec<OsString>) -> Result<(Vec<OsString>, Option<Applied>), CliError> {
    let Ok(matches) = Cli::command().try_get_matches_from(&argv) else {
        return Ok((argv, None));
    };
    let explicit = matches.get_one::<PathBuf>("config_file").cloned();
    let path = match explicit {
        Some(path) => {
            if !path.is_file() {
                return Err(CliError::input(anyhow!(
                    "the config file {} does not exist: give an existing file with \
                     --config-file (or MNEMON_CONFIG_FILE), or remove the option",
                    path.display()
                )));
            }
            path
        }
        None => {
            let path = PathBuf::from(DEFAULT_FILE);
            if !path.is_file() {
                return Ok((argv, None));
            }
            path
        }
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read the config file {}", path.display()))
        .map_err(CliError::input)?;
    let (extra, keys) = settings(&text, &matches)
        .with_context(|| format!("in the config file {}", path.display()))
        .map_err(CliError::input)?;
    Ok((with_flags(argv, extra), Some(Applied { path, keys })))
}

/// `argv` with `flags` added where clap reads them as flags: before a `--`, after which every
/// word is a positional argument (a message id, a file name).
fn with_flags(mut argv: Vec<OsString>, flags: Vec<OsString>) -> Vec<OsString> {
    let end = argv
        .iter()
        .skip(1)
        .position(|word| word == "--")
        .map_or(argv.len(), |at| at + 1);
    argv.splice(end..end, flags);
    argv
}

/// The flags the file `text` adds to a command line whose parse is `matches`, and the keys
/// they came from.
fn settings(text: &str, matches: &ArgMatches) -> anyhow::Result<(Vec<OsString>, Vec<String>)> {
    let document: DocumentMut = text.parse().map_err(|e| anyhow!("not valid TOML: {e}"))?;
    let root = Cli::command();
    let serve = root
        .find_subcommand(SERVE_TABLE)
        .context("the serve command is missing")?
        .clone();
    let serving = matches.subcommand_name() == Some(SERVE_TABLE);
    let mut flags = Vec::new();
    let mut keys = Vec::new();
    for (key, item) in document.iter() {
        if key == SERVE_TABLE {
            let Some(table) = item.as_table_like() else {
                bail!("`serve` must be a table ([serve]) of `mnemon serve` flags");
            };
            for (key, item) in table.iter() {
                let arg = find(&serve, key).with_context(|| {
                    format!(
                        "unknown setting `serve.{key}`: the [serve] table takes `mnemon serve`'s \
                         flags ({})",
                        names(&serve)
                    )
                })?;
                // `[serve]` applies to `mnemon serve` only; other commands ignore it.
                if !serving {
                    continue;
                }
                let Some(sub) = matches.subcommand_matches(SERVE_TABLE) else {
                    continue;
                };
                // `$LIBRARY_FILENAME` names the library over the file, as the environment
                // does for every other setting (docs/reference/config.md).
                if arg.get_long() == Some("library")
                    && std::env::var_os("LIBRARY_FILENAME").is_some_and(|v| !v.is_empty())
                {
                    continue;
                }
                if push(&mut flags, &serve, arg, item, sub, &format!("serve.{key}"))? {
                    keys.push(format!("serve.{key}"));
                }
            }
            continue;
        }
        let arg = find(&root, key).with_context(|| {
            if item.is_table_like() {
                format!("unknown table [{key}]: the file has top-level settings and [serve]")
            } else {
                format!(
                    "unknown setting `{key}`: top-level keys are the global options ({}); \
                     `mnemon serve`'s flags go in [serve]",
                    names(&root)
                )
            }
        })?;
        if push(&mut flags, &root, arg, item, matches, key)? {
            keys.push(key.to_owned());
        }
    }
    Ok((flags, keys))
}

/// The option of `command` whose long flag is `key` (`max-body-bytes`, or `max_body_bytes`);
/// never `help`, `version` or `config-file` itself.
fn find<'c>(command: &'c clap::Command, key: &str) -> Option<&'c clap::Arg> {
    let long = key.replace('_', "-");
    command.get_arguments().find(|arg| {
        arg.get_long() == Some(long.as_str())
            && !matches!(long.as_str(), "help" | "version" | "config-file")
    })
}

/// The long flags `command` takes from the file, for an error message.
fn names(command: &clap::Command) -> String {
    command
        .get_arguments()
        .filter_map(clap::Arg::get_long)
        .filter(|long| !matches!(*long, "help" | "version" | "config-file"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Appends `arg`'s flag (an option of `command`) with the file's `item` to `flags`, unless
/// the command line or the environment already set it, or set a flag it conflicts with (the
/// command line wins: `--no-recall-index` over the file's `recall-index-min-messages`);
/// whether it did.
fn push(
    flags: &mut Vec<OsString>,
    command: &clap::Command,
    arg: &clap::Arg,
    item: &Item,
    matches: &ArgMatches,
    key: &str,
) -> anyhow::Result<bool> {
    let given = |id: &str| {
        matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    // Declared on either side (`conflicts_with` names one direction only).
    let conflict = |a: &clap::Arg, b: &clap::Arg| {
        command
            .get_arg_conflicts_with(a)
            .iter()
            .any(|x| x.get_id() == b.get_id())
    };
    if given(arg.get_id().as_str())
        || command.get_arguments().any(|other| {
            given(other.get_id().as_str()) && (conflict(arg, other) || conflict(other, arg))
        })
    {
        return Ok(false);
    }
    let long = arg.get_long().context("an option without a long flag")?;
    let Some(value) = item.as_value() else {
        bail!("`{key}` must be a value (a string, number, boolean or array), not a table");
    };
    if matches!(arg.get_action(), ArgAction::SetTrue) {
        let Some(on) = value.as_bool() else {
            bail!("`{key}` is a switch: write `{key} = true` or `{key} = false`");
        };
        if on {
            flags.push(format!("--{long}").into());
        }
        return Ok(on);
    }
    let values: Vec<&Value> = match value.as_array() {
        Some(array) if matches!(arg.get_action(), ArgAction::Append) => array.iter().collect(),
        Some(_) => bail!("`{key}` takes one value, not an array"),
        None => vec![value],
    };
    for value in values {
        flags.push(format!("--{long}={}", scalar(value, key)?).into());
    }
    Ok(true)
}

/// A TOML scalar as the text typed after a flag.
fn scalar(value: &Value, key: &str) -> anyhow::Result<String> {
    Ok(match value {
        Value::String(s) => s.value().clone(),
        Value::Integer(i) => i.value().to_string(),
        Value::Float(f) => f.value().to_string(),
        Value::Boolean(b) => b.value().to_string(),
        Value::Datetime(d) => d.value().to_string(),
        Value::Array(_) | Value::InlineTable(_) => {
            bail!("`{key}` must be a string, a number or a boolean")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_flags_go_before_a_double_dash() {
        let words = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
        let flags = words(&["--namespace", "acme"]);
        assert_eq!(
            with_flags(
                words(&["mnemon", "memory", "delete", "--session", "s", "--", "m1"]),
                flags.clone()
            ),
            words(&[
                "mnemon",
                "memory",
                "delete",
                "--session",
                "s",
                "--namespace",
                "acme",
                "--",
                "m1"
            ])
        );
        assert_eq!(
            with_flags(words(&["mnemon", "asset", "list"]), flags.clone()),
            words(&["mnemon", "asset", "list", "--namespace", "acme"])
        );
    }

    fn matches(args: &[&str]) -> ArgMatches {
        Cli::command()
            .try_get_matches_from(std::iter::once("mnemon").chain(args.iter().copied()))
            .unwrap()
    }

    fn flags(text: &str, args: &[&str]) -> anyhow::Result<Vec<String>> {
        let (flags, _) = settings(text, &matches(args))?;
        Ok(flags
            .into_iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect())
    }

    #[test]
    fn the_file_fills_what_the_command_line_left_unset() {
        let text = "namespace = \"acme\"\ndata_dir = \"/srv/mnemon\"\n\n[serve]\n\
                    max-body-bytes = 1024\ninsecure = true\nqueue-timeout = 2.5\n";
        assert_eq!(
            flags(text, &["serve"]).unwrap(),
            [
                "--namespace=acme",
                "--data-dir=/srv/mnemon",
                "--max-body-bytes=1024",
                "--insecure",
                "--queue-timeout=2.5"
            ]
        );
        // A flag on the command line wins; [serve] is ignored by other commands.
        assert_eq!(
            flags(text, &["--namespace", "other", "asset", "list"]).unwrap(),
            ["--data-dir=/srv/mnemon"]
        );
        // A switch set to false adds nothing.
        assert!(
            flags("[serve]\ninsecure = false\n", &["serve"])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn durability_comes_from_the_flag_or_the_file_and_reaches_the_stores() {
        use clap::FromArgMatches;
        let durability = |args: &[&str]| {
            let cli = Cli::from_arg_matches(&matches(args)).unwrap();
            let durability: mnemon::db::Durability = cli.durability.into();
            durability
        };
        assert_eq!(durability(&["asset", "list"]), mnemon::db::Durability::Full);
        assert_eq!(
            durability(&["--durability", "normal", "serve"]),
            mnemon::db::Durability::Normal
        );
        // The file's key becomes the flag, which the command line then parses as typed.
        let from_file = flags("durability = \"normal\"\n", &["mcp"]).unwrap();
        assert_eq!(from_file, ["--durability=normal"]);
        let mut args = vec!["mcp"];
        args.extend(from_file.iter().map(String::as_str));
        assert_eq!(durability(&args), mnemon::db::Durability::Normal);
        let target = super::super::Target {
            data_dir: std::path::Path::new("data"),
            database_url: None,
            namespace: &mnemon::db::Namespace::default(),
            artifact_files: None,
            default_ttl: None,
            durability: durability(&args),
        };
        assert_eq!(
            target.open_options().durability,
            mnemon::db::Durability::Normal
        );
        let refused = Cli::command()
            .try_get_matches_from(["mnemon", "--durability", "off", "asset", "list"])
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("full") && refused.contains("normal"),
            "{refused}"
        );
    }

    #[test]
    fn mistakes_name_the_key_and_what_to_write() {
        let error = |text: &str| format!("{:#}", flags(text, &["serve"]).unwrap_err());
        assert!(error("nmespace = \"x\"").contains("unknown setting `nmespace`"));
        assert!(
            error("[serve]\nmax-bodybytes = 1").contains("unknown setting `serve.max-bodybytes`")
        );
        assert!(error("[server]\naddr = \"x\"").contains("unknown table [server]"));
        assert!(error("[serve]\ninsecure = \"yes\"").contains("is a switch"));
        assert!(error("[serve]\naddr = [\"a\", \"b\"]").contains("one value, not an array"));
        assert!(error("namespace = ").contains("not valid TOML"));
        assert!(error("serve = 3").contains("must be a table"));
        assert!(error("help = true").contains("unknown setting `help`"));
    }
}
