//! The `write_to_file` storage backend: content in files under one root directory.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use mnemon_db::atomic_file::{AtomicWriteError, is_temp_name, sync_dir, write_atomic};

use crate::backend::WRITE_TO_FILE;
use crate::{ArtifactError, StorageBackend};

/// The longest file or directory name the common file systems accept, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// The longest path Linux accepts, in bytes (`PATH_MAX` less the terminating NUL).
pub const MAX_PATH_BYTES: usize = 4095;

/// How long a temporary file (`.mnemon-*.tmp`, the pattern of
/// [`mnemon_db::atomic_file::write_atomic`], which every Mnemon file write uses) must have been
/// left unchanged before a write removes it as the leftover of a killed save.
///
/// A save writes its temporary file in one go, syncs it and renames it within moments, so a
/// temporary file untouched for this long belongs to no running save; removing only files this
/// old means a save running in another process never loses its file. (`O_TMPFILE` would avoid
/// named temporary files altogether, but it is Linux-only, not supported by every file system,
/// and cannot replace an existing target atomically, so a named file would still be needed.)
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(15 * 60);

/// The most bytes structured content may take as the pretty JSON a file holds, unless set with
/// [`WriteToFile::with_max_bytes`]: 32 MiB, the service's default result limit
/// (`mnemon_ops::DEFAULT_MAX_RESULT_BYTES`), so that what is saved can be read back.
pub const DEFAULT_MAX_FILE_BYTES: usize = 32 << 20;

/// Keeps each artifact's content in a file under a root directory; the storage id is the file's
/// path relative to the root, with `/` between directories.
///
/// - **Confined to the root.** Empty ids, absolute paths, backslashes, `..` components, NUL
///   bytes, names over [`MAX_NAME_BYTES`] and paths over [`MAX_PATH_BYTES`] are refused before
///   anything is touched. Existing directories and files on the way are checked, and a
///   symbolic link that leads outside the root (or nowhere) is refused; links that stay inside
///   are followed. The checks guard against hostile storage ids; they do not defend against
///   another process that rewrites the root's directories while a write is under way.
/// - **Atomic.** Content goes to a temporary file in the target's directory, is flushed to
///   disk, then renamed over the target, and the directory is synced: a crash leaves the old
///   file or the new one ([`mnemon_db::atomic_file::write_atomic`]).
/// - **Leftovers are removed.** A save killed mid-write leaves its temporary file behind; the
///   first write into a directory (per backend value) removes the temporary files there that
///   are older than [`STALE_TEMP_AGE`].
/// - **Parent directories are created.** The root itself is created on the first write.
/// - **Text as text.** A JSON string is written as its raw UTF-8; any other value as pretty
///   JSON. Reading gives the file's text back as a JSON string, which displays the same.
/// - **Bounded pretty JSON.** Structured content's pretty JSON takes at most
///   [`DEFAULT_MAX_FILE_BYTES`] ([`with_max_bytes`](WriteToFile::with_max_bytes)): pretty JSON
///   indents by nesting, so deep content grows many times over its request; more is
///   [`ArtifactError::ContentTooLarge`], found before the file or the memory fills. Text is
///   written as it came, and files are read whole whatever their size (a backup or a migrate
///   copies what earlier releases wrote).
#[derive(Debug, Clone)]
pub struct WriteToFile {
    root: PathBuf,
    /// The directories already cleared of stale temporary files, shared by clones.
    swept: Arc<Mutex<HashSet<PathBuf>>>,
    /// The most bytes structured content's pretty JSON may take.
    max_bytes: usize,
}

