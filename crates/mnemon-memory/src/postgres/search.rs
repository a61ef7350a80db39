//! Search across sessions on PostgreSQL (docs/reference/memory.md#search-across-sessions).
//!
//! With pgvector, when every message of the selected threads has an indexable embedding of the
//! query's dimension (the threads' counters say so without a count: `live` and `memory_dims`),
//! the HNSW index of that dimension shortlists across every selected thread at once, joined to
//! the scope filter, beside the rows still waiting for the background indexer, which are scored
//! exactly; the shortlist is re-scored exactly. The index is shared by every thread and
//! namespace and filtered after its search, so a shortlist holding fewer than `top_k` of the
//! selected messages is retried at pgvector's longest `ef_search`, and then the exact scan
//! answers: a search never returns fewer than `top_k` when that many exist. Without pgvector, or
//! when the counters rule the index out, or with a filter, the exact scan scores every selected
//! message's stored `f32`s (never its body) through a bounded top-k, from the store's in-memory
//! copy of each thread's vectors at the thread's current rev (`crate::vector_scan`; read into it
//! from the snapshot when missing or stale); a filter is checked, one indexed lookup each, only
//! for the rows that would enter the top `k` as it stands, instead of on every row.

use std::collections::HashMap;

use mnemon_filter::{Dialect, SqlParam};
use mnemon_types::Embedder;
use postgres::Transaction;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;

use super::{
    HNSW_MAX_DIM, HNSW_MAX_EF_SEARCH, PENDING_SCAN_MAX, PgVector, PostgresMemoryStore,
    RESCORE_MARGIN, StoredFloats, VectorMode, corrupt, index_sql, interned, message_columns,
    model_mismatch, pg_error, row_entry, seq_key, snapshot,
};
use crate::error::MemoryError;
use crate::exact;
use crate::retrieval::{RetrievalQuery, query_vector};
use crate::scope::Scope;
use crate::search::{
    Candidate, KeywordRanking, MAX_KEYWORD_MATCHES, ScopeFilter, SearchHit, SearchRequest,
    SearchResults, TopK, by_mode, cosine, dimension_mismatch, filter_sql, keyword_terms,
};
use crate::vector_scan::{self, Scored, ThreadVectors};

/// The threads a filter selects (`$1` namespace; `$2`–`$4` user, agent, session or NULL for
/// any), with their live count and, with pgvector, how many of their messages are indexable at
/// dimension `$5`.
const THREADS_WITH_DIMS_SQL: &str = "SELECT t.thread_id, t.user_id, t.agent_id, t.session_id,
        t.live, COALESCE(d.n, 0), t.next_expiry, t.rev
 FROM memory_threads t
 LEFT JOIN memory_dims d ON d.thread_id = t.thread_id AND d.dim = $5
 WHERE t.namespace = $1 AND ($2::text IS NULL OR t.user_id = $2)
   AND ($3::text IS NULL OR t.agent_id = $3) AND ($4::text IS NULL OR t.session_id = $4)";

/// [`THREADS_WITH_DIMS_SQL`] without the vector tables (no `$5`).
const THREADS_SQL: &str = "SELECT t.thread_id, t.user_id, t.agent_id, t.session_id, t.live,
        0::bigint, t.next_expiry, t.rev
 FROM memory_threads t
 WHERE t.namespace = $1 AND ($2::text IS NULL OR t.user_id = $2)
   AND ($3::text IS NULL OR t.agent_id = $3) AND ($4::text IS NULL OR t.session_id = $4)";

/// The filter of the exact scan and the shortlist, on `t` (`$1`–`$4` as above).
const FILTER: &str = "t.namespace = $1 AND ($2::text IS NULL OR t.user_id = $2)
   AND ($3::text IS NULL OR t.agent_id = $3) AND ($4::text IS NULL OR t.session_id = $4)";

/// A filter's bound value, as the fragment's casts expect it.
fn pg_param(param: SqlParam) -> Box<dyn ToSql + Sync> {
    match param {
        SqlParam::Text(text) => Box::new(text),
        SqlParam::Integer(n) => Box::new(n),
        SqlParam::Real(x) => Box::new(x),
    }
}

/// The shortlist: the selected threads' indexed messages of dimension `dim` closest to `$5`
/// through its HNSW index, the closest `$6` by pgvector's distance, then every selected message
/// waiting for the background indexer (up to [`PENDING_SCAN_MAX`]; one more says too many),
/// read above each thread's pending watermark (`pending_from`, below every pending row: the
/// moved rows' dead entries in the pending index lie under it; docs/postgres.md#the-pending-watermark).
/// Each row: thread, seq, vector (NULL for a pending one: read afterwards, only when they are
/// few enough to score), whether pending. The dimension is in the text: the partial
/// index is chosen only when its predicate appears literally.
fn shortlist_sql(dim: usize) -> &'static str {
    let scan_limit = PENDING_SCAN_MAX + 1;
    interned(format!(
        "(SELECT m.thread_id, m.seq, m.embedding_v, false
          FROM memory_messages m JOIN memory_threads t ON t.thread_id = m.thread_id
          WHERE m.embedding_dim = {dim} AND {FILTER}
          ORDER BY m.embedding_v::vector({dim}) <=> $5::vector({dim})
          LIMIT $6)
         UNION ALL
         (SELECT m.thread_id, m.seq, NULL::vector, true
          FROM memory_messages m JOIN memory_threads t ON t.thread_id = m.thread_id
          WHERE m.pending_dim = {dim} AND m.seq > t.pending_from AND {FILTER}
          LIMIT {scan_limit})"
    ))
}

