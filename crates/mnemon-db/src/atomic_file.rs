//! Replacing a file atomically and durably: the one helper every Mnemon component uses to write
//! a whole file (artifact content, library sidecars, imported libraries, memory exports).
//!
//! [`write_atomic`] streams the content into a temporary file in the target's directory, syncs
//! it, renames it over the target and syncs the directory. A reader (or a crash) sees the old
//! file or the new one, never a mixture; a writer that fails leaves neither the target changed
//! nor a temporary file behind.
//!
//! The temporary file is named `.mnemon-<random>.tmp` ([`TEMP_PREFIX`], [`TEMP_SUFFIX`]) and is
//! created with `O_EXCL` (by `tempfile`), so concurrent writes to one target never share a
//! temporary file, and a file or symbolic link planted under a predictable name is never opened
//! or followed. A process killed mid-write cannot remove its temporary file; the artifact
//! store's `write_to_file` backend sweeps old files of this pattern
//! (`mnemon_artifacts::STALE_TEMP_AGE`). The random part keeps the name short whatever the
//! target's name is, so a target name of the file system's maximum length still works.
//!
//! The rename replaces a symbolic link at the target itself rather than writing through it.
//!
//! ```
//! use std::io::Write;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("notes.txt");
//! let lines = mnemon_db::atomic_file::write_atomic(&path, |out| {
//!     for n in 0..3 {
//!         writeln!(out, "line {n}")?;
//!     }
//!     Ok::<_, std::io::Error>(3)
//! })?;
//! assert_eq!(lines, 3);
//! assert_eq!(std::fs::read_to_string(&path)?, "line 0\nline 1\nline 2\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

/// How every Mnemon temporary file name starts (a hidden file on Unix).
pub const TEMP_PREFIX: &str = ".mnemon-";

/// How every Mnemon temporary file name ends.
pub const TEMP_SUFFIX: &str = ".tmp";

/// The buffer between the writer and the temporary file. Large enough that a stream of small
/// writes (an export of hundreds of MB written entry by entry) costs few system calls; content
/// written in larger pieces bypasses it.
const WRITE_BUFFER: usize = 256 * 1024;

/// Whether `name` (a file name, without directories) has the pattern of a Mnemon temporary
/// file, `.mnemon-*.tmp`: what a sweep of leftovers from killed writes may remove.
pub fn is_temp_name(name: &str) -> bool {
    name.len() >= TEMP_PREFIX.len() + TEMP_SUFFIX.len()
        && name.starts_with(TEMP_PREFIX)
        && name.ends_with(TEMP_SUFFIX)
}

/// The writer [`write_atomic`] hands to its closure: a buffered temporary file. It can also
/// seek, for formats that write a header last (seeking flushes the buffer first).
pub struct AtomicWriter {
    inner: BufWriter<NamedTempFile>,
}

impl fmt::Debug for AtomicWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AtomicWriter")
            .field("temp", &self.inner.get_ref().path())
            .finish()
    }
}

impl Write for AtomicWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl Seek for AtomicWriter {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.inner.seek(pos)
    }
}

/// Which step of [`write_atomic`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AtomicStep {
    /// Creating the temporary file in the target's directory.
    CreateTemp,
    /// Flushing the buffered content and syncing the temporary file to disk.
    Sync,
    /// Renaming the temporary file over the target.
    Replace,
    /// Syncing the directory, which makes the rename itself durable.
    SyncDir,
}

impl AtomicStep {
    /// The step as a verb phrase that reads before a path: "create a temporary file in".
    pub fn action(self) -> &'static str {
        match self {
            AtomicStep::CreateTemp => "create a temporary file in",
            AtomicStep::Sync => "write",
            AtomicStep::Replace => "replace",
            AtomicStep::SyncDir => "sync the directory",
        }
    }
}

/// Why [`write_atomic`] could not put the new file in place. The target is unchanged and no
/// temporary file is left behind (except after [`AtomicStep::SyncDir`], where the new file is
/// already in place but the rename may not survive a power loss).
#[derive(Debug, thiserror::Error)]
#[error("cannot {} {}: {source}; {}", step.action(), path.display(), advice(*step))]
pub struct AtomicFileError {
    step: AtomicStep,
    path: PathBuf,
    #[source]
    source: io::Error,
}

fn advice(step: AtomicStep) -> &'static str {
    match step {
        AtomicStep::CreateTemp => {
            "check that the directory exists, that this user may write to it and that the disk \
             has space"
        }
        AtomicStep::Sync => "check that the disk has space and is healthy",
        AtomicStep::Replace => {
            "check that the target is not a directory and that this user may replace it"
        }
        AtomicStep::SyncDir => {
            "the new file is in place, but may not survive a power loss; check the file system"
        }
    }
}

impl AtomicFileError {
    /// The step that failed.
    pub fn step(&self) -> AtomicStep {
        self.step
    }

    /// The path involved: the directory for [`AtomicStep::CreateTemp`] and
    /// [`AtomicStep::SyncDir`], the target otherwise.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The operating system's error.
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }

    /// The operating system's error, for callers that wrap it in their own error type.
    pub fn into_io_error(self) -> io::Error {
        self.source
    }
}

