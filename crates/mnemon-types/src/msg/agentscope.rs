//! The AgentScope text forms of messages: [`render`] (`to_str` lines), [`serialize`] /
//! [`serialize_list`] (0.0.4's `__type` form in Python's JSON layout, written by
//! `mnemon-pyjson`), and [`deserialize`] of both the `__type` form and 0.1.x's
//! `__module__`/`__name__` form; [`ingest_plain`] converts a plain message object.

use serde_json::{Map, Value};

use super::check_extra;
use super::error::empty_id;
use super::{CORE_KEYS, EMBEDDING_KEY, MARKER_KEYS, Msg, MsgError, MsgFactory, MsgKind, MsgUrl};

/// The module and class names of AgentScope 0.1.x serialized messages.
const V01_MODULE: &str = "agentscope.message.msg";
const V01_NAME: &str = "Msg";

/// Joins the messages' [`Msg::to_str`] lines with `\n`, without a trailing newline.
pub fn render(messages: &[Msg]) -> String {
    let lines: Vec<String> = messages.iter().map(Msg::to_str).collect();
    lines.join("\n")
}

/// `serialize(msg)` of 0.0.4: Python-layout JSON (`mnemon_pyjson::dumps`) whose first key is
/// `"__type"`.
pub fn serialize(msg: &Msg) -> String {
    mnemon_pyjson::dumps(&Value::Object(msg.to_object(Some(msg.kind))))
}

/// `serialize(list)` of 0.0.4: `{"__type": "List", "__value": [s₁, …]}` where each sᵢ is the
/// string [`serialize`] gives for one message.
pub fn serialize_list(messages: &[Msg]) -> String {
    let mut object = Map::new();
    object.insert("__type".into(), Value::String("List".into()));
    object.insert(
        "__value".into(),
        Value::Array(
            messages
                .iter()
                .map(|m| Value::String(serialize(m)))
                .collect(),
        ),
    );
    mnemon_pyjson::dumps(&Value::Object(object))
}

/// What [`deserialize`] found.
// A result returned once and unpacked at once; boxing `One` would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Deserialized {
    /// A single message.
    One(Msg),
    /// A list of messages.
    Many(Vec<Msg>),
}

impl Deserialized {
    /// The messages, in order.
    pub fn into_vec(self) -> Vec<Msg> {
        match self {
            Deserialized::One(msg) => vec![msg],
            Deserialized::Many(messages) => messages,
        }
    }
}

/// Decodes a serialized message or list (docs/reference/memory.md#reading-serialized-messages): a
/// `__type` object (`Msg`, `Tht`, `List`), a 0.1.x object, or an array of marked objects. Missing
/// ids and timestamps come from `factory`.
pub fn deserialize(text: &str, factory: &MsgFactory) -> Result<Deserialized, MsgError> {
    let value: Value = serde_json::from_str(text).map_err(|e| MsgError::InvalidJson {
        detail: e.to_string(),
    })?;
    deserialize_value(&value, 0, factory)
}

fn deserialize_value(
    value: &Value,
    p: usize,
    factory: &MsgFactory,
) -> Result<Deserialized, MsgError> {
    match value {
        Value::Object(object) => {
            let messages = decode_marked(object, p, factory)?.ok_or(MsgError::MissingType)?;
            if object.get("__type").and_then(Value::as_str) == Some("List") {
                return Ok(Deserialized::Many(messages));
            }
            match <[Msg; 1]>::try_from(messages) {
                Ok([msg]) => Ok(Deserialized::One(msg)),
                Err(messages) => Ok(Deserialized::Many(messages)),
            }
        }
        Value::Array(items) => {
            let mut messages = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let object = item.as_object().ok_or(MsgError::NotAnObject { p: i })?;
                messages.extend(decode_marked(object, i, factory)?.ok_or(MsgError::MissingType)?);
            }
            Ok(Deserialized::Many(messages))
        }
        _ => Err(MsgError::MissingType),
    }
}

