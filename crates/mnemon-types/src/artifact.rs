//! The artifact record (docs/reference/artifacts.md#artifact-record): a named result of one step of
//! an agent's work, saved under a key so that later steps can load it again.
//!
//! The record is plain data. Storing it, deciding which record is the most recent for a key, and
//! writing its content to a storage backend belong to `mnemon-artifacts`.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use uuid::Uuid;

/// Where an artifact's content lives when it is not inline: a backend name and the id the
/// backend knows the content by (for `write_to_file`, a path relative to its root).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageLocation {
    /// The storage backend's registered name, e.g. `write_to_file`.
    pub backend: String,
    /// The content's id within that backend.
    pub id: String,
}

impl StorageLocation {
    /// A location in `backend` under `id`.
    pub fn new(backend: impl Into<String>, id: impl Into<String>) -> Self {
        StorageLocation {
            backend: backend.into(),
            id: id.into(),
        }
    }
}

/// One artifact record.
///
/// Its JSON form (what [`Serialize`] produces) carries `artifact_type` as `type`. The flat
/// dictionary that chains exchange, with `storage` and `storage_id` side by side, comes from
/// [`Artifact::to_dict`].
///
/// ```
/// use mnemon_types::artifact::Artifact;
///
/// let plan = Artifact::new("chat-1", "plan", "plan", "The plan")
///     .with_data(serde_json::json!(["write the parser", "test it"]));
/// assert!(plan.missing_required().is_empty());
/// assert_eq!(plan.to_dict()["type"], "plan");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifact {
    /// Generated when the artifact is created (UUID v7, so ids sort by creation time).
    pub id: Uuid,
    /// How later steps refer to the artifact. Not unique: the most recently saved artifact with
    /// a key in a scope is *the* artifact for that key.
    pub key: String,
    /// Decides how the artifact is stored and displayed, e.g. `file`, `artifact_list`.
    #[serde(rename = "type")]
    pub artifact_type: String,
    /// A human-readable name.
    pub name: String,
    /// A description; may be empty.
    #[serde(default)]
    pub description: String,
    /// Where the content lives when it is not inline.
    #[serde(default)]
    pub storage: Option<StorageLocation>,
    /// Inline content, any JSON.
    #[serde(default)]
    pub data: Option<Value>,
    /// The chat (or session) the artifact belongs to; artifacts of other scopes are invisible.
    pub scope: String,
    /// When the artifact was created, UTC with microseconds.
    pub created_at: Timestamp,
}

impl Artifact {
    /// A new artifact with a fresh id, created now, with an empty description and no content.
    pub fn new(
        scope: impl Into<String>,
        key: impl Into<String>,
        artifact_type: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Artifact {
            id: Uuid::now_v7(),
            key: key.into(),
            artifact_type: artifact_type.into(),
            name: name.into(),
            description: String::new(),
            storage: None,
            data: None,
            scope: scope.into(),
            created_at: Timestamp::now(),
        }
    }

    /// This artifact with `description`.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// This artifact with inline content `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// This artifact with its content kept in a storage backend.
    pub fn with_storage(mut self, storage: StorageLocation) -> Self {
        self.storage = Some(storage);
        self
    }

    /// The dictionary names (`key`, `type`, `name`) of required attributes that are empty or
    /// only white space, in that order. Empty when the record is valid.
    pub fn missing_required(&self) -> Vec<&'static str> {
        [
            ("key", &self.key),
            ("type", &self.artifact_type),
            ("name", &self.name),
        ]
        .into_iter()
        .filter(|(_, value)| value.trim().is_empty())
        .map(|(field, _)| field)
        .collect()
    }

    /// The artifact as the dictionary chains exchange
    /// (docs/reference/artifacts.md#artifact-record): `{"id", "key", "type", "name", "description",
    /// "storage", "storage_id", "data"}`.
    ///
    /// `storage` is the backend name and `storage_id` the id within it, both `null` for inline
    /// content; `data` is `null` when the content is not inline. Scope and creation time are
    /// not part of this form; the record's own JSON form ([`Serialize`]) has them.
    pub fn to_dict(&self) -> Map<String, Value> {
        let mut dict = Map::new();
        dict.insert("id".into(), Value::String(self.id.to_string()));
        dict.insert("key".into(), Value::String(self.key.clone()));
        dict.insert("type".into(), Value::String(self.artifact_type.clone()));
        dict.insert("name".into(), Value::String(self.name.clone()));
        dict.insert(
            "description".into(),
            Value::String(self.description.clone()),
        );
        let (backend, storage_id) = match &self.storage {
            Some(loc) => (
                Value::String(loc.backend.clone()),
                Value::String(loc.id.clone()),
            ),
            None => (Value::Null, Value::Null),
        };
        dict.insert("storage".into(), backend);
        dict.insert("storage_id".into(), storage_id);
        dict.insert("data".into(), self.data.clone().unwrap_or(Value::Null));
        dict
    }
}