/// The statement of [`read_winners`]: `$1` the threads, `$2` the seqs (pairwise), `$3` the
/// clock's now. Each row: the message's columns, its seq, its thread, its index (as the
/// per-thread read computes it: gaps and expired rows before it do not count).
fn winners_sql(vectors: bool) -> &'static str {
    interned(format!(
        "SELECT {}, m.seq, m.thread_id, {}
         FROM unnest($1::bigint[], $2::bigint[]) AS w(thread_id, seq)
         JOIN memory_messages m ON m.thread_id = w.thread_id AND m.seq = w.seq
         CROSS JOIN LATERAL (SELECT min(seq) AS lo FROM memory_messages
                             WHERE thread_id = w.thread_id) AS f",
        message_columns(vectors),
        index_sql("m.thread_id")
    ))
}

impl PostgresMemoryStore {
    /// Before the messages table's first `ANALYZE` (a namespace just imported: autovacuum
    /// analyzes only after its naptime, a minute by default) the planner guesses, and a keyword
    /// search over 100,000 matching messages took 77 ms instead of 13, a hybrid one 119 instead
    /// of 33 (docs/reference/inspector.md#page-times). The first search of a store looks for
    /// statistics, and when there are none asks for an `ANALYZE` of the memory tables on a
    /// thread and connection of its own, so that the searches after it plan with them. Once per
    /// store: afterwards autovacuum keeps them.
    fn ensure_statistics(&self, tx: &mut Transaction<'_>) -> Result<(), MemoryError> {
        use std::sync::atomic::Ordering;
        if self.statistics_checked.load(Ordering::Relaxed) {
            return Ok(());
        }
        let analyzed: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_stats
                 WHERE schemaname = current_schema() AND tablename = 'memory_messages')",
                &[],
            )
            .and_then(|r| r.try_get(0))
            .map_err(pg_error)?;
        if self.statistics_checked.swap(true, Ordering::Relaxed) || analyzed {
            return Ok(());
        }
        let pool = self.pool.clone();
        let spawned = std::thread::Builder::new()
            .name("mnemon-memory-analyze".into())
            .spawn(move || {
                let result = pool
                    .get()
                    .map_err(|e| e.to_string())
                    .and_then(|mut client| {
                        client
                            .batch_execute("ANALYZE memory_messages, memory_threads")
                            .map_err(|e| e.to_string())
                    });
                if let Err(error) = result {
                    tracing::warn!(
                        %error,
                        "could not analyze the memory tables; searches plan without \
                         statistics until autovacuum analyzes them"
                    );
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "could not start the thread that analyzes the memory tables");
        }
        Ok(())
    }

    /// The winners' hits, in their order, from one statement whatever their threads: a
    /// search's hits may come from as many threads as there are hits, and a round trip each
    /// was most of a hybrid search's time (its 100 candidates per ranking).
    fn read_winners(
        &self,
        tx: &mut Transaction<'_>,
        winners: &[Candidate],
        threads: &[(i64, [String; 3])],
        now: i64,
    ) -> Result<Vec<SearchHit>, MemoryError> {
        let vectors = matches!(self.vector, VectorMode::Pgvector { .. });
        let mut ids = Vec::with_capacity(winners.len());
        for w in winners {
            let Some((id, _)) = threads.get(w.thread) else {
                return Err(corrupt(format!("no thread at {}", w.thread)));
            };
            ids.push(*id);
        }
        let seqs: Vec<i64> = winners.iter().map(|w| w.seq).collect();
        let rows = tx
            .query(winners_sql(vectors), &[&ids, &seqs, &now])
            .map_err(pg_error)?;
        let mut by_key = HashMap::with_capacity(rows.len());
        for row in &rows {
            let key: (i64, i64) = (
                row.try_get(7).map_err(pg_error)?,
                row.try_get(6).map_err(pg_error)?,
            );
            by_key.insert(key, row);
        }
        let mut hits = Vec::with_capacity(winners.len());
        for (w, id) in winners.iter().zip(&ids) {
            let (Some(row), Some((_, [user, agent, session]))) =
                (by_key.get(&(*id, w.seq)), threads.get(w.thread))
            else {
                return Err(corrupt("a found message vanished from its snapshot".into()));
            };
            let index: i64 = row.try_get(8).map_err(pg_error)?;
            let index = usize::try_from(index)
                .map_err(|_| corrupt(format!("message at seq {} has index {index}", w.seq)))?;
            hits.push(SearchHit {
                scope: Scope::from_columns(user.clone(), agent.clone(), session.clone()),
                index,
                score: w.score,
                message: row_entry(&self.factory, row, index, Vec::new())?.message(),
            });
        }
        Ok(hits)
    }
}

