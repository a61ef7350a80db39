//! Asset operations: put, get, list, delete, meta, resolve (docs/reference/rest.md#assets).
//!
//! Binary content travels as base64 in `content_base64` (with the media type in
//! `content_type`); bytes nested inside JSON content travel as `data:` URLs, the JSON view of
//! the value tree (docs/reference/assets.md#value-tree).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mnemon_types::{Asset, AssetRef, Bytes, MetaOptions, Value, meta_with};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::OpsError;
use crate::expiry::{ExpiryInput, parse_filter};
use crate::page;
use crate::service::Service;

/// An asset as it travels: the fields of docs/reference/assets.md#asset, with binary content
/// as base64.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssetBody {
    /// The id; a fresh UUID when a put gives none (and the path's id when put by id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset_id: Option<String>,
    /// Task-related classification, e.g. `image` or `table`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset_type: Option<String>,
    /// A human-readable name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset_name: Option<String>,
    /// A description for people and models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What the content holds, e.g. `image/png`; the media type of `content_base64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// JSON content (bytes inside it as `data:` URLs). Absent when the content is binary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<serde_json::Value>,
    /// Binary content, standard base64. A put gives this or `content`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_base64: Option<String>,
    /// Any other fields, kept in order.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl AssetBody {
    /// The asset this body describes, `id` (when given) overriding the body's id.
    pub fn into_asset(self, id: Option<&str>) -> Result<Asset, OpsError> {
        let content = match (self.content, self.content_base64) {
            (Some(_), Some(_)) => {
                return Err(OpsError::invalid(
                    "give the content either as JSON (content) or as base64 (content_base64), \
                     not both",
                ));
            }
            (Some(json), None) => Value::from_json(json),
            (None, Some(text)) => {
                let data = STANDARD.decode(text.trim().as_bytes()).map_err(|e| {
                    OpsError::invalid(format!(
                        "content_base64 is not standard base64 ({e}); encode the bytes with \
                         padding, without line breaks"
                    ))
                })?;
                Value::Bytes(match &self.content_type {
                    Some(media) => Bytes::with_media_type(data, media.clone()),
                    None => Bytes::new(data),
                })
            }
            (None, None) => Value::Null,
        };
        let asset_id = match (id, self.asset_id) {
            (Some(path), Some(body)) if path != body => {
                return Err(OpsError::invalid(format!(
                    "the body's asset_id {body:?} differs from the id in the path {path:?}; \
                     leave it out or make them equal"
                )));
            }
            (Some(path), _) => Some(path.to_owned()),
            (None, body) => body,
        };
        let mut asset = Asset::new(content);
        match asset_id {
            Some(id) if id.is_empty() => {
                return Err(OpsError::invalid(
                    "asset_id must not be empty; leave it out to get a fresh id",
                ));
            }
            Some(id) => asset.asset_id = id,
            None => {}
        }
        asset.asset_type = self.asset_type;
        asset.asset_name = self.asset_name;
        asset.description = self.description;
        asset.content_type = self.content_type;
        for (key, value) in self.extra {
            asset.extra.insert(key, Value::from_json(value));
        }
        Ok(asset)
    }

    /// The body of a stored asset: binary top-level content as base64.
    pub fn from_asset(asset: &Asset) -> AssetBody {
        let (content, content_base64) = match &asset.content {
            Value::Bytes(bytes) => (None, Some(STANDARD.encode(bytes.data()))),
            other => (Some(json_view(other)), None),
        };
        let content_type = asset.content_type.clone().or_else(|| match &asset.content {
            Value::Bytes(bytes) => bytes.media_type().map(str::to_owned),
            _ => None,
        });
        AssetBody {
            asset_id: Some(asset.asset_id.clone()),
            asset_type: asset.asset_type.clone(),
            asset_name: asset.asset_name.clone(),
            description: asset.description.clone(),
            content_type,
            content,
            content_base64,
            extra: asset
                .extra
                .iter()
                .map(|(k, v)| (k.clone(), json_view(v)))
                .collect(),
        }
    }
}

/// The JSON view of a value: bytes as `data:` URLs, objects as their JSON.
pub(crate) fn json_view(value: &Value) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

/// Input of [`Service::asset_put`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssetPutInput {
    /// The asset to store, replacing any with the same id.
    pub asset: AssetBody,
}

/// Output of [`Service::asset_put`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AssetPutOutput {
    /// The stored asset's id (durable once this is returned).
    pub asset_id: String,
}

