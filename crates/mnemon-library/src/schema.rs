//! JSON Schemas of the library formats (feature `schema`): the library file, query arguments,
//! query results and the host config.
//!
//! The formats are read and written by hand (field order, unknown keys, Python-compatible
//! numbers), so the schemas are written out here rather than derived; the tests check them
//! against the reference fixtures so they cannot drift silently. `cargo xtask codegen` writes
//! them to `docs/schemas/`.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use crate::Library;

/// Names the JSON format of query arguments (spec §7) for schema generation. It has no values;
/// [`wire::parse_query`](crate::wire::parse_query) reads the format.
#[derive(Debug)]
pub enum QueryArgs {}

/// Names the JSON format of a query result (spec §8) for schema generation. It has no values.
#[derive(Debug)]
pub enum QueryResult {}

/// Names the JSON format of the host config, `host.SECRET.json` (spec §12.4), for schema
/// generation. It has no values; [`AccessPolicy::from_host_config`](crate::AccessPolicy) reads
/// the format.
#[derive(Debug)]
pub enum HostConfig {}

/// One stored bit (spec §3.2).
enum Bit {}

/// A bit's `info` object.
enum BitInfo {}

/// The top-level `details` object.
enum Details {}

impl JsonSchema for BitInfo {
    fn schema_name() -> Cow<'static, str> {
        "BitInfo".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Where a bit comes from. Extra keys are kept.",
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "The source document; part of the bit's id."},
                "image_url": {"type": "string"},
                "title": {"type": "string"},
                "description": {"type": "string"}
            },
            "required": ["url"],
            "additionalProperties": true
        })
    }
}

impl JsonSchema for Bit {
    fn schema_name() -> Cow<'static, str> {
        "Bit".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let info = generator.subschema_for::<BitInfo>();
        json_schema!({
            "description": "One piece of content with its embedding. `embedding`, `token_count` and `info` are required unless the library's `omit` names them (a field `omit` names must be absent). The id of a bit is the SHA-256 of `info.url` and `text`. Extra keys are kept in order.",
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "embedding": {
                    "type": "string",
                    "contentEncoding": "base64",
                    "minLength": 1,
                    "description": "D float32 values, little-endian, standard base64 with padding; ASCII whitespace is ignored."
                },
                "token_count": {"type": "integer", "description": "cl100k_base tokens of `text`; queries only sum it."},
                "similarity": {"type": "number", "description": "The score from the last query."},
                "access_tag": {
                    "type": ["string", "null"],
                    "description": "Only callers whose token grants this tag see the bit; absent or null means public."
                },
                "info": info
            },
            "required": ["text"],
            "additionalProperties": true
        })
    }
}

impl JsonSchema for Details {
    fn schema_name() -> Cow<'static, str> {
        "Details".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "counts": {
                    "type": "object",
                    "properties": {
                        "bits": {"type": "integer", "minimum": 0},
                        "restricted": {"type": "integer", "minimum": 0, "description": "Bits hidden by access tags, library-wide."}
                    },
                    "additionalProperties": true
                }
            },
            "additionalProperties": true
        })
    }
}

impl JsonSchema for Library {
    fn schema_name() -> Cow<'static, str> {
        "Library".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let bit = generator.subschema_for::<Bit>();
        let details = generator.subschema_for::<Details>();
        json_schema!({
            "title": "Library",
            "description": "An embedding library file (Polymath format, version 1). Files with `version` 0 or absent (`content` keyed by id, `sort: {type, ids}`) are upgraded on load. Unknown keys are kept in order. Saved tab-indented with ASCII-only strings, as Python's json.dump(indent='\\t').",
            "type": "object",
            "properties": {
                "version": {"type": "integer", "const": 1},
                "embedding_model": {"type": "string", "minLength": 1, "description": "e.g. openai.com:text-embedding-ada-002; queries must name the same model."},
                "omit": {
                    "type": "string",
                    "description": "Fields absent from every bit: `*`, `\"\"`, or a comma-separated list of similarity, embedding, token_count, info, access_tag."
                },
                "sort": {"type": "string", "description": "similarity, random or manual; absent means any."},
                "details": details,
                "bits": {"type": "array", "items": bit}
            },
            "required": ["version", "embedding_model", "bits"],
            "additionalProperties": true
        })
    }
}

