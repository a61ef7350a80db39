//! The calls of `cargo xtask bench server`'s MCP comparison (docs/bench-server.md), made alike
//! by every client (xtask/bench/mcp_calls.cjs, the TypeScript SDK's; `mcp_rust.rs`, rmcp's;
//! `mcp_raw.rs`, raw JSON-RPC) against Mnemon, the reference memory server and the null
//! server: which tool each call is, with which arguments, and how the kept adds are read from
//! the answers.

use std::ffi::OsString;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::{MCP_GROUPS, TOP_K};

/// Which tools the client calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Mnemon's `remember` and `recall`.
    Mnemon,
    /// The reference's `add_observations` and `search_nodes`.
    Reference,
    /// Mnemon's calls, to the null server (nothing is kept or counted).
    Null,
}

/// Where the server is.
#[derive(Debug, Clone)]
pub(super) enum Endpoint {
    /// Streamable HTTP at this URL.
    Http(String),
    /// A child process speaking newline-delimited JSON-RPC on its stdin and stdout.
    Stdio {
        command: OsString,
        args: Vec<OsString>,
        env: Vec<(String, OsString)>,
    },
}

/// The command of a stdio server: `command args`, with `env` set and Mnemon's own variables
/// unset, so that `mnemon mcp` opens the stores its arguments name only.
pub(super) fn stdio_command(
    command: &OsString,
    args: &[OsString],
    env: Vec<(String, OsString)>,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args)
        .envs(env)
        .env_remove("MNEMON_DATABASE_URL")
        .env_remove("MNEMON_NAMESPACE")
        .env_remove("MNEMON_CONFIG_FILE")
        .env_remove("MNEMON_EMBEDDING_MODEL");
    cmd
}

/// The group (session, entity) of call `i`: the names mcp_calls.cjs uses.
pub(super) fn group(i: usize) -> String {
    format!("topic-{:02}", i % MCP_GROUPS)
}

/// The text of add `i`, as mcp_calls.cjs writes it.
pub(super) fn content(i: usize) -> String {
    format!("note {i}: the build on host {} took {} s", i % 17, i % 60)
}

/// Which call of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Before the clock: the reference's entities, one per group.
    Setup,
    /// Add `i`: one message (observation) to group `i`'s session (entity).
    Add,
    /// Search `i`: a query in group `i`.
    Search,
    /// Counting call `i` of the kept adds, after a phase of `calls` adds.
    Count { calls: usize },
}

/// Call `i` of `step` for `kind`: the tool and its arguments, the same for every client (and
/// xtask/bench/mcp_calls.cjs); `None` when `kind` makes no such call (no setup but the
/// reference's, no counting on the null server, counting calls past the last).
pub(super) fn tool_call(kind: Kind, step: Step, i: usize) -> Option<(&'static str, Value)> {
    match (step, kind) {
        (Step::Setup, Kind::Reference) if i == 0 => {
            let entities: Vec<Value> = (0..MCP_GROUPS)
                .map(|g| json!({"name": group(g), "entityType": "log", "observations": []}))
                .collect();
            Some(("create_entities", json!({"entities": entities})))
        }
        (Step::Setup, _) => None,
        (Step::Add, Kind::Reference) => Some((
            "add_observations",
            json!({"observations": [{"entityName": group(i), "contents": [content(i)]}]}),
        )),
        (Step::Add, Kind::Mnemon | Kind::Null) => Some((
            "remember",
            json!({"session": group(i),
                   "messages": [{"name": "user", "role": "user", "content": content(i)}]}),
        )),
        (Step::Search, Kind::Reference) => Some(("search_nodes", json!({"query": group(i)}))),
        (Step::Search, Kind::Mnemon | Kind::Null) => Some((
            "recall",
            json!({"session": group(i), "query": format!("build on host {}", i % 17),
                   "top_k": TOP_K}),
        )),
        (Step::Count { .. }, Kind::Reference) if i == 0 => Some(("read_graph", json!({}))),
        (Step::Count { calls }, Kind::Mnemon) if i < MCP_GROUPS => Some((
            "recall",
            json!({"session": group(i), "recent": calls.max(1)}),
        )),
        (Step::Count { .. }, _) => None,
    }
}