/// Input of [`Service::asset_put_bytes`]: raw binary content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetPutBytesInput {
    /// The asset's id.
    pub asset_id: String,
    /// The bytes' media type, kept as the asset's `content_type`.
    pub content_type: Option<String>,
    /// The content.
    pub data: Vec<u8>,
}

/// Input of the operations that take one asset id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AssetIdInput {
    /// The asset's id.
    pub asset_id: String,
}

/// Output of [`Service::asset_get`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssetGetOutput {
    /// The asset.
    pub asset: AssetBody,
    /// When it expires, in milliseconds since the Unix epoch; absent when it never does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
}

/// Input of [`Service::asset_query`]: a filtered listing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssetQueryInput {
    /// A filter (docs/reference/filters.md) over each asset's meta plus `created_at`,
    /// `updated_at` and `expires_at` (docs/reference/assets.md#filters), e.g.
    /// `{"eq": {"path": "asset_type", "value": "image"}}`; absent lists every live asset.
    #[serde(default)]
    pub filter: Option<serde_json::Value>,
    /// Only assets whose `asset_type` equals this (and the filter).
    #[serde(default)]
    pub asset_type: Option<String>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// At most this many assets (default 100, at most 1,000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// One asset of [`AssetQueryOutput`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AssetListed {
    /// The asset's id.
    pub asset_id: String,
    /// When it expires, in milliseconds since the Unix epoch; absent when it never does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
}

/// Output of [`Service::asset_query`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AssetQueryOutput {
    /// The matching assets, ids in ascending byte order.
    pub assets: Vec<AssetListed>,
    /// The cursor of the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `filter` and `asset_type ==` both, as one filter.
pub(crate) fn with_type(
    filter: Option<serde_json::Value>,
    field: &str,
    value: Option<String>,
) -> Option<serde_json::Value> {
    let typed = value.map(|t| serde_json::json!({"eq": {"path": field, "value": t}}));
    match (filter, typed) {
        (Some(f), Some(t)) => Some(serde_json::json!({"and": [f, t]})),
        (f, t) => f.or(t),
    }
}

/// An asset's content as stored: raw bytes with their media type, or JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum AssetContent {
    /// Binary content.
    Bytes {
        /// The bytes.
        data: Vec<u8>,
        /// Their media type: the asset's `content_type`, else the bytes' own.
        content_type: Option<String>,
    },
    /// JSON content (nested bytes as `data:` URLs).
    Json(serde_json::Value),
}

/// Input of [`Service::asset_list`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AssetListInput {
    /// Only assets whose `asset_type` equals this.
    #[serde(default)]
    pub asset_type: Option<String>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// At most this many ids (default 100, at most 1,000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Output of [`Service::asset_list`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AssetListOutput {
    /// Ids in ascending byte order.
    pub asset_ids: Vec<String>,
    /// The cursor of the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Output of the delete operations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeleteOutput {
    /// Always true: deleting something that is not there is a not-found error.
    pub deleted: bool,
}

/// Input of [`Service::asset_meta`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AssetMetaInput {
    /// The asset's id.
    pub asset_id: String,
    /// Abbreviate strings longer than this many characters.
    #[serde(default)]
    pub max_string_len: Option<usize>,
}

/// Output of [`Service::asset_meta`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssetMetaOutput {
    /// The asset's shape with bytes and objects replaced by type strings: what a model sees.
    pub meta: serde_json::Map<String, serde_json::Value>,
}

/// Input of [`Service::asset_resolve`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AssetResolveInput {
    /// An `asset://` URL, e.g. `asset://a1/content/labels/0`.
    pub reference: String,
}

/// Output of [`Service::asset_resolve`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AssetResolveOutput {
    /// The referenced value (bytes as a `data:` URL).
    pub value: serde_json::Value,
}

impl Service {
    /// Stores an asset, replacing any with the same id.
    pub fn asset_put(&self, input: AssetPutInput) -> Result<AssetPutOutput, OpsError> {
        self.asset_put_expiring(input, ExpiryInput::default())
    }

    /// [`asset_put`](Self::asset_put), the asset expiring as `expiry` says (replacing an asset
    /// replaces its expiry).
    pub fn asset_put_expiring(
        &self,
        input: AssetPutInput,
        expiry: ExpiryInput,
    ) -> Result<AssetPutOutput, OpsError> {
        let expiry = expiry.to_expiry()?;
        let asset = input.asset.into_asset(None)?;
        self.stores().assets().put_expiring(&asset, expiry)?;
        Ok(AssetPutOutput {
            asset_id: asset.asset_id,
        })
    }

