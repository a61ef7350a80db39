//! One value per database file and process, alive while anything holds it: the checkpointer
//! thread of a file (`checkpointer.rs`) and the queue of its writers (`write_queue.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

/// The live values of one kind, by canonical file path. Meant for a `static`.
pub(crate) struct PerFile<T> {
    live: OnceLock<Mutex<HashMap<PathBuf, Weak<T>>>>,
}

impl<T> PerFile<T> {
    /// None yet.
    pub(crate) const fn new() -> PerFile<T> {
        PerFile {
            live: OnceLock::new(),
        }
    }

    /// The value of the file at `path`: the live one, or `make(canonical path)` kept until its
    /// last holder drops it. One file reached by two spellings has one value once it exists.
    pub(crate) fn get(&self, path: &Path, make: impl FnOnce(PathBuf) -> T) -> Arc<T> {
        let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let mut live = self
            .live
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(existing) = live.get(&key).and_then(Weak::upgrade) {
            return existing;
        }
        live.retain(|_, weak| weak.strong_count() > 0);
        let value = Arc::new(make(key.clone()));
        live.insert(key, Arc::downgrade(&value));
        value
    }
}
