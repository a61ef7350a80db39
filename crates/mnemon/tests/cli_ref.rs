//! The `mnemon` binary's reference and asset-meta commands, run as a user would.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn mnemon(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args(args)
        .env_remove("MNEMON_DATA_DIR")
        .output()
        .expect("the mnemon binary runs")
}

fn stdout_json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).expect("stdout is JSON")
}

#[test]
fn ref_parse_prints_the_object_form() {
    let out = mnemon(&["ref", "parse", "asset://a1/content/labels/0"]);
    assert!(out.status.success());
    assert_eq!(
        stdout_json(&out),
        serde_json::json!({"asset_id": "a1", "field_path": ["content", "labels", 0]})
    );
}

#[test]
fn ref_parse_rejects_bad_urls_with_exit_code_2() {
    for url in [
        "asset://",
        "asset://a1?x",
        "asset://a1#f",
        "asset://a1/%zz",
        "asset://a1/%FF",
        "asset://a 1",
        "http://a1",
    ] {
        let out = mnemon(&["ref", "parse", url]);
        assert_eq!(out.status.code(), Some(2), "{url}");
        assert!(out.stdout.is_empty(), "{url}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{url}: {err}");
    }
}

#[test]
fn ref_format_prints_the_canonical_url() {
    let out = mnemon(&[
        "ref",
        "format",
        r#"{"asset_id": "a 1", "field_path": ["content", 0, "x/y"]}"#,
    ]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "asset://a%201/content/0/x%2Fy\n"
    );
    let bad = mnemon(&["ref", "format", r#"{"id": 1}"#]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn asset_meta_flattens_in_order() {
    let dir = std::env::temp_dir().join(format!("mnemon-cli-meta-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("asset.json");
    std::fs::write(
        &file,
        r#"{"asset_id": "a1", "content": {"a/b": {"~": 1}, "list": []}}"#,
    )
    .unwrap();
    let path = file.to_str().unwrap();

    let out = mnemon(&["asset", "meta", path, "--flatten"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let flat = stdout_json(&out);
    assert_eq!(
        flat,
        serde_json::json!({
            "asset_id": "a1",
            "content": "<class 'dict'>",
            "content/a~1b": "<class 'dict'>",
            "content/a~1b/~0": 1,
            "content/list": "<class 'list'>"
        })
    );
    // Keys come out in depth-first order.
    assert!(text.find("content/a~1b/~0").unwrap() < text.find("content/list").unwrap());

    let leaves = mnemon(&[
        "asset",
        "meta",
        path,
        "--flatten",
        "--no-container-types",
        "--sep",
        ".",
    ]);
    assert_eq!(
        stdout_json(&leaves),
        serde_json::json!({"asset_id": "a1", "content.a/b.~0": 1, "content.list": []})
    );

    let bad_sep = mnemon(&["asset", "meta", path, "--flatten", "--sep", "~"]);
    assert_eq!(bad_sep.status.code(), Some(2));
    let missing = mnemon(&["asset", "meta", "/nonexistent/asset.json"]);
    assert_eq!(missing.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_version_and_completions_work() {
    assert!(mnemon(&["--help"]).status.success());
    assert!(mnemon(&["ref", "parse", "--help"]).status.success());
    let version = mnemon(&["--version"]);
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("mnemon "));
    let completions = mnemon(&["completions", "bash"]);
    assert!(completions.status.success());
    assert!(String::from_utf8_lossy(&completions.stdout).contains("mnemon"));
    // A usage error is exit code 2, as clap reports it.
    assert_eq!(mnemon(&["ref", "nonsense"]).status.code(), Some(2));
}
