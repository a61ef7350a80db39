//! `mnemon library stats|pack|query|validate`, run as a user would, each in a temporary
//! directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mnemon_library::{BitId, encode_embedding};
use serde_json::{Value, json};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/polymath/library.json"
);

/// Runs `mnemon` inside `dir`, with its data directory there too; stdin is closed and stdout
/// and stderr are pipes, as in a script.
fn mnemon(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args(args)
        .current_dir(dir)
        .env("MNEMON_DATA_DIR", dir.join("data"))
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the mnemon binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json_out(out: &Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

fn path_arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A bit of a three-dimensional library.
fn bit(title: &str, v: [f32; 3], tag: Option<&str>) -> Value {
    let mut b = json!({
        "text": format!("About {title}."),
        "info": {"url": format!("https://example.com/{title}"), "title": title},
        "embedding": encode_embedding(&v),
        "token_count": 5,
    });
    if let Some(t) = tag {
        b["access_tag"] = json!(t);
    }
    b
}

/// Writes a small library: four bits, one tagged `team`.
fn write_library(dir: &Path) -> PathBuf {
    let file = dir.join("lib.json");
    let lib = json!({"version": 1, "embedding_model": "m", "bits": [
        bit("alpha", [1.0, 0.0, 0.0], None),
        bit("beta", [0.8, 0.6, 0.0], None),
        bit("gamma", [0.0, 1.0, 0.0], Some("team")),
        bit("delta", [0.0, 0.0, 1.0], None),
    ]});
    std::fs::write(&file, serde_json::to_vec_pretty(&lib).unwrap()).unwrap();
    file
}

/// Writes an arguments file and returns its path.
fn write_args(dir: &Path, name: &str, args: &Value) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, serde_json::to_vec(args).unwrap()).unwrap();
    file
}

fn query_args(extra: &Value) -> Value {
    let mut a = json!({"version": 1, "query_embedding_model": "m",
                       "query_embedding": encode_embedding(&[1.0, 0.0, 0.0]),
                       "count": 2, "count_type": "bit"});
    for (k, v) in extra.as_object().unwrap() {
        a[k] = v.clone();
    }
    a
}

/// `mnemon library query FILE --args ARGS [EXTRA...]` in `dir`.
fn query(dir: &Path, file: &Path, args: &str, extra: &[&str]) -> Output {
    let mut words = vec!["library", "query", path_arg(file), "--args", args];
    words.extend_from_slice(extra);
    mnemon(dir, &words)
}

