//! The approximate index beside a library file (docs/reference/library.md#ann-index):
//! `<file>.ann` (or `<dir>/.library.ann` for a directory served as one library), an HNSW graph over int8 codes of the library's vectors ([`mnemon_ann`]),
//! written by [`crate::Library::pack_index`] and memory-mapped when the library opens.
//!
//! It is tied to the library's content, not to file dates: before the first query uses it, the
//! whole file is verified (every checksum) and its recorded fingerprint of the vectors is
//! compared with the [`mnemon_ann::fingerprint`] of the vectors the library holds now, however
//! they were loaded (the JSON or the sidecar). A damaged, truncated or stale index is never
//! used: the library logs a warning once and its queries scan exactly.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use memmap2::Mmap;
use mnemon_ann::{IndexBytes, IndexView, OpenOptions, Verified, Verify};
use mnemon_vector::MatrixView;

use crate::storage::Backing;

/// The name of a served directory's index, inside it: the leading dot keeps
/// [`crate::Library::open_dir`] from reading it as a library.
pub const DIR_INDEX_NAME: &str = ".library.ann";

/// The index path for a library: `<file>.ann` beside a file, and [`DIR_INDEX_NAME`] inside a
/// directory served as one library (docs/reference/library.md#ann-index), so that the index
/// moves with the directory it was built over.
pub fn index_path(library: &Path) -> PathBuf {
    if library.is_dir() {
        return library.join(DIR_INDEX_NAME);
    }
    let mut s = library.as_os_str().to_owned();
    s.push(".ann");
    PathBuf::from(s)
}

/// The index's bytes: a guarded read-only map, or a private aligned copy where no guard is
/// available (see [`crate::guard`]).
enum Bytes {
    Mapped(Mmap),
    Owned(IndexBytes),
}

/// An index file opened beside a library, verified on first use.
pub(crate) struct AnnFile {
    /// The index file, for messages.
    path: PathBuf,
    /// The mapped file and its guard. Declared first so that it is dropped first: the guard
    /// must be unregistered before the map is unmapped.
    backing: Option<Backing>,
    bytes: Bytes,
    /// The outcome of the one full verification: what a re-view needs, or why the index is
    /// not used.
    state: OnceLock<Result<Verified, String>>,
}

impl AnnFile {
    /// Opens the index of `library` (a file or a served directory, see [`index_path`]) when it
    /// exists; `None` (with a warning when one was found but could not be read) otherwise.
    /// Nothing is verified here: [`AnnFile::view`] verifies.
    pub(crate) fn open_beside(library: &Path) -> Option<AnnFile> {
        if cfg!(target_endian = "big") {
            return None;
        }
        let path = index_path(library);
        if !path.is_file() {
            return None;
        }
        match Self::open(&path) {
            Ok(file) => Some(file),
            Err(error) => {
                tracing::warn!(
                    "cannot read the ANN index {} ({error}): queries scan exactly; rebuild it with `mnemon library pack --index`",
                    path.display()
                );
                None
            }
        }
    }

    fn open(path: &Path) -> std::io::Result<AnnFile> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        if meta.len() == 0 {
            return Ok(AnnFile::owned(path, IndexBytes::copy_from(&[])));
        }
        // SAFETY: a read-only private map. The file may be truncated or rewritten in place while
        // mapped: the guard turns the SIGBUS into zero pages plus a flag, and `Backing::check`
        // (before and after every indexed query) drops to the exact scan once the flag is set or
        // the file's size or mtime changed (crate::guard).
        let map = unsafe { Mmap::map(&file) }?;
        match crate::guard::register(map.as_ptr(), map.len()) {
            Some(guard) => Ok(AnnFile {
                path: path.to_path_buf(),
                backing: Some(Backing {
                    path: path.to_path_buf(),
                    len: meta.len(),
                    mtime: meta.modified().ok(),
                    file,
                    guard: Some(guard),
                }),
                bytes: Bytes::Mapped(map),
                state: OnceLock::new(),
            }),
            None => {
                drop(map);
                let bytes = IndexBytes::copy_from(&std::fs::read(path)?);
                Ok(AnnFile::owned(path, bytes))
            }
        }
    }

    /// An index held in memory (a private copy of the file).
    fn owned(path: &Path, bytes: IndexBytes) -> AnnFile {
        AnnFile {
            path: path.to_path_buf(),
            backing: None,
            bytes: Bytes::Owned(bytes),
            state: OnceLock::new(),
        }
    }

    fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Mapped(map) => map,
            Bytes::Owned(bytes) => bytes.as_bytes(),
        }
    }

    /// Whether the mapped file changed under the map (then nothing read from it is trusted).
    pub(crate) fn changed(&self) -> Option<String> {
        let backing = self.backing.as_ref()?;
        backing.check().err().map(|e| e.to_string())
    }

    /// Verifies the index over `vectors` once (every checksum and the vectors' fingerprint,
    /// which reads the whole index and every vector), logging why when it is refused.
    pub(crate) fn verify(&self, vectors: MatrixView<'_>) -> Result<(), String> {
        self.state
            .get_or_init(|| {
                let options = OpenOptions {
                    verify: Verify::Full,
                    expected_fingerprint: Some(mnemon_ann::fingerprint(vectors)),
                };
                let outcome = IndexView::open(self.bytes(), vectors, &options)
                    .map(|view| view.verified())
                    .map_err(|e| e.to_string())
                    .and_then(|verified| match self.changed() {
                        Some(changed) => Err(changed),
                        None => Ok(verified),
                    });
                if let Err(why) = &outcome {
                    tracing::warn!(
                        "not using the ANN index {}: {why}; queries on this library scan exactly",
                        self.path.display()
                    );
                }
                outcome
            })
            .as_ref()
            .map(|_| ())
            .map_err(Clone::clone)
    }

    /// Whether verification already refused the index.
    pub(crate) fn refused(&self) -> bool {
        matches!(self.state.get(), Some(Err(_)))
    }

    /// Why verification refused the index, once it did.
    pub(crate) fn refusal(&self) -> Option<&str> {
        match self.state.get() {
            Some(Err(why)) => Some(why),
            _ => None,
        }
    }

    /// A view of the verified index over `vectors` (the vectors it was verified over), or why
    /// there is none.
    pub(crate) fn view<'a>(&'a self, vectors: MatrixView<'a>) -> Result<IndexView<'a>, String> {
        self.verify(vectors)?;
        let Some(Ok(verified)) = self.state.get() else {
            return Err("not verified".into());
        };
        if let Some(changed) = self.changed() {
            return Err(changed);
        }
        IndexView::reopen(self.bytes(), vectors, verified).map_err(|e| e.to_string())
    }

    /// The index file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}
