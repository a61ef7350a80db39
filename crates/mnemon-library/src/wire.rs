//! The Polymath query protocol on the wire (`docs/reference/library.md#query-arguments` and
//! `#result-shape`): the JSON arguments parsed once into a
//! typed [`QueryRequest`], and a [`QueryResult`] written back as the result JSON. This is the
//! only place the engine meets JSON arguments; a host, the CLI and the conformance tests go
//! through it, Rust callers build a [`QueryRequest`] and skip it.
//!
//! A result is written as bytes by [`render_to`] (or [`render_capped`], with a size limit), one
//! bit at a time from the library's stored data, so that a large result never exists as a JSON
//! value; [`render`] gives the same JSON as a value, for callers that edit or pretty-print it.
//!
//! ```
//! use mnemon_library::{AccessPolicy, Library, QueryOptions, wire};
//! use serde_json::json;
//!
//! let mut lib = Library::blank("test-model");
//! lib.insert(&json!({"text": "alpha", "embedding": "AACAPwAAAAAAAAAA", "token_count": 1,
//!                    "info": {"url": "https://example.com/alpha"}}))?;
//! let args = json!({"version": 1, "query_embedding_model": "test-model",
//!                   "query_embedding": "AACAPwAAAAAAAAAA", "count": 1, "count_type": "bit"});
//! let parsed = wire::parse_query(&lib, args.as_object().unwrap(), &QueryOptions::default())?;
//! let result = lib.query(&parsed.request, &parsed.grant(&AccessPolicy::default()))?;
//! let json = wire::render(&result)?;
//! assert_eq!(json["bits"][0]["text"], "alpha");
//! # Ok::<(), mnemon_library::LibraryError>(())
//! ```

use serde_json::{Map, Value};

use crate::access::{AccessGrant, AccessPolicy};
use crate::codec::{VectorError, decode_vector_unchecked, encode_vector};
use crate::cut::CountType;
use crate::error::{LibraryError, Result};
use crate::library::Library;
use crate::omit::{Omit, OmitKey};
use crate::python::{display_value, int_like};
use crate::request::{IndexUse, QueryRequest};
use crate::result::{Hit, QueryResult};

/// How JSON arguments become a request, beyond the arguments themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryOptions {
    /// Copied into [`QueryRequest::seed`]: seeds the random query vector drawn when no
    /// embedding is given; `None` seeds from the OS.
    pub seed: Option<u64>,
    /// The `count` used when the arguments have none: `None` (the library API) makes a missing
    /// count an error; a host passes `Some(1000)`.
    pub default_count: Option<i64>,
    /// Copied into [`QueryRequest::fast`]: use the int8 pre-scan, whose result equals the
    /// exact scan's.
    pub fast: bool,
    /// Copied into [`QueryRequest::exact`] (or-ed with the `exact` argument): never use the
    /// library's approximate index.
    pub exact: bool,
    /// Copied into [`QueryRequest::index`]: when the library's approximate index answers.
    pub index: IndexUse,
}

/// JSON arguments parsed: the typed request, and the token that chooses its grant.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedQuery {
    /// The request, checked against the library it was parsed for.
    pub request: QueryRequest,
    /// The `access_token` argument, when it is a string.
    pub access_token: Option<String>,
}

impl ParsedQuery {
    /// The grant `policy` gives this query's token.
    pub fn grant(&self, policy: &AccessPolicy) -> AccessGrant {
        policy.grant(self.access_token.as_deref())
    }
}

/// Arguments from form fields (all strings): the first value of a repeated key wins, as the
/// reference reads `request.form`.
pub fn arguments_from_pairs<K, V>(fields: impl IntoIterator<Item = (K, V)>) -> Map<String, Value>
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
    args
}

