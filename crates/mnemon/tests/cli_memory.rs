//! The `mnemon memory` commands, run as a user would: the real binary, a temporary data
//! directory, the AgentScope fixtures of `tests/fixtures/agentscope`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mnemon::memory::{Scope, SqliteMemoryOptions, SqliteMemoryStore};
use serde_json::{Value, json};

/// The byte-exact AgentScope 0.0.4 export (docs/reference/memory.md#conformance check 2).
const V004: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/agentscope/export_v004.json"
);
const V016: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/agentscope/export_v016.json"
);
const CASES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/agentscope/memory_cases.json"
);

/// The fixture's retrieval query.
const QUERY: &str = "[0.2, -0.4, 0.5, 0.7]";

fn id(suffix: &str) -> String {
    format!("a00000000000000000000000000000{suffix}")
}

fn mnemon(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env_remove("MNEMON_DATA_DIR")
        .output()
        .expect("the mnemon binary runs")
}

/// Runs a command that must succeed and returns its stdout as JSON.
fn ok_json(data_dir: &Path, args: &[&str]) -> Value {
    let out = mnemon(data_dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

/// Runs a command that must fail with exit code 2, print nothing on stdout and an error
/// message on stderr; returns the message.
fn input_error(data_dir: &Path, args: &[&str]) -> String {
    let out = mnemon(data_dir, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}");
    assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    stderr
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn read_json(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(messages: &Value) -> Vec<String> {
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Exports `session` with its marks and returns the bytes: the "did anything change" probe.
fn snapshot(data_dir: &Path, session: &str) -> Vec<u8> {
    let file = data_dir.join(format!("snapshot-{session}.json"));
    ok_json(
        data_dir,
        &[
            "memory",
            "export",
            "--session",
            session,
            "--include-marks",
            path_str(&file),
        ],
    );
    let bytes = std::fs::read(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    bytes
}

fn threads(data_dir: &Path) -> Vec<Scope> {
    let store = SqliteMemoryStore::open(
        data_dir.join("mnemon.sqlite3"),
        SqliteMemoryOptions::default(),
    )
    .unwrap();
    store.threads().unwrap()
}

/// The v004 export with marks added: `pin` on …04 and …07, `later` on …07.
fn write_marked_export(dir: &Path) -> PathBuf {
    let mut messages = read_json(V004);
    for m in messages.as_array_mut().unwrap() {
        let marks = match &m["id"].as_str().unwrap()[30..] {
            "04" => json!(["pin"]),
            "07" => json!(["pin", "later"]),
            _ => continue,
        };
        m.as_object_mut().unwrap().insert("__marks".into(), marks);
    }
    let path = dir.join("marked.json");
    std::fs::write(&path, serde_json::to_string(&messages).unwrap()).unwrap();
    path
}

/// The v004 messages that have an embedding (the fixture's `embedded_memory_ids`).
fn write_embedded_export(dir: &Path) -> PathBuf {
    let messages: Vec<Value> = read_json(V004)
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m.get("embedding").is_some())
        .cloned()
        .collect();
    let path = dir.join("embedded.json");
    std::fs::write(&path, serde_json::to_string(&messages).unwrap()).unwrap();
    path
}

#[test]
fn import_then_export_reproduces_the_fixture_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let report = ok_json(&data, &["memory", "import", V004, "--session", "s"]);
    assert_eq!(report, json!({"added": 7, "skipped_duplicates": []}));

    let out = dir.path().join("out.json");
    let exported = ok_json(
        &data,
        &["memory", "export", "--session", "s", path_str(&out)],
    );
    assert_eq!(exported, json!({"file": path_str(&out), "count": 7}));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(V004).unwrap());

    // Without --overwrite the same file only meets duplicates; with it, it replaces.
    let again = ok_json(&data, &["memory", "import", V004, "--session", "s"]);
    assert_eq!(again["added"], 0);
    assert_eq!(again["skipped_duplicates"].as_array().unwrap().len(), 7);
    let marked = write_marked_export(dir.path());
    let appended = ok_json(
        &data,
        &["memory", "import", path_str(&marked), "--session", "s"],
    );
    assert_eq!(appended["added"], 0);
    let replaced = ok_json(
        &data,
        &[
            "memory",
            "import",
            path_str(&marked),
            "--session",
            "s",
            "--overwrite",
        ],
    );
    assert_eq!(replaced, json!({"added": 7, "skipped_duplicates": []}));
    // The marks came in with the messages: the plain export is still the fixture, and
    // --include-marks gives back the marked document.
    ok_json(
        &data,
        &["memory", "export", "--session", "s", path_str(&out)],
    );
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(V004).unwrap());
    ok_json(
        &data,
        &[
            "memory",
            "export",
            "--session",
            "s",
            "--include-marks",
            path_str(&out),
        ],
    );
    assert_eq!(read_json(path_str(&out)), read_json(path_str(&marked)));

    // The 0.1.x export imports into its own session, and exports as 0.0.x.
    let report = ok_json(&data, &["memory", "import", V016, "--session", "v016"]);
    assert_eq!(report["added"], 7);
    let exported = ok_json(
        &data,
        &["memory", "export", "--session", "v016", path_str(&out)],
    );
    assert_eq!(exported["count"], 7);
    assert_eq!(ids(&read_json(path_str(&out))), ids(&read_json(V004)));
    // …and as 0.1.x again, byte for byte (issue 11, item 15).
    let exported = ok_json(
        &data,
        &[
            "memory",
            "export",
            "--session",
            "v016",
            "--format",
            "agentscope-0.1",
            path_str(&out),
        ],
    );
    assert_eq!(exported["count"], 7);
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        std::fs::read_to_string(V016).unwrap()
    );
    let err = input_error(
        &data,
        &[
            "memory",
            "export",
            "--session",
            "v016",
            "--format",
            "0.2",
            path_str(&out),
        ],
    );
    assert!(err.contains("agentscope-0.1"), "{err}");
    assert_eq!(
        threads(&data),
        vec![Scope::session("s"), Scope::session("v016")]
    );
}

#[test]
fn show_selects_by_recency_mark_and_tokens_from_a_session_or_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let marked = write_marked_export(dir.path());
    ok_json(
        &data,
        &["memory", "import", path_str(&marked), "--session", "s"],
    );
    let marked = path_str(&marked);
    let all: Vec<String> = ["01", "02", "03", "04", "05", "07", "08"].map(id).to_vec();
    for source in [["--session", "s"], ["--file", marked]] {
        let show = |extra: &[&str]| {
            let mut args = vec!["memory", "show", source[0], source[1]];
            args.extend_from_slice(extra);
            ok_json(&data, &args)
        };
        // Messages print as stored: the fixture's objects, without marks; embeddings only
        // when asked for.
        assert_eq!(
            show(&["--include-embeddings"]),
            read_json(V004),
            "{source:?}"
        );
        let mut plain = read_json(V004);
        for m in plain.as_array_mut().unwrap() {
            m.as_object_mut().unwrap().shift_remove("embedding");
        }
        assert_eq!(show(&[]), plain, "{source:?}");
        assert_eq!(ids(&show(&["--recent", "2"])), all[5..], "{source:?}");
        assert_eq!(ids(&show(&["--recent", "0"])), Vec::<String>::new());
        assert_eq!(ids(&show(&["--recent", "100"])), all);
        assert_eq!(ids(&show(&["--mark", "pin"])), [id("04"), id("07")]);
        assert_eq!(ids(&show(&["--mark", "later"])), [id("07")]);
        assert!(ids(&show(&["--mark", "nobody"])).is_empty());
        // cl100k_base budgets of docs/reference/memory.md#recall-by-token-budget: an exact fit of
        // 79 keeps …05, …07, …08.
        assert_eq!(
            ids(&show(&["--tokens", "79"])),
            [id("05"), id("07"), id("08")]
        );
        assert_eq!(ids(&show(&["--tokens", "78"])), [id("07"), id("08")]);
        assert!(ids(&show(&["--tokens", "21"])).is_empty());
        assert_eq!(ids(&show(&["--tokens", "158"])), all);
        assert_eq!(ids(&show(&["--tokens", "79", "--recent", "1"])), [id("08")]);
        // The budget counts only the marked messages: …04 (29) + …07 (23).
        assert_eq!(
            ids(&show(&["--tokens", "52", "--mark", "pin"])),
            [id("04"), id("07")]
        );
        assert_eq!(ids(&show(&["--tokens", "51", "--mark", "pin"])), [id("07")]);
    }
}

