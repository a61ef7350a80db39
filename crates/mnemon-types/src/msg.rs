//! Conversation messages (`Msg`), per spec/memory.md §4.
//!
//! A [`Msg`] has typed core fields (`id`, `timestamp`, `name`, `content`, `role`, `url`) plus
//! ordered extras (such as `embedding`), and a kind: a plain message or a thought. Messages are
//! built by a [`MsgFactory`], which owns the id and clock providers so that tests are
//! deterministic and no global state is involved.
//!
//! Text forms follow AgentScope 0.0.4: [`Msg::to_str`], [`serialize`] / [`serialize_list`] in
//! Python's default JSON layout ([`pyjson`]), and [`deserialize`] for both the `__type` form and
//! the later `__module__`/`__name__` form.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use mnemon_pyjson::PythonFormatter;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

/// The keys every message has, in output order.
pub const CORE_KEYS: [&str; 6] = ["id", "timestamp", "name", "content", "role", "url"];

/// Keys that mark a serialized form and are never stored on a message.
pub const MARKER_KEYS: [&str; 4] = ["__type", "__module__", "__name__", "__marks"];

/// The extra that holds a message's embedding vector.
pub const EMBEDDING_KEY: &str = "embedding";

/// The module and class names of AgentScope 0.1.x serialized messages.
const V01_MODULE: &str = "agentscope.message.msg";
const V01_NAME: &str = "Msg";

/// Why a message could not be built, converted or decoded.
///
/// `p` is the position of the offending item in its batch or document (0 for a single message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MsgError {
    /// A required key is absent.
    #[error("item {p}: missing required field \"{field}\"")]
    MissingField {
        /// Position of the item.
        p: usize,
        /// The missing key.
        field: String,
    },
    /// A key has a value of the wrong type or shape.
    #[error("item {p}: field \"{field}\" must be {expected}")]
    InvalidField {
        /// Position of the item.
        p: usize,
        /// The offending key.
        field: String,
        /// What the value must be.
        expected: String,
    },
    /// An item is not a JSON object.
    #[error("item {p}: expected a JSON object")]
    NotAnObject {
        /// Position of the item.
        p: usize,
    },
    /// An extra used a core or marker key.
    #[error("key \"{key}\" is reserved")]
    ReservedKey {
        /// The key.
        key: String,
    },
    /// A `__type` other than `Msg`, `Tht` or `List`.
    #[error("deserialization of type \"{name}\" is not supported")]
    UnknownType {
        /// The `__type` value.
        name: String,
    },
    /// A serialized message without any format marker.
    #[error("serialized message has no \"__type\" or \"__module__\"/\"__name__\" key")]
    MissingType,
    /// A 0.1.x object of a class other than `agentscope.message.msg.Msg`.
    #[error("unsupported serialized class {module}.{name}")]
    UnsupportedClass {
        /// The `__module__` value.
        module: String,
        /// The `__name__` value.
        name: String,
    },
    /// The text is not JSON.
    #[error("invalid JSON: {detail}")]
    InvalidJson {
        /// The parser's message.
        detail: String,
    },
}

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

/// Supplies ids for new messages.
pub trait IdGen: Send + Sync {
    /// Returns a fresh, non-empty id.
    fn next_id(&self) -> String;
}

/// Supplies timestamps for new messages, as `%Y-%m-%d %H:%M:%S` strings.
pub trait Clock: Send + Sync {
    /// Returns the current time.
    fn now(&self) -> String;
}

/// Random ids: a UUID v4 as 32 lowercase hex digits, like Python's `uuid4().hex`.
#[derive(Debug, Clone, Copy, Default)]
pub struct UuidIds;

impl IdGen for UuidIds {
    fn next_id(&self) -> String {
        uuid::Uuid::new_v4().simple().to_string()
    }
}

/// Deterministic ids for tests: `format!("{:032x}", n)` for n = 1, 2, …
#[derive(Debug, Default)]
pub struct SequentialIds {
    issued: AtomicU64,
}

impl SequentialIds {
    /// Starts at 1.
    pub fn new() -> Self {
        SequentialIds::default()
    }
}

impl IdGen for SequentialIds {
    fn next_id(&self) -> String {
        let n = self.issued.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{n:032x}")
    }
}

/// A clock that always returns the same timestamp.
#[derive(Debug, Clone)]
pub struct FixedClock(String);

impl FixedClock {
    /// A clock stuck at `timestamp` (kept verbatim).
    pub fn new(timestamp: impl Into<String>) -> Self {
        FixedClock(timestamp.into())
    }
}

impl Clock for FixedClock {
    fn now(&self) -> String {
        self.0.clone()
    }
}