/// Planner settings for the rest of a search's transaction: no sequential scan, hash or merge
/// join. Every other statement of a search looks rows up by key from a bounded list (the
/// selected threads, the winners, a pool of candidates), for which a nested loop over the
/// primary key is right at any size; before a table's first `ANALYZE` (a namespace just
/// imported, for up to autovacuum's naptime) the planner, guessing sizes, hashed the whole
/// table instead (100,000 rows read to fetch 100 winners). The keyword query keeps the GIN
/// index or the primary key, and the HNSW shortlist sets its own.
fn key_lookups(tx: &mut Transaction<'_>) -> Result<(), MemoryError> {
    tx.batch_execute(
        "SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = off;
         SET LOCAL enable_mergejoin = off",
    )
    .map_err(pg_error)
}

/// The check of a filter (its SQL `matches`, over a message row `m`) for a batch of rows: `$1`
/// their threads, `$2` their seqs, pairwise; the filter's values follow. Each row: the thread
/// and seq of one that passes.
fn batch_check_sql(matches: &str) -> String {
    format!(
        "SELECT m.thread_id, m.seq
         FROM unnest($1::bigint[], $2::bigint[]) AS c(thread_id, seq)
         JOIN memory_messages m ON m.thread_id = c.thread_id AND m.seq = c.seq
         WHERE {matches}"
    )
}

/// Those of `candidates` (in their order; `ids` their threads' ids) that pass the filter
/// `check` (a [`batch_check_sql`] statement, with the filter's `values`), in one statement.
fn passing(
    tx: &mut Transaction<'_>,
    check: &postgres::Statement,
    values: &[Box<dyn ToSql + Sync>],
    candidates: &[Candidate],
    ids: &[i64],
) -> Result<Vec<Candidate>, MemoryError> {
    let seqs: Vec<i64> = candidates.iter().map(|c| c.seq).collect();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&ids, &seqs];
    params.extend(values.iter().map(|p| &**p as &(dyn ToSql + Sync)));
    let passed: std::collections::HashSet<(i64, i64)> = tx
        .query(check, &params)
        .map_err(pg_error)?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, postgres::Error>>()
        .map_err(pg_error)?;
    Ok(candidates
        .iter()
        .zip(ids)
        .filter(|(c, id)| passed.contains(&(**id, c.seq)))
        .map(|(c, _)| *c)
        .collect())
}

/// A selected thread.
struct Thread {
    id: i64,
    columns: [String; 3],
    live: i64,
    /// Messages indexable at the query's dimension (0 without pgvector).
    usable: i64,
    /// At most the earliest `expires_at` of its messages (schema version 6).
    next_expiry: Option<i64>,
    /// Bumped by every write of the thread: which cached vectors are current.
    rev: i64,
}

impl PostgresMemoryStore {
    /// Search across sessions (docs/reference/memory.md#search-across-sessions): the `top_k`
    /// messages closest by cosine to `query` among every thread of the store's namespace that
    /// `within` selects, best first, each with its thread's scope and its index in the thread.
    ///
    /// Scores are the per-thread recall's exactly (`f64` cosine over the stored `f32`s, equal
    /// to the SQLite store's); ties keep the lower index first within a thread, and otherwise
    /// follow the threads' scopes (user, agent, session ids, in byte order, an absent id
    /// first). Messages without an embedding are skipped (nothing is embedded or stored:
    /// `embedder` only embeds a text or message query); a stored embedding whose length
    /// differs from the query's is [`MemoryError::DimensionMismatch`], as in the per-thread
    /// recall. With pgvector the HNSW index shortlists when it can answer for every selected
    /// message (see the module docs of `postgres/search.rs`); which messages come back is then
    /// as good as the index's recall, never fewer than `top_k` when that many exist. The whole
    /// search reads one snapshot.
    pub fn search(
        &self,
        within: &ScopeFilter,
        query: RetrievalQuery,
        top_k: usize,
        embedder: Option<&dyn Embedder>,
    ) -> Result<Vec<SearchHit>, MemoryError> {
        self.search_with(&SearchRequest::new(within.clone(), query, top_k), embedder)
            .map(|results| results.hits)
    }

    /// [`search`](Self::search) with the whole request: a metadata filter
    /// ([`SearchRequest::filter`], docs/reference/memory.md#filters) is translated to SQL
    /// (`jsonb` over the message's body, its id column and its marks) and evaluated on every
    /// candidate row before the top-k cut, so a filtered top `k` has `k` hits whenever `k`
    /// messages match, however many closer ones do not. A filtered search is the exact scan
    /// (the HNSW index, filtered after its search, could crowd the matching messages out). A
    /// filter naming a field messages do not have is [`MemoryError::InvalidFilter`].
    ///
    /// [`SearchRequest::mode`] picks the ranking (docs/reference/memory.md#keyword-and-hybrid-search):
    /// by vector (above), by keyword (`ts_rank` of the messages' `simple` `tsvector`, through
    /// its GIN index, against the words of the mode's text, any of which may match; higher is
    /// better) or hybrid (reciprocal rank fusion of the two rankings). Scope, expiry and filter
    /// apply alike.
    pub fn search_with(
        &self,
        request: &SearchRequest,
        embedder: Option<&dyn Embedder>,
    ) -> Result<SearchResults, MemoryError> {
        by_mode(
            request,
            |request| self.vector_search(request, embedder),
            |text, k| self.keyword_search(request, text, k),
        )
    }