/// A UTC instant with microsecond precision, written as RFC 3339
/// (`2024-05-01T12:30:00.123456Z`).
///
/// Years 0001 to 9999 only, so the text form always has the same shape and sorts like the
/// instant it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

const MICROS_PER_SECOND: i64 = 1_000_000;
/// 0001-01-01T00:00:00Z in microseconds since the Unix epoch.
const MIN_MICROS: i64 = -62_135_596_800 * MICROS_PER_SECOND;
/// 9999-12-31T23:59:59.999999Z in microseconds since the Unix epoch.
const MAX_MICROS: i64 = 253_402_300_800 * MICROS_PER_SECOND - 1;

impl Timestamp {
    /// The current time, truncated to microseconds.
    pub fn now() -> Self {
        let micros = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_micros()).unwrap_or(MAX_MICROS),
            // A clock set before 1970: still a valid instant, just a negative one.
            Err(before) => i64::try_from(before.duration().as_micros())
                .map(|m| -m)
                .unwrap_or(MIN_MICROS),
        };
        Timestamp(micros.clamp(MIN_MICROS, MAX_MICROS))
    }

    /// The instant `micros` microseconds after 1970-01-01T00:00:00Z, if it falls in years
    /// 0001 to 9999.
    pub fn from_unix_micros(micros: i64) -> Option<Self> {
        (MIN_MICROS..=MAX_MICROS)
            .contains(&micros)
            .then_some(Timestamp(micros))
    }

    /// Microseconds since 1970-01-01T00:00:00Z.
    pub fn as_unix_micros(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match chrono::DateTime::from_timestamp_micros(self.0) {
            Some(at) => write!(f, "{}", at.format("%Y-%m-%dT%H:%M:%S%.6fZ")),
            // chrono covers far more than years 0001 to 9999, which the constructors enforce;
            // write the raw count rather than fail the formatter.
            None => write!(f, "{}us", self.0),
        }
    }
}

/// Why a string is not an RFC 3339 timestamp.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is not an RFC 3339 timestamp: {reason}; write it like 2024-05-01T12:30:00.123456Z"
)]
pub struct TimestampError {
    /// The text that failed to parse (cut to 64 characters).
    pub input: String,
    /// What was wrong.
    pub reason: &'static str,
}