/// A clock that starts at a given time and advances a fixed number of seconds per reading.
#[derive(Debug)]
pub struct StepClock {
    start: i64,
    step: i64,
    readings: AtomicU64,
}

impl StepClock {
    /// A clock whose first reading is `start` (`%Y-%m-%d %H:%M:%S`) and each later one `step`
    /// seconds after the previous.
    pub fn new(start: &str, step_seconds: i64) -> Result<Self, MsgError> {
        let start = parse_timestamp(start).ok_or_else(|| MsgError::InvalidField {
            p: 0,
            field: "timestamp".into(),
            expected: "a time written as YYYY-MM-DD HH:MM:SS".into(),
        })?;
        Ok(StepClock {
            start,
            step: step_seconds,
            readings: AtomicU64::new(0),
        })
    }
}

impl Clock for StepClock {
    fn now(&self) -> String {
        let n = i64::try_from(self.readings.fetch_add(1, Ordering::Relaxed)).unwrap_or(i64::MAX);
        format_timestamp(self.start.saturating_add(n.saturating_mul(self.step)))
    }
}

/// Seconds since 1970-01-01 00:00:00 of a `%Y-%m-%d %H:%M:%S` string, in no time zone.
fn parse_timestamp(text: &str) -> Option<i64> {
    let (date, time) = text.split_once(' ')?;
    let mut d = date.splitn(3, '-').map(str::parse::<i64>);
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.splitn(3, ':').map(str::parse::<i64>);
    let (h, mi, s) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    let valid = (1..=12).contains(&m)
        && (1..=31).contains(&day)
        && (0..24).contains(&h)
        && (0..60).contains(&mi)
        && (0..60).contains(&s);
    valid.then(|| days_from_civil(y, m, day) * 86_400 + h * 3600 + mi * 60 + s)
}

/// Formats seconds since 1970-01-01 00:00:00 as `%Y-%m-%d %H:%M:%S`.
fn format_timestamp(seconds: i64) -> String {
    let (days, secs) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

// Howard Hinnant's days-from-civil algorithms (proleptic Gregorian calendar).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// Builds messages, filling in ids and timestamps from its providers.
#[derive(Clone)]
pub struct MsgFactory {
    ids: Arc<dyn IdGen>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for MsgFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MsgFactory").finish_non_exhaustive()
    }
}

impl MsgFactory {
    /// A factory using these providers.
    pub fn new(ids: Arc<dyn IdGen>, clock: Arc<dyn Clock>) -> Self {
        MsgFactory { ids, clock }
    }

    /// A fresh id.
    pub fn next_id(&self) -> String {
        self.ids.next_id()
    }

    /// The current timestamp.
    pub fn now(&self) -> String {
        self.clock.now()
    }

    /// Starts a message from `name` with `content`; role `"assistant"`, no url.
    pub fn msg(&self, name: impl Into<String>, content: impl Into<Value>) -> MsgBuilder<'_> {
        MsgBuilder {
            factory: self,
            kind: MsgKind::Msg,
            id: None,
            timestamp: None,
            name: name.into(),
            content: content.into(),
            role: "assistant".into(),
            url: None,
            extras: Map::new(),
            error: None,
        }
    }

    /// Starts a thought: name `"thought"`, role `"assistant"`, no url, as 0.0.4.
    pub fn thought(&self, content: impl Into<Value>) -> MsgBuilder<'_> {
        let mut builder = self.msg("thought", content);
        builder.kind = MsgKind::Tht;
        builder
    }

    /// Converts a plain message object (§4.1) of the given kind. Marker keys are skipped.
    pub fn from_object(
        &self,
        object: &Map<String, Value>,
        kind: MsgKind,
        p: usize,
    ) -> Result<Msg, MsgError> {
        ingest_plain(object, kind, p, self)
    }

    /// Converts any message object: a `__type` form, a 0.1.x form, or else a plain message
    /// object. A `List` yields several messages.
    pub fn from_any_object(
        &self,
        object: &Map<String, Value>,
        p: usize,
    ) -> Result<Vec<Msg>, MsgError> {
        match decode_marked(object, p, self)? {
            Some(messages) => Ok(messages),
            None => Ok(vec![ingest_plain(object, MsgKind::Msg, p, self)?]),
        }
    }
}

/// Builder returned by [`MsgFactory::msg`] and [`MsgFactory::thought`].
#[derive(Debug)]
#[must_use = "call build() to get the message"]
pub struct MsgBuilder<'a> {
    factory: &'a MsgFactory,
    kind: MsgKind,
    id: Option<String>,
    timestamp: Option<String>,
    name: String,
    content: Value,
    role: String,
    url: Option<MsgUrl>,
    extras: Map<String, Value>,
    error: Option<MsgError>,
}

