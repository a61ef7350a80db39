//! Validating bits (docs/reference/library.md#load-errors) and appending them to a [`Store`],
//! decoding embeddings straight into the matrix, in parallel batches.

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
    /// Already a vector ([`crate::Library::insert_bit`]): checked like a decoded string.
    Floats(&'s [f32]),
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
    /// Rows whose embedding is decoded at the next flush: (row, bit index in the file, text).
    pending: Vec<(usize, usize, &'s str)>,
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
    /// pending batch is decoded first, so the error reported is the first in file order. Errors
    /// are [`LibraryError::InBit`], so they carry the bit's index.
    pub(crate) fn push(&mut self, index: usize, raw: RawBit<'s>) -> Result<Pushed> {
        match self.try_push(index, raw) {
            Ok(p) => Ok(p),
            Err(e) => {
                self.flush()?;
                Err(LibraryError::in_bit(index, e))
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

        if let Some(e) = omitted_but_present(&fields, self.omit.as_ref()).next() {
            return Err(e);
        }
        check_text(index, text_value, &id)?;
        let resolved = if self.omitted("embedding") {
            Resolved::Absent
        } else {
            self.resolve_embedding(find("embedding"), &id)?
        };
        // Checks after the embedding: on failure, a deferred embedding's own error comes first.
        let rest = check_rest(&fields, &id, self.omit.as_ref());
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
            Resolved::Deferred(s) => self.pending.push((row, index, s)),
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
        if let Some(FieldValue::Embedding(EmbeddingField::Floats(v))) = field {
            return check_floats(v, id, self.store.dim).map(Resolved::Decoded);
        }
        let s = embedding_text(field, id)?;
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
        decode_checked(s, id, self.store.dim)
    }

    /// Decodes every pending embedding into its row, in parallel.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let (Some(&(first, _, _)), Some(&(last, _, last_str))) = (pending.first(), pending.last())
        else {
            return Ok(());
        };
        let dim = self.store.dim.unwrap_or(0);
        let matrix = self.store.matrix_mut();
        let stride = matrix.stride();
        let block = matrix.rows_mut(first, last + 1);
        let mut slots: Vec<Option<&str>> = vec![None; last + 1 - first];
        for &(row, _, s) in &pending {
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
            // The fast path refused a row; the precise path gives the error (or, for unusual
            // but valid input, the vector). Decode the rest of the batch precisely too; failures
            // are rare.
            for &(r, index, s) in pending.iter().filter(|(r, _, _)| *r >= row) {
                let id = self.store.ids[r];
                let v = self
                    .decode_now(s, &id)
                    .map_err(|e| LibraryError::in_bit(index, e))?;
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

/// A bit's fields, looked up by key.
type Fields<'s> = [(Cow<'s, str>, FieldValue<'s>)];

/// A plain JSON field of a bit (not the embedding).
fn json_field<'a>(fields: &'a Fields<'_>, key: &str) -> Option<&'a Value> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| match v {
            FieldValue::Json(v) => Some(v.as_ref()),
            FieldValue::Embedding(_) => None,
        })
}

fn is_omitted(omit: Option<&Omit>, field: &str) -> bool {
    omit.is_some_and(|o| o.contains_field(field))
}

/// One error for each field the stored omit names that the bit carries.
fn omitted_but_present<'a>(
    fields: &'a Fields<'_>,
    omit: Option<&'a Omit>,
) -> impl Iterator<Item = LibraryError> + 'a {
    omit.into_iter()
        .flat_map(Omit::fields)
        .filter(|field| fields.iter().any(|(k, _)| k == field))
        .map(|field| LibraryError::FieldNotOmitted(field.to_owned()))
}

fn check_text(index: usize, text: Option<&Value>, id: &BitId) -> Result<()> {
    match text {
        None => Err(LibraryError::MissingText(id.to_string())),
        Some(Value::String(_)) => Ok(()),
        Some(_) => Err(LibraryError::TextNotString(index)),
    }
}

/// The embedding's base64 text, or why there is none.
fn embedding_text<'s>(field: Option<&FieldValue<'s>>, id: &BitId) -> Result<Cow<'s, str>> {
    let missing = || LibraryError::MissingEmbedding(id.to_string());
    let s = match field {
        None | Some(FieldValue::Embedding(EmbeddingField::Null)) => return Err(missing()),
        Some(FieldValue::Embedding(EmbeddingField::Str(s))) => s.clone(),
        // Resolved before the text is asked for (`Builder::resolve_embedding`).
        Some(FieldValue::Embedding(EmbeddingField::Floats(_))) => return Err(missing()),
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
    Ok(s)
}

/// Decodes an embedding and checks it against the library's dimension, if known.
fn decode_checked(s: &str, id: &BitId, dim: Option<usize>) -> Result<Vec<f32>> {
    let v = decode_vector(s).map_err(|e| LibraryError::InvalidEmbedding {
        id: id.to_string(),
        detail: e.to_string(),
    })?;
    check_length(v, id, dim)
}

/// Checks a vector given as floats as a decoded embedding is checked: finite values, then
/// length, with the same messages.
fn check_floats(v: &[f32], id: &BitId, dim: Option<usize>) -> Result<Vec<f32>> {
    if v.iter().any(|x| !x.is_finite()) {
        return Err(LibraryError::InvalidEmbedding {
            id: id.to_string(),
            detail: crate::codec::VectorError::NonFinite.to_string(),
        });
    }
    check_length(v.to_vec(), id, dim)
}

/// A decoded embedding must be non-empty and, once the library's dimension is known, of it.
fn check_length(v: Vec<f32>, id: &BitId, dim: Option<usize>) -> Result<Vec<f32>> {
    if v.is_empty() {
        return Err(LibraryError::MissingEmbedding(id.to_string()));
    }
    if let Some(d) = dim
        && v.len() != d
    {
        return Err(LibraryError::WrongEmbeddingLength {
            id: id.to_string(),
            expected: d,
        });
    }
    Ok(v)
}

fn check_token_count(fields: &Fields<'_>, id: &BitId, omit: Option<&Omit>) -> Result<()> {
    if is_omitted(omit, "token_count") {
        return Ok(());
    }
    match json_field(fields, "token_count") {
        None => Err(LibraryError::MissingTokenCount(id.to_string())),
        Some(v) if int_of(v).is_none() => Err(LibraryError::TokenCountNotInt),
        Some(_) => Ok(()),
    }
}

fn check_info(fields: &Fields<'_>, id: &BitId, omit: Option<&Omit>) -> Result<()> {
    if is_omitted(omit, "info") {
        return Ok(());
    }
    match json_field(fields, "info") {
        None => Err(LibraryError::MissingInfo(id.to_string())),
        Some(Value::Object(info)) if info.get("url").is_some_and(Value::is_string) => Ok(()),
        Some(Value::Object(_)) => Err(LibraryError::MissingUrl(id.to_string())),
        Some(_) => Err(LibraryError::InfoNotObject),
    }
}

fn check_access_tag(fields: &Fields<'_>, id: &BitId) -> Result<()> {
    match json_field(fields, "access_tag") {
        None | Some(Value::Null | Value::String(_)) => Ok(()),
        Some(_) => Err(LibraryError::AccessTagNotString(id.to_string())),
    }
}

/// The checks after the embedding, in load order, stopping at the first fault.
fn check_rest(fields: &Fields<'_>, id: &BitId, omit: Option<&Omit>) -> Result<()> {
    check_token_count(fields, id, omit)?;
    check_info(fields, id, omit)?;
    check_access_tag(fields, id)
}

/// Everything wrong with one bit, for a validator that reports more than the first fault.
pub(crate) struct BitReport {
    /// The bit's id, when it is an object.
    pub(crate) id: Option<BitId>,
    /// Every fault, in the order loading checks them: the first is the one loading reports.
    pub(crate) faults: Vec<LibraryError>,
    /// The length of its embedding, when that decoded (even if it is the wrong length).
    pub(crate) dimension: Option<usize>,
}

/// Runs every check of bit `index` against a library of dimension `dim` and stored `omit`,
/// collecting all faults instead of stopping at the first.
pub(crate) fn check_bit(
    index: usize,
    raw: &RawBit<'_>,
    dim: Option<usize>,
    omit: Option<&Omit>,
) -> BitReport {
    let RawBit::Object(fields) = raw else {
        return BitReport {
            id: None,
            faults: vec![LibraryError::BitNotObject(index)],
            dimension: None,
        };
    };
    let url = json_field(fields, "info")
        .and_then(|i| i.get("url"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let text = json_field(fields, "text")
        .and_then(Value::as_str)
        .unwrap_or("");
    let id = BitId::of(url, text);
    let mut faults: Vec<LibraryError> = omitted_but_present(fields, omit).collect();
    faults.extend(check_text(index, json_field(fields, "text"), &id).err());
    let mut dimension = None;
    if !is_omitted(omit, "embedding") {
        let field = fields
            .iter()
            .find(|(k, _)| k == "embedding")
            .map(|(_, v)| v);
        let decoded = embedding_text(field, &id).and_then(|s| {
            let v = decode_checked(&s, &id, None)?;
            dimension = Some(v.len());
            decode_checked(&s, &id, dim)
        });
        faults.extend(decoded.err());
    }
    faults.extend(check_token_count(fields, &id, omit).err());
    faults.extend(check_info(fields, &id, omit).err());
    faults.extend(check_access_tag(fields, &id).err());
    BitReport {
        id: Some(id),
        faults,
        dimension,
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