/// A score as the library computes it: f32 inputs, accumulated in f64.
fn expected_scores(metric: &str) -> Vec<f64> {
    let query = [0.2f32, -0.4, 0.5, 0.7].map(f64::from);
    read_json(V004)
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m.get("embedding"))
        .map(|e| {
            let e: Vec<f64> = e
                .as_array()
                .unwrap()
                .iter()
                .map(|x| f64::from(x.as_f64().unwrap() as f32))
                .collect();
            let dot: f64 = query.iter().zip(&e).map(|(a, b)| a * b).sum();
            let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
            match metric {
                "cosine" => dot / (norm(&query) * norm(&e)),
                "dot" => dot,
                "l2" => -query
                    .iter()
                    .zip(&e)
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum::<f64>()
                    .sqrt(),
                _ => unreachable!(),
            }
        })
        .collect()
}

/// `[(score, index, id)]` from the command's output.
fn hits(value: &Value) -> Vec<(f64, usize, String)> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            assert_eq!(h.as_object().unwrap().len(), 3, "{h}");
            (
                h["score"].as_f64().unwrap(),
                usize::try_from(h["index"].as_u64().unwrap()).unwrap(),
                h["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn retrieve_ranks_by_each_metric_from_a_session_or_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let embedded = write_embedded_export(dir.path());
    ok_json(
        &data,
        &["memory", "import", path_str(&embedded), "--session", "e"],
    );
    let embedded = path_str(&embedded);
    let memory_ids = [id("04"), id("05"), id("07")];
    // The fixture's cosine scores (memory_cases.json, all_scores) match the formula used here.
    let cases = read_json(CASES);
    let all_scores = cases["retrieve_by_embedding"]["all_scores"]
        .as_array()
        .unwrap();
    for (case, score) in all_scores.iter().zip(expected_scores("cosine")) {
        assert!((case[0].as_f64().unwrap() - score).abs() < 1e-6);
    }
    for source in [["--session", "e"], ["--file", embedded]] {
        for metric in ["cosine", "dot", "l2"] {
            let scores = expected_scores(metric);
            // Score order: highest first, ties by the lower index.
            let mut ranked: Vec<usize> = (0..scores.len()).collect();
            ranked.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
            let retrieve = |extra: &[&str]| {
                let mut args = vec![
                    "memory", "retrieve", source[0], source[1], "--query", QUERY, "--metric",
                    metric,
                ];
                args.extend_from_slice(extra);
                hits(&ok_json(&data, &args))
            };
            let check = |got: Vec<(f64, usize, String)>, order: &[usize]| {
                assert_eq!(got.len(), order.len(), "{source:?} {metric}");
                for ((score, index, id), &want) in got.iter().zip(order) {
                    assert_eq!(*index, want, "{source:?} {metric}");
                    assert_eq!(id, &memory_ids[want]);
                    assert!((score - scores[want]).abs() < 1e-9, "{metric}: {score}");
                }
            };
            // --top-k defaults to 1, as the library API does.
            check(retrieve(&[]), &ranked[..1]);
            check(retrieve(&["--top-k", "2"]), &ranked[..2]);
            check(retrieve(&["--top-k", "10"]), &ranked);
            check(retrieve(&["--top-k", "0"]), &[]);
            let mut kept = ranked[..2].to_vec();
            kept.sort_unstable();
            check(retrieve(&["--top-k", "2", "--preserve-order"]), &kept);
            check(retrieve(&["--top-k", "3", "--preserve-order"]), &[0, 1, 2]);
        }
    }
    // The fixture's own expectations, read back through the CLI.
    let got = hits(&ok_json(
        &data,
        &[
            "memory",
            "retrieve",
            "--session",
            "e",
            "--query",
            QUERY,
            "--top-k",
            "2",
        ],
    ));
    let want = &cases["retrieve_by_embedding"]["top_k_2_preserve_order_False"];
    for (g, w) in got.iter().zip(want.as_array().unwrap()) {
        assert!((g.0 - w[0].as_f64().unwrap()).abs() < 1e-6);
        assert_eq!(g.2, w[2].as_str().unwrap());
    }
}

#[test]
fn reads_of_a_missing_session_fail_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = dir.path().join("out.json");
    // No database yet: reads fail without creating the data directory.
    for args in [
        vec!["memory", "export", "--session", "typo", path_str(&out)],
        vec!["memory", "show", "--session", "typo"],
        vec!["memory", "retrieve", "--session", "typo", "--query", QUERY],
    ] {
        let err = input_error(&data, &args);
        assert!(err.contains("\"typo\""), "{err}");
        assert!(err.contains("mnemon memory import"), "{err}");
    }
    let err = input_error(&data, &["memory", "show"]);
    assert!(err.contains("default memory session"), "{err}");
    assert!(!data.exists());
    assert!(!out.exists());

    ok_json(&data, &["memory", "import", V004, "--session", "real"]);
    ok_json(&data, &["memory", "import", V016, "--session", "other"]);
    for args in [
        vec!["memory", "export", "--session", "typo", path_str(&out)],
        vec!["memory", "show", "--session", "typo", "--recent", "1"],
        vec!["memory", "retrieve", "--session", "typo", "--query", QUERY],
        vec!["memory", "show"],
    ] {
        let err = input_error(&data, &args);
        assert!(err.contains("known sessions: real, other"), "{err}");
    }
    assert!(
        !out.exists(),
        "a failed export must not write [] to the file"
    );
    assert_eq!(
        threads(&data),
        vec![Scope::session("real"), Scope::session("other")]
    );
}

