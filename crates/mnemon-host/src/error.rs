//! Errors that stop the host from starting or reloading.

use std::net::SocketAddr;

/// Why the host could not start, load its libraries or reload them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// A library file or directory could not be loaded.
    #[error("cannot load the library {source_name}: {error}")]
    Library {
        /// The file, directory or embedded library that failed.
        source_name: String,
        /// What is wrong with it.
        #[source]
        error: mnemon_library::LibraryError,
    },
    /// The host config could not be read or has a value of the wrong type.
    #[error("{0}")]
    Config(#[source] mnemon_library::LibraryError),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {error} (is another server using the port? try --addr)")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's error.
        #[source]
        error: std::io::Error,
    },
    /// Serving failed (accepting connections, installing signal handlers).
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
    /// A load ran on a worker thread that panicked.
    #[error("loading the libraries panicked; this is a bug in mnemon")]
    LoaderPanicked,
}
