//! Search across sessions (docs/reference/memory.md#search-across-sessions): one recall by
//! cosine over every thread of a store's namespace that a [`ScopeFilter`] selects.
//!
//! What both backends share: the filter, the hit, the exact score (the per-thread recall's:
//! `f64` cosine over the stored `f32`s, `crate::exact`) and the bounded top-k that keeps only
//! `k` candidates in memory while the stored vectors stream past, so that no message body is
//! decoded before it is known to be a winner.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use mnemon_filter::{Dialect, Filter, Source, SqlParam};
use mnemon_types::Msg;
use serde::Serialize;

use crate::error::MemoryError;
use crate::retrieval::{RetrievalQuery, rank};
use crate::scope::Scope;

/// How a search ranks messages (docs/reference/memory.md#keyword-and-hybrid-search).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub enum SearchMode {
    /// By cosine between the request's query vector and each message's stored embedding
    /// (messages without one are skipped). Good for meaning, with a semantic embedder.
    #[default]
    Vector,
    /// By full-text relevance of the message's text (its content: the string, or the text
    /// blocks of a list) to the words of `text`, any of which may match: SQLite FTS5's BM25,
    /// PostgreSQL's `ts_rank` over a `simple` `tsvector`. The request's `query` is not used.
    /// Good for exact words: names, ids, codes, rare terms.
    Keyword {
        /// The words to look for (any punctuation separates them).
        text: String,
    },
    /// Reciprocal rank fusion of the vector ranking (of the request's `query`) and the keyword
    /// ranking (of `text`): each message scores `Σ weight / (k + rank)` over the rankings it
    /// appears in (rank 1 the best; `weights` gives the weights, `k` and how deep each ranking
    /// is read). Good when neither alone suffices: meaning from a semantic embedder, exact words
    /// from the text.
    Hybrid {
        /// The words of the keyword ranking.
        text: String,
        /// The fusion's parameters.
        weights: HybridWeights,
    },
}

/// The parameters of [`SearchMode::Hybrid`]'s reciprocal rank fusion.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HybridWeights {
    /// The vector ranking's weight (default 1).
    pub vector: f64,
    /// The keyword ranking's weight (default 1).
    pub keyword: f64,
    /// The fusion's constant `k` (default 60, as in Cormack et al.'s RRF): larger flattens the
    /// difference between the first ranks.
    pub k: f64,
    /// How many hits of each ranking are fused (default 100; at least the request's `top_k`;
    /// at most [`MAX_HYBRID_CANDIDATES`]). A message outside both rankings' first
    /// `candidates` cannot be a hit.
    pub candidates: usize,
}

/// The most messages a keyword ranking reads (docs/reference/memory.md#keyword-and-hybrid-search):
/// those having one of the words, live and in the selected threads, the newest first (the
/// most recently created thread first, each thread's latest message first). Relevance is
/// scored only for them, and a metadata filter applies to them, so a word found in every
/// message of a large namespace costs the same as one found in 10,000. When more messages
/// match, [`SearchResults::complete`] is `false`: an older match, not read, might have ranked
/// higher.
pub const MAX_KEYWORD_MATCHES: usize = 10_000;

/// What [`search_with`](crate::SqliteMemoryStore::search_with) of both stores returns: the hits,
/// and whether every matching message was ranked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchResults {
    /// The hits, best first.
    pub hits: Vec<SearchHit>,
    /// `false` when the keyword ranking (of a keyword or hybrid search) stopped at
    /// [`MAX_KEYWORD_MATCHES`] matching messages, the newest, and older ones also matched;
    /// `true` otherwise (every vector search is complete).
    pub complete: bool,
}

/// One keyword ranking: the best hits among the matching messages read, and whether they were
/// all the matching messages ([`MAX_KEYWORD_MATCHES`]).
pub(crate) struct KeywordRanking {
    /// The best hits, best first.
    pub(crate) hits: Vec<SearchHit>,
    /// Whether every matching message was read.
    pub(crate) complete: bool,
}

/// The most hits of each ranking a hybrid search fuses: every one of them is decoded (its body
/// read and parsed), so an unbounded depth would let one request decode a whole namespace.
pub const MAX_HYBRID_CANDIDATES: usize = 10_000;