impl From<AtomicFileError> for io::Error {
    /// Keeps the error kind and puts the step and path in the message.
    fn from(error: AtomicFileError) -> Self {
        io::Error::new(error.source.kind(), error.to_string())
    }
}

/// Why [`write_atomic`] failed: the closure's own error, or a file-system step.
#[derive(Debug)]
pub enum AtomicWriteError<E> {
    /// The closure returned this error; nothing was written at the target.
    Write(E),
    /// A file-system step failed.
    File(AtomicFileError),
}

impl<E> AtomicWriteError<E> {
    /// One error type for both cases: the closure's error as it is, a file-system error
    /// converted by `file`.
    pub fn unify(self, file: impl FnOnce(AtomicFileError) -> E) -> E {
        match self {
            AtomicWriteError::Write(error) => error,
            AtomicWriteError::File(error) => file(error),
        }
    }
}

impl<E: fmt::Display> fmt::Display for AtomicWriteError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AtomicWriteError::Write(error) => error.fmt(f),
            AtomicWriteError::File(error) => error.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for AtomicWriteError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // Each case's own message is shown, so the chain continues below it.
        match self {
            AtomicWriteError::Write(error) => error.source(),
            AtomicWriteError::File(error) => error.source(),
        }
    }
}

impl From<AtomicWriteError<io::Error>> for io::Error {
    fn from(error: AtomicWriteError<io::Error>) -> Self {
        error.unify(io::Error::from)
    }
}

/// Replaces the file at `path` with what `write` writes, atomically and durably, and returns
/// what `write` returned.
///
/// `write` receives a buffered temporary file in `path`'s directory and may write any amount in
/// any number of pieces: nothing is held in memory beyond the buffer. After `write` returns
/// `Ok`, the file is flushed and synced to disk, renamed over `path`, and the directory is
/// synced so that the rename survives a power loss. If `write` returns `Err` (or panics), or any
/// step before the rename fails, the temporary file is removed and `path` is untouched.
///
/// The new file's permissions are those of any newly created file (0666 less the umask on
/// Unix), not the replaced file's. The directory must exist. File systems that cannot sync a
/// directory at all (`EINVAL`, e.g. some network mounts) are accepted, since the file's data is
/// already synced.
pub fn write_atomic<T, E>(
    path: &Path,
    write: impl FnOnce(&mut AtomicWriter) -> Result<T, E>,
) -> Result<T, AtomicWriteError<E>> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(TEMP_PREFIX).suffix(TEMP_SUFFIX);
    // tempfile creates files 0600; ask for 0666 and let the umask narrow it, as `File::create`
    // would: these are ordinary documents.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let temp = builder
        .tempfile_in(&dir)
        .map_err(fail(AtomicStep::CreateTemp, &dir))?;
    let mut writer = AtomicWriter {
        inner: BufWriter::with_capacity(WRITE_BUFFER, temp),
    };
    // On any early return below, dropping the temporary file removes it.
    let result = write(&mut writer).map_err(AtomicWriteError::Write)?;
    let temp = writer
        .inner
        .into_inner()
        .map_err(|e| e.into_error())
        .map_err(fail(AtomicStep::Sync, path))?;
    temp.as_file()
        .sync_all()
        .map_err(fail(AtomicStep::Sync, path))?;
    // On failure `persist` hands the file back; dropping it removes the temporary file.
    temp.persist(path)
        .map_err(|e| e.error)
        .map_err(fail(AtomicStep::Replace, path))?;
    sync_dir(&dir).map_err(fail(AtomicStep::SyncDir, &dir))?;
    Ok(result)
}

/// The error-mapping closure for a file-system `step` on `path`.
fn fail<E>(step: AtomicStep, path: &Path) -> impl FnOnce(io::Error) -> AtomicWriteError<E> + '_ {
    move |source| {
        AtomicWriteError::File(AtomicFileError {
            step,
            path: path.to_path_buf(),
            source,
        })
    }
}

