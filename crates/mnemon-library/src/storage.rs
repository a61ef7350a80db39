//! Where a library's bits live: the embedding matrix and parallel per-bit arrays
//! (docs/reference/library.md#storage-and-loading).

use std::collections::HashMap;
use std::sync::Arc;

use memmap2::Mmap;
use mnemon_vector::{Matrix, MatrixView};
use serde_json::{Map, Value};

use crate::id::BitId;

/// Tag index of a bit without an access tag.
pub(crate) const NO_TAG: u32 = u32::MAX;

/// A block of rows inside a memory-mapped sidecar.
pub(crate) struct MappedBlock {
    pub(crate) map: Arc<Mmap>,
    /// Byte offset of the block in the map (checked 4-byte aligned and in bounds on open).
    pub(crate) offset: usize,
    pub(crate) rows: usize,
    pub(crate) dim: usize,
    pub(crate) stride: usize,
}

impl MappedBlock {
    fn view(&self) -> MatrixView<'_> {
        let floats = mapped_floats(
            &self.map,
            self.offset,
            self.rows.saturating_mul(self.stride),
        );
        MatrixView::new(floats, self.dim, self.stride, self.rows).unwrap_or(MatrixView::EMPTY)
    }
}

/// The embedding rows: owned, or (when `mapped` is set) a block inside a sidecar.
pub(crate) struct Embeddings {
    pub(crate) mapped: Option<MappedBlock>,
    pub(crate) owned: Matrix,
}

impl Embeddings {
    pub(crate) fn owned(m: Matrix) -> Self {
        Embeddings {
            mapped: None,
            owned: m,
        }
    }

    pub(crate) fn view(&self) -> MatrixView<'_> {
        match &self.mapped {
            Some(block) => block.view(),
            None => self.owned.view(),
        }
    }

    /// The owned matrix, copying a mapped block first.
    pub(crate) fn make_owned(&mut self) -> &mut Matrix {
        if let Some(block) = self.mapped.take() {
            let view = block.view();
            let mut m = Matrix::with_capacity(view.dim(), view.rows());
            for i in 0..view.rows() {
                let _ = m.push_row(view.row(i).unwrap_or(&[]));
            }
            self.owned = m;
        }
        &mut self.owned
    }
}

/// Reinterprets `floats` floats at `offset` of a map as `f32`s; empty when out of bounds,
/// misaligned or on a big-endian host (the sidecar reader checks all three first).
pub(crate) fn mapped_floats(map: &Mmap, offset: usize, floats: usize) -> &[f32] {
    let Some(bytes) = floats
        .checked_mul(4)
        .and_then(|len| map.get(offset..offset.checked_add(len)?))
    else {
        return &[];
    };
    if !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<f32>())
        || cfg!(target_endian = "big")
    {
        return &[];
    }
    // SAFETY: the slice is in bounds, 4-byte aligned and `floats * 4` bytes long; every bit
    // pattern is a valid f32; the map is read-only and outlives the borrow.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<f32>(), floats) }
}

/// The per-bit JSON (without the embedding) of every bit, back to back: owned, or (when
/// `mapped` is set) a section of a sidecar.
pub(crate) struct Arena {
    pub(crate) mapped: Option<(Arc<Mmap>, usize, usize)>,
    pub(crate) owned: Vec<u8>,
}

impl Arena {
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.mapped {
            Some((map, offset, len)) => {
                map.get(*offset..offset.saturating_add(*len)).unwrap_or(&[])
            }
            None => &self.owned,
        }
    }

    pub(crate) fn make_owned(&mut self) -> &mut Vec<u8> {
        if self.mapped.is_some() {
            self.owned = self.bytes().to_vec();
            self.mapped = None;
        }
        &mut self.owned
    }
}

/// The mapped file a store reads from, and how to tell that it changed under the map
/// (see [`crate::guard`]).
pub(crate) struct Backing {
    /// The file, for messages.
    pub(crate) path: std::path::PathBuf,
    /// The open file: its size and mtime are compared with `len` and `mtime`, so a rename
    /// over the path (a re-pack) does not count as a change but an in-place rewrite does.
    pub(crate) file: std::fs::File,
    pub(crate) len: u64,
    pub(crate) mtime: Option<std::time::SystemTime>,
    /// `None` when the map is a private copy in memory (no guard was available).
    pub(crate) guard: Option<crate::guard::Guard>,
}

impl Backing {
    /// Fails when the mapped file was truncated under the map (some pages now read as zeros)
    /// or rewritten in place since it was mapped: results built from it cannot be trusted.
    pub(crate) fn check(&self) -> crate::error::Result<()> {
        let changed = |detail: &'static str| crate::error::LibraryError::FileChanged {
            path: self.path.display().to_string(),
            detail,
        };
        if self
            .guard
            .as_ref()
            .is_some_and(crate::guard::Guard::damaged)
        {
            return Err(changed("was truncated"));
        }
        match self.file.metadata() {
            Ok(meta) if meta.len() == self.len && meta.modified().ok() == self.mtime => Ok(()),
            Ok(meta) if meta.len() < self.len => Err(changed("was truncated")),
            Ok(_) => Err(changed("was rewritten in place")),
            Err(_) => Err(changed("can no longer be read")),
        }
    }
}

