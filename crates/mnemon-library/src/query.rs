//! The query pipeline (spec §7–§9).

use mnemon_vector::{Scored, top_k_of_scores};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value};

use crate::access::AccessPolicy;
use crate::codec::{VectorError, decode_vector_unchecked};
use crate::error::{LibraryError, Result};
use crate::fast::{self, Need};
use crate::library::{CountType, Library};
use crate::omit::{Omit, OmitKey};
use crate::python::{display_value, int_like};
use crate::storage::NO_TAG;

/// How a query runs, beyond its arguments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryOptions {
    /// Seeds the random query vector drawn when no embedding is given; `None` seeds from the OS.
    /// A host that wants one seeded stream can draw each query's seed from its own RNG.
    pub seed: Option<u64>,
    /// The `count` used when the arguments have none: `None` (the library API) makes a missing
    /// count an error; a host passes `Some(1000)`.
    pub default_count: Option<i64>,
    /// Use the int8 pre-scan (spec §11.5). Rows are scored exactly in order of a proven upper
    /// bound of their score until no unscored row can enter the result, so the result equals
    /// the exact scan's (same bits, order and similarities); only the time differs. Falls back
    /// to the exact scan when the bounds would make it score a quarter of the rows.
    pub fast: bool,
}

/// Typed query arguments, for Rust callers; the embedding may already be decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryArgs {
    /// Protocol version; must be ≥ 1.
    pub version: i64,
    /// The query vector; `None` draws a random one.
    pub query_embedding: Option<Vec<f32>>,
    /// Must equal the library's model.
    pub query_embedding_model: Option<String>,
    /// Bits or tokens to return; negative means all; 0 is an error.
    pub count: i64,
    /// How `count` is measured.
    pub count_type: CountType,
    /// Fields to leave out, as in the JSON argument (`None` means `embedding`).
    pub omit: Option<String>,
    /// An access token.
    pub access_token: Option<String>,
}

impl QueryArgs {
    /// Arguments for `embedding` under `model`, returning up to `count` bits.
    pub fn new(model: &str, embedding: Vec<f32>, count: i64) -> Self {
        QueryArgs {
            version: 1,
            query_embedding: Some(embedding),
            query_embedding_model: Some(model.to_owned()),
            count,
            count_type: CountType::Bit,
            omit: None,
            access_token: None,
        }
    }

    fn to_map(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("version".into(), Value::from(self.version));
        if let Some(model) = &self.query_embedding_model {
            m.insert("query_embedding_model".into(), Value::from(model.as_str()));
        }
        m.insert("count".into(), Value::from(self.count));
        let ct = match self.count_type {
            CountType::Bit => "bit",
            CountType::Token => "token",
        };
        m.insert("count_type".into(), Value::from(ct));
        if let Some(o) = &self.omit {
            m.insert("omit".into(), Value::from(o.as_str()));
        }
        if let Some(t) = &self.access_token {
            m.insert("access_token".into(), Value::from(t.as_str()));
        }
        m
    }
}

/// A query whose arguments have been checked: the first half of [`Library::query_with`], made
/// by [`Library::plan`] and finished by [`Library::run_planned`].
///
/// The split lets a host score many concurrent queries in one pass over the matrix
/// ([`Library::scores_many`]): a scan of a large library is bound by memory bandwidth, so
/// answering queries together multiplies throughput while each result stays exactly what
/// [`Library::query_with`] returns.
#[derive(Debug, Clone)]
pub struct PlannedQuery {
    prepared: Prepared,
    fast: bool,
    rows: usize,
}

impl PlannedQuery {
    /// The vector every row is scored against when this query runs without fast mode on a
    /// non-empty library: pass it to [`Library::scores_many`], and the scores to
    /// [`Library::run_planned`]. `None` when no full scan is needed.
    pub fn scan_vector(&self) -> Option<&[f32]> {
        if self.fast || self.rows == 0 {
            return None;
        }
        self.prepared.query.as_deref()
    }
}

