//! The lossless storage form of an asset: a JSON *skeleton* plus out-of-band *leaves*.
//!
//! The skeleton is the asset's root object as JSON with every bytes or object leaf written as
//! `null`; each such leaf is stored separately with its path from the root, its kind, its media
//! type or type name, and its raw bytes (a BLOB, never base64). Nothing inside the JSON marks a
//! leaf, so no key or string a user stores can be mistaken for one: all JSON comes back exactly
//! as it went in.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use mnemon_types::{Asset, Bytes, PathSegment, Value};

use crate::codec::CodecRegistry;
use crate::error::StoreError;

/// What a stored leaf holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeafKind {
    /// A byte buffer; the type column holds its media type, if any.
    Bytes,
    /// An object encoded by the codec for the type name in the type column.
    Object,
}

impl LeafKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LeafKind::Bytes => "bytes",
            LeafKind::Object => "object",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<LeafKind> {
        match s {
            "bytes" => Some(LeafKind::Bytes),
            "object" => Some(LeafKind::Object),
            _ => None,
        }
    }
}

/// A bytes or object leaf, ready to be written.
#[derive(Debug)]
pub(crate) struct Leaf {
    /// The path from the asset's root, as a JSON array of keys and indices.
    pub(crate) path: String,
    pub(crate) kind: LeafKind,
    /// Media type of bytes, or type name of an object.
    pub(crate) type_name: Option<String>,
    pub(crate) data: LeafData,
}

/// A leaf's payload: a shared buffer, or the bytes a codec produced.
#[derive(Debug)]
pub(crate) enum LeafData {
    Shared(Bytes),
    Encoded(Vec<u8>),
}

impl LeafData {
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            LeafData::Shared(b) => b.data(),
            LeafData::Encoded(v) => v,
        }
    }
}

/// An asset in its storage form.
#[derive(Debug)]
pub(crate) struct Encoded {
    pub(crate) skeleton: String,
    pub(crate) meta: String,
    pub(crate) leaves: Vec<Leaf>,
}

/// Serializes a value tree with every bytes or object leaf as `null`.
struct Skeleton<'a>(&'a Value);

impl Serialize for Skeleton<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Skeleton(item))?;
                }
                seq.end()
            }
            Value::Map(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (k, v) in map {
                    out.serialize_entry(k, &Skeleton(v))?;
                }
                out.end()
            }
            Value::Bytes(_) | Value::Object(_) => serializer.serialize_unit(),
            json => json.serialize(serializer),
        }
    }
}

/// Encodes `asset`; fails, naming the field path, on an object whose type has no codec.
pub(crate) fn encode(asset: &Asset, codecs: &CodecRegistry) -> Result<Encoded, StoreError> {
    let root = asset.to_value();
    let mut leaves = Vec::new();
    let mut path = Vec::new();
    collect_leaves(&root, &mut path, &mut leaves, asset, codecs)?;
    let skeleton = serde_json::to_string(&Skeleton(&root)).map_err(|e| StoreError::Corrupt {
        asset_id: asset.asset_id.clone(),
        detail: format!("cannot serialize: {e}"),
    })?;
    let meta = serde_json::Value::Object(mnemon_types::meta(asset)).to_string();
    Ok(Encoded {
        skeleton,
        meta,
        leaves,
    })
}

fn collect_leaves(
    node: &Value,
    path: &mut Vec<PathSegment>,
    out: &mut Vec<Leaf>,
    asset: &Asset,
    codecs: &CodecRegistry,
) -> Result<(), StoreError> {
    match node {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(PathSegment::Index(i as u64));
                collect_leaves(item, path, out, asset, codecs)?;
                path.pop();
            }
        }
        Value::Map(map) => {
            for (k, v) in map {
                path.push(PathSegment::Key(k.clone()));
                collect_leaves(v, path, out, asset, codecs)?;
                path.pop();
            }
        }
        Value::Bytes(bytes) => out.push(Leaf {
            path: path_json(path),
            kind: LeafKind::Bytes,
            type_name: bytes.media_type().map(str::to_owned),
            data: LeafData::Shared(bytes.clone()),
        }),
        Value::Object(object) => {
            let type_name = object.type_name();
            let codec = codecs.get(type_name).ok_or_else(|| StoreError::NoCodec {
                asset_id: asset.asset_id.clone(),
                field_path: path.clone(),
                type_name: type_name.to_owned(),
            })?;
            let data = codec.encode(object).map_err(|e| StoreError::Codec {
                asset_id: asset.asset_id.clone(),
                field_path: path.clone(),
                type_name: type_name.to_owned(),
                detail: e.to_string(),
            })?;
            out.push(Leaf {
                path: path_json(path),
                kind: LeafKind::Object,
                type_name: Some(type_name.to_owned()),
                data: LeafData::Encoded(data),
            });
        }
        _ => {}
    }
    Ok(())
}

fn path_json(path: &[PathSegment]) -> String {
    // A Vec of strings and integers always serializes.
    serde_json::to_string(path).unwrap_or_else(|_| "[]".to_owned())
}