fn titles(result: &Value) -> Vec<String> {
    result["bits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["info"]["title"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn stats_describes_the_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let out = mnemon(dir.path(), &["library", "stats", FIXTURE]);
    let stats = json_out(&out);
    assert_eq!(stats["bits"], 60);
    assert_eq!(stats["dimension"], 1536);
    assert_eq!(
        stats["embedding_model"],
        "openai.com:text-embedding-ada-002"
    );
    assert_eq!(stats["token_count"], 2323);
    assert_eq!(stats["access_tags"], json!({"unpublished": 10, "team": 3}));
    assert_eq!(stats["untagged_bits"], 47);
    assert_eq!(stats["upgraded"], false);
    // Piped stderr: no progress bar, nothing at all.
    assert_eq!(stderr(&out), "");
}

#[test]
fn pack_then_query_uses_the_sidecar_while_it_is_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_library(dir.path());
    let args = write_args(dir.path(), "args.json", &query_args(&json!({})));
    let query = |quiet: bool| {
        let mut a = vec![
            "library",
            "query",
            path_arg(&file),
            "--args",
            path_arg(&args),
        ];
        if quiet {
            a.push("--quiet");
        }
        mnemon(dir.path(), &a)
    };
    let before = json_out(&query(false));
    assert_eq!(titles(&before), ["alpha", "beta"]);

    let out = mnemon(dir.path(), &["library", "pack", path_arg(&file)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let side = dir.path().join("lib.json.mnx");
    assert!(side.is_file());
    assert!(stderr(&out).contains("lib.json.mnx"), "{}", stderr(&out));
    assert_eq!(
        stderr(&mnemon(
            dir.path(),
            &["library", "pack", path_arg(&file), "-q"]
        )),
        ""
    );

    // Same size and mtime, different content: only the sidecar still says "alpha".
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("\"alpha\"", "\"ALPHA\"")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let out = query(false);
    assert_eq!(json_out(&out), before);
    assert_eq!(stderr(&out), "");

    // A changed file makes the sidecar stale: it is ignored, with a warning, and the JSON
    // answers.
    std::fs::write(&file, text.replace("\"alpha\"", "\"Alpha2\"")).unwrap();
    let out = query(false);
    assert_eq!(titles(&json_out(&out)), ["Alpha2", "beta"]);
    let warning = stderr(&out);
    assert!(
        warning.contains("ignoring the sidecar") && warning.contains("changed since it was packed"),
        "{warning}"
    );
    // --quiet keeps stderr for errors only.
    let out = query(true);
    assert_eq!(titles(&json_out(&out)), ["Alpha2", "beta"]);
    assert_eq!(stderr(&out), "");
}

#[test]
fn query_defaults_count_to_1000_like_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_library(dir.path());
    let mut a = query_args(&json!({}));
    a.as_object_mut().unwrap().remove("count");
    let args = write_args(dir.path(), "args.json", &a);
    let out = query(dir.path(), &file, path_arg(&args), &[]);
    // 1000 bits: every visible one (the `team` bit is restricted without a token).
    assert_eq!(titles(&json_out(&out)), ["alpha", "beta", "delta"]);
}

#[test]
fn a_bad_argument_is_an_input_error_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_library(dir.path());
    for (extra, message) in [
        (json!({"count": 0}), "count must be greater than 0"),
        (
            json!({"count_type": "word"}),
            "count_type word is not one of the legal options: {'bit', 'token'}",
        ),
        (
            json!({"query_embedding_model": "other"}),
            "Embedding model was other but expected m",
        ),
        (
            json!({"query_embedding": encode_embedding(&[1.0, 0.0])}),
            "query_embedding has 2 dimensions but the library's embeddings have 3",
        ),
        (
            json!({"query_embedding": "AAAA="}),
            "query_embedding is not valid base64: Incorrect padding",
        ),
    ] {
        let args = write_args(dir.path(), "bad.json", &query_args(&extra));
        let out = query(dir.path(), &file, path_arg(&args), &[]);
        assert_eq!(out.status.code(), Some(2), "{extra}: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "{extra}");
        assert_eq!(
            stderr(&out).trim_end(),
            format!("error: {message}"),
            "{extra}"
        );
    }
    // Arguments that are not an object, and a missing arguments file.
    let args = write_args(dir.path(), "list.json", &json!([1]));
    let out = query(dir.path(), &file, path_arg(&args), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("JSON object"), "{}", stderr(&out));
    let out = query(dir.path(), &file, "missing.json", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing.json"), "{}", stderr(&out));
}

#[test]
fn host_config_supplies_tokens_and_restriction_details() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_library(dir.path());
    let config = write_args(
        dir.path(),
        "host.SECRET.json",
        &json!({
            "tokens": {"ana@example.com": {"token": "tok-ana", "access_tags": ["team"]}},
            "restricted": {"count": true, "message": "Ask the librarian."},
        }),
    );
    let run = |extra: &Value| {
        let args = write_args(
            dir.path(),
            "args.json",
            &query_args(&json!({"query_embedding": encode_embedding(&[0.0, 1.0, 0.0])})),
        );
        let mut a: Value = serde_json::from_slice(&std::fs::read(&args).unwrap()).unwrap();
        for (k, v) in extra.as_object().unwrap() {
            a[k] = v.clone();
        }
        std::fs::write(&args, serde_json::to_vec(&a).unwrap()).unwrap();
        json_out(&query(
            dir.path(),
            &file,
            path_arg(&args),
            &["--host-config", path_arg(&config)],
        ))
    };
    let anonymous = run(&json!({}));
    assert_eq!(titles(&anonymous), ["beta", "alpha"]);
    assert_eq!(
        anonymous["details"],
        json!({"counts": {"bits": 2, "restricted": 1},
               "message": "Restricted results were omitted. Ask the librarian."})
    );
    let ana = run(&json!({"access_token": "tok-ana"}));
    assert_eq!(titles(&ana), ["gamma", "beta"]);
    assert_eq!(
        ana["details"],
        json!({"counts": {"bits": 2, "restricted": 0}})
    );
    assert!(ana["bits"][0].get("access_tag").is_none());

    let out = query(
        dir.path(),
        &file,
        path_arg(&config),
        &["--host-config", "nope.json"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim_end(),
        "error: Config file \"nope.json\" does not exist"
    );
}

#[test]
fn validate_lists_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_library(dir.path());
    let out = mnemon(dir.path(), &["library", "validate", path_arg(&good)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "ok\n");

    let mut b1 = bit("beta", [0.8, 0.6, 0.0], None);
    b1["embedding"] = json!(encode_embedding(&[0.8, 0.6]));
    b1["token_count"] = json!("five");
    let mut b3 = bit("delta", [0.0, 0.0, 1.0], None);
    b3["embedding"] = json!("AA-A");
    b3["info"] = json!("https://example.com/delta");
    b3["access_tag"] = json!(["team"]);
    let bad = json!({"version": 1, "embedding_model": "m", "omit": "token", "bits": [
        bit("alpha", [1.0, 0.0, 0.0], None),
        b1,
        "gamma",
        b3,
        bit("alpha", [1.0, 0.0, 0.0], None),
    ]});
    let file = dir.path().join("bad.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&bad).unwrap()).unwrap();
    let out = mnemon(dir.path(), &["library", "validate", path_arg(&file)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let id = |t: &str| BitId::of(&format!("https://example.com/{t}"), &format!("About {t}."));
    let delta = BitId::of("", "About delta.");
    let want = [
        "top level, field \"omit\": Illegal omit key type: token".to_owned(),
        format!(
            "bit 1, field \"embedding\": {} had the wrong length of embedding, expected 3",
            id("beta")
        ),
        "bit 1, field \"token_count\": token_count not int as expected".to_owned(),
        "bit 2: bit 2 is not an object".to_owned(),
        format!(
            "bit 3, field \"embedding\": {delta} has an invalid embedding: not valid base64: \
             invalid character '-' at offset 2"
        ),
        "bit 3, field \"info\": info not dict as expected".to_owned(),
        format!("bit 3, field \"access_tag\": {delta} access_tag not str as expected"),
        format!(
            "bit 4: duplicate of bit 0 (id {}); loading keeps the first and drops this one",
            id("alpha")
        ),
    ];
    let printed = stdout(&out);
    let got: Vec<&str> = printed.lines().collect();
    assert_eq!(got, want);
    assert_eq!(
        stderr(&out).trim_end(),
        format!("error: {}: 7 problem(s)", file.display())
    );

    // Loading the same file stops at the first fault and names its place.
    let out = mnemon(dir.path(), &["library", "stats", path_arg(&file)]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim_end(),
        format!(
            "error: {}: field \"omit\": Illegal omit key type: token",
            file.display()
        )
    );
    let mut fixed = bad.clone();
    fixed.as_object_mut().unwrap().remove("omit");
    std::fs::write(&file, serde_json::to_vec(&fixed).unwrap()).unwrap();
    let out = mnemon(dir.path(), &["library", "stats", path_arg(&file)]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim_end(),
        format!(
            "error: {}: bit 1, field \"embedding\": {} had the wrong length of embedding, \
             expected 3",
            file.display(),
            id("beta")
        )
    );
}

/// Issue 11 item 1: `mnemon library query access/<tag>/x.json`, with a relative or an absolute
/// path, served the file's bits untagged, so restricted bits went to anyone.
#[test]
fn query_of_a_file_under_access_tags_its_bits() {
    let dir = tempfile::tempdir().unwrap();
    let tagged = dir.path().join("access/unpublished");
    std::fs::create_dir_all(&tagged).unwrap();
    std::fs::rename(write_library(dir.path()), tagged.join("lib.json")).unwrap();
    let args = write_args(dir.path(), "args.json", &query_args(&json!({"count": 4})));
    for file in [
        PathBuf::from("access/unpublished/lib.json"),
        tagged.join("lib.json"),
    ] {
        let result = json_out(&query(dir.path(), &file, path_arg(&args), &[]));
        assert_eq!(titles(&result), Vec::<String>::new(), "{}", file.display());
    }
}

/// Issue 17: `library pack --index` writes `<FILE>.ann`; `library query` searches it from
/// `--index-min-bits` bits up (the default is far above this library), `--exact` (or the
/// argument `exact: true`) never does, and a damaged index is refused with a warning while the
/// query scans.
#[test]
fn pack_index_then_query_through_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_library(dir.path());
    let args = write_args(dir.path(), "args.json", &query_args(&json!({"count": 3})));
    let exact_args = write_args(
        dir.path(),
        "exact.json",
        &query_args(&json!({"count": 3, "exact": true})),
    );
    let out = mnemon(dir.path(), &["library", "pack", path_arg(&file), "--index"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let index = dir.path().join("lib.json.ann");
    assert!(index.is_file());
    assert!(stderr(&out).contains("lib.json.ann"), "{}", stderr(&out));
    let scanned = json_out(&query(dir.path(), &file, path_arg(&args), &["--exact"]));
    assert_eq!(titles(&scanned), ["alpha", "beta", "delta"]);
    let through_index = query(
        dir.path(),
        &file,
        path_arg(&args),
        &["--index-min-bits", "0"],
    );
    assert_eq!(json_out(&through_index), scanned);
    assert_eq!(stderr(&through_index), "");
    // The beam is at least the bits wanted, however narrow `--index-ef`; 0 is refused.
    let narrow = query(
        dir.path(),
        &file,
        path_arg(&args),
        &["--index-min-bits", "0", "--index-ef", "1"],
    );
    assert_eq!(json_out(&narrow), scanned);
    let refused = query(
        dir.path(),
        &file,
        path_arg(&args),
        &["--index-min-bits", "0", "--index-ef", "0"],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("--index-ef"),
        "{}",
        stderr(&refused)
    );

    // Damaged: refused with a warning, and the scan answers.
    let mut bytes = std::fs::read(&index).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&index, &bytes).unwrap();
    let out = query(
        dir.path(),
        &file,
        path_arg(&args),
        &["--index-min-bits", "0"],
    );
    assert_eq!(json_out(&out), scanned);
    let warning = stderr(&out);
    assert!(
        warning.contains("not using the ANN index") && warning.contains("damaged"),
        "{warning}"
    );
    // Never looked at: below the default threshold, with --exact, or with `exact: true`.
    for (a, extra) in [
        (&args, &[][..]),
        (&args, &["--index-min-bits", "0", "--exact"][..]),
        (&exact_args, &["--index-min-bits", "0"][..]),
    ] {
        let out = query(dir.path(), &file, path_arg(a), extra);
        assert_eq!(json_out(&out), scanned);
        assert_eq!(stderr(&out), "", "{extra:?}");
    }
}

/// Issue 17: a directory served as one library. `library pack DIR --index` packs each file's
/// sidecar and builds one index over the merged library into `DIR/.library.ann`;
/// `library query DIR` reads the directory as `mnemon serve` does and searches that index, with
/// the exact scan's answer; a file added later makes the index stale (refused with a warning,
/// the scan answers).
#[test]
fn a_directory_packs_one_index_over_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served");
    std::fs::create_dir_all(served.join("more")).unwrap();
    let part = |path: &Path, bits: Vec<Value>| {
        let lib = json!({"version": 1, "embedding_model": "m", "bits": bits});
        std::fs::write(path, serde_json::to_vec_pretty(&lib).unwrap()).unwrap();
    };
    part(
        &served.join("a.json"),
        vec![
            bit("alpha", [1.0, 0.0, 0.0], None),
            bit("gamma", [0.0, 1.0, 0.0], Some("team")),
        ],
    );
    part(
        &served.join("more/b.json"),
        vec![
            bit("beta", [0.8, 0.6, 0.0], None),
            bit("delta", [0.0, 0.0, 1.0], None),
        ],
    );
    let args = write_args(dir.path(), "args.json", &query_args(&json!({"count": 3})));
    let out = mnemon(
        dir.path(),
        &["library", "pack", path_arg(&served), "--index"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(served.join("a.json.mnx").is_file());
    assert!(served.join("more/b.json.mnx").is_file());
    let index = served.join(".library.ann");
    assert!(index.is_file(), "{}", stderr(&out));
    assert!(stderr(&out).contains(".library.ann"), "{}", stderr(&out));

    let scanned = json_out(&query(dir.path(), &served, path_arg(&args), &["--exact"]));
    assert_eq!(titles(&scanned), ["alpha", "beta", "delta"]);
    let through_index = query(
        dir.path(),
        &served,
        path_arg(&args),
        &["--index-min-bits", "0"],
    );
    assert_eq!(json_out(&through_index), scanned);
    assert_eq!(stderr(&through_index), "");

    part(
        &served.join("c.json"),
        vec![bit("epsilon", [0.9, 0.1, 0.0], None)],
    );
    let out = query(
        dir.path(),
        &served,
        path_arg(&args),
        &["--index-min-bits", "0"],
    );
    assert_eq!(titles(&json_out(&out)), ["alpha", "epsilon", "beta"]);
    let warning = stderr(&out);
    assert!(
        warning.contains("not using the ANN index") && warning.contains("stale"),
        "{warning}"
    );

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = mnemon(dir.path(), &["library", "pack", path_arg(&empty)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("holds no library files"),
        "{}",
        stderr(&out)
    );
}
