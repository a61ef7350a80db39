//! Errors that stop the host from starting or reloading.
//!
//! Each message is complete on its own (it includes the underlying error's text), so the inner
//! errors are not also exposed as `source()`: error reporters that walk the chain would print
//! them twice.

use std::net::SocketAddr;

/// Why the host could not start, load its libraries or reload them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// A library file or directory could not be loaded.
    #[error("cannot load the library {source_name}: {}", .error.located())]
    Library {
        /// The file, directory or embedded library that failed.
        source_name: String,
        /// What is wrong with it.
        error: mnemon_library::LibraryError,
    },
    /// The host config could not be read or has a value of the wrong type.
    #[error("{0}")]
    Config(mnemon_library::LibraryError),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {error} (is another server using the port? try --addr)")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// Serving failed (accepting connections, installing signal handlers).
    #[error("the server failed: {0}")]
    Io(std::io::Error),
    /// A load ran on a worker thread that panicked.
    #[error("loading the libraries panicked; this is a bug in mnemon")]
    LoaderPanicked,
}

impl From<std::io::Error> for HostError {
    fn from(error: std::io::Error) -> Self {
        HostError::Io(error)
    }
}
