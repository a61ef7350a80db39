//! The OpenAPI 3.1 document of the REST API, generated from the route table and the operation
//! types' JSON Schemas (schemars emits JSON Schema 2020-12, the dialect OpenAPI 3.1 uses).
//! `cargo xtask codegen` writes it to `docs/openapi.json`; the server serves it at
//! `/v1/openapi.json`.

use std::sync::OnceLock;

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::routes::{Content, table};

/// The document as JSON.
pub fn document() -> Value {
    let settings = SchemaSettings::draft2020_12().with(|s| {
        s.definitions_path = "/components/schemas".into();
        s.meta_schema = None;
    });
    let mut generator = settings.into_generator();
    let mut paths = Map::new();
    for route in table() {
        let mut operation = Map::new();
        operation.insert("operationId".into(), json!(route.operation_id));
        operation.insert("summary".into(), json!(route.summary));
        operation.insert("tags".into(), json!([route.tag]));
        let mut parameters = Vec::new();
        for name in path_parameters(route.path) {
            parameters.push(json!({
                "name": name, "in": "path", "required": true, "schema": {"type": "string"}
            }));
        }
        if let Some(query) = route.query {
            let schema = query(&mut generator);
            let resolved = resolve(&generator, schema.as_value());
            let required: Vec<&str> = resolved
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(properties) = resolved.get("properties").and_then(Value::as_object) {
                for (name, schema) in properties {
                    // Set from the path, never from the query.
                    if name == "session" && route.path.contains("{session}") {
                        continue;
                    }
                    let mut schema = schema.clone();
                    let description = schema
                        .as_object_mut()
                        .and_then(|o| o.remove("description"))
                        .unwrap_or(Value::Null);
                    let mut parameter = json!({
                        "name": name, "in": "query",
                        "required": required.contains(&name.as_str()),
                        "schema": schema,
                    });
                    if !description.is_null()
                        && let Some(p) = parameter.as_object_mut()
                    {
                        p.insert("description".into(), description);
                    }
                    parameters.push(parameter);
                }
            }
        }
        if route.etag {
            parameters.push(json!({
                "name": "If-None-Match", "in": "header", "required": false,
                "description": "An ETag of an earlier answer: 304 without a body when unchanged.",
                "schema": {"type": "string"}
            }));
        }
        if !parameters.is_empty() {
            operation.insert("parameters".into(), Value::Array(parameters));
        }
        match route.request {
            Some(Content::Json(schema)) => {
                operation.insert(
                    "requestBody".into(),
                    json!({"required": true, "content": {"application/json": {
                        "schema": schema(&mut generator).to_value()}}}),
                );
            }
            Some(Content::Raw) => {
                operation.insert(
                    "requestBody".into(),
                    json!({"required": true, "content": {"*/*": {
                        "schema": {"type": "string", "contentMediaType": "application/octet-stream"}}}}),
                );
            }
            None => {}
        }
        let success = match route.response {
            Content::Json(schema) => json!({
                "description": "Success.",
                "content": {"application/json": {"schema": schema(&mut generator).to_value()}}
            }),
            Content::Raw => json!({
                "description": "Success: the content with its own media type.",
                "content": {"*/*": {"schema": {}}}
            }),
        };
        let mut responses = Map::new();
        responses.insert(route.status.as_u16().to_string(), success);
        if route.etag {
            responses.insert(
                "304".into(),
                json!({"description": "Not modified: the If-None-Match ETag is current."}),
            );
        }
        if route.role.is_some() {
            responses.insert(
                "401".into(),
                json!({"description": "No API key, or a malformed, unknown, wrong or revoked one (when the server has keys).",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}),
            );
            responses.insert(
                "403".into(),
                json!({"description": "The key's role is below the route's `x-mnemon-role`.",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}),
            );
        }
        responses.insert(
            "default".into(),
            json!({"description": "An error.", "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Error"}}}}),
        );
        operation.insert("responses".into(), Value::Object(responses));
        if let Some(role) = route.role {
            operation.insert("x-mnemon-role".into(), json!(role.as_str()));
            // Keys are required when the server has any (docs/reference/rest.md#authentication).
            operation.insert("security".into(), json!([{"bearer": []}]));
        }
        let entry = paths
            .entry(route.path.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(entry) = entry.as_object_mut() {
            entry.insert(
                route.method.as_str().to_ascii_lowercase(),
                Value::Object(operation),
            );
        }
    }
    let mut schemas = generator.take_definitions(true);
    schemas.insert(
        "Error".into(),
        json!({
            "type": "object",
            "description": "Every failure: a stable machine code and a message saying what to fix (docs/reference/rest.md#errors).",
            "properties": {"error": {
                "type": "object",
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                "required": ["code", "message"]
            }},
            "required": ["error"]
        }),
    );
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Mnemon REST API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Assets, references, artifacts, conversation memory and the served library of one namespace (docs/reference/rest.md)."
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "An API key from `mnemon keys create`, as `Authorization: Bearer <key>`: required on every route with an `x-mnemon-role` when the server has any key; its namespace is the only one the request sees, and its role must include the route's (docs/reference/rest.md#authentication)."
            }}
        }
    })
}

/// The document as pretty JSON with a final newline, as `docs/openapi.json` holds it.
pub fn document_text() -> String {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut text = serde_json::to_string_pretty(&document()).unwrap_or_default();
        text.push('\n');
        text
    })
    .clone()
}

/// The names of a path's `{parameters}`, in order.
fn path_parameters(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
        .collect()
}

/// A schema with a top-level `$ref` into the components replaced by its target.
fn resolve(generator: &schemars::SchemaGenerator, schema: &Value) -> Value {
    let target = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
        .and_then(|name| generator.definitions().get(name));
    target.cloned().unwrap_or_else(|| schema.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_in_the_document_and_every_reference_resolves() {
        let document = document();
        let paths = document["paths"].as_object().cloned().unwrap_or_default();
        for route in table() {
            let method = route.method.as_str().to_ascii_lowercase();
            assert!(
                paths.get(route.path).and_then(|p| p.get(&method)).is_some(),
                "{method} {}",
                route.path
            );
        }
        let text = document.to_string();
        let schemas = document["components"]["schemas"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = reference.split('"').next().unwrap_or_default();
            assert!(schemas.contains_key(name), "{name}");
        }
        assert_eq!(path_parameters("/v1/a/{x}/b/{y}"), ["x", "y"]);
    }
}
