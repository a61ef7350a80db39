//! The records of a backup file and their codec (docs/reference/backup.md#format).
//!
//! A backup is JSON Lines: one [`Record`] per line, `"type"` naming its kind. The first line is
//! a [`Header`], the last a [`Trailer`] whose checksum covers every byte before it, so a file
//! cut short or changed anywhere is refused before anything is imported.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mnemon_types::artifact::Artifact;
use mnemon_types::{Asset, Bytes, Value};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::BackupError;

/// The value of [`Header::format`]: what tells a backup from any other JSON Lines file.
pub const FORMAT: &str = "mnemon-backup";

/// The version of the format this crate writes and reads ([`Header::version`]).
pub const VERSION: u32 = 1;

/// One line of a backup file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// The first line: the format, its version and where the backup came from.
    Header(Header),
    /// One asset, with its bytes.
    Asset(AssetRecord),
    /// One artifact record, with the content its storage backend held.
    Artifact(ArtifactRecord),
    /// The start of a memory thread: the [`Record::Message`] lines up to the next
    /// non-message record are its messages, in order.
    Thread(ThreadRecord),
    /// One message of the thread opened by the last [`Record::Thread`].
    Message(MessageRecord),
    /// The last line: the counts and the checksum of every line before it.
    Trailer(Trailer),
}

/// The deepest nesting of JSON arrays and objects a backup line may have: an asset at the
/// store's limit ([`mnemon_store::MAX_NESTING`], counting its root object) inside its record,
/// with room to spare. serde_json's own recursion limit (128 levels) is one level short of such
/// a line, so an import checks this bound itself and parses without that limit.
pub const MAX_LINE_NESTING: usize = mnemon_store::MAX_NESTING + 4;

impl Record {
    /// Reads one line of a backup (without its line break).
    ///
    /// The error says what is wrong with the line: nested deeper than [`MAX_LINE_NESTING`]
    /// (no export writes such a line), or serde_json's message.
    pub(crate) fn from_line(line: &[u8]) -> Result<Record, String> {
        let depth = nesting(line);
        if depth > MAX_LINE_NESTING {
            return Err(format!(
                "the line nests {depth} levels of arrays and objects; a backup line nests at \
                 most {MAX_LINE_NESTING}"
            ));
        }
        let mut reader = serde_json::Deserializer::from_slice(line);
        // Bounded by the check above, so the parser's recursion stays shallow.
        reader.disable_recursion_limit();
        let record = Record::deserialize(&mut reader).map_err(|e| e.to_string())?;
        reader.end().map_err(|e| e.to_string())?;
        Ok(record)
    }
}

/// The deepest nesting of arrays and objects in `json`, counting brackets outside strings.
///
/// For the part of `json` a JSON parser reads before it stops, this is the parser's own
/// nesting (strings and escapes are read the same way), so it bounds the parser's recursion on
/// any input, well-formed or not.
fn nesting(json: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0_usize, 0_usize);
    let (mut in_string, mut escaped) = (false, false);
    for &byte in json {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The first line of a backup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Header {
    /// Always [`FORMAT`] (`"mnemon-backup"`).
    pub format: String,
    /// The format version ([`VERSION`]); a reader refuses a version it does not know.
    pub version: u32,
    /// The namespace the records were read from (informational: an import writes into the
    /// namespace its handle is opened for).
    pub namespace: String,
    /// The backend the records were read from (`"sqlite"`, `"postgres"`, …; informational).
    pub source: String,
    /// When the export started, milliseconds since the Unix epoch.
    pub exported_at: i64,
    /// What was exported: everything of the namespace, or a part of it.
    pub selection: Selection,
}

/// What an export covers. All `None` (the default): the whole namespace. Otherwise only the
/// parts named, each narrowed as it says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Selection {
    /// Assets whose id starts with this (`""`: every asset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset_id_prefix: Option<String>,
    /// Artifact records whose scope starts with this (`""`: every record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_scope_prefix: Option<String>,
    /// Memory threads whose scope matches ([`ThreadFilter`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<ThreadFilter>,
}