impl MsgBuilder<'_> {
    /// Sets the role (any string; not validated, as in the reference).
    pub fn role(mut self, role: impl Into<String>) -> Self {
        self.role = role.into();
        self
    }

    /// Sets a single URL; `""` means none, as in 0.0.4.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        let url = url.into();
        self.url = (!url.is_empty()).then_some(MsgUrl::One(url));
        self
    }

    /// Sets several URLs; an empty list means none, as in 0.0.4.
    pub fn urls<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let urls: Vec<String> = urls.into_iter().map(Into::into).collect();
        self.url = (!urls.is_empty()).then_some(MsgUrl::Many(urls));
        self
    }

    /// Uses this id instead of a generated one (must not be empty).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Uses this timestamp (kept verbatim) instead of the clock's.
    pub fn timestamp(mut self, timestamp: impl Into<String>) -> Self {
        self.timestamp = Some(timestamp.into());
        self
    }

    /// Adds an extra field. A core or marker key makes [`build`](Self::build) fail with
    /// [`MsgError::ReservedKey`]; an invalid `embedding` with [`MsgError::InvalidField`].
    pub fn extra(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        let key = key.into();
        let value = value.into();
        if self.error.is_none() {
            if let Err(e) = check_extra(&key, &value, 0) {
                self.error = Some(e);
            }
        }
        self.extras.insert(key, value);
        self
    }

    /// Sets the embedding (stored as the `embedding` extra, each number the shortest decimal
    /// that round-trips the `f32`). Non-finite numbers or an empty vector make `build` fail.
    pub fn embedding(mut self, vector: Vec<f32>) -> Self {
        match embedding_to_json(&vector) {
            Some(value) => {
                self.extras.insert(EMBEDDING_KEY.into(), value);
            }
            None => {
                self.error.get_or_insert(invalid_embedding(0));
            }
        }
        self
    }

    /// Finishes the message, filling in a missing id or timestamp from the factory.
    pub fn build(self) -> Result<Msg, MsgError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let id = match self.id {
            Some(id) if id.is_empty() => return Err(empty_id(0)),
            Some(id) => id,
            None => self.factory.next_id(),
        };
        Ok(Msg {
            kind: self.kind,
            id,
            timestamp: self.timestamp.unwrap_or_else(|| self.factory.now()),
            name: self.name,
            content: self.content,
            role: self.role,
            url: self.url,
            extras: self.extras,
        })
    }
}

/// A conversation message: typed core fields plus ordered extras (spec/memory.md §4).
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

/// Joins the messages' [`Msg::to_str`] lines with `\n`, without a trailing newline.
pub fn render(messages: &[Msg]) -> String {
    let lines: Vec<String> = messages.iter().map(Msg::to_str).collect();
    lines.join("\n")
}

