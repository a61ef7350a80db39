//! Opening a library file memory-mapped, releasing parsed pages as loading goes.

use std::cell::Cell;
use std::fs::File;
use std::path::Path;

use memmap2::{Advice, Mmap, UncheckedAdvice};

use crate::error::{LibraryError, Result};
use crate::load::{Loaded, load_slice};

/// Parsed input is released in steps of this many bytes (a multiple of every page size).
const RELEASE_STEP: usize = 64 << 20;
const RELEASE_ALIGN: usize = 64 << 10;

/// Loads a library file; `progress` gets the bytes parsed so far after each decoded batch.
pub(crate) fn load_file(
    path: &Path,
    force_tag: Option<&str>,
    progress: Option<&(dyn Fn(u64) + Send + Sync)>,
) -> Result<Loaded> {
    let file = File::open(path).map_err(|e| LibraryError::io(path, e))?;
    let len = file
        .metadata()
        .map_err(|e| LibraryError::io(path, e))?
        .len();
    if len == 0 {
        return load_slice(&[], force_tag, None);
    }
    let stamp = |file: &File| file.metadata().ok().map(|m| (m.len(), m.modified().ok()));
    let before = stamp(&file);
    // SAFETY: the map is private and read-only. The file may be truncated while it loads (a
    // deploy copying over it during a reload): the guard below turns the SIGBUS that would
    // follow into zero pages plus a flag (crate::guard), and the load then fails, so a host
    // keeps its previous library.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| LibraryError::io(path, e))?;
    let Some(guard) = crate::guard::register(map.as_ptr(), map.len()) else {
        // No guard on this platform (or every slot taken): read the file into memory instead.
        drop(map);
        let bytes = std::fs::read(path).map_err(|e| LibraryError::io(path, e))?;
        return load_slice(&bytes, force_tag, None);
    };
    let _ = map.advise(Advice::Sequential);
    let base = map.as_ptr() as usize;
    let released = Cell::new(0usize);
    let release = |address: usize| {
        let parsed = address.saturating_sub(base).min(map.len());
        if let Some(progress) = progress {
            progress(parsed as u64);
        }
        let upto = parsed / RELEASE_ALIGN * RELEASE_ALIGN;
        let from = released.get();
        if upto >= from + RELEASE_STEP {
            // SAFETY: on a private, never-written file map, MADV_DONTNEED only drops this
            // process's copies of the pages; later reads fault them in again from the file with
            // the same content, so no live reference observes a change.
            let _ =
                unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, from, upto - from) };
            released.set(upto);
        }
    };
    let loaded = load_slice(&map, force_tag, Some(&release));
    // Checked whatever the outcome: a parse error over zeroed pages is really this.
    let detail = if guard.damaged() {
        Some("was truncated")
    } else if stamp(&file) != before {
        Some("was rewritten")
    } else {
        None
    };
    // Unregistered before the map is unmapped (crate::guard).
    drop(guard);
    drop(map);
    match detail {
        Some(detail) => Err(LibraryError::FileChanged {
            path: path.display().to_string(),
            detail,
        }),
        None => loaded,
    }
}
