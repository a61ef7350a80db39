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

/// Every stored asset as `asset list` and `asset get` print it, to compare before and after.
fn snapshot(dir: &Path) -> Vec<(String, String)> {
    ids(dir, &[])
        .into_iter()
        .map(|id| {
            let out = mnemon(dir, &["asset", "get", &id], "");
            assert!(out.status.success(), "{}", text(&out.stderr));
            (id, text(&out.stdout))
        })
        .collect()
}

fn write_params_files(d: &Path) {
    std::fs::write(
        d.join("spec.yaml"),
        "name: show\nparameters:\n  - name: image\n    asset_ref_acceptable: true\n",
    )
    .unwrap();
    std::fs::write(
        d.join("params.json"),
        r#"{"image": "<|asset://a1/content/labels|>"}"#,
    )
    .unwrap();
    std::fs::write(
        d.join("bad_ref.json"),
        r#"{"image": "asset://a1/content/lables"}"#,
    )
    .unwrap();
}

#[test]
fn errors_print_each_cause_once() {
    let dir = setup();
    let d = dir.path();
    assert!(mnemon(d, &["asset", "put", "a1.json"], "").status.success());
    write_params_files(d);
    let key_not_found = "asset://a1/content has no key \"lables\"; available keys: \"image\", \"labels\". Correct the field path and try again.";
    let cases: [(&[&str], i32, String); 4] = [
        (
            &["ref", "params", "--spec", "spec.yaml", "bad_ref.json"],
            2,
            format!("error: parameter \"image\": {key_not_found}\n"),
        ),
        (
            &["asset", "resolve", "asset://a1/content/lables"],
            2,
            format!("error: {key_not_found}\n"),
        ),
        (
            &["asset", "resolve", "asset://zz/content"],
            2,
            "error: there is no asset with id \"zz\"; use the asset_id of one of the available assets and try again\n".to_owned(),
        ),
        (
            &["asset", "resolve", "asset://a1/content/labels/0/x"],
            2,
            "error: asset://a1/content/labels/0 is a string, not a map or a list, so it has no field \"x\"; end the reference at asset://a1/content/labels/0 or correct the field path, then try again.\n".to_owned(),
        ),
    ];
    for (args, code, stderr) in cases {
        let out = mnemon(d, args, "");
        assert_eq!(out.status.code(), Some(code), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_eq!(text(&out.stderr), stderr, "{args:?}");
    }

    // An unreadable spec file: the operating system's reason, once.
    let out = mnemon(
        d,
        &["ref", "params", "--spec", "missing.yaml", "params.json"],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot read the command spec file missing.yaml: "),
        "{err}"
    );
    assert_eq!(err.matches("(os error 2)").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    // A storage failure (a data file that is not a database) is exit code 1, its cause once.
    let broken = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(broken.path().join("data")).unwrap();
    std::fs::write(
        broken.path().join("data/mnemon.sqlite3"),
        vec![0x5a_u8; 8192],
    )
    .unwrap();
    std::fs::write(broken.path().join("a1.json"), r#"{"asset_id": "a1"}"#).unwrap();
    let out = mnemon(broken.path(), &["asset", "put", "a1.json"], "");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "error: asset storage failed while switching to WAL: file is not a database\n"
    );
    // A read opens the file read-only (it never switches the journal mode), and says so.
    let out = mnemon(broken.path(), &["asset", "list"], "");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: asset storage failed while opening the database: cannot open {}: file is \
             not a database\n",
            broken.path().join("data/mnemon.sqlite3").display()
        )
    );
}