impl Default for HybridWeights {
    fn default() -> Self {
        HybridWeights {
            vector: 1.0,
            keyword: 1.0,
            k: 60.0,
            candidates: 100,
        }
    }
}

impl HybridWeights {
    /// Refuses weights that cannot rank (negative or non-finite weights or `k`, both weights
    /// 0) and a depth over [`MAX_HYBRID_CANDIDATES`].
    pub(crate) fn check(&self) -> Result<(), MemoryError> {
        let ok = |x: f64| x.is_finite() && x >= 0.0;
        if !(ok(self.vector) && ok(self.keyword) && ok(self.k)) {
            return Err(MemoryError::InvalidQuery {
                reason: format!(
                    "hybrid weights must be finite and not negative (vector {}, keyword {}, k {})",
                    self.vector, self.keyword, self.k
                ),
            });
        }
        if self.vector == 0.0 && self.keyword == 0.0 {
            return Err(MemoryError::InvalidQuery {
                reason: "hybrid weights are both 0: give the vector or the keyword ranking a \
                         weight above 0 (or search by that mode alone)"
                    .into(),
            });
        }
        if self.candidates > MAX_HYBRID_CANDIDATES {
            return Err(MemoryError::InvalidQuery {
                reason: format!(
                    "hybrid candidates is {}; fuse at most {MAX_HYBRID_CANDIDATES} hits of each \
                     ranking",
                    self.candidates
                ),
            });
        }
        Ok(())
    }
}

/// The words of a keyword query, as both backends index a message's ([`crate::keyword_words`]),
/// at most 64 of them. None is [`MemoryError::InvalidQuery`].
pub(crate) fn keyword_terms(text: &str) -> Result<Vec<String>, MemoryError> {
    let terms: Vec<String> = crate::words::words(text).take(64).collect();
    if terms.is_empty() {
        return Err(MemoryError::InvalidQuery {
            reason: format!("a keyword search needs at least one word; {text:?} has none"),
        });
    }
    Ok(terms)
}

