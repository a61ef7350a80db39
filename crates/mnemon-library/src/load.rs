//! Loading (docs/reference/library.md#file-format): a streaming path that decodes `bits` straight
//! into the matrix, and a general path over a `serde_json::Value` for version-0 files and unusual
//! key orders.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::builder::{Builder, EmbeddingField, FieldValue, RawBit, int_of};
use crate::error::{LibraryError, Result};
use crate::omit::Omit;
use crate::storage::Store;

/// The known models and their dimensions (docs/reference/library.md#model-and-dimension).
pub(crate) fn known_dimension(model: &str) -> Option<usize> {
    match model {
        "openai.com:text-embedding-ada-002" => Some(1536),
        _ => None,
    }
}

/// Everything a load produces.
pub(crate) struct Loaded {
    pub(crate) top: Map<String, Value>,
    pub(crate) model: String,
    pub(crate) omit: Option<Omit>,
    pub(crate) store: Store,
    pub(crate) upgraded: bool,
}

/// Top-level keys the bits' validation depends on.
const HEADER_KEYS: [&str; 3] = ["version", "embedding_model", "omit"];
/// Keys of one bit past which their positions are kept in a map rather than searched for.
const INDEXED_FIELDS: usize = 16;

/// Loads from bytes. `release(address)` is called as parsing moves past input, so a caller that
/// mapped the input can drop the consumed pages.
pub(crate) fn load_slice(
    bytes: &[u8],
    force_tag: Option<&str>,
    release: Option<&dyn Fn(usize)>,
) -> Result<Loaded> {
    let mut stream = Stream {
        top: Map::new(),
        builder: None,
        bits_done: false,
        fallback: false,
        first_error: None,
        force_tag,
        release,
        input_len: bytes.len(),
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = TopSeed(&mut stream)
        .deserialize(&mut de)
        .and_then(|()| de.end());
    match parsed {
        Ok(()) if !stream.fallback && stream.bits_done => {
            if let Some(e) = stream.first_error {
                return Err(e);
            }
            let builder = stream.builder.take();
            let store = match builder {
                Some(b) => b.finish()?,
                None => return load_tree(bytes, force_tag),
            };
            let (model, omit) = header(&stream.top).ok_or(LibraryError::InvalidModel)?;
            Ok(Loaded {
                top: stream.top,
                model,
                omit,
                store,
                upgraded: false,
            })
        }
        Err(e) if !stream.fallback => Err(LibraryError::InvalidJson(e.to_string())),
        _ => load_tree(bytes, force_tag),
    }
}

fn load_tree(bytes: &[u8], force_tag: Option<&str>) -> Result<Loaded> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| LibraryError::InvalidJson(e.to_string()))?;
    load_value(value, force_tag)
}

/// The validated model and stored omit, when the top level allows streaming the bits: version
/// 1, a valid model, and an omit that parses and is not `*`.
fn header(top: &Map<String, Value>) -> Option<(String, Option<Omit>)> {
    if top.get("version").and_then(int_of) != Some(1) {
        return None;
    }
    let model = top
        .get("embedding_model")?
        .as_str()
        .filter(|m| !m.is_empty())?;
    let omit = match top.get("omit") {
        None => None,
        Some(Value::String(s)) => {
            let o = Omit::parse_str(s).ok()?;
            if o.all() {
                return None;
            }
            Some(o)
        }
        Some(_) => return None,
    };
    Some((model.to_owned(), omit))
}

struct Stream<'s, 'o> {
    top: Map<String, Value>,
    builder: Option<Builder<'s>>,
    bits_done: bool,
    fallback: bool,
    first_error: Option<LibraryError>,
    force_tag: Option<&'o str>,
    release: Option<&'o dyn Fn(usize)>,
    input_len: usize,
}

impl Stream<'_, '_> {
    fn give_up<E: de::Error>(&mut self) -> E {
        self.fallback = true;
        E::custom("streaming not possible; re-reading as a tree")
    }
}

struct TopSeed<'a, 's, 'o>(&'a mut Stream<'s, 'o>);

impl<'de, 'o> DeserializeSeed<'de> for TopSeed<'_, 'de, 'o> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(TopVisitor(self.0))
    }
}