/// How a query's rows get their scores.
#[derive(Clone, Copy)]
enum Scan<'a> {
    /// Scan every row exactly.
    Exact,
    /// The int8 pre-scan, falling back to the exact scan.
    Fast,
    /// Already scored (by [`Library::scores_many`]).
    Scored(&'a [f32]),
}

/// Validated arguments.
#[derive(Debug, Clone)]
struct Prepared {
    query: Option<Vec<f32>>,
    count: i64,
    count_type: CountType,
    omit: Omit,
}

impl Library {
    /// Runs a query whose arguments are a JSON object, exactly as a host receives it (spec §7).
    /// Uses the library API's defaults: a missing `count` is an error, random vectors are seeded
    /// from the OS. Never modifies the library; safe to call from many threads at once.
    pub fn query(
        &self,
        args: &Map<String, Value>,
        policy: &AccessPolicy,
    ) -> Result<Map<String, Value>> {
        self.query_with(args, policy, &QueryOptions::default())
    }

    /// [`Library::query`] with options.
    pub fn query_with(
        &self,
        args: &Map<String, Value>,
        policy: &AccessPolicy,
        options: &QueryOptions,
    ) -> Result<Map<String, Value>> {
        self.run(args, None, policy, options)
    }

    /// Checks `args` and prepares the query, as [`Library::query_with`] does before it scans:
    /// argument errors surface here, with the same messages.
    pub fn plan(&self, args: &Map<String, Value>, options: &QueryOptions) -> Result<PlannedQuery> {
        Ok(PlannedQuery {
            prepared: self.prepare(args, None, options)?,
            fast: options.fast,
            rows: self.len(),
        })
    }

    /// Runs a planned query. `scores`, when given, must be the row scores of its
    /// [`PlannedQuery::scan_vector`] as [`Library::scores_many`] computed them; scores of the
    /// wrong length are ignored and the rows scored again. `args` must be those the query was
    /// planned with (the options travel in the plan). The result equals
    /// [`Library::query_with`]'s.
    pub fn run_planned(
        &self,
        args: &Map<String, Value>,
        plan: PlannedQuery,
        policy: &AccessPolicy,
        scores: Option<&[f32]>,
    ) -> Result<Map<String, Value>> {
        let scores = scores.filter(|s| s.len() == self.len() && plan.scan_vector().is_some());
        self.finish(args, plan.prepared, policy, plan.fast, scores)
    }

    /// The exact score of every row for each of `queries` (vectors of the library's
    /// dimension), in one pass over the matrix: `result[q][row]` is what a query with
    /// `queries[q]` scores row `row`.
    pub fn scores_many(&self, queries: &[&[f32]]) -> Vec<Vec<f32>> {
        self.store.embeddings.view().scores_many(queries)
    }

    /// Runs a query whose arguments are form fields (all strings; the first value of a repeated
    /// key wins).
    pub fn query_form<K, V>(
        &self,
        fields: impl IntoIterator<Item = (K, V)>,
        policy: &AccessPolicy,
        options: &QueryOptions,
    ) -> Result<Map<String, Value>>
    where
        K: Into<String>,
        V: Into<String>,
    {
        let mut args = Map::new();
        for (k, v) in fields {
            let k = k.into();
            if !args.contains_key(&k) {
                args.insert(k, Value::String(v.into()));
            }
        }
        self.run(&args, None, policy, options)
    }

    /// Runs a query from typed arguments.
    pub fn query_args(
        &self,
        args: &QueryArgs,
        policy: &AccessPolicy,
        options: &QueryOptions,
    ) -> Result<Map<String, Value>> {
        let map = args.to_map();
        let embedding = args.query_embedding.as_deref().filter(|e| !e.is_empty());
        self.run(&map, embedding, policy, options)
    }