    /// The keyword ranking of [`search_with`](Self::search_with): the newest
    /// [`MAX_KEYWORD_MATCHES`] live messages of the selected threads whose `tsvector` matches
    /// one of the words (the latest thread first, each its latest message first, as the SQLite
    /// store reads them), of which those passing the filter are scored by `ts_rank`, the best
    /// `top_k`; ties follow the threads' order, then the index.
    fn keyword_search(
        &self,
        request: &SearchRequest,
        text: &str,
        top_k: usize,
    ) -> Result<KeywordRanking, MemoryError> {
        let [user, agent, session] = request.within.columns()?;
        let terms = keyword_terms(text)?;
        // Every term is letters and digits only: quoted, none is read as an operator. The
        // lexemes are the stored ones as they are (schema version 15): the `tsquery` is its
        // input text, never parsed by the database's locale. A term longer than a lexeme can
        // be is in no stored `tsvector` (nor would the query take it).
        let lexemes: Vec<String> = terms
            .iter()
            .filter(|t| t.len() <= super::MAX_LEXEME_BYTES)
            .map(|t| format!("'{t}'"))
            .collect();
        if lexemes.is_empty() {
            return Ok(KeywordRanking {
                hits: Vec::new(),
                complete: true,
            });
        }
        let tsquery = lexemes.join(" | ");
        // The filter's check of a batch of rows (`$1` their threads, `$2` their seqs); the
        // filter's values follow.
        let mut filter_params = vec![SqlParam::Integer(0); 2];
        let matches = match &request.filter {
            Some(filter) => Some(filter_sql(filter, Dialect::Postgres, &mut filter_params)?),
            None => None,
        };
        let extra: Vec<Box<dyn ToSql + Sync>> =
            filter_params.into_iter().skip(2).map(pg_param).collect();
        if top_k == 0 {
            return Ok(KeywordRanking {
                hits: Vec::new(),
                complete: true,
            });
        }
        let now = self.now();
        let namespace = self.namespace.as_str();
        let scope: [&(dyn ToSql + Sync); 4] = [&namespace, &user, &agent, &session];
        let mut client = self.client()?;
        let mut tx = snapshot(&mut client)?;
        let rows = tx.query(THREADS_SQL, &scope).map_err(pg_error)?;
        let mut threads = rows
            .iter()
            .map(|r| {
                Ok((
                    r.try_get::<_, i64>(0).map_err(pg_error)?,
                    [
                        r.try_get::<_, String>(1).map_err(pg_error)?,
                        r.try_get::<_, String>(2).map_err(pg_error)?,
                        r.try_get::<_, String>(3).map_err(pg_error)?,
                    ],
                ))
            })
            .collect::<Result<Vec<_>, MemoryError>>()?;
        threads.sort_by(|a, b| a.1.cmp(&b.1));
        let ordinal: HashMap<i64, usize> = threads
            .iter()
            .enumerate()
            .map(|(i, (id, _))| (*id, i))
            .collect();
        let selected: Vec<i64> = threads.iter().map(|(id, _)| *id).collect();
        // One more than the bound: whether it is reached is whether more matched.
        let read_at_most = i64::try_from(MAX_KEYWORD_MATCHES.saturating_add(1)).unwrap_or(i64::MAX);
        // The newest matches are chosen before anything is scored, `ts_rank` runs on those
        // only, and only the columns it needs are read: the rows may be sorted (when the
        // planner reads the GIN index rather than the primary key backwards), and a narrow
        // sort stays in memory.
        let statement = tx
            .prepare(
                "SELECT m.thread_id, m.seq, ts_rank(m.search_tsv, q.q)::float8
                 FROM (SELECT $2::text::tsquery) AS q(q),
                      LATERAL (SELECT n.thread_id, n.seq, n.search_tsv FROM memory_messages n
                                WHERE n.thread_id = ANY($3::bigint[]) AND n.search_tsv @@ q.q
                                  AND (n.expires_at IS NULL OR n.expires_at > $1::bigint)
                                ORDER BY n.thread_id DESC, n.seq DESC
                                LIMIT $4::bigint) AS m",
            )
            .map_err(pg_error)?;
        let params: [&(dyn ToSql + Sync); 4] = [&now, &tsquery, &selected, &read_at_most];
        // Before the table's first `ANALYZE` the planner takes every match from the GIN index
        // and sorts them: with the default `work_mem` (4 MB) 100,000 matches spill to disk
        // (17 MB, about half of the query's 110 ms). For this transaction only, the sort may
        // stay in memory; with statistics the primary key is read backwards and nothing sorts.
        tx.batch_execute("SET LOCAL work_mem = '64MB'")
            .map_err(pg_error)?;
        key_lookups(&mut tx)?;
        self.ensure_statistics(&mut tx)?;
        let mut read_rows = 0usize;
        let mut candidates = Vec::new();
        let mut rows = tx
            .query_raw(&statement, params.iter().copied())
            .map_err(pg_error)?;
        while let Some(row) = rows.next().map_err(pg_error)? {
            read_rows += 1;
            if read_rows > MAX_KEYWORD_MATCHES {
                break;
            }
            let thread_id: i64 = row.try_get(0).map_err(pg_error)?;
            let Some(&thread) = ordinal.get(&thread_id) else {
                return Err(corrupt(format!("thread {thread_id} was not selected")));
            };
            let seq: i64 = row.try_get(1).map_err(pg_error)?;
            candidates.push(Candidate {
                score: row.try_get(2).map_err(pg_error)?,
                thread,
                // A thread's seqs are in its index order: the tie order until the winners'
                // indices are read.
                index: seq_key(seq),
                seq,
            });
        }
        drop(rows);
        let winners = match &matches {
            None => {
                let mut top = TopK::new(top_k);
                candidates.into_iter().for_each(|c| top.offer(c));
                top.into_sorted()
            }
            // The filter is checked best candidate first, a batch at a time, until `top_k`
            // pass: the result of filtering every candidate first, for a fraction of the
            // checks (each parses a body) when the filter lets many through.
            Some(matches) => {
                candidates.sort_by(Candidate::order);
                let check = tx.prepare(&batch_check_sql(matches)).map_err(pg_error)?;
                // Never more than the candidates (a `top_k` of `usize::MAX` asked for an
                // impossible allocation and panicked).
                let mut winners = Vec::with_capacity(top_k.min(candidates.len()));
                let mut batch = top_k.saturating_mul(2).max(64);
                let mut rest = candidates.as_slice();
                while winners.len() < top_k && !rest.is_empty() {
                    let (now_checked, later) = rest.split_at(batch.min(rest.len()));
                    rest = later;
                    batch = batch.saturating_mul(4);
                    let thread_ids: Vec<i64> = now_checked
                        .iter()
                        .map(|c| threads.get(c.thread).map_or(0, |t| t.0))
                        .collect();
                    let passed = passing(&mut tx, &check, &extra, now_checked, &thread_ids)?;
                    winners.extend(passed.into_iter().take(top_k - winners.len()));
                }
                winners
            }
        };
        let hits = self.read_winners(&mut tx, &winners, &threads, now)?;
        tx.commit().map_err(pg_error)?;
        Ok(KeywordRanking {
            hits,
            complete: read_rows <= MAX_KEYWORD_MATCHES,
        })
    }

