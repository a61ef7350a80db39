//! What the commands built on the typed operations share (docs/ARCHITECTURE.md: the CLI, REST
//! and MCP all call `mnemon-ops`, so they cannot drift): opening a [`Service`] for the global
//! options, mapping an [`OpsError`] to an exit code, and printing an operation's output as JSON
//! or as a table (`--format json|table`).

use std::io::Write as _;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use mnemon::DATABASE_FILE;
use mnemon_ops::{ErrorKind, OpsError, Service, Stores};

use super::{CliError, CliResult, Target, print_json};

/// How a command prints its result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    /// Aligned columns for people to read.
    #[default]
    Table,
    /// The operation's typed output as pretty JSON, for programs.
    Json,
}

/// The `--format` option of the commands built on the operations.
#[derive(Debug, Clone, Copy, Args)]
pub(crate) struct FormatArg {
    /// How to print the result: `table` for people, `json` (the operation's typed output) for
    /// programs.
    #[arg(long = "format", value_enum, default_value_t = OutputFormat::Table)]
    pub(crate) format: OutputFormat,
}

/// Maps an operation's error to an exit code: what the caller can fix (bad input, a name that
/// does not exist, a conflict) is an input error (2), the rest a failure (1). The message is
/// the operation's own, the same REST and MCP clients read.
pub(crate) fn ops_error(error: OpsError) -> CliError {
    match error.kind() {
        ErrorKind::Unavailable | ErrorKind::Internal => CliError::failure(error),
        _ => CliError::input(error),
    }
}

/// The service for a command that writes: the stores are created as needed.
pub(crate) fn service_for_writing(target: &Target<'_>) -> Result<Service, CliError> {
    let stores = Stores::open_with(target.data_dir, &target.open_options())
        .context("cannot open the stores")
        .map_err(CliError::failure)?;
    Ok(unlimited(Service::new(stores)))
}

/// A command's results go to its own output, for its own user: no result limit (the server's
/// `--max-result-bytes` protects a process many clients share).
fn unlimited(service: Service) -> Service {
    service.with_max_result_bytes(usize::MAX)
}

/// The service for a command that only reads. With SQLite and no database yet, the stores are
/// opened read-only, so a read (or a typo in `--data-dir`) never leaves an empty data
/// directory behind and reads as empty; otherwise as for writing.
pub(crate) fn service_for_reading(target: &Target<'_>) -> Result<Service, CliError> {
    if target.database_url.is_none() && !target.data_dir.join(DATABASE_FILE).exists() {
        let stores = Stores::open_read_only(target.data_dir)
            .context("cannot open the stores")
            .map_err(CliError::failure)?;
        return Ok(unlimited(Service::new(stores)));
    }
    service_for_writing(target)
}

/// `service` with the embedder of `--embedding-model`, if one is given.
pub(crate) fn with_embedder(service: Service, model: Option<&str>) -> Result<Service, CliError> {
    let Some(model) = model else {
        return Ok(service);
    };
    let embedder = mnemon::embed::embedder_for_model(model)
        .with_context(|| format!("cannot use --embedding-model {model:?}"))
        .map_err(CliError::input)?;
    Ok(service.with_embedder(Arc::from(embedder)))
}

/// A table: a header row and rows of cells, printed with aligned columns.
#[derive(Debug, Default)]
pub(crate) struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub(crate) fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells print empty, extra cells are kept).
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text: columns padded to their widest cell, separated by two spaces, and
    /// no trailing spaces. Cells are shown on one line (line breaks as `⏎`).
    pub(crate) fn render(&self) -> String {
        let clean = |cell: &str| cell.replace(['\r', '\n'], "⏎");
        let rows: Vec<Vec<String>> = std::iter::once(&self.headers)
            .chain(&self.rows)
            .map(|row| row.iter().map(|c| clean(c)).collect())
            .collect();
        let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|i| {
                rows.iter()
                    .filter_map(|row| row.get(i))
                    .map(|c| c.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut text = String::new();
        for row in &rows {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = row.get(i).map(String::as_str).unwrap_or("");
                if i > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                line.extend(std::iter::repeat_n(
                    ' ',
                    width.saturating_sub(cell.chars().count()),
                ));
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }
}

/// Prints `value` as JSON, or the table `table` makes of it.
pub(crate) fn emit<T: serde::Serialize>(
    format: OutputFormat,
    value: &T,
    table: impl FnOnce(&T) -> Table,
) -> CliResult {
    match format {
        OutputFormat::Json => print_json(value),
        OutputFormat::Table => {
            let text = table(value).render();
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(CliError::failure)
        }
    }
}

/// A JSON value as a table cell: strings bare, everything else as compact JSON.
pub(crate) fn cell(value: Option<&serde_json::Value>) -> String {
    match value {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns_and_trims() {
        let mut table = Table::new(&["id", "content"]);
        table.row(vec!["m1".into(), "hi".into()]);
        table.row(vec!["message-2".into(), "two\nlines".into()]);
        table.row(vec!["m3".into()]);
        assert_eq!(
            table.render(),
            "id         content\nm1         hi\nmessage-2  two⏎lines\nm3\n"
        );
    }

    #[test]
    fn cells_show_strings_bare() {
        assert_eq!(cell(Some(&serde_json::json!("a"))), "a");
        assert_eq!(cell(Some(&serde_json::json!([1, 2]))), "[1,2]");
        assert_eq!(cell(None), "");
    }
}