/// Decodes an object carrying a format marker; `Ok(None)` when it has none.
pub(super) fn decode_marked(
    object: &Map<String, Value>,
    p: usize,
    factory: &MsgFactory,
) -> Result<Option<Vec<Msg>>, MsgError> {
    if let Some(marker) = object.get("__type") {
        let Some(name) = marker.as_str() else {
            return Err(MsgError::UnknownType {
                name: marker.to_string(),
            });
        };
        if let Some(kind) = MsgKind::from_marker(name) {
            return Ok(Some(vec![ingest_plain(object, kind, p, factory)?]));
        }
        if name != "List" {
            return Err(MsgError::UnknownType { name: name.into() });
        }
        let invalid = || MsgError::InvalidField {
            p,
            field: "__value".into(),
            expected: "an array of serialized message strings".into(),
        };
        let items = object
            .get("__value")
            .and_then(Value::as_array)
            .ok_or_else(invalid)?;
        let mut messages = Vec::with_capacity(items.len());
        for item in items {
            let text = item.as_str().ok_or_else(invalid)?;
            let inner: Value = serde_json::from_str(text).map_err(|e| MsgError::InvalidJson {
                detail: format!("item {p}: {e}"),
            })?;
            messages.extend(deserialize_value(&inner, p, factory)?.into_vec());
        }
        return Ok(Some(messages));
    }
    if object.contains_key("__module__") || object.contains_key("__name__") {
        return Ok(Some(vec![ingest_v01(object, p, factory)?]));
    }
    Ok(None)
}

/// Converts a 0.1.x object (`__module__`/`__name__`, embedding inside `metadata`).
fn ingest_v01(
    object: &Map<String, Value>,
    p: usize,
    factory: &MsgFactory,
) -> Result<Msg, MsgError> {
    let module = object.get("__module__").and_then(Value::as_str);
    let name = object.get("__name__").and_then(Value::as_str);
    if module != Some(V01_MODULE) || name != Some(V01_NAME) {
        let show = |v: Option<&Value>| match v {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => "?".into(),
        };
        return Err(MsgError::UnsupportedClass {
            module: show(object.get("__module__")),
            name: show(object.get("__name__")),
        });
    }
    let mut plain = Map::with_capacity(object.len() + 1);
    for key in CORE_KEYS {
        if let Some(value) = object.get(key) {
            plain.insert(key.into(), value.clone());
        }
    }
    for (key, value) in object {
        if CORE_KEYS.contains(&key.as_str()) || MARKER_KEYS.contains(&key.as_str()) {
            continue;
        }
        if key != "metadata" {
            plain.insert(key.clone(), value.clone());
            continue;
        }
        match value {
            Value::Null => {}
            Value::Object(metadata) => {
                let mut rest = metadata.clone();
                if let Some(embedding) = rest.shift_remove(EMBEDDING_KEY) {
                    plain.insert(EMBEDDING_KEY.into(), embedding);
                }
                if !rest.is_empty() {
                    plain.insert("metadata".into(), Value::Object(rest));
                }
            }
            other => {
                plain.insert("metadata".into(), other.clone());
            }
        }
    }
    ingest_plain(&plain, MsgKind::Msg, p, factory)
}

