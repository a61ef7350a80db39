//! Finding the files to import and the URL each one's bits get.

use std::path::{Component, Path, PathBuf};

use crate::error::ImportError;

/// File extensions picked up when walking a directory (compared case-insensitively).
pub const EXTENSIONS: &[&str] = &["md", "markdown", "txt", "text"];

/// One file to import and the URL its bits get (`info.url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Where the file is read from.
    pub path: PathBuf,
    /// The URL recorded in its bits.
    pub url: String,
}

/// The files named by `inputs`, in order, each with its bit URL.
///
/// A file is taken whatever its extension. A directory is walked recursively for files with
/// one of the [`EXTENSIONS`] (case-insensitively), in sorted order, skipping hidden entries
/// (names starting with `.`) and not following symbolic links to directories.
///
/// A bit's URL is `url_prefix` followed by the file's path relative to the directory named
/// (for a file named directly: its file name), with `/` separators; without a prefix it is the
/// file's path as found, with single `/` separators.
///
/// Fails with [`ImportError::Read`] for an input that cannot be read,
/// [`ImportError::NotAFile`] for one that is neither a regular file nor a directory,
/// [`ImportError::DuplicateUrl`] when two files would be cited by one URL, and
/// [`ImportError::NoFiles`] when nothing is found.
pub fn find_sources(
    inputs: &[impl AsRef<Path>],
    url_prefix: Option<&str>,
) -> Result<Vec<Source>, ImportError> {
    let mut sources = Vec::new();
    // Each URL's position in `sources`: two files cited alike are refused.
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for input in inputs {
        let input = input.as_ref();
        let meta = std::fs::metadata(input).map_err(|source| ImportError::Read {
            path: input.to_path_buf(),
            source,
        })?;
        let files = if meta.is_dir() {
            let mut found = Vec::new();
            walk(input, Path::new(""), &mut found)?;
            found
        } else if !meta.is_file() {
            return Err(ImportError::NotAFile {
                path: input.to_path_buf(),
            });
        } else {
            let name = input.file_name().map(PathBuf::from).unwrap_or_default();
            vec![(input.to_path_buf(), name)]
        };
        for (path, relative) in files {
            let url = match url_prefix {
                Some(prefix) => format!("{prefix}{}", slash_path(&relative)),
                None => slash_path(&path),
            };
            if let Some(&first) = seen.get(url.as_str()) {
                let first = sources
                    .get(first)
                    .map(|s: &Source| s.path.clone())
                    .unwrap_or_default();
                // The same file named twice (a folder and a file in it) is imported once.
                if same_file(&first, &path) {
                    continue;
                }
                return Err(ImportError::DuplicateUrl {
                    url,
                    first,
                    second: path,
                });
            }
            seen.insert(url.clone(), sources.len());
            sources.push(Source { path, url });
        }
    }
    if sources.is_empty() {
        return Err(ImportError::NoFiles);
    }
    Ok(sources)
}

/// Whether two paths name one file (after resolving `.`, `..` and links); paths that cannot be
/// resolved are compared as written.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Appends the importable files under `dir` (sorted, hidden entries and directory symlinks
/// skipped) with their paths relative to the walk's root.
fn walk(dir: &Path, relative: &Path, out: &mut Vec<(PathBuf, PathBuf)>) -> Result<(), ImportError> {
    let read_error = |source| ImportError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut entries = std::fs::read_dir(dir)
        .map_err(read_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_error)?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type().map_err(|source| ImportError::Read {
            path: path.clone(),
            source,
        })?;
        if kind.is_dir() {
            walk(&path, &relative.join(&name), out)?;
        } else if path.is_file() && has_text_extension(&path) {
            out.push((path, relative.join(&name)));
        }
    }
    Ok(())
}

/// Whether the path ends in one of the [`EXTENSIONS`].
pub(crate) fn has_text_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

/// Whether the path is a Markdown file (`.md`, `.markdown`), whose title and front matter are
/// read.
pub(crate) fn is_markdown(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("md") || e.eq_ignore_ascii_case("markdown"))
}