/// Issue 11, item 13: a failed import into a new session creates no session and no rows; into
/// an existing one it changes nothing.
#[test]
fn a_failed_import_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A valid export with a bad message halfway through (no "content").
    let mut items: Vec<Value> = (0..200)
        .map(|i| json!({"id": format!("m{i}"), "name": "n", "content": format!("text {i}")}))
        .collect();
    items[100] = json!({"id": "bad", "name": "n"});
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, serde_json::to_string(&items).unwrap()).unwrap();
    // The first import ever: not even the default database state may keep a session.
    let err = input_error(
        &data,
        &["memory", "import", path_str(&bad), "--session", "new"],
    );
    assert!(
        err.contains("item 100: missing required field \"content\""),
        "{err}"
    );
    assert_eq!(threads(&data), Vec::<Scope>::new());
    // An existing session keeps its messages, with or without --overwrite, and no other
    // session appears.
    ok_json(&data, &["memory", "import", V004, "--session", "s"]);
    let before = snapshot(&data, "s");
    for extra in [None, Some("--overwrite")] {
        let mut args = vec!["memory", "import", path_str(&bad), "--session", "s"];
        args.extend(extra);
        input_error(&data, &args);
        assert_eq!(snapshot(&data, "s"), before);
        let mut args = vec!["memory", "import", path_str(&bad), "--session", "new"];
        args.extend(extra);
        input_error(&data, &args);
    }
    // No thread, so no rows either (they cascade with their thread).
    assert_eq!(threads(&data), vec![Scope::session("s")]);
}

