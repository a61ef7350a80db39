//! JSON Schemas of the data model's on-disk and wire formats (feature `schema`).
//!
//! The formats are written by hand-tuned serde code (field order, extras, the pyjson message
//! layout), so the schemas are written out here rather than derived; the tests check them
//! against real serialized values so they cannot drift silently. `cargo xtask codegen` writes
//! them to `docs/schemas/`.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use crate::artifact::{Artifact, StorageLocation};
use crate::msg::Msg;
use crate::{Asset, AssetRef, PathSegment};

impl JsonSchema for Asset {
    fn schema_name() -> Cow<'static, str> {
        "Asset".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "title": "Asset",
            "description": "An object kept outside the chat history under an id. Fields are written in the order below; any other fields are extras, kept in order.",
            "type": "object",
            "properties": {
                "asset_type": {"type": "string", "description": "Task-related classification, e.g. \"image\"."},
                "asset_id": {"type": "string", "minLength": 1, "description": "The asset's id; a UUID v4 is generated when absent."},
                "asset_name": {"type": "string"},
                "description": {"type": "string"},
                "content_type": {"type": "string", "description": "What `content` holds, e.g. \"image/png\"; free text."},
                "content": {"description": "The payload: any JSON value."}
            },
            "additionalProperties": true
        })
    }
}

impl JsonSchema for PathSegment {
    fn schema_name() -> Cow<'static, str> {
        "PathSegment".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A map key (string) or an array index (non-negative integer).",
            "oneOf": [
                {"type": "string"},
                {"type": "integer", "minimum": 0}
            ]
        })
    }
}

impl JsonSchema for AssetRef {
    fn schema_name() -> Cow<'static, str> {
        "AssetRef".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let segment = generator.subschema_for::<PathSegment>();
        json_schema!({
            "title": "AssetRef",
            "description": "A reference to an asset or a field inside it (object form). The URL form is asset://ID/SEGMENT/...",
            "type": "object",
            "properties": {
                "asset_id": {"type": "string", "minLength": 1},
                "field_path": {
                    "type": "array",
                    "items": segment,
                    "description": "Path from the asset's root; empty or absent for the whole asset."
                }
            },
            "required": ["asset_id"],
            "additionalProperties": false
        })
    }
}

impl JsonSchema for StorageLocation {
    fn schema_name() -> Cow<'static, str> {
        "StorageLocation".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Where an artifact's content lives when it is not inline.",
            "type": "object",
            "properties": {
                "backend": {"type": "string", "description": "The storage backend's registered name, e.g. write_to_file."},
                "id": {"type": "string", "description": "The content's id within that backend."}
            },
            "required": ["backend", "id"],
            "additionalProperties": false
        })
    }
}

impl JsonSchema for Artifact {
    fn schema_name() -> Cow<'static, str> {
        "Artifact".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let storage = generator.subschema_for::<StorageLocation>();
        json_schema!({
            "title": "Artifact",
            "description": "A named result of one step of an agent's work, saved under a key in a scope.",
            "type": "object",
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "key": {"type": "string", "minLength": 1},
                "type": {"type": "string", "minLength": 1},
                "name": {"type": "string", "minLength": 1},
                "description": {"type": "string"},
                "storage": {"anyOf": [storage, {"type": "null"}]},
                "data": {"description": "Inline content: any JSON value."},
                "scope": {"type": "string"},
                "created_at": {"type": "string", "format": "date-time", "description": "RFC 3339, UTC, microseconds."}
            },
            "required": ["id", "key", "type", "name", "scope", "created_at"],
            "additionalProperties": false
        })
    }
}

impl JsonSchema for Msg {
    fn schema_name() -> Cow<'static, str> {
        "Msg".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "title": "Msg",
            "description": "A conversation message as memory exports write it (AgentScope 0.0.x layout). Any other keys are extras, kept in order. Imports also accept the `__type` form and the 0.1.x `__module__`/`__name__` form.",
            "type": "object",
            "properties": {
                "id": {"type": "string", "minLength": 1},
                "timestamp": {"type": "string"},
                "name": {"type": "string"},
                "content": {"description": "Any JSON value, null included."},
                "role": {"type": "string", "default": "assistant"},
                "url": {
                    "anyOf": [
                        {"type": "null"},
                        {"type": "string"},
                        {"type": "array", "items": {"type": "string"}}
                    ]
                },
                "embedding": {
                    "anyOf": [
                        {"type": "null"},
                        {"type": "array", "items": {"type": "number"}, "minItems": 1}
                    ]
                },
                "__marks": {"type": "array", "items": {"type": "string"}, "description": "Marks (tags), written when exported with marks."}
            },
            "required": ["name", "content"],
            "additionalProperties": true
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value as Json, json};

    fn schema_of<T: JsonSchema>() -> Json {
        schemars::schema_for!(T).to_value()
    }

    /// Every key of `value` is a declared property, or the schema allows extras; every required
    /// property is present.
    fn conforms(schema: &Json, value: &Json) {
        let object = value.as_object().unwrap();
        let properties = schema["properties"].as_object().unwrap();
        if schema["additionalProperties"] == json!(false) {
            for key in object.keys() {
                assert!(properties.contains_key(key), "undeclared key {key}");
            }
        }
        for required in schema["required"].as_array().into_iter().flatten() {
            assert!(
                object.contains_key(required.as_str().unwrap()),
                "missing {required}"
            );
        }
    }

    #[test]
    fn asset_and_reference_schemas_describe_their_json() {
        let asset = Asset::new(json!({"x": 1})).with_type("t").with_name("n");
        conforms(
            &schema_of::<Asset>(),
            &serde_json::to_value(&asset).unwrap(),
        );
        let reference: AssetRef = "asset://a1/content/0".parse().unwrap();
        conforms(
            &schema_of::<AssetRef>(),
            &serde_json::to_value(&reference).unwrap(),
        );
    }

    #[test]
    fn artifact_schema_describes_its_json() {
        let artifact = Artifact::new("s", "k", "t", "n")
            .with_storage(StorageLocation::new("write_to_file", "a.json"));
        let json = serde_json::to_value(&artifact).unwrap();
        conforms(&schema_of::<Artifact>(), &json);
        assert!(
            schema_of::<Artifact>()
                .to_string()
                .contains("StorageLocation")
        );
    }

    #[test]
    fn message_schema_describes_its_json() {
        let factory = crate::msg::MsgFactory::new(
            std::sync::Arc::new(crate::msg::SequentialIds::new()),
            std::sync::Arc::new(crate::msg::FixedClock::new("2024-03-05 08:16:30")),
        );
        let msg = factory
            .msg("Kenji", "Is the ferry running?")
            .role("user")
            .embedding(vec![0.5, -0.25])
            .build()
            .unwrap();
        let json = msg.to_json();
        let schema = schema_of::<Msg>();
        conforms(&schema, &json);
        for key in json.as_object().unwrap().keys() {
            assert!(
                schema["properties"].get(key).is_some(),
                "undocumented key {key}"
            );
        }
    }
}