/// The path with `/` separators whatever the platform (`/abs/path`, `rel/path`), for bit URLs.
fn slash_path(path: &Path) -> String {
    let mut out = String::new();
    for component in path.components() {
        match component {
            Component::RootDir => out.push('/'),
            Component::CurDir => {}
            other => {
                if !out.is_empty() && !out.ends_with('/') {
                    out.push('/');
                }
                out.push_str(&other.as_os_str().to_string_lossy());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash_paths_have_single_separators() {
        assert_eq!(slash_path(Path::new("/work/docs/a.md")), "/work/docs/a.md");
        assert_eq!(slash_path(Path::new("./docs/a.md")), "docs/a.md");
        assert_eq!(slash_path(Path::new("docs//a.md")), "docs/a.md");
        assert_eq!(slash_path(Path::new("../a.md")), "../a.md");
    }

    #[test]
    fn extensions_are_matched_case_insensitively() {
        assert!(has_text_extension(Path::new("a/B.MD")));
        assert!(has_text_extension(Path::new("notes.txt")));
        assert!(!has_text_extension(Path::new("image.png")));
        assert!(!has_text_extension(Path::new("README")));
        assert!(is_markdown(Path::new("x.Markdown")));
        assert!(!is_markdown(Path::new("x.txt")));
    }

    /// Two files cited by one URL are refused, naming both: before, their bits carried the
    /// same URL and a citation could not say which file it came from.
    #[test]
    fn two_files_cited_alike_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for folder in ["v1", "v2"] {
            std::fs::create_dir_all(root.join(folder)).unwrap();
            std::fs::write(root.join(folder).join("index.md"), "text").unwrap();
        }
        let error =
            find_sources(&[root.join("v1"), root.join("v2")], Some("https://x/")).unwrap_err();
        let ImportError::DuplicateUrl { url, first, second } = &error else {
            panic!("{error}")
        };
        assert_eq!(url, "https://x/index.md");
        assert_eq!(first, &root.join("v1/index.md"));
        assert_eq!(second, &root.join("v2/index.md"));
        assert!(error.is_input());
        // The same file named twice (its folder, then itself) is taken once.
        let once = find_sources(
            &[root.join("v1"), root.join("v1/index.md")],
            Some("https://x/"),
        )
        .unwrap();
        assert_eq!(once.len(), 1);
        // Without a prefix each is cited by its own path.
        assert_eq!(
            find_sources(&[root.join("v1"), root.join("v2")], None)
                .unwrap()
                .len(),
            2
        );
    }

    /// A device named directly is refused, not read: `/dev/zero` would never end.
    #[cfg(unix)]
    #[test]
    fn a_device_is_not_a_file_to_import() {
        let error = find_sources(&["/dev/zero"], None).unwrap_err();
        assert!(matches!(error, ImportError::NotAFile { .. }), "{error}");
        assert!(error.to_string().contains("/dev/zero"), "{error}");
    }

    #[test]
    fn walks_sorted_skipping_hidden_and_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("b/.hidden")).unwrap();
        std::fs::write(root.join("b/z.txt"), "z").unwrap();
        std::fs::write(root.join("b/.hidden/h.md"), "h").unwrap();
        std::fs::write(root.join("a.MD"), "a").unwrap();
        std::fs::write(root.join(".dot.md"), "d").unwrap();
        std::fs::write(root.join("c.png"), "c").unwrap();
        let found = find_sources(&[root], Some("https://x.example/")).unwrap();
        let urls: Vec<&str> = found.iter().map(|s| s.url.as_str()).collect();
        assert_eq!(
            urls,
            ["https://x.example/a.MD", "https://x.example/b/z.txt"]
        );
        assert_eq!(found[1].path, root.join("b/z.txt"));

        // A file named directly is taken whatever its extension; its URL is its file name.
        let png = find_sources(&[root.join("c.png")], Some("p/")).unwrap();
        assert_eq!(png[0].url, "p/c.png");

        let empty = root.join("b/.hidden");
        assert!(matches!(
            find_sources(&[root.join("nothing-here")], None),
            Err(ImportError::Read { .. })
        ));
        std::fs::remove_file(empty.join("h.md")).unwrap();
        let err = find_sources(&[empty], None).unwrap_err();
        assert!(matches!(err, ImportError::NoFiles));
        assert!(err.is_input());
    }
}