#[test]
fn bad_input_exits_2_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let marked = write_marked_export(dir.path());
    ok_json(
        &data,
        &["memory", "import", path_str(&marked), "--session", "s"],
    );
    let before = snapshot(&data, "s");
    assert!(String::from_utf8_lossy(&before).contains("__marks"));

    let v004 = std::fs::read_to_string(V004).unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let truncated = write("truncated.json", &v004[..v004.len() / 2]);
    let no_name = write(
        "no-name.json",
        r#"[{"name": "n", "content": 1}, {"content": "who said this?"}]"#,
    );
    let no_content = write("no-content.json", r#"[{"name": "n"}]"#);
    let unknown_type = write("unknown-type.json", r#"{"__type": "Nope"}"#);
    let scalar = write("scalar.json", "5");
    let not_object = write("not-object.json", r#"[{"name": "n", "content": 1}, 3]"#);
    let missing = dir.path().join("missing.json");
    let cases: [(&Path, &str); 7] = [
        (&truncated, "invalid JSON"),
        (&no_name, "item 1: missing required field \"name\""),
        (&no_content, "missing required field \"content\""),
        (&unknown_type, "deserialization of type \"Nope\""),
        (&scalar, "found a number"),
        (&not_object, "item 1: expected a JSON object"),
        (&missing, "missing.json"),
    ];
    for (file, message) in cases {
        for overwrite in [false, true] {
            let mut args = vec!["memory", "import", path_str(file), "--session", "s"];
            if overwrite {
                args.push("--overwrite");
            }
            let err = input_error(&data, &args);
            assert!(err.contains(message), "{file:?}: {err}");
            assert_eq!(snapshot(&data, "s"), before, "{file:?} changed the session");
        }
        // Read directly, the same file is refused the same way.
        let err = input_error(&data, &["memory", "show", "--file", path_str(file)]);
        assert!(err.contains(message), "{file:?}: {err}");
    }

    let embedded = write_embedded_export(dir.path());
    let embedded = path_str(&embedded);
    for (args, message) in [
        (
            vec!["memory", "retrieve", "--file", embedded, "--query", "ferry"],
            "--query must be a JSON array of numbers",
        ),
        (
            vec!["memory", "retrieve", "--file", embedded, "--query", "[]"],
            "invalid query",
        ),
        (
            vec![
                "memory", "retrieve", "--file", embedded, "--query", "[1, 2]",
            ],
            "embedding has 4 dimensions, query has 2",
        ),
        // The full session has messages without embeddings, and the CLI has no embedder.
        (
            vec!["memory", "retrieve", "--session", "s", "--query", QUERY],
            "has no embedding (4 without one)",
        ),
        (
            vec![
                "memory",
                "retrieve",
                "--session",
                "s",
                "--query",
                QUERY,
                "--mark",
                "",
            ],
            "invalid mark",
        ),
        (
            vec![
                "memory",
                "retrieve",
                "--session",
                "s",
                "--query",
                QUERY,
                "--metric",
                "manhattan",
            ],
            "manhattan",
        ),
        (
            vec!["memory", "show", "--session", "s", "--file", embedded],
            "cannot be used with",
        ),
        (vec!["memory", "show", "--session", ""], "must not be empty"),
        (
            vec!["memory", "show", "--session", "s", "--recent", "-1"],
            "-1",
        ),
        (
            vec!["memory", "import", V004, "--session", ""],
            "must not be empty",
        ),
    ] {
        let err = input_error(&data, &args);
        assert!(err.contains(message), "{args:?}: {err}");
    }
    assert_eq!(snapshot(&data, "s"), before);
    assert_eq!(threads(&data), vec![Scope::session("s")]);
}
