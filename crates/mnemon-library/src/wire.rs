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
            },
        )
        .unwrap();
        let request = parsed.request;
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

    proptest! {
        /// Whatever the arguments, parsing answers (a request or an error) and never panics,
        /// and a parsed request runs.
        #[test]
        fn parsing_never_panics(
            version in prop_oneof![Just(json!(1)), Just(json!("2")), any::<i64>().prop_map(|v| json!(v)), Just(json!(null)), Just(json!([1]))],
            count in prop_oneof![Just(json!(null)), any::<i64>().prop_map(|v| json!(v)), any::<f64>().prop_map(|v| json!(v)), "[ -~]{0,6}".prop_map(|v| json!(v))],
            model in prop_oneof![Just(json!("m")), Just(json!(null)), Just(json!(3))],
            embedding in prop_oneof![Just(json!(null)), "[A-Za-z0-9+/=]{0,16}".prop_map(|v| json!(v)), Just(json!([])), Just(json!({}))],
            count_type in prop_oneof![Just(json!(null)), Just(json!("bit")), Just(json!("token")), "[a-z]{0,5}".prop_map(|v| json!(v))],
            omit in prop_oneof![Just(json!(null)), "[a-z_,*]{0,20}".prop_map(|v| json!(v)), Just(json!(["info", "similarity"])), Just(json!(7))],
            token in prop_oneof![Just(json!(null)), Just(json!("team-secret")), Just(json!(1))],
        ) {
            let lib = library();
            let a = args(json!({"version": version, "count": count, "query_embedding_model": model,
                                "query_embedding": embedding, "count_type": count_type,
                                "omit": omit, "access_token": token}));
            let policy = AccessPolicy::new();
            if let Ok(parsed) = parse_query(&lib, &a, &QueryOptions::default()) {
                let result = lib.query(&parsed.request, &parsed.grant(&policy)).unwrap();
                prop_assert!(render(&result).is_ok());
            }
        }
    }
}
