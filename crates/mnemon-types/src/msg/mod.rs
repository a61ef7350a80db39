//! Conversation messages (`Msg`), per docs/reference/memory.md#messages.
//!
//! A [`Msg`] has typed core fields (`id`, `timestamp`, `name`, `content`, `role`, `url`) plus
//! ordered extras (such as `embedding`), and a kind: a plain message or a thought. Messages are
//! built by a [`MsgFactory`], which owns the id and clock providers so that tests are
//! deterministic and no global state is involved.
//!
//! Text forms follow AgentScope 0.0.4: [`Msg::to_str`], [`serialize`] / [`serialize_list`] in
//! Python's default JSON layout (`mnemon_pyjson::dumps`), and [`deserialize`] for both the
//! `__type` form and the later `__module__`/`__name__` form.
//!
//! The code is split by concern: this module holds the message itself and the rules for its
//! fields; `providers` the id and clock providers ([`IdGen`], [`Clock`]); `factory` the
//! [`MsgFactory`] and [`MsgBuilder`]; `agentscope` the text forms; `error` [`MsgError`].

use std::fmt;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

mod agentscope;
mod error;
mod factory;
mod providers;

pub use agentscope::{Deserialized, deserialize, render, serialize, serialize_list};
pub use error::MsgError;
pub use factory::{MsgBuilder, MsgFactory};
pub use providers::{Clock, FixedClock, IdGen, SequentialIds, UuidIds};

use error::invalid_embedding;

/// The keys every message has, in output order.
pub const CORE_KEYS: [&str; 6] = ["id", "timestamp", "name", "content", "role", "url"];

/// Keys that mark a serialized form and are never stored on a message.
pub const MARKER_KEYS: [&str; 4] = ["__type", "__module__", "__name__", "__marks"];

/// The extra that holds a message's embedding vector.
pub const EMBEDDING_KEY: &str = "embedding";

/// The kind of a message: a plain message or a thought. It is not a JSON key; the `__type`
/// marker of [`serialize`] carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MsgKind {
    /// A message (`__type` `"Msg"`).
    #[default]
    Msg,
    /// A thought (`__type` `"Tht"`).
    Tht,
}

impl MsgKind {
    /// The `__type` marker of this kind.
    pub fn as_str(self) -> &'static str {
        match self {
            MsgKind::Msg => "Msg",
            MsgKind::Tht => "Tht",
        }
    }

    /// Parses a `__type` marker (`"Msg"` or `"Tht"`).
    pub fn from_marker(marker: &str) -> Option<MsgKind> {
        match marker {
            "Msg" => Some(MsgKind::Msg),
            "Tht" => Some(MsgKind::Tht),
            _ => None,
        }
    }
}

/// A message's `url`: one link or several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MsgUrl {
    /// A single URL.
    One(String),
    /// Several URLs, in order (never empty).
    Many(Vec<String>),
}

impl MsgUrl {
    fn to_json(&self) -> Value {
        match self {
            MsgUrl::One(url) => Value::String(url.clone()),
            MsgUrl::Many(urls) => Value::Array(urls.iter().cloned().map(Value::String).collect()),
        }
    }
}

/// A conversation message: typed core fields plus ordered extras
/// (docs/reference/memory.md#messages).
///
/// Equality compares the kind and every field; extras compare as a map (order ignored).
#[derive(Debug, Clone, PartialEq)]
pub struct Msg {
    kind: MsgKind,
    id: String,
    timestamp: String,
    name: String,
    content: Value,
    role: String,
    url: Option<MsgUrl>,
    extras: Map<String, Value>,
}

impl Msg {
    /// Whether this is a message or a thought.
    pub fn kind(&self) -> MsgKind {
        self.kind
    }

    /// The id (never empty).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The timestamp, verbatim.
    pub fn timestamp(&self) -> &str {
        &self.timestamp
    }

    /// The speaker's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The content: any JSON value, `null` included.
    pub fn content(&self) -> &Value {
        &self.content
    }

    /// The role, e.g. `"user"` or `"assistant"`.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The URL(s), if any.
    pub fn url(&self) -> Option<&MsgUrl> {
        self.url.as_ref()
    }

    /// The extra fields, in order.
    pub fn extras(&self) -> &Map<String, Value> {
        &self.extras
    }

    /// One extra field.
    pub fn extra(&self, key: &str) -> Option<&Value> {
        self.extras.get(key)
    }

    /// Sets an extra field, checked as [`MsgBuilder::extra`] is.
    pub fn set_extra(&mut self, key: impl Into<String>, value: Value) -> Result<(), MsgError> {
        let key = key.into();
        check_extra(&key, &value, 0)?;
        self.extras.insert(key, value);
        Ok(())
    }

