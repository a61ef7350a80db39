//! `mnemon mcp` end to end through rmcp's client: the built binary spawned over stdio, and
//! `mnemon mcp --http 127.0.0.1:0` (docs/reference/mcp.md). The tools themselves are covered
//! tool by tool in mnemon-mcp's tests; these check the command: its options open the right
//! stores and library, stdout carries only the protocol, and errors are tool errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};

async fn call(peer: &Peer<RoleClient>, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    peer.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap()
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// Remembers in one session and recalls it; searches the sample library; fails one call.
async fn session(peer: &Peer<RoleClient>) {
    let tools = peer.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 12, "{tools:?}");
    let added = call(
        peer,
        "remember",
        json!({"session": "cli", "messages": [
            {"name": "user", "content": "the spare key is under the blue flowerpot"},
            {"name": "user", "content": "lunch is at one"}
        ]}),
    )
    .await;
    assert_eq!(
        added.structured_content,
        Some(json!({"added": 2, "skipped_duplicates": []}))
    );
    let found = call(
        peer,
        "recall",
        json!({"query": "where is the spare key", "top_k": 1}),
    )
    .await;
    let found = found.structured_content.unwrap();
    assert_eq!(found["messages"][0]["session"], "cli");
    assert!(
        found["messages"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("flowerpot")
    );
    let bits = call(
        peer,
        "search_library",
        json!({"text": "bees in winter", "count": 1}),
    )
    .await;
    assert_eq!(bits.is_error, Some(false), "{}", text_of(&bits));
    let missing = call(peer, "describe_asset", json!({"asset_id": "nope"})).await;
    assert_eq!(missing.is_error, Some(true));
    let body: Value = serde_json::from_str(&text_of(&missing)).unwrap();
    assert_eq!(body["error"]["code"], "asset_not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_stdio_serves_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let library = concat!(env!("CARGO_MANIFEST_DIR"), "/sample-library/library.json");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mnemon"));
    command.arg("--data-dir").arg(dir.path()).args([
        "--namespace",
        "agents",
        "mcp",
        "--library",
        library,
    ]);
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    session(&client).await;
    client.cancel().await.unwrap();

    // What the tools wrote is in the data directory, in the namespace asked for.
    let shown = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .arg("--data-dir")
        .arg(dir.path())
        .args([
            "--namespace",
            "agents",
            "memory",
            "show",
            "--session",
            "cli",
        ])
        .output()
        .unwrap();
    assert!(shown.status.success(), "{shown:?}");
    assert!(String::from_utf8_lossy(&shown.stdout).contains("flowerpot"));
}

/// Kills the server if the test fails before stopping it, so no orphan keeps the test's
/// output pipe open.
struct Reaper(std::process::Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `mnemon --data-dir dir mcp --http 127.0.0.1:0 extra…` and reads its URL (the first
/// line on stdout).
fn spawn_http(dir: &std::path::Path, extra: &[&str]) -> (Reaper, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .arg("--data-dir")
        .arg(dir)
        .args(["mcp", "--http", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Reaper(child);
    let mut url = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    (child, url.trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_http_prints_its_url_and_serves_it() {
    // The workspace builds reqwest's rustls without a default crypto provider (mnemon-embed
    // installs ring before its client too): the test's client does the same.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let library = concat!(env!("CARGO_MANIFEST_DIR"), "/sample-library/library.json");
    let (mut child, url) = spawn_http(dir.path(), &["--library", library]);
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
    session(&client).await;
    client.cancel().await.unwrap();
    // SIGTERM: a graceful stop, exit code 0.
    let pid = child.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert!(child.0.wait().unwrap().success());
}

#[test]
fn mcp_over_http_refuses_a_non_loopback_address() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["mcp", "--http", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));
}

/// A deployment that has had API keys never runs open: `mnemon mcp`, which checks none,
/// refuses to serve it over HTTP (stdio stays: it is a local process with the files anyway).
#[test]
fn mcp_over_http_refuses_a_deployment_with_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mnemon = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mnemon"));
        command.arg("--data-dir").arg(dir.path());
        command
    };
    let created = mnemon()
        .args(["keys", "create", "--namespace", "acme", "--role", "read"])
        .output()
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    let out = mnemon()
        .args(["mcp", "--http", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("API keys") && stderr.contains("mnemon serve"),
        "{stderr}"
    );
}

/// `mnemon mcp --http` started before any key existed kept serving every tool call after
/// `mnemon keys create`, as an open `mnemon serve` did (docs/reference/keys.md#running-open):
/// now, within a second of the first key, every tool call is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_http_refuses_tool_calls_once_a_key_is_created() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let (_child, url) = spawn_http(dir.path(), &[]);
    let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
    let listed = call(&client, "list_sessions", json!({})).await;
    assert_ne!(listed.is_error, Some(true), "{}", text_of(&listed));
    let created = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .arg("--data-dir")
        .arg(dir.path())
        .args([
            "keys",
            "create",
            "--namespace",
            "default",
            "--role",
            "admin",
        ])
        .output()
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let listed = call(&client, "list_sessions", json!({})).await;
        if listed.is_error == Some(true) {
            assert!(
                text_of(&listed).contains("restarted"),
                "{}",
                text_of(&listed)
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "tool calls still served 10 s after a key was created"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    client.cancel().await.unwrap();
}
