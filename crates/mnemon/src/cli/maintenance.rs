//! `mnemon gc` and `mnemon forget`: the sweep of expired records and the deletion of a subject,
//! across every store of the namespace (docs/reference/rest.md#gc-and-forget, the same
//! operations as `POST /v1/gc` and `POST /v1/forget`).

use clap::Args;
use mnemon_ops::maintenance::{ArtifactsSwept, ForgetInput};

use super::format::{FormatArg, Table, emit, ops_error, service_for_writing};
use super::{CliError, CliResult, Target};

/// `mnemon gc`: expired messages, assets and artifact records (with their files).
#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    #[command(flatten)]
    output: FormatArg,
}

/// `mnemon forget`: at least one subject; `--all` alone, with `--yes`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("subject").required(true).multiple(true))]
pub(crate) struct ForgetArgs {
    /// Memory: every thread of this user (narrowed by --agent / --session when given).
    #[arg(long, value_name = "USER", group = "subject")]
    user: Option<String>,
    /// Memory: every thread of this agent.
    #[arg(long, value_name = "AGENT", group = "subject")]
    agent: Option<String>,
    /// Memory: every thread of this session.
    #[arg(long, value_name = "SESSION", group = "subject")]
    session: Option<String>,
    /// Assets: every asset whose id starts with this.
    #[arg(long, value_name = "PREFIX", group = "subject")]
    asset_prefix: Option<String>,
    /// Artifacts: every record whose scope starts with this, with its content files.
    #[arg(long, value_name = "PREFIX", group = "subject")]
    artifact_scope: Option<String>,
    /// Everything of the namespace (--namespace, `default` unless given) in every store.
    /// Needs --yes, and no other subject.
    #[arg(long, group = "subject", conflicts_with_all = ["user", "agent", "session", "asset_prefix", "artifact_scope"])]
    all: bool,
    /// Confirms --all.
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    output: FormatArg,
}

/// The rows of an artifact sweep, for the tables.
fn artifact_rows(table: &mut Table, swept: &ArtifactsSwept) {
    table.row(vec!["artifacts".into(), swept.records.to_string()]);
    table.row(vec![
        "artifact files".into(),
        swept.content_removed.to_string(),
    ]);
    for error in &swept.content_errors {
        table.row(vec!["artifact file not removed".into(), error.clone()]);
    }
}

/// Runs `mnemon gc`.
pub(crate) fn run_gc(args: GcArgs, target: &Target<'_>) -> CliResult {
    let service = service_for_writing(target)?;
    let swept = service.gc().map_err(ops_error)?;
    emit(args.output.format, &swept, |s| {
        let mut table = Table::new(&["store", "removed"]);
        table.row(vec!["messages".into(), s.messages.to_string()]);
        table.row(vec!["assets".into(), s.assets.to_string()]);
        artifact_rows(&mut table, &s.artifacts);
        table
    })
}

/// Runs `mnemon forget`.
pub(crate) fn run_forget(args: ForgetArgs, target: &Target<'_>) -> CliResult {
    if args.all && !args.yes {
        return Err(CliError::input(anyhow::anyhow!(
            "--all deletes every asset, artifact and message of namespace {:?}; add --yes to \
             confirm",
            target.namespace.as_str()
        )));
    }
    let input = ForgetInput {
        user_id: args.user,
        agent_id: args.agent,
        session_id: args.session,
        asset_prefix: args.asset_prefix,
        artifact_scope_prefix: args.artifact_scope,
        namespace: args.all.then(|| target.namespace.as_str().to_owned()),
    };
    let service = service_for_writing(target)?;
    let forgotten = service.forget(input).map_err(ops_error)?;
    emit(args.output.format, &forgotten, |f| {
        let mut table = Table::new(&["store", "removed"]);
        table.row(vec!["memory threads".into(), f.memory.threads.to_string()]);
        table.row(vec!["messages".into(), f.memory.messages.to_string()]);
        table.row(vec!["assets".into(), f.assets.to_string()]);
        artifact_rows(&mut table, &f.artifacts);
        table
    })
}
