//! The commands built on the typed operations (`mnemon-ops`): `memory add|delete|clear|mark|
//! unmark|sessions|search`, `artifact rm`, `asset meta <stored id>`, binary asset content in
//! (`--file`, `--data-url`) and out (`--out`), and `--format json|table`; run as a user would.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

fn mnemon_env(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(args)
        .current_dir(dir)
        .env_remove("MNEMON_DATA_DIR")
        .env_remove("MNEMON_DATABASE_URL")
        .env_remove("MNEMON_NAMESPACE")
        .env_remove("MNEMON_EMBEDDING_MODEL")
        .envs(env.iter().copied())
        .output()
        .expect("the mnemon binary runs")
}

fn mnemon(dir: &Path, args: &[&str]) -> Output {
    mnemon_env(dir, &[], args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

fn ok_json(dir: &Path, args: &[&str]) -> Value {
    let out = mnemon(dir, args);
    serde_json::from_str(&ok(&out)).expect("stdout is JSON")
}

/// Runs a command that must fail with exit code 2; returns stderr.
fn input_error(dir: &Path, args: &[&str]) -> String {
    let out = mnemon(dir, args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

fn message(id: &str, content: &str, embedding: Option<Vec<f32>>) -> Value {
    let mut m = json!({"id": id, "name": "user", "content": content, "role": "user"});
    if let Some(e) = embedding {
        m["embedding"] = json!(e);
    }
    m
}

#[test]
fn memory_add_mark_unmark_delete_clear_and_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Nothing yet: the list is empty, and reading created no data directory.
    assert_eq!(
        ok_json(d, &["memory", "sessions", "--format", "json"]),
        json!({"sessions": []})
    );
    assert!(!d.join("data").exists());

    std::fs::write(
        d.join("msgs.json"),
        serde_json::to_string(&json!([
            message("m1", "one", None),
            message("m2", "two", None)
        ]))
        .unwrap(),
    )
    .unwrap();
    let added = ok_json(
        d,
        &[
            "memory",
            "add",
            "--session",
            "s",
            "--json",
            "msgs.json",
            "--mark",
            "pin",
            "--format",
            "json",
        ],
    );
    assert_eq!(added, json!({"added": 2, "skipped_duplicates": []}));
    let added = ok_json(
        d,
        &[
            "memory",
            "add",
            "--session",
            "s",
            "--content",
            "three",
            "--role",
            "assistant",
            "--name",
            "bot",
            "--format",
            "json",
        ],
    );
    assert_eq!(added["added"], 1);
    // Table by default: a header and a row.
    let table = ok(&mnemon(
        d,
        &["memory", "add", "--session", "t", "--content", "x"],
    ));
    assert_eq!(table, "added  skipped_duplicates\n1\n");

    let show = ok_json(d, &["memory", "show", "--session", "s"]);
    let shown = show.as_array().unwrap();
    assert_eq!(shown.len(), 3);
    assert_eq!(shown[2]["content"], "three");
    assert_eq!(shown[2]["role"], "assistant");
    assert_eq!(shown[2]["name"], "bot");
    let pinned = ok_json(d, &["memory", "show", "--session", "s", "--mark", "pin"]);
    assert_eq!(pinned.as_array().unwrap().len(), 2);

    let third = shown[2]["id"].as_str().unwrap().to_owned();
    let marked = ok_json(
        d,
        &[
            "memory",
            "mark",
            "--session",
            "s",
            "--mark",
            "pin",
            &third,
            "--format",
            "json",
        ],
    );
    assert_eq!(marked, json!({"changed": 1}));
    let unmarked = ok_json(
        d,
        &[
            "memory",
            "unmark",
            "--session",
            "s",
            "--mark",
            "pin",
            "m1",
            "--format",
            "json",
        ],
    );
    assert_eq!(unmarked, json!({"changed": 1}));
    let pinned = ok_json(d, &["memory", "show", "--session", "s", "--mark", "pin"]);
    let ids: Vec<&str> = pinned
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m2", third.as_str()]);
    // Unmark without ids: off every message.
    let table = ok(&mnemon(
        d,
        &["memory", "unmark", "--session", "s", "--mark", "pin"],
    ));
    assert_eq!(table, "changed\n2\n");

    let deleted = ok_json(
        d,
        &[
            "memory",
            "delete",
            "--session",
            "s",
            "m1",
            "nope",
            "--format",
            "json",
        ],
    );
    assert_eq!(deleted, json!({"deleted": ["m1"], "not_found": ["nope"]}));
    assert_eq!(
        ok_json(d, &["memory", "show", "--session", "s"])
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let sessions = ok_json(d, &["memory", "sessions", "--format", "json"]);
    assert_eq!(
        sessions,
        json!({"sessions": [{"session_id": "s"}, {"session_id": "t"}]})
    );
    let table = ok(&mnemon(d, &["memory", "sessions"]));
    assert_eq!(table, "session_id  user_id  agent_id\ns\nt\n");

    let cleared = ok_json(
        d,
        &["memory", "clear", "--session", "s", "--format", "json"],
    );
    assert_eq!(cleared, json!({"deleted": true}));
    let sessions = ok_json(d, &["memory", "sessions", "--format", "json"]);
    assert_eq!(sessions, json!({"sessions": [{"session_id": "t"}]}));

    // The operations' errors, with exit code 2.
    let err = input_error(d, &["memory", "clear", "--session", "s"]);
    assert!(err.contains("no memory session \"s\""), "{err}");
    let err = input_error(
        d,
        &["memory", "mark", "--session", "gone", "--mark", "x", "m"],
    );
    assert!(err.contains("no memory session \"gone\""), "{err}");
    let err = input_error(d, &["memory", "add", "--session", "", "--content", "x"]);
    assert!(err.contains("must not be empty"), "{err}");
    std::fs::write(d.join("bad.json"), "{not json").unwrap();
    let err = input_error(
        d,
        &["memory", "add", "--session", "t", "--json", "bad.json"],
    );
    assert!(err.contains("not valid JSON"), "{err}");
}

#[test]
fn memory_show_leaves_embeddings_out_unless_asked_and_search_by_text() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = "mnemon:hashing-v1-64";
    let embedder = mnemon::embed::embedder_for_model(model).unwrap();
    let texts = [
        "the cat sat on the sofa",
        "quarterly tax report",
        "a dog in the park",
    ];
    let vectors = embedder.embed(&texts).unwrap();
    let messages: Vec<Value> = texts
        .iter()
        .zip(&vectors)
        .enumerate()
        .map(|(i, (t, v))| message(&format!("m{i}"), t, Some(v.clone())))
        .collect();
    std::fs::write(d.join("msgs.json"), Value::Array(messages).to_string()).unwrap();
    ok(&mnemon(
        d,
        &["memory", "add", "--session", "s", "--json", "msgs.json"],
    ));

    let plain = ok_json(d, &["memory", "show", "--session", "s"]);
    assert!(
        plain
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m.get("embedding").is_none()),
        "{plain}"
    );
    let full = ok_json(
        d,
        &["memory", "show", "--session", "s", "--include-embeddings"],
    );
    let first: Vec<f32> = serde_json::from_value(full[0]["embedding"].clone()).unwrap();
    assert_eq!(first, vectors[0]);

    // By text, with the model the embeddings were made with: the tax report ranks first.
    let found = ok_json(
        d,
        &[
            "memory",
            "search",
            "--session",
            "s",
            "--text",
            "quarterly tax report",
            "--embedding-model",
            model,
            "--top-k",
            "2",
            "--format",
            "json",
        ],
    );
    let hits = found["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0]["message"]["id"], "m1");
    assert_eq!(hits[0]["index"], 1);
    assert!(hits[0]["message"].get("embedding").is_none());
    // By vector, as a table.
    let vector = serde_json::to_string(&vectors[2]).unwrap();
    let table = ok(&mnemon(
        d,
        &[
            "memory",
            "search",
            "--session",
            "s",
            "--vector",
            &vector,
            "--top-k",
            "1",
        ],
    ));
    assert_eq!(
        table,
        "score   index  id  name  content\n1.0000  2      m2  user  a dog in the park\n"
    );
    // Text without an embedder: the operation's message, exit code 2.
    let err = input_error(d, &["memory", "search", "--session", "s", "--text", "x"]);
    assert!(err.contains("needs an embedder"), "{err}");
}

#[test]
fn memory_search_across_sessions_with_embed_on_add() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = "mnemon:hashing-v1-64";
    for (session, content) in [
        ("s1", "the ferry leaves at noon"),
        ("s2", "ferry tickets are sold out"),
        ("s3", "quarterly tax report"),
    ] {
        ok(&mnemon(
            d,
            &[
                "memory",
                "add",
                "--session",
                session,
                "--content",
                content,
                "--embed",
                "--embedding-model",
                model,
            ],
        ));
    }
    // Without --embed nothing is embedded, so a search across sessions skips it.
    ok(&mnemon(
        d,
        &[
            "memory",
            "add",
            "--session",
            "s4",
            "--content",
            "the ferry leaves at noon",
        ],
    ));
    let search = |extra: &[&str]| {
        let mut args = vec![
            "memory",
            "search",
            "--text",
            "the ferry leaves at noon",
            "--embedding-model",
            model,
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        ok_json(d, &args)
    };
    let found = search(&["--top-k", "10"]);
    let sessions: Vec<&str> = found["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(sessions, ["s1", "s2", "s3"], "{found}");
    assert_eq!(found["hits"][0]["index"], 0);
    assert_eq!(
        found["hits"][0]["message"]["content"],
        "the ferry leaves at noon"
    );
    assert!(found["hits"][0]["message"].get("embedding").is_none());
    // Narrowed to one session with --user: these threads have no user, so nothing.
    let none = search(&["--user", "u1"]);
    assert_eq!(none["hits"], json!([]));
    // A filter applies before the top-k cut: the one match, even at top 1.
    let tax = search(&[
        "--top-k",
        "1",
        "--filter",
        r#"{"eq": {"path": "content", "value": "quarterly tax report"}}"#,
    ]);
    assert_eq!(tax["hits"].as_array().unwrap().len(), 1, "{tax}");
    assert_eq!(tax["hits"][0]["session_id"], "s3");
    // By words, with no embedder at all.
    let out = mnemon(
        d,
        &[
            "memory", "search", "--text", "tickets", "--mode", "keyword", "--format", "json",
        ],
    );
    let words: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(words["hits"].as_array().unwrap().len(), 1, "{words}");
    assert_eq!(words["hits"][0]["session_id"], "s2");
    let hybrid = search(&["--mode", "hybrid", "--keywords", "tax"]);
    assert_eq!(hybrid["hits"][0]["session_id"], "s3", "{hybrid}");
    // The fusion's weights: the vector ranking weighted up, with a small k, puts the exact
    // text (s1) above the keyword match (s3).
    let weighted = search(&[
        "--mode",
        "hybrid",
        "--keywords",
        "tax",
        "--vector-weight",
        "10",
        "--keyword-weight",
        "1",
        "--rrf-k",
        "1",
        "--candidates",
        "10",
    ]);
    assert_eq!(weighted["hits"][0]["session_id"], "s1", "{weighted}");
    let err = input_error(
        d,
        &[
            "memory",
            "search",
            "--text",
            "ferry",
            "--embedding-model",
            model,
            "--vector-weight",
            "2",
        ],
    );
    assert!(err.contains("--mode hybrid"), "{err}");
    // A mark across sessions is a filter on marks: none of these messages has one.
    let marked = search(&["--mark", "m"]);
    assert_eq!(marked["hits"], json!([]));
    let err = input_error(
        d,
        &[
            "memory",
            "search",
            "--text",
            "ferry",
            "--embedding-model",
            model,
            "--filter",
            r#"{"eq": {"path": "role"}}"#,
        ],
    );
    assert!(err.contains("bad filter"), "{err}");
    // The one-session metric is refused across sessions, saying why.
    let err = input_error(
        d,
        &[
            "memory",
            "search",
            "--text",
            "ferry",
            "--embedding-model",
            model,
            "--metric",
            "dot",
        ],
    );
    assert!(
        err.contains("--metric works within one session only"),
        "{err}"
    );
    let err = input_error(
        d,
        &[
            "memory",
            "add",
            "--session",
            "s",
            "--content",
            "x",
            "--embed",
        ],
    );
    assert!(err.contains("--embedding-model"), "{err}");
    // With --embedding-model, an add embeds by default (no --embed needed); --no-embed opts
    // out, and such a message is no candidate for a search across sessions.
    ok(&mnemon(
        d,
        &[
            "memory",
            "add",
            "--session",
            "s5",
            "--content",
            "the ferry leaves at noon",
            "--embedding-model",
            model,
        ],
    ));
    ok(&mnemon(
        d,
        &[
            "memory",
            "add",
            "--session",
            "s6",
            "--content",
            "the ferry leaves at noon",
            "--embedding-model",
            model,
            "--no-embed",
        ],
    ));
    let found_default = search(&["--top-k", "10"]);
    let mut sessions: Vec<&str> = found_default["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["session_id"].as_str().unwrap())
        .collect();
    sessions.sort_unstable();
    assert_eq!(sessions, ["s1", "s2", "s3", "s5"], "{found_default}");
    let err = input_error(
        d,
        &[
            "memory",
            "add",
            "--session",
            "s7",
            "--content",
            "x",
            "--embed",
            "--no-embed",
            "--embedding-model",
            model,
        ],
    );
    assert!(err.contains("--no-embed"), "{err}");
}

#[test]
fn binary_assets_in_by_file_and_data_url_and_out_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Every byte value, including invalid UTF-8.
    let bytes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    std::fs::write(d.join("blob.bin"), &bytes).unwrap();
    let id = ok(&mnemon(
        d,
        &[
            "asset",
            "put",
            "--id",
            "img",
            "--file",
            "blob.bin",
            "--content-type",
            "image/png",
        ],
    ));
    assert_eq!(id, "img\n");
    ok(&mnemon(d, &["asset", "get", "img", "--out", "back.bin"]));
    assert_eq!(std::fs::read(d.join("back.bin")).unwrap(), bytes);
    let got = ok_json(d, &["asset", "get", "img"]);
    assert_eq!(got["content_type"], "image/png");

    // The same bytes as a data URL (base64 of 0..=255 then 255..=0).
    let b64 = base64_encode(&bytes);
    let url = format!("data:application/octet-stream;base64,{b64}");
    assert_eq!(
        ok(&mnemon(
            d,
            &["asset", "put", "--id", "blob", "--data-url", &url]
        )),
        "blob\n"
    );
    ok(&mnemon(d, &["asset", "get", "blob", "--out", "blob.out"]));
    assert_eq!(std::fs::read(d.join("blob.out")).unwrap(), bytes);

    // JSON content goes out as JSON.
    std::fs::write(
        d.join("a1.json"),
        r#"{"asset_id": "a1", "content": {"labels": ["cat", "sofa"], "note": "a long note"}}"#,
    )
    .unwrap();
    ok(&mnemon(d, &["asset", "put", "a1.json"]));
    ok(&mnemon(d, &["asset", "get", "a1", "--out", "a1.out"]));
    let out: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("a1.out")).unwrap()).unwrap();
    assert_eq!(
        out,
        json!({"labels": ["cat", "sofa"], "note": "a long note"})
    );

    // Mistakes: not base64, not a data URL, unknown id.
    let err = input_error(
        d,
        &[
            "asset",
            "put",
            "--id",
            "x",
            "--data-url",
            "data:text/plain,hi",
        ],
    );
    assert!(err.contains("must be base64"), "{err}");
    let err = input_error(
        d,
        &[
            "asset",
            "put",
            "--id",
            "x",
            "--data-url",
            "data:;base64,@@@",
        ],
    );
    assert!(err.contains("not standard base64"), "{err}");
    let err = input_error(d, &["asset", "get", "nope", "--out", "nope.out"]);
    assert!(err.contains("no asset with id \"nope\""), "{err}");
    assert!(!d.join("nope.out").exists());
}

#[test]
fn asset_meta_of_a_stored_id_and_artifact_rm() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("a1.json"),
        r#"{"asset_id": "a1", "content": {"labels": ["cat", "sofa"], "note": "a long note"}}"#,
    )
    .unwrap();
    ok(&mnemon(d, &["asset", "put", "a1.json"]));
    // The stored asset's meta equals the file's.
    let from_file = ok_json(d, &["asset", "meta", "a1.json"]);
    let stored = ok_json(d, &["asset", "meta", "a1"]);
    assert_eq!(stored, from_file);
    assert_eq!(stored["content"]["labels"], json!(["cat", "sofa"]));
    let flat_file = ok_json(d, &["asset", "meta", "a1.json", "--flatten"]);
    let flat_stored = ok_json(d, &["asset", "meta", "a1", "--flatten"]);
    assert_eq!(flat_file, flat_stored);
    let short = ok_json(d, &["asset", "meta", "a1", "--max-string-len", "4"]);
    assert_ne!(short["content"]["note"], "a long note");
    // --stored reads the store even when a file of that name exists.
    std::fs::write(d.join("a1"), r#"{"asset_id": "other", "content": 1}"#).unwrap();
    assert_eq!(ok_json(d, &["asset", "meta", "a1", "--stored"]), stored);
    let err = input_error(d, &["asset", "meta", "missing"]);
    assert!(err.contains("no asset with id \"missing\""), "{err}");

    // artifact rm, through artifact_delete.
    std::fs::write(
        d.join("cfg.json"),
        r#"{"artifact_key": "plan", "artifact_type": "plan", "artifact_name": "The plan"}"#,
    )
    .unwrap();
    std::fs::write(d.join("in.json"), r#"{"content": "1. parse"}"#).unwrap();
    let saved = ok_json(
        d,
        &[
            "artifact", "save", "--config", "cfg.json", "--inputs", "in.json", "--scope", "c",
        ],
    );
    let id = saved["artifact"]["id"].as_str().unwrap().to_owned();
    let removed = ok_json(d, &["artifact", "rm", &id, "--format", "json"]);
    assert_eq!(removed, json!({"deleted": true}));
    assert_eq!(ok_json(d, &["artifact", "list", "--scope", "c"]), json!([]));
    let err = input_error(d, &["artifact", "rm", &id]);
    assert!(err.contains("no artifact with id"), "{err}");
    let err = input_error(d, &["artifact", "rm", "not-a-uuid"]);
    assert!(!err.is_empty());
}

#[test]
fn ttl_and_filters_on_assets_and_artifacts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("keep.json"),
        r#"{"asset_id": "keep", "asset_type": "note", "content": "stays"}"#,
    )
    .unwrap();
    std::fs::write(
        d.join("brief.json"),
        r#"{"asset_id": "brief", "asset_type": "note", "content": "goes"}"#,
    )
    .unwrap();
    ok(&mnemon(d, &["asset", "put", "keep.json"]));
    ok(&mnemon(
        d,
        &["asset", "put", "brief.json", "--ttl", "1h30m"],
    ));
    std::fs::write(d.join("blob.bin"), [1u8, 2, 3]).unwrap();
    ok(&mnemon(
        d,
        &[
            "asset", "put", "--id", "blob", "--file", "blob.bin", "--ttl", "2d",
        ],
    ));
    let listed = ok(&mnemon(d, &["asset", "list", "--expiry"]));
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    assert!(lines[0].starts_with("blob\t"), "{listed}");
    assert!(lines[1].starts_with("brief\t"), "{listed}");
    assert_eq!(lines[2], "keep\tnever");
    let blob: i64 = lines[0].split('\t').nth(1).unwrap().parse().unwrap();
    let brief: i64 = lines[1].split('\t').nth(1).unwrap().parse().unwrap();
    // 2 days against 1.5 hours, both from about now.
    assert!(blob - brief > 40 * 3_600_000, "{listed}");
    // `asset get --format json|table` shows the expiry too (the plain `asset get` prints the
    // asset alone, as before).
    let got = ok_json(d, &["asset", "get", "brief", "--format", "json"]);
    assert_eq!(got["asset"]["asset_id"], "brief", "{got}");
    assert_eq!(got["asset"]["content"], "goes", "{got}");
    assert_eq!(got["expires_at_ms"].as_i64(), Some(brief), "{got}");
    let kept = ok_json(d, &["asset", "get", "keep", "--format", "json"]);
    assert!(kept.get("expires_at_ms").is_none(), "{kept}");
    let table = ok(&mnemon(d, &["asset", "get", "brief", "--format", "table"]));
    assert!(
        table.lines().next().unwrap().contains("expires_at_ms"),
        "{table}"
    );
    assert!(table.contains(&brief.to_string()), "{table}");
    let table = ok(&mnemon(d, &["asset", "get", "keep", "--format", "table"]));
    assert!(table.contains("never"), "{table}");
    let plain = ok_json(d, &["asset", "get", "brief"]);
    assert_eq!(plain["content"], "goes", "{plain}");
    assert!(plain.get("expires_at_ms").is_none(), "{plain}");
    let expiring = ok(&mnemon(
        d,
        &["asset", "list", "--filter", r#"{"exists": "expires_at"}"#],
    ));
    assert_eq!(expiring, "blob\nbrief\n");
    let notes = ok(&mnemon(
        d,
        &[
            "asset",
            "list",
            "--type",
            "note",
            "--filter",
            r#"{"not": {"exists": "expires_at"}}"#,
        ],
    ));
    assert_eq!(notes, "keep\n");
    let err = input_error(
        d,
        &["asset", "list", "--filter", r#"{"eq": {"path": "x"}}"#],
    );
    assert!(err.contains("bad filter"), "{err}");
    let err = input_error(d, &["asset", "put", "keep.json", "--ttl", "soon"]);
    assert!(err.contains("e.g. 90s"), "{err}");
    let err = input_error(d, &["asset", "put", "keep.json", "--ttl", "0"]);
    assert!(err.contains("expire at once"), "{err}");

    std::fs::write(
        d.join("cfg.json"),
        r#"{"artifact_key": "plan", "artifact_type": "plan", "artifact_name": "The plan"}"#,
    )
    .unwrap();
    std::fs::write(d.join("in.json"), r#"{"content": "1. parse"}"#).unwrap();
    let save = |scope: &str, ttl: Option<&str>| {
        let mut args = vec![
            "artifact", "save", "--config", "cfg.json", "--inputs", "in.json", "--scope", scope,
        ];
        if let Some(ttl) = ttl {
            args.extend(["--ttl", ttl]);
        }
        ok_json(d, &args)
    };
    save("a", Some("10m"));
    save("b", None);
    let listed = ok_json(
        d,
        &[
            "artifact",
            "list",
            "--filter",
            r#"{"exists": "expires_at"}"#,
        ],
    );
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["artifact"]["scope"], "a");
    assert!(listed[0]["expires_at_ms"].as_i64().unwrap() > 1_700_000_000_000);
    let in_b = ok_json(
        d,
        &[
            "artifact",
            "list",
            "--scope",
            "b",
            "--filter",
            r#"{"eq": {"path": "key", "value": "plan"}}"#,
        ],
    );
    assert_eq!(in_b.as_array().unwrap().len(), 1);
    assert!(in_b[0].get("expires_at_ms").is_none(), "{in_b}");
    let err = input_error(
        d,
        &[
            "artifact",
            "list",
            "--filter",
            r#"{"eq": {"path": "colour", "value": 1}}"#,
        ],
    );
    assert!(err.contains("colour"), "{err}");
}

#[test]
fn gc_and_forget_across_the_stores() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (id, ttl) in [
        ("tmp-1", Some("1s")),
        ("u1-a", None),
        ("u1-b", None),
        ("u2-a", None),
    ] {
        std::fs::write(
            d.join(format!("{id}.json")),
            format!(r#"{{"asset_id": "{id}", "content": 1}}"#),
        )
        .unwrap();
        let file = format!("{id}.json");
        let mut args = vec!["asset", "put", file.as_str()];
        if let Some(ttl) = ttl {
            args.extend(["--ttl", ttl]);
        }
        ok(&mnemon(d, &args));
    }
    for session in ["s1", "s2"] {
        ok(&mnemon(
            d,
            &["memory", "add", "--session", session, "--content", "hello"],
        ));
    }
    ok(&mnemon(
        d,
        &[
            "memory",
            "add",
            "--session",
            "s2",
            "--content",
            "brief",
            "--ttl",
            "1s",
        ],
    ));
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let swept = ok_json(d, &["gc", "--format", "json"]);
    assert_eq!(swept["assets"], 1, "{swept}");
    assert_eq!(swept["messages"], 1, "{swept}");
    assert_eq!(swept["artifacts"]["records"], 0, "{swept}");
    let again = ok(&mnemon(d, &["gc"]));
    assert!(again.contains("assets") && again.contains('0'), "{again}");

    let forgot = ok_json(
        d,
        &[
            "forget",
            "--session",
            "s1",
            "--asset-prefix",
            "u1-",
            "--format",
            "json",
        ],
    );
    assert_eq!(forgot["memory"], json!({"threads": 1, "messages": 1}));
    assert_eq!(forgot["assets"], 2);
    assert_eq!(ok(&mnemon(d, &["asset", "list"])), "u2-a\n");

    // The whole namespace: only with --yes, and with no other subject.
    let err = input_error(d, &["forget", "--all"]);
    assert!(err.contains("--yes"), "{err}");
    let out = mnemon(d, &["forget", "--all", "--user", "u", "--yes"]);
    assert_eq!(out.status.code(), Some(2));
    let out = mnemon(d, &["forget"]);
    assert_eq!(out.status.code(), Some(2));
    let all = ok_json(d, &["forget", "--all", "--yes", "--format", "json"]);
    assert_eq!(all["assets"], 1);
    assert_eq!(all["memory"]["threads"], 1);
    assert_eq!(ok(&mnemon(d, &["asset", "list"])), "");
}

#[test]
fn memory_reembed_is_resumable_and_makes_messages_searchable() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = "mnemon:hashing-v1-64";
    for (session, content) in [
        ("s1", "the ferry leaves at noon"),
        ("s2", "tickets sold out"),
    ] {
        ok(&mnemon(
            d,
            &["memory", "add", "--session", session, "--content", content],
        ));
    }
    let search = || {
        ok_json(
            d,
            &[
                "memory",
                "search",
                "--text",
                "ferry",
                "--embedding-model",
                model,
                "--format",
                "json",
            ],
        )
    };
    // Added without embeddings: a search across sessions has no candidates yet.
    assert_eq!(search()["hits"], json!([]));
    let first = ok_json(
        d,
        &[
            "memory",
            "reembed",
            "--embedding-model",
            model,
            "--session",
            "s1",
            "--format",
            "json",
        ],
    );
    assert_eq!(first, json!({"model": model, "reembedded": 1}));
    let hits = search();
    assert_eq!(hits["hits"].as_array().unwrap().len(), 1, "{hits}");
    assert_eq!(hits["hits"][0]["session_id"], "s1");
    let rest = ok_json(
        d,
        &[
            "memory",
            "reembed",
            "--embedding-model",
            model,
            "--batch",
            "1",
            "--format",
            "json",
        ],
    );
    assert_eq!(rest["reembedded"], 1);
    let none = ok_json(
        d,
        &[
            "memory",
            "reembed",
            "--embedding-model",
            model,
            "--format",
            "json",
        ],
    );
    assert_eq!(none["reembedded"], 0);
    let err = input_error(
        d,
        &[
            "memory",
            "reembed",
            "--embedding-model",
            model,
            "--batch",
            "0",
        ],
    );
    assert!(err.contains("batch must be at least 1"), "{err}");
}

#[test]
fn new_commands_run_on_postgresql() {
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("cli_ops").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let env = [
        ("MNEMON_DATABASE_URL", url.as_str()),
        ("MNEMON_NAMESPACE", "acme"),
    ];
    let run = |args: &[&str]| ok(&mnemon_env(d, &env, args));
    run(&["memory", "add", "--session", "s", "--content", "hi"]);
    assert_eq!(
        run(&["memory", "sessions", "--format", "json"])
            .parse::<Value>()
            .unwrap(),
        json!({"sessions": [{"session_id": "s"}]})
    );
    // Another namespace does not see it.
    let other = mnemon_env(
        d,
        &[("MNEMON_DATABASE_URL", url.as_str())],
        &["memory", "sessions", "--format", "json"],
    );
    assert_eq!(
        ok(&other).parse::<Value>().unwrap(),
        json!({"sessions": []})
    );
    let bytes: Vec<u8> = (0..=255u8).collect();
    std::fs::write(d.join("b.bin"), &bytes).unwrap();
    run(&["asset", "put", "--id", "b", "--file", "b.bin"]);
    run(&["asset", "get", "b", "--out", "b.out"]);
    assert_eq!(std::fs::read(d.join("b.out")).unwrap(), bytes);
    run(&["memory", "clear", "--session", "s"]);
    assert!(!d.join("data").exists());
}

/// Standard base64 with padding, written out here so the test does not share the code under
/// test.
fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `mnemon import` puts each thread's scratch file in the data directory, not the system's
/// temporary folder (often memory-backed, and as large as the thread): with `TMPDIR` naming
/// no folder at all, an export and import of a namespace with a thread still work. Before,
/// the import failed creating its scratch folder there.
#[test]
fn a_backup_import_keeps_its_scratch_file_beside_the_stores() {
    let dir = tempfile::tempdir().unwrap();
    ok(&mnemon(
        dir.path(),
        &["memory", "add", "--session", "s", "--content", "kept"],
    ));
    let backup = dir.path().join("backup.jsonl");
    ok(&mnemon(dir.path(), &["export", backup.to_str().unwrap()]));
    let nowhere = dir.path().join("no such folder");
    let target = dir.path().join("target");
    let out = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .arg("--data-dir")
        .arg(&target)
        .args(["import", backup.to_str().unwrap()])
        .env_remove("MNEMON_DATA_DIR")
        .env_remove("MNEMON_DATABASE_URL")
        .env_remove("MNEMON_NAMESPACE")
        .env("TMPDIR", &nowhere)
        .output()
        .unwrap();
    let report: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(report["threads"], 1, "{report}");
    assert_eq!(report["messages"], 1, "{report}");
    let leftovers: Vec<_> = std::fs::read_dir(&target)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".mnemon-import-")
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