/// `serialize(msg)` of 0.0.4: a pyjson object whose first key is `"__type"`.
pub fn serialize(msg: &Msg) -> String {
    pyjson(&Value::Object(msg.to_object(Some(msg.kind))))
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
    pyjson(&Value::Object(object))
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

/// Decodes a serialized message or list (§4.5): a `__type` object (`Msg`, `Tht`, `List`), a
/// 0.1.x object, or an array of marked objects. Missing ids and timestamps come from `factory`.
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
fn decode_marked(
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

/// Converts a plain message object per §4.1.
fn ingest_plain(
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

fn invalid_embedding(p: usize) -> MsgError {
    MsgError::InvalidField {
        p,
        field: EMBEDDING_KEY.into(),
        expected: "null or a non-empty array of finite numbers".into(),
    }
}

fn empty_id(p: usize) -> MsgError {
    MsgError::InvalidField {
        p,
        field: "id".into(),
        expected: "a non-empty string".into(),
    }
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

/// Writes `value` in Python's default `json.dumps` layout: separators `, ` and `: `, every
/// non-ASCII character (and U+007F) escaped as `\uXXXX`, floats as Python's `repr`.
pub fn pyjson(value: &Value) -> String {
    write_pyjson(value, None)
}

/// As [`pyjson`], with `json.dumps(indent=…)`'s layout (used by exports, with 4).
pub fn pyjson_pretty(value: &Value, indent: usize) -> String {
    write_pyjson(value, Some(indent))
}

fn write_pyjson(value: &Value, indent: Option<usize>) -> String {
    let formatter = match indent {
        Some(width) => PythonFormatter::spaces(width),
        None => PythonFormatter::compact(),
    };
    // Serializing a `Value` cannot fail: keys are strings and a Vec never fails to write.
    mnemon_pyjson::to_string(value, formatter).unwrap_or_else(|_| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon_pyjson::python_float_repr;
    use proptest::prelude::*;
    use serde_json::json;

    fn factory() -> MsgFactory {
        MsgFactory::new(
            Arc::new(SequentialIds::new()),
            Arc::new(FixedClock::new("2024-03-05 08:30:00")),
        )
    }

    #[test]
    fn sequential_ids_and_step_clock() {
        let ids = SequentialIds::new();
        assert_eq!(ids.next_id(), "00000000000000000000000000000001");
        assert_eq!(ids.next_id(), "00000000000000000000000000000002");
        let clock = StepClock::new("2024-02-28 23:59:30", 45).unwrap();
        assert_eq!(clock.now(), "2024-02-28 23:59:30");
        assert_eq!(clock.now(), "2024-02-29 00:00:15");
        assert!(StepClock::new("yesterday", 1).is_err());
        assert_eq!(UuidIds.next_id().len(), 32);
    }

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
    fn builder_rules() {
        let f = factory();
        let m = f
            .msg("Mara", "hi")
            .url("")
            .role("tool")
            .embedding(vec![0.1, -0.5])
            .build()
            .unwrap();
        assert_eq!(m.url(), None);
        assert_eq!(m.role(), "tool");
        assert_eq!(m.extra("embedding"), Some(&json!([0.1, -0.5])));
        assert_eq!(m.embedding(), Some(vec![0.1f32, -0.5]));
        assert!(matches!(
            f.msg("a", "b").extra("role", 1).build(),
            Err(MsgError::ReservedKey { .. })
        ));
        assert!(matches!(
            f.msg("a", "b").extra("__marks", 1).build(),
            Err(MsgError::ReservedKey { .. })
        ));
        assert!(f.msg("a", "b").id("").build().is_err());
        assert!(f.msg("a", "b").embedding(vec![f32::NAN]).build().is_err());
        assert_eq!(
            f.msg("a", "b")
                .urls(Vec::<String>::new())
                .build()
                .unwrap()
                .url(),
            None
        );
    }

    #[test]
    fn ingest_rules() {
        let f = factory();
        let obj = |v: Value| v.as_object().cloned().unwrap();
        let m = f
            .from_object(
                &obj(json!({"name": "n", "content": null, "id": null, "role": null, "url": [], "x": 1})),
                MsgKind::Msg,
                3,
            )
            .unwrap();
        assert_eq!(m.role(), "assistant");
        assert_eq!(m.url(), None);
        assert_eq!(m.content(), &Value::Null);
        assert_eq!(m.id(), "00000000000000000000000000000001");
        assert_eq!(
            f.from_object(&obj(json!({"content": 1})), MsgKind::Msg, 3),
            Err(MsgError::MissingField {
                p: 3,
                field: "name".into()
            })
        );
        assert_eq!(
            f.from_object(&obj(json!({"name": "n"})), MsgKind::Msg, 0),
            Err(MsgError::MissingField {
                p: 0,
                field: "content".into()
            })
        );
        for bad in [
            json!({"name": "n", "content": 1, "id": 5}),
            json!({"name": "n", "content": 1, "id": ""}),
            json!({"name": 1, "content": 1}),
            json!({"name": "n", "content": 1, "url": [1]}),
            json!({"name": "n", "content": 1, "embedding": []}),
            json!({"name": "n", "content": 1, "embedding": ["a"]}),
            json!({"name": "n", "content": 1, "timestamp": 1}),
        ] {
            assert!(
                matches!(
                    f.from_object(&obj(bad.clone()), MsgKind::Msg, 0),
                    Err(MsgError::InvalidField { .. })
                ),
                "{bad}"
            );
        }
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

    #[test]
    fn python_reprs() {
        for (x, s) in [
            (0.12, "0.12"),
            (-0.5, "-0.5"),
            (1.0, "1.0"),
            (100.0, "100.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (123.456, "123.456"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1e-100, "1e-100"),
            (0.1f32 as f64, "0.10000000149011612"),
        ] {
            assert_eq!(python_float_repr(x), s);
        }
    }

    #[test]
    fn pyjson_layouts() {
        let v = json!({"a": [1, {"b": "é😀\u{7f}"}], "c": [], "d": {}});
        assert_eq!(
            pyjson(&v),
            r#"{"a": [1, {"b": "\u00e9\ud83d\ude00\u007f"}], "c": [], "d": {}}"#
        );
        assert_eq!(
            pyjson_pretty(&v, 2),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": \"\\u00e9\\ud83d\\ude00\\u007f\"\n    }\n  ],\n  \"c\": [],\n  \"d\": {}\n}"
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
        fn pyjson_is_json(value in arb_json()) {
            let back: Value = serde_json::from_str(&pyjson(&value)).unwrap();
            prop_assert_eq!(&back, &value);
            let back: Value = serde_json::from_str(&pyjson_pretty(&value, 4)).unwrap();
            prop_assert_eq!(back, value);
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