    /// Stores an asset under `asset_id` (the path's id wins; a different body id is refused).
    pub fn asset_put_at(
        &self,
        asset_id: &str,
        body: AssetBody,
    ) -> Result<AssetPutOutput, OpsError> {
        self.asset_put_at_expiring(asset_id, body, ExpiryInput::default())
    }

    /// [`asset_put_at`](Self::asset_put_at), the asset expiring as `expiry` says.
    pub fn asset_put_at_expiring(
        &self,
        asset_id: &str,
        body: AssetBody,
        expiry: ExpiryInput,
    ) -> Result<AssetPutOutput, OpsError> {
        let expiry = expiry.to_expiry()?;
        let asset = body.into_asset(Some(asset_id))?;
        self.stores().assets().put_expiring(&asset, expiry)?;
        Ok(AssetPutOutput {
            asset_id: asset.asset_id,
        })
    }

    /// Stores raw bytes as an asset's whole content.
    pub fn asset_put_bytes(&self, input: AssetPutBytesInput) -> Result<AssetPutOutput, OpsError> {
        self.asset_put_bytes_expiring(input, ExpiryInput::default())
    }

    /// [`asset_put_bytes`](Self::asset_put_bytes), the asset expiring as `expiry` says.
    pub fn asset_put_bytes_expiring(
        &self,
        input: AssetPutBytesInput,
        expiry: ExpiryInput,
    ) -> Result<AssetPutOutput, OpsError> {
        let expiry = expiry.to_expiry()?;
        if input.asset_id.is_empty() {
            return Err(OpsError::invalid("asset_id must not be empty"));
        }
        let bytes = match &input.content_type {
            Some(media) => Bytes::with_media_type(input.data, media.clone()),
            None => Bytes::new(input.data),
        };
        let mut asset = Asset::new(Value::Bytes(bytes)).with_id(input.asset_id);
        asset.content_type = input.content_type;
        self.stores().assets().put_expiring(&asset, expiry)?;
        Ok(AssetPutOutput {
            asset_id: asset.asset_id,
        })
    }

    fn stored_asset(&self, asset_id: &str) -> Result<Asset, OpsError> {
        self.stores()
            .assets()
            .get(asset_id)?
            .ok_or_else(|| OpsError::AssetNotFound {
                asset_id: asset_id.to_owned(),
            })
    }

    /// One asset.
    pub fn asset_get(&self, input: AssetIdInput) -> Result<AssetGetOutput, OpsError> {
        let asset = self.stored_asset(&input.asset_id)?;
        // A second point read: an asset that expired or went in between is gone now, never
        // reported as one that never expires.
        let expires_at_ms = self
            .stores()
            .assets()
            .expires_at(&input.asset_id)?
            .ok_or_else(|| OpsError::AssetNotFound {
                asset_id: input.asset_id.clone(),
            })?;
        Ok(AssetGetOutput {
            asset: AssetBody::from_asset(&asset),
            expires_at_ms,
        })
    }

    /// One page of the live assets a filter selects (all without one), ids ascending, each
    /// with its expiry. The filter applies before the page cut (docs/reference/filters.md).
    pub fn asset_query(&self, input: AssetQueryInput) -> Result<AssetQueryOutput, OpsError> {
        let limit = page::limit(input.limit)?;
        let filter =
            parse_filter(with_type(input.filter, "asset_type", input.asset_type).as_ref())?;
        let ids = self.stores().assets().list_where(filter.as_ref(), None)?;
        let (ids, next_cursor) =
            page::page(ids, input.cursor.as_deref(), limit, true, Clone::clone)?;
        let mut assets = Vec::with_capacity(ids.len());
        for asset_id in ids {
            // Expired or deleted since the listing: left out, never listed as never expiring.
            let Some(expires_at_ms) = self.stores().assets().expires_at(&asset_id)? else {
                continue;
            };
            assets.push(AssetListed {
                asset_id,
                expires_at_ms,
            });
        }
        Ok(AssetQueryOutput {
            assets,
            next_cursor,
        })
    }

    /// One asset's content as stored: bytes raw, anything else as JSON.
    pub fn asset_content(&self, input: AssetIdInput) -> Result<AssetContent, OpsError> {
        let asset = self.stored_asset(&input.asset_id)?;
        Ok(match &asset.content {
            Value::Bytes(bytes) => AssetContent::Bytes {
                data: bytes.data().to_vec(),
                content_type: asset
                    .content_type
                    .clone()
                    .or_else(|| bytes.media_type().map(str::to_owned)),
            },
            other => AssetContent::Json(json_view(other)),
        })
    }