/// Makes a rename or removal in `dir` durable: fsyncs the directory. Only Unix can open a
/// directory as a file; on Windows, NTFS journals renames itself.
///
/// File systems that cannot fsync a directory (`EINVAL`, e.g. some network mounts) are
/// accepted: there is nothing more a program can do there.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    match std::fs::File::open(dir)?.sync_all() {
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => {}
        other => other?,
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::fs;

    /// The names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn writes_a_new_file_and_returns_the_writers_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        let n = write_atomic(&path, |out| {
            out.write_all(b"hello")?;
            Ok::<_, io::Error>(5)
        })
        .unwrap();
        assert_eq!(n, 5);
        assert_eq!(fs::read(&path).unwrap(), b"hello");
        assert_eq!(names(dir.path()), ["a.txt"]);
    }

    #[test]
    fn replaces_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        fs::write(&path, "old content, longer than the new").unwrap();
        write_atomic(&path, |out| out.write_all(b"new")).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(names(dir.path()), ["a.txt"]);
    }

    #[test]
    fn a_failing_writer_leaves_no_file_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        let err = write_atomic(&path, |out| {
            // More than the buffer, so part of it has reached the temporary file.
            out.write_all(&vec![b'x'; 3 * WRITE_BUFFER])?;
            Err::<(), _>(io::Error::other("the writer gave up"))
        })
        .unwrap_err();
        assert!(
            matches!(err, AtomicWriteError::Write(ref e) if e.to_string() == "the writer gave up")
        );
        assert!(!path.exists());
        assert_eq!(names(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn a_failing_writer_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        fs::write(&path, "old").unwrap();
        let err = write_atomic(&path, |out| {
            out.write_all(b"half of the new").map_err(|_| "write")?;
            Err::<(), _>("stop")
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "stop");
        assert_eq!(fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(names(dir.path()), ["a.txt"]);
    }

    #[test]
    fn a_panicking_writer_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        let outcome = std::panic::catch_unwind(|| {
            let _ = write_atomic(&path, |out| -> io::Result<()> {
                out.write_all(b"partial")?;
                panic!("writer panicked");
            });
        });
        assert!(outcome.is_err());
        assert_eq!(names(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn the_temporary_file_has_the_swept_pattern_and_sits_beside_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        write_atomic(&path, |out| {
            out.write_all(b"x")?;
            out.flush()?;
            let seen = names(dir.path());
            assert_eq!(seen.len(), 1, "{seen:?}");
            assert!(is_temp_name(&seen[0]), "{seen:?}");
            Ok::<_, io::Error>(())
        })
        .unwrap();
    }

    #[test]
    fn the_writer_can_seek_back_to_write_a_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        write_atomic(&path, |out| {
            out.write_all(&[0; 4])?;
            out.write_all(b"body")?;
            out.seek(SeekFrom::Start(0))?;
            out.write_all(b"HEAD")
        })
        .unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"HEADbody");
    }

    #[test]
    fn a_target_name_of_the_maximum_length_works() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n".repeat(255));
        write_atomic(&path, |out| out.write_all(b"x")).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"x");
    }

    #[test]
    fn a_missing_directory_is_reported_with_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let path = missing.join("a.txt");
        let mut called = false;
        let err = write_atomic(&path, |_| {
            called = true;
            Ok::<_, io::Error>(())
        })
        .unwrap_err();
        assert!(!called);
        let AtomicWriteError::File(err) = err else {
            panic!("expected a file error, got {err:?}")
        };
        assert_eq!(err.step(), AtomicStep::CreateTemp);
        assert_eq!(err.path(), missing);
        assert_eq!(err.io_error().kind(), io::ErrorKind::NotFound);
        let message = err.to_string();
        assert!(message.contains("create a temporary file in"), "{message}");
        assert!(
            message.contains("check that the directory exists"),
            "{message}"
        );
    }

    #[test]
    fn a_directory_at_the_target_is_not_replaced_and_no_temporary_file_remains() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("keep"), "kept").unwrap();
        let err = write_atomic(&path, |out| out.write_all(b"x")).unwrap_err();
        let AtomicWriteError::File(err) = err else {
            panic!("expected a file error, got {err:?}")
        };
        assert_eq!(err.step(), AtomicStep::Replace);
        assert_eq!(err.path(), path);
        assert_eq!(names(dir.path()), ["sub"]);
        assert_eq!(fs::read_to_string(path.join("keep")).unwrap(), "kept");
    }

    #[cfg(unix)]
    #[test]
    fn the_new_file_gets_ordinary_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        write_atomic(&path, |out| out.write_all(b"x")).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        // What `File::create` gives under this process's umask; tempfile's own default, 0600,
        // would differ under the usual umasks (022, 002).
        let probe = dir.path().join("probe");
        fs::File::create(&probe).unwrap();
        let expected = fs::metadata(&probe).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, expected);
    }

    #[test]
    fn io_error_conversion_keeps_kind_and_names_the_step() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("a.txt");
        let err: io::Error = write_atomic(&path, |out| out.write_all(b"x"))
            .unwrap_err()
            .into();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(
            err.to_string().contains("create a temporary file in"),
            "{err}"
        );
    }

    #[test]
    fn temp_name_pattern() {
        assert!(is_temp_name(".mnemon-abc123.tmp"));
        assert!(is_temp_name(".mnemon-.tmp"));
        assert!(!is_temp_name(".mnemon.tmp"));
        assert!(!is_temp_name(".other.tmp"));
        assert!(!is_temp_name(".mnemon-abc"));
        assert!(!is_temp_name("mnemon-abc.tmp"));
    }

    proptest! {
        /// Whatever is written in whatever pieces is what the file holds.
        #[test]
        fn content_written_in_pieces_is_the_file(
            pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..2048), 0..16),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            write_atomic(&path, |out| {
                for piece in &pieces {
                    out.write_all(piece)?;
                }
                Ok::<_, io::Error>(())
            })
            .unwrap();
            prop_assert_eq!(fs::read(&path).unwrap(), pieces.concat());
            prop_assert_eq!(names(dir.path()), ["f"]);
        }
    }
}
