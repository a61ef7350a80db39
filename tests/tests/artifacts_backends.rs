//! Storage backends (docs/reference/artifacts.md#storage-backends): `write_to_file` confinement and
//! atomicity, and registration by name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use mnemon_artifacts::{
    ArtifactError, BackendRegistry, INLINE, MAX_NAME_BYTES, Storage, StorageBackend, WRITE_TO_FILE,
    WriteToFile,
};
use mnemon_types::{Artifact, StorageLocation};
use serde_json::{Value, json};

/// A sandbox: `root` is the backend's root, `outside` a sibling directory that must stay
/// untouched.
struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    backend: WriteToFile,
}

fn sandbox() -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    fs::create_dir_all(&root).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret.txt"), "do not touch").unwrap();
    Sandbox {
        backend: WriteToFile::new(&root),
        root,
        outside,
        _dir: dir,
    }
}

/// Every file and directory under `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            out.push(path.strip_prefix(base).unwrap().display().to_string());
            if path.is_dir() && !path.is_symlink() {
                walk(base, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Asserts that writing under `id` is refused as unsafe, with `reason_part` in the message,
/// and that nothing changed outside the root (nor, by default, inside it).
fn assert_refused(sb: &Sandbox, id: &str, reason_part: &str) {
    let outside_before = tree(&sb.outside);
    let root_before = tree(&sb.root);
    let err = sb
        .backend
        .write(id, &json!("attack"))
        .expect_err("an unsafe storage id must be refused");
    assert!(
        matches!(err, ArtifactError::UnsafeStorageId { .. }),
        "{id:?}: wrong error {err:?}"
    );
    let message = err.to_string();
    assert!(message.contains(reason_part), "{id:?}: {message}");
    assert!(
        message.contains("relative path inside the storage root"),
        "{message}"
    );
    assert_eq!(
        tree(&sb.outside),
        outside_before,
        "{id:?} wrote outside the root"
    );
    assert_eq!(
        fs::read_to_string(sb.outside.join("secret.txt")).unwrap(),
        "do not touch"
    );
    assert_eq!(tree(&sb.root), root_before, "{id:?} changed the root");
    // Reading through the same id is refused the same way.
    assert!(matches!(
        sb.backend.read(id),
        Err(ArtifactError::UnsafeStorageId { .. })
    ));
}

#[test]
fn absolute_paths_are_refused() {
    let sb = sandbox();
    let target = sb.outside.join("new.txt");
    assert_refused(&sb, target.to_str().unwrap(), "absolute path");
    assert_refused(&sb, "/etc/passwd", "absolute path");
    assert!(!target.exists());
}

#[test]
fn dot_dot_is_refused_in_any_position() {
    let sb = sandbox();
    for id in [
        "../outside/new.txt",
        "a/../../outside/new.txt",
        "a/b/..",
        "..",
        "a/../b.txt",
        "./../x",
    ] {
        assert_refused(&sb, id, "'..'");
    }
}

#[cfg(unix)]
#[test]
fn a_symlinked_directory_leading_outside_is_refused() {
    let sb = sandbox();
    std::os::unix::fs::symlink(&sb.outside, sb.root.join("escape")).unwrap();
    assert_refused(&sb, "escape/new.txt", "symbolic link leading outside");
    assert_refused(&sb, "escape/secret.txt", "symbolic link leading outside");
    // Deeper: a link further down the path.
    fs::create_dir_all(sb.root.join("a/b")).unwrap();
    std::os::unix::fs::symlink(&sb.outside, sb.root.join("a/b/out")).unwrap();
    assert_refused(
        &sb,
        "a/b/out/deeper/new.txt",
        "symbolic link leading outside",
    );
}

#[cfg(unix)]
#[test]
fn a_symlinked_file_leading_outside_is_refused() {
    let sb = sandbox();
    std::os::unix::fs::symlink(sb.outside.join("secret.txt"), sb.root.join("link.txt")).unwrap();
    assert_refused(&sb, "link.txt", "symbolic link leading outside");
    // A dangling link could be made to point anywhere later: refused too.
    std::os::unix::fs::symlink(sb.outside.join("not-yet.txt"), sb.root.join("dangling.txt"))
        .unwrap();
    assert_refused(&sb, "dangling.txt", "leads nowhere");
    assert!(!sb.outside.join("not-yet.txt").exists());
}

#[cfg(unix)]
#[test]
fn symlinks_that_stay_inside_the_root_are_followed() {
    let sb = sandbox();
    fs::create_dir_all(sb.root.join("real")).unwrap();
    std::os::unix::fs::symlink(sb.root.join("real"), sb.root.join("alias")).unwrap();
    sb.backend.write("alias/plan.txt", &json!("plan")).unwrap();
    assert_eq!(
        fs::read_to_string(sb.root.join("real/plan.txt")).unwrap(),
        "plan"
    );
    assert_eq!(sb.backend.read("alias/plan.txt").unwrap(), json!("plan"));
}

#[cfg(unix)]
#[test]
fn a_root_that_is_itself_a_symlink_works() {
    let sb = sandbox();
    let linked_root = sb.root.parent().unwrap().join("root-link");
    std::os::unix::fs::symlink(&sb.root, &linked_root).unwrap();
    let backend = WriteToFile::new(&linked_root);
    backend.write("x/y.txt", &json!("ok")).unwrap();
    assert_eq!(fs::read_to_string(sb.root.join("x/y.txt")).unwrap(), "ok");
}

#[test]
fn nul_bytes_are_refused() {
    let sb = sandbox();
    assert_refused(&sb, "plan\0.txt", "NUL byte");
    assert_refused(&sb, "dir\0/plan.txt", "NUL byte");
}

#[test]
fn over_long_names_are_refused() {
    let sb = sandbox();
    let long = "n".repeat(MAX_NAME_BYTES + 1);
    assert_refused(&sb, &long, "bytes long");
    assert_refused(&sb, &format!("dir/{long}/x.txt"), "bytes long");
    // Multi-byte characters count in bytes: 128 × 2 bytes = 256.
    assert_refused(&sb, &"é".repeat(128), "256 bytes long");
    // A path made of allowed names but too long as a whole.
    let segment = "d".repeat(200);
    let deep = vec![segment.as_str(); 25].join("/");
    assert_refused(&sb, &deep, "more than the 4095 bytes");
    // Without the joined length, which told a caller how long the server's root is.
    let root_len = sb.backend.root().canonicalize().unwrap().as_os_str().len();
    let message = sb
        .backend
        .write(&deep, &json!("x"))
        .unwrap_err()
        .to_string();
    assert!(
        !message.contains(&(root_len + 1 + deep.len()).to_string()),
        "{message}"
    );
    // The longest allowed name works.
    let longest = "m".repeat(MAX_NAME_BYTES);
    sb.backend.write(&longest, &json!("fits")).unwrap();
    assert_eq!(sb.backend.read(&longest).unwrap(), json!("fits"));
}

#[test]
fn other_malformed_ids_are_refused() {
    let sb = sandbox();
    assert_refused(&sb, "", "empty");
    assert_refused(&sb, "  ", "empty");
    assert_refused(&sb, "a\\..\\b", "backslash");
    assert_refused(&sb, "dir/", "names a directory");
    assert_refused(&sb, "./.", "names no file");
    fs::create_dir_all(sb.root.join("existing")).unwrap();
    assert_refused(&sb, "existing", "names a directory");
    fs::write(sb.root.join("file"), "x").unwrap();
    assert_refused(
        &sb,
        "file/inner.txt",
        "is a file where a directory is needed",
    );
}

#[test]
fn writes_create_parents_and_are_atomic_renames() {
    let sb = sandbox();
    sb.backend
        .write("plans/2024/plan.json", &json!({"steps": ["a"]}))
        .unwrap();
    sb.backend.write("notes.md", &json!("# Notes\n")).unwrap();
    assert_eq!(
        fs::read_to_string(sb.root.join("plans/2024/plan.json")).unwrap(),
        "{\n  \"steps\": [\n    \"a\"\n  ]\n}"
    );
    assert_eq!(
        fs::read_to_string(sb.root.join("notes.md")).unwrap(),
        "# Notes\n"
    );
    // Overwrite in place; no temporary files are left behind.
    sb.backend.write("notes.md", &json!("v2")).unwrap();
    assert_eq!(
        tree(&sb.root),
        ["notes.md", "plans", "plans/2024", "plans/2024/plan.json"]
    );
    assert_eq!(
        sb.backend.path_of("plans/2024/plan.json").unwrap(),
        fs::canonicalize(sb.root.join("plans/2024/plan.json")).unwrap()
    );
}

#[test]
fn concurrent_writers_never_expose_a_partial_file() {
    let sb = sandbox();
    let big_a = "a".repeat(1 << 20);
    let big_b = "b".repeat(1 << 20);
    sb.backend.write("big.txt", &json!(big_a)).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..10 {
                let text = if i % 2 == 0 { &big_b } else { &big_a };
                sb.backend.write("big.txt", &json!(text)).unwrap();
            }
        });
        s.spawn(|| {
            for _ in 0..20 {
                let Value::String(text) = sb.backend.read("big.txt").unwrap() else {
                    panic!("not text")
                };
                assert!(text == big_a || text == big_b, "saw a partial file");
            }
        });
    });
}

