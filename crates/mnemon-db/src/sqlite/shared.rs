//! Connections shared by every store handle of a process on one database file.
//!
//! A server opens a handle of each store per namespace (tenant), all on one file. With
//! connections of its own, each handle cost file descriptors (two for each connection: the
//! database and its WAL) and a page cache, so the tenants a server could hold open were bounded
//! by its file-descriptor limit: with the common soft limit of 1,024, `mnemon serve` refused
//! every namespace past the 166th. Nothing of a namespace lives in a connection (every statement
//! binds its namespace), so handles share them: each store keeps a [`Shared`] of its own kind
//! (the asset store's writer and readers, the artifact store's, the memory store's group commit,
//! readers and caches), and an open namespace costs no connection.
//!
//! Handles share only when they agree on the terms the connections were opened with (the
//! [`Settings`](super::Settings), and whatever else a store's connections depend on); a store
//! opened read-only keeps its own (it may carry a temporary view over an older file).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

type Registry<K, T> = HashMap<PathBuf, Vec<(K, Weak<T>)>>;

/// The live values of one kind, one per database file and terms `K`, alive while a handle
/// holds them. Meant for a `static`.
///
/// ```
/// use mnemon_db::sqlite::Shared;
///
/// struct Connections(u32);
/// static SHARED: Shared<u8, Connections> = Shared::new();
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("a.sqlite3");
/// let first = SHARED.get_or_open(&path, 1, || Ok::<_, std::io::Error>(Connections(7)))?;
/// let again = SHARED.get_or_open(&path, 1, || Ok::<_, std::io::Error>(Connections(8)))?;
/// assert_eq!(again.0, 7); // the live one
/// let other_terms = SHARED.get_or_open(&path, 2, || Ok::<_, std::io::Error>(Connections(9)))?;
/// assert_eq!(other_terms.0, 9);
/// drop((first, again));
/// let fresh = SHARED.get_or_open(&path, 1, || Ok::<_, std::io::Error>(Connections(10)))?;
/// assert_eq!(fresh.0, 10); // the last holder dropped the first
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Shared<K, T> {
    live: OnceLock<Mutex<Registry<K, T>>>,
}

impl<K, T> std::fmt::Debug for Shared<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl<K, T> Default for Shared<K, T> {
    fn default() -> Self {
        Shared::new()
    }
}

impl<K, T> Shared<K, T> {
    /// None yet.
    pub const fn new() -> Shared<K, T> {
        Shared {
            live: OnceLock::new(),
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry<K, T>> {
        self.live
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: PartialEq, T> Shared<K, T> {
    /// The value of the file at `path` for `terms`: a live one, or the one `open` makes, kept
    /// until its last holder drops it. One file reached by two spellings shares once it
    /// exists.
    ///
    /// `open` runs outside the registry's lock (opening may wait for another process's
    /// migration, and other files' handles must not wait for it), so two first handles opening
    /// at the same moment may each make their own; they work as before, apart.
    pub fn get_or_open<E>(
        &self,
        path: &Path,
        terms: K,
        open: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        let live = self.registry().get(&key(path)).and_then(|shared| {
            shared
                .iter()
                .filter(|(t, _)| *t == terms)
                .find_map(|(_, weak)| weak.upgrade())
        });
        if let Some(shared) = live {
            return Ok(shared);
        }
        let value = Arc::new(open()?);
        // The file exists now: its canonical path is its key.
        let key = key(path);
        let mut registry = self.registry();
        registry.retain(|_, shared| {
            shared.retain(|(_, weak)| weak.strong_count() > 0);
            !shared.is_empty()
        });
        registry
            .entry(key)
            .or_default()
            .push((terms, Arc::downgrade(&value)));
        Ok(value)
    }
}

/// The file's registry key: its canonical path once it exists, so that two spellings share.
fn key(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two spellings of one file share; another file or other terms do not; a value nobody
    /// holds is not handed out again.
    #[test]
    fn values_are_shared_per_file_and_terms_while_held() {
        static SHARED: Shared<u8, String> = Shared::new();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite3");
        std::fs::write(&path, b"").unwrap();
        let spelled = dir.path().join(".").join("a.sqlite3");
        let open = |s: &str| {
            let s = s.to_owned();
            move || Ok::<_, ()>(s)
        };
        let a = SHARED.get_or_open(&path, 0, open("a")).unwrap();
        let b = SHARED.get_or_open(&spelled, 0, open("b")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = SHARED.get_or_open(&path, 1, open("c")).unwrap();
        assert_eq!(*c, "c");
        let other = dir.path().join("b.sqlite3");
        assert_eq!(*SHARED.get_or_open(&other, 0, open("d")).unwrap(), "d");
        assert!(SHARED.get_or_open(&path, 2, || Err(())).is_err());
        drop((a, b));
        assert_eq!(*SHARED.get_or_open(&path, 0, open("e")).unwrap(), "e");
    }
}