    /// The vector ranking of [`search_with`](Self::search_with).
    fn vector_search(
        &self,
        request: &SearchRequest,
        embedder: Option<&dyn Embedder>,
    ) -> Result<Vec<SearchHit>, MemoryError> {
        let [user, agent, session] = request.within.columns()?;
        let top_k = request.top_k;
        // The filter is translated first: one naming a field messages do not have is refused
        // before anything is read. Its check of one row: `$1` the thread, `$2` the seq; the
        // filter's values follow.
        let mut check_params = vec![SqlParam::Integer(0); 2];
        let matches = match &request.filter {
            Some(filter) => Some(filter_sql(filter, Dialect::Postgres, &mut check_params)?),
            None => None,
        };
        let query = query_vector(request.query.clone(), embedder)?;
        if top_k == 0 {
            return Ok(Vec::new());
        }
        let vectors = matches!(self.vector, VectorMode::Pgvector { .. });
        let namespace = self.namespace.as_str();
        let filter: [&(dyn ToSql + Sync); 4] = [&namespace, &user, &agent, &session];
        let mut client = self.client()?;
        let mut tx = snapshot(&mut client)?;
        key_lookups(&mut tx)?;
        self.ensure_statistics(&mut tx)?;
        let rows = if vectors {
            let dim = i32::try_from(query.len()).unwrap_or(i32::MAX);
            let mut params = filter.to_vec();
            params.push(&dim);
            tx.query(THREADS_WITH_DIMS_SQL, &params)
        } else {
            tx.query(THREADS_SQL, &filter)
        }
        .map_err(pg_error)?;
        let mut threads = rows
            .iter()
            .map(|r| {
                Ok(Thread {
                    id: r.try_get(0).map_err(pg_error)?,
                    columns: [
                        r.try_get(1).map_err(pg_error)?,
                        r.try_get(2).map_err(pg_error)?,
                        r.try_get(3).map_err(pg_error)?,
                    ],
                    live: r.try_get(4).map_err(pg_error)?,
                    usable: r.try_get(5).map_err(pg_error)?,
                    next_expiry: r.try_get(6).map_err(pg_error)?,
                    rev: r.try_get(7).map_err(pg_error)?,
                })
            })
            .collect::<Result<Vec<_>, MemoryError>>()?;
        // One instant for the whole search: the model check and the scan judge expiry alike.
        let now = self.now();
        if let Some(embedder) = embedder {
            // One statement for every thread (a round trip per thread cost 25–50 ms over 500
            // threads): the per-thread probe, each an index range of `memory_messages_model`.
            let ids: Vec<i64> = threads.iter().map(|t| t.id).collect();
            let other: Option<String> = tx
                .query_opt(OTHER_MODEL_OF_THREADS_SQL, &[&ids, &embedder.model(), &now])
                .map_err(pg_error)?
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(pg_error)?;
            model_mismatch(other, embedder.model())?;
        }
        // A thread with expired rows not yet removed: the counters count them and the index
        // holds them, so the exact scan (which leaves them out) answers.
        let expired_rows = threads
            .iter()
            .any(|t| !mnemon_db::expiry::is_live(t.next_expiry, now));
        // The tie order between threads: their scopes' columns (`''` for an absent id).
        threads.sort_by(|a, b| a.columns.cmp(&b.columns));
        let ordinal: HashMap<i64, usize> =
            threads.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
        let from_index = if vectors && matches.is_none() && !expired_rows {
            self.shortlist(&mut tx, &filter, &query, top_k, &threads, &ordinal)?
        } else {
            None
        };
        let winners = match (from_index, &matches) {
            (Some(winners), _) => {
                self.index_recalls
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                winners
            }
            (None, _) => {
                let check = match &matches {
                    Some(matches) => {
                        let statement = tx
                            .prepare(&format!(
                                "SELECT {matches} FROM memory_messages m
                                 WHERE m.thread_id = $1 AND m.seq = $2"
                            ))
                            .map_err(pg_error)?;
                        let values: Vec<Box<dyn ToSql + Sync>> =
                            check_params.into_iter().skip(2).map(pg_param).collect();
                        Some((statement, values))
                    }
                    None => None,
                };
                let pooled = match (&matches, &check) {
                    (Some(matches), Some((_, values))) => self.filtered_from_pool(
                        &mut tx, &threads, &query, top_k, now, matches, values,
                    )?,
                    _ => None,
                };
                match pooled {
                    Some(winners) => winners,
                    None => {
                        self.cached_scan(&mut tx, &threads, &query, top_k, now, check.as_ref())?
                    }
                }
            }
        };
        // The winners' messages and indices, in one statement.
        let listed: Vec<(i64, [String; 3])> =
            threads.iter().map(|t| (t.id, t.columns.clone())).collect();
        let hits = self.read_winners(&mut tx, &winners, &listed, now)?;
        tx.commit().map_err(pg_error)?;
        Ok(hits)
    }