#[test]
fn a_missing_file_is_reported_as_missing_content() {
    let sb = sandbox();
    let err = sb.backend.read("never/written.txt").unwrap_err();
    assert!(
        matches!(err, ArtifactError::ContentNotFound { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("never/written.txt"));
}

/// A backend kept in a map: what a user adds for an object store, say.
#[derive(Default)]
struct MapBackend {
    objects: Mutex<HashMap<String, Value>>,
}

impl StorageBackend for MapBackend {
    fn write(&self, storage_id: &str, content: &Value) -> Result<(), ArtifactError> {
        self.objects
            .lock()
            .unwrap()
            .insert(storage_id.to_owned(), content.clone());
        Ok(())
    }

    fn read(&self, storage_id: &str) -> Result<Value, ArtifactError> {
        self.objects
            .lock()
            .unwrap()
            .get(storage_id)
            .cloned()
            .ok_or_else(|| ArtifactError::ContentNotFound {
                backend: "objects".into(),
                id: storage_id.into(),
            })
    }

    fn delete(&self, storage_id: &str) -> Result<bool, ArtifactError> {
        Ok(self.objects.lock().unwrap().remove(storage_id).is_some())
    }
}

#[test]
fn backends_are_registered_and_resolved_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut registry = BackendRegistry::with_defaults(dir.path());
    assert_eq!(registry.names(), [INLINE, WRITE_TO_FILE]);
    assert!(matches!(registry.resolve("inline"), Ok(Storage::Inline)));
    assert!(matches!(
        registry.resolve("write_to_file"),
        Ok(Storage::External { .. })
    ));

    let objects = Arc::new(MapBackend::default());
    assert!(
        registry
            .register("objects", objects.clone())
            .unwrap()
            .is_none()
    );
    assert_eq!(registry.names(), ["inline", "objects", "write_to_file"]);
    let Ok(Storage::External { name, backend }) = registry.resolve("objects") else {
        panic!("objects not registered")
    };
    assert_eq!(name, "objects");
    backend.write("o1", &json!([1, 2])).unwrap();

    // Content is read through the artifact's backend, or taken inline.
    let stored =
        Artifact::new("s", "k", "t", "n").with_storage(StorageLocation::new("objects", "o1"));
    assert_eq!(registry.read_content(&stored).unwrap(), Some(json!([1, 2])));
    let inline = Artifact::new("s", "k", "t", "n").with_data(json!("here"));
    assert_eq!(registry.read_content(&inline).unwrap(), Some(json!("here")));

    let err = registry.resolve("s3").err().unwrap();
    assert!(
        err.to_string().contains("inline, objects, write_to_file"),
        "{err}"
    );
    for bad in ["inline", "", " padded"] {
        assert!(matches!(
            registry.register(bad, objects.clone()),
            Err(ArtifactError::InvalidBackendName { .. })
        ));
    }
}

/// Where [`write_nested_once_for_strace`] writes, when it runs under strace.
const STRACE_DIR: &str = "MNEMON_ARTIFACT_STRACE_DIR";

/// One save of `a/b/c.txt` into a fresh root: run alone, under strace, by
/// [`new_directories_are_synced_into_their_parents`]; without its directory it does nothing.
#[test]
#[ignore = "run under strace by new_directories_are_synced_into_their_parents"]
fn write_nested_once_for_strace() {
    let Some(dir) = std::env::var_os(STRACE_DIR) else {
        return;
    };
    WriteToFile::new(Path::new(&dir).join("root"))
        .write("a/b/c.txt", &Value::String("x".into()))
        .unwrap();
}

/// A save that created directories (the root, `a`, `a/b`) synced only the file's own
/// directory after its rename: the new directories' entries, in their parents, could be lost
/// to a power loss, and with them the path to a committed record's content. Each directory
/// created is now synced into its parent. Traced with strace, as the backup's folder sync is.
#[test]
fn new_directories_are_synced_into_their_parents() {
    let dir = tempfile::tempdir().unwrap();
    let Some(calls) = crate::syncs_under_strace(
        "the directory-sync check of write_to_file",
        module_path!(),
        "write_nested_once_for_strace",
        STRACE_DIR,
        dir.path(),
    ) else {
        return;
    };
    let base = fs::canonicalize(dir.path()).unwrap();
    assert_eq!(
        fs::read_to_string(base.join("root/a/b/c.txt")).unwrap(),
        "x",
        "the traced save wrote nothing"
    );
    for synced in [
        base.clone(),
        base.join("root"),
        base.join("root/a"),
        base.join("root/a/b"),
    ] {
        let name = format!("<{}>", synced.display());
        assert!(
            calls
                .lines()
                .any(|l| l.contains("fsync(") && l.contains(&name)),
            "no fsync of {name} in:\n{calls}"
        );
    }
}