impl WriteToFile {
    /// A backend writing under `root`. Nothing is touched until the first write.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        WriteToFile {
            root: root.into(),
            swept: Arc::default(),
            max_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }

    /// The same backend with structured content's pretty JSON of at most `max_bytes` (default
    /// [`DEFAULT_MAX_FILE_BYTES`]).
    pub fn with_max_bytes(self, max_bytes: usize) -> Self {
        WriteToFile { max_bytes, ..self }
    }

    fn too_large(&self, storage_id: &str) -> ArtifactError {
        ArtifactError::ContentTooLarge {
            storage_id: storage_id.to_owned(),
            max: self.max_bytes,
        }
    }

    /// Removes, once per directory, the temporary files a killed save left in `dir`. Best
    /// effort: a file that cannot be listed or removed is left for a later run, and never
    /// fails the write.
    fn sweep_once(&self, dir: &Path) {
        let first = self
            .swept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(dir.to_path_buf());
        if first {
            remove_stale_temp_files(dir, STALE_TEMP_AGE);
        }
    }

    /// The root directory, as configured.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where `storage_id` lives (or would live), checked as for a write but creating nothing.
    pub fn path_of(&self, storage_id: &str) -> Result<PathBuf, ArtifactError> {
        match self.locate(storage_id, false)? {
            Some((_, target)) => Ok(target),
            None => Err(not_found(storage_id)),
        }
    }

    /// Finds the directory and file for `storage_id`, checking every step. With `create`,
    /// creates the root and missing directories; without, `None` means a directory on the way
    /// does not exist.
    fn locate(
        &self,
        storage_id: &str,
        create: bool,
    ) -> Result<Option<(PathBuf, PathBuf)>, ArtifactError> {
        let (dirs, file_name) = split_storage_id(storage_id)?;
        let refuse = |reason: String| refused(storage_id, reason);
        if create {
            create_dir_all_synced(&self.root).map_err(|e| io_error("create", &self.root, e))?;
        }
        let root = match fs::canonicalize(&self.root) {
            Ok(root) => root,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(io_error("open the storage root", &self.root, e)),
        };
        let joined_len = root.as_os_str().len() + 1 + storage_id.len();
        if joined_len > MAX_PATH_BYTES {
            // The message leaves out the joined length, from which a caller would learn the
            // length of the server's storage root.
            return Err(refuse(format!(
                "it is too long: joined to the storage root it makes a path of more than the \
                 {MAX_PATH_BYTES} bytes the file system allows; use a shorter id"
            )));
        }
        let mut dir = root.clone();
        for segment in dirs {
            let next = dir.join(segment);
            let mut created = false;
            loop {
                match fs::symlink_metadata(&next) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        dir = confined_link_target(&root, &next, &refuse)?;
                        if !dir.is_dir() {
                            return Err(refuse(format!(
                                "{segment:?} links to a file where a directory is needed"
                            )));
                        }
                    }
                    Ok(meta) if meta.is_dir() => dir = next.clone(),
                    Ok(_) => {
                        return Err(refuse(format!(
                            "{segment:?} is a file where a directory is needed"
                        )));
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
                    // Another writer may create it between our look and our create: look again.
                    Err(e) if e.kind() == io::ErrorKind::NotFound && !created => {
                        match fs::create_dir(&next) {
                            // Synced into its parent, as every directory this backend creates:
                            // a file's own directory is synced after its rename, but a new
                            // directory's entry lives in its parent (a power loss could lose
                            // the path to a committed record's content).
                            // Made by another writer meanwhile, which may not have synced it
                            // yet: synced here too (cheap, and rare).
                            Ok(()) | Err(_)
                                if fs::symlink_metadata(&next).is_ok_and(|m| m.is_dir()) =>
                            {
                                sync_dir(&dir)
                                    .map_err(|e| io_error_for(storage_id, "sync", &dir, e))?;
                            }
                            // Replaced at once by something else: looked at again below.
                            Ok(()) => {}
                            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                            Err(e) => return Err(io_error_for(storage_id, "create", &next, e)),
                        }
                        created = true;
                        continue;
                    }
                    Err(e) => return Err(io_error_for(storage_id, "inspect", &next, e)),
                }
                break;
            }
        }
        let target = dir.join(file_name);
        match fs::symlink_metadata(&target) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let real = confined_link_target(&root, &target, &refuse)?;
                if real.is_dir() {
                    return Err(refuse("it links to a directory, not a file".into()));
                }
                let real_dir = real.parent().map(Path::to_path_buf).unwrap_or(root);
                Ok(Some((real_dir, real)))
            }
            Ok(meta) if meta.is_dir() => Err(refuse("it names a directory, not a file".into())),
            Ok(_) => Ok(Some((dir, target))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Some((dir, target))),
            Err(e) => Err(io_error_for(storage_id, "inspect", &target, e)),
        }
    }
}

