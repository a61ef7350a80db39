//! The persisted index: a versioned little-endian byte format a memory map can be used from
//! directly (every section starts on a 64-byte boundary and is viewed in place, nothing of the
//! graph is parsed at open).
//!
//! ```text
//! offset  size  field
//!      0     8  magic "MNEMANN\0"
//!      8     4  version (1)
//!     12     4  header length (128)
//!     16     4  dims
//!     20     4  count (rows)
//!     24     4  m (slots per node on the upper levels)
//!     28     4  m0 (slots per node on level 0: 2·m, plus one reserved for connectivity repair)
//!     32     4  ef_construction
//!     36     4  levels (upper levels; the top level is `levels`)
//!     40     4  entry point
//!     44     4  code stride (bytes of int8 codes per row, a multiple of 64)
//!     48     8  seed
//!     56     8  fingerprint of the f32 vectors the index was built over (`fingerprint`)
//!     64     4  section count (3 + 2·levels)
//!     68    52  reserved, zero
//!    120     8  checksum of bytes 0..120 and the section table
//!    128  32·s  section table: kind u32, level u32, offset u64, length u64, checksum u64
//! ```
//!
//! Sections, in this order, each at a 64-byte-aligned offset with zero padding between them and
//! nothing after the last: the codes (`count × code stride` i8), the scales (`count` f32), the
//! level-0 adjacency (`count × m0` u32, `u32::MAX` for an empty slot), then for each upper level
//! `l` in 1..=levels its node ids (ascending u32) and their adjacency (`m` u32 each).
//!
//! A section's checksum is the XXH3-64 of the little-endian XXH3-64 values of its 1 MiB chunks,
//! so it is computed in parallel; every byte of the file is covered by a checksum or a zero
//! check, so any change is detected.

use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

use crate::AnnError;
use crate::graph::{Graph, Level};

/// The first eight bytes of every index.
pub const MAGIC: [u8; 8] = *b"MNEMANN\0";
/// The format version this crate writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of the fixed header.
pub(crate) const HEADER_LEN: usize = 128;
/// Bytes of one section-table entry.
const ENTRY_LEN: usize = 32;
/// Section alignment.
pub(crate) const ALIGN: usize = 64;
/// Chunk size of the parallel checksums.
const CHUNK: usize = 1 << 20;
/// More levels than any real build produces (level = −ln(u)·1/ln(m) stays far below this).
pub(crate) const MAX_LEVELS: usize = 32;

/// Section kinds.
const CODES: u32 = 1;
const SCALES: u32 = 2;
const LEVEL0: u32 = 3;
const UPPER_NODES: u32 = 4;
const UPPER_ADJACENCY: u32 = 5;

/// The checksum of one section (see the module documentation).
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    let chunks: Vec<u64> = bytes.par_chunks(CHUNK).map(xxh3_64).collect();
    let mut joined = Vec::with_capacity(chunks.len() * 8);
    for c in chunks {
        joined.extend_from_slice(&c.to_le_bytes());
    }
    xxh3_64(&joined)
}

/// The fingerprint of a matrix of vectors: the checksum of the little-endian bytes of its rows
/// (the data of each row, not the padding between rows), with the row count and dimension mixed
/// in. Stored in the header at build time so the owner of the vectors can detect a stale index
/// (`OpenOptions::expected_fingerprint`).
pub fn fingerprint(vectors: mnemon_vector::MatrixView<'_>) -> u64 {
    let rows_per_chunk = (CHUNK / (vectors.dim().max(1) * 4)).max(1);
    let chunks: Vec<u64> = (0..vectors.rows().div_ceil(rows_per_chunk))
        .into_par_iter()
        .map(|chunk| {
            let start = chunk * rows_per_chunk;
            let end = (start + rows_per_chunk).min(vectors.rows());
            let mut bytes = Vec::with_capacity((end - start) * vectors.dim() * 4);
            for r in start..end {
                for x in vectors.row(r).unwrap_or(&[]) {
                    bytes.extend_from_slice(&x.to_le_bytes());
                }
            }
            xxh3_64(&bytes)
        })
        .collect();
    let mut joined = Vec::with_capacity(16 + chunks.len() * 8);
    joined.extend_from_slice(&(vectors.rows() as u64).to_le_bytes());
    joined.extend_from_slice(&(vectors.dim() as u64).to_le_bytes());
    for c in chunks {
        joined.extend_from_slice(&c.to_le_bytes());
    }
    xxh3_64(&joined)
}