/// Parses the query arguments `args` (a JSON body, or form fields as strings) for `library`.
///
/// The checks run in the reference's order, so a request with several faults fails with the
/// same message as there: `version` and `count` as Python's `int()`, `count` ≠ 0, `version` ≥ 1,
/// the model, the embedding's encoding, `count_type`, the vector against the library
/// (dimension, finite values, a scorable library, score range), then `omit`. Absent or `null`
/// arguments take their defaults: `count` from `options`, `count_type` `token`, `omit`
/// `embedding`, and no `query_embedding` (nor `""` or `[]`) a random vector.
pub fn parse_query(
    library: &Library,
    args: &Map<String, Value>,
    options: &QueryOptions,
) -> Result<ParsedQuery> {
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
    let model = match args.get("query_embedding_model") {
        Some(Value::String(m)) if m == library.model() => m.clone(),
        None | Some(Value::Null) => return Err(wrong_model(library, "None".to_owned())),
        Some(v) => return Err(wrong_model(library, display_value(v))),
    };
    let embedding: Option<Vec<f32>> = match args.get("query_embedding") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::Array(a)) if a.is_empty() => None,
        Some(Value::String(s)) => Some(decode_vector_unchecked(s).map_err(|e| match e {
            VectorError::Base64(b) => LibraryError::QueryBase64(b.to_string()),
            VectorError::ByteCount(n) => LibraryError::QueryByteCount(n),
            VectorError::NonFinite => LibraryError::QueryNotFinite,
        })?),
        Some(_) => return Err(LibraryError::EmbeddingNotString),
    };
    let count_type = match args.get("count_type") {
        None | Some(Value::Null) => CountType::Token,
        Some(Value::String(s)) if s == "token" => CountType::Token,
        Some(Value::String(s)) if s == "bit" => CountType::Bit,
        Some(v) => return Err(LibraryError::BadCountType(display_value(v))),
    };
    library.check_query_vector(embedding.as_deref())?;
    let omit = match args.get("omit") {
        None | Some(Value::Null) => Omit::default(),
        Some(v) => Omit::parse_value(v)?,
    };
    // Mnemon's own argument: Polymath ignores unknown keys, so its clients never send it and
    // its hosts ignore it (docs/reference/library.md#query-arguments).
    let exact = match args.get("exact") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if s == "true" => true,
        Some(Value::String(s)) if s == "false" => false,
        Some(v) => return Err(LibraryError::BadExact(display_value(v))),
    };
    let access_token = args
        .get("access_token")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(ParsedQuery {
        request: QueryRequest {
            embedding,
            model,
            count,
            count_type,
            omit,
            seed: options.seed,
            fast: options.fast,
            exact: exact || options.exact,
            index: options.index,
        },
        access_token,
    })
}

fn wrong_model(library: &Library, given: String) -> LibraryError {
    LibraryError::WrongModel {
        given,
        expected: library.model().to_owned(),
    }
}

/// The result JSON of a query (`docs/reference/library.md#result-shape`): the library's top-level keys in stored order, with
/// `bits` (each bit's stored keys in order, its embedding re-encoded unless omitted, its
/// `similarity`, without the omitted fields and `access_tag`), `sort: "similarity"`, `details`
/// (`counts.bits`, and `counts.restricted` and `message` as the grant asks) and the `omit`
/// echo; keys the library lacks are appended in that order.
///
/// This builds the whole result as a JSON value, several times the size of its text for large
/// results: to send a result, write it with [`render_to`] or [`render_capped`], which hold one
/// bit at a time and give the same bytes as `serde_json::to_writer` of this value.
pub fn render(result: &QueryResult<'_>) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    for (key, value) in top_level(result) {
        let value = match value {
            TopValue::Bits => Value::Array(
                rendered_hits(result)
                    .map(|hit| render_bit(result, hit).map(Value::Object))
                    .collect::<Result<_>>()?,
            ),
            TopValue::Owned(v) => v,
            TopValue::Stored(v) => v.clone(),
        };
        out.insert(key.to_owned(), value);
    }
    // The bits were read from the library after the scan: refuse if it changed meanwhile.
    result.library.store.check_backing()?;
    Ok(out)
}

/// Why a result could not be written by [`render_to`] or [`render_capped`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// The library could not give the result's bits (its stored data changed or is corrupt).
    #[error(transparent)]
    Library(#[from] LibraryError),
    /// The result is larger than the limit [`render_capped`] was given; nothing past the limit
    /// was written or kept.
    #[error(
        "the result is larger than the limit of {max} bytes; ask for fewer bits with a lower count, or leave fields out with omit (for example omit=embedding)"
    )]
    TooLarge {
        /// The limit, in bytes of JSON.
        max: usize,
    },
    /// The writer failed.
    #[error("writing the query result failed: {0}")]
    Write(std::io::Error),
}

