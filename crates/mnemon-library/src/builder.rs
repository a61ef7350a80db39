//! Validating bits (spec §3.7) and appending them to a [`Store`], decoding embeddings straight
//! into the matrix, in parallel batches.

use std::borrow::Cow;

use rayon::prelude::*;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;

use crate::codec::{decode_into_row, decode_vector, encoded_len};
use crate::error::{LibraryError, Result};
use crate::id::BitId;
use crate::omit::Omit;
use crate::storage::Store;

/// Rows decoded together by the rayon pool.
const BATCH_ROWS: usize = 4096;

/// A bit's `embedding` value as read, before decoding.
pub(crate) enum EmbeddingField<'s> {
    Str(Cow<'s, str>),
    Null,
    /// Not a string; the JSON type name.
    Other(&'static str),
}

/// One field of a bit, in stored order.
pub(crate) enum FieldValue<'s> {
    Json(Cow<'s, Value>),
    Embedding(EmbeddingField<'s>),
}

/// A bit as read from the source: an object's fields, or something else.
pub(crate) enum RawBit<'s> {
    Object(Vec<(Cow<'s, str>, FieldValue<'s>)>),
    NotObject,
}

impl<'s> RawBit<'s> {
    /// Borrows a JSON value as a raw bit.
    pub(crate) fn from_value(value: &'s Value) -> Self {
        let Value::Object(map) = value else {
            return RawBit::NotObject;
        };
        RawBit::Object(
            map.iter()
                .map(|(k, v)| {
                    let field = if k == "embedding" {
                        FieldValue::Embedding(match v {
                            Value::String(s) => EmbeddingField::Str(Cow::Borrowed(s)),
                            Value::Null => EmbeddingField::Null,
                            other => EmbeddingField::Other(json_type(other)),
                        })
                    } else {
                        FieldValue::Json(Cow::Borrowed(v))
                    };
                    (Cow::Borrowed(k.as_str()), field)
                })
                .collect(),
        )
    }
}

/// The JSON type name of a value, for messages.
pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What happened to one bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    Added,
    Duplicate(BitId),
}

/// How the embedding of a bit being pushed was resolved.
enum Resolved<'s> {
    /// Canonical length: decoded later, in a parallel batch.
    Deferred(&'s str),
    Decoded(Vec<f32>),
    /// The stored omit lists `embedding`.
    Absent,
}

/// Validates and appends bits.
pub(crate) struct Builder<'s> {
    pub(crate) store: Store,
    omit: Option<Omit>,
    force_tag: Option<String>,
    /// Whether canonical-length embeddings are decoded later in parallel batches (loading) or
    /// at once (insert and extend, which must stay atomic).
    defer: bool,
    pending: Vec<(usize, &'s str)>,
    /// Address just past the last string decoded by a flush, for releasing mapped input.
    pub(crate) flushed_to: usize,
}

impl<'s> Builder<'s> {
    pub(crate) fn new(store: Store, omit: Option<Omit>, force_tag: Option<String>) -> Self {
        Builder {
            store,
            omit,
            force_tag,
            defer: true,
            pending: Vec::new(),
            flushed_to: 0,
        }
    }

    /// A builder that decodes every embedding at once, so a failed push changes nothing.
    pub(crate) fn eager(store: Store, omit: Option<Omit>) -> Self {
        Builder {
            defer: false,
            ..Builder::new(store, omit, None)
        }
    }

    pub(crate) fn wants_flush(&self) -> bool {
        self.pending.len() >= BATCH_ROWS
    }

    fn omitted(&self, field: &str) -> bool {
        self.omit.as_ref().is_some_and(|o| o.contains_field(field))
    }

    /// Validates bit `index` and appends it unless its id is already present. On an error, the
    /// pending batch is decoded first, so the error reported is the first in file order.
    pub(crate) fn push(&mut self, index: usize, raw: RawBit<'s>) -> Result<Pushed> {
        match self.try_push(index, raw) {
            Ok(p) => Ok(p),
            Err(e) => {
                self.flush()?;
                Err(e)
            }
        }
    }

