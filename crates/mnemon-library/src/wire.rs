//! The Polymath query protocol on the wire (`docs/reference/library.md#query-arguments` and
//! `#result-shape`): the JSON arguments parsed once into a
//! typed [`QueryRequest`], and a [`QueryResult`] written back as the result JSON. This is the
//! only place the engine meets JSON arguments; a host, the CLI and the conformance tests go
//! through it, Rust callers build a [`QueryRequest`] and skip it.
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
use crate::request::QueryRequest;
use crate::result::QueryResult;

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
pub fn render(result: &QueryResult<'_>) -> Result<Map<String, Value>> {
    let library = result.library;
    let store = &library.store;
    let omit = &result.omit;
    let mut bits = Vec::with_capacity(result.returned_bits());
    if !omit.all() {
        for hit in &result.hits {
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
            bits.push(Value::Object(bit));
        }
    }

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

    let mut out = Map::new();
    let mut bits = Some(bits);
    let mut details = Some(details);
    let mut sort_done = false;
    let mut omit_done = false;
    for (k, v) in &library.top {
        let value = match k.as_str() {
            "version" => Value::from(1),
            "embedding_model" => Value::from(library.model()),
            "bits" => Value::Array(bits.take().unwrap_or_default()),
            "sort" => {
                sort_done = true;
                Value::from("similarity")
            }
            "details" => Value::Object(details.take().unwrap_or_default()),
            "omit" => {
                omit_done = true;
                omit.echo_value()
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
        out.insert("omit".into(), omit.echo_value());
    }
    // The bits were read from the library after the scan: refuse if it changed meanwhile.
    store.check_backing()?;
    Ok(out)
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