/// Writes the result JSON of [`render`] (the same bytes as `serde_json::to_writer` of it, compact)
/// to `writer` one bit at a time, so that beside the typed result only one bit's JSON value is
/// held, whatever the number of bits.
///
/// On an error, `writer` holds part of the result: discard it.
pub fn render_to<W: std::io::Write>(
    result: &QueryResult<'_>,
    mut writer: W,
) -> std::result::Result<(), RenderError> {
    let w = &mut writer;
    w.write_all(b"{").map_err(write_error)?;
    for (i, (key, value)) in top_level(result).into_iter().enumerate() {
        if i > 0 {
            w.write_all(b",").map_err(write_error)?;
        }
        json_to(w, key)?;
        w.write_all(b":").map_err(write_error)?;
        match value {
            TopValue::Bits => {
                w.write_all(b"[").map_err(write_error)?;
                for (j, hit) in rendered_hits(result).enumerate() {
                    if j > 0 {
                        w.write_all(b",").map_err(write_error)?;
                    }
                    json_to(w, &render_bit(result, hit)?)?;
                }
                w.write_all(b"]").map_err(write_error)?;
            }
            TopValue::Owned(v) => json_to(w, &v)?,
            TopValue::Stored(v) => json_to(w, v)?,
        }
    }
    w.write_all(b"}").map_err(write_error)?;
    // The bits were read from the library after the scan: refuse if it changed meanwhile.
    result.library.store.check_backing()?;
    Ok(())
}

/// The result JSON of [`render`] as bytes, refused with [`RenderError::TooLarge`] as soon as it
/// grows past `max_bytes`: what a host sends. A result over the limit never holds more than
/// `max_bytes` of output (and one bit), however large it would have been.
pub fn render_capped(
    result: &QueryResult<'_>,
    max_bytes: usize,
) -> std::result::Result<Vec<u8>, RenderError> {
    let mut out = CappedBuf::new(max_bytes);
    render_to(result, &mut out)?;
    Ok(out.buf)
}

/// A top-level value of the result: the bits are rendered one at a time, the others are small
/// (or borrowed from the library).
enum TopValue<'r> {
    Bits,
    Owned(Value),
    Stored(&'r Value),
}

/// The result's top-level keys in order, with their values: the library's keys in stored order
/// (`version`, `embedding_model`, `bits`, `sort`, `details` and `omit` replaced by the result's),
/// then those of `bits`, `sort`, `details` and `omit` the library lacks.
fn top_level<'r>(result: &'r QueryResult<'_>) -> Vec<(&'r str, TopValue<'r>)> {
    let library = result.library;
    let omit = &result.omit;
    let mut counts = Map::new();
    counts.insert("bits".into(), Value::from(result.hits.len()));
    if result.grant.report_restricted {
        counts.insert("restricted".into(), Value::from(result.restricted));
    }
    let mut details = Map::new();
    details.insert("counts".into(), Value::Object(counts));
    if let Some(message) = result.message() {
        details.insert("message".into(), Value::from(message));
    }

    let mut out = Vec::with_capacity(library.top.len() + 4);
    let mut details = Some(details);
    let (mut bits_done, mut sort_done, mut omit_done) = (false, false, false);
    for (k, v) in &library.top {
        let value = match k.as_str() {
            "version" => TopValue::Owned(Value::from(1)),
            "embedding_model" => TopValue::Owned(Value::from(library.model())),
            "bits" => {
                bits_done = true;
                TopValue::Bits
            }
            "sort" => {
                sort_done = true;
                TopValue::Owned(Value::from("similarity"))
            }
            "details" => TopValue::Owned(Value::Object(details.take().unwrap_or_default())),
            "omit" => {
                omit_done = true;
                TopValue::Owned(omit.echo_value())
            }
            _ => TopValue::Stored(v),
        };
        out.push((k.as_str(), value));
    }
    if !bits_done {
        out.push(("bits", TopValue::Bits));
    }
    if !sort_done {
        out.push(("sort", TopValue::Owned(Value::from("similarity"))));
    }
    if let Some(d) = details {
        out.push(("details", TopValue::Owned(Value::Object(d))));
    }
    if !omit_done {
        out.push(("omit", TopValue::Owned(omit.echo_value())));
    }
    out
}