/// The header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub dims: u32,
    pub count: u32,
    pub m: u32,
    pub m0: u32,
    pub ef_construction: u32,
    pub levels: u32,
    pub entry: u32,
    pub code_stride: u32,
    pub seed: u64,
    pub fingerprint: u64,
}

/// An index's bytes, owned, in a buffer aligned for the zero-copy view (a plain `Vec<u8>` is
/// only byte-aligned).
#[derive(Clone)]
pub struct IndexBytes {
    words: Vec<u64>,
    len: usize,
}

impl std::fmt::Debug for IndexBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexBytes")
            .field("len", &self.len)
            .finish()
    }
}

impl IndexBytes {
    /// A zeroed buffer of `len` bytes.
    fn zeroed(len: usize) -> Self {
        IndexBytes {
            words: vec![0u64; len.div_ceil(8)],
            len,
        }
    }

    /// Copies `bytes` (read from a file, say) into an aligned buffer.
    pub fn copy_from(bytes: &[u8]) -> Self {
        let mut out = IndexBytes::zeroed(bytes.len());
        out.as_mut_bytes().copy_from_slice(bytes);
        out
    }

    /// The bytes, to write to a file or to open with [`IndexView::open`](crate::IndexView::open).
    pub fn as_bytes(&self) -> &[u8] {
        let all: &[u8] = bytemuck::cast_slice(&self.words);
        all.get(..self.len).unwrap_or(all)
    }

