//! The binary sidecar `<library>.mnx` (docs/reference/library.md#sidecar): the matrix and per-bit
//! arrays laid out for memory mapping, so a packed library opens in milliseconds.
//!
//! Layout (little-endian): a 4096-byte header — magic `MNEMONX1`, u32 format version, u32
//! dimension, u64 rows, u64 stride, u64 source size, i64 source mtime (ns), then for each of
//! [`SECTIONS`] a u64 offset and u64 length — followed by 4096-aligned sections. The layout is
//! internal and versioned; big-endian hosts never use it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use mnemon_db::atomic_file::AtomicWriter;
use serde_json::{Map, Value};

use crate::error::{LibraryError, Result};
use crate::id::BitId;
use crate::load::Loaded;
use crate::omit::Omit;
use crate::storage::{Arena, Backing, Embeddings, MappedBlock, Store};

const MAGIC: &[u8; 8] = b"MNEMONX1";
const FORMAT_VERSION: u32 = 1;
const ALIGN: u64 = 4096;
/// Matrix, ids, token counts, tag indices, tag table, record offsets, arena, top level.
const SECTIONS: usize = 8;
const HEADER_FIXED: usize = 8 + 4 + 4 + 8 + 8 + 8 + 8;

/// The sidecar path for a library file: `<file>.mnx`.
pub fn sidecar_path(library: &Path) -> PathBuf {
    let mut s = library.as_os_str().to_owned();
    s.push(".mnx");
    PathBuf::from(s)
}

/// Size and modification time (ns since the epoch) of the source file.
fn source_stamp(path: &Path) -> Result<(u64, i64)> {
    let meta = std::fs::metadata(path).map_err(|e| LibraryError::io(path, e))?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    Ok((meta.len(), mtime))
}

/// Writes the sidecar of the library held in `top` and `store`, loaded from `source`, next to
/// it as `<source>.mnx`, and returns its path ([`crate::Library::pack`]).
pub(crate) fn write(source: &Path, top: &Map<String, Value>, store: &Store) -> Result<PathBuf> {
    let stamp = source_stamp(source)?;
    let target = sidecar_path(source);
    // The one atomic-write helper of the workspace: readers (and a crash) see the old sidecar or
    // the new one, never a partial file under the final name.
    mnemon_db::atomic_file::write_atomic(&target, |w| write_sections(w, stamp, top, store))
        .map_err(|e| LibraryError::io(&target, e.into()))?;
    Ok(target)
}

/// The sidecar's bytes: a zeroed header, the sections, then the header written over it.
fn write_sections(
    w: &mut AtomicWriter,
    (size, mtime): (u64, i64),
    top: &Map<String, Value>,
    store: &Store,
) -> std::io::Result<()> {
    let view = store.embeddings.view();
    let rows = store.len();
    let stride = view.stride();
    w.write_all(&[0u8; ALIGN as usize])?;
    let mut pos = ALIGN;
    let mut sections = [(0u64, 0u64); SECTIONS];
    let mut section = |w: &mut AtomicWriter,
                       pos: &mut u64,
                       n: usize,
                       f: &mut dyn FnMut(&mut AtomicWriter) -> std::io::Result<u64>|
     -> std::io::Result<()> {
        let len = f(w)?;
        sections[n] = (*pos, len);
        *pos += len;
        let pad = (ALIGN - *pos % ALIGN) % ALIGN;
        w.write_all(&vec![0u8; pad as usize])?;
        *pos += pad;
        Ok(())
    };
    section(w, &mut pos, 0, &mut |w| {
        let zeros = vec![0f32; stride - view.dim()];
        for i in 0..rows {
            for x in view.row(i).unwrap_or(&[]).iter().chain(&zeros) {
                w.write_all(&x.to_le_bytes())?;
            }
        }
        Ok((rows * stride * 4) as u64)
    })?;
    section(w, &mut pos, 1, &mut |w| {
        for id in &store.ids {
            w.write_all(&id.0)?;
        }
        Ok((rows * 32) as u64)
    })?;
    section(w, &mut pos, 2, &mut |w| {
        for t in &store.token_counts {
            w.write_all(&t.to_le_bytes())?;
        }
        Ok((rows * 8) as u64)
    })?;
    section(w, &mut pos, 3, &mut |w| {
        for t in &store.tags {
            w.write_all(&t.to_le_bytes())?;
        }
        Ok((rows * 4) as u64)
    })?;
    let tag_table = serde_json::to_vec(&store.tag_names)?;
    section(w, &mut pos, 4, &mut |w| {
        w.write_all(&tag_table)?;
        Ok(tag_table.len() as u64)
    })?;
    section(w, &mut pos, 5, &mut |w| {
        for o in &store.offsets {
            w.write_all(&o.to_le_bytes())?;
        }
        Ok((store.offsets.len() * 8) as u64)
    })?;
    let arena = store.arena.bytes();
    section(w, &mut pos, 6, &mut |w| {
        w.write_all(arena)?;
        Ok(arena.len() as u64)
    })?;
    let mut meta = Map::new();
    meta.insert("top".into(), Value::Object(top.clone()));
    meta.insert("dim".into(), store.dim.map_or(Value::Null, Value::from));
    let meta = serde_json::to_vec(&meta)?;
    section(w, &mut pos, 7, &mut |w| {
        w.write_all(&meta)?;
        Ok(meta.len() as u64)
    })?;

    let mut header = Vec::with_capacity(HEADER_FIXED + SECTIONS * 16);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.extend_from_slice(&(view.dim() as u32).to_le_bytes());
    header.extend_from_slice(&(rows as u64).to_le_bytes());
    header.extend_from_slice(&(stride as u64).to_le_bytes());
    header.extend_from_slice(&size.to_le_bytes());
    header.extend_from_slice(&mtime.to_le_bytes());
    for (o, l) in sections {
        header.extend_from_slice(&o.to_le_bytes());
        header.extend_from_slice(&l.to_le_bytes());
    }
    w.seek(SeekFrom::Start(0))?;
    w.write_all(&header)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let out = self.bytes.get(self.pos..self.pos + N)?.try_into().ok()?;
        self.pos += N;
        Some(out)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take::<8>().map(i64::from_le_bytes)
    }
}