/// The hits the result JSON lists: all of them, or none under omit `*`.
fn rendered_hits<'r>(result: &'r QueryResult<'_>) -> impl Iterator<Item = &'r Hit> + 'r {
    let shown = if result.omit.all() {
        0
    } else {
        result.hits.len()
    };
    result.hits.iter().take(shown)
}

/// One bit of the result: its stored keys in order, its embedding re-encoded unless omitted, its
/// `similarity`, without the omitted fields and `access_tag`.
fn render_bit(result: &QueryResult<'_>, hit: &Hit) -> Result<Map<String, Value>> {
    let store = &result.library.store;
    let omit = &result.omit;
    let mut bit = store.json(hit.index)?;
    if let Some(limit) = hit.text_limit
        && let Some(Value::String(text)) = bit.get_mut("text")
    {
        *text = text.chars().take(limit).collect();
    }
    if bit.contains_key("embedding") {
        if omit.contains(OmitKey::Embedding) {
            bit.shift_remove("embedding");
        } else {
            let row = store.embeddings.view().row(hit.index).unwrap_or(&[]);
            bit.insert("embedding".into(), Value::String(encode_vector(row)));
        }
    }
    if omit.contains(OmitKey::Similarity) {
        bit.shift_remove("similarity");
    } else {
        bit.insert("similarity".into(), Value::from(f64::from(hit.similarity)));
    }
    for key in [OmitKey::TokenCount, OmitKey::Info] {
        if omit.contains(key) {
            bit.shift_remove(key.as_str());
        }
    }
    bit.shift_remove("access_tag");
    Ok(bit)
}

/// Writes `value` as compact JSON.
fn json_to<W: std::io::Write, T: serde::Serialize + ?Sized>(
    writer: &mut W,
    value: &T,
) -> std::result::Result<(), RenderError> {
    // An I/O failure comes back out of serde_json as the writer's own error.
    serde_json::to_writer(writer, value).map_err(|e| write_error(e.into()))
}

/// A writer's error, told apart from the cap of a [`CappedBuf`].
fn write_error(error: std::io::Error) -> RenderError {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<OverCap>())
    {
        Some(over) => RenderError::TooLarge { max: over.max },
        None => RenderError::Write(error),
    }
}

/// The error a [`CappedBuf`] gives when a write would take it past its limit.
#[derive(Debug, thiserror::Error)]
#[error("the result is over the limit of {max} bytes")]
struct OverCap {
    max: usize,
}

/// A `Write` into memory that refuses to grow past `max` bytes, so an oversized result is
/// stopped while it is written. Its capacity never goes past `max` either (a `Vec` doubles).
struct CappedBuf {
    buf: Vec<u8>,
    max: usize,
}

impl CappedBuf {
    fn new(max: usize) -> CappedBuf {
        CappedBuf {
            buf: Vec::new(),
            max,
        }
    }
}