    /// The winners through the HNSW index, or `None` when the index cannot answer for every
    /// selected message or its filtered shortlist came up short (the exact scan answers then).
    /// A winner's `index` is its seq, which orders a thread's messages as their indices do.
    fn shortlist(
        &self,
        tx: &mut Transaction<'_>,
        filter: &[&(dyn ToSql + Sync); 4],
        query: &[f32],
        k: usize,
        threads: &[Thread],
        ordinal: &HashMap<i64, usize>,
    ) -> Result<Option<Vec<Candidate>>, MemoryError> {
        let dim = query.len();
        let query_norm = exact::norm(query);
        let Some(vector) = PgVector::new(Some(query)) else {
            return Ok(None);
        };
        // As the per-thread recall (`retrieve_from_index`): the closest `rescored` by
        // pgvector's distance are re-scored exactly, from a shortlist of `ef`.
        let rescored = k.saturating_add(k.max(RESCORE_MARGIN));
        let ef = self
            .hnsw_ef_search
            .max(rescored)
            .clamp(1, HNSW_MAX_EF_SEARCH);
        let rescored = rescored.min(ef);
        if k > ef || dim > HNSW_MAX_DIM || query_norm == 0.0 || self.hnsw_min_messages == usize::MAX
        {
            return Ok(None);
        }
        // Every selected message must have an indexable embedding of the query's dimension: a
        // missing one is skipped, another dimension is an error, a zero vector scores 0, all of
        // which the exact scan does.
        let total: i64 = threads.iter().map(|t| t.live).sum();
        let usable: i64 = threads.iter().map(|t| t.usable).sum();
        let total = usize::try_from(total).unwrap_or(0);
        if i64::try_from(total).ok() != Some(usable) || total < self.hnsw_min_messages || k >= total
        {
            return Ok(None);
        }
        let shortlist = tx.prepare(shortlist_sql(dim)).map_err(pg_error)?;
        let rescored_i64 = i64::try_from(rescored).unwrap_or(i64::MAX);
        let mut params: Vec<&(dyn ToSql + Sync)> = filter.to_vec();
        params.push(&vector);
        params.push(&rescored_i64);
        // No sequential scan or sort for this transaction: the planner takes the HNSW index,
        // the only plan left that orders by distance (see `RECALL_THREAD_SQL`).
        let settings = |tx: &mut Transaction<'_>, ef: usize| {
            tx.execute(
                "SELECT set_config('hnsw.ef_search', $1, true),
                        set_config('enable_seqscan', 'off', true),
                        set_config('enable_sort', 'off', true)",
                &[&ef.to_string()],
            )
            .map_err(pg_error)
        };
        // How many rows came from the index; `None` when the pending ones are too many.
        let indexed_of = |rows: &[postgres::Row]| -> Result<Option<usize>, MemoryError> {
            let mut pending = 0;
            for row in rows {
                if row.try_get::<_, bool>(3).map_err(pg_error)? {
                    pending += 1;
                }
            }
            Ok((pending <= PENDING_SCAN_MAX).then(|| rows.len() - pending))
        };
        // The index must give at least `k` of the selected indexed messages (all of them when
        // fewer): the pending ones complete the exact top `k` only with those.
        let enough =
            |indexed: usize, rows: usize| indexed >= k.min(total.saturating_sub(rows - indexed));
        settings(tx, ef)?;
        let mut rows = tx.query(&shortlist, &params).map_err(pg_error)?;
        let Some(mut indexed) = indexed_of(&rows)? else {
            return Ok(None);
        };
        if !enough(indexed, rows.len()) && ef < HNSW_MAX_EF_SEARCH {
            // Other threads' (or namespaces') neighbours crowded the selected ones out of the
            // index's shortlist: once more with pgvector's longest.
            settings(tx, HNSW_MAX_EF_SEARCH)?;
            rows = tx.query(&shortlist, &params).map_err(pg_error)?;
            let Some(again) = indexed_of(&rows)? else {
                return Ok(None);
            };
            indexed = again;
        }
        if !enough(indexed, rows.len()) || rows.len() < k {
            return Ok(None);
        }
        // The pending rows' vectors, now that there are few enough of them to score.
        let mut pending: (Vec<i64>, Vec<i64>) = (Vec::new(), Vec::new());
        for row in &rows {
            if row.try_get::<_, bool>(3).map_err(pg_error)? {
                pending.0.push(row.try_get(0).map_err(pg_error)?);
                pending.1.push(row.try_get(1).map_err(pg_error)?);
            }
        }
        let mut pending_vectors: HashMap<(i64, i64), StoredFloats> = HashMap::new();
        if !pending.0.is_empty() {
            for row in tx
                .query(
                    "SELECT m.thread_id, m.seq, m.embedding_v
                     FROM unnest($1::bigint[], $2::bigint[]) AS p(thread_id, seq)
                     JOIN memory_messages m ON m.thread_id = p.thread_id AND m.seq = p.seq",
                    &[&pending.0, &pending.1],
                )
                .map_err(pg_error)?
            {
                let stored: Option<StoredFloats> = row.try_get(2).map_err(pg_error)?;
                if let Some(stored) = stored {
                    let key = (
                        row.try_get(0).map_err(pg_error)?,
                        row.try_get(1).map_err(pg_error)?,
                    );
                    pending_vectors.insert(key, stored);
                }
            }
        }
        let mut top = TopK::new(k);
        for row in &rows {
            let thread_id: i64 = row.try_get(0).map_err(pg_error)?;
            let seq: i64 = row.try_get(1).map_err(pg_error)?;
            let stored: Option<StoredFloats> = if row.try_get::<_, bool>(3).map_err(pg_error)? {
                pending_vectors.remove(&(thread_id, seq))
            } else {
                row.try_get(2).map_err(pg_error)?
            };
            let (Some(stored), Some(&thread)) = (stored, ordinal.get(&thread_id)) else {
                return Ok(None);
            };
            if stored.0.len() != dim {
                return Ok(None);
            }
            top.offer(Candidate {
                score: cosine(query, query_norm, &stored.0),
                thread,
                index: seq_key(seq),
                seq,
            });
        }
        Ok(Some(top.into_sorted()))
    }
}

