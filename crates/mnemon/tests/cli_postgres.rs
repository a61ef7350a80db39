//! The store commands with `--database-url` (PostgreSQL, the tests' server: docs/postgres.md)
//! and `--namespace`: the same commands as on SQLite, nothing written to the data directory,
//! tenants kept apart, and errors that say what to fix.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

/// Runs `mnemon` in `dir` with `--data-dir dir/data` and the environment variables `env`.
fn mnemon(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(args)
        .current_dir(dir)
        .env_remove("MNEMON_DATA_DIR")
        .env_remove("MNEMON_DATABASE_URL")
        .env_remove("MNEMON_NAMESPACE")
        .envs(env.iter().copied())
        .output()
        .expect("the mnemon binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn store_commands_run_on_postgresql_per_namespace() {
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("cli_stores").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("a1.json"),
        r#"{"asset_id": "a1", "content": {"labels": ["cat", "sofa"]}}"#,
    )
    .unwrap();
    let by_flag = ["--database-url", url.as_str()];
    let with = |extra: &[&str], args: &[&str]| -> Vec<String> {
        extra.iter().chain(args).map(|s| (*s).to_owned()).collect()
    };
    let run = |env: &[(&str, &str)], args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        mnemon(d, env, &args)
    };

    // Assets, by the flag; read back by the environment variable.
    ok(&run(&[], with(&by_flag, &["asset", "put", "a1.json"])));
    let env = [("MNEMON_DATABASE_URL", url.as_str())];
    assert_eq!(ok(&run(&env, with(&[], &["asset", "list"]))).trim(), "a1");
    let resolved = ok(&run(
        &env,
        with(&[], &["asset", "resolve", "asset://a1/content/labels/1"]),
    ));
    assert_eq!(
        serde_json::from_str::<Value>(&resolved).unwrap(),
        json!("sofa")
    );
    let mut render = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args(["ref", "render"])
        .current_dir(d)
        .env("MNEMON_DATABASE_URL", &url)
        .env_remove("MNEMON_NAMESPACE")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut render.stdin.take().unwrap(),
        b"first: <|asset://a1/content/labels/0|>",
    )
    .unwrap();
    assert_eq!(ok(&render.wait_with_output().unwrap()).trim(), "first: cat");
    // Another namespace sees none of it; the default one still does.
    let acme = [
        ("MNEMON_DATABASE_URL", url.as_str()),
        ("MNEMON_NAMESPACE", "acme"),
    ];
    assert_eq!(ok(&run(&acme, with(&[], &["asset", "list"]))).trim(), "");
    assert_eq!(
        ok(&run(
            &env,
            with(&["--namespace", "default"], &["asset", "list"])
        ))
        .trim(),
        "a1"
    );

    // Artifacts: content in the database (inline), listed per scope and namespace.
    std::fs::write(
        d.join("save.json"),
        r#"{"artifact_key": "plan", "artifact_type": "plan", "artifact_name": "Plan"}"#,
    )
    .unwrap();
    std::fs::write(d.join("inputs.json"), r#"{"content": "1. parse"}"#).unwrap();
    std::fs::write(d.join("load.json"), "{}").unwrap();
    std::fs::write(d.join("keys.json"), r#"{"artifact_keys": ["f"]}"#).unwrap();
    let saved = ok(&run(
        &env,
        with(
            &[],
            &[
                "artifact",
                "save",
                "--config",
                "save.json",
                "--inputs",
                "inputs.json",
                "--scope",
                "chat-1",
            ],
        ),
    ));
    let saved: Value = serde_json::from_str(&saved).unwrap();
    assert_eq!(saved["artifact"]["key"], "plan");
    let listed: Value = serde_json::from_str(&ok(&run(
        &env,
        with(&[], &["artifact", "list", "--scope", "chat-1"]),
    )))
    .unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    // A write_to_file save needs --artifact-files with a database URL; with it, the file lands
    // in that shared root.
    std::fs::write(
        d.join("file.json"),
        r#"{"artifact_key": "f", "artifact_type": "plan", "artifact_name": "F", "artifact_storage": "write_to_file", "artifact_storage_id": "f.json"}"#,
    )
    .unwrap();
    let save_file = with(
        &[],
        &[
            "artifact",
            "save",
            "--config",
            "file.json",
            "--inputs",
            "inputs.json",
            "--scope",
            "chat-1",
        ],
    );
    let out = run(&env, save_file.clone());
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("write_to_file"),
        "{}",
        text(&out.stderr)
    );
    let shared = d.join("shared");
    let files = [
        ("MNEMON_DATABASE_URL", url.as_str()),
        ("MNEMON_ARTIFACT_FILES", shared.to_str().unwrap()),
    ];
    ok(&run(&files, save_file));
    assert!(shared.join("f.json").is_file());
    let loaded = ok(&run(
        &files,
        with(
            &[],
            &[
                "artifact",
                "load",
                "--config",
                "load.json",
                "--inputs",
                "keys.json",
                "--scope",
                "chat-1",
            ],
        ),
    ));
    assert!(loaded.contains("1. parse"), "{loaded}");
    let listed_acme: Value = serde_json::from_str(&ok(&run(
        &acme,
        with(&[], &["artifact", "list", "--scope", "chat-1"]),
    )))
    .unwrap();
    assert_eq!(listed_acme, json!([]));

    // Memory: import into a session, read it back; the other namespace has no such session.
    std::fs::write(
        d.join("chat.json"),
        r#"[{"id": "m1", "name": "Mara", "content": "hello", "role": "user", "timestamp": "2024-01-01 00:00:00"}]"#,
    )
    .unwrap();
    ok(&run(
        &env,
        with(&[], &["memory", "import", "chat.json", "--session", "s1"]),
    ));
    let shown = ok(&run(
        &env,
        with(&[], &["memory", "show", "--session", "s1"]),
    ));
    assert!(shown.contains("hello"), "{shown}");
    let out = run(&acme, with(&[], &["memory", "show", "--session", "s1"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("namespace \"acme\""),
        "{}",
        text(&out.stderr)
    );

    // Nothing of the stores went into the data directory.
    assert!(!d.join("data").exists());
}

#[test]
fn database_url_and_namespace_errors_say_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    let out = mnemon(d, &[], &["--database-url", "mysql://x", "asset", "list"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--database-url"), "{stderr}");
    assert!(stderr.contains("postgres://"), "{stderr}");

    // A port nothing listens on: the server is unreachable, and the message says where.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/mnemon");
    let out = mnemon(d, &[], &["--database-url", &url, "asset", "list"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&port.to_string()), "{stderr}");

    let out = mnemon(d, &[], &["--namespace", "Not A Name", "asset", "list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--namespace"),
        "{}",
        text(&out.stderr)
    );
    assert!(!d.join("data").exists());
}

#[test]
fn migrate_copies_a_data_directory_into_postgresql_and_back() {
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("cli_migrate").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("a1.json"),
        r#"{"asset_id": "a1", "content": {"labels": ["cat"]}}"#,
    )
    .unwrap();
    std::fs::write(
        d.join("chat.json"),
        r#"[{"id": "m1", "name": "Mara", "content": "hello", "role": "user", "timestamp": "2024-01-01 00:00:00", "embedding": [0.5, -0.25]}]"#,
    )
    .unwrap();
    std::fs::write(
        d.join("save.json"),
        r#"{"artifact_key": "plan", "artifact_type": "plan", "artifact_name": "Plan", "artifact_storage": "write_to_file", "artifact_storage_id": "plans/p.json"}"#,
    )
    .unwrap();
    std::fs::write(d.join("inputs.json"), r#"{"content": "1. parse"}"#).unwrap();
    let ns = [("MNEMON_NAMESPACE", "acme")];
    ok(&mnemon(d, &ns, &["asset", "put", "a1.json"]));
    ok(&mnemon(
        d,
        &ns,
        &["memory", "import", "chat.json", "--session", "s1"],
    ));
    ok(&mnemon(
        d,
        &ns,
        &[
            "artifact",
            "save",
            "--config",
            "save.json",
            "--inputs",
            "inputs.json",
            "--scope",
            "c",
        ],
    ));
    let data = d.join("data");
    let data = data.to_str().unwrap();

    // Into PostgreSQL without a files root: the file content has nowhere to go, and it says so.
    let out = mnemon(d, &ns, &["migrate", "--from", data, "--to", &url]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("write_to_file root"),
        "{}",
        text(&out.stderr)
    );

    let files = d.join("shared");
    let report: Value = serde_json::from_str(&ok(&mnemon(
        d,
        &ns,
        &[
            "migrate",
            "--from",
            data,
            "--to",
            &url,
            "--to-files",
            files.to_str().unwrap(),
        ],
    )))
    .unwrap();
    assert_eq!(report["assets"], 1);
    assert_eq!(report["threads"], 1);
    assert!(files.join(".namespaces/acme/plans/p.json").is_file());

    let back = d.join("back");
    let back = back.to_str().unwrap();
    let report: Value = serde_json::from_str(&ok(&mnemon(
        d,
        &ns,
        &[
            "migrate",
            "--from",
            &url,
            "--from-files",
            files.to_str().unwrap(),
            "--to",
            back,
        ],
    )))
    .unwrap();
    assert_eq!(
        (
            &report["assets"],
            &report["artifacts"],
            &report["threads"],
            &report["messages"]
        ),
        (&json!(1), &json!(1), &json!(1), &json!(1))
    );
    let original = mnemon::Mnemon::open_with(
        d.join("data"),
        &mnemon::OpenOptions::default().with_namespace("acme".parse().unwrap()),
    )
    .unwrap();
    let copied = mnemon::Mnemon::open_with(
        back,
        &mnemon::OpenOptions::default().with_namespace("acme".parse().unwrap()),
    )
    .unwrap();
    let session = |m: &mnemon::Mnemon| {
        let memory = m.session("s1").unwrap();
        (
            memory.get_memory(&Default::default()).unwrap(),
            memory.get_embeddings(None).unwrap(),
        )
    };
    assert_eq!(session(&copied), session(&original));
    let plans = |m: &mnemon::Mnemon| m.artifacts().list("c", None).unwrap();
    assert_eq!(plans(&copied), plans(&original));
    assert!(
        d.join("back/artifacts/.namespaces/acme/plans/p.json")
            .is_file()
    );

    // A --from that is not a data directory is refused before anything is created.
    let out = mnemon(d, &ns, &["migrate", "--from", "nowhere", "--to", back]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("nowhere"),
        "{}",
        text(&out.stderr)
    );
    assert!(!d.join("nowhere").exists());
}

/// A data directory whose artifact files are kept outside its artifacts/ folder
/// (`--artifact-files`) is migrated with that folder as `--from-files`: before, the flag was
/// refused for a data directory, and the copy read `<dir>/artifacts`, where the content is not
/// (or, worse, stale content of the same name is).
#[test]
fn a_data_directory_with_its_files_elsewhere_migrates_with_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("save.json"),
        r#"{"artifact_key": "plan", "artifact_type": "plan", "artifact_name": "Plan", "artifact_storage": "write_to_file", "artifact_storage_id": "plans/p.json"}"#,
    )
    .unwrap();
    std::fs::write(d.join("inputs.json"), r#"{"content": "1. parse"}"#).unwrap();
    let custom = d.join("custom-files");
    let custom = custom.to_str().unwrap();
    ok(&mnemon(
        d,
        &[],
        &[
            "--artifact-files",
            custom,
            "artifact",
            "save",
            "--config",
            "save.json",
            "--inputs",
            "inputs.json",
            "--scope",
            "c",
        ],
    ));
    // A stale file of the same name where the default folder would be.
    let stale = d.join("data/artifacts/plans");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("p.json"), "\"stale\"").unwrap();
    let data = d.join("data");
    let back = d.join("back");
    let report: Value = serde_json::from_str(&ok(&mnemon(
        d,
        &[],
        &[
            "migrate",
            "--from",
            data.to_str().unwrap(),
            "--from-files",
            custom,
            "--to",
            back.to_str().unwrap(),
        ],
    )))
    .unwrap();
    assert_eq!(report["artifacts"], 1, "{report}");
    let copied = std::fs::read_to_string(back.join("artifacts/plans/p.json")).unwrap();
    assert!(copied.contains("1. parse"), "{copied}");
}
