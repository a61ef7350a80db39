//! The parallel, deterministic HNSW build.
//!
//! Nodes are inserted in id order in batches. Within a batch every node searches the graph as it
//! stood before the batch (read-only, in parallel with rayon), so its neighbours depend only on
//! that frozen graph, never on which thread ran first; the batch is then merged in a fixed order
//! (new nodes' own lists, then each touched node's list rebuilt from its old neighbours plus the
//! sorted incoming ones, again in parallel but each list a pure function of its inputs). The same
//! vectors, parameters and seed therefore give the same bytes on any number of threads.
//!
//! Batches grow with the graph (1/64 of the nodes already inserted, at most 8,192), so early
//! nodes, whose neighbourhoods matter most, are inserted almost one by one, and nodes of one
//! batch, which cannot see each other, are a small fraction of what they search.
//!
//! After the last batch a repair pass makes every node reachable on level 0 from the entry
//! point (HNSW's pruning can orphan a node): each unreachable node is linked from its nearest
//! reachable node through a slot reserved for that, so a search whose budget covers the whole
//! index finds every node.

use rayon::prelude::*;

use crate::format::{self, Header, IndexBytes, MAX_LEVELS};
use crate::graph::{Cand, EMPTY, Graph, Level, Query};
use crate::kernel::{self, code_stride, quantise};
use crate::{AnnError, BuildParams};

/// Build progress, reported after every batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildProgress {
    /// Nodes in the graph so far.
    pub inserted: usize,
    /// Nodes in all.
    pub total: usize,
}

/// Largest batch.
const MAX_BATCH: usize = 8192;
/// A batch holds at most this fraction (1/n) of the nodes already inserted.
const BATCH_DIVISOR: usize = 64;
/// Highest level a node may get (the expected top level of a billion nodes at m = 16 is 7).
const LEVEL_CAP: usize = 16;

/// SplitMix64: a node's level is a function of the seed and its id only.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// HNSW's level distribution: P(level ≥ l) = m^−l.
fn level_of(seed: u64, node: usize, m: usize) -> usize {
    let bits = splitmix64(seed ^ splitmix64(node as u64)) >> 11;
    // Uniform in (0, 1]: never ln(0).
    let u = (bits as f64 + 1.0) / (1u64 << 53) as f64;
    let level = (-u.ln() / (m as f64).ln()).floor();
    (level as usize).min(LEVEL_CAP)
}

/// The builder's mutable graph.
struct State {
    count: usize,
    stride: usize,
    codes: Vec<i8>,
    scales: Vec<f32>,
    m: usize,
    m0: usize,
    level0: Vec<u32>,
    /// Per upper level: its nodes (ascending) and their adjacency.
    upper: Vec<(Vec<u32>, Vec<u32>)>,
    entry: u32,
    /// The top level of the graph so far.
    top: usize,
}

impl State {
    fn levels(&self) -> Vec<Level<'_>> {
        self.upper
            .iter()
            .take(self.top)
            .map(|(nodes, adjacency)| Level { nodes, adjacency })
            .collect()
    }

    fn graph<'a>(&'a self, levels: &'a [Level<'a>]) -> Graph<'a> {
        Graph {
            count: self.count,
            code_stride: self.stride,
            codes: &self.codes,
            scales: &self.scales,
            level0: &self.level0,
            m0: self.m0,
            m: self.m,
            upper: levels,
            entry: self.entry,
        }
    }

    /// The mutable slots of `node` on `level`, without the repair slot on level 0.
    fn slots_mut(&mut self, level: usize, node: u32) -> &mut [u32] {
        if level == 0 {
            let start = node as usize * self.m0;
            return &mut self.level0[start..start + self.m0 - 1];
        }
        let (nodes, adjacency) = &mut self.upper[level - 1];
        match nodes.binary_search(&node) {
            Ok(slot) => &mut adjacency[slot * self.m..(slot + 1) * self.m],
            Err(_) => &mut [],
        }
    }
}

/// Writes `list` into `slots`, padding with [`EMPTY`].
fn fill(slots: &mut [u32], list: &[u32]) {
    for (i, s) in slots.iter_mut().enumerate() {
        *s = list.get(i).copied().unwrap_or(EMPTY);
    }
}

