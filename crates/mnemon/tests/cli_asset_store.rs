//! The `mnemon asset put|get|list|rm|resolve` and `mnemon ref render|params` commands, run as a
//! user would, on a fresh data directory each.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn mnemon(dir: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(args)
        .current_dir(dir)
        .env_remove("MNEMON_DATA_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the mnemon binary runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a1.json"),
        r#"{"asset_id": "a1", "asset_type": "image", "content": {"image": "x", "labels": ["cat", "sofa"]}}"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("noid.json"), r#"{"content": "text"}"#).unwrap();
    std::fs::write(dir.path().join("bad.json"), "{not json").unwrap();
    dir
}

fn ids(dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["asset", "list"];
    args.extend_from_slice(extra);
    let out = mnemon(dir, &args, "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).lines().map(str::to_owned).collect()
}

#[test]
fn put_prints_ids_and_get_list_rm_work() {
    let dir = setup();
    let d = dir.path();
    let out = mnemon(d, &["asset", "put", "a1.json", "noid.json"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(printed.len(), 2);
    assert_eq!(printed[0], "a1");
    assert_eq!(uuid_version(&printed[1]), Some(4));
    assert!(d.join("data/mnemon.sqlite3").exists());

    let mut sorted = printed.clone();
    sorted.sort();
    assert_eq!(ids(d, &[]), sorted);
    assert_eq!(ids(d, &["--type", "image"]), ["a1"]);

    let out = mnemon(d, &["asset", "get", "a1"], "");
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["content"]["labels"][1], "sofa");

    let out = mnemon(d, &["asset", "rm", "a1"], "");
    assert!(out.status.success());
    assert_eq!(ids(d, &[]), [printed[1].clone()]);
    let out = mnemon(d, &["asset", "rm", "a1"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no asset with id \"a1\""));
}

fn uuid_version(s: &str) -> Option<u32> {
    let parts: Vec<&str> = s.split('-').collect();
    (parts.len() == 5 && s.len() == 36 && s == s.to_lowercase())
        .then(|| parts[2].chars().next()?.to_digit(16))
        .flatten()
}

#[test]
fn bad_inputs_exit_2_and_change_nothing() {
    let dir = setup();
    let d = dir.path();
    assert!(mnemon(d, &["asset", "put", "a1.json"], "").status.success());
    let before = ids(d, &[]);
    for args in [
        vec!["asset", "put", "noid.json", "bad.json"],
        vec!["asset", "put", "missing.json"],
        vec!["asset", "get", "nope"],
        vec!["asset", "resolve", "asset://a1/content/lables"],
        vec!["asset", "resolve", "asset://a1/content/labels/5"],
        vec!["asset", "resolve", "asset://a1/content/labels/x"],
        vec!["asset", "resolve", "asset://zz"],
        vec!["asset", "resolve", "asset://a1?x"],
    ] {
        let out = mnemon(d, &args, "");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(text(&out.stderr).starts_with("error: "), "{args:?}");
    }
    assert_eq!(ids(d, &[]), before);
    let out = mnemon(d, &["asset", "resolve", "asset://a1/content/lables"], "");
    assert_eq!(
        text(&out.stderr),
        "error: asset://a1/content has no key \"lables\"; available keys: \"image\", \"labels\". Correct the field path and try again.\n"
    );
}

#[test]
fn resolve_prints_json() {
    let dir = setup();
    let d = dir.path();
    assert!(mnemon(d, &["asset", "put", "a1.json"], "").status.success());
    let out = mnemon(d, &["asset", "resolve", "asset://a1/content/labels"], "");
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json, serde_json::json!(["cat", "sofa"]));
}

#[test]
fn ref_render_replaces_markers_and_reports_the_rest() {
    let dir = setup();
    let d = dir.path();
    assert!(mnemon(d, &["asset", "put", "a1.json"], "").status.success());
    let input = "Look: <|asset://a1/content/labels/0|>  <|asset://a1/nope|>\n```\n<|asset://a1/content/image|>\n```\n";
    let out = mnemon(d, &["ref", "render"], input);
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout),
        "Look: cat  <|asset://a1/nope|>\n```\n<|asset://a1/content/image|>\n```\n"
    );
    let err = text(&out.stderr);
    assert!(err.contains("<|asset://a1/nope|>"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn ref_params_lenient_and_strict() {
    let dir = setup();
    let d = dir.path();
    assert!(mnemon(d, &["asset", "put", "a1.json"], "").status.success());
    std::fs::write(
        d.join("spec.yaml"),
        "name: show\nparameters:\n  - name: image\n    asset_ref_acceptable: true\n  - name: caption\n",
    )
    .unwrap();
    std::fs::write(
        d.join("spec.json"),
        r#"{"name": "show", "parameters": [{"name": "image", "asset_ref_acceptable": true}]}"#,
    )
    .unwrap();
    std::fs::write(
        d.join("params.json"),
        r#"{"image": "<|asset://a1/content/labels|>", "caption": "asset://a1/content/image"}"#,
    )
    .unwrap();
    std::fs::write(
        d.join("bad_ref.json"),
        r#"{"image": "asset://a1/content/lables"}"#,
    )
    .unwrap();
    std::fs::write(d.join("bad.yaml"), "name: [unclosed").unwrap();

    for spec in ["spec.yaml", "spec.json"] {
        let out = mnemon(d, &["ref", "params", "--spec", spec, "params.json"], "");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"image": ["cat", "sofa"], "caption": "asset://a1/content/image"})
        );
    }
    let out = mnemon(
        d,
        &[
            "ref",
            "params",
            "--spec",
            "spec.yaml",
            "params.json",
            "--strict",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("\"caption\""));
    for (spec, params) in [
        ("spec.yaml", "bad_ref.json"),
        ("bad.yaml", "params.json"),
        ("missing.yaml", "params.json"),
        ("spec.yaml", "missing.json"),
    ] {
        let out = mnemon(d, &["ref", "params", "--spec", spec, params], "");
        assert_eq!(out.status.code(), Some(2), "{spec} {params}");
        assert!(out.stdout.is_empty());
    }
}
