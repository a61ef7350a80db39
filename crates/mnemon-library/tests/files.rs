//! File-level behaviour: opening, the sidecar, directories and path-derived tags.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use mnemon_library::synthetic::write_synthetic;
use mnemon_library::{
    AccessPolicy, Library, OpenOptions, QueryOptions, sidecar_path, tag_from_path,
    tag_from_relative_path, wire,
};
use serde_json::json;

fn write_lib(path: &Path, bits: usize, seed: u64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let f = std::fs::File::create(path).unwrap();
    write_synthetic(f, "m", bits, 8, seed).unwrap();
}

#[test]
fn sidecar_opens_mapped_and_answers_like_the_json() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lib.json");
    write_lib(&file, 40, 1);
    let lib = Library::open(&file).unwrap();
    let side = lib.pack(&file).unwrap();
    assert_eq!(side, sidecar_path(&file));
    let packed = Library::open(&file).unwrap();
    assert_eq!(packed.len(), 40);
    let args = json!({"version": 1, "query_embedding_model": "m", "count": 5, "count_type": "bit"});
    let args = args.as_object().unwrap();
    let opts = QueryOptions {
        seed: Some(9),
        ..QueryOptions::default()
    };
    let p = AccessPolicy::default();
    assert_eq!(
        wire::query(&lib, args, &p, &opts).unwrap(),
        wire::query(&packed, args, &p, &opts).unwrap()
    );
    let mut a = Vec::new();
    let mut b = Vec::new();
    lib.to_writer(&mut a, true).unwrap();
    packed.to_writer(&mut b, true).unwrap();
    assert!(a == b);
    // A changed source makes the sidecar stale: the JSON is loaded instead.
    write_lib(&file, 41, 2);
    assert_eq!(Library::open(&file).unwrap().len(), 41);
    // A corrupt sidecar is ignored, never trusted.
    std::fs::write(&side, b"MNEMONX1garbage").unwrap();
    assert_eq!(Library::open(&file).unwrap().len(), 41);
}

/// `open_dir` merges in place (no copy of what was merged per file: docs/reference/host.md,
/// `cargo xtask bench library`'s directory line); the result is what extending one file's
/// library by the next, in path order, gives.
#[test]
fn a_directory_is_its_files_extended_in_path_order() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["a.json", "b/c.json", "b/d.json", "e.json"];
    for (seed, name) in names.iter().enumerate() {
        write_lib(&dir.path().join(name), 4 + seed, seed as u64 % 3);
    }
    let mut expected = Library::open(dir.path().join(names[0])).unwrap();
    for name in &names[1..] {
        expected
            .extend(&Library::open(dir.path().join(name)).unwrap())
            .unwrap();
    }
    let merged = Library::open_dir(dir.path()).unwrap();
    assert_eq!(merged.len(), expected.len());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    merged.to_writer(&mut a, true).unwrap();
    expected.to_writer(&mut b, true).unwrap();
    assert!(a == b, "open_dir differs from extending file by file");
}

#[test]
fn directories_merge_in_path_order_with_tags_from_paths() {
    let dir = tempfile::tempdir().unwrap();
    write_lib(&dir.path().join("b.json"), 3, 1);
    write_lib(&dir.path().join("a/x.json"), 2, 2);
    write_lib(&dir.path().join("access/team/t.json"), 2, 3);
    write_lib(&dir.path().join("access/direct.json"), 1, 4);
    write_lib(&dir.path().join(".hidden.json"), 5, 5);
    // The same bits again: duplicates are dropped across files.
    write_lib(&dir.path().join("c.json"), 3, 1);
    let lib = Library::open_dir(dir.path()).unwrap();
    assert_eq!(lib.len(), 2 + 1 + 2 + 3);
    let tags: Vec<Option<&str>> = lib.bits().map(|b| b.access_tag()).collect();
    assert_eq!(
        tags,
        [
            None,
            None,
            None,
            Some("team"),
            Some("team"),
            None,
            None,
            None
        ]
    );
    // A saved query result with `omit: "*"` (no bits, valid) used to make every later file
    // add nothing: `extend` adopted its omit.
    std::fs::write(
        dir.path().join("0-saved.json"),
        r#"{"version": 1, "embedding_model": "other", "omit": "*", "bits": []}"#,
    )
    .unwrap();
    let with_empty = Library::open_dir(dir.path()).unwrap();
    assert_eq!(with_empty.len(), lib.len());
    assert_eq!(with_empty.model(), "m");
    let only_empty = tempfile::tempdir().unwrap();
    std::fs::write(
        only_empty.path().join("saved.json"),
        r#"{"version": 1, "embedding_model": "other", "omit": "*", "bits": []}"#,
    )
    .unwrap();
    let blank = Library::open_dir(only_empty.path()).unwrap();
    assert!(blank.is_empty());
    assert_eq!(blank.model(), "other");
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(
        Library::open_dir(empty.path()).unwrap_err().to_string(),
        "No libraries were in the default library directory."
    );
    assert_eq!(
        tag_from_relative_path(Path::new("access/unpublished/x.json")).as_deref(),
        Some("unpublished")
    );
    assert_eq!(tag_from_relative_path(Path::new("access/x.json")), None);
    assert_eq!(
        tag_from_relative_path(Path::new("a/access/t/u/x.json")).as_deref(),
        Some("t")
    );
    let forced = Library::open_with(
        dir.path().join("b.json"),
        &OpenOptions {
            force_tag: Some("p".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(forced.bits().all(|b| b.access_tag() == Some("p")));
}

#[test]
fn a_directory_load_error_names_the_file_bit_and_field() {
    let dir = tempfile::tempdir().unwrap();
    write_lib(&dir.path().join("a.json"), 3, 1);
    let bad = dir.path().join("access/team/b.json");
    write_lib(&bad, 4, 2);
    let mut value: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&bad).unwrap()).unwrap();
    value["bits"][2]["embedding"] = json!(null);
    std::fs::write(&bad, serde_json::to_vec(&value).unwrap()).unwrap();
    let e = Library::open_dir(dir.path()).unwrap_err();
    let path = bad.display().to_string();
    assert_eq!(e.file(), Some(path.as_str()));
    assert_eq!((e.bit_index(), e.field()), (Some(2), Some("embedding")));
    let message = e.to_string();
    assert!(
        message.starts_with(&format!("{path}: bit 2, field \"embedding\": ")),
        "{message}"
    );
    assert!(message.ends_with(" is missing embedding"), "{message}");
    // A file of another model is named too.
    std::fs::remove_file(&bad).unwrap();
    let other = dir.path().join("c.json");
    write_synthetic(std::fs::File::create(&other).unwrap(), "other", 1, 8, 3).unwrap();
    let e = Library::open_dir(dir.path()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: The other library had a different embedding model",
            other.display()
        )
    );
}

