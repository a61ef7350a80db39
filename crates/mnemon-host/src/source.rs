//! Where the served library and the host config come from, and loading them into a snapshot.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use mnemon_library::{AccessPolicy, IndexState, IndexUse, Library};
use serde_json::Value;

use crate::error::HostError;

/// The library a host serves (docs/reference/host.md#serving-libraries). Kept by the host so that a
/// reload reads it again.
#[derive(Clone)]
pub enum LibrarySource {
    /// A library file, or a directory whose `*.json` files are merged in path order, with
    /// `access/<tag>/` path components tagging their files' bits. Which of the two is decided at
    /// every load.
    Path(PathBuf),
    /// A library held in memory (for example one compiled into the binary), under a name for
    /// messages and logs.
    Bytes {
        /// Shown in logs and errors.
        name: String,
        /// The library file's content.
        bytes: Arc<[u8]>,
    },
}

impl LibrarySource {
    /// A library held in memory under `name`.
    pub fn bytes(name: impl Into<String>, bytes: impl Into<Arc<[u8]>>) -> Self {
        LibrarySource::Bytes {
            name: name.into(),
            bytes: bytes.into(),
        }
    }

    /// Loads the library. Blocking: run it off the async executor.
    pub fn load(&self) -> Result<Library, HostError> {
        let fail = |error| HostError::Library {
            source_name: self.to_string(),
            error,
        };
        match self {
            LibrarySource::Path(path) if path.is_dir() => Library::open_dir(path).map_err(fail),
            LibrarySource::Path(path) => Library::open(path).map_err(fail),
            LibrarySource::Bytes { bytes, .. } => Library::from_bytes(bytes).map_err(fail),
        }
    }
}

impl fmt::Display for LibrarySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LibrarySource::Path(path) => write!(f, "{}", path.display()),
            LibrarySource::Bytes { name, .. } => f.write_str(name),
        }
    }
}

impl fmt::Debug for LibrarySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LibrarySource::Path(path) => f.debug_tuple("Path").field(path).finish(),
            LibrarySource::Bytes { name, bytes } => f
                .debug_struct("Bytes")
                .field("name", name)
                .field("len", &bytes.len())
                .finish(),
        }
    }
}

/// The host config (tokens and restriction details, the `host.SECRET.json` format,
/// docs/reference/host.md#host-config).
#[derive(Clone, Default)]
pub enum ConfigSource {
    /// No config: no tokens, restricted counts not reported, no message.
    #[default]
    Defaults,
    /// A config file, read again on every reload. A missing file is an error.
    File(PathBuf),
    /// A config already parsed.
    Value(Value),
}

impl ConfigSource {
    /// The config named on the command line, else `./host.SECRET.json` when it exists, else the
    /// defaults (docs/reference/host.md#host-config).
    pub fn discover(explicit: Option<PathBuf>) -> Self {
        match explicit {
            Some(path) => ConfigSource::File(path),
            None => {
                let local = PathBuf::from("host.SECRET.json");
                if local.is_file() {
                    ConfigSource::File(local)
                } else {
                    ConfigSource::Defaults
                }
            }
        }
    }

    /// Reads the access policy. Blocking when the config is a file.
    pub fn load(&self) -> Result<AccessPolicy, HostError> {
        match self {
            ConfigSource::Defaults => Ok(AccessPolicy::default()),
            ConfigSource::File(path) => {
                AccessPolicy::from_host_config_file(path).map_err(HostError::Config)
            }
            ConfigSource::Value(value) => {
                AccessPolicy::from_host_config(value).map_err(HostError::Config)
            }
        }
    }
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::Defaults => f.write_str("defaults"),
            ConfigSource::File(path) => write!(f, "{}", path.display()),
            ConfigSource::Value(_) => f.write_str("in-memory config"),
        }
    }
}

// Debug never prints a config's content: it holds access tokens.
impl fmt::Debug for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::Defaults => f.write_str("Defaults"),
            ConfigSource::File(path) => f.debug_tuple("File").field(path).finish(),
            ConfigSource::Value(_) => f.write_str("Value(..)"),
        }
    }
}

/// What the host serves: a library and its access policy, read together.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The library.
    pub library: LibrarySource,
    /// The host config.
    pub config: ConfigSource,
}

/// One loaded, immutable generation of the served data. Requests hold an `Arc` to the snapshot
/// they started with, so a reload never changes a query half-way.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub(crate) library: Library,
    pub(crate) policy: AccessPolicy,
}

impl Sources {
    /// Loads library and config. Blocking.
    pub(crate) fn load(&self) -> Result<Snapshot, HostError> {
        let policy = self.config.load()?;
        let library = self.library.load()?;
        Ok(Snapshot { library, policy })
    }

    /// Loads library and config, and verifies the library's approximate index when queries
    /// would use it (a library of at least `index.min_bits` bits), so the first query does not
    /// pay for reading the whole index (docs/reference/library.md#ann-index). Blocking.
    pub(crate) fn load_serving(&self, index: &IndexUse) -> Result<Snapshot, HostError> {
        #[cfg(test)]
        let _counted = loads_in_flight::enter(&self.library.to_string());
        let snapshot = self.load()?;
        let library = &snapshot.library;
        if library.len() >= index.min_bits {
            // A refusal is logged by the library, with its reason.
            if library.index_state() == IndexState::Ready {
                tracing::info!(
                    library = %self.library,
                    bits = library.len(),
                    "queries search the library's ANN index (`exact: true` scans)"
                );
            }
        }
        Ok(snapshot)
    }
}

/// How many loads of the library named [`loads_in_flight::COUNTED`] run at once, and the most
/// that ever did, with a gate that holds them until the test opens it: for the test that
/// reloads never load in parallel.
#[cfg(test)]
pub(crate) mod loads_in_flight {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Condvar, Mutex, PoisonError};

    /// The library name whose loads are counted and gated (other tests' loads are not).
    pub(crate) const COUNTED: &str = "counted-loads";
    static NOW: AtomicUsize = AtomicUsize::new(0);
    /// The most loads of [`COUNTED`] that ran at once.
    pub(crate) static PEAK: AtomicUsize = AtomicUsize::new(0);
    /// Whether loads of [`COUNTED`] may go on (closed until [`open`]).
    static GATE: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

    /// Lets every load of [`COUNTED`] go on, now and later.
    pub(crate) fn open() {
        *GATE.0.lock().unwrap_or_else(PoisonError::into_inner) = true;
        GATE.1.notify_all();
    }

    /// Counts one load while held; a load of [`COUNTED`] waits at the gate, counted.
    pub(crate) struct Counted(bool);

    pub(crate) fn enter(name: &str) -> Counted {
        let counted = name == COUNTED;
        if counted {
            let now = NOW.fetch_add(1, Ordering::SeqCst) + 1;
            PEAK.fetch_max(now, Ordering::SeqCst);
            let mut open = GATE.0.lock().unwrap_or_else(PoisonError::into_inner);
            while !*open {
                open = GATE.1.wait(open).unwrap_or_else(PoisonError::into_inner);
            }
        }
        Counted(counted)
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            if self.0 {
                NOW.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}
