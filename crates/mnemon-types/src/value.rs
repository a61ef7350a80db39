//! The value tree: JSON, plus byte buffers and in-process objects
//! (docs/reference/assets.md#value-tree).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use indexmap::IndexMap;
use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// An ordered map from string keys to values; insertion order is preserved.
pub type Map = IndexMap<String, Value>;

/// A node of an asset's content: any JSON value, a byte buffer, or an in-process object.
///
/// Converts losslessly to and from [`serde_json::Value`] while it holds only JSON
/// ([`Value::from_json`], [`Value::to_json`]).
///
/// Its serde implementation is the *JSON view* of the tree: bytes serialize as a `data:` URL
/// string and objects through [`AssetObject::to_json`] (or their type string), and deserializing
/// always yields plain JSON. Durable stores use their own lossless encoding instead.
#[derive(Debug, Clone, Default)]
pub enum Value {
    /// JSON `null`.
    #[default]
    Null,
    /// JSON `true` / `false`.
    Bool(bool),
    /// A JSON number; integers keep their exact `i64`/`u64` value.
    Number(serde_json::Number),
    /// A JSON string.
    String(String),
    /// A JSON array.
    Array(Vec<Value>),
    /// A JSON object, in insertion order.
    Map(Map),
    /// A byte buffer, such as an encoded image.
    Bytes(Bytes),
    /// A live Rust value behind a trait object.
    Object(Object),
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Number(a), Value::Number(b)) => a == b,
            (Value::String(a), Value::String(b)) => a == b,
            (Value::Array(a), Value::Array(b)) => a == b,
            // Map equality ignores order, as JSON object equality does.
            (Value::Map(a), Value::Map(b)) => {
                a.len() == b.len() && a.iter().all(|(k, v)| b.get(k) == Some(v))
            }
            (Value::Bytes(a), Value::Bytes(b)) => a == b,
            (Value::Object(a), Value::Object(b)) => a == b,
            _ => false,
        }
    }
}

/// A byte buffer with an optional media type (for example `image/png`).
///
/// The buffer is shared, so cloning a value tree never copies large payloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bytes {
    data: Arc<[u8]>,
    media_type: Option<String>,
}

impl Bytes {
    /// Wraps `data` with no media type.
    pub fn new(data: impl Into<Arc<[u8]>>) -> Self {
        Bytes {
            data: data.into(),
            media_type: None,
        }
    }

    /// Wraps `data` and records its media type.
    pub fn with_media_type(data: impl Into<Arc<[u8]>>, media_type: impl Into<String>) -> Self {
        Bytes {
            data: data.into(),
            media_type: Some(media_type.into()),
        }
    }

    /// The raw bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The media type, if one was given.
    pub fn media_type(&self) -> Option<&str> {
        self.media_type.as_deref()
    }

    /// The buffer as a `data:` URL (`data:image/png;base64,…`), the form Markdown and HTML embed.
    pub fn to_data_url(&self) -> String {
        let media = self
            .media_type
            .as_deref()
            .unwrap_or("application/octet-stream");
        let encoded = base64::engine::general_purpose::STANDARD.encode(&self.data);
        format!("data:{media};base64,{encoded}")
    }
}

/// An in-process Rust value that can live inside an asset.
///
/// Implement it for the types your tools exchange (decoded images, data frames, handles). The
/// model never sees the value itself, only [`type_name`](AssetObject::type_name) in the meta.
pub trait AssetObject: Any + Send + Sync + fmt::Debug {
    /// A stable name for the type, shown in meta as `<class 'NAME'>` (e.g. `image::RgbImage`).
    fn type_name(&self) -> &str;

    /// A JSON rendering, if the value has one.
    fn to_json(&self) -> Option<serde_json::Value> {
        None
    }

    /// A bytes rendering, if the value has one (an encoded image, for example).
    fn to_bytes(&self) -> Option<Bytes> {
        None
    }

    /// A text rendering for message text; defaults to the JSON rendering, then the type string.
    fn to_text(&self) -> String {
        match self.to_json() {
            Some(serde_json::Value::String(s)) => s,
            Some(json) => json.to_string(),
            None => format!("<class '{}'>", self.type_name()),
        }
    }

    /// Upcast for downcasting to the concrete type.
    fn as_any(&self) -> &dyn Any;
}

/// A shared handle to an [`AssetObject`]; clones share the same value.
///
/// Two handles are equal when they point at the same value.
#[derive(Debug, Clone)]
pub struct Object(Arc<dyn AssetObject>);

impl Object {
    /// Wraps a value.
    pub fn new(value: impl AssetObject) -> Self {
        Object(Arc::new(value))
    }

    /// The object's declared type name.
    pub fn type_name(&self) -> &str {
        self.0.type_name()
    }

    /// The underlying trait object.
    pub fn get(&self) -> &dyn AssetObject {
        self.0.as_ref()
    }

    /// The value as `T`, if it is one.
    pub fn downcast_ref<T: AssetObject>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref::<T>()
    }
}