    fn prepare(
        &self,
        args: &Map<String, Value>,
        embedding: Option<&[f32]>,
        options: &QueryOptions,
    ) -> Result<Prepared> {
        let version = int_like("version", args.get("version"))?.unwrap_or(-1);
        let count = match int_like("count", args.get("count"))? {
            Some(c) => c,
            None => options.default_count.unwrap_or(0),
        };
        if count == 0 {
            return Err(LibraryError::CountZero);
        }
        if version < 1 {
            return Err(LibraryError::VersionTooLow);
        }
        let model_ok = match args.get("query_embedding_model") {
            Some(Value::String(m)) => m == &self.model,
            _ => false,
        };
        if !model_ok {
            let given = match args.get("query_embedding_model") {
                None | Some(Value::Null) => "None".to_owned(),
                Some(v) => display_value(v),
            };
            return Err(LibraryError::WrongModel {
                given,
                expected: self.model.clone(),
            });
        }
        let mut query: Option<Vec<f32>> = match embedding {
            Some(e) => Some(e.to_vec()),
            None => match args.get("query_embedding") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) if s.is_empty() => None,
                Some(Value::Array(a)) if a.is_empty() => None,
                Some(Value::String(s)) => {
                    Some(decode_vector_unchecked(s).map_err(|e| match e {
                        VectorError::Base64(b) => LibraryError::QueryBase64(b.to_string()),
                        VectorError::ByteCount(n) => LibraryError::QueryByteCount(n),
                        VectorError::NonFinite => LibraryError::QueryNotFinite,
                    })?)
                }
                Some(_) => return Err(LibraryError::EmbeddingNotString),
            },
        };
        let count_type = match args.get("count_type") {
            None | Some(Value::Null) => CountType::Token,
            Some(Value::String(s)) if s == "token" => CountType::Token,
            Some(Value::String(s)) if s == "bit" => CountType::Bit,
            Some(v) => return Err(LibraryError::BadCountType(display_value(v))),
        };
        let has_embeddings = !self.is_empty()
            && !self
                .omit
                .as_ref()
                .is_some_and(|o| o.contains(OmitKey::Embedding));
        if has_embeddings
            && let (Some(q), Some(d)) = (&query, self.store.dim)
            && q.len() != d
        {
            return Err(LibraryError::QueryDimension {
                found: q.len(),
                expected: d,
            });
        }
        if query
            .as_ref()
            .is_some_and(|q| q.iter().any(|x| !x.is_finite()))
        {
            return Err(LibraryError::QueryNotFinite);
        }
        if !self.is_empty()
            && self
                .omit
                .as_ref()
                .is_some_and(|o| o.contains(OmitKey::Embedding))
        {
            return Err(LibraryError::NoSimilarity(self.store.ids[0].to_string()));
        }
        if let Some(q) = &query
            && has_embeddings
        {
            self.check_score_range(q)?;
        }
        let omit = match args.get("omit") {
            None | Some(Value::Null) => Omit::default(),
            Some(v) => Omit::parse_value(v)?,
        };
        if query.is_none() && !self.is_empty() {
            let seed = options.seed.unwrap_or_else(rand::random);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let d = self.store.dim.unwrap_or(0);
            query = Some((0..d).map(|_| rng.random::<f32>()).collect());
        }
        Ok(Prepared {
            query,
            count,
            count_type,
            omit,
        })
    }

    /// Refuses a query whose scores could overflow f32 (issue 11 item 4). Scores are dot
    /// products computed in f32 by `mnemon_vector`; by Cauchy–Schwarz every partial sum of
    /// `q·r` is at most `|q|·|r|` in magnitude, so when `|q|·max|r|` stays below half of
    /// `f32::MAX` (margin for rounding) every score is finite and ranks correctly, in the exact
    /// and the fast scan alike. Both lengths are computed in f64, where they cannot overflow.
    fn check_score_range(&self, query: &[f32]) -> Result<()> {
        let limit = f64::from(f32::MAX) / 2.0;
        let query_norm = crate::library::norm_f64(query);
        if query_norm == 0.0 {
            return Ok(());
        }
        let library_norm = self.max_row_norm();
        if query_norm * library_norm >= limit {
            return Err(LibraryError::QueryTooLarge {
                query_norm,
                library_norm,
                limit,
            });
        }
        Ok(())
    }

    fn run(
        &self,
        args: &Map<String, Value>,
        embedding: Option<&[f32]>,
        policy: &AccessPolicy,
        options: &QueryOptions,
    ) -> Result<Map<String, Value>> {
        let p = self.prepare(args, embedding, options)?;
        self.finish(args, p, policy, options.fast, None)
    }

    /// Everything after the checks: access, scoring (unless `scores` holds it already), the
    /// cut and the result.
    fn finish(
        &self,
        args: &Map<String, Value>,
        p: Prepared,
        policy: &AccessPolicy,
        fast: bool,
        scores: Option<&[f32]>,
    ) -> Result<Map<String, Value>> {
        // A sidecar changed under the map: refuse rather than answer from zeros or new bytes.
        self.store.check_backing()?;
        // Restrict: which tags the token opens.
        let granted = args
            .get("access_token")
            .and_then(Value::as_str)
            .and_then(|t| policy.grants(t))
            .unwrap_or_default();
        let open_tag: Vec<bool> = self
            .store
            .tag_names
            .iter()
            .map(|t| granted.iter().any(|g| g == t))
            .collect();
        let tags = &self.store.tags;
        let keep = |i: usize| {
            let t = tags[i];
            t == NO_TAG || open_tag.get(t as usize).copied().unwrap_or(false)
        };
        let restricted = (0..self.len()).filter(|&i| !keep(i)).count();
        let visible = self.len() - restricted;

        let query = p.query.unwrap_or_default();
        let (chosen, truncate) = if self.is_empty() {
            (Vec::new(), None)
        } else {
            let scan = match (scores, fast) {
                (Some(scores), _) => Scan::Scored(scores),
                (None, true) => Scan::Fast,
                (None, false) => Scan::Exact,
            };
            self.select(&query, p.count, p.count_type, &keep, visible, scan)
        };

        // Build the result bits.
        let omit_all = p.omit.all();
        let mut bits = Vec::with_capacity(if omit_all { 0 } else { chosen.len() });
        if !omit_all {
            for (n, s) in chosen.iter().enumerate() {
                let mut bit = self.store.json(s.index);
                if n == 0
                    && let Some(limit) = truncate
                    && let Some(Value::String(text)) = bit.get_mut("text")
                {
                    *text = text.chars().take(limit).collect();
                }
                if bit.contains_key("embedding") {
                    if p.omit.contains(OmitKey::Embedding) {
                        bit.shift_remove("embedding");
                    } else {
                        let row = self.store.embeddings.view().row(s.index).unwrap_or(&[]);
                        bit.insert(
                            "embedding".into(),
                            Value::String(crate::codec::encode_vector(row)),
                        );
                    }
                }
                if p.omit.contains(OmitKey::Similarity) {
                    bit.shift_remove("similarity");
                } else {
                    bit.insert("similarity".into(), Value::from(f64::from(s.score)));
                }
                for key in [OmitKey::TokenCount, OmitKey::Info] {
                    if p.omit.contains(key) {
                        bit.shift_remove(key.as_str());
                    }
                }
                bit.shift_remove("access_tag");
                bits.push(Value::Object(bit));
            }
        }

        let mut counts = Map::new();
        counts.insert("bits".into(), Value::from(chosen.len()));
        if policy.restricted_count {
            counts.insert("restricted".into(), Value::from(restricted));
        }
        let mut details = Map::new();
        details.insert("counts".into(), Value::Object(counts));
        if restricted > 0 && !policy.restricted_message.is_empty() {
            details.insert(
                "message".into(),
                Value::from(format!(
                    "Restricted results were omitted. {}",
                    policy.restricted_message
                )),
            );
        }

        let mut out = Map::new();
        let mut bits = Some(bits);
        let mut details = Some(details);
        let mut sort_done = false;
        let mut omit_done = false;
        for (k, v) in &self.top {
            let value = match k.as_str() {
                "version" => Value::from(1),
                "embedding_model" => Value::from(self.model.as_str()),
                "bits" => Value::Array(bits.take().unwrap_or_default()),
                "sort" => {
                    sort_done = true;
                    Value::from("similarity")
                }
                "details" => Value::Object(details.take().unwrap_or_default()),
                "omit" => {
                    omit_done = true;
                    p.omit.echo_value()
                }
                _ => v.clone(),
            };
            out.insert(k.clone(), value);
        }
        if let Some(b) = bits {
            out.insert("bits".into(), Value::Array(b));
        }
        if !sort_done {
            out.insert("sort".into(), Value::from("similarity"));
        }
        if let Some(d) = details {
            out.insert("details".into(), Value::Object(d));
        }
        if !omit_done {
            out.insert("omit".into(), p.omit.echo_value());
        }
        // Checked again after the scan: the file may have changed while it was read.
        self.store.check_backing()?;
        Ok(out)
    }

    /// Scores, sorts and cuts: the chosen bits in result order, and the character limit for the
    /// first bit's text when it alone is over a token budget.
    fn select<F>(
        &self,
        query: &[f32],
        count: i64,
        count_type: CountType,
        keep: &F,
        visible: usize,
        scan: Scan<'_>,
    ) -> (Vec<Scored>, Option<usize>)
    where
        F: Fn(usize) -> bool + Sync,
    {
        let view = self.store.embeddings.view();
        if matches!(scan, Scan::Fast)
            && count > 0
            && let Some(chosen) = self.select_fast(query, count, count_type, keep, visible)
        {
            return chosen;
        }
        let scored = match scan {
            Scan::Scored(scores) => Some(scores),
            Scan::Fast | Scan::Exact => None,
        };
        if count > 0 && count_type == CountType::Bit {
            let k = (count as u64).min(visible as u64) as usize;
            return match scored {
                Some(scores) => (top_k_of_scores(scores, k, keep), None),
                None => (view.top_k(query, k, keep), None),
            };
        }
        let computed;
        let scores = match scored {
            Some(scores) => scores,
            None => {
                computed = view.scores(query);
                &computed
            }
        };
        let visible_rows = (0..self.len())
            .filter(|&i| keep(i))
            .map(|i| i as u32)
            .collect();
        let mut ranked = Ranked::new(scores, visible_rows);
        let (order, truncate) = cut(&mut ranked, count, count_type, &self.store.token_counts);
        let chosen = order
            .into_iter()
            .map(|index| Scored {
                index,
                score: scores[index],
            })
            .collect();
        (chosen, truncate)
    }
}