/// Converts a plain message object per docs/reference/memory.md#message-fields.
pub(super) fn ingest_plain(
    object: &Map<String, Value>,
    kind: MsgKind,
    p: usize,
    factory: &MsgFactory,
) -> Result<Msg, MsgError> {
    let invalid = |field: &str, expected: &str| MsgError::InvalidField {
        p,
        field: field.into(),
        expected: expected.into(),
    };
    let optional_string = |field: &str| -> Result<Option<String>, MsgError> {
        match object.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(invalid(field, "a string")),
        }
    };
    let name = match object.get("name") {
        None => {
            return Err(MsgError::MissingField {
                p,
                field: "name".into(),
            });
        }
        Some(Value::String(name)) => name.clone(),
        Some(_) => return Err(invalid("name", "a string")),
    };
    let content = object
        .get("content")
        .ok_or_else(|| MsgError::MissingField {
            p,
            field: "content".into(),
        })?
        .clone();
    let id = match object.get("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
        Some(_) => return Err(empty_id(p)),
    };
    let timestamp = optional_string("timestamp")?;
    let role = optional_string("role")?.unwrap_or_else(|| "assistant".into());
    let url = match object.get("url") {
        None | Some(Value::Null) => None,
        Some(Value::String(url)) => (!url.is_empty()).then(|| MsgUrl::One(url.clone())),
        Some(Value::Array(items)) => {
            let urls = items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<String>>>()
                .ok_or_else(|| invalid("url", "null, a string or an array of strings"))?;
            (!urls.is_empty()).then_some(MsgUrl::Many(urls))
        }
        Some(_) => return Err(invalid("url", "null, a string or an array of strings")),
    };
    let mut extras = Map::new();
    for (key, value) in object {
        if CORE_KEYS.contains(&key.as_str()) || MARKER_KEYS.contains(&key.as_str()) {
            continue;
        }
        check_extra(key, value, p)?;
        extras.insert(key.clone(), value.clone());
    }
    Ok(Msg {
        kind,
        id: id.unwrap_or_else(|| factory.next_id()),
        timestamp: timestamp.unwrap_or_else(|| factory.now()),
        name,
        content,
        role,
        url,
        extras,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::test_factory as factory;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn thought_serializes_like_the_spec_example() {
        let f = factory();
        let tht = f.thought("Check the tide table first.").build().unwrap();
        assert_eq!(
            serialize(&tht),
            r#"{"__type": "Tht", "id": "00000000000000000000000000000001", "timestamp": "2024-03-05 08:30:00", "name": "thought", "content": "Check the tide table first.", "role": "assistant", "url": null}"#
        );
        assert_eq!(tht.to_str(), "thought thought: Check the tide table first.");
        let back = deserialize(&serialize(&tht), &f).unwrap();
        assert_eq!(back, Deserialized::One(tht));
    }

    #[test]
    fn deserialize_errors() {
        let f = factory();
        assert_eq!(
            deserialize(r#"{"__type": "Foo"}"#, &f),
            Err(MsgError::UnknownType { name: "Foo".into() })
        );
        assert_eq!(
            deserialize(r#"{"name": "a", "content": 1}"#, &f),
            Err(MsgError::MissingType)
        );
        assert_eq!(deserialize("5", &f), Err(MsgError::MissingType));
        assert!(matches!(
            deserialize("{", &f),
            Err(MsgError::InvalidJson { .. })
        ));
        assert!(matches!(
            deserialize(r#"{"__module__": "x", "__name__": "Msg"}"#, &f),
            Err(MsgError::UnsupportedClass { .. })
        ));
        assert!(matches!(
            deserialize(r#"{"__type": "List", "__value": [1]}"#, &f),
            Err(MsgError::InvalidField { .. })
        ));
    }

    #[test]
    fn v01_metadata() {
        let f = factory();
        let text = r#"{"__module__": "agentscope.message.msg", "__name__": "Msg", "id": "x", "name": "n",
            "role": "user", "content": "c", "metadata": {"embedding": [1, 2], "k": true}, "timestamp": "t"}"#;
        let Deserialized::One(m) = deserialize(text, &f).unwrap() else {
            panic!("one message expected")
        };
        assert_eq!(m.extra("embedding"), Some(&json!([1, 2])));
        assert_eq!(m.extra("metadata"), Some(&json!({"k": true})));
        assert_eq!(m.url(), None);
    }

    #[test]
    fn list_round_trip_keeps_kinds() {
        let f = factory();
        let messages = vec![
            f.msg("a", json!({"k": [1, 2.5]})).build().unwrap(),
            f.thought("t").build().unwrap(),
        ];
        let text = serialize_list(&messages);
        assert_eq!(
            deserialize(&text, &f).unwrap(),
            Deserialized::Many(messages)
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(Value::from),
            ".*".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((".*", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn serialize_round_trips(
            name in ".*",
            content in arb_json(),
            role in ".*",
            extra in arb_json(),
            thought in any::<bool>(),
            emb in prop::collection::vec(-1e30f32..1e30f32, 0..5),
        ) {
            let f = factory();
            let mut builder = if thought { f.thought(content) } else { f.msg(name, content) };
            builder = builder.role(role).extra("x-extra", extra);
            if !emb.is_empty() {
                builder = builder.embedding(emb.clone());
            }
            let msg = builder.build().unwrap();
            let text = serialize(&msg);
            prop_assert!(text.is_ascii());
            let back = deserialize(&text, &f).unwrap();
            prop_assert_eq!(back, Deserialized::One(msg.clone()));
            if !emb.is_empty() {
                prop_assert_eq!(msg.embedding(), Some(emb));
            }
            let list = deserialize(&serialize_list(std::slice::from_ref(&msg)), &f).unwrap();
            prop_assert_eq!(list, Deserialized::Many(vec![msg]));
        }

        #[test]
        fn deserialize_never_panics(text in ".*") {
            let _ = deserialize(&text, &factory());
        }

        #[test]
        fn deserialize_never_panics_on_json(value in arb_json()) {
            let _ = deserialize(&value.to_string(), &factory());
        }
    }
}