/// The FTS5 query matching any of `terms` (each quoted, so none is read as an operator).
#[cfg(feature = "sqlite")]
pub(crate) fn fts5_query(terms: &[String]) -> String {
    terms
        .iter()
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// The ranking `request.mode` asks for, from a store's two: `vector(request)` ranks by vector
/// (a request whose mode is [`SearchMode::Vector`]), `keyword(text, k)` the best `k` by the
/// words of `text`; hybrid reads each `candidates` deep (at least `top_k`) and [`fuse`]s them.
/// Both stores answer [`SearchRequest::mode`] through it, so the modes mean the same on each.
pub(crate) fn by_mode(
    request: &SearchRequest,
    vector: impl FnOnce(&SearchRequest) -> Result<Vec<SearchHit>, MemoryError>,
    keyword: impl FnOnce(&str, usize) -> Result<KeywordRanking, MemoryError>,
) -> Result<SearchResults, MemoryError> {
    match &request.mode {
        SearchMode::Vector => Ok(SearchResults {
            hits: vector(request)?,
            complete: true,
        }),
        SearchMode::Keyword { text } => {
            let ranking = keyword(text, request.top_k)?;
            Ok(SearchResults {
                hits: ranking.hits,
                complete: ranking.complete,
            })
        }
        SearchMode::Hybrid { text, weights } => {
            weights.check()?;
            let depth = weights.candidates.max(request.top_k);
            // A weight of 0 leaves its ranking out: not computed (no embedder needed for the
            // vector one), so none of its hits fill the result with a fused score of 0.
            let by_vector = if weights.vector > 0.0 {
                vector(&SearchRequest {
                    top_k: depth,
                    mode: SearchMode::Vector,
                    ..request.clone()
                })?
            } else {
                Vec::new()
            };
            let by_keyword = if weights.keyword > 0.0 {
                keyword(text, depth)?
            } else {
                KeywordRanking {
                    hits: Vec::new(),
                    complete: true,
                }
            };
            Ok(SearchResults {
                hits: fuse(by_vector, by_keyword.hits, weights, request.top_k),
                complete: by_keyword.complete,
            })
        }
    }
}

/// Reciprocal rank fusion of two rankings (best first), cut to `top_k`: each message (by
/// scope and id) scores `weight / (k + rank)` summed over the rankings it is in; ties keep
/// the order of the vector ranking, then of the keyword ranking. The hit keeps its scope,
/// index and message; its score is the fused one.
pub(crate) fn fuse(
    vector: Vec<SearchHit>,
    keyword: Vec<SearchHit>,
    weights: &HybridWeights,
    top_k: usize,
) -> Vec<SearchHit> {
    type Key = (Scope, String);
    let mut fused: Vec<(f64, usize, SearchHit)> = Vec::with_capacity(vector.len() + keyword.len());
    let mut position: std::collections::HashMap<Key, usize> = std::collections::HashMap::new();
    let rankings = [(vector, weights.vector), (keyword, weights.keyword)];
    let mut order = 0;
    for (ranking, weight) in rankings {
        for (rank, hit) in ranking.into_iter().enumerate() {
            let share = weight / (weights.k + (rank + 1) as f64);
            let key = (hit.scope.clone(), hit.message.id().to_owned());
            match position.get(&key) {
                Some(&at) => {
                    if let Some(entry) = fused.get_mut(at) {
                        entry.0 += share;
                    }
                }
                None => {
                    position.insert(key, fused.len());
                    fused.push((share, order, hit));
                    order += 1;
                }
            }
        }
    }
    fused.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    fused
        .into_iter()
        .take(top_k)
        .map(|(score, _, mut hit)| {
            hit.score = score;
            hit
        })
        .collect()
}

/// A search across sessions (docs/reference/memory.md#search-across-sessions): what
/// `search_with` of the SQLite and PostgreSQL stores takes.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// Which threads of the store's namespace are searched.
    pub within: ScopeFilter,
    /// The query: a vector, or a text or message the embedder turns into one.
    pub query: RetrievalQuery,
    /// How many hits at most.
    pub top_k: usize,
    /// Only messages this metadata filter selects are ranked (docs/reference/memory.md#filters
    /// names the fields): applied before the top-k cut, so a filtered top 10 has 10 hits
    /// whenever 10 messages match, however many closer ones do not (a keyword ranking applies
    /// it to the [`MAX_KEYWORD_MATCHES`] messages it reads, and says when it read fewer than
    /// all: [`SearchResults::complete`]).
    pub filter: Option<Filter>,
    /// How messages are ranked.
    pub mode: SearchMode,
    /// Scan every selected message exactly, never through a large thread's recall index
    /// (docs/reference/memory.md#the-recall-index; SQLite). Default false.
    pub exact: bool,
}

impl SearchRequest {
    /// A vector search of `top_k` hits for `query` within `within`, without a filter.
    pub fn new(within: ScopeFilter, query: RetrievalQuery, top_k: usize) -> Self {
        SearchRequest {
            within,
            query,
            top_k,
            filter: None,
            mode: SearchMode::Vector,
            exact: false,
        }
    }

    /// This request, keeping only the messages `filter` selects.
    pub fn with_filter(mut self, filter: Filter) -> Self {
        self.filter = Some(filter);
        self
    }
}

/// How a PostgreSQL filter reads a message row's body as `jsonb`: through
/// `memory_body_jsonb` (schema 10), since `jsonb` refuses a body holding U+0000, which a
/// message may.
const PG_BODY: &str = "memory_body_jsonb(m.body)";

/// The body as [`filter_sql`]'s wrapper parses it once per row.
const PG_PARSED_BODY: &str = "mb.b";

/// Where a filter path's first name lives in a message row (docs/reference/memory.md#filters).
/// `message` is the row's alias in the statement; `body` is what holds the body on PostgreSQL.
fn message_source(dialect: Dialect, root: &str, body: &str) -> Option<Source> {
    match (root, dialect) {
        // The id has its own column (and is the body's `id` too).
        ("id", _) => Some(Source::Column {
            expr: "m.msg_id".to_owned(),
            kind: mnemon_filter::ColumnKind::Text,
        }),
        // The marks, in the order they were given, as a JSON array (empty when none).
        ("marks", Dialect::Sqlite) => Some(Source::Json(
            "(SELECT json_group_array(mark) FROM (SELECT k.mark FROM memory_marks k
               WHERE k.thread_id = m.thread_id AND k.msg_id = m.msg_id ORDER BY k.pos))"
                .to_owned(),
        )),
        ("marks", Dialect::Postgres) => Some(Source::Json(
            "(SELECT COALESCE(jsonb_agg(k.mark ORDER BY k.pos), '[]'::jsonb) FROM memory_marks k
               WHERE k.thread_id = m.thread_id AND k.msg_id = m.msg_id)"
                .to_owned(),
        )),
        // The vector is not a field to filter on (on PostgreSQL it is not even in the body).
        ("embedding", _) => None,
        // Everything else is a member of the message's JSON body: name, role, content,
        // timestamp, metadata, url and every extra field.
        (_, Dialect::Sqlite) => Some(Source::Member("m.body".to_owned())),
        (_, Dialect::Postgres) => Some(Source::Member(body.to_owned())),
    }
}

