//! The graph both the builder and the persisted view walk: int8 codes, their scales, the
//! level-0 adjacency and the upper levels, all as flat slices (the persisted sections, or the
//! builder's vectors).
//!
//! Every neighbour id read from a slice is bounds-checked before use, so a graph that was not
//! verified (or that a bug damaged) can cost recall, never memory safety or a panic.

use std::cell::RefCell;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::kernel::{Prepared, dot_codes, prefetch};

/// An empty adjacency slot.
pub(crate) const EMPTY: u32 = u32::MAX;

/// The most slots a node has on any level (level 0: 2·m + 1 with m ≤ 256).
pub(crate) const MAX_SLOTS: usize = 513;

/// Cache lines of a row of codes requested ahead (the hardware prefetcher follows on).
const PREFETCH_LINES: usize = 8;

/// Neighbours whose codes are requested before the walk scores them.
const PREFETCH_AHEAD: usize = 2;

/// One upper level: the nodes present on it (ascending ids) and `m` slots for each.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Level<'a> {
    pub nodes: &'a [u32],
    pub adjacency: &'a [u32],
}

/// A borrowed graph.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Graph<'a> {
    pub count: usize,
    pub code_stride: usize,
    pub codes: &'a [i8],
    pub scales: &'a [f32],
    /// `m0` slots per node.
    pub level0: &'a [u32],
    pub m0: usize,
    /// Slots per node on the upper levels.
    pub m: usize,
    /// `upper[l - 1]` is level `l`.
    pub upper: &'a [Level<'a>],
    pub entry: u32,
}

/// A candidate: approximate score and node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cand {
    pub score: f32,
    pub node: u32,
}

impl Eq for Cand {}

impl Ord for Cand {
    /// Higher score first; among equal scores the lower id is "greater", so results are
    /// deterministic.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.node.cmp(&self.node))
    }
}

impl PartialOrd for Cand {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A query in code space, prepared for the kernel.
pub(crate) struct Query<'q> {
    pub codes: &'q [i8],
    pub scale: f32,
    prepared: Prepared,
}

impl<'q> Query<'q> {
    /// A query with these padded codes and scale.
    pub fn new(codes: &'q [i8], scale: f32) -> Self {
        Query {
            codes,
            scale,
            prepared: Prepared::new(codes),
        }
    }
}