impl JsonSchema for QueryArgs {
    fn schema_name() -> Cow<'static, str> {
        "QueryArgs".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let int_like = json_schema!({
            "description": "An integer, or a value Python's int() accepts: a float (truncated), a boolean, or a decimal string.",
            "type": ["integer", "number", "boolean", "string"]
        });
        json_schema!({
            "title": "QueryArgs",
            "description": "The arguments of a library query (spec §7), as a JSON body (also sent as form fields, all strings). null counts as absent; unknown keys are ignored.",
            "type": "object",
            "properties": {
                "version": {"allOf": [int_like], "description": "Protocol version; must be at least 1."},
                "query_embedding": {
                    "description": "The query vector in the library's embedding encoding; absent, \"\" or [] draws a random vector.",
                    "anyOf": [
                        {"type": "string", "contentEncoding": "base64"},
                        {"type": "array", "maxItems": 0},
                        {"type": "null"}
                    ]
                },
                "query_embedding_model": {"type": ["string", "null"], "description": "Must equal the library's embedding_model."},
                "count": {"anyOf": [int_like, {"type": "null"}], "description": "Bits or tokens to return; negative means all; 0 is an error. The host defaults to 1000."},
                "count_type": {"anyOf": [{"enum": ["token", "bit"]}, {"type": "null"}], "default": "token"},
                "omit": {
                    "description": "Fields to leave out of each bit (default embedding): `*`, \"\", or similarity, embedding, token_count, info, access_tag; comma-separated or a list.",
                    "anyOf": [
                        {"type": "string"},
                        {"type": "array", "items": {"type": "string"}},
                        {"type": "null"}
                    ]
                },
                "access_token": {"description": "A token from the host config; anything but a known token grants nothing."}
            },
            "required": ["version"],
            "additionalProperties": true
        })
    }
}

impl JsonSchema for QueryResult {
    fn schema_name() -> Cow<'static, str> {
        "QueryResult".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let bit = generator.subschema_for::<Bit>();
        let details = generator.subschema_for::<Details>();
        json_schema!({
            "title": "QueryResult",
            "description": "What a library query returns (spec §8): the library's top level with the selected bits, best first, each with its `similarity` and without the omitted fields and `access_tag`. Unknown top-level keys of the library are kept.",
            "type": "object",
            "properties": {
                "version": {"type": "integer", "const": 1},
                "embedding_model": {"type": "string", "minLength": 1},
                "bits": {"type": "array", "items": bit},
                "sort": {"type": "string"},
                "details": {
                    "allOf": [details],
                    "required": ["counts"],
                    "description": "counts.bits is the number of bits selected; counts.restricted and message appear when the host config asks for them."
                },
                "omit": {"type": "string", "description": "The omit argument as applied, items joined by commas."}
            },
            "required": ["version", "embedding_model", "bits", "sort", "details", "omit"],
            "additionalProperties": true
        })
    }
}

impl JsonSchema for HostConfig {
    fn schema_name() -> Cow<'static, str> {
        "HostConfig".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "title": "HostConfig",
            "description": "The library host's config (host.SECRET.json, spec §12.4). Every key is optional; unknown keys are ignored. It holds secrets: keep it out of version control.",
            "type": "object",
            "properties": {
                "tokens": {
                    "type": "object",
                    "description": "Access tokens by user.",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {
                            "token": {"type": "string", "description": "The secret; an empty token never matches."},
                            "description": {"type": "string"},
                            "access_tags": {
                                "type": "array",
                                "items": {"type": "string"},
                                "description": "Tags the token grants; empty or absent grants the default private tag."
                            }
                        },
                        "additionalProperties": true
                    }
                },
                "restricted": {
                    "type": "object",
                    "properties": {
                        "count": {"type": "boolean", "default": false, "description": "Report details.counts.restricted."},
                        "message": {"type": "string", "default": "", "description": "Appended to details.message when bits were hidden."}
                    },
                    "additionalProperties": true
                },
                "default_private_access_tag": {"type": "string", "default": "", "description": "Empty means `unpublished`."}
            },
            "additionalProperties": true
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    /// anyOf, allOf, $ref into $defs).
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
        if let Some(c) = s.get("const") {
            if c != value {
                problems.push(format!("{at}: not {c}"));
            }
        }
        if let Some(Json::Array(options)) = s.get("enum") {
            if !options.contains(value) {
                problems.push(format!("{at}: not in {options:?}"));
            }
        }
        if let (Some(min), Some(text)) = (s.get("minLength"), value.as_str()) {
            if (text.chars().count() as u64) < min.as_u64().unwrap() {
                problems.push(format!("{at}: too short"));
            }
        }
        if let (Some(min), Some(n)) = (s.get("minimum"), value.as_f64()) {
            if n < min.as_f64().unwrap() {
                problems.push(format!("{at}: below minimum"));
            }
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
        if let Some(items) = value.as_array() {
            if let Some(max) = s.get("maxItems").and_then(Json::as_u64) {
                if items.len() as u64 > max {
                    problems.push(format!("{at}: too many items"));
                }
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
        let schema = schema_of::<Library>();
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
        let result_schema = schema_of::<QueryResult>();
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
