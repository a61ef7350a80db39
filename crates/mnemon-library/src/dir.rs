//! Serving a directory of library files as one library (docs/reference/host.md#serving-libraries).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::error::{LibraryError, Result};
use crate::library::{Library, OpenOptions};

impl Library {
    /// Loads every regular `*.json` file under `dir` (recursively, skipping names that start with
    /// `.`, following symlinks without looping), in path order compared component-wise by bytes,
    /// and extends them into one library with the model of the first file that has bits (files
    /// without bits are skipped: their stored `omit` would otherwise apply to every later
    /// file). A file under
    /// `access/<tag>/` gets `<tag>` on every bit (see [`crate::tag_from_path`]). Across files the first copy of an id wins. An
    /// error in one file is [`LibraryError::InFile`], whose message names the file. The
    /// directory's approximate index (`<dir>/.library.ann`, written by
    /// [`Library::pack_index`] of the directory) is opened with it.
    pub fn open_dir(dir: impl AsRef<Path>) -> Result<Library> {
        let dir = dir.as_ref();
        let mut merged: Option<Library> = None;
        // The model of the first file without bits, for a directory of nothing else.
        let mut empty_model: Option<String> = None;
        for rel in dir_files(dir)? {
            let path = dir.join(&rel);
            // Name the file in the error: with many files, the message alone would not say
            // which one to fix. I/O errors already name it.
            let in_file = |error: LibraryError| match error {
                io @ LibraryError::Io { .. } => io,
                error => LibraryError::InFile {
                    path: path.display().to_string(),
                    error: Box::new(error),
                },
            };
            // The tag comes from the path under the served directory; failing that, from the
            // whole path as `open_with` derives it for any file (`access/<tag>/` above the
            // served directory tags every file in it).
            let lib = Library::open_with(&path, &OpenOptions::for_relative_path(&rel))
                .map_err(in_file)?;
            // A file without bits adds nothing, and its stored `omit` must not apply to the
            // other files: `extend` adopts it, and a saved `omit: "*"` result (an empty, valid
            // library) would then drop every file after it, silently.
            if lib.is_empty() {
                empty_model.get_or_insert_with(|| lib.model().to_owned());
                continue;
            }
            let target = merged.get_or_insert_with(|| Library::blank(lib.model()));
            // In place: on an error the merged library is dropped anyway.
            target.append_from(&lib).map_err(in_file)?;
        }
        let mut merged = merged
            .or_else(|| empty_model.map(|model| Library::blank(&model)))
            .ok_or(LibraryError::NoLibraries)?;
        // The merged vectors exist only in memory, so their index lives in the directory
        // (`<dir>/.library.ann`); it is verified against the merged vectors on first use, so an
        // index built before a file was added, removed or changed is refused, never trusted.
        merged.ann = crate::ann::AnnFile::open_beside(dir);
        Ok(merged)
    }
}

/// The library files [`Library::open_dir`] reads from `dir`, relative to it, in the order it
/// merges them: every regular `*.json` file under `dir` (recursively, skipping names that start
/// with `.`, following symlinks without looping), sorted component-wise by bytes. For tools that
/// treat each file on its own, such as packing their sidecars.
pub fn dir_files(dir: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut seen = HashSet::new();
    collect(dir.as_ref(), Path::new(""), &mut files, &mut seen)?;
    files.sort_by(|a, b| {
        let ca = a
            .components()
            .map(|c| c.as_os_str().as_encoded_bytes().to_vec());
        let cb = b
            .components()
            .map(|c| c.as_os_str().as_encoded_bytes().to_vec());
        ca.cmp(cb)
    });
    Ok(files)
}

fn collect(
    root: &Path,
    rel: &Path,
    out: &mut Vec<PathBuf>,
    seen: &mut HashSet<PathBuf>,
) -> Result<()> {
    let here = root.join(rel);
    let canonical = here
        .canonicalize()
        .map_err(|e| LibraryError::io(&here, e))?;
    if !seen.insert(canonical) {
        return Ok(());
    }
    let entries = std::fs::read_dir(&here).map_err(|e| LibraryError::io(&here, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| LibraryError::io(&here, e))?;
        let name = entry.file_name();
        if name.as_encoded_bytes().first() == Some(&b'.') {
            continue;
        }
        let path = entry.path();
        let child = rel.join(&name);
        // `metadata` follows symlinks.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            collect(root, &child, out, seen)?;
        } else if meta.is_file() && path.extension().is_some_and(|e| e == "json") {
            out.push(child);
        }
    }
    Ok(())
}
