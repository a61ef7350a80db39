//! JSON Schemas of the library formats (feature `schema`): the library file, query arguments,
//! query results and the host config, derived (`schemars`) from the types below, which spell
//! each format out field by field; `cargo xtask codegen` writes them to `docs/schemas/`.
//!
//! The formats are read and written by hand (field order, unknown keys, Python-compatible
//! numbers: [`crate::wire`], the loader, [`crate::AccessPolicy::from_host_config`]), so these
//! types only describe them; the engine's own types take part where they are the format
//! ([`CountType`]). The tests check the schemas against the reference fixtures and the results
//! computed here, so they cannot drift silently. The rules are in `docs/reference/library.md`.

use std::collections::BTreeMap;

use schemars::JsonSchema;

// Every object keeps (files) or ignores (arguments, config) keys it does not name, so every
// schema below says `additionalProperties: true`.

use crate::CountType;

/// An embedding library file (Polymath format, version 1). Files with `version` 0 or absent
/// (`content` keyed by id, `sort: {type, ids}`) are upgraded on load. Unknown keys are kept in
/// order. Saved tab-indented with ASCII-only strings, as Python's json.dump(indent='\t').
#[derive(JsonSchema)]
#[schemars(title = "Library", rename = "Library", extend("additionalProperties" = true))]
pub struct LibraryFile {
    /// The format version: 1.
    #[schemars(extend("const" = 1))]
    pub version: i64,
    /// e.g. openai.com:text-embedding-ada-002; queries must name the same model.
    #[schemars(length(min = 1))]
    pub embedding_model: String,
    /// Fields absent from every bit: `*`, `""`, or a comma-separated list of similarity,
    /// embedding, token_count, info, access_tag.
    pub omit: Option<String>,
    /// similarity, random or manual; absent means any.
    pub sort: Option<String>,
    /// Counts and a message, as a query result writes them.
    pub details: Option<Details>,
    /// The bits, in file order.
    pub bits: Vec<Bit>,
}

/// One piece of content with its embedding. `embedding`, `token_count` and `info` are required
/// unless the library's `omit` names them (a field `omit` names must be absent). The id of a bit
/// is the SHA-256 of `info.url` and `text`. Extra keys are kept in order.
#[derive(JsonSchema)]
#[schemars(extend("additionalProperties" = true))]
pub struct Bit {
    /// The content.
    pub text: String,
    /// D float32 values, little-endian, standard base64 with padding; ASCII whitespace is
    /// ignored.
    #[schemars(length(min = 1), extend("contentEncoding" = "base64"))]
    pub embedding: Option<String>,
    /// cl100k_base tokens of `text`; queries only sum it.
    pub token_count: Option<i64>,
    /// The score from the last query.
    pub similarity: Option<f64>,
    /// Only callers whose token grants this tag see the bit; absent or null means public.
    pub access_tag: Option<String>,
    /// Where the bit comes from.
    pub info: Option<BitInfo>,
}

/// Where a bit comes from. Extra keys are kept.
#[derive(JsonSchema)]
#[schemars(extend("additionalProperties" = true))]
pub struct BitInfo {
    /// The source document; part of the bit's id.
    pub url: String,
    /// An image of the source.
    pub image_url: Option<String>,
    /// The source's title.
    pub title: Option<String>,
    /// A description of the source.
    pub description: Option<String>,
}

/// The top-level `details` object of a library file.
#[derive(JsonSchema)]
#[schemars(extend("additionalProperties" = true))]
pub struct Details {
    /// Why bits are missing, as a query result says it.
    pub message: Option<String>,
    /// Bit counts.
    pub counts: Option<Counts>,
}

/// `details.counts`.
#[derive(JsonSchema)]
#[schemars(extend("additionalProperties" = true))]
pub struct Counts {
    /// The number of bits selected.
    pub bits: Option<u64>,
    /// Bits hidden by access tags, library-wide.
    pub restricted: Option<u64>,
}