/// Builds the index over `vectors` (see the crate documentation).
pub(crate) fn build(
    vectors: mnemon_vector::MatrixView<'_>,
    params: &BuildParams,
    progress: &(dyn Fn(BuildProgress) + Sync),
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<IndexBytes, AnnError> {
    let (count, dims) = (vectors.rows(), vectors.dim());
    if dims == 0 || dims > kernel::MAX_DIMS {
        return Err(AnnError::InvalidParameter {
            what: format!("dims must be 1..={}, not {dims}", kernel::MAX_DIMS),
        });
    }
    if count >= u32::MAX as usize {
        return Err(AnnError::InvalidParameter {
            what: format!("an index holds fewer than {} rows, not {count}", u32::MAX),
        });
    }
    if params.m < 2 || params.m > 256 {
        return Err(AnnError::InvalidParameter {
            what: format!("m must be 2..=256, not {}", params.m),
        });
    }
    if params.ef_construction == 0 {
        return Err(AnnError::InvalidParameter {
            what: "ef_construction must be at least 1".into(),
        });
    }
    let (m, m0, stride) = (params.m, 2 * params.m + 1, code_stride(dims));

    // Quantise every row (and refuse NaN and infinities: they have no nearest neighbour).
    let mut codes = vec![0i8; count * stride];
    let mut scales = vec![0f32; count];
    codes
        .par_chunks_mut(stride)
        .zip(scales.par_iter_mut())
        .enumerate()
        .try_for_each(|(r, (c, s))| {
            let row = vectors.row(r).unwrap_or(&[]);
            if row.iter().any(|x| !x.is_finite()) {
                return Err(AnnError::NonFinite { row: r });
            }
            *s = quantise(row, c);
            Ok(())
        })?;
    let fingerprint = format::fingerprint(vectors);

    let levels: Vec<usize> = (0..count).map(|i| level_of(params.seed, i, m)).collect();
    let max_level = levels
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .min(MAX_LEVELS - 1);
    let upper: Vec<(Vec<u32>, Vec<u32>)> = (1..=max_level)
        .map(|l| {
            let nodes: Vec<u32> = (0..count)
                .filter(|&i| levels[i] >= l)
                .map(|i| i as u32)
                .collect();
            let adjacency = vec![EMPTY; nodes.len() * m];
            (nodes, adjacency)
        })
        .collect();
    let mut state = State {
        count,
        stride,
        codes,
        scales,
        m,
        m0,
        level0: vec![EMPTY; count * m0],
        upper,
        entry: 0,
        top: levels.first().copied().unwrap_or(0),
    };

    let mut inserted = count.min(1);
    progress(BuildProgress {
        inserted,
        total: count,
    });
    while inserted < count {
        if cancelled() {
            return Err(AnnError::Cancelled);
        }
        let batch = (inserted / BATCH_DIVISOR)
            .clamp(1, MAX_BATCH)
            .min(count - inserted);
        let range = inserted..inserted + batch;
        insert_batch(
            &mut state,
            range.clone(),
            &levels,
            params.ef_construction,
            cancelled,
        );
        if cancelled() {
            // The batch may have stopped half way: the graph is not worth finishing.
            return Err(AnnError::Cancelled);
        }
        // The new top: the highest new level, the lowest id among equals.
        if let Some(i) = range
            .clone()
            .filter(|&i| levels[i] > state.top)
            .max_by(|&a, &b| levels[a].cmp(&levels[b]).then(b.cmp(&a)))
        {
            state.entry = i as u32;
            state.top = levels[i];
        }
        inserted += batch;
        progress(BuildProgress {
            inserted,
            total: count,
        });
    }
    if cancelled() {
        return Err(AnnError::Cancelled);
    }
    repair(&mut state, params.ef_construction);

    let header = Header {
        dims: dims as u32,
        count: count as u32,
        m: m as u32,
        m0: m0 as u32,
        ef_construction: params.ef_construction.min(u32::MAX as usize) as u32,
        levels: state.top as u32,
        entry: state.entry,
        code_stride: stride as u32,
        seed: params.seed,
        fingerprint,
    };
    state.upper.truncate(state.top);
    Ok(format::write(
        &header,
        &state.codes,
        &state.scales,
        &state.level0,
        &state.upper,
    ))
}

/// Inserts the nodes of `range` (see the module documentation). Once `cancelled` says so, the
/// nodes not yet searched are skipped (a batch at 100,000 × 1,536 takes seconds): the caller
/// then drops the graph.
fn insert_batch(
    state: &mut State,
    range: std::ops::Range<usize>,
    levels: &[usize],
    ef_construction: usize,
    cancelled: &(dyn Fn() -> bool + Sync),
) {
    // 1. Every new node searches the frozen graph.
    let links: Vec<Vec<Vec<u32>>> = {
        let frozen = state.levels();
        let graph = state.graph(&frozen);
        range
            .clone()
            .into_par_iter()
            .map(|i| {
                let node = i as u32;
                if cancelled() {
                    return Vec::new();
                }
                let Some(codes) = graph.codes_of(node) else {
                    return Vec::new();
                };
                let query = Query::new(codes, graph.scales.get(i).copied().unwrap_or(0.0));
                let own_top = levels[i].min(state.top);
                let mut entries = vec![graph.descend(&query, own_top)];
                let mut per_level = vec![Vec::new(); own_top + 1];
                for level in (0..=own_top).rev() {
                    let found = graph
                        .search_level(
                            &query,
                            level,
                            &entries,
                            ef_construction,
                            &|_| true,
                            usize::MAX,
                        )
                        .map(|(found, _)| found)
                        .unwrap_or_default();
                    per_level[level] = graph.select(&found, state.m);
                    if !found.is_empty() {
                        entries = found;
                    }
                }
                per_level
            })
            .collect()
    };

    // 2. Their own lists, and the reverse edges they ask for, grouped by (level, target).
    let mut reverse: Vec<(usize, u32, u32)> = Vec::new();
    for (i, per_level) in range.clone().zip(&links) {
        for (level, list) in per_level.iter().enumerate() {
            fill(state.slots_mut(level, i as u32), list);
            reverse.extend(list.iter().map(|&j| (level, j, i as u32)));
        }
    }
    reverse.sort_unstable();
    let mut groups: Vec<(usize, u32, Vec<u32>)> = Vec::new();
    for (level, j, i) in reverse {
        match groups.last_mut() {
            Some((l, t, incoming)) if *l == level && *t == j => incoming.push(i),
            _ => groups.push((level, j, vec![i])),
        }
    }

    // 3. Each touched list rebuilt from its old entries and the incoming ones.
    let rebuilt: Vec<(usize, u32, Vec<u32>)> = {
        let frozen = state.levels();
        let graph = state.graph(&frozen);
        let (m, m0) = (state.m, state.m0);
        groups
            .into_par_iter()
            .map(|(level, j, incoming)| {
                let cap = if level == 0 { m0 - 1 } else { m };
                let old = graph.neighbours(level, j);
                let old = &old[..old.len().min(cap)];
                let mut all: Vec<u32> = old.iter().copied().filter(|&n| n != EMPTY).collect();
                all.extend(incoming);
                if all.len() <= cap {
                    return (level, j, all);
                }
                let mut scored: Vec<Cand> = all
                    .into_iter()
                    .map(|n| Cand {
                        score: graph.score_nodes(j, n),
                        node: n,
                    })
                    .collect();
                scored.sort_unstable_by(|a, b| b.cmp(a));
                (level, j, graph.select(&scored, cap))
            })
            .collect()
    };
    for (level, j, list) in rebuilt {
        fill(state.slots_mut(level, j), &list);
    }
}

/// Makes every node reachable on level 0 from the entry point (see the module documentation).
fn repair(state: &mut State, ef_construction: usize) {
    let count = state.count;
    if count == 0 {
        return;
    }
    let m0 = state.m0;
    let mut reachable = vec![false; count];
    let mut stack = Vec::new();
    let walk = |state: &State, reachable: &mut [bool], stack: &mut Vec<u32>, from: u32| {
        if reachable[from as usize] {
            return;
        }
        reachable[from as usize] = true;
        stack.push(from);
        while let Some(n) = stack.pop() {
            let start = n as usize * m0;
            for &next in &state.level0[start..start + m0] {
                if next != EMPTY && (next as usize) < count && !reachable[next as usize] {
                    reachable[next as usize] = true;
                    stack.push(next);
                }
            }
        }
    };
    walk(state, &mut reachable, &mut stack, state.entry);
    for u in 0..count {
        if reachable[u] {
            continue;
        }
        // The nearest reachable node with its repair slot free links to `u`.
        let donor = {
            let frozen = state.levels();
            let graph = state.graph(&frozen);
            let codes = graph.codes_of(u as u32).unwrap_or(&[]);
            let query = Query::new(codes, state.scales[u]);
            let entry = Cand {
                score: graph.score(&query, state.entry),
                node: state.entry,
            };
            let free = |n: u32| state.level0[n as usize * m0 + m0 - 1] == EMPTY;
            graph
                .search_level(
                    &query,
                    0,
                    &[entry],
                    ef_construction,
                    &|n| reachable[n as usize] && free(n),
                    usize::MAX,
                )
                .and_then(|(found, _)| found.first().map(|c| c.node))
                // Each repair uses one donor and reaches at least one more node, so a reachable
                // node with a free slot always exists.
                .or_else(|| (0..count as u32).find(|&n| reachable[n as usize] && free(n)))
        };
        if let Some(donor) = donor {
            state.level0[donor as usize * m0 + m0 - 1] = u as u32;
            walk(state, &mut reachable, &mut stack, u as u32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_distribution_and_the_seed() {
        let n = 100_000;
        let on_one = (0..n).filter(|&i| level_of(7, i, 16) >= 1).count();
        // Expected n / 16 = 6,250.
        assert!((5_500..7_000).contains(&on_one), "{on_one}");
        let a: Vec<usize> = (0..1000).map(|i| level_of(7, i, 16)).collect();
        let b: Vec<usize> = (0..1000).map(|i| level_of(8, i, 16)).collect();
        assert_ne!(a, b);
        assert_eq!(a, (0..1000).map(|i| level_of(7, i, 16)).collect::<Vec<_>>());
    }
}