/// The SQL of `filter` over a message row `m`, its values appended to `params` (numbered after
/// those already there); a field no message has is [`MemoryError::InvalidFilter`].
pub(crate) fn filter_sql(
    filter: &Filter,
    dialect: Dialect,
    params: &mut Vec<SqlParam>,
) -> Result<String, MemoryError> {
    let first_param = params.len();
    let sql = filter_sql_reading(filter, dialect, params, PG_BODY)?;
    if dialect != Dialect::Postgres || sql.matches(PG_BODY).nth(1).is_none() {
        return Ok(sql);
    }
    // The body read more than once (each condition on a body field reads it, some twice or
    // three times): PostgreSQL does not share repeated expressions, so each read parsed the
    // whole body again, for every row checked (a filter of a thousand conditions parsed each
    // row a thousand times). Parsed once per row instead, in a subquery kept apart from the
    // statement by `OFFSET 0` so that its one column is computed once.
    params.truncate(first_param);
    let sql = filter_sql_reading(filter, dialect, params, PG_PARSED_BODY)?;
    Ok(format!(
        "(SELECT {sql} FROM (SELECT {PG_BODY} AS b OFFSET 0) AS mb)"
    ))
}

/// [`filter_sql`] with the body (on PostgreSQL) read as `body`.
fn filter_sql_reading(
    filter: &Filter,
    dialect: Dialect,
    params: &mut Vec<SqlParam>,
    body: &str,
) -> Result<String, MemoryError> {
    let resolver = |root: &str| message_source(dialect, root, body);
    filter
        .to_sql(dialect, &resolver, params)
        .map_err(|e| MemoryError::InvalidFilter {
            detail: match e {
                mnemon_filter::FilterError::UnknownField { at, field } => format!(
                    "at {at}: messages have no field {field:?} to filter on (the fields are id, \
                     marks, name, role, content, timestamp, metadata and any extra field; \
                     docs/reference/memory.md#filters)"
                ),
                other => other.to_string(),
            },
        })
}

/// Which threads a search covers: each given field must equal the thread's; a field left `None`
/// matches any value, absent included. [`ScopeFilter::all`] is every thread of the namespace;
/// `ScopeFilter::user("u1")` every thread of user `u1` (whatever its agent and session; not
/// those of `u10`: fields are compared whole, never as string prefixes); `.agent("a")` narrows
/// it to agent `a`. A search never leaves the store's namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct ScopeFilter {
    /// The user every selected thread has, or any.
    pub user_id: Option<String>,
    /// The agent every selected thread has, or any.
    pub agent_id: Option<String>,
    /// The session every selected thread has, or any.
    pub session_id: Option<String>,
}

impl ScopeFilter {
    /// Every thread of the namespace.
    pub fn all() -> Self {
        ScopeFilter::default()
    }

    /// Every thread of user `user_id`.
    pub fn user(user_id: impl Into<String>) -> Self {
        ScopeFilter {
            user_id: Some(user_id.into()),
            ..ScopeFilter::default()
        }
    }

    /// This filter, narrowed to agent `agent_id`.
    pub fn agent(mut self, agent_id: impl Into<String>) -> Self {
        self.agent_id = Some(agent_id.into());
        self
    }