/// The arguments of a library query, as a JSON body (also sent as form fields, all strings).
/// null counts as absent; unknown keys are ignored. `wire::parse_query` reads them.
#[derive(JsonSchema)]
#[schemars(title = "QueryArgs", rename = "QueryArgs", extend("additionalProperties" = true))]
pub struct QueryArgs {
    /// Protocol version; must be at least 1.
    pub version: IntLike,
    /// The query vector in the library's embedding encoding; absent, "" or [] draws a random
    /// vector.
    pub query_embedding: Option<QueryEmbedding>,
    /// Must equal the library's embedding_model.
    pub query_embedding_model: Option<String>,
    /// Bits or tokens to return; negative means all; 0 is an error. The host defaults to 1000.
    pub count: Option<IntLike>,
    /// How `count` is measured; absent means token.
    pub count_type: Option<CountType>,
    /// Fields to leave out of each bit (default embedding): `*`, "", or similarity, embedding,
    /// token_count, info, access_tag; comma-separated or a list.
    pub omit: Option<OmitList>,
    /// A token from the host config; anything but a known token grants nothing.
    pub access_token: Option<serde_json::Value>,
    /// Mnemon's own: true never uses the library's approximate index (the exact scan answers).
    /// Polymath hosts ignore it.
    pub exact: Option<ExactArg>,
}

/// `exact`: a boolean, or "true" / "false" from a form.
#[derive(JsonSchema)]
#[schemars(untagged)]
pub enum ExactArg {
    /// A JSON boolean.
    Bool(bool),
    /// A form value.
    Text(ExactText),
}

/// `exact` as form text.
#[derive(JsonSchema)]
#[schemars(rename_all = "lowercase")]
pub enum ExactText {
    /// `"true"`.
    True,
    /// `"false"`.
    False,
}

/// An integer, or a value Python's int() accepts: a float (truncated), a boolean, or a decimal
/// string.
#[derive(JsonSchema)]
#[schemars(untagged)]
pub enum IntLike {
    /// An integer.
    Integer(i64),
    /// A float, truncated toward zero.
    Float(f64),
    /// A boolean: 1 or 0.
    Boolean(bool),
    /// A decimal literal, as Python's int() reads it.
    Text(String),
}