impl Library {
    /// Fast mode (spec §11.5): the int8 pre-scan with proven bounds, see [`crate::fast`]. The
    /// result equals the exact scan's; `None` when the exact scan should run instead.
    fn select_fast<F>(
        &self,
        query: &[f32],
        count: i64,
        count_type: CountType,
        keep: &F,
        visible: usize,
    ) -> Option<(Vec<Scored>, Option<usize>)>
    where
        F: Fn(usize) -> bool + Sync,
    {
        let view = self.store.embeddings.view();
        let token_counts = &self.store.token_counts;
        let prescan = self.prescan();
        match count_type {
            CountType::Bit => {
                let k = (count as u64).min(visible as u64) as usize;
                let mut chosen = fast::select(
                    prescan,
                    &view,
                    query,
                    keep,
                    (4 * k).max(k + 64),
                    &mut |scored| {
                        if scored.len() >= k {
                            Need::Prefix(k)
                        } else {
                            Need::More
                        }
                    },
                )?;
                chosen.truncate(k);
                Some((chosen, None))
            }
            CountType::Token => {
                let cut_of = |scored: &[Scored]| {
                    cut_ranked(
                        scored.iter().map(|s| s.index),
                        count,
                        count_type,
                        token_counts,
                    )
                };
                let mut chosen = fast::select(prescan, &view, query, keep, 64, &mut |scored| {
                    match cut_of(scored) {
                        (_, _, true) => Need::More,
                        // A lone first bit over the budget: only it was looked at.
                        (_, Some(_), false) => Need::Prefix(1),
                        // The bit after the kept ones ended the budget, so it counts too.
                        (kept, None, false) => Need::Prefix(kept + 1),
                    }
                })?;
                let (kept, truncate, _) = cut_of(&chosen);
                chosen.truncate(kept);
                Some((chosen, truncate))
            }
        }
    }
}