    /// This filter, narrowed to session `session_id`.
    pub fn session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// Whether the thread of `scope` is selected.
    pub fn matches(&self, scope: &Scope) -> bool {
        let field = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|w| have.as_ref() == Some(w))
        };
        field(&self.user_id, &scope.user_id)
            && field(&self.agent_id, &scope.agent_id)
            && field(&self.session_id, &scope.session_id)
    }

    /// The stored column each given field must equal (`None`: any); `Some("")` is
    /// [`MemoryError::InvalidScope`], as in a [`Scope`], since no thread can have it.
    pub(crate) fn columns(&self) -> Result<[Option<&str>; 3], MemoryError> {
        fn column<'a>(
            value: &'a Option<String>,
            field: &str,
        ) -> Result<Option<&'a str>, MemoryError> {
            match value.as_deref() {
                Some("") => Err(MemoryError::InvalidScope {
                    field: field.into(),
                }),
                other => Ok(other),
            }
        }
        Ok([
            column(&self.user_id, "user_id")?,
            column(&self.agent_id, "agent_id")?,
            column(&self.session_id, "session_id")?,
        ])
    }
}

/// One message found by a search across sessions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    /// The thread holding it.
    pub scope: Scope,
    /// Its position in its thread (0-based, as
    /// [`Retrieved::index`](crate::Retrieved::index)).
    pub index: usize,
    /// Its cosine with the query, exactly as the thread's own recall scores it.
    pub score: f64,
    /// The message.
    pub message: Msg,
}

/// The exact cosine of the per-thread recall (`crate::retrieval`'s scorer): `f64` over the
/// `f32`s, in `crate::exact`'s fixed order.
#[cfg(any(test, feature = "postgres"))]
pub(crate) fn cosine(query: &[f32], query_norm: f64, embedding: &[f32]) -> f64 {
    use crate::exact;
    exact::cosine_with_norms(
        exact::dot(query, embedding),
        query_norm,
        exact::norm(embedding),
    )
}

/// A candidate's place in the result: the score (as the per-thread recall ranks it: highest
/// first, NaN last), then its thread's place in the search's thread order, then its index.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    pub(crate) score: f64,
    /// The thread's position in the search's sorted thread list.
    pub(crate) thread: usize,
    pub(crate) index: usize,
    /// Where the row is (a seq), for reading the winners.
    pub(crate) seq: i64,
}

impl Candidate {
    /// Before `other` in the result (`Less`), as the per-thread recall's `rank` orders one
    /// thread's messages, threads in their list order on ties.
    pub(crate) fn order(&self, other: &Candidate) -> Ordering {
        rank(&(self.score, 0), &(other.score, 0))
            .then(self.thread.cmp(&other.thread))
            .then(self.index.cmp(&other.index))
    }
}

/// Max-heap by result order: the top is the worst kept candidate.
struct Worst(Candidate);

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Worst {}

impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.order(&other.0)
    }
}

/// The best `k` candidates offered, in `k` entries of memory.
pub(crate) struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
}

impl TopK {
    pub(crate) fn new(k: usize) -> Self {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k.min(4096).saturating_add(1)),
        }
    }

    /// Whether `candidate` would be kept if offered now: the bar a filter must be checked for.
    pub(crate) fn admits(&self, candidate: &Candidate) -> bool {
        if self.k == 0 {
            return false;
        }
        self.heap.len() < self.k
            || self
                .heap
                .peek()
                .is_some_and(|worst| candidate.order(&worst.0) == Ordering::Less)
    }

    pub(crate) fn offer(&mut self, candidate: Candidate) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(Worst(candidate));
        } else if let Some(mut worst) = self.heap.peek_mut()
            && candidate.order(&worst.0) == Ordering::Less
        {
            *worst = Worst(candidate);
        }
    }

    /// The kept candidates, best first.
    pub(crate) fn into_sorted(self) -> Vec<Candidate> {
        let mut kept: Vec<Candidate> = self.heap.into_iter().map(|w| w.0).collect();
        kept.sort_by(Candidate::order);
        kept
    }
}