/// A query vector on the wire.
#[derive(JsonSchema)]
#[schemars(untagged)]
pub enum QueryEmbedding {
    /// The vector in the library's embedding encoding ("" draws a random vector).
    Encoded(#[schemars(extend("contentEncoding" = "base64"))] String),
    /// An empty list: draws a random vector.
    Empty(#[schemars(length(max = 0))] Vec<f32>),
}

/// An omit value: one string (comma-separated) or a list of items.
#[derive(JsonSchema)]
#[schemars(untagged)]
pub enum OmitList {
    /// Items separated by commas.
    Text(String),
    /// One item per entry.
    List(Vec<String>),
}

/// What a library query returns: the library's top level with the selected bits, best first,
/// each with its `similarity` and without the omitted fields and `access_tag`. Unknown
/// top-level keys of the library are kept. `wire::render` writes it.
#[derive(JsonSchema)]
#[schemars(title = "QueryResult", rename = "QueryResult", extend("additionalProperties" = true))]
pub struct QueryResultJson {
    /// Always 1.
    #[schemars(extend("const" = 1))]
    pub version: i64,
    /// The library's model.
    #[schemars(length(min = 1))]
    pub embedding_model: String,
    /// The selected bits, best first.
    pub bits: Vec<Bit>,
    /// Always similarity.
    pub sort: String,
    /// counts.bits is the number of bits selected; counts.restricted and message appear when
    /// the host config asks for them.
    pub details: ResultDetails,
    /// The omit argument as applied: one item as a string, several as a list.
    pub omit: OmitList,
}

/// The `details` of a query result.
#[derive(JsonSchema)]
#[schemars(extend("additionalProperties" = true))]
pub struct ResultDetails {
    /// "Restricted results were omitted. " and the host config's message, when bits were
    /// hidden and the config has one.
    pub message: Option<String>,
    /// Bit counts.
    pub counts: Counts,
}

/// The library host's config (host.SECRET.json). Every key is optional; unknown keys are
/// ignored. It holds secrets: keep it out of version control.
/// [`AccessPolicy::from_host_config`](crate::AccessPolicy::from_host_config) reads it.
#[derive(JsonSchema)]
#[schemars(title = "HostConfig", rename = "HostConfig", extend("additionalProperties" = true))]
pub struct HostConfig {
    /// Access tokens by user.
    pub tokens: Option<BTreeMap<String, TokenEntry>>,
    /// How restricted results are reported.
    pub restricted: Option<Restricted>,
    /// Empty means `unpublished`.
    #[schemars(default)]
    pub default_private_access_tag: Option<String>,
}

/// One user's token.
#[derive(JsonSchema)]
#[schemars(extend("additionalProperties" = true))]
pub struct TokenEntry {
    /// The secret; an empty token never matches.
    pub token: Option<String>,
    /// Who or what the token is for.
    pub description: Option<String>,
    /// Tags the token grants; empty or absent grants the default private tag.
    pub access_tags: Option<Vec<String>>,
}

/// The `restricted` section of the host config.
#[derive(JsonSchema)]
#[schemars(extend("additionalProperties" = true))]
pub struct Restricted {
    /// Report details.counts.restricted (default false).
    pub count: Option<bool>,
    /// Appended to details.message when bits were hidden (default empty).
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Library;
    use serde_json::{Map, Value as Json, json};

    fn schema_of<T: JsonSchema>() -> Json {
        schemars::schema_for!(T).to_value()
    }

    fn fixture(name: &str) -> Json {
        let path = format!(
            "{}/../../tests/fixtures/polymath/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    fn type_matches(name: &str, value: &Json) -> bool {
        match name {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            other => panic!("unknown type {other}"),
        }
    }

    /// The problems of `value` under `schema`: the keywords these schemas use (type, const,
    /// enum, properties, required, additionalProperties, items, maxItems, minLength, minimum,
    /// anyOf, allOf, oneOf, $ref into $defs).
    fn check(root: &Json, schema: &Json, value: &Json, at: &str, problems: &mut Vec<String>) {
        let Some(s) = schema.as_object() else { return };
        if let Some(r) = s.get("$ref").and_then(Json::as_str) {
            let name = r.strip_prefix("#/$defs/").unwrap();
            check(root, &root["$defs"][name], value, at, problems);
        }
        match s.get("type") {
            Some(Json::String(t)) if !type_matches(t, value) => {
                problems.push(format!("{at}: not {t}"));
                return;
            }
            Some(Json::Array(ts))
                if !ts.iter().any(|t| type_matches(t.as_str().unwrap(), value)) =>
            {
                problems.push(format!("{at}: not any of {ts:?}"));
                return;
            }
            _ => {}
        }
        if let Some(c) = s.get("const")
            && c != value
        {
            problems.push(format!("{at}: not {c}"));
        }
        if let Some(Json::Array(options)) = s.get("enum")
            && !options.contains(value)
        {
            problems.push(format!("{at}: not in {options:?}"));
        }
        if let (Some(min), Some(text)) = (s.get("minLength"), value.as_str())
            && (text.chars().count() as u64) < min.as_u64().unwrap()
        {
            problems.push(format!("{at}: too short"));
        }
        if let (Some(min), Some(n)) = (s.get("minimum"), value.as_f64())
            && n < min.as_f64().unwrap()
        {
            problems.push(format!("{at}: below minimum"));
        }
        if let Some(Json::Array(all)) = s.get("allOf") {
            for sub in all {
                check(root, sub, value, at, problems);
            }
        }
        if let Some(Json::Array(any)) = s.get("anyOf") {
            let ok = any.iter().any(|sub| {
                let mut p = Vec::new();
                check(root, sub, value, at, &mut p);
                p.is_empty()
            });
            if !ok {
                problems.push(format!("{at}: matches no anyOf branch"));
            }
        }
        if let Some(Json::Array(one)) = s.get("oneOf") {
            let matching = one
                .iter()
                .filter(|sub| {
                    let mut p = Vec::new();
                    check(root, sub, value, at, &mut p);
                    p.is_empty()
                })
                .count();
            if matching != 1 {
                problems.push(format!("{at}: matches {matching} oneOf branches"));
            }
        }
        if let Some(items) = value.as_array() {
            if let Some(max) = s.get("maxItems").and_then(Json::as_u64)
                && items.len() as u64 > max
            {
                problems.push(format!("{at}: too many items"));
            }
            if let Some(item_schema) = s.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(root, item_schema, item, &format!("{at}[{i}]"), problems);
                }
            }
        }
        if let Some(object) = value.as_object() {
            let empty = Map::new();
            let properties = s
                .get("properties")
                .and_then(Json::as_object)
                .unwrap_or(&empty);
            for required in s
                .get("required")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                if !object.contains_key(required.as_str().unwrap()) {
                    problems.push(format!("{at}: missing {required}"));
                }
            }
            for (key, v) in object {
                let path = format!("{at}.{key}");
                match (properties.get(key), s.get("additionalProperties")) {
                    (Some(p), _) => check(root, p, v, &path, problems),
                    (None, Some(Json::Bool(false))) => problems.push(format!("{path}: undeclared")),
                    (None, Some(extra @ Json::Object(_))) => check(root, extra, v, &path, problems),
                    _ => {}
                }
            }
        }
    }