impl<'a> Graph<'a> {
    /// The codes of `node`, or `None` when out of range.
    #[inline]
    pub fn codes_of(&self, node: u32) -> Option<&'a [i8]> {
        let start = (node as usize).checked_mul(self.code_stride)?;
        self.codes.get(start..start.checked_add(self.code_stride)?)
    }

    /// The approximate dot product of the query and `node` (`f32::MIN` for an id out of range,
    /// which a verified graph never holds).
    #[inline]
    pub fn score(&self, query: &Query<'_>, node: u32) -> f32 {
        match (self.codes_of(node), self.scales.get(node as usize)) {
            (Some(codes), Some(&scale)) => {
                query.prepared.dot(query.codes, codes) as f32 * query.scale * scale
            }
            _ => f32::MIN,
        }
    }

    /// The approximate dot product of two nodes (one product: not worth preparing a query).
    #[inline]
    pub fn score_nodes(&self, a: u32, b: u32) -> f32 {
        match (
            self.codes_of(a),
            self.scales.get(a as usize),
            self.codes_of(b),
            self.scales.get(b as usize),
        ) {
            (Some(ca), Some(&sa), Some(cb), Some(&sb)) => dot_codes(ca, cb) as f32 * sa * sb,
            _ => f32::MIN,
        }
    }

    /// The slots of `node` on `level` (empty when the node is not on it).
    #[inline]
    pub fn neighbours(&self, level: usize, node: u32) -> &'a [u32] {
        if level == 0 {
            let start = node as usize * self.m0;
            return self.level0.get(start..start + self.m0).unwrap_or(&[]);
        }
        let Some(l) = self.upper.get(level - 1) else {
            return &[];
        };
        match l.nodes.binary_search(&node) {
            Ok(slot) => {
                let start = slot * self.m;
                l.adjacency.get(start..start + self.m).unwrap_or(&[])
            }
            Err(_) => &[],
        }
    }

    /// Hints the CPU to fetch the start of `node`'s codes (up to [`PREFETCH_LINES`] cache
    /// lines): the walk scores them a moment later. Measured at 100,000 × 1,536: no prefetch is
    /// about 30% slower per query, and 2, 6 or all 24 lines are within the noise of each other.
    #[inline]
    fn prefetch(&self, node: u32) {
        if let Some(codes) = self.codes_of(node) {
            prefetch(codes, PREFETCH_LINES);
        }
    }

    /// Greedy descent on one upper level: the best node reachable by always moving to a better
    /// neighbour.
    pub fn greedy(&self, query: &Query<'_>, level: usize, mut best: Cand) -> Cand {
        loop {
            let mut moved = false;
            for &n in self.neighbours(level, best.node) {
                if n == EMPTY || n as usize >= self.count {
                    continue;
                }
                let c = Cand {
                    score: self.score(query, n),
                    node: n,
                };
                if c > best {
                    best = c;
                    moved = true;
                }
            }
            if !moved {
                return best;
            }
        }
    }

    /// The entry candidate for level `stop` after greedy descent from the top.
    pub fn descend(&self, query: &Query<'_>, stop: usize) -> Cand {
        let mut best = Cand {
            score: self.score(query, self.entry),
            node: self.entry,
        };
        for level in (stop + 1..=self.upper.len()).rev() {
            best = self.greedy(query, level, best);
        }
        best
    }

    /// Beam search on `level` from `entries`: up to `ef` nodes for which `visible` holds, best
    /// first, and the number of nodes scored (entries included). Invisible nodes are walked
    /// through but never returned. Stops early, returning `None`, once more than `visit_budget`
    /// nodes have been scored (the caller then scans exactly instead).
    pub fn search_level<F>(
        &self,
        query: &Query<'_>,
        level: usize,
        entries: &[Cand],
        ef: usize,
        visible: &F,
        visit_budget: usize,
    ) -> Option<(Vec<Cand>, usize)>
    where
        F: Fn(u32) -> bool + ?Sized,
    {
        VISITED.with(|cell| match cell.try_borrow_mut() {
            Ok(mut visited) => self.search_level_with(
                &mut visited,
                query,
                level,
                entries,
                ef,
                visible,
                visit_budget,
            ),
            // A `visible` predicate that itself searches: give the inner search its own set.
            Err(_) => self.search_level_with(
                &mut Visited::default(),
                query,
                level,
                entries,
                ef,
                visible,
                visit_budget,
            ),
        })
    }

    /// [`Graph::search_level`] with an explicit visited set.
    #[allow(clippy::too_many_arguments)]
    fn search_level_with<F>(
        &self,
        visited: &mut Visited,
        query: &Query<'_>,
        level: usize,
        entries: &[Cand],
        ef: usize,
        visible: &F,
        visit_budget: usize,
    ) -> Option<(Vec<Cand>, usize)>
    where
        F: Fn(u32) -> bool + ?Sized,
    {
        {
            visited.reset(self.count);
            // A beam never holds more than the index's rows, whatever `ef` was asked for.
            let room = ef.min(self.count);
            let mut candidates: BinaryHeap<Cand> = BinaryHeap::with_capacity(room * 2);
            let mut results: BinaryHeap<Reverse<Cand>> = BinaryHeap::with_capacity(room + 1);
            let mut scored = 0usize;
            for &e in entries {
                if e.node as usize >= self.count || !visited.insert(e.node) {
                    continue;
                }
                scored += 1;
                candidates.push(e);
                if visible(e.node) {
                    results.push(Reverse(e));
                    if results.len() > ef {
                        results.pop();
                    }
                }
            }
            while let Some(c) = candidates.pop() {
                if results.len() >= ef && results.peek().is_some_and(|w| c < w.0) {
                    break;
                }
                // The unvisited neighbours, then scored with the codes of the one two ahead
                // already on their way from memory.
                let mut fresh = [0u32; MAX_SLOTS];
                let mut len = 0;
                for &n in self.neighbours(level, c.node) {
                    if n != EMPTY
                        && (n as usize) < self.count
                        && len < MAX_SLOTS
                        && visited.insert(n)
                    {
                        fresh[len] = n;
                        len += 1;
                    }
                }
                for &n in fresh.iter().take(len.min(PREFETCH_AHEAD)) {
                    self.prefetch(n);
                }
                for k in 0..len {
                    if let Some(&ahead) = fresh
                        .get(k + PREFETCH_AHEAD)
                        .filter(|_| k + PREFETCH_AHEAD < len)
                    {
                        self.prefetch(ahead);
                    }
                    let n = fresh[k];
                    scored += 1;
                    let cand = Cand {
                        score: self.score(query, n),
                        node: n,
                    };
                    let worst = results.peek().map(|w| w.0);
                    if results.len() < ef || worst.is_some_and(|w| cand > w) {
                        candidates.push(cand);
                        if visible(n) {
                            results.push(Reverse(cand));
                            if results.len() > ef {
                                results.pop();
                            }
                        }
                    }
                }
                if scored > visit_budget {
                    return None;
                }
            }
            let mut out: Vec<Cand> = results.into_iter().map(|r| r.0).collect();
            out.sort_unstable_by(|a, b| b.cmp(a));
            Some((out, scored))
        }
    }

    /// The HNSW neighbour-selection heuristic: walks `candidates` best first (they must be sorted
    /// so) and keeps one only when it is closer to the base than to every kept neighbour, up to
    /// `cap`. Diverse neighbours keep the graph navigable between clusters.
    pub fn select(&self, candidates: &[Cand], cap: usize) -> Vec<u32> {
        let mut kept: Vec<Cand> = Vec::with_capacity(cap);
        for &c in candidates {
            if kept.len() >= cap {
                break;
            }
            if kept
                .iter()
                .all(|k| self.score_nodes(c.node, k.node) < c.score)
            {
                kept.push(c);
            }
        }
        kept.into_iter().map(|c| c.node).collect()
    }
}

/// Generation-marked visited set, one per thread and reused between searches.
#[derive(Default)]
pub(crate) struct Visited {
    marks: Vec<u32>,
    generation: u32,
}

impl Visited {
    fn reset(&mut self, count: usize) {
        if self.marks.len() < count {
            self.marks.resize(count, 0);
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.marks.fill(0);
            self.generation = 1;
        }
    }

    /// Marks `node`; false when it was already marked (or out of range).
    #[inline]
    fn insert(&mut self, node: u32) -> bool {
        match self.marks.get_mut(node as usize) {
            Some(m) if *m != self.generation => {
                *m = self.generation;
                true
            }
            _ => false,
        }
    }
}

thread_local! {
    static VISITED: RefCell<Visited> = const {
        RefCell::new(Visited { marks: Vec::new(), generation: 0 })
    };
}