    fn as_mut_bytes(&mut self) -> &mut [u8] {
        let len = self.len;
        let all: &mut [u8] = bytemuck::cast_slice_mut(&mut self.words);
        &mut all[..len]
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for zero bytes (never the case for a built index).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Rounds `at` up to the section alignment.
fn align(at: usize) -> usize {
    at.div_ceil(ALIGN) * ALIGN
}

/// Serialises a built graph.
pub(crate) fn write(
    header: &Header,
    codes: &[i8],
    scales: &[f32],
    level0: &[u32],
    upper: &[(Vec<u32>, Vec<u32>)],
) -> IndexBytes {
    let mut sections: Vec<(u32, u32, &[u8])> = vec![
        (CODES, 0, bytemuck::cast_slice(codes)),
        (SCALES, 0, bytemuck::cast_slice(scales)),
        (LEVEL0, 0, bytemuck::cast_slice(level0)),
    ];
    for (l, (nodes, adjacency)) in upper.iter().enumerate() {
        sections.push((UPPER_NODES, l as u32 + 1, bytemuck::cast_slice(nodes)));
        sections.push((
            UPPER_ADJACENCY,
            l as u32 + 1,
            bytemuck::cast_slice(adjacency),
        ));
    }
    let table_end = HEADER_LEN + sections.len() * ENTRY_LEN;
    let mut offsets = Vec::with_capacity(sections.len());
    let mut at = align(table_end);
    for (_, _, bytes) in &sections {
        offsets.push(at);
        at = align(at + bytes.len());
    }
    let total = match (offsets.last(), sections.last()) {
        (Some(&o), Some((_, _, b))) => o + b.len(),
        _ => table_end,
    };
    let mut out = IndexBytes::zeroed(total);
    let checksums: Vec<u64> = sections.par_iter().map(|(_, _, b)| checksum(b)).collect();
    let buf = out.as_mut_bytes();
    for ((&(_, _, bytes), &offset), _) in sections.iter().zip(&offsets).zip(&checksums) {
        buf[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
    let mut head = Vec::with_capacity(table_end);
    head.extend_from_slice(&MAGIC);
    for v in [
        VERSION,
        HEADER_LEN as u32,
        header.dims,
        header.count,
        header.m,
        header.m0,
        header.ef_construction,
        header.levels,
        header.entry,
        header.code_stride,
    ] {
        head.extend_from_slice(&v.to_le_bytes());
    }
    head.extend_from_slice(&header.seed.to_le_bytes());
    head.extend_from_slice(&header.fingerprint.to_le_bytes());
    head.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    head.resize(120, 0);
    let mut table = Vec::with_capacity(sections.len() * ENTRY_LEN);
    for (((kind, level, bytes), offset), sum) in sections.iter().zip(&offsets).zip(&checksums) {
        table.extend_from_slice(&kind.to_le_bytes());
        table.extend_from_slice(&level.to_le_bytes());
        table.extend_from_slice(&(*offset as u64).to_le_bytes());
        table.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        table.extend_from_slice(&sum.to_le_bytes());
    }
    let header_sum = header_checksum(&head, &table);
    buf[..120].copy_from_slice(&head);
    buf[120..128].copy_from_slice(&header_sum.to_le_bytes());
    buf[HEADER_LEN..table_end].copy_from_slice(&table);
    out
}

fn header_checksum(head: &[u8], table: &[u8]) -> u64 {
    let mut all = Vec::with_capacity(head.len() + table.len());
    all.extend_from_slice(head);
    all.extend_from_slice(table);
    xxh3_64(&all)
}

/// Reads a little-endian u32 at `at` (the caller checked the bounds of the header).
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(bytes.get(at..at + 4).unwrap_or(&[0; 4]));
    u32::from_le_bytes(b)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(bytes.get(at..at + 8).unwrap_or(&[0; 8]));
    u64::from_le_bytes(b)
}

/// One section as found in the table.
#[derive(Debug, Clone, Copy)]
struct Section<'a> {
    name: &'static str,
    bytes: &'a [u8],
    checksum: u64,
}

/// A parsed (but not yet fully verified) index: the header and the sections, viewed in place.
pub(crate) struct Parsed<'a> {
    pub header: Header,
    pub codes: &'a [i8],
    pub scales: &'a [f32],
    pub level0: &'a [u32],
    pub upper: Vec<Level<'a>>,
    /// Sections whose checksums [`Parsed::verify_large`] checks (the codes and level 0).
    large: [Section<'a>; 2],
    /// The stored header checksum (it covers the header and the section table, with every
    /// section's checksum).
    pub header_checksum: u64,
    /// The buffer's address and length.
    pub bytes_at: usize,
    pub len: usize,
}

impl<'a> Parsed<'a> {
    /// The graph over these sections.
    pub fn graph(&'a self) -> Graph<'a> {
        Graph {
            count: self.header.count as usize,
            code_stride: self.header.code_stride as usize,
            codes: self.codes,
            scales: self.scales,
            level0: self.level0,
            m0: self.header.m0 as usize,
            m: self.header.m as usize,
            upper: &self.upper,
            entry: self.header.entry,
        }
    }

    /// Checks the checksums of the two large sections (the codes and level 0), the part of
    /// verification that reads the whole file.
    pub fn verify_large(&self) -> Result<(), AnnError> {
        self.large.par_iter().try_for_each(|s| {
            if checksum(s.bytes) == s.checksum {
                Ok(())
            } else {
                Err(AnnError::Corrupt {
                    what: format!("the {} section's checksum does not match", s.name),
                })
            }
        })
    }
}

fn corrupt(what: impl Into<String>) -> AnnError {
    AnnError::Corrupt { what: what.into() }
}

/// Views a section's bytes as `T`s: the offset was checked to be 64-byte aligned and the buffer
/// to be 64-byte aligned... or at least aligned for `T`, which is all `bytemuck` needs.
fn cast<'a, T: bytemuck::Pod>(bytes: &'a [u8], name: &str) -> Result<&'a [T], AnnError> {
    bytemuck::try_cast_slice(bytes).map_err(|_| AnnError::Misaligned {
        what: format!("the {name} section"),
    })
}

/// Parses and checks everything but the checksums of the two large sections (which
/// [`Parsed::verify_large`] checks); the small sections' checksums only when `small_sums` (a
/// re-view of bytes already verified skips them, see `IndexView::reopen`).
pub(crate) fn parse(bytes: &[u8], small_sums: bool) -> Result<Parsed<'_>, AnnError> {
    if cfg!(target_endian = "big") {
        return Err(AnnError::Unsupported {
            what: "a big-endian CPU (the format is little-endian and viewed in place)".into(),
        });
    }
    if bytes.len() < HEADER_LEN {
        return Err(AnnError::Truncated {
            expected: HEADER_LEN as u64,
            found: bytes.len() as u64,
        });
    }
    if bytes.get(..8) != Some(&MAGIC[..]) {
        return Err(AnnError::NotAnIndex);
    }
    let version = u32_at(bytes, 8);
    if version != VERSION {
        return Err(AnnError::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    if !(bytes.as_ptr() as usize).is_multiple_of(8) {
        return Err(AnnError::Misaligned {
            what: "the index buffer (open a memory map or an IndexBytes)".into(),
        });
    }
    let section_count = u32_at(bytes, 64) as usize;
    if section_count > 3 + 2 * MAX_LEVELS {
        return Err(corrupt(format!(
            "{section_count} sections is more than any index has"
        )));
    }
    let table_end = HEADER_LEN + section_count * ENTRY_LEN;
    let (Some(head), Some(table)) = (bytes.get(..120), bytes.get(HEADER_LEN..table_end)) else {
        return Err(AnnError::Truncated {
            expected: table_end as u64,
            found: bytes.len() as u64,
        });
    };
    if header_checksum(head, table) != u64_at(bytes, 120) {
        return Err(corrupt("the header checksum does not match"));
    }
    if u32_at(bytes, 12) as usize != HEADER_LEN
        || u32_at(bytes, 68) != 0
        || bytes.get(72..120).is_none_or(|r| r.iter().any(|&b| b != 0))
    {
        return Err(corrupt("the header's length or reserved fields are wrong"));
    }
    let header = Header {
        dims: u32_at(bytes, 16),
        count: u32_at(bytes, 20),
        m: u32_at(bytes, 24),
        m0: u32_at(bytes, 28),
        ef_construction: u32_at(bytes, 32),
        levels: u32_at(bytes, 36),
        entry: u32_at(bytes, 40),
        code_stride: u32_at(bytes, 44),
        seed: u64_at(bytes, 48),
        fingerprint: u64_at(bytes, 56),
    };
    let (dims, count, m, m0, levels) = (
        header.dims as usize,
        header.count as usize,
        header.m as usize,
        header.m0 as usize,
        header.levels as usize,
    );
    if levels > MAX_LEVELS
        || section_count != 3 + 2 * levels
        || header.code_stride as usize != crate::kernel::code_stride(dims)
        || dims == 0
        || dims > crate::kernel::MAX_DIMS
        // The build's range: a search walks at most `2 · 256 + 1` neighbours of a node.
        || !(2..=256).contains(&m)
        || m0 != 2 * m + 1
        || (count > 0 && header.entry as usize >= count)
        || (count == 0 && levels > 0)
    {
        return Err(corrupt("the header's parameters are inconsistent"));
    }

    // The table: expected kinds in order, contiguous aligned offsets, zero padding.
    let mut sections = Vec::with_capacity(section_count);
    let mut at = align(table_end);
    let mut previous_end = table_end;
    for i in 0..section_count {
        let e = HEADER_LEN + i * ENTRY_LEN;
        let (kind, level) = (u32_at(bytes, e), u32_at(bytes, e + 4));
        let (offset, len, sum) = (
            u64_at(bytes, e + 8),
            u64_at(bytes, e + 16),
            u64_at(bytes, e + 24),
        );
        let (want_kind, want_level, name) = match i {
            0 => (CODES, 0, "codes"),
            1 => (SCALES, 0, "scales"),
            2 => (LEVEL0, 0, "level-0 adjacency"),
            _ if (i - 3) % 2 == 0 => (UPPER_NODES, (i - 3) / 2 + 1, "upper-level nodes"),
            _ => (UPPER_ADJACENCY, (i - 3) / 2 + 1, "upper-level adjacency"),
        };
        if kind != want_kind || level as usize != want_level || offset != at as u64 {
            return Err(corrupt(format!(
                "section {i} ({name}) is not where the format puts it"
            )));
        }
        let end = (at as u64)
            .checked_add(len)
            .filter(|&e| e <= bytes.len() as u64);
        let Some(end) = end else {
            return Err(AnnError::Truncated {
                expected: (at as u64).saturating_add(len),
                found: bytes.len() as u64,
            });
        };
        let end = end as usize;
        if bytes
            .get(previous_end..at)
            .is_none_or(|pad| pad.iter().any(|&b| b != 0))
        {
            return Err(corrupt(format!(
                "the padding before section {i} ({name}) is not zero"
            )));
        }
        sections.push(Section {
            name,
            bytes: bytes.get(at..end).unwrap_or(&[]),
            checksum: sum,
        });
        previous_end = end;
        at = align(end);
    }
    if previous_end != bytes.len() {
        return Err(if previous_end > bytes.len() {
            AnnError::Truncated {
                expected: previous_end as u64,
                found: bytes.len() as u64,
            }
        } else {
            corrupt(format!(
                "{} bytes follow the last section",
                bytes.len() - previous_end
            ))
        });
    }

    // Lengths follow from the header.
    let expect_len = |s: &Section<'_>, want: usize| -> Result<(), AnnError> {
        if s.bytes.len() == want {
            Ok(())
        } else {
            Err(corrupt(format!(
                "the {} section holds {} bytes, the header implies {want}",
                s.name,
                s.bytes.len()
            )))
        }
    };
    let overflow = || corrupt("the header's sizes overflow");
    let [codes_s, scales_s, level0_s, rest @ ..] = sections.as_slice() else {
        return Err(corrupt("fewer than three sections"));
    };
    expect_len(
        codes_s,
        count
            .checked_mul(header.code_stride as usize)
            .ok_or_else(overflow)?,
    )?;
    expect_len(scales_s, count.checked_mul(4).ok_or_else(overflow)?)?;
    expect_len(level0_s, count.checked_mul(m0 * 4).ok_or_else(overflow)?)?;

    // The small sections are verified here, always: they are read by every search.
    let verify = |s: &Section<'_>| -> Result<(), AnnError> {
        if !small_sums || checksum(s.bytes) == s.checksum {
            Ok(())
        } else {
            Err(corrupt(format!(
                "the {} section's checksum does not match",
                s.name
            )))
        }
    };
    verify(scales_s)?;
    let mut upper = Vec::with_capacity(levels);
    let mut previous_nodes: Option<&[u32]> = None;
    for (l, pair) in rest.chunks(2).enumerate() {
        let [nodes_s, adjacency_s] = pair else {
            return Err(corrupt("an upper level without its adjacency"));
        };
        verify(nodes_s)?;
        verify(adjacency_s)?;
        if !nodes_s.bytes.len().is_multiple_of(4) {
            return Err(corrupt(format!(
                "the {} section is not a whole number of node ids",
                nodes_s.name
            )));
        }
        let nodes: &[u32] = cast(nodes_s.bytes, nodes_s.name)?;
        expect_len(
            adjacency_s,
            nodes.len().checked_mul(m * 4).ok_or_else(overflow)?,
        )?;
        // Ascending ids below `count`, each level a subset of the one below (checked by
        // length: a subset of an ascending list is no longer than it).
        if nodes.windows(2).any(|w| w[0] >= w[1])
            || nodes.last().is_some_and(|&n| n as usize >= count)
            || previous_nodes.is_some_and(|p| nodes.len() > p.len())
        {
            return Err(corrupt(format!(
                "the nodes of level {} are not ascending ids",
                l + 1
            )));
        }
        previous_nodes = Some(nodes);
        upper.push(Level {
            nodes,
            adjacency: cast(adjacency_s.bytes, adjacency_s.name)?,
        });
    }
    if let Some(top) = upper.last()
        && top.nodes.binary_search(&header.entry).is_err()
    {
        return Err(corrupt("the entry point is not on the top level"));
    }
    Ok(Parsed {
        header,
        codes: cast(codes_s.bytes, codes_s.name)?,
        scales: cast(scales_s.bytes, scales_s.name)?,
        level0: cast(level0_s.bytes, level0_s.name)?,
        upper,
        large: [*codes_s, *level0_s],
        header_checksum: u64_at(bytes, 120),
        bytes_at: bytes.as_ptr() as usize,
        len: bytes.len(),
    })
}