/// Why a sidecar was not used. The JSON is loaded instead, so none of these is fatal; each
/// message says how to get a usable sidecar back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SidecarError {
    /// The sidecar could not be opened or mapped.
    #[error("cannot read it ({0}); re-run `mnemon library pack`")]
    Io(#[from] std::io::Error),
    /// The file does not start with the sidecar magic.
    #[error(
        "it is not a Mnemon sidecar (no MNEMONX1 magic); delete it or re-run `mnemon library pack`"
    )]
    Magic,
    /// A format version this build does not read.
    #[error(
        "its format version {0} is not supported (this build reads 1); re-run `mnemon library pack`"
    )]
    Version(u32),
    /// The library file's size or mtime differ from those recorded at packing.
    #[error("the library file changed since it was packed; re-run `mnemon library pack`")]
    Stale,
    /// A header field or section is inconsistent (truncated or damaged file).
    #[error("it is corrupt ({0}); re-run `mnemon library pack`")]
    Corrupt(&'static str),
}

/// Opens `<path>.mnx` if it exists and matches `path`'s size and mtime; otherwise `None`
/// (with a warning when a stale or unreadable sidecar was found).
pub(crate) fn open_if_fresh(path: &Path) -> Result<Option<Loaded>> {
    if cfg!(target_endian = "big") {
        return Ok(None);
    }
    let side = sidecar_path(path);
    if !side.is_file() {
        return Ok(None);
    }
    let stamp = source_stamp(path)?;
    match open_sidecar(&side, stamp) {
        Ok(lib) => Ok(Some(lib)),
        Err(why) => {
            tracing::warn!(
                "ignoring the sidecar {} and loading the JSON instead: {why}",
                side.display()
            );
            Ok(None)
        }
    }
}

/// The whole file in anonymous memory the process owns (page-aligned, like a map), for when
/// a file map cannot be guarded.
fn read_into_memory(file: &File, len: u64) -> std::io::Result<Mmap> {
    use std::io::Read;
    let len = usize::try_from(len).map_err(std::io::Error::other)?;
    let mut anon = memmap2::MmapMut::map_anon(len.max(1))?;
    let mut reader = file;
    reader.read_exact(anon.get_mut(..len).unwrap_or_default())?;
    let map = anon.make_read_only()?;
    Ok(map)
}

/// `a * b` for header-derived sizes; overflow means a corrupt header.
fn mul(a: usize, b: usize) -> std::result::Result<usize, SidecarError> {
    a.checked_mul(b)
        .ok_or(SidecarError::Corrupt("sizes overflow"))
}