#[test]
fn invalid_assets_and_reference_commands_leave_the_store_unchanged() {
    let dir = setup();
    let d = dir.path();
    assert!(
        mnemon(d, &["asset", "put", "a1.json", "noid.json"], "")
            .status
            .success()
    );
    let before = snapshot(d);
    assert_eq!(before.len(), 2);

    // Valid JSON that is not a valid asset, alone and after a good file (which is then not
    // stored either: every file is checked before the first is stored).
    std::fs::write(
        d.join("a1_v2.json"),
        r#"{"asset_id": "a1", "content": "replaced"}"#,
    )
    .unwrap();
    std::fs::write(d.join("new.json"), r#"{"asset_id": "new"}"#).unwrap();
    for (file, content, reason) in [
        (
            "empty_id.json",
            r#"{"asset_id": "", "content": 1}"#,
            "asset_id must not be empty",
        ),
        (
            "number_id.json",
            r#"{"asset_id": 7, "content": 1}"#,
            "\"asset_id\" must be a string, found a number",
        ),
        (
            "list.json",
            r#"[{"asset_id": "x"}]"#,
            "must be a JSON object, found a list",
        ),
        (
            "bad_type.json",
            r#"{"asset_id": "x", "asset_type": {"a": 1}}"#,
            "\"asset_type\" must be a string, found a map",
        ),
    ] {
        std::fs::write(d.join(file), content).unwrap();
        for args in [
            vec!["asset", "put", file],
            vec!["asset", "put", "new.json", "a1_v2.json", file],
        ] {
            let out = mnemon(d, &args, "");
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            assert!(out.stdout.is_empty(), "{args:?}");
            let err = text(&out.stderr);
            assert!(err.starts_with("error: "), "{args:?}: {err}");
            assert!(err.contains(file), "{args:?}: {err}");
            assert!(err.contains(reason), "{args:?}: {err}");
        }
    }
    assert_eq!(snapshot(d), before);

    // Reference commands only read, whether they succeed or fail.
    write_params_files(d);
    let out = mnemon(
        d,
        &["ref", "params", "--spec", "spec.yaml", "params.json"],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    for args in [
        ["ref", "params", "--spec", "spec.yaml", "bad_ref.json"],
        ["ref", "params", "--spec", "missing.yaml", "params.json"],
        ["ref", "params", "--spec", "spec.yaml", "list.json"],
    ] {
        assert_eq!(mnemon(d, &args, "").status.code(), Some(2), "{args:?}");
    }
    let out = mnemon(
        d,
        &["ref", "render"],
        "<|asset://a1/content/labels/0|> <|asset://a1/nope|> <|asset://zz|> <|junk",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "cat <|asset://a1/nope|> <|asset://zz|> <|junk"
    );
    assert_eq!(text(&out.stderr).lines().count(), 3);
    assert_eq!(snapshot(d), before);
}

/// The SQLite stores under concurrency and on read-only media (issue 11 items 9 and 10): every
/// store of the data directory, through the commands a user runs.
mod shared_database {
    use super::*;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    const V004: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/agentscope/export_v004.json"
    );

    fn ok(dir: &Path, args: &[&str]) -> String {
        let out = mnemon(dir, args, "");
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// A data directory with an asset, an artifact (content in a file) and a memory session.
    fn populated() -> tempfile::TempDir {
        let dir = setup();
        let d = dir.path();
        ok(d, &["asset", "put", "a1.json"]);
        std::fs::write(
            d.join("save.json"),
            r#"{"artifact_key": "plan", "artifact_type": "plan", "artifact_name": "Plan",
                "artifact_storage": "write_to_file", "artifact_storage_id": "plans/p.txt"}"#,
        )
        .unwrap();
        std::fs::write(d.join("inputs.json"), r#"{"content": "step one"}"#).unwrap();
        ok(
            d,
            &[
                "artifact",
                "save",
                "--config",
                "save.json",
                "--inputs",
                "inputs.json",
                "--scope",
                "chat",
            ],
        );
        ok(d, &["memory", "import", V004, "--session", "s"]);
        dir
    }

    /// Every read command, each with what its output must contain.
    fn reads(d: &Path) -> Vec<(Vec<String>, &'static str)> {
        let export = d.join("export.json").display().to_string();
        let strings = |args: &[&str]| args.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        vec![
            (strings(&["asset", "list"]), "a1"),
            (strings(&["asset", "get", "a1"]), "sofa"),
            (
                strings(&["asset", "resolve", "asset://a1/content/labels/1"]),
                "sofa",
            ),
            (
                strings(&["artifact", "list", "--scope", "chat"]),
                "plans/p.txt",
            ),
            (strings(&["memory", "show", "--session", "s"]), "content"),
            (
                strings(&["memory", "export", "--session", "s", &export]),
                "count",
            ),
        ]
    }

    #[test]
    fn concurrent_first_use_of_a_fresh_data_dir_all_succeed() {
        const PROCESSES: usize = 8;
        for round in 0..6 {
            let dir = setup();
            let d = dir.path();
            let children: Vec<_> = (0..PROCESSES)
                .map(|i| {
                    let args: &[&str] = match i % 2 {
                        0 => &["asset", "put", "a1.json"],
                        _ => &["memory", "import", V004, "--session", "s"],
                    };
                    Command::new(env!("CARGO_BIN_EXE_mnemon"))
                        .arg("--data-dir")
                        .arg(d.join("data"))
                        .args(args)
                        .current_dir(d)
                        .env_remove("MNEMON_DATA_DIR")
                        .stdin(Stdio::null())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            let failures: Vec<String> = children
                .into_iter()
                .map(|c| c.wait_with_output().unwrap())
                .filter(|out| !out.status.success())
                .map(|out| text(&out.stderr))
                .collect();
            assert!(failures.is_empty(), "round {round}: {failures:#?}");
        }
    }

    #[test]
    fn reads_do_not_wait_for_another_process_holding_a_write_transaction() {
        let dir = populated();
        let d = dir.path();
        let writer = rusqlite::Connection::open(d.join("data/mnemon.sqlite3")).unwrap();
        writer
            .execute_batch("BEGIN IMMEDIATE; UPDATE asset_assets SET meta = meta;")
            .unwrap();
        for (args, expected) in reads(d) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let started = Instant::now();
            let out = ok(d, &args);
            assert!(out.contains(expected), "{args:?}: {out}");
            // The busy timeout is 5 s: a reader that queued behind the writer would take it
            // (and then fail, as the writer holds on). Under it by a margin for a loaded
            // machine starting a debug build.
            assert!(
                started.elapsed() < Duration::from_millis(4500),
                "{args:?} took {:?}",
                started.elapsed()
            );
        }
        writer.execute_batch("COMMIT").unwrap();
    }

    /// Runs `mnemon` with the data directory bind-mounted read-only over itself, in a private
    /// mount namespace (`unshare -m`), so that even root cannot write it. `None` when this
    /// machine cannot make such a mount (not root, or no `unshare`).
    fn mnemon_on_read_only_mount(d: &Path, args: &[&str]) -> Option<Output> {
        let data = d.join("data");
        let script = r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 97
            touch "$1/probe" 2>/dev/null && exit 98
            shift; exec "$@""#;
        let out = Command::new("unshare")
            .args(["-m", "sh", "-c", script, "sh"])
            .arg(&data)
            .arg(env!("CARGO_BIN_EXE_mnemon"))
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .current_dir(d)
            .env_remove("MNEMON_DATA_DIR")
            .stdin(Stdio::null())
            .output()
            .ok()?;
        match out.status.code() {
            Some(97) => None,
            Some(98) => panic!("the read-only mount accepted a write"),
            _ => Some(out),
        }
    }

    #[test]
    fn read_commands_work_on_a_read_only_data_dir() {
        let dir = populated();
        let d = dir.path();
        let data: PathBuf = d.join("data");
        // The stores fold the WAL away when they close: at rest there is no -wal or -shm file,
        // which a reader on read-only media cannot create.
        assert!(!data.join("mnemon.sqlite3-shm").exists());
        let export = tempfile::tempdir().unwrap();
        let mut ran = 0;
        for (args, expected) in reads(d) {
            let mut args: Vec<String> = args;
            if args[1] == "export" {
                // The export file goes outside the read-only mount.
                let last = args.len() - 1;
                args[last] = export.path().join("out.json").display().to_string();
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let Some(out) = mnemon_on_read_only_mount(d, &args) else {
                eprintln!(
                    "skipped: cannot make a read-only bind mount here (needs root and unshare)"
                );
                return;
            };
            assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
            assert!(
                text(&out.stdout).contains(expected),
                "{args:?}: {}",
                text(&out.stdout)
            );
            ran += 1;
        }
        assert_eq!(ran, reads(d).len());
        // Writes are refused with a storage error (exit 1), once.
        let out = mnemon_on_read_only_mount(d, &["asset", "put", "noid.json"]).unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stderr).lines().count(),
            1,
            "{}",
            text(&out.stderr)
        );
    }

    #[test]
    fn read_commands_on_a_missing_data_dir_create_nothing() {
        let dir = setup();
        let d = dir.path();
        assert_eq!(ok(d, &["asset", "list"]), "");
        assert_eq!(ok(d, &["artifact", "list", "--scope", "chat"]).trim(), "[]");
        assert!(!d.join("data").exists());
    }
}

/// Issue 14, item 4: `--default-ttl` (or `MNEMON_DEFAULT_TTL`) is the namespace's default
/// time-to-live: a write without an expiry of its own lives that long; a bad duration is a
/// usage error.
#[test]
fn the_default_ttl_applies_to_writes_without_their_own() {
    let dir = setup();
    let d = dir.path();
    let out = mnemon(d, &["--default-ttl", "4s", "asset", "put", "a1.json"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = mnemon(d, &["asset", "put", "noid.json"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let kept = text(&out.stdout).trim().to_owned();
    // `--ttl never` keeps a write until deleted whatever the default.
    let out = mnemon(
        d,
        &[
            "--default-ttl",
            "4s",
            "asset",
            "put",
            "--ttl",
            "never",
            "noid.json",
        ],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let never = text(&out.stdout).trim().to_owned();
    // Long enough for the processes above to run on a loaded machine before the listing.
    let out = mnemon(d, &["asset", "list", "--expiry"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("a1\t") && !l.ends_with("never")),
        "a1 shows its expiry: {listed}"
    );
    let mut expected = vec![kept, never];
    expected.sort();
    // a1 expires 4 s after its put: waited for, not slept on.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut listed = ids(d, &[]);
    while listed != expected && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(250));
        listed = ids(d, &[]);
    }
    assert_eq!(listed, expected);
    let out = mnemon(d, &["--default-ttl", "soon", "asset", "list"], "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // Zero would store every write already expired (a put answered, then never found): it is
    // refused, as `--ttl 0` is, whatever the spelling.
    for zero in ["0", "0s", "0d"] {
        let out = mnemon(d, &["--default-ttl", zero, "asset", "put", "a1.json"], "");
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("already expired"),
            "{}",
            text(&out.stderr)
        );
    }
}
