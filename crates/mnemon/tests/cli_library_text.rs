//! `mnemon library query --text` and `mnemon library args`: questions in words.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

const SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/sample-library/library.json"
);

/// Runs `mnemon` in a fresh temporary directory (its working and data directory), so that no
/// test writes next to the sample library or into the checkout.
fn mnemon(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args(args)
        .current_dir(dir.path())
        .env("MNEMON_DATA_DIR", dir.path().join("data"))
        .output()
        .expect("the mnemon binary runs")
}

fn titles(output: &Output) -> Vec<String> {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    result["bits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["info"]["title"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn a_question_in_words_finds_the_bits_that_share_its_words() {
    let out = mnemon(&[
        "library",
        "query",
        SAMPLE,
        "--text",
        "sourdough starter",
        "--count",
        "3",
        "--count-type",
        "bit",
    ]);
    let found = titles(&out);
    assert_eq!(found.len(), 3);
    let body = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(body.contains("sourdough"), "{found:?}");
}

#[test]
fn args_prints_what_the_host_takes() {
    let out = mnemon(&[
        "library",
        "args",
        "--text",
        "lighthouse lens",
        "--count",
        "2",
    ]);
    assert!(out.status.success());
    let args: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(args["version"], 1);
    assert_eq!(args["count"], 2);
    assert_eq!(args["query_embedding_model"], "mnemon:hashing-v1-512");
    // The same arguments, given to `library query`, give the same answer as `--text`.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("args.json");
    std::fs::write(&file, &out.stdout).unwrap();
    let via_args = mnemon(&["library", "query", SAMPLE, "--args", file.to_str().unwrap()]);
    let via_text = mnemon(&[
        "library",
        "query",
        SAMPLE,
        "--text",
        "lighthouse lens",
        "--count",
        "2",
    ]);
    assert_eq!(titles(&via_args), titles(&via_text));
}

#[test]
fn unknown_models_and_missing_questions_are_input_errors() {
    let out = mnemon(&["library", "args", "--model", "acme:m", "--text", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no embedder"));
    assert_eq!(mnemon(&["library", "args"]).status.code(), Some(2));
    assert_eq!(mnemon(&["library", "query", SAMPLE]).status.code(), Some(2));
}