    fn try_push(&mut self, index: usize, raw: RawBit<'s>) -> Result<Pushed> {
        let RawBit::Object(fields) = raw else {
            return Err(LibraryError::BitNotObject(index));
        };
        let find = |key: &str| fields.iter().find(|(k, _)| k == key).map(|(_, v)| v);
        let json = |key: &str| match find(key) {
            Some(FieldValue::Json(v)) => Some(v.as_ref()),
            _ => None,
        };
        let text_value = json("text");
        let info_value = json("info");
        let url = info_value
            .and_then(|i| i.get("url"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let text = text_value.and_then(Value::as_str).unwrap_or("");
        let id = BitId::of(url, text);
        let sid = || id.to_string();

        if let Some(omit) = &self.omit {
            for field in omit.fields() {
                if find(field).is_some() {
                    return Err(LibraryError::FieldNotOmitted(field.to_owned()));
                }
            }
        }
        match text_value {
            None => return Err(LibraryError::MissingText(sid())),
            Some(Value::String(_)) => {}
            Some(_) => return Err(LibraryError::TextNotString(index)),
        }
        let resolved = if self.omitted("embedding") {
            Resolved::Absent
        } else {
            self.resolve_embedding(find("embedding"), &id)?
        };
        // Checks after the embedding: on failure, a deferred embedding's own error comes first.
        let rest = self.check_rest(&fields, &id);
        let mut resolved = resolved;
        if let Err(e) = rest {
            if let Resolved::Deferred(s) = resolved {
                self.decode_now(s, &id)?;
            }
            return Err(e);
        }
        let token_count = json("token_count").and_then(int_of).unwrap_or(0);
        if self.store.index.contains_key(&id) {
            if let Resolved::Deferred(s) = resolved {
                self.decode_now(s, &id)?;
            }
            return Ok(Pushed::Duplicate(id));
        }
        if let Resolved::Decoded(v) = &resolved
            && self.store.dim.is_none()
        {
            self.store.dim = Some(v.len());
        }
        let stored_tag = match json("access_tag") {
            Some(Value::String(s)) => Some(s.as_str()),
            _ => None,
        };
        let tag: Option<String> = self
            .force_tag
            .clone()
            .or_else(|| stored_tag.map(str::to_owned));
        let record = serialize_record(&fields, self.force_tag.as_deref())?;
        let matrix = self.store.matrix_mut();
        let row = matrix.push_zero_row();
        match std::mem::replace(&mut resolved, Resolved::Absent) {
            Resolved::Deferred(s) => self.pending.push((row, s)),
            Resolved::Decoded(v) => {
                if let Some(dst) = matrix.row_mut(row) {
                    dst.copy_from_slice(&v);
                }
            }
            Resolved::Absent => {}
        }
        self.store
            .push_meta(id, token_count, tag.as_deref(), &record);
        Ok(Pushed::Added)
    }

    fn resolve_embedding(
        &self,
        field: Option<&FieldValue<'s>>,
        id: &BitId,
    ) -> Result<Resolved<'s>> {
        let missing = || LibraryError::MissingEmbedding(id.to_string());
        let s: Cow<'s, str> = match field {
            None | Some(FieldValue::Embedding(EmbeddingField::Null)) => return Err(missing()),
            Some(FieldValue::Embedding(EmbeddingField::Str(s))) => s.clone(),
            Some(FieldValue::Embedding(EmbeddingField::Other(kind))) => {
                return Err(LibraryError::InvalidEmbedding {
                    id: id.to_string(),
                    detail: format!("expected a base64 string, found {kind}"),
                });
            }
            // `embedding` is always read as an embedding field; a plain JSON value cannot occur.
            Some(FieldValue::Json(_)) => return Err(missing()),
        };
        if s.is_empty() {
            return Err(missing());
        }
        if let (Cow::Borrowed(b), Some(d), true) = (&s, self.store.dim, self.defer)
            && d > 0
            && b.len() == encoded_len(4 * d)
        {
            return Ok(Resolved::Deferred(b));
        }
        self.decode_now(&s, id).map(Resolved::Decoded)
    }

    /// Decodes and checks one embedding synchronously, with the precise error.
    fn decode_now(&self, s: &str, id: &BitId) -> Result<Vec<f32>> {
        let v = decode_vector(s).map_err(|e| LibraryError::InvalidEmbedding {
            id: id.to_string(),
            detail: e.to_string(),
        })?;
        if v.is_empty() {
            return Err(LibraryError::MissingEmbedding(id.to_string()));
        }
        if let Some(d) = self.store.dim
            && v.len() != d
        {
            return Err(LibraryError::WrongEmbeddingLength {
                id: id.to_string(),
                expected: d,
            });
        }
        Ok(v)
    }