impl FromStr for Timestamp {
    type Err = TimestampError;

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`. The offset is applied, so the result
    /// is UTC; digits of the fraction past microseconds are dropped.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

/// [`Timestamp::from_str`]: the layout is checked here, so that each refusal says what is
/// wrong; chrono decides which dates exist and counts the days.
fn parse(s: &str) -> Result<Timestamp, TimestampError> {
    let fail = |reason| TimestampError {
        input: s.chars().take(64).collect(),
        reason,
    };
    let b = s.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        part.iter().try_fold(0i64, |acc, d| {
            acc.checked_mul(10)?.checked_add(i64::from(d - b'0'))
        })
    };
    let punct = |at: usize, allowed: &[u8]| b.get(at).is_some_and(|c| allowed.contains(c));
    if !(punct(4, b"-")
        && punct(7, b"-")
        && punct(10, b"Tt ")
        && punct(13, b":")
        && punct(16, b":"))
    {
        return Err(fail(
            "the date and time are not laid out as YYYY-MM-DDTHH:MM:SS",
        ));
    }
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        digits(0..4),
        digits(5..7),
        digits(8..10),
        digits(11..13),
        digits(14..16),
        digits(17..19),
    ) else {
        return Err(fail("a date or time field is not made of digits"));
    };
    if year < 1 {
        return Err(fail("the year must be between 0001 and 9999"));
    }
    if !(1..=12).contains(&month) {
        return Err(fail("the month must be between 01 and 12"));
    }
    // Four digits and two digits: the conversions cannot fail, but never panic on input.
    let date = match (
        i32::try_from(year),
        u32::try_from(month),
        u32::try_from(day),
    ) {
        (Ok(year), Ok(month), Ok(day)) => chrono::NaiveDate::from_ymd_opt(year, month, day),
        _ => None,
    };
    let Some(date) = date else {
        return Err(fail("the day does not exist in that month"));
    };
    if hour > 23 || minute > 59 || second > 59 {
        return Err(fail(
            "the time of day is out of range (leap seconds are not accepted)",
        ));
    }
    let mut at = 19;
    let mut micros = 0i64;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while let Some(d) = b.get(at).filter(|c| c.is_ascii_digit()) {
            if at - start < 6 {
                micros = micros * 10 + i64::from(d - b'0');
            }
            at += 1;
        }
        if at == start {
            return Err(fail("the fraction of a second after '.' has no digits"));
        }
        for _ in (at - start)..6 {
            micros *= 10;
        }
    }
    let offset_seconds = match b.get(at) {
        Some(b'Z' | b'z') if at + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if at + 6 == b.len() && punct(at + 3, b":") => {
            let (Some(oh), Some(om)) = (digits(at + 1..at + 3), digits(at + 4..at + 6)) else {
                return Err(fail("the UTC offset is not made of digits"));
            };
            if oh > 23 || om > 59 {
                return Err(fail("the UTC offset is out of range"));
            }
            let magnitude = oh * 3600 + om * 60;
            if *sign == b'-' { -magnitude } else { magnitude }
        }
        _ => return Err(fail("it must end with Z or a UTC offset such as +02:00")),
    };
    let midnight = date.and_time(chrono::NaiveTime::MIN).and_utc().timestamp();
    let seconds = midnight + hour * 3600 + minute * 60 + second - offset_seconds;
    Timestamp::from_unix_micros(seconds * MICROS_PER_SECOND + micros)
        .ok_or_else(|| fail("in UTC it falls outside years 0001 to 9999"))
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn timestamp_formats_known_instants() {
        assert_eq!(
            Timestamp::from_unix_micros(0).unwrap().to_string(),
            "1970-01-01T00:00:00.000000Z"
        );
        assert_eq!(
            Timestamp::from_unix_micros(951_782_400_000_001)
                .unwrap()
                .to_string(),
            "2000-02-29T00:00:00.000001Z"
        );
        assert_eq!(
            Timestamp::from_unix_micros(MIN_MICROS).unwrap().to_string(),
            "0001-01-01T00:00:00.000000Z"
        );
        assert_eq!(
            Timestamp::from_unix_micros(MAX_MICROS).unwrap().to_string(),
            "9999-12-31T23:59:59.999999Z"
        );
        assert_eq!(Timestamp::from_unix_micros(MAX_MICROS + 1), None);
        assert_eq!(
            Timestamp::from_unix_micros(-1).unwrap().to_string(),
            "1969-12-31T23:59:59.999999Z"
        );
    }

    #[test]
    fn timestamp_parses_offsets_and_fractions() {
        let t: Timestamp = "2024-05-01T14:30:00.5+02:00".parse().unwrap();
        assert_eq!(t.to_string(), "2024-05-01T12:30:00.500000Z");
        let t: Timestamp = "2024-05-01t12:30:00.1234567891z".parse().unwrap();
        assert_eq!(t.to_string(), "2024-05-01T12:30:00.123456Z");
        let t: Timestamp = "2024-05-01T12:30:00Z".parse().unwrap();
        assert_eq!(t.to_string(), "2024-05-01T12:30:00.000000Z");
    }

    #[test]
    fn timestamp_rejects_bad_text_with_a_reason() {
        for bad in [
            "",
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:60Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00+2:00",
            "0000-01-01T00:00:00Z",
            "0001-01-01T00:00:00+00:01",
            "２０２４-01-01T00:00:00Z",
        ] {
            let err = bad.parse::<Timestamp>().unwrap_err();
            assert!(err.to_string().contains("RFC 3339"), "{bad}: {err}");
        }
    }

    #[test]
    fn artifact_json_form_uses_type_and_round_trips() {
        let a = Artifact::new("s", "k", "file", "n")
            .with_description("d")
            .with_storage(StorageLocation::new("write_to_file", "a/b.txt"));
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(v["type"], "file");
        assert_eq!(
            v["storage"],
            json!({"backend": "write_to_file", "id": "a/b.txt"})
        );
        let back: Artifact = serde_json::from_value(v).unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn dict_form_is_flat() {
        let a = Artifact::new("s", "my_key", "my_type", "my_name")
            .with_storage(StorageLocation::new("write_to_file", "plans/plan.json"));
        let d = a.to_dict();
        let keys: Vec<&str> = d.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "id",
                "key",
                "type",
                "name",
                "description",
                "storage",
                "storage_id",
                "data"
            ]
        );
        assert_eq!(d["storage"], "write_to_file");
        assert_eq!(d["storage_id"], "plans/plan.json");
        assert_eq!(d["id"], a.id.to_string());
    }

    #[test]
    fn missing_required_lists_every_empty_field() {
        let a = Artifact::new("s", "", "  ", "n");
        assert_eq!(a.missing_required(), ["key", "type"]);
    }

    #[test]
    fn ids_are_v7() {
        assert_eq!(Artifact::new("s", "k", "t", "n").id.get_version_num(), 7);
    }

    proptest! {
        #[test]
        fn timestamp_text_round_trips(micros in MIN_MICROS..=MAX_MICROS) {
            let t = Timestamp::from_unix_micros(micros).unwrap();
            let text = t.to_string();
            prop_assert_eq!(text.len(), 27);
            prop_assert_eq!(text.parse::<Timestamp>().unwrap(), t);
        }

        #[test]
        fn timestamp_parse_never_panics(s in "\\PC{0,40}") {
            let _ = s.parse::<Timestamp>();
        }

        #[test]
        fn timestamp_parse_never_panics_near_valid(s in "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?([Zz]|[+-][0-9]{2}:[0-9]{2})?") {
            let _ = s.parse::<Timestamp>();
        }
    }
}