    /// Whether the message has a non-null embedding.
    pub fn has_embedding(&self) -> bool {
        matches!(self.extras.get(EMBEDDING_KEY), Some(Value::Array(_)))
    }

    /// The embedding as `f32`s, or `None` when absent or `null`.
    pub fn embedding(&self) -> Option<Vec<f32>> {
        match self.extras.get(EMBEDDING_KEY) {
            // Ingest guarantees every element is a number.
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|v| v.as_f64().unwrap_or(f64::NAN) as f32)
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Stores `vector` as the `embedding` extra (shortest round-trip decimals). Fails on an
    /// empty vector or a non-finite number.
    pub fn set_embedding(&mut self, vector: &[f32]) -> Result<(), MsgError> {
        let value = embedding_to_json(vector).ok_or_else(|| invalid_embedding(0))?;
        self.extras.insert(EMBEDDING_KEY.into(), value);
        Ok(())
    }

    /// The content text: the string itself, or else compact JSON (also the embedding text).
    pub fn content_text(&self) -> String {
        match &self.content {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        }
    }

    /// `{name}: {content text}`, or `{name} thought: {content text}` for a thought.
    pub fn to_str(&self) -> String {
        match self.kind {
            MsgKind::Msg => format!("{}: {}", self.name, self.content_text()),
            MsgKind::Tht => format!("{} thought: {}", self.name, self.content_text()),
        }
    }

    /// The message as a JSON object in output order: core fields, then extras.
    pub fn to_json(&self) -> Value {
        Value::Object(self.to_object(None))
    }

    fn to_object(&self, marker: Option<MsgKind>) -> Map<String, Value> {
        let mut object = Map::with_capacity(CORE_KEYS.len() + self.extras.len() + 1);
        if let Some(kind) = marker {
            object.insert("__type".into(), Value::String(kind.as_str().into()));
        }
        object.insert("id".into(), Value::String(self.id.clone()));
        object.insert("timestamp".into(), Value::String(self.timestamp.clone()));
        object.insert("name".into(), Value::String(self.name.clone()));
        object.insert("content".into(), self.content.clone());
        object.insert("role".into(), Value::String(self.role.clone()));
        object.insert(
            "url".into(),
            self.url.as_ref().map_or(Value::Null, MsgUrl::to_json),
        );
        for (key, value) in &self.extras {
            object.insert(key.clone(), value.clone());
        }
        object
    }
}

/// Serializes as the plain message object, in output order (no kind marker).
impl Serialize for Msg {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(CORE_KEYS.len() + self.extras.len()))?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("timestamp", &self.timestamp)?;
        map.serialize_entry("name", &self.name)?;
        map.serialize_entry("content", &self.content)?;
        map.serialize_entry("role", &self.role)?;
        map.serialize_entry("url", &self.url.as_ref().map(MsgUrl::to_json))?;
        for (key, value) in &self.extras {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl fmt::Display for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_str())
    }
}

/// Checks an extra field: not a core or marker key, and a valid `embedding`.
fn check_extra(key: &str, value: &Value, p: usize) -> Result<(), MsgError> {
    if CORE_KEYS.contains(&key) || MARKER_KEYS.contains(&key) {
        return Err(MsgError::ReservedKey { key: key.into() });
    }
    if key == EMBEDDING_KEY {
        let valid = match value {
            Value::Null => true,
            Value::Array(items) => !items.is_empty() && items.iter().all(Value::is_number),
            _ => false,
        };
        if !valid {
            return Err(invalid_embedding(p));
        }
    }
    Ok(())
}

/// The JSON form of an embedding: each `f32` as its shortest round-trip decimal.
fn embedding_to_json(vector: &[f32]) -> Option<Value> {
    if vector.is_empty() {
        return None;
    }
    vector
        .iter()
        .map(|&x| {
            // `f32`'s Display is the shortest decimal that reads back as the same f32; reading
            // that decimal as f64 keeps it short on output (0.1f32 → 0.1, not 0.100000001…).
            let shortest: f64 = x.to_string().parse().ok()?;
            serde_json::Number::from_f64(shortest).map(Value::Number)
        })
        .collect::<Option<Vec<Value>>>()
        .map(Value::Array)
}

/// The factory the unit tests of this module share: sequential ids, a fixed clock.
#[cfg(test)]
pub(crate) fn test_factory() -> MsgFactory {
    use std::sync::Arc;
    MsgFactory::new(
        Arc::new(SequentialIds::new()),
        Arc::new(FixedClock::new("2024-03-05 08:30:00")),
    )
}