/// Visible rows in rank order, sorted lazily: a batch of the best C is selected and sorted, and
/// the next batch (C doubled) only when the walk gets there (spec §11.2).
struct Ranked<'a> {
    scores: &'a [f32],
    rest: Vec<u32>,
    pos: usize,
    sorted_to: usize,
    batch: usize,
}

impl<'a> Ranked<'a> {
    fn new(scores: &'a [f32], rest: Vec<u32>) -> Self {
        Ranked {
            scores,
            rest,
            pos: 0,
            sorted_to: 0,
            batch: 64,
        }
    }

    fn cmp(scores: &[f32], a: u32, b: u32) -> std::cmp::Ordering {
        let (sa, sb) = (scores[a as usize], scores[b as usize]);
        sb.total_cmp(&sa).then(a.cmp(&b))
    }
}

impl Iterator for Ranked<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.pos >= self.rest.len() {
            return None;
        }
        if self.pos == self.sorted_to {
            let scores = self.scores;
            let tail = &mut self.rest[self.pos..];
            let take = self.batch.min(tail.len());
            if take < tail.len() {
                tail.select_nth_unstable_by(take - 1, |&a, &b| Ranked::cmp(scores, a, b));
            }
            tail[..take].sort_unstable_by(|&a, &b| Ranked::cmp(scores, a, b));
            self.sorted_to = self.pos + take;
            self.batch = self.batch.saturating_mul(2);
        }
        let i = self.rest[self.pos] as usize;
        self.pos += 1;
        Some(i)
    }
}