    fn problems(schema: &Json, value: &Json) -> Vec<String> {
        let mut out = Vec::new();
        check(schema, schema, value, "$", &mut out);
        out
    }

    #[test]
    fn library_schema_accepts_the_fixture_and_saved_libraries() {
        let schema = schema_of::<LibraryFile>();
        let file = fixture("library.json");
        assert_eq!(problems(&schema, &file), Vec::<String>::new());
        let lib = Library::from_value(file).unwrap();
        let saved = Json::Object(lib.to_value(true).unwrap());
        assert_eq!(problems(&schema, &saved), Vec::<String>::new());
        assert_eq!(
            problems(
                &schema,
                &Json::Object(Library::blank("m").to_value(false).unwrap())
            ),
            Vec::<String>::new()
        );
        // It does reject what the loader rejects at the top level and in bits.
        for bad in [
            json!({"version": 1, "embedding_model": "", "bits": []}),
            json!({"version": 2, "embedding_model": "m", "bits": []}),
            json!({"version": 1, "embedding_model": "m", "bits": [{"text": 1}]}),
            json!({"version": 1, "embedding_model": "m", "bits": [{"text": "t", "info": {}}]}),
            json!({"version": 1, "embedding_model": "m"}),
        ] {
            assert!(!problems(&schema, &bad).is_empty(), "{bad}");
        }
    }

    #[test]
    fn query_schemas_accept_every_fixture_case() {
        let args_schema = schema_of::<QueryArgs>();
        let result_schema = schema_of::<QueryResultJson>();
        let queries = fixture("queries.json");
        let mut results = 0;
        for case in queries["cases"].as_array().unwrap() {
            let name = &case["name"];
            if case.get("error").is_none() {
                let p = problems(&args_schema, &case["args"]);
                assert!(p.is_empty(), "{name}: {p:?}");
            }
            if let Some(expected) = case.get("expected") {
                let p = problems(&result_schema, expected);
                assert!(p.is_empty(), "{name}: {p:?}");
                results += 1;
            }
        }
        assert!(results > 20, "{results}");
        // Results computed here conform too.
        let lib = Library::from_value(fixture("library.json")).unwrap();
        let policy = crate::AccessPolicy::from_host_config(&fixture("host.SECRET.json")).unwrap();
        let args = json!({"version": 1, "count": 3, "count_type": "bit",
                          "query_embedding_model": lib.model(), "omit": ["embedding", "info"]});
        let options = crate::QueryOptions {
            seed: Some(7),
            ..Default::default()
        };
        let result =
            crate::wire::query(&lib, args.as_object().unwrap(), &policy, &options).unwrap();
        assert_eq!(
            problems(&result_schema, &Json::Object(result)),
            Vec::<String>::new()
        );
        assert!(!problems(&args_schema, &json!({"count": 1})).is_empty());
        assert!(!problems(&args_schema, &json!({"version": 1, "count_type": "chars"})).is_empty());
        for exact in [json!(true), json!("false")] {
            assert!(problems(&args_schema, &json!({"version": 1, "exact": exact})).is_empty());
        }
        assert!(!problems(&args_schema, &json!({"version": 1, "exact": "yes"})).is_empty());
    }

    #[test]
    fn host_config_schema_accepts_the_fixture() {
        let schema = schema_of::<HostConfig>();
        assert_eq!(
            problems(&schema, &fixture("host.SECRET.json")),
            Vec::<String>::new()
        );
        assert!(!problems(&schema, &json!({"restricted": {"count": "yes"}})).is_empty());
        assert!(!problems(&schema, &json!({"tokens": {"a": {"access_tags": "team"}}})).is_empty());
    }
}