#[cfg(test)]
mod tests {
    use mnemon_vector::Matrix;

    use super::*;
    use crate::{BuildParams, build};

    /// An index's bytes with its header's `m` and `m0` set to `m`, `2m + 1`, and the header
    /// checksum made right again (as a crafted file would have it).
    fn with_m(m: u32) -> Vec<u8> {
        let mut rows = Matrix::new(4);
        for i in 0..20u8 {
            rows.push_row(&[f32::from(i), 1.0, 0.5, -1.0]).unwrap();
        }
        let bytes = build(rows.view(), &BuildParams::default(), &|_| {}).unwrap();
        let mut bytes = bytes.as_bytes().to_vec();
        bytes[24..28].copy_from_slice(&m.to_le_bytes());
        bytes[28..32].copy_from_slice(&(2 * m + 1).to_le_bytes());
        let sections = u32_at(&bytes, 64) as usize;
        let sum = header_checksum(
            &bytes[..120],
            &bytes[HEADER_LEN..HEADER_LEN + sections * ENTRY_LEN],
        );
        bytes[120..128].copy_from_slice(&sum.to_le_bytes());
        bytes
    }

    /// A search walks at most 513 neighbours of a node (the build's `m` ≤ 256): a header with
    /// a larger `m` is refused as inconsistent, before its sections are looked at.
    #[test]
    fn a_header_past_the_builds_m_is_refused() {
        let bytes = IndexBytes::copy_from(&with_m(300));
        let error = parse(bytes.as_bytes(), true).err().unwrap();
        assert_eq!(error, corrupt("the header's parameters are inconsistent"));
    }
}