/// Walks ranked candidates and applies the cut (spec §8 step 5). Returns how many are kept, the
/// text limit for a lone over-budget first bit, and whether the candidates ran out before the
/// cut was decided.
fn cut_ranked(
    ranked: impl Iterator<Item = usize>,
    count: i64,
    count_type: CountType,
    token_counts: &[i64],
) -> (usize, Option<usize>, bool) {
    let mut kept = 0usize;
    let mut sum: i64 = 0;
    for i in ranked {
        if count >= 0 {
            match count_type {
                CountType::Bit => {
                    if kept as i64 >= count {
                        return (kept, None, false);
                    }
                }
                CountType::Token => {
                    let tc = token_counts.get(i).copied().unwrap_or(0);
                    if sum.saturating_add(tc) > count {
                        if kept == 0 {
                            return (1, Some(count as usize), false);
                        }
                        return (kept, None, false);
                    }
                    sum = sum.saturating_add(tc);
                }
            }
        }
        kept += 1;
    }
    (kept, None, true)
}

/// Applies the cut to an order: the kept indices and the first bit's text limit, if any.
pub(crate) fn cut(
    order: &mut dyn Iterator<Item = usize>,
    count: i64,
    count_type: CountType,
    token_counts: &[i64],
) -> (Vec<usize>, Option<usize>) {
    let mut taken = Vec::new();
    let (n, truncate, _) = cut_ranked(
        std::iter::from_fn(|| {
            let i = order.next()?;
            taken.push(i);
            Some(i)
        }),
        count,
        count_type,
        token_counts,
    );
    taken.truncate(n);
    (taken, truncate)
}