impl Selection {
    /// Whether this selection is the whole namespace.
    pub fn is_everything(&self) -> bool {
        self.asset_id_prefix.is_none()
            && self.artifact_scope_prefix.is_none()
            && self.memory.is_none()
    }

    /// Whether assets with this id are exported.
    pub fn takes_asset(&self, id: &str) -> bool {
        self.is_everything()
            || self
                .asset_id_prefix
                .as_deref()
                .is_some_and(|prefix| id.starts_with(prefix))
    }

    /// Whether the artifact records of this scope are exported.
    pub fn takes_artifact_scope(&self, scope: &str) -> bool {
        self.is_everything()
            || self
                .artifact_scope_prefix
                .as_deref()
                .is_some_and(|prefix| scope.starts_with(prefix))
    }

    /// Whether the memory thread of this scope is exported.
    pub fn takes_thread(&self, thread: &ThreadRecord) -> bool {
        self.is_everything() || self.memory.as_ref().is_some_and(|f| f.matches(thread))
    }
}

/// Memory threads by scope: each part given must be equal; a part left out matches any value.
/// All parts left out: every thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadFilter {
    /// The user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl ThreadFilter {
    /// Whether `thread` has every part this filter gives.
    pub fn matches(&self, thread: &ThreadRecord) -> bool {
        let part = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|want| have.as_ref() == Some(want))
        };
        part(&self.user_id, &thread.user_id)
            && part(&self.agent_id, &thread.agent_id)
            && part(&self.session_id, &thread.session_id)
    }
}

/// One asset: its JSON with each bytes leaf written as `null`, and the leaves beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssetRecord {
    /// The asset's root object (`asset_id`, `content`, … and its extra fields, in order) with
    /// every bytes leaf replaced by `null`.
    pub asset: serde_json::Map<String, serde_json::Value>,
    /// The bytes leaves, each with its path from the root object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leaves: Vec<Leaf>,
    /// When the asset expires, milliseconds since the Unix epoch; `null`: never.
    #[serde(default)]
    pub expires_at: Option<i64>,
}

/// A byte buffer inside an asset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Leaf {
    /// The path from the asset's root object: keys (strings) and list indices (integers).
    pub path: Vec<PathStep>,
    /// The buffer's media type, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The bytes, standard base64 with padding.
    pub data: String,
}

/// One step of a [`Leaf::path`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PathStep {
    /// A key of a map.
    Key(String),
    /// An index of a list.
    Index(u64),
}

/// One artifact record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactRecord {
    /// The record as the artifact store keeps it (id, key, type, name, description, storage,
    /// inline data, scope, created_at).
    pub artifact: Artifact,
    /// The content its storage backend held, when the record names a backend other than
    /// `inline` (absent otherwise: inline content is the record's `data`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<serde_json::Value>,
    /// When the record expires, milliseconds since the Unix epoch; `null`: never.
    #[serde(default)]
    pub expires_at: Option<i64>,
}

/// The start of a memory thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadRecord {
    /// The user, if the thread has one.
    #[serde(default)]
    pub user_id: Option<String>,
    /// The agent, if the thread has one.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The session, if the thread has one.
    #[serde(default)]
    pub session_id: Option<String>,
}

impl ThreadRecord {
    /// The thread as `user/agent/session` (a missing part empty), for messages.
    pub fn display(&self) -> String {
        format!(
            "{}/{}/{}",
            self.user_id.as_deref().unwrap_or(""),
            self.agent_id.as_deref().unwrap_or(""),
            self.session_id.as_deref().unwrap_or("")
        )
    }
}

/// The keys under which the memory's stored export layout
/// (`mnemon_memory::ExportFormat::AgentScope00Stored`) carries a message's expiry and its
/// embedding's model: an export moves them into [`MessageRecord::expires_at`] and
/// [`MessageRecord::embedding_model`], an import puts them back for the memory's load.
pub(crate) use mnemon_memory::{STORED_EXPIRES_KEY as EXPIRES_KEY, STORED_MODEL_KEY as MODEL_KEY};