/// The per-thread probe of `OTHER_MODEL_SQL` over the threads `$1` at once: a model other than
/// `$2` that one of their messages live at `$3` (the search's now) was embedded with, if any. An
/// expired message not yet removed is left out, as every read leaves it out.
const OTHER_MODEL_OF_THREADS_SQL: &str = "SELECT o.embedding_model
 FROM unnest($1::bigint[]) AS t(id)
 CROSS JOIN LATERAL (SELECT m.embedding_model FROM memory_messages m
   WHERE m.thread_id = t.id AND m.embedding_model IS NOT NULL
     AND (m.embedding_model < $2 OR m.embedding_model > $2)
     AND (m.expires_at IS NULL OR m.expires_at > $3::bigint)
   LIMIT 1) AS o
 LIMIT 1";

/// How many unfiltered candidates per hit a filtered search first scores and checks at once
/// (`filtered_from_pool`).
const POOL_PER_HIT: usize = 4;

/// A filter's check of one row (`$1` thread, `$2` seq) and the filter's values.
type Check = (postgres::Statement, Vec<Box<dyn ToSql + Sync>>);

impl PostgresMemoryStore {
    /// The stored vectors of thread `thread_id` at `rev` as `tx`'s snapshot holds them: from
    /// the cache when it has the thread at that rev, else read (every row, expired ones
    /// included: a scan judges expiry itself) and cached when it fits (`crate::vector_scan`).
    pub(super) fn thread_vectors(
        &self,
        tx: &mut Transaction<'_>,
        thread_id: i64,
        rev: i64,
        scan_start: u64,
    ) -> Result<std::sync::Arc<ThreadVectors>, MemoryError> {
        if let Some(cached) = self.vectors.get(thread_id, rev) {
            return Ok(cached);
        }
        let load = tx
            .prepare(if matches!(self.vector, VectorMode::Pgvector { .. }) {
                "SELECT seq, expires_at, embedding_v, embedding FROM memory_messages
                 WHERE thread_id = $1 ORDER BY seq"
            } else {
                "SELECT seq, expires_at, NULL::bytea, embedding FROM memory_messages
                 WHERE thread_id = $1 ORDER BY seq"
            })
            .map_err(pg_error)?;
        let mut read = ThreadVectors::new(rev);
        let mut rows = tx
            .query_raw(&load, [&thread_id as &(dyn ToSql + Sync)])
            .map_err(pg_error)?;
        while let Some(row) = rows.next().map_err(pg_error)? {
            let floats = match row
                .try_get::<_, Option<StoredFloats>>(2)
                .map_err(pg_error)?
            {
                Some(v) => Some(v),
                None => row
                    .try_get::<_, Option<StoredFloats>>(3)
                    .map_err(pg_error)?,
            };
            read.push(
                row.try_get(0).map_err(pg_error)?,
                row.try_get(1).map_err(pg_error)?,
                floats.as_ref().map(|f| f.0.as_slice()),
            );
        }
        drop(rows);
        Ok(self.vectors.insert(thread_id, read, scan_start))
    }

