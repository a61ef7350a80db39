//! What can go wrong during an import, split into the reader's mistakes and everything else.

use std::path::PathBuf;

use mnemon_library::LibraryError;
use mnemon_types::{ContractError, EmbedError};

/// Why an import failed.
///
/// [`ImportError::is_input`] tells the two kinds apart: the input's fault (a path that cannot
/// be read, a file that is not UTF-8, nothing to import, options that make no sense), which the
/// person running the import fixes, and failures of the embedder, the library or the disk
/// while building and saving.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// An input path (file or directory) cannot be read or inspected.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A file to import is not UTF-8 text.
    #[error("{} is not UTF-8 text; convert it to UTF-8 or leave it out", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
    },
    /// The inputs name no importable file.
    #[error("no files to import: the directories hold no .md, .markdown, .txt or .text files")]
    NoFiles,
    /// An input named directly is neither a regular file nor a directory (a device, a FIFO, a
    /// socket), which would be read without end or block.
    #[error("{} is not a regular file or a directory; name text files or folders of them", path.display())]
    NotAFile {
        /// The input.
        path: PathBuf,
    },
    /// A file is larger than an import reads ([`MAX_FILE_BYTES`](crate::MAX_FILE_BYTES)).
    #[error(
        "{} is larger than {max} bytes, the most an import reads of one file; split it into \
         smaller files",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        max: u64,
    },
    /// Two files would give their bits the same URL, so a cited bit could not say which file
    /// it came from.
    #[error(
        "{} and {} would both be cited as {url}; import them separately or under different \
         --url-prefix values",
        first.display(),
        second.display()
    )]
    DuplicateUrl {
        /// The URL.
        url: String,
        /// The file found first.
        first: PathBuf,
        /// The file found second.
        second: PathBuf,
    },
    /// Every file is empty or only whitespace: the library would have no bits.
    #[error("the files hold no text to import (every one is empty or only whitespace)")]
    NoText,
    /// The options cannot produce a library.
    #[error("invalid import options: {0}")]
    Options(&'static str),
    /// The embedder returned an error.
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// The embedder's answer broke the [`Embedder`](mnemon_types::Embedder) contract.
    #[error("the embedder {model} broke its contract: {source}")]
    EmbedderContract {
        /// The embedder's model name.
        model: String,
        /// What was wrong with the answer.
        source: ContractError,
    },
    /// The library refused a bit (it cannot, for bits this crate builds, unless the embedder's
    /// dimension changed between batches, which the contract check catches first).
    #[error(transparent)]
    Library(#[from] LibraryError),
    /// The library file could not be written; the target is unchanged.
    #[error("cannot write {}: {source}", path.display())]
    Save {
        /// The library file (or, when creating it failed, the folder it goes in).
        path: PathBuf,
        /// The reason, with the step that failed.
        source: std::io::Error,
    },
}

impl ImportError {
    /// Whether the input is at fault (unreadable paths, non-UTF-8 files, nothing to import,
    /// bad options) rather than the embedder, the library or the disk it is saved to. The
    /// `mnemon` CLI exits with 2 for these and 1 for the rest.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            ImportError::Read { .. }
                | ImportError::NotUtf8 { .. }
                | ImportError::NoFiles
                | ImportError::NotAFile { .. }
                | ImportError::TooLarge { .. }
                | ImportError::DuplicateUrl { .. }
                | ImportError::NoText
                | ImportError::Options(_)
        )
    }
}