/// One message of a memory thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MessageRecord {
    /// The message object of the memory's export document (docs/reference/memory.md#exporting,
    /// the 0.0.x layout): id, name, role, content, timestamp, url and extra fields in order,
    /// the `embedding` as JSON numbers (each an `f64` written in its shortest round-trip form,
    /// so it reads back bit for bit), and `"__marks"` last when the message has marks.
    pub message: serde_json::Map<String, serde_json::Value>,
    /// When the message expires (milliseconds since the Unix epoch), or `null` for never. A
    /// backup written before memory had expiry carries `null` here.
    #[serde(default)]
    pub expires_at: Option<i64>,
    /// The model that made the message's embedding, as the memory recorded it, or `null` when
    /// not known (no embedding, or one stored before models were recorded). Absent in backups
    /// written before models were recorded, which read as `null`; left out when `null`, so a
    /// backup of messages without models is written as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding_model: Option<String>,
}

/// The last line of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Trailer {
    /// How many [`Record::Asset`] lines the file holds.
    pub assets: u64,
    /// How many [`Record::Artifact`] lines.
    pub artifacts: u64,
    /// How many [`Record::Thread`] lines.
    pub threads: u64,
    /// How many [`Record::Message`] lines.
    pub messages: u64,
    /// The SHA-256 of every byte before this line (uncompressed, newlines included), in
    /// lowercase hex.
    pub sha256: String,
}

impl AssetRecord {
    /// The record of `asset`; an asset holding a live object (not JSON or bytes) cannot be
    /// written to a file and is [`BackupError::ObjectLeaf`].
    pub fn encode(asset: &Asset, expires_at: Option<i64>) -> Result<AssetRecord, BackupError> {
        let mut leaves = Vec::new();
        let mut path = Vec::new();
        let root = asset.to_value();
        let skeleton = skeleton(&root, &mut path, &mut leaves, &asset.asset_id)?;
        let serde_json::Value::Object(asset_json) = skeleton else {
            // `to_value` always gives a map.
            return Err(BackupError::Corrupt {
                asset_id: asset.asset_id.clone(),
                reason: "the asset is not an object".to_owned(),
            });
        };
        Ok(AssetRecord {
            asset: asset_json,
            leaves,
            expires_at,
        })
    }

    /// The asset this record holds: the JSON with each leaf put back at its path. A leaf whose
    /// path does not lead to a `null`, or whose data is not base64, is refused.
    pub fn decode(&self) -> Result<Asset, BackupError> {
        let id = self
            .asset
            .get("asset_id")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
            .to_owned();
        let corrupt = |reason: String| BackupError::Corrupt {
            asset_id: id.clone(),
            reason,
        };
        let mut root = Value::from_json(serde_json::Value::Object(self.asset.clone()));
        for leaf in &self.leaves {
            let data = STANDARD
                .decode(leaf.data.as_bytes())
                .map_err(|e| corrupt(format!("a leaf's data is not base64: {e}")))?;
            let bytes = match &leaf.media_type {
                Some(media_type) => Bytes::with_media_type(data, media_type.clone()),
                None => Bytes::new(data),
            };
            let slot = walk(&mut root, &leaf.path)
                .ok_or_else(|| corrupt(format!("no place at leaf path {:?}", leaf.path)))?;
            if !matches!(slot, Value::Null) {
                return Err(corrupt(format!(
                    "leaf path {:?} does not lead to a null",
                    leaf.path
                )));
            }
            *slot = Value::Bytes(bytes);
        }
        Asset::from_value(root).map_err(|e| corrupt(e.to_string()))
    }
}

/// The value at `path` below `root`.
fn walk<'a>(root: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    let mut node = root;
    for step in path {
        node = match (node, step) {
            (Value::Map(map), PathStep::Key(key)) => map.get_mut(key)?,
            (Value::Array(items), PathStep::Index(index)) => {
                items.get_mut(usize::try_from(*index).ok()?)?
            }
            _ => return None,
        };
    }
    Some(node)
}