    fn check_rest(&self, fields: &[(Cow<'s, str>, FieldValue<'s>)], id: &BitId) -> Result<()> {
        let json = |key: &str| {
            fields
                .iter()
                .find(|(k, _)| k == key)
                .and_then(|(_, v)| match v {
                    FieldValue::Json(v) => Some(v.as_ref()),
                    FieldValue::Embedding(_) => None,
                })
        };
        if !self.omitted("token_count") {
            match json("token_count") {
                None => return Err(LibraryError::MissingTokenCount(id.to_string())),
                Some(v) if int_of(v).is_none() => return Err(LibraryError::TokenCountNotInt),
                Some(_) => {}
            }
        }
        if !self.omitted("info") {
            match json("info") {
                None => return Err(LibraryError::MissingInfo(id.to_string())),
                Some(Value::Object(info)) => {
                    if !info.get("url").is_some_and(Value::is_string) {
                        return Err(LibraryError::MissingUrl(id.to_string()));
                    }
                }
                Some(_) => return Err(LibraryError::InfoNotObject),
            }
        }
        match json("access_tag") {
            None | Some(Value::Null | Value::String(_)) => Ok(()),
            Some(_) => Err(LibraryError::AccessTagNotString(id.to_string())),
        }
    }

    /// Decodes every pending embedding into its row, in parallel.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let (Some(&(first, _)), Some(&(last, last_str))) = (pending.first(), pending.last()) else {
            return Ok(());
        };
        let dim = self.store.dim.unwrap_or(0);
        let matrix = self.store.matrix_mut();
        let stride = matrix.stride();
        let block = matrix.rows_mut(first, last + 1);
        let mut slots: Vec<Option<&str>> = vec![None; last + 1 - first];
        for &(row, s) in &pending {
            slots[row - first] = Some(s);
        }
        let failed: Option<usize> = block
            .par_chunks_mut(stride.max(1))
            .zip(slots.par_iter())
            .enumerate()
            .filter_map(|(i, (row, slot))| {
                let s = (*slot)?;
                (!decode_into_row(s, row, dim)).then_some(first + i)
            })
            .min();
        if let Some(row) = failed {
            let s = slots[row - first].unwrap_or("");
            let id = self.store.ids[row];
            // The fast path refused it; the precise path gives the error (or, for unusual but
            // valid input, the vector).
            let v = self.decode_now(s, &id)?;
            if let Some(dst) = self.store.matrix_mut().row_mut(row) {
                dst.copy_from_slice(&v);
            }
            // Decode the rest of the batch precisely too; failures are rare.
            for &(r, s) in pending.iter().filter(|(r, _)| *r > row) {
                let id = self.store.ids[r];
                let v = self.decode_now(s, &id)?;
                if let Some(dst) = self.store.matrix_mut().row_mut(r) {
                    dst.copy_from_slice(&v);
                }
            }
        }
        self.flushed_to = last_str.as_ptr() as usize + last_str.len();
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<Store> {
        self.flush()?;
        Ok(self.store)
    }

    /// The store of an eager builder (which never has pending rows).
    pub(crate) fn into_store(self) -> Store {
        self.store
    }
}

/// A JSON integer (not a float, not a boolean), saturated to i64.
pub(crate) fn int_of(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) if n.is_i64() => n.as_i64(),
        Value::Number(n) if n.is_u64() => Some(i64::MAX),
        _ => None,
    }
}

/// The bit's compact JSON for the arena: stored fields in order, the embedding replaced by a
/// `null` placeholder, and `access_tag` replaced (or appended) when a tag is forced.
fn serialize_record(
    fields: &[(Cow<'_, str>, FieldValue<'_>)],
    force_tag: Option<&str>,
) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(512);
    let mut ser = serde_json::Serializer::new(&mut out);
    let mut write = || -> std::result::Result<(), serde_json::Error> {
        let mut map = (&mut ser).serialize_map(None)?;
        let mut tag_written = false;
        for (key, value) in fields {
            match value {
                FieldValue::Embedding(_) => map.serialize_entry(key.as_ref(), &())?,
                FieldValue::Json(v) => {
                    if key == "access_tag"
                        && let Some(t) = force_tag
                    {
                        map.serialize_entry(key.as_ref(), t)?;
                        tag_written = true;
                    } else {
                        map.serialize_entry(key.as_ref(), v.as_ref())?;
                    }
                }
            }
        }
        if let (Some(t), false) = (force_tag, tag_written) {
            map.serialize_entry("access_tag", t)?;
        }
        map.end()
    };
    write().map_err(|e| LibraryError::InvalidJson(e.to_string()))?;
    Ok(out)
}