impl StorageBackend for WriteToFile {
    fn write(&self, storage_id: &str, content: &Value) -> Result<(), ArtifactError> {
        writable_id(storage_id)?;
        let bytes = match content {
            // Text is written as it came (no larger than the request that brought it).
            Value::String(text) => text.as_bytes().to_vec(),
            other => crate::pretty::pretty_within(other, self.max_bytes)
                .map_err(ArtifactError::ContentEncoding)?
                .ok_or_else(|| self.too_large(storage_id))?,
        };
        let Some((dir, target)) = self.locate(storage_id, true)? else {
            return Err(not_found(storage_id));
        };
        self.sweep_once(&dir);
        write_atomic(&target, |out| out.write_all(&bytes)).map_err(|e| match e {
            AtomicWriteError::Write(e) => io_error_for(storage_id, "write", &target, e),
            AtomicWriteError::File(e) => {
                let (action, path) = (e.step().action(), e.path().to_path_buf());
                io_error_for(storage_id, action, &path, e.into_io_error())
            }
        })
    }

    fn read(&self, storage_id: &str) -> Result<Value, ArtifactError> {
        let Some((_, target)) = self.locate(storage_id, false)? else {
            return Err(not_found(storage_id));
        };
        match fs::read_to_string(&target) {
            Ok(text) => Ok(Value::String(text)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(not_found(storage_id)),
            Err(e) => Err(io_error_for(storage_id, "read", &target, e)),
        }
    }

    fn canonical_id(&self, storage_id: &str) -> Result<String, ArtifactError> {
        writable_id(storage_id)
    }

    fn delete(&self, storage_id: &str) -> Result<bool, ArtifactError> {
        let Some((dir, target)) = self.locate(storage_id, false)? else {
            return Ok(false);
        };
        match fs::remove_file(&target) {
            Ok(()) => {
                sync_dir(&dir).map_err(|e| io_error("sync the directory", &dir, e))?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_error_for(storage_id, "delete", &target, e)),
        }
    }

    /// Removes every file, then syncs each directory that lost one, once: the removals are
    /// as durable as [`delete`](StorageBackend::delete)'s when this returns, for one fsync
    /// per directory instead of one per file. A removal whose directory cannot be synced is
    /// reported as that error.
    fn delete_many(&self, storage_ids: &[&str]) -> Vec<Result<bool, ArtifactError>> {
        let mut results: Vec<Result<bool, ArtifactError>> = Vec::with_capacity(storage_ids.len());
        let mut dirs: Vec<(PathBuf, Vec<usize>)> = Vec::new();
        for (i, storage_id) in storage_ids.iter().enumerate() {
            let located = match self.locate(storage_id, false) {
                Ok(Some(located)) => located,
                Ok(None) => {
                    results.push(Ok(false));
                    continue;
                }
                Err(e) => {
                    results.push(Err(e));
                    continue;
                }
            };
            let (dir, target) = located;
            match fs::remove_file(&target) {
                Ok(()) => {
                    results.push(Ok(true));
                    match dirs.iter_mut().find(|(d, _)| *d == dir) {
                        Some((_, removed)) => removed.push(i),
                        None => dirs.push((dir, vec![i])),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => results.push(Ok(false)),
                Err(e) => results.push(Err(io_error_for(storage_id, "delete", &target, e))),
            }
        }
        for (dir, removed) in dirs {
            if let Err(e) = sync_dir(&dir) {
                let message = e.to_string();
                for i in removed {
                    if let Some(result) = results.get_mut(i) {
                        *result = Err(io_error(
                            "sync the directory",
                            &dir,
                            io::Error::new(e.kind(), message.clone()),
                        ));
                    }
                }
            }
        }
        results
    }
}

/// Removes the regular files named `.mnemon-*.tmp` in `dir` that were last modified more than
/// `age` ago; returns how many. Errors are skipped: see [`WriteToFile::sweep_once`].
fn remove_stale_temp_files(dir: &Path, age: Duration) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_temp_name(name) {
            continue;
        }
        // `DirEntry::metadata` does not follow symbolic links.
        let Ok(meta) = entry.metadata() else { continue };
        let stale = meta
            .modified()
            .ok()
            .and_then(|modified| now.duration_since(modified).ok())
            .is_some_and(|idle| idle > age);
        if meta.is_file() && stale && fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The canonical spelling of a storage id a write may use: its components joined by `/`,
/// without `.` and empty ones (`./plans//p.json` is `plans/p.json`). A file name of the form of
/// the store's temporary files (`.mnemon-*.tmp`) is refused: the stale-file sweep of a directory
/// would remove it.
fn writable_id(storage_id: &str) -> Result<String, ArtifactError> {
    let (dirs, file_name) = split_storage_id(storage_id)?;
    if is_temp_name(file_name) {
        return Err(refused(
            storage_id,
            "names of the form .mnemon-*.tmp are the store's temporary files, which it removes"
                .to_owned(),
        ));
    }
    let mut canonical = dirs.join("/");
    if !canonical.is_empty() {
        canonical.push('/');
    }
    canonical.push_str(file_name);
    Ok(canonical)
}

/// Splits a storage id into its directory names and file name, refusing anything that could
/// leave the root or that no file system would accept.
fn split_storage_id(storage_id: &str) -> Result<(Vec<&str>, &str), ArtifactError> {
    let refuse = |reason: &str| Err(refused(storage_id, reason.to_owned()));
    if storage_id.trim().is_empty() {
        return refuse("it is empty");
    }
    if storage_id.contains('\0') {
        return refuse("it contains a NUL byte");
    }
    if storage_id.starts_with('/') || Path::new(storage_id).has_root() {
        return refuse("it is an absolute path");
    }
    if storage_id.contains('\\') {
        return refuse("it contains a backslash; separate directories with '/'");
    }
    if storage_id.ends_with('/') {
        return refuse("it ends with '/', so it names a directory, not a file");
    }
    let mut segments = Vec::new();
    for segment in storage_id.split('/') {
        match segment {
            "" | "." => {}
            ".." => return refuse("it has a '..' component, which could lead outside the root"),
            _ if segment.len() > MAX_NAME_BYTES => {
                let start: String = segment.chars().take(24).collect();
                return Err(refused(
                    storage_id,
                    format!(
                        "the name {start:?}... is {} bytes long, more than the {MAX_NAME_BYTES} \
                         the file system allows",
                        segment.len()
                    ),
                ));
            }
            _ => segments.push(segment),
        }
    }
    match segments.pop() {
        Some(file_name) => Ok((segments, file_name)),
        None => refuse("it names no file"),
    }
}

/// The real path a symbolic link leads to, if it stays inside `root`.
fn confined_link_target(
    root: &Path,
    link: &Path,
    refuse: &dyn Fn(String) -> ArtifactError,
) -> Result<PathBuf, ArtifactError> {
    let name = link.file_name().unwrap_or_default();
    match fs::canonicalize(link) {
        Ok(real) if real.starts_with(root) => Ok(real),
        Ok(_) => Err(refuse(format!(
            "{name:?} is a symbolic link leading outside the storage root"
        ))),
        Err(_) => Err(refuse(format!(
            "{name:?} is a symbolic link that leads nowhere (its target does not exist)"
        ))),
    }
}

fn refused(storage_id: &str, reason: String) -> ArtifactError {
    ArtifactError::UnsafeStorageId {
        id: storage_id.chars().take(300).collect(),
        reason,
    }
}

fn not_found(storage_id: &str) -> ArtifactError {
    ArtifactError::ContentNotFound {
        backend: WRITE_TO_FILE.to_owned(),
        id: storage_id.to_owned(),
    }
}

fn io_error(action: &'static str, path: &Path, source: io::Error) -> ArtifactError {
    ArtifactError::ContentIo {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// An I/O error, except that a name the file system finds too long is reported as a refused
/// storage id (some file systems allow fewer than [`MAX_NAME_BYTES`]).
fn io_error_for(
    storage_id: &str,
    action: &'static str,
    path: &Path,
    source: io::Error,
) -> ArtifactError {
    if is_name_too_long(&source) {
        return refused(
            storage_id,
            "a name in it is longer than this file system allows".to_owned(),
        );
    }
    io_error(action, path, source)
}

fn is_name_too_long(error: &io::Error) -> bool {
    // ENAMETOOLONG; `io::ErrorKind::InvalidFilename` needs a newer Rust than we support.
    if cfg!(target_os = "linux") {
        error.raw_os_error() == Some(36)
    } else if cfg!(target_vendor = "apple") {
        error.raw_os_error() == Some(63)
    } else {
        false
    }
}

/// [`fs::create_dir_all`], syncing each directory it creates into its parent, so that the
/// path to a saved file survives a power loss ([`write_atomic`] syncs the file's own
/// directory).
fn create_dir_all_synced(path: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = path;
    while fs::symlink_metadata(at).is_err() {
        missing.push(at);
        match at.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => at = parent,
            _ => break,
        }
    }
    for dir in missing.into_iter().rev() {
        match fs::create_dir(dir) {
            Ok(()) => {}
            // Made by another writer meanwhile, which may not have synced it yet: synced here
            // too.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(e) => return Err(e),
        }
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        sync_dir(parent)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn splits_plain_ids() {
        assert_eq!(
            split_storage_id("plans/./2024//plan.json").unwrap(),
            (vec!["plans", "2024"], "plan.json")
        );
        assert_eq!(split_storage_id("a.txt").unwrap(), (vec![], "a.txt"));
    }

    /// A save keeps one spelling per file, so that sweeps compare like with like; a name of
    /// the temporary files' form is refused for a write (the stale-file sweep would remove
    /// it), and refused before anything is written.
    #[test]
    fn ids_have_one_spelling_and_temporary_names_are_reserved() {
        let dir = tempfile::tempdir().unwrap();
        let backend = WriteToFile::new(dir.path().join("root"));
        for spelling in [
            "plans/p.json",
            "./plans/p.json",
            "plans//p.json",
            "plans/./p.json",
        ] {
            assert_eq!(backend.canonical_id(spelling).unwrap(), "plans/p.json");
        }
        assert_eq!(backend.canonical_id("p.json").unwrap(), "p.json");
        for reserved in ["notes/.mnemon-draft.tmp", ".mnemon-x.tmp"] {
            let error = backend.canonical_id(reserved).unwrap_err();
            assert!(error.to_string().contains("temporary files"), "{error}");
            let error = backend.write(reserved, &Value::from("x")).unwrap_err();
            assert!(error.to_string().contains("temporary files"), "{error}");
        }
        assert!(!dir.path().join("root").exists());
        assert!(backend.canonical_id("../x").is_err());
    }

    #[test]
    fn string_content_is_raw_and_other_values_pretty() {
        let dir = tempfile::tempdir().unwrap();
        let backend = WriteToFile::new(dir.path().join("root"));
        backend
            .write("a/b/c.txt", &Value::String("hi\n".into()))
            .unwrap();
        backend
            .write("d.json", &serde_json::json!({"x": [1, 2]}))
            .unwrap();
        let root = dir.path().join("root");
        assert_eq!(fs::read_to_string(root.join("a/b/c.txt")).unwrap(), "hi\n");
        assert_eq!(
            fs::read_to_string(root.join("d.json")).unwrap(),
            "{\n  \"x\": [\n    1,\n    2\n  ]\n}"
        );
        assert_eq!(
            backend.read("a/b/c.txt").unwrap(),
            Value::String("hi\n".into())
        );
    }

    /// Pretty JSON indents by nesting: a request body of a few KB nested a hundred deep
    /// pretty-printed to megabytes (a 2 MiB body to about 250 MB), written whole. Structured
    /// content is bounded as it is written now; text is written as it came, and files are read
    /// whole (what earlier releases wrote must still export).
    #[test]
    fn structured_content_is_bounded_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let backend = WriteToFile::new(&root).with_max_bytes(100_000);
        let mut deep = Value::Array(vec![serde_json::json!(0); 5_000]);
        for _ in 0..100 {
            deep = Value::Array(vec![deep]);
        }
        assert!(serde_json::to_vec(&deep).unwrap().len() < 11_000);
        let refused = backend.write("deep.json", &deep).unwrap_err();
        assert!(
            matches!(refused, ArtifactError::ContentTooLarge { max: 100_000, .. }),
            "{refused}"
        );
        assert!(refused.to_string().contains("100000 bytes"), "{refused}");
        assert!(!root.join("deep.json").exists());
        // At the bound exactly it is written.
        let flat = serde_json::json!(["x".repeat(99_990)]);
        let size = serde_json::to_vec_pretty(&flat).unwrap().len();
        WriteToFile::new(&root)
            .with_max_bytes(size)
            .write("flat.json", &flat)
            .unwrap();
        assert!(matches!(
            WriteToFile::new(&root)
                .with_max_bytes(size - 1)
                .write("flat.json", &flat),
            Err(ArtifactError::ContentTooLarge { .. })
        ));
        // Text and reads are not bounded.
        backend
            .write("long.txt", &Value::String("x".repeat(200_000)))
            .unwrap();
        assert_eq!(
            backend.read("long.txt").unwrap(),
            Value::String("x".repeat(200_000))
        );
    }

    /// Issue 14: a batch removal answers per id, as `delete` would, in order: removed,
    /// already gone, refused (outside the root), in several directories.
    #[test]
    fn delete_many_answers_per_id() {
        let dir = tempfile::tempdir().unwrap();
        let backend = WriteToFile::new(dir.path().join("root"));
        for id in ["a.json", "x/b.json", "x/c.json"] {
            backend.write(id, &Value::String(id.into())).unwrap();
        }
        let results =
            backend.delete_many(&["x/b.json", "a.json", "gone.json", "../up", "x/c.json"]);
        let outcome: Vec<Option<bool>> = results.iter().map(|r| r.as_ref().ok().copied()).collect();
        assert_eq!(
            outcome,
            [Some(true), Some(true), Some(false), None, Some(true)]
        );
        assert!(matches!(
            results[3],
            Err(ArtifactError::UnsafeStorageId { .. })
        ));
        let root = dir.path().join("root");
        assert!(!root.join("a.json").exists() && !root.join("x/b.json").exists());
        assert!(!root.join("x/c.json").exists());
        assert!(backend.delete_many(&[]).is_empty());
    }

    #[test]
    fn a_write_removes_stale_temporary_files_and_keeps_fresh_ones() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("plans")).unwrap();
        let stale = root.join("plans/.mnemon-killed.tmp");
        let fresh = root.join("plans/.mnemon-running.tmp");
        let other = root.join("plans/.other.tmp");
        for path in [&stale, &fresh, &other] {
            fs::write(path, b"partial content").unwrap();
        }
        let long_ago = SystemTime::now() - STALE_TEMP_AGE - Duration::from_secs(60);
        for path in [&stale, &other] {
            fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(long_ago)
                .unwrap();
        }
        let backend = WriteToFile::new(&root);
        backend
            .write("plans/plan.txt", &Value::String("done".into()))
            .unwrap();
        assert!(!stale.exists(), "a killed save's temporary file is removed");
        assert!(fresh.exists(), "a running save's temporary file is kept");
        assert!(other.exists(), "files that are not ours are kept");
        assert_eq!(
            fs::read_to_string(root.join("plans/plan.txt")).unwrap(),
            "done"
        );
    }

    #[test]
    fn overwrite_replaces_and_leaves_no_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let backend = WriteToFile::new(dir.path());
        backend
            .write("f.txt", &Value::String("one".into()))
            .unwrap();
        backend
            .write("f.txt", &Value::String("two".into()))
            .unwrap();
        assert_eq!(fs::read_to_string(dir.path().join("f.txt")).unwrap(), "two");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f.txt"]);
    }

    #[test]
    fn read_and_delete_of_missing_content() {
        let dir = tempfile::tempdir().unwrap();
        let backend = WriteToFile::new(dir.path().join("never-created"));
        assert!(matches!(
            backend.read("x/y.txt"),
            Err(ArtifactError::ContentNotFound { .. })
        ));
        assert!(!backend.delete("x/y.txt").unwrap());
        backend
            .write("x/y.txt", &Value::String("1".into()))
            .unwrap();
        assert!(backend.delete("x/y.txt").unwrap());
        assert!(!backend.delete("x/y.txt").unwrap());
    }

    proptest! {
        #[test]
        fn splitting_never_panics_and_never_yields_dot_dot(id in "\\PC{0,64}") {
            if let Ok((dirs, file)) = split_storage_id(&id) {
                prop_assert!(dirs.iter().chain(std::iter::once(&file)).all(|s| *s != ".." && !s.is_empty()));
            }
        }

        #[test]
        fn path_like_ids_never_escape(id in "(\\.\\.|\\.|a|/|b\\.txt){1,8}") {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().join("root");
            let backend = WriteToFile::new(&root);
            if backend.write(&id, &Value::String("x".into())).is_ok() {
                let written = backend.path_of(&id).unwrap();
                prop_assert!(written.starts_with(fs::canonicalize(&root).unwrap()));
            }
            let outside: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
            prop_assert!(outside.iter().all(|n| n == "root"), "{:?}", outside);
        }
    }
}