/// One leaf row read back from the database.
pub(crate) struct StoredLeaf {
    pub(crate) path: String,
    pub(crate) kind: String,
    pub(crate) type_name: Option<String>,
    pub(crate) data: Vec<u8>,
}

/// Rebuilds an asset from its skeleton and leaves.
/// Refuses an asset whose row records `expected` leaves when `found` were read: a leaf lost
/// outside the store (or by a bug) would otherwise decode as `null` without a word.
pub(crate) fn check_leaf_count(
    asset_id: &str,
    expected: i64,
    found: usize,
) -> Result<(), StoreError> {
    if i64::try_from(found).ok() == Some(expected) {
        return Ok(());
    }
    Err(StoreError::Corrupt {
        asset_id: asset_id.to_owned(),
        detail: format!("the asset records {expected} bytes/object leaves but {found} are stored"),
    })
}

pub(crate) fn decode(
    asset_id: &str,
    skeleton: &str,
    leaves: Vec<StoredLeaf>,
    codecs: &CodecRegistry,
) -> Result<Asset, StoreError> {
    let corrupt = |detail: String| StoreError::Corrupt {
        asset_id: asset_id.to_owned(),
        detail,
    };
    let json: serde_json::Value = serde_json::from_str(skeleton)
        .map_err(|e| corrupt(format!("the stored JSON does not parse: {e}")))?;
    let mut root = Value::from_json(json);
    for leaf in leaves {
        let path: Vec<PathSegment> = serde_json::from_str(&leaf.path)
            .map_err(|e| corrupt(format!("bad leaf path {:?}: {e}", leaf.path)))?;
        let value = match LeafKind::parse(&leaf.kind) {
            Some(LeafKind::Bytes) => Value::Bytes(match leaf.type_name {
                Some(media) => Bytes::with_media_type(leaf.data, media),
                None => Bytes::new(leaf.data),
            }),
            Some(LeafKind::Object) => {
                let type_name = leaf.type_name.unwrap_or_default();
                let codec = codecs.get(&type_name).ok_or_else(|| StoreError::NoCodec {
                    asset_id: asset_id.to_owned(),
                    field_path: path.clone(),
                    type_name: type_name.clone(),
                })?;
                let object = codec.decode(&leaf.data).map_err(|e| StoreError::Codec {
                    asset_id: asset_id.to_owned(),
                    field_path: path.clone(),
                    type_name: type_name.clone(),
                    detail: e.to_string(),
                })?;
                if object.type_name() != type_name {
                    return Err(StoreError::Codec {
                        asset_id: asset_id.to_owned(),
                        field_path: path,
                        type_name: type_name.clone(),
                        detail: format!(
                            "the codec decoded an object of type {:?}",
                            object.type_name()
                        ),
                    });
                }
                Value::Object(object)
            }
            None => return Err(corrupt(format!("unknown leaf kind {:?}", leaf.kind))),
        };
        let slot = slot_mut(&mut root, &path)
            .ok_or_else(|| corrupt(format!("leaf path {:?} is not in the asset", leaf.path)))?;
        *slot = value;
    }
    Asset::from_value(root).map_err(|e| corrupt(e.to_string()))
}

fn slot_mut<'a>(mut node: &'a mut Value, path: &[PathSegment]) -> Option<&'a mut Value> {
    for segment in path {
        node = match (node, segment) {
            (Value::Map(map), PathSegment::Key(k)) => map.get_mut(k)?,
            (Value::Array(items), PathSegment::Index(i)) => {
                items.get_mut(usize::try_from(*i).ok()?)?
            }
            _ => return None,
        };
    }
    Some(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon_types::Map;

    #[test]
    fn leaves_leave_no_trace_in_the_json() {
        let mut content = Map::new();
        content.insert(
            "7".into(),
            Bytes::with_media_type(vec![1u8], "image/png").into(),
        );
        content.insert(
            "list".into(),
            Value::Array(vec![Value::Null, Bytes::new(vec![]).into()]),
        );
        let asset = Asset::new(Value::Map(content)).with_id("x");
        let encoded = encode(&asset, &CodecRegistry::new()).unwrap();
        assert_eq!(
            encoded.skeleton,
            r#"{"asset_id":"x","content":{"7":null,"list":[null,null]}}"#
        );
        let paths: Vec<_> = encoded.leaves.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(paths, [r#"["content","7"]"#, r#"["content","list",1]"#]);
        let rows = encoded
            .leaves
            .iter()
            .map(|l| StoredLeaf {
                path: l.path.clone(),
                kind: l.kind.as_str().to_owned(),
                type_name: l.type_name.clone(),
                data: l.data.as_slice().to_vec(),
            })
            .collect();
        let back = decode("x", &encoded.skeleton, rows, &CodecRegistry::new()).unwrap();
        assert_eq!(back, asset);
    }

    #[test]
    fn a_leaf_outside_the_skeleton_is_reported_as_corrupt() {
        let leaf = StoredLeaf {
            path: r#"["content","nope"]"#.into(),
            kind: "bytes".into(),
            type_name: None,
            data: vec![],
        };
        let err = decode(
            "x",
            r#"{"asset_id":"x","content":{}}"#,
            vec![leaf],
            &CodecRegistry::new(),
        )
        .unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    }
}