impl PartialEq for Object {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl From<Arc<dyn AssetObject>> for Object {
    fn from(value: Arc<dyn AssetObject>) -> Self {
        Object(value)
    }
}

/// The type string that meta shows for a map.
pub const DICT_TYPE: &str = "<class 'dict'>";
/// The type string that meta shows for an array.
pub const LIST_TYPE: &str = "<class 'list'>";
/// The type string that meta shows for a byte buffer.
pub const BYTES_TYPE: &str = "<class 'bytes'>";

/// The type string of an object type name: `<class 'NAME'>`.
pub fn object_type_string(type_name: &str) -> String {
    format!("<class '{type_name}'>")
}

impl Value {
    /// Builds a value tree from JSON; lossless.
    pub fn from_json(json: serde_json::Value) -> Value {
        match json {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(b),
            serde_json::Value::Number(n) => Value::Number(n),
            serde_json::Value::String(s) => Value::String(s),
            serde_json::Value::Array(items) => {
                Value::Array(items.into_iter().map(Value::from_json).collect())
            }
            serde_json::Value::Object(map) => Value::Map(
                map.into_iter()
                    .map(|(k, v)| (k, Value::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// The tree as JSON, or `None` if it holds bytes or objects anywhere.
    pub fn to_json(&self) -> Option<serde_json::Value> {
        Some(match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => serde_json::Value::Number(n.clone()),
            Value::String(s) => serde_json::Value::String(s.clone()),
            Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(Value::to_json).collect::<Option<_>>()?)
            }
            Value::Map(map) => serde_json::Value::Object(
                map.iter()
                    .map(|(k, v)| Some((k.clone(), v.to_json()?)))
                    .collect::<Option<_>>()?,
            ),
            Value::Bytes(_) | Value::Object(_) => return None,
        })
    }

    /// The tree as JSON with every bytes or object leaf replaced by its type string: the shape
    /// the model is shown (docs/reference/assets.md#type-strings).
    pub fn to_meta_json(&self) -> serde_json::Value {
        match self {
            Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(Value::to_meta_json).collect())
            }
            Value::Map(map) => serde_json::Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), v.to_meta_json()))
                    .collect(),
            ),
            Value::Bytes(_) => serde_json::Value::String(BYTES_TYPE.to_owned()),
            Value::Object(o) => serde_json::Value::String(object_type_string(o.type_name())),
            scalar => scalar.to_json().unwrap_or(serde_json::Value::Null),
        }
    }

    /// The type string of a container, bytes or object; `None` for JSON scalars.
    pub fn type_string(&self) -> Option<String> {
        match self {
            Value::Map(_) => Some(DICT_TYPE.to_owned()),
            Value::Array(_) => Some(LIST_TYPE.to_owned()),
            Value::Bytes(_) => Some(BYTES_TYPE.to_owned()),
            Value::Object(o) => Some(object_type_string(o.type_name())),
            _ => None,
        }
    }

    /// A short name of the node's kind, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "a list",
            Value::Map(_) => "a map",
            Value::Bytes(_) => "bytes",
            Value::Object(_) => "an object",
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The map, if this is one.
    pub fn as_map(&self) -> Option<&Map> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The array, if this is one.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The bytes, if this is a byte buffer.
    pub fn as_bytes(&self) -> Option<&Bytes> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }
}

impl From<serde_json::Value> for Value {
    fn from(json: serde_json::Value) -> Self {
        Value::from_json(json)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}

impl From<Bytes> for Value {
    fn from(b: Bytes) -> Self {
        Value::Bytes(b)
    }
}

impl From<Object> for Value {
    fn from(o: Object) -> Self {
        Value::Object(o)
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => serializer.serialize_unit(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Number(n) => n.serialize(serializer),
            Value::String(s) => serializer.serialize_str(s),
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Value::Map(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (k, v) in map {
                    out.serialize_entry(k, v)?;
                }
                out.end()
            }
            Value::Bytes(b) => serializer.serialize_str(&b.to_data_url()),
            Value::Object(o) => match o.get().to_json() {
                Some(json) => json.serialize(serializer),
                None => serializer.serialize_str(&object_type_string(o.type_name())),
            },
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(deserializer).map(Value::from_json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug)]
    struct Point(i32, i32);

    impl AssetObject for Point {
        fn type_name(&self) -> &str {
            "geo::Point"
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    #[test]
    fn json_round_trip_is_lossless() {
        let json = json!({"b": 1, "a": [1.5, u64::MAX, i64::MIN, null, true, "x"], "c": {}});
        let value = Value::from_json(json.clone());
        assert_eq!(value.to_json(), Some(json.clone()));
        let keys: Vec<_> = value.as_map().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["b", "a", "c"]);
    }

    #[test]
    fn non_json_leaves_have_type_strings() {
        let mut map = Map::new();
        map.insert(
            "img".into(),
            Bytes::with_media_type(vec![1, 2], "image/png").into(),
        );
        map.insert("pt".into(), Object::new(Point(1, 2)).into());
        let value = Value::Map(map);
        assert_eq!(value.to_json(), None);
        assert_eq!(
            value.to_meta_json(),
            json!({"img": "<class 'bytes'>", "pt": "<class 'geo::Point'>"})
        );
    }

    #[test]
    fn objects_downcast_and_compare_by_identity() {
        let a = Object::new(Point(3, 4));
        let b = a.clone();
        assert_eq!(a, b);
        assert_ne!(a, Object::new(Point(3, 4)));
        let p = a.downcast_ref::<Point>().unwrap();
        assert_eq!((p.0, p.1), (3, 4));
    }

    #[test]
    fn bytes_render_as_data_url() {
        let b = Bytes::with_media_type(b"hi".to_vec(), "text/plain");
        assert_eq!(b.to_data_url(), "data:text/plain;base64,aGk=");
    }
}