    /// A filtered exact scan in two statements when the filter lets enough through: the best
    /// `POOL_PER_HIT × k` (at least 64) candidates unfiltered, then the filter checked for all
    /// of them in one statement; their first `k` that pass are the filtered top `k` (every
    /// other row ranks after all of them), and so are all that pass when the pool held every
    /// candidate. `None` when fewer pass, or when a row has a vector of another length (whether
    /// that is an error depends on the filter): the lazy scan of [`cached_scan`] then answers,
    /// which checks the filter row by row, a round trip each (hundreds for a deep search).
    #[allow(clippy::too_many_arguments)]
    fn filtered_from_pool(
        &self,
        tx: &mut Transaction<'_>,
        threads: &[Thread],
        query: &[f32],
        k: usize,
        now: i64,
        matches: &str,
        values: &[Box<dyn ToSql + Sync>],
    ) -> Result<Option<Vec<Candidate>>, MemoryError> {
        let wide = k.saturating_mul(POOL_PER_HIT).max(64);
        let pool = match self.cached_scan(tx, threads, query, wide, now, None) {
            Ok(pool) => pool,
            Err(MemoryError::DimensionMismatch { .. }) => return Ok(None),
            Err(other) => return Err(other),
        };
        let mut ids = Vec::with_capacity(pool.len());
        for c in &pool {
            let Some(t) = threads.get(c.thread) else {
                return Err(corrupt(format!("no thread at {}", c.thread)));
            };
            ids.push(t.id);
        }
        let check = tx.prepare(&batch_check_sql(matches)).map_err(pg_error)?;
        let whole = pool.len() < wide;
        let mut winners = passing(tx, &check, values, &pool, &ids)?;
        winners.truncate(k);
        Ok((winners.len() == k || whole).then_some(winners))
    }

    /// The exact scan: the winners of scoring every live message of `threads` (in their tie
    /// order), from each thread's stored vectors as the store's cache holds them at the
    /// thread's rev, or as read into it in `tx`'s snapshot (`crate::vector_scan`); bodies are
    /// never read. A filter (`check`) is evaluated only for a row whose score would enter the
    /// top `k` as it stands (the bar only rises, so a row it keeps out would never have been
    /// kept) and for a row that would be an error: the result of filtering every row first.
    fn cached_scan(
        &self,
        tx: &mut Transaction<'_>,
        threads: &[Thread],
        query: &[f32],
        k: usize,
        now: i64,
        check: Option<&Check>,
    ) -> Result<Vec<Candidate>, MemoryError> {
        let query_norm = exact::norm(query);
        let score = vector_scan::cosine(query, query_norm);
        let scan_start = self.vectors.start();
        let mut top = TopK::new(k);
        for (ordinal, thread) in threads.iter().enumerate() {
            let cached = self.thread_vectors(tx, thread.id, thread.rev, scan_start)?;
            let selected = |tx: &mut Transaction<'_>, seq: i64| -> Result<bool, MemoryError> {
                let Some((statement, values)) = check else {
                    return Ok(true);
                };
                let mut params: Vec<&(dyn ToSql + Sync)> = vec![&thread.id, &seq];
                params.extend(values.iter().map(|p| &**p as &(dyn ToSql + Sync)));
                let row = tx.query_opt(statement, &params).map_err(pg_error)?;
                Ok(row
                    .map(|r| r.try_get::<_, Option<bool>>(0))
                    .transpose()
                    .map_err(pg_error)?
                    .flatten()
                    .unwrap_or(false))
            };
            cached.scan(now, query.len(), &score, |position, seq, found| {
                match found {
                    Scored::Missing => {}
                    Scored::Other(len) | Scored::Damaged(len) => {
                        if selected(tx, seq)? {
                            let id: String = tx
                                .query_one(
                                    "SELECT msg_id FROM memory_messages
                                     WHERE thread_id = $1 AND seq = $2",
                                    &[&thread.id, &seq],
                                )
                                .and_then(|r| r.try_get(0))
                                .map_err(pg_error)?;
                            return Err(dimension_mismatch(id, query.len(), len));
                        }
                    }
                    Scored::Score(score) => {
                        let candidate = Candidate {
                            score,
                            thread: ordinal,
                            index: position,
                            seq,
                        };
                        if top.admits(&candidate) && selected(tx, seq)? {
                            top.offer(candidate);
                        }
                    }
                }
                Ok(())
            })?;
        }
        Ok(top.into_sorted())
    }
}