struct TopVisitor<'a, 's, 'o>(&'a mut Stream<'s, 'o>);

impl<'de, 'o> Visitor<'de> for TopVisitor<'_, 'de, 'o> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a library object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        let st = self.0;
        while let Some(key) = map.next_key::<String>()? {
            if key == "bits" {
                let Some((model, omit)) = header(&st.top).filter(|_| !st.bits_done) else {
                    return Err(st.give_up());
                };
                let dim = known_dimension(&model);
                let mut store = Store::new(dim);
                if let Some(d) = dim.filter(|&d| d > 0) {
                    // Every bit needs at least its embedding's text, so this bounds the rows.
                    // Reserving address space is free; pages count only once written.
                    store
                        .embeddings
                        .owned
                        .reserve(st.input_len / crate::codec::encoded_len(4 * d));
                }
                st.builder = Some(Builder::new(store, omit, st.force_tag.map(str::to_owned)));
                map.next_value_seed(BitsSeed(st))?;
                st.top.insert(key, Value::Null);
                st.bits_done = true;
            } else {
                let value: Value = map.next_value()?;
                if st.bits_done && HEADER_KEYS.contains(&key.as_str()) {
                    return Err(st.give_up());
                }
                st.top.insert(key, value);
            }
        }
        Ok(())
    }

    // Anything but an object: let the tree path report it.
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> std::result::Result<(), A::Error> {
        Err(self.0.give_up())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<(), E> {
        Err(self.0.give_up())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<(), E> {
        Err(self.0.give_up())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<(), E> {
        Err(self.0.give_up())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<(), E> {
        Err(self.0.give_up())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<(), E> {
        Err(self.0.give_up())
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<(), E> {
        Err(self.0.give_up())
    }
}

struct BitsSeed<'a, 's, 'o>(&'a mut Stream<'s, 'o>);

impl<'de, 'o> DeserializeSeed<'de> for BitsSeed<'_, 'de, 'o> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(BitsVisitor(self.0))
    }
}

struct BitsVisitor<'a, 's, 'o>(&'a mut Stream<'s, 'o>);

impl<'de, 'o> Visitor<'de> for BitsVisitor<'_, 'de, 'o> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of bits")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        let st = self.0;
        let mut index = 0usize;
        loop {
            if st.first_error.is_some() {
                // Keep reading only to find JSON syntax errors, which take precedence.
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    break;
                }
                continue;
            }
            let Some(raw) = seq.next_element_seed(BitSeed)? else {
                break;
            };
            let Some(builder) = st.builder.as_mut() else {
                break;
            };
            let mut result = builder.push(index, raw).map(|_| ());
            if result.is_ok() && builder.wants_flush() {
                result = builder.flush();
                if result.is_ok()
                    && let Some(release) = st.release
                {
                    release(builder.flushed_to);
                }
            }
            if let Err(e) = result {
                st.first_error = Some(e);
            }
            index += 1;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> std::result::Result<(), A::Error> {
        Err(self.0.give_up())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<(), E> {
        Err(self.0.give_up())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<(), E> {
        Err(self.0.give_up())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<(), E> {
        Err(self.0.give_up())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<(), E> {
        Err(self.0.give_up())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<(), E> {
        Err(self.0.give_up())
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<(), E> {
        Err(self.0.give_up())
    }
}

struct BitSeed;

impl<'de> DeserializeSeed<'de> for BitSeed {
    type Value = RawBit<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<RawBit<'de>, D::Error> {
        d.deserialize_any(BitVisitor)
    }
}

struct BitVisitor;

impl<'de> Visitor<'de> for BitVisitor {
    type Value = RawBit<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a bit")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<RawBit<'de>, A::Error> {
        let mut fields: Vec<(Cow<'de, str>, FieldValue<'de>)> = Vec::with_capacity(6);
        // Each key's position in `fields`, once a bit has more keys than a search through them
        // costs: a bit of a million keys would otherwise take their square in comparisons.
        let mut slots: Option<std::collections::HashMap<String, usize>> = None;
        while let Some(key) = map.next_key::<String>()? {
            let value = if key == "embedding" {
                FieldValue::Embedding(map.next_value_seed(EmbeddingSeed)?)
            } else {
                FieldValue::Json(Cow::Owned(map.next_value::<Value>()?))
            };
            if slots.is_none() && fields.len() >= INDEXED_FIELDS {
                slots = Some(
                    fields
                        .iter()
                        .enumerate()
                        .map(|(i, (k, _))| (k.to_string(), i))
                        .collect(),
                );
            }
            // A repeated key keeps its first position and its last value, as Python's dict does.
            let slot = match &slots {
                Some(slots) => slots.get(&key).copied(),
                None => fields.iter().position(|(k, _)| *k == key),
            };
            match slot {
                Some(i) => {
                    if let Some(field) = fields.get_mut(i) {
                        field.1 = value;
                    }
                }
                None => {
                    if let Some(slots) = &mut slots {
                        slots.insert(key.clone(), fields.len());
                    }
                    fields.push((Cow::Owned(key), value));
                }
            }
        }
        Ok(RawBit::Object(fields))
    }

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<RawBit<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(RawBit::NotObject)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<RawBit<'de>, E> {
        Ok(RawBit::NotObject)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<RawBit<'de>, E> {
        Ok(RawBit::NotObject)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<RawBit<'de>, E> {
        Ok(RawBit::NotObject)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<RawBit<'de>, E> {
        Ok(RawBit::NotObject)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<RawBit<'de>, E> {
        Ok(RawBit::NotObject)
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<RawBit<'de>, E> {
        Ok(RawBit::NotObject)
    }
}

struct EmbeddingSeed;

impl<'de> DeserializeSeed<'de> for EmbeddingSeed {
    type Value = EmbeddingField<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(EmbeddingVisitor)
    }
}

struct EmbeddingVisitor;

impl<'de> Visitor<'de> for EmbeddingVisitor {
    type Value = EmbeddingField<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an embedding")
    }
    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> std::result::Result<Self::Value, E> {
        Ok(EmbeddingField::Str(Cow::Borrowed(s)))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<Self::Value, E> {
        Ok(EmbeddingField::Str(Cow::Owned(s.to_owned())))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok(EmbeddingField::Null)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<Self::Value, E> {
        Ok(EmbeddingField::Other("a boolean"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<Self::Value, E> {
        Ok(EmbeddingField::Other("a number"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<Self::Value, E> {
        Ok(EmbeddingField::Other("a number"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<Self::Value, E> {
        Ok(EmbeddingField::Other("a number"))
    }
    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(EmbeddingField::Other("an array"))
    }
    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(EmbeddingField::Other("an object"))
    }
}

/// Upgrades a version-0 object in place (docs/reference/library.md#version-0-files). Returns
/// whether it was version 0.
fn upgrade(map: &mut Map<String, Value>) -> Result<bool> {
    match map.get("version") {
        None => {}
        Some(v) => match int_of(v) {
            Some(0) => {}
            Some(_) => return Ok(false),
            None => return Err(LibraryError::VersionInvalid),
        },
    }
    let Some(Value::Object(content)) = map.shift_remove("content") else {
        return Err(LibraryError::MissingContent);
    };
    let sort = map.get("sort").and_then(Value::as_object).cloned();
    let ids = v0_sort_ids(sort.as_ref().and_then(|s| s.get("ids")));
    let mut content = content;
    let bits: Vec<Value> = if ids.is_empty() {
        content.into_iter().map(|(_, v)| v).collect()
    } else {
        let mut out = Vec::with_capacity(ids.len());
        for key in ids {
            // A repeated id in sort.ids has already been taken: treat it as unknown. The
            // map's order is not used past this point, so `swap_remove` (constant time): a
            // `shift_remove` in content order moved every later entry each time, n² / 2 moves.
            match content.swap_remove(&key) {
                Some(v) => out.push(v),
                None => return Err(LibraryError::UnknownSortId(key)),
            }
        }
        out
    };
    map.insert("version".into(), Value::from(1));
    if sort.is_some() {
        map.shift_remove("sort");
    }
    map.insert("bits".into(), Value::Array(bits));
    if let Some(t) = sort
        .as_ref()
        .and_then(|s| s.get("type"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        map.insert("sort".into(), Value::String(t.to_owned()));
    }
    Ok(true)
}

/// The general path: checks a parsed value's top level, then its bits in order.
pub(crate) fn load_value(value: Value, force_tag: Option<&str>) -> Result<Loaded> {
    let Value::Object(mut top) = value else {
        return Err(LibraryError::InvalidJson(
            "expected a JSON object at the top level".into(),
        ));
    };
    let upgraded = upgrade(&mut top)?;
    if top.get("version").and_then(int_of) != Some(1) {
        return Err(LibraryError::VersionInvalid);
    }
    let model = match top.get("embedding_model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(LibraryError::InvalidModel),
    };
    let omit = match top.get("omit") {
        None => None,
        Some(Value::String(s)) => Some(Omit::parse_str(s)?),
        Some(_) => return Err(LibraryError::OmitNotString),
    };
    let bits = match top.get_mut("bits") {
        None => return Err(LibraryError::MissingBits),
        Some(Value::Array(bits)) => std::mem::take(bits),
        Some(_) => return Err(LibraryError::BitsNotList),
    };
    top.insert("bits".into(), Value::Null);
    if omit.as_ref().is_some_and(Omit::all) && !bits.is_empty() {
        return Err(LibraryError::OmitAllButBits);
    }
    let store = Store::new(known_dimension(&model));
    let mut builder = Builder::new(store, omit.clone(), force_tag.map(str::to_owned));
    for (index, bit) in bits.iter().enumerate() {
        builder.push(index, RawBit::from_value(bit))?;
        if builder.wants_flush() {
            builder.flush()?;
        }
    }
    Ok(Loaded {
        top,
        model,
        omit,
        store: builder.finish()?,
        upgraded,
    })
}

/// A version-0 file's `sort.ids`, the order of its `content` keys, as strings (non-strings as
/// their JSON text, as the reference's `str()` would give); empty when absent.
pub(crate) fn v0_sort_ids(ids: Option<&Value>) -> Vec<String> {
    ids.and_then(Value::as_array)
        .map(|ids| {
            ids.iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use crate::Library;

    /// A bit's keys, past the count searched one by one: a repeated key still keeps its first
    /// position and its last value (Python's dict), and every key is kept in order.
    #[test]
    fn many_keys_keep_python_order_and_last_values() {
        let mut bit = String::from(r#"{"text": "first", "info": {"url": "u"}, "token_count": 1"#);
        for k in 0..40 {
            bit.push_str(&format!(r#", "k{k}": {k}"#));
        }
        bit.push_str(r#", "text": "last", "k3": "again"}"#);
        let file = format!(
            r#"{{"version": 1, "embedding_model": "m", "omit": "embedding", "bits": [{bit}]}}"#
        );
        let library = Library::from_bytes(file.as_bytes()).unwrap();
        let texts: Vec<String> = library.texts().map(Result::unwrap).collect();
        assert_eq!(texts, ["last"]);
        let saved = {
            let mut out = Vec::new();
            library.to_writer(&mut out, false).unwrap();
            String::from_utf8(out).unwrap()
        };
        let text_at = saved.find(r#""text""#).unwrap();
        let k0_at = saved.find(r#""k0""#).unwrap();
        assert!(text_at < k0_at, "{saved}");
        assert!(saved.contains(r#""k3": "again""#), "{saved}");
        assert!(saved.contains(r#""k39": 39"#), "{saved}");
        assert_eq!(saved.matches(r#""k3""#).count(), 1, "{saved}");
    }

    /// Many distinct access tags load, each its own (tag lookups by name, not a search).
    #[test]
    fn many_access_tags_are_each_their_own() {
        let bits: Vec<String> = (0..300)
            .map(|i| format!(r#"{{"text": "t{i}", "info": {{"url": "u"}}, "token_count": 1, "access_tag": "tag{}"}}"#, i % 100))
            .collect();
        let file = format!(
            r#"{{"version": 1, "embedding_model": "m", "omit": "embedding", "bits": [{}]}}"#,
            bits.join(",")
        );
        let library = Library::from_bytes(file.as_bytes()).unwrap();
        let tags = library.access_tags();
        assert_eq!(tags.len(), 100, "{tags:?}");
        assert!(tags.iter().all(|(_, n)| *n == 3), "{tags:?}");
    }
}