    /// One page of asset ids, in ascending byte order.
    pub fn asset_list(&self, input: AssetListInput) -> Result<AssetListOutput, OpsError> {
        let limit = page::limit(input.limit)?;
        let ids = self
            .stores()
            .assets()
            .list_ids(input.asset_type.as_deref())?;
        let (asset_ids, next_cursor) =
            page::page(ids, input.cursor.as_deref(), limit, true, Clone::clone)?;
        Ok(AssetListOutput {
            asset_ids,
            next_cursor,
        })
    }

    /// Removes an asset; an unknown id is [`OpsError::AssetNotFound`].
    pub fn asset_delete(&self, input: AssetIdInput) -> Result<DeleteOutput, OpsError> {
        if self.stores().assets().delete(&input.asset_id)? {
            Ok(DeleteOutput { deleted: true })
        } else {
            Err(OpsError::AssetNotFound {
                asset_id: input.asset_id,
            })
        }
    }

    /// An asset's meta: what a model is shown instead of the payload.
    pub fn asset_meta(&self, input: AssetMetaInput) -> Result<AssetMetaOutput, OpsError> {
        let asset = self.stored_asset(&input.asset_id)?;
        let meta = meta_with(
            &asset,
            &MetaOptions {
                max_string_len: input.max_string_len,
            },
        );
        Ok(AssetMetaOutput { meta })
    }

    /// The value an `asset://` reference points at.
    pub fn asset_resolve(&self, input: AssetResolveInput) -> Result<AssetResolveOutput, OpsError> {
        let reference = AssetRef::parse_url(&input.reference).map_err(|e| {
            OpsError::invalid(format!(
                "{:?} is not an asset reference: {e}; write asset://<id>/<field>/…",
                input.reference
            ))
        })?;
        let value = self.stores().assets().resolve(&reference)?;
        Ok(AssetResolveOutput {
            value: json_view(&value),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            "[a-z ]{0,8}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                proptest::collection::vec(("[a-z]{1,5}", inner), 0..4)
                    .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    fn asset() -> impl Strategy<Value = Asset> {
        (
            "[a-z0-9-]{1,12}",
            proptest::option::of("[a-z]{1,6}"),
            proptest::option::of("[a-z/]{1,10}"),
            prop_oneof![
                json().prop_map(Value::from_json),
                proptest::collection::vec(any::<u8>(), 0..32)
                    .prop_map(|d| Value::Bytes(Bytes::new(d))),
            ],
            proptest::collection::vec(("x_[a-z]{1,4}", json()), 0..3),
        )
            .prop_map(|(id, asset_type, content_type, content, extra)| {
                let mut asset = Asset::new(content).with_id(id);
                asset.asset_type = asset_type;
                asset.content_type = content_type;
                for (k, v) in extra {
                    asset.extra.insert(k, Value::from_json(v));
                }
                asset
            })
    }

    proptest! {
        /// The body is a codec: an asset written as a body, sent as JSON and read back is the
        /// asset (bytes through base64, the media type through content_type).
        #[test]
        fn bodies_round_trip_through_json(asset in asset()) {
            let body = AssetBody::from_asset(&asset);
            let text = serde_json::to_string(&body).unwrap();
            let back: AssetBody = serde_json::from_str(&text).unwrap();
            let mut read = back.into_asset(None).unwrap();
            // Bytes come back carrying the asset's content type as their media type.
            if let (Value::Bytes(original), Value::Bytes(read_bytes)) = (&asset.content, &mut read.content) {
                prop_assert_eq!(original.data(), read_bytes.data());
                *read_bytes = original.clone();
            }
            prop_assert_eq!(read, asset);
        }
    }

    #[test]
    fn content_and_base64_together_or_a_different_id_are_refused() {
        let body: AssetBody =
            serde_json::from_value(serde_json::json!({"content": 1, "content_base64": "AA=="}))
                .unwrap();
        assert_eq!(body.into_asset(None).unwrap_err().code(), "invalid_input");
        let body: AssetBody =
            serde_json::from_value(serde_json::json!({"asset_id": "a", "content": 1})).unwrap();
        assert!(body.clone().into_asset(Some("a")).is_ok());
        assert_eq!(
            body.into_asset(Some("b")).unwrap_err().code(),
            "invalid_input"
        );
        let body: AssetBody =
            serde_json::from_value(serde_json::json!({"content_base64": "%%"})).unwrap();
        assert!(
            body.into_asset(None)
                .unwrap_err()
                .to_string()
                .contains("base64")
        );
    }
}