/// Whether a JSON-RPC answer is a success: a result that is no tool error.
pub(super) fn answer_ok(answer: &Value) -> bool {
    answer
        .get("result")
        .is_some_and(|r| r.get("isError") != Some(&Value::Bool(true)))
}

/// What went wrong in an unsuccessful answer, for the first-error line.
pub(super) fn answer_error(answer: &Value) -> String {
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| answer["error"].to_string());
    text.chars().take(300).collect()
}

/// A tool result's JSON: its structured content, else its first text block parsed.
fn structured(answer: &Value) -> Option<Value> {
    let result = answer.get("result")?;
    if let Some(value) = result.get("structuredContent") {
        return Some(value.clone());
    }
    serde_json::from_str(result["content"][0]["text"].as_str()?).ok()
}

/// The calls that count the kept adds after `calls` adds: Mnemon's `recall` of each session's
/// latest `calls`, the reference's `read_graph`; none for the null server.
pub(super) fn count_calls(kind: Kind, calls: usize) -> Vec<(&'static str, Value)> {
    (0..)
        .map_while(|g| tool_call(kind, Step::Count { calls }, g))
        .collect()
}

/// The adds that the answer (JSON-RPC) to counting call `i` holds.
pub(super) fn kept_from(kind: Kind, i: usize, answer: &Value) -> Result<u64> {
    if !answer_ok(answer) {
        bail!("counting call {i} failed: {}", answer_error(answer));
    }
    let value = structured(answer).context("a counting call answered no JSON")?;
    Ok(match kind {
        Kind::Reference => value["entities"]
            .as_array()
            .context("read_graph answered no entities")?
            .iter()
            .map(|e| e["observations"].as_array().map_or(0, |o| o.len() as u64))
            .sum(),
        Kind::Mnemon | Kind::Null => value["messages"].as_array().map_or(0, |m| m.len() as u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_match_the_sdk_scripts() {
        // The same names and texts as xtask/bench/mcp_calls.cjs.
        assert_eq!(group(17), "topic-01");
        assert_eq!(content(61), "note 61: the build on host 10 took 1 s");
        let (tool, _) = tool_call(Kind::Reference, Step::Add, 3).unwrap();
        assert_eq!(tool, "add_observations");
        let (tool, arguments) = tool_call(Kind::Mnemon, Step::Search, 20).unwrap();
        assert_eq!(tool, "recall");
        assert_eq!(arguments["query"], json!("build on host 3"));
        assert!(tool_call(Kind::Mnemon, Step::Setup, 0).is_none());
        assert_eq!(
            tool_call(Kind::Reference, Step::Setup, 0).unwrap().1["entities"]
                .as_array()
                .map(Vec::len),
            Some(MCP_GROUPS)
        );
    }

    #[test]
    fn answers_are_judged_by_their_result() {
        assert!(answer_ok(&json!({"id": 1, "result": {"isError": false}})));
        assert!(answer_ok(&json!({"id": 1, "result": {}})));
        assert!(!answer_ok(&json!({"id": 1, "result": {"isError": true}})));
        assert!(!answer_ok(&json!({"id": 1, "error": {"code": -32602}})));
    }

    #[test]
    fn kept_adds_are_read_from_either_server() {
        let graph = json!({"result": {"structuredContent": {"entities": [
            {"observations": ["a", "b"]}, {"observations": ["c"]}]}}});
        assert_eq!(kept_from(Kind::Reference, 0, &graph).unwrap(), 3);
        let text = json!({"result": {"content": [{"type": "text",
            "text": "{\"messages\": [{}, {}]}"}]}});
        assert_eq!(kept_from(Kind::Mnemon, 0, &text).unwrap(), 2);
        assert!(kept_from(Kind::Mnemon, 0, &json!({"result": {"isError": true}})).is_err());
        assert_eq!(count_calls(Kind::Null, 10).len(), 0);
        assert_eq!(count_calls(Kind::Reference, 10).len(), 1);
        assert_eq!(count_calls(Kind::Mnemon, 10).len(), MCP_GROUPS);
    }
}
