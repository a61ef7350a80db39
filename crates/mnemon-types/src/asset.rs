//! The asset: an object kept outside the chat history, under an id
//! (docs/reference/assets.md#asset).

use serde::de::{Deserialize, Deserializer, Error as _};
use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::error::TypesError;
use crate::value::{Map, Value};

/// An object kept outside the chat history under an id.
///
/// Serializes as a JSON object with the fields in the order `asset_type`, `asset_id`,
/// `asset_name`, `description`, `content_type`, `content`, then the extra fields in insertion
/// order; absent optional fields are omitted.
///
/// ```
/// use mnemon_types::Asset;
///
/// let asset = Asset::new(serde_json::json!({"labels": ["cat"]}))
///     .with_id("a1")
///     .with_type("asset_example");
/// let json = serde_json::to_string(&asset)?;
/// assert_eq!(json, r#"{"asset_type":"asset_example","asset_id":"a1","content":{"labels":["cat"]}}"#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Asset {
    /// Task-related classification, e.g. `"image"` or `"table"`.
    pub asset_type: Option<String>,
    /// The asset's id; never empty. A UUID v4 when the caller gives none.
    pub asset_id: String,
    /// A human-readable name.
    pub asset_name: Option<String>,
    /// A description for people and models.
    pub description: Option<String>,
    /// What `content` holds, e.g. `"image/png"` or `"<class 'dict'>"`; free text.
    pub content_type: Option<String>,
    /// The asset's payload.
    pub content: Value,
    /// Any other fields, preserved in insertion order.
    pub extra: Map,
}

/// The names of the fields an asset always understands, in serialization order.
pub const ASSET_FIELDS: [&str; 6] = [
    "asset_type",
    "asset_id",
    "asset_name",
    "description",
    "content_type",
    "content",
];

/// A fresh asset id: a lowercase, hyphenated UUID v4.
pub fn new_asset_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

impl Asset {
    /// An asset holding `content`, with a freshly generated id.
    pub fn new(content: impl Into<Value>) -> Self {
        Asset {
            asset_type: None,
            asset_id: new_asset_id(),
            asset_name: None,
            description: None,
            content_type: None,
            content: content.into(),
            extra: Map::new(),
        }
    }

    /// Sets the id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.asset_id = id.into();
        self
    }

    /// Sets the asset type.
    pub fn with_type(mut self, asset_type: impl Into<String>) -> Self {
        self.asset_type = Some(asset_type.into());
        self
    }

    /// Sets the name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.asset_name = Some(name.into());
        self
    }

    /// Sets the description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets the content type.
    pub fn with_content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }

    /// The asset as one value tree: a map of its fields in serialization order. References
    /// resolve against this tree, so `["content", …]` reaches into the content.
    pub fn to_value(&self) -> Value {
        let mut map = Map::with_capacity(6 + self.extra.len());
        let optional = |v: &Option<String>| v.clone().map(Value::String);
        let fields = [
            ("asset_type", optional(&self.asset_type)),
            ("asset_id", Some(Value::String(self.asset_id.clone()))),
            ("asset_name", optional(&self.asset_name)),
            ("description", optional(&self.description)),
            ("content_type", optional(&self.content_type)),
            ("content", Some(self.content.clone())),
        ];
        for (name, value) in fields {
            if let Some(value) = value {
                map.insert(name.to_owned(), value);
            }
        }
        for (k, v) in &self.extra {
            map.insert(k.clone(), v.clone());
        }
        Value::Map(map)
    }

    /// Builds an asset from a value tree map (the inverse of [`Asset::to_value`]).
    ///
    /// A missing `asset_id` gets a fresh UUID; a missing `content` is `null`; unknown fields go
    /// to `extra`.
    pub fn from_value(value: Value) -> Result<Asset, TypesError> {
        let Value::Map(map) = value else {
            return Err(TypesError::NotAnObject {
                found: value.kind(),
            });
        };
        let mut asset = Asset::new(Value::Null);
        let mut id = None;
        for (key, value) in map {
            match key.as_str() {
                "asset_type" => asset.asset_type = optional_string("asset_type", value)?,
                "asset_id" => id = optional_string("asset_id", value)?,
                "asset_name" => asset.asset_name = optional_string("asset_name", value)?,
                "description" => asset.description = optional_string("description", value)?,
                "content_type" => asset.content_type = optional_string("content_type", value)?,
                "content" => asset.content = value,
                _ => {
                    asset.extra.insert(key, value);
                }
            }
        }
        match id {
            Some(id) if id.is_empty() => return Err(TypesError::EmptyAssetId),
            Some(id) => asset.asset_id = id,
            None => {}
        }
        Ok(asset)
    }

    /// Builds an asset from JSON (see [`Asset::from_value`]).
    pub fn from_json(json: serde_json::Value) -> Result<Asset, TypesError> {
        Asset::from_value(Value::from_json(json))
    }
}

fn optional_string(field: &'static str, value: Value) -> Result<Option<String>, TypesError> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        other => Err(TypesError::FieldType {
            field,
            expected: "a string",
            found: other.kind(),
        }),
    }
}

impl Serialize for Asset {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Value::Map(map) = self.to_value() else {
            return Err(serde::ser::Error::custom("asset did not build a map"));
        };
        let mut out = serializer.serialize_map(Some(map.len()))?;
        for (k, v) in &map {
            out.serialize_entry(k, v)?;
        }
        out.end()
    }
}

impl<'de> Deserialize<'de> for Asset {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Asset::from_value(value).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_order_and_extras_are_preserved() {
        let json = json!({
            "zeta": 1,
            "content": {"b": 1, "a": 2},
            "asset_id": "a1",
            "asset_type": "t",
            "alpha": [true],
        });
        let asset: Asset = serde_json::from_value(json).unwrap();
        assert_eq!(
            serde_json::to_string(&asset).unwrap(),
            r#"{"asset_type":"t","asset_id":"a1","content":{"b":1,"a":2},"zeta":1,"alpha":[true]}"#
        );
    }

    #[test]
    fn missing_id_is_generated_as_uuid_v4() {
        let asset: Asset = serde_json::from_value(json!({"content": "x"})).unwrap();
        let id = uuid::Uuid::parse_str(&asset.asset_id).unwrap();
        assert_eq!(id.get_version_num(), 4);
        assert_eq!(asset.asset_id, asset.asset_id.to_lowercase());
    }

    #[test]
    fn bad_fields_are_clear_errors() {
        let err = Asset::from_json(json!({"asset_id": ""})).unwrap_err();
        assert_eq!(err, TypesError::EmptyAssetId);
        let err = Asset::from_json(json!({"asset_id": 7})).unwrap_err();
        assert!(err.to_string().contains("\"asset_id\" must be a string"));
        assert!(Asset::from_json(json!([1])).is_err());
    }
}