/// `value` as JSON with every bytes leaf as `null`, collecting the leaves.
///
/// Recursive: an asset is at most `mnemon_store::MAX_NESTING` deep, which every store
/// enforces, so the depth is bounded.
fn skeleton(
    value: &Value,
    path: &mut Vec<PathStep>,
    leaves: &mut Vec<Leaf>,
    asset_id: &str,
) -> Result<serde_json::Value, BackupError> {
    Ok(match value {
        Value::Map(map) => {
            let mut out = serde_json::Map::with_capacity(map.len());
            for (key, child) in map {
                path.push(PathStep::Key(key.clone()));
                out.insert(key.clone(), skeleton(child, path, leaves, asset_id)?);
                path.pop();
            }
            serde_json::Value::Object(out)
        }
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (index, child) in items.iter().enumerate() {
                path.push(PathStep::Index(index as u64));
                out.push(skeleton(child, path, leaves, asset_id)?);
                path.pop();
            }
            serde_json::Value::Array(out)
        }
        Value::Bytes(bytes) => {
            leaves.push(Leaf {
                path: path.clone(),
                media_type: bytes.media_type().map(str::to_owned),
                data: STANDARD.encode(bytes.data()),
            });
            serde_json::Value::Null
        }
        Value::Object(object) => {
            return Err(BackupError::ObjectLeaf {
                asset_id: asset_id.to_owned(),
                type_name: object.type_name().to_owned(),
            });
        }
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Number(n) => serde_json::Value::Number(n.clone()),
        Value::String(s) => serde_json::Value::String(s.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn json_leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| Value::Number(n.into())),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_filter_map("number", |f| serde_json::Number::from_f64(f)
                    .map(Value::Number)),
            ".{0,12}".prop_map(Value::String),
            (
                proptest::collection::vec(any::<u8>(), 0..40),
                proptest::option::of("[a-z]{1,8}/[a-z]{1,8}")
            )
                .prop_map(|(data, media)| Value::Bytes(match media {
                    Some(m) => Bytes::with_media_type(data, m),
                    None => Bytes::new(data),
                })),
        ]
    }

    fn tree() -> impl Strategy<Value = Value> {
        json_leaf().prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec((".{0,6}", inner), 0..6)
                    .prop_map(|pairs| Value::Map(pairs.into_iter().collect())),
            ]
        })
    }

    fn asset() -> impl Strategy<Value = Asset> {
        (
            "[a-z0-9-]{1,12}",
            tree(),
            proptest::option::of(".{0,8}"),
            proptest::collection::vec(("x_[a-z]{1,5}", tree()), 0..3),
        )
            .prop_map(|(id, content, name, extra)| {
                let mut asset = Asset::new(content).with_id(id);
                asset.asset_name = name;
                asset.extra = extra.into_iter().collect();
                asset
            })
    }

    proptest! {
        /// Encode, write as a line, read the line, decode: the same asset, bytes and media
        /// types included, and the same line again when written a second time.
        #[test]
        fn asset_records_round_trip_through_a_line(
            asset in asset(),
            expires_at in proptest::option::of(any::<i64>()),
        ) {
            let record = Record::Asset(AssetRecord::encode(&asset, expires_at).unwrap());
            let line = serde_json::to_string(&record).unwrap();
            prop_assert!(!line.contains('\n'));
            let back = Record::from_line(line.as_bytes()).unwrap();
            prop_assert_eq!(&back, &record);
            let Record::Asset(back) = back else { panic!("not an asset") };
            prop_assert_eq!(back.expires_at, expires_at);
            prop_assert_eq!(back.decode().unwrap(), asset);
            prop_assert_eq!(serde_json::to_string(&Record::Asset(back)).unwrap(), line);
        }

        /// Message objects keep their key order and every f64 bit for bit; the expiry and the
        /// model come back as written, and a record without a model is written as before
        /// models were recorded (no `embedding_model` key).
        #[test]
        fn message_records_keep_embeddings_bit_exact(
            embedding in proptest::collection::vec(
                any::<f64>().prop_filter("finite", |f| f.is_finite()), 0..32),
            id in "[a-z0-9]{1,10}",
            expires_at in proptest::option::of(any::<i64>()),
            embedding_model in proptest::option::of(".{0,16}"),
        ) {
            let mut message = serde_json::Map::new();
            message.insert("id".into(), id.into());
            message.insert(
                "embedding".into(),
                embedding.iter().map(|&f| serde_json::json!(f)).collect(),
            );
            let record = Record::Message(MessageRecord {
                message,
                expires_at,
                embedding_model: embedding_model.clone(),
            });
            let line = serde_json::to_string(&record).unwrap();
            prop_assert_eq!(line.contains("\"embedding_model\":"), embedding_model.is_some());
            let Record::Message(back) = Record::from_line(line.as_bytes()).unwrap() else {
                panic!("not a message")
            };
            let numbers: Vec<u64> = back.message["embedding"].as_array().unwrap().iter()
                .map(|n| n.as_f64().unwrap().to_bits()).collect();
            let want: Vec<u64> = embedding.iter().map(|f| f.to_bits()).collect();
            prop_assert_eq!(numbers, want);
            prop_assert_eq!(back.expires_at, expires_at);
            prop_assert_eq!(back.embedding_model, embedding_model);
        }

        /// Arbitrary text never decodes into a record that then fails to write, and never
        /// panics the reader.
        #[test]
        fn arbitrary_lines_are_refused_or_read(line in ".{0,200}") {
            let ours = Record::from_line(line.as_bytes());
            // Within serde_json's own limit, the same answer as serde_json's.
            let theirs = serde_json::from_str::<Record>(&line).ok();
            prop_assert_eq!(ours.as_ref().ok(), theirs.as_ref());
            if let Ok(record) = ours {
                prop_assert!(serde_json::to_string(&record).is_ok());
                if let Record::Asset(asset) = record {
                    let _ = asset.decode();
                }
            }
        }
    }

    proptest! {
        /// The bracket count is the nesting serde_json sees, on every asset record (keys and
        /// strings full of brackets, quotes and escapes included).
        #[test]
        fn nesting_counts_what_the_parser_nests(asset in asset()) {
            fn depth(value: &serde_json::Value) -> usize {
                match value {
                    serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
                    serde_json::Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
                    _ => 0,
                }
            }
            let record = Record::Asset(AssetRecord::encode(&asset, None).unwrap());
            let line = serde_json::to_string(&record).unwrap();
            let json: serde_json::Value = serde_json::from_str(&line).unwrap();
            prop_assert_eq!(nesting(line.as_bytes()), depth(&json));
        }
    }

    #[test]
    fn brackets_in_strings_and_escapes_do_not_count() {
        assert_eq!(nesting(br#"{"a":"[[{\"[","b":[1,{"c":"]]"}]}"#), 3);
        assert_eq!(nesting(b"]]]["), 1);
        assert_eq!(nesting(b"\"unterminated [[["), 0);
    }

    #[test]
    fn a_line_nested_too_deep_is_refused_without_parsing() {
        // Far deeper than any stack would take if the parser recursed into it.
        let hostile = "[".repeat(1 << 20);
        let error = Record::from_line(hostile.as_bytes()).unwrap_err();
        assert!(
            error.contains(&format!("at most {MAX_LINE_NESTING}")),
            "{error}"
        );
        // One level past serde_json's default limit still reads (as JSON; not a record).
        let deep = format!("{}{}", "[".repeat(130), "]".repeat(130));
        let error = Record::from_line(deep.as_bytes()).unwrap_err();
        assert!(!error.contains("recursion"), "{error}");
    }

    #[test]
    fn a_leaf_that_does_not_lead_to_a_null_is_refused() {
        let asset = Asset::new(Value::Bytes(Bytes::new(vec![1, 2, 3]))).with_id("a");
        let mut record = AssetRecord::encode(&asset, None).unwrap();
        record
            .asset
            .insert("content".into(), serde_json::json!("text"));
        let error = record.decode().unwrap_err().to_string();
        assert!(error.contains("does not lead to a null"), "{error}");
        record.leaves[0].path = vec![PathStep::Key("nowhere".into())];
        let error = record.decode().unwrap_err().to_string();
        assert!(error.contains("no place"), "{error}");
    }

    #[test]
    fn the_header_is_tagged_and_versioned() {
        let header = Record::Header(Header {
            format: FORMAT.into(),
            version: VERSION,
            namespace: "default".into(),
            source: "sqlite".into(),
            exported_at: 0,
            selection: Selection::default(),
        });
        let line = serde_json::to_string(&header).unwrap();
        assert!(line.starts_with(r#"{"type":"header","format":"mnemon-backup","version":1"#));
    }
}