/// The error for a stored embedding whose length differs from the query's, as the per-thread
/// recall gives it.
pub(crate) fn dimension_mismatch(id: String, expected: usize, found: usize) -> MemoryError {
    MemoryError::DimensionMismatch {
        id,
        expected,
        found,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A hybrid search's depth is bounded: each fused hit is decoded.
    #[test]
    fn hybrid_candidates_are_bounded() {
        let at = |candidates| HybridWeights {
            candidates,
            ..HybridWeights::default()
        };
        assert!(at(MAX_HYBRID_CANDIDATES).check().is_ok());
        match at(MAX_HYBRID_CANDIDATES + 1).check() {
            Err(MemoryError::InvalidQuery { reason }) => {
                assert!(reason.contains("at most 10000"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// A weight of 0 leaves its ranking out (docs/reference/memory.md#keyword-and-hybrid-search):
    /// it is not computed (no embedder needed, no dimension to match) and none of its hits
    /// fill the result; both at 0 is refused. Before, the ranking was computed and its hits
    /// came back with a fused score of 0.
    #[test]
    fn a_zero_weight_leaves_its_ranking_out() {
        use std::sync::Arc;
        let factory = mnemon_types::MsgFactory::new(
            Arc::new(mnemon_types::msg::SequentialIds::new()),
            Arc::new(mnemon_types::msg::FixedClock::new("2026-01-01 00:00:00")),
        );
        let hit = |id: &str| SearchHit {
            scope: Scope::default(),
            index: 0,
            score: 1.0,
            message: factory.msg("u", id).id(id).build().unwrap(),
        };
        let hybrid = |vector: f64, keyword: f64| SearchRequest {
            mode: SearchMode::Hybrid {
                text: "words".into(),
                weights: HybridWeights {
                    vector,
                    keyword,
                    ..HybridWeights::default()
                },
            },
            ..SearchRequest::new(ScopeFilter::all(), RetrievalQuery::Text("q".into()), 10)
        };
        let keyword_only = by_mode(
            &hybrid(0.0, 1.0),
            |_| panic!("the vector ranking was computed"),
            |_, _| {
                Ok(KeywordRanking {
                    hits: vec![hit("k1"), hit("k2")],
                    complete: false,
                })
            },
        )
        .unwrap();
        let ids: Vec<&str> = keyword_only.hits.iter().map(|h| h.message.id()).collect();
        assert_eq!(ids, ["k1", "k2"]);
        assert!(!keyword_only.complete);
        let vector_only = by_mode(
            &hybrid(1.0, 0.0),
            |_| Ok(vec![hit("v1")]),
            |_, _| panic!("the keyword ranking was computed"),
        )
        .unwrap();
        let ids: Vec<&str> = vector_only.hits.iter().map(|h| h.message.id()).collect();
        assert_eq!(ids, ["v1"]);
        // Nothing left out of the keyword ranking: complete.
        assert!(vector_only.complete);
        let neither = by_mode(
            &hybrid(0.0, 0.0),
            |_| Ok(vec![]),
            |_, _| {
                Ok(KeywordRanking {
                    hits: vec![],
                    complete: true,
                })
            },
        );
        assert!(
            matches!(&neither, Err(MemoryError::InvalidQuery { reason }) if reason.contains("above 0")),
            "{neither:?}"
        );
    }

    fn candidate(score: f64, thread: usize, index: usize) -> Candidate {
        Candidate {
            score,
            thread,
            index,
            seq: 0,
        }
    }

    proptest! {
        /// The heap keeps exactly the first `k` of a full sort, in order.
        #[test]
        fn top_k_is_the_head_of_a_full_sort(
            scores in proptest::collection::vec(
                prop_oneof![Just(f64::NAN), Just(0.5), -1.0f64..1.0], 0..200),
            k in 0usize..50,
        ) {
            let all: Vec<Candidate> = scores
                .iter()
                .enumerate()
                .map(|(i, &s)| candidate(s, i % 3, i))
                .collect();
            let mut top = TopK::new(k);
            for c in &all {
                top.offer(*c);
            }
            let mut sorted = all.clone();
            sorted.sort_by(Candidate::order);
            sorted.truncate(k);
            let key = |c: &Candidate| (c.score.to_bits(), c.thread, c.index);
            let got: Vec<_> = top.into_sorted().iter().map(key).collect();
            let want: Vec<_> = sorted.iter().map(key).collect();
            prop_assert_eq!(got, want);
        }
    }

    proptest! {
        /// Offering only what `admits` accepts keeps exactly what offering everything keeps:
        /// the filtered search's shortcut changes no result.
        #[cfg(feature = "sqlite")]
        #[test]
        fn admits_is_the_offer_bar(
            scores in proptest::collection::vec(
                prop_oneof![Just(f64::NAN), Just(0.5), -1.0f64..1.0], 0..200),
            k in 0usize..20,
        ) {
            let mut all = TopK::new(k);
            let mut admitted = TopK::new(k);
            for (i, &s) in scores.iter().enumerate() {
                let c = candidate(s, i % 4, i);
                all.offer(c);
                if admitted.admits(&c) {
                    admitted.offer(c);
                }
            }
            let key = |c: &Candidate| (c.score.to_bits(), c.thread, c.index);
            let a: Vec<_> = all.into_sorted().iter().map(key).collect();
            let b: Vec<_> = admitted.into_sorted().iter().map(key).collect();
            prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn order_is_score_then_thread_then_index_with_nan_last() {
        let mut v = [
            candidate(f64::NAN, 0, 0),
            candidate(0.5, 1, 0),
            candidate(0.5, 0, 7),
            candidate(0.9, 2, 3),
            candidate(0.5, 0, 2),
        ];
        v.sort_by(Candidate::order);
        let got: Vec<(usize, usize)> = v.iter().map(|c| (c.thread, c.index)).collect();
        assert_eq!(got, [(2, 3), (0, 2), (0, 7), (1, 0), (0, 0)]);
    }

    /// A PostgreSQL filter parsed each message's body once per read of a body field (each
    /// condition one to three reads), for every row checked: found by a review. Read more than
    /// once, it is parsed once per row in a subquery; read once, it stays inline.
    #[test]
    fn a_postgres_filter_parses_the_body_once() {
        let filter: Filter = serde_json::from_value(serde_json::json!({"or": [
            {"eq": {"path": "role", "value": "user"}},
            {"in": {"path": "metadata.topic", "values": ["a", "b"]}},
            {"gt": {"path": "metadata.n", "value": 3}},
        ]}))
        .unwrap();
        let mut params = Vec::new();
        let sql = filter_sql(&filter, Dialect::Postgres, &mut params).unwrap();
        assert_eq!(sql.matches(PG_BODY).count(), 1, "{sql}");
        assert!(sql.starts_with("(SELECT "), "{sql}");
        let mut again = Vec::new();
        filter_sql_reading(&filter, Dialect::Postgres, &mut again, PG_PARSED_BODY).unwrap();
        assert_eq!(params, again, "the parameters of the wrapped text");
        // One read: no subquery.
        let one: Filter =
            serde_json::from_value(serde_json::json!({"eq": {"path": "role", "value": "user"}}))
                .unwrap();
        let mut params = vec![SqlParam::Integer(7)];
        let sql = filter_sql(&one, Dialect::Postgres, &mut params).unwrap();
        assert_eq!(sql.matches(PG_BODY).count(), 1, "{sql}");
        assert!(!sql.contains(PG_PARSED_BODY), "{sql}");
        assert_eq!(params.first(), Some(&SqlParam::Integer(7)), "{params:?}");
        // SQLite's body is a column.
        let mut params = Vec::new();
        let sql = filter_sql(&filter, Dialect::Sqlite, &mut params).unwrap();
        assert!(!sql.contains(PG_BODY), "{sql}");
    }

    #[test]
    fn filters_compare_whole_fields() {
        let scope = |u: Option<&str>, a: Option<&str>| Scope {
            user_id: u.map(str::to_owned),
            agent_id: a.map(str::to_owned),
            session_id: Some("s".into()),
        };
        assert!(ScopeFilter::all().matches(&scope(None, None)));
        assert!(ScopeFilter::user("u1").matches(&scope(Some("u1"), None)));
        assert!(!ScopeFilter::user("u1").matches(&scope(Some("u10"), None)));
        assert!(!ScopeFilter::user("u1").matches(&scope(None, None)));
        assert!(
            ScopeFilter::user("u1")
                .agent("a")
                .matches(&scope(Some("u1"), Some("a")))
        );
        assert!(
            !ScopeFilter::user("u1")
                .agent("a")
                .matches(&scope(Some("u1"), None))
        );
        assert!(ScopeFilter::all().session("s").matches(&scope(None, None)));
        assert!(matches!(
            ScopeFilter::user("").columns(),
            Err(MemoryError::InvalidScope { .. })
        ));
        assert_eq!(
            ScopeFilter::user("u").agent("a").columns().unwrap(),
            [Some("u"), Some("a"), None]
        );
    }
}