fn open_sidecar(
    side: &Path,
    (size, mtime): (u64, i64),
) -> std::result::Result<Loaded, SidecarError> {
    use SidecarError::Corrupt;
    let file = File::open(side)?;
    let meta = file.metadata()?;
    // SAFETY: read-only private map. Mnemon writes sidecars once and renames them into place,
    // but someone may still truncate or rewrite the file in place (`cp` over it): the guard
    // turns the SIGBUS that would follow into zero pages plus a flag, and `Backing::check`
    // (before and after every query) refuses results once the flag is set or the file's size
    // or mtime changed (crate::guard).
    let map = unsafe { Mmap::map(&file) }?;
    let (map, backing) = match crate::guard::register(map.as_ptr(), map.len()) {
        Some(guard) => {
            let backing = Backing {
                path: side.to_path_buf(),
                file,
                len: meta.len(),
                mtime: meta.modified().ok(),
                guard: Some(guard),
            };
            (map, Some(backing))
        }
        // No guard on this platform (or every slot taken): a private copy in memory.
        None => {
            drop(map);
            (read_into_memory(&file, meta.len())?, None)
        }
    };
    let map = Arc::new(map);
    let mut r = Reader {
        bytes: &map,
        pos: 0,
    };
    if r.take::<8>().as_ref() != Some(MAGIC) {
        return Err(SidecarError::Magic);
    }
    match r.u32() {
        Some(FORMAT_VERSION) => {}
        Some(v) => return Err(SidecarError::Version(v)),
        None => return Err(Corrupt("header")),
    }
    // Header integers are untrusted: every size derived from them below is checked.
    let as_usize = |v: Option<u64>| {
        v.and_then(|v| usize::try_from(v).ok())
            .ok_or(Corrupt("header"))
    };
    let dim = as_usize(r.u32().map(u64::from))?;
    let rows = as_usize(r.u64())?;
    let stride = as_usize(r.u64())?;
    let (src_size, src_mtime) = (r.u64(), r.i64());
    if src_size != Some(size) || src_mtime != Some(mtime) {
        return Err(SidecarError::Stale);
    }
    let mut sections = [(0usize, 0usize); SECTIONS];
    for s in &mut sections {
        let o = as_usize(r.u64())?;
        let l = as_usize(r.u64())?;
        if o.checked_add(l).is_none_or(|end| end > map.len()) {
            return Err(Corrupt("section bounds"));
        }
        *s = (o, l);
    }
    // In bounds: checked just above.
    let section = |n: usize| -> &[u8] {
        let (o, l) = sections[n];
        map.get(o..o + l).unwrap_or(&[])
    };
    if stride < dim || sections[0].1 != mul(mul(rows, stride)?, 4)? || sections[0].0 % 4 != 0 {
        return Err(Corrupt("matrix"));
    }
    if section(1).len() != mul(rows, 32)?
        || section(2).len() != mul(rows, 8)?
        || section(3).len() != mul(rows, 4)?
        || section(5).len() != mul(rows.checked_add(1).ok_or(Corrupt("header"))?, 8)?
    {
        return Err(Corrupt("arrays"));
    }
    let ids: Vec<BitId> = section(1)
        .chunks_exact(32)
        .map(|c| BitId(c.try_into().unwrap_or([0; 32])))
        .collect();
    let token_counts: Vec<i64> = section(2)
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    let tags: Vec<u32> = section(3)
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
        .collect();
    let offsets: Vec<u64> = section(5)
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    let arena_len = sections[6].1 as u64;
    if offsets.first() != Some(&0)
        || offsets.windows(2).any(|w| w[0] > w[1])
        || offsets.last().is_some_and(|&l| l > arena_len)
    {
        return Err(Corrupt("offsets"));
    }
    let tag_names: Vec<String> =
        serde_json::from_slice(section(4)).map_err(|_| Corrupt("tag table"))?;
    if tags
        .iter()
        .any(|&t| t != crate::storage::NO_TAG && t as usize >= tag_names.len())
    {
        return Err(Corrupt("tags"));
    }
    let meta: Map<String, Value> =
        serde_json::from_slice(section(7)).map_err(|_| Corrupt("top level"))?;
    let top = match meta.get("top") {
        Some(Value::Object(t)) => t.clone(),
        _ => return Err(Corrupt("top level")),
    };
    let model = top
        .get("embedding_model")
        .and_then(Value::as_str)
        .ok_or(Corrupt("top level"))?
        .to_owned();
    let omit = match top.get("omit") {
        Some(Value::String(s)) => Some(Omit::parse_str(s).map_err(|_| Corrupt("omit"))?),
        _ => None,
    };
    let dim_known = match meta.get("dim") {
        None | Some(Value::Null) => None,
        Some(d) => Some(as_usize(d.as_u64())?),
    };
    // The recorded dimension is what queries are checked against; the matrix must agree.
    if rows > 0 && dim_known.unwrap_or(0) != dim {
        return Err(Corrupt("dimension"));
    }
    let index: HashMap<BitId, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let store = Store {
        backing,
        dim: dim_known,
        embeddings: Embeddings {
            mapped: Some(MappedBlock {
                map: Arc::clone(&map),
                offset: sections[0].0,
                rows,
                dim,
                stride,
            }),
            owned: mnemon_vector::Matrix::new(dim),
        },
        ids,
        token_counts,
        tags,
        offsets,
        arena: Arena {
            mapped: Some((Arc::clone(&map), sections[6].0, sections[6].1)),
            owned: Vec::new(),
        },
        tag_names,
        tag_lookup: HashMap::new(),
        index,
    };
    // Every row must be reachable through the view, or scans would disagree with the arrays.
    if store.embeddings.view().rows() != rows {
        return Err(Corrupt("matrix"));
    }
    Ok(Loaded {
        top,
        model,
        omit,
        store,
        upgraded: false,
    })
}