impl std::io::Write for CappedBuf {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let needed = self.buf.len().saturating_add(data.len());
        if needed > self.max {
            return Err(std::io::Error::other(OverCap { max: self.max }));
        }
        if needed > self.buf.capacity() {
            // Grow as a Vec would (doubling, from 8 KiB), but never past the cap.
            let target = needed
                .max(self.buf.capacity().saturating_mul(2))
                .max(8 * 1024)
                .min(self.max);
            self.buf.reserve_exact(target - self.buf.len());
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Parses `args`, runs the query under the grant `policy` gives its token, and renders the
/// result: what a host answers to one request.
pub fn query(
    library: &Library,
    args: &Map<String, Value>,
    policy: &AccessPolicy,
    options: &QueryOptions,
) -> Result<Map<String, Value>> {
    let parsed = parse_query(library, args, options)?;
    let result = library.query(&parsed.request, &parsed.grant(policy))?;
    render(&result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_vector;
    use proptest::prelude::*;
    use serde_json::json;

    fn library() -> Library {
        let mut lib = Library::blank("m");
        for (text, v, tag) in [
            ("a", [1.0, 0.0], None),
            ("b", [0.0, 1.0], Some("team")),
            ("c", [0.6, 0.8], None),
        ] {
            let mut bit = json!({"text": text, "info": {"url": format!("u/{text}")},
                                 "embedding": encode_vector(&v), "token_count": 2});
            if let Some(tag) = tag {
                bit["access_tag"] = json!(tag);
            }
            lib.insert(&bit).unwrap();
        }
        lib
    }

    fn args(v: serde_json::Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn parses_into_a_typed_request() {
        let lib = library();
        let parsed = parse_query(
            &lib,
            &args(
                json!({"version": "1", "query_embedding_model": "m", "count": 2.9,
                         "count_type": "bit", "query_embedding": encode_vector(&[0.0, 1.0]),
                         "omit": ["info", "similarity"], "access_token": "t"}),
            ),
            &QueryOptions {
                seed: Some(4),
                default_count: None,
                fast: true,
                ..QueryOptions::default()
            },
        )
        .unwrap();
        let request = parsed.request;
        assert!(!request.exact);
        assert_eq!(request.index, IndexUse::default());
        assert_eq!(request.embedding, Some(vec![0.0, 1.0]));
        assert_eq!((request.count, request.count_type), (2, CountType::Bit));
        assert_eq!(request.omit.echo(), "info,similarity");
        assert_eq!((request.seed, request.fast), (Some(4), true));
        assert_eq!(parsed.access_token.as_deref(), Some("t"));
        // Absent, "" and [] all ask for a random vector; a non-string token grants nothing.
        for embedding in [json!(null), json!(""), json!([])] {
            let parsed = parse_query(
                &lib,
                &args(
                    json!({"version": 1, "query_embedding_model": "m", "count": 1,
                             "query_embedding": embedding, "access_token": 5}),
                ),
                &QueryOptions::default(),
            )
            .unwrap();
            assert_eq!(parsed.request.embedding, None);
            assert_eq!(parsed.access_token, None);
            assert_eq!(parsed.request.count_type, CountType::Token);
        }
    }

    /// `exact` (Mnemon's own argument): a boolean, or `"true"` / `"false"` from a form; `null`
    /// is absent; anything else is refused, after every reference check. The option forces it.
    #[test]
    fn exact_argument_parses_and_the_option_forces_it() {
        let lib = library();
        let exact = |value: Value, forced: bool| {
            let mut a = args(
                json!({"version": 1, "query_embedding_model": "m", "count": 1,
                                    "query_embedding": encode_vector(&[0.0, 1.0])}),
            );
            a.insert("exact".into(), value);
            let options = QueryOptions {
                exact: forced,
                ..QueryOptions::default()
            };
            parse_query(&lib, &a, &options).map(|p| p.request.exact)
        };
        assert!(exact(json!(true), false).unwrap());
        assert!(exact(json!("true"), false).unwrap());
        assert!(!exact(json!(false), false).unwrap());
        assert!(!exact(json!("false"), false).unwrap());
        assert!(!exact(json!(null), false).unwrap());
        assert!(exact(json!(false), true).unwrap());
        for bad in [json!(1), json!("yes"), json!([true])] {
            assert_eq!(
                exact(bad.clone(), false).unwrap_err().to_string(),
                format!("exact must be true or false, not {}", display_value(&bad))
            );
        }
        // A reference error comes first.
        let mut a = args(
            json!({"version": 0, "query_embedding_model": "m", "count": 1,
                                "exact": "maybe"}),
        );
        assert_eq!(
            parse_query(&lib, &a, &QueryOptions::default())
                .unwrap_err()
                .to_string(),
            "version must be at least 1"
        );
        a.insert("version".into(), json!(1));
        assert!(parse_query(&lib, &a, &QueryOptions::default()).is_err());
    }

    /// Errors keep the reference's order: a query wrong in several ways fails on the first.
    #[test]
    fn errors_come_in_the_reference_order() {
        let lib = library();
        let err = |v: serde_json::Value, default_count: Option<i64>| {
            let options = QueryOptions {
                default_count,
                ..QueryOptions::default()
            };
            parse_query(&lib, &args(v), &options)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(json!({"count": 0, "version": 0}), None),
            "count must be greater than 0"
        );
        assert_eq!(err(json!({}), None), "count must be greater than 0");
        assert_eq!(err(json!({}), Some(5)), "version must be at least 1");
        assert_eq!(
            err(
                json!({"version": 1, "count": 1, "query_embedding": 3, "count_type": "x"}),
                None
            ),
            "Embedding model was None but expected m"
        );
        assert_eq!(
            err(
                json!({"version": 1, "count": 1, "query_embedding_model": "m",
                       "query_embedding": 3, "count_type": "x"}),
                None
            ),
            "query_embedding must be str"
        );
        assert_eq!(
            err(
                json!({"version": 1, "count": 1, "query_embedding_model": "m",
                       "query_embedding": encode_vector(&[1.0]), "count_type": "x"}),
                None
            ),
            "count_type x is not one of the legal options: {'bit', 'token'}"
        );
        assert_eq!(
            err(
                json!({"version": 1, "count": 1, "query_embedding_model": "m",
                       "query_embedding": encode_vector(&[1.0]), "omit": "bogus"}),
                None
            ),
            "query_embedding has 1 dimensions but the library's embeddings have 2"
        );
    }

    /// Issue 12 item 1: `run_planned` took the arguments again to read `access_token`, so other
    /// arguments silently applied another token. The plan now carries the grant it was made
    /// with, and nothing else can change it.
    #[test]
    fn a_plan_runs_under_its_own_grant() {
        let lib = library();
        let policy = {
            let mut p = AccessPolicy::new();
            p.add_token("team-secret", vec!["team".into()]);
            p
        };
        let request = QueryRequest::new("m", vec![0.0, 1.0], 3);
        let texts = |grant: AccessGrant| {
            let plan = lib.plan(&request, grant).unwrap();
            let result = lib.run_planned(plan, None).unwrap();
            let json = render(&result).unwrap();
            json["bits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["text"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(texts(policy.grant(Some("team-secret"))), ["b", "c", "a"]);
        assert_eq!(texts(policy.grant(None)), ["c", "a"]);
        assert_eq!(texts(policy.grant(Some("wrong"))), ["c", "a"]);
    }

    #[test]
    fn form_fields_keep_the_first_value() {
        let args = arguments_from_pairs([("count", "2"), ("count", "3"), ("omit", "")]);
        assert_eq!(args["count"], "2");
        assert_eq!(args["omit"], "");
        let keys: Vec<&String> = args.keys().collect();
        assert_eq!(keys, ["count", "omit"]);
    }

    /// A corrupt stored bit fails the render instead of answering with an empty bit.
    #[test]
    fn a_corrupt_bit_fails_the_render() {
        let mut lib = library();
        let request = QueryRequest::new("m", vec![1.0, 0.0], 1);
        let arena = lib.store.arena.make_owned();
        arena.fill(b'#');
        let result = lib.query(&request, &AccessGrant::default()).unwrap();
        let err = render(&result).unwrap_err();
        assert!(matches!(err, LibraryError::CorruptBit { .. }), "{err}");
        assert!(!err.is_client_error());
    }

    /// A library of `n` bits with `text_len`-character texts and 64-dimension embeddings, one
    /// in three tagged, with extra top-level keys around `bits`.
    fn big_library(n: usize, text_len: usize) -> Library {
        let mut lib = Library::from_value(json!({
            "version": 1, "embedding_model": "m", "extra": {"k": [1, "x\u{e9}\t"]},
            "bits": [], "omit": "", "tail": "t"}))
        .unwrap();
        for i in 0..n {
            let v: Vec<f32> = (0..64).map(|d| ((i * 7 + d) % 13) as f32 - 6.0).collect();
            let mut bit = json!({"text": format!("{i:06} {}", "\"é\n".repeat(text_len / 3)),
                                 "embedding": encode_vector(&v), "token_count": 3,
                                 "info": {"url": format!("u/{i}"), "title": "t"}});
            if i % 3 == 0 {
                bit["access_tag"] = json!("team");
            }
            lib.insert(&bit).unwrap();
        }
        lib
    }

    /// `render_to` writes exactly the bytes of `serde_json::to_writer(render(..))`, for every
    /// omit, grant and count type (the host and the conformance tests pin those bytes).
    #[test]
    fn render_to_writes_the_bytes_of_render() {
        let lib = big_library(40, 30);
        let mut policy = AccessPolicy::new();
        policy.add_token("team-secret", vec!["team".into()]);
        for omit in [
            json!(null),
            json!(""),
            json!("*"),
            json!("similarity"),
            json!(["embedding", "info", "token_count"]),
        ] {
            for (count, count_type) in [(-1, "bit"), (3, "bit"), (5, "token")] {
                for token in [json!(null), json!("team-secret")] {
                    let a = args(json!({"version": 1, "query_embedding_model": "m",
                                        "count": count, "count_type": count_type, "omit": omit,
                                        "access_token": token}));
                    let options = QueryOptions {
                        seed: Some(9),
                        ..QueryOptions::default()
                    };
                    let parsed = parse_query(&lib, &a, &options).unwrap();
                    let result = lib.query(&parsed.request, &parsed.grant(&policy)).unwrap();
                    let want = serde_json::to_vec(&render(&result).unwrap()).unwrap();
                    let mut got = Vec::new();
                    render_to(&result, &mut got).unwrap();
                    assert_eq!(
                        String::from_utf8(got).unwrap(),
                        String::from_utf8_lossy(&want)
                    );
                    let capped = render_capped(&result, want.len()).unwrap();
                    assert_eq!(capped, want);
                    let refused = render_capped(&result, want.len() - 1).unwrap_err();
                    assert!(
                        matches!(refused, RenderError::TooLarge { max } if max == want.len() - 1),
                        "{refused}"
                    );
                }
            }
        }
    }

    /// Issue 11 item 6: the result cap was checked only while serialising a result already
    /// built whole as a JSON value (several times its size), so 16 concurrent `count: -1`
    /// queries peaked at 4.6 GB though each was refused. A result over the cap must be refused
    /// holding about the cap, never the whole result.
    #[test]
    fn an_oversized_result_is_refused_without_building_it() {
        let lib = big_library(3000, 600);
        let request = QueryRequest {
            count_type: CountType::Bit,
            ..QueryRequest::new("m", vec![1.0; 64], -1)
        };
        let result = lib.query(&request, &AccessGrant::default()).unwrap();
        let whole = render(&result).unwrap();
        let whole_bytes = serde_json::to_vec(&whole).unwrap().len();
        drop(whole);
        assert!(whole_bytes > 2_000_000, "{whole_bytes}");
        let cap = 64 * 1024;
        let (refused, peak) = counting_alloc::peak_during(|| render_capped(&result, cap));
        assert!(matches!(refused, Err(RenderError::TooLarge { .. })));
        // The cap, and one bit's JSON value with room to spare; the whole result as a value
        // is many times its 2 MB of text.
        assert!(
            peak < 2 * cap,
            "peak {peak} bytes while refusing a {whole_bytes}-byte result over a {cap}-byte cap"
        );
        // A result that fits is held once, as its bytes.
        let (fits, peak) = counting_alloc::peak_during(|| render_capped(&result, 2 * whole_bytes));
        assert_eq!(fits.unwrap().len(), whole_bytes);
        assert!(peak < 2 * whole_bytes, "{peak} for {whole_bytes}");
    }

    #[test]
    fn the_capped_buffer_stops_at_its_limit() {
        use std::io::Write;
        let mut w = CappedBuf::new(5);
        w.write_all(b"abc").unwrap();
        let err = w.write_all(b"def").unwrap_err();
        assert!(matches!(write_error(err), RenderError::TooLarge { max: 5 }));
        assert_eq!(w.buf, b"abc");
        assert!(w.buf.capacity() <= 5);
    }

    proptest! {
        /// Whatever the arguments, parsing answers (a request or an error) and never panics,
        /// and a parsed request runs and is written as the bytes of its rendered value.
        #[test]
        fn parsing_never_panics(
            version in prop_oneof![Just(json!(1)), Just(json!("2")), any::<i64>().prop_map(|v| json!(v)), Just(json!(null)), Just(json!([1]))],
            count in prop_oneof![Just(json!(null)), any::<i64>().prop_map(|v| json!(v)), any::<f64>().prop_map(|v| json!(v)), "[ -~]{0,6}".prop_map(|v| json!(v))],
            model in prop_oneof![Just(json!("m")), Just(json!(null)), Just(json!(3))],
            embedding in prop_oneof![Just(json!(null)), "[A-Za-z0-9+/=]{0,16}".prop_map(|v| json!(v)), Just(json!([])), Just(json!({}))],
            count_type in prop_oneof![Just(json!(null)), Just(json!("bit")), Just(json!("token")), "[a-z]{0,5}".prop_map(|v| json!(v))],
            omit in prop_oneof![Just(json!(null)), "[a-z_,*]{0,20}".prop_map(|v| json!(v)), Just(json!(["info", "similarity"])), Just(json!(7))],
            token in prop_oneof![Just(json!(null)), Just(json!("team-secret")), Just(json!(1))],
            exact in prop_oneof![Just(json!(null)), any::<bool>().prop_map(|v| json!(v)), "[a-z]{0,5}".prop_map(|v| json!(v)), Just(json!(0))],
        ) {
            let lib = library();
            let a = args(json!({"version": version, "count": count, "query_embedding_model": model,
                                "query_embedding": embedding, "count_type": count_type,
                                "omit": omit, "access_token": token, "exact": exact.clone()}));
            // `exact` parses exactly when it is absent, a boolean, or "true" / "false".
            let exact_ok = matches!(&exact, Value::Null | Value::Bool(_))
                || exact == json!("true")
                || exact == json!("false");
            if let Err(e) = parse_query(&lib, &a, &QueryOptions::default()) {
                if matches!(e.kind(), LibraryError::BadExact(_)) {
                    prop_assert!(!exact_ok);
                }
            } else {
                prop_assert!(exact_ok);
            }
            let policy = AccessPolicy::new();
            if let Ok(parsed) = parse_query(&lib, &a, &QueryOptions::default()) {
                let result = lib.query(&parsed.request, &parsed.grant(&policy)).unwrap();
                let rendered = render(&result);
                prop_assert!(rendered.is_ok());
                // The bytes written are those of the value, whatever the arguments.
                let mut written = Vec::new();
                prop_assert!(render_to(&result, &mut written).is_ok());
                prop_assert_eq!(written, serde_json::to_vec(&rendered.unwrap()).unwrap());
            }
        }
    }
}

/// A global allocator for this crate's unit tests that counts the bytes each thread holds, so a
/// test can measure the peak of one call (other tests run on other threads meanwhile).
#[cfg(test)]
mod counting_alloc {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    struct Counting;

    thread_local! {
        /// Bytes this thread allocated minus those it freed, and the most since the last reset.
        static HELD: Cell<(isize, isize)> = const { Cell::new((0, 0)) };
    }

    fn add(bytes: isize) {
        // `try_with`: allocations during thread teardown are not counted.
        let _ = HELD.try_with(|held| {
            let (now, peak) = held.get();
            let now = now + bytes;
            held.set((now, peak.max(now)));
        });
    }

    // SAFETY: every call is forwarded to the system allocator unchanged; the counting only
    // touches a thread-local `Cell` initialised without allocating.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            add(layout.size() as isize);
            // SAFETY: the caller's contract for `layout` is the system allocator's.
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            add(-(layout.size() as isize));
            // SAFETY: `ptr` was allocated by `System` with `layout`.
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            add(new_size as isize - layout.size() as isize);
            // SAFETY: as for `alloc` and `dealloc`.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;

    /// Runs `f` and returns its result with the most bytes this thread held meanwhile beyond
    /// what it held before (the result's own allocations included while they are alive).
    pub(super) fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
        let start = HELD.with(|held| {
            let (now, _) = held.get();
            held.set((now, now));
            now
        });
        let out = f();
        let peak = HELD.with(|held| held.get().1);
        (out, (peak - start).max(0) as usize)
    }
}