#[test]
fn progress_reports_bytes_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lib.json");
    // More bits than one decoding batch (4,096), so progress is reported before the end.
    write_synthetic(std::fs::File::create(&file).unwrap(), "m", 5000, 2, 1).unwrap();
    let len = std::fs::metadata(&file).unwrap().len();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let options = OpenOptions {
        progress: Some(std::sync::Arc::new(move |n| sink.lock().unwrap().push(n))),
        ..OpenOptions::default()
    };
    assert_eq!(Library::open_with(&file, &options).unwrap().len(), 5000);
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty());
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert!(seen.iter().all(|&n| n > 0 && n <= len), "{seen:?} of {len}");
}

#[test]
fn concurrent_queries_on_a_shared_library() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lib.json");
    write_lib(&file, 200, 7);
    let lib = std::sync::Arc::new(Library::open(&file).unwrap());
    let args = json!({"version": 1, "query_embedding_model": "m", "count": 50});
    let want = wire::query(
        &lib,
        args.as_object().unwrap(),
        &AccessPolicy::default(),
        &QueryOptions {
            seed: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let lib = lib.clone();
            let (args, want) = (&args, &want);
            s.spawn(move || {
                for _ in 0..20 {
                    let got = wire::query(
                        &lib,
                        args.as_object().unwrap(),
                        &AccessPolicy::default(),
                        &QueryOptions {
                            seed: Some(1),
                            ..Default::default()
                        },
                    )
                    .unwrap();
                    assert_eq!(&got, want);
                }
            });
        }
    });
}

/// Issue 11 item 1: a single file under `access/<tag>/`, named directly (absolute or relative
/// path), had its bits served untagged. Every path-based open now tags them, as a directory
/// load does; an explicit `force_tag` still wins.
#[test]
fn a_file_named_directly_gets_its_tag_from_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("access/unpublished/x.json");
    write_lib(&file, 3, 7);
    let lib = Library::open(&file).unwrap();
    assert!(lib.bits().all(|b| b.access_tag() == Some("unpublished")));
    // Restricted: nothing reaches a caller without a token.
    let args = json!({"version": 1, "query_embedding_model": "m", "count": 10,
                      "count_type": "bit"});
    let result = wire::query(
        &lib,
        args.as_object().unwrap(),
        &AccessPolicy::default(),
        &QueryOptions::default(),
    )
    .unwrap();
    assert_eq!(result["bits"].as_array().unwrap().len(), 0, "{result:?}");
    // A file directly in `access/` or outside it keeps its stored tags (none here).
    let direct = dir.path().join("access/direct.json");
    write_lib(&direct, 2, 8);
    assert!(
        Library::open(&direct)
            .unwrap()
            .bits()
            .all(|b| b.access_tag().is_none())
    );
    // The rule on paths: relative paths count from the current directory, made absolute
    // without resolving symlinks.
    assert_eq!(
        tag_from_path(Path::new("access/team/x.json")).as_deref(),
        Some("team")
    );
    assert_eq!(
        tag_from_path(&dir.path().join("a/access/t/u/x.json")).as_deref(),
        Some("t")
    );
    assert_eq!(tag_from_path(&dir.path().join("access/x.json")), None);
    // A sidecar next to a tagged file is not allowed to drop the tag.
    lib.pack(&file).unwrap();
    assert!(
        Library::open(&file)
            .unwrap()
            .bits()
            .all(|b| b.access_tag() == Some("unpublished"))
    );
    let forced = Library::open_with(
        &file,
        &OpenOptions {
            force_tag: Some("p".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(forced.bits().all(|b| b.access_tag() == Some("p")));
}