/// All bits of a library, in file order, as parallel arrays.
pub(crate) struct Store {
    /// The sidecar the mapped parts come from, if any. Declared first so that it is dropped
    /// first: its guard must be unregistered before the maps below are unmapped.
    pub(crate) backing: Option<Backing>,
    /// The embedding dimension, once known.
    pub(crate) dim: Option<usize>,
    pub(crate) embeddings: Embeddings,
    pub(crate) ids: Vec<BitId>,
    pub(crate) token_counts: Vec<i64>,
    /// Index into `tag_names`, or [`NO_TAG`].
    pub(crate) tags: Vec<u32>,
    /// `rows + 1` offsets into the arena.
    pub(crate) offsets: Vec<u64>,
    pub(crate) arena: Arena,
    pub(crate) tag_names: Vec<String>,
    /// Each of `tag_names`' index by name, for [`Store::tag_index`] (rebuilt there when the
    /// names were read without it, from a sidecar): a search through the names per bit made
    /// loading N bits of T distinct tags cost N · T comparisons.
    pub(crate) tag_lookup: HashMap<String, u32>,
    pub(crate) index: HashMap<BitId, usize>,
}

impl Store {
    pub(crate) fn new(dim: Option<usize>) -> Self {
        Store {
            backing: None,
            dim,
            embeddings: Embeddings::owned(Matrix::new(dim.unwrap_or(0))),
            ids: Vec::new(),
            token_counts: Vec::new(),
            tags: Vec::new(),
            offsets: vec![0],
            arena: Arena {
                mapped: None,
                owned: Vec::new(),
            },
            tag_names: Vec::new(),
            tag_lookup: HashMap::new(),
            index: HashMap::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Fails when the mapped sidecar this store reads changed under it (see [`Backing`]).
    pub(crate) fn check_backing(&self) -> crate::error::Result<()> {
        self.backing.as_ref().map_or(Ok(()), Backing::check)
    }

    /// The stored JSON of bit `i` (with an `embedding: null` placeholder where the stored bit had
    /// its embedding).
    pub(crate) fn raw_json(&self, i: usize) -> &[u8] {
        let start = self.offsets.get(i).copied().unwrap_or(0) as usize;
        let end = self.offsets.get(i + 1).copied().unwrap_or(0) as usize;
        self.arena.bytes().get(start..end).unwrap_or(&[])
    }

    /// Bit `i`'s stored JSON object, placeholder included. Every bit was stored as an object,
    /// so a failure means the bytes changed under the library (a damaged sidecar): an error,
    /// never an empty bit.
    pub(crate) fn json(&self, i: usize) -> crate::error::Result<Map<String, Value>> {
        serde_json::from_slice(self.raw_json(i)).map_err(|e| {
            crate::error::LibraryError::CorruptBit {
                index: i,
                reason: e.to_string(),
            }
        })
    }

    pub(crate) fn tag_name(&self, i: usize) -> Option<&str> {
        let t = *self.tags.get(i)?;
        self.tag_names.get(t as usize).map(String::as_str)
    }

    pub(crate) fn tag_index(&mut self, tag: &str) -> u32 {
        if self.tag_lookup.len() != self.tag_names.len() {
            self.tag_lookup = (0u32..)
                .zip(&self.tag_names)
                .map(|(i, name)| (name.clone(), i))
                .collect();
        }
        if let Some(&p) = self.tag_lookup.get(tag) {
            return p;
        }
        let p = self.tag_names.len() as u32;
        self.tag_names.push(tag.to_owned());
        self.tag_lookup.insert(tag.to_owned(), p);
        p
    }

    /// The owned matrix, created with the dimension once it is known.
    pub(crate) fn matrix_mut(&mut self) -> &mut Matrix {
        let dim = self.dim.unwrap_or(0);
        let m = self.embeddings.make_owned();
        if m.is_empty() && m.dim() != dim {
            *m = Matrix::new(dim);
        }
        m
    }

    /// Appends one bit's metadata; the caller has appended its row.
    pub(crate) fn push_meta(
        &mut self,
        id: BitId,
        token_count: i64,
        tag: Option<&str>,
        json: &[u8],
    ) {
        let tag = tag.map_or(NO_TAG, |t| self.tag_index(t));
        let arena = self.arena.make_owned();
        arena.extend_from_slice(json);
        let end = arena.len() as u64;
        self.index.insert(id, self.ids.len());
        self.ids.push(id);
        self.token_counts.push(token_count);
        self.tags.push(tag);
        self.offsets.push(end);
    }

    /// Builds a new store from bits of this one in `order`, with optional replacement JSON.
    pub(crate) fn reordered(
        &self,
        order: &[usize],
        replace: &dyn Fn(usize) -> Option<Vec<u8>>,
    ) -> Store {
        let mut out = Store::new(self.dim);
        let view = self.embeddings.view();
        let mut m = Matrix::with_capacity(view.dim(), order.len());
        for &i in order {
            let _ = m.push_row(view.row(i).unwrap_or(&[]));
            let json = replace(i).unwrap_or_else(|| self.raw_json(i).to_vec());
            out.push_meta(self.ids[i], self.token_counts[i], self.tag_name(i), &json);
        }
        out.embeddings = Embeddings::owned(m);
        out
    }

    /// Removes bit `i`, keeping the order of the others.
    pub(crate) fn remove(&mut self, i: usize) {
        let order: Vec<usize> = (0..self.len()).filter(|&j| j != i).collect();
        *self = self.reordered(&order, &|_| None);
    }
}
