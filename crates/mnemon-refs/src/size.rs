//! The size of a value's output, measured without building it, so that a piece too large for
//! what is left of a call's limit is refused before it is built.

use mnemon_types::{Bytes, Value};

/// The length of `serde_json::to_string(value)` (compact JSON, bytes as `data:` URLs, objects as
/// their JSON or type string), or `None` as soon as it is known to be more than `max`. Takes
/// time in proportion to the part of the value measured, which is at most `max` bytes of output
/// (plus one leaf), and allocates only for numbers and in-process objects.
pub(crate) fn json_len(value: &Value, max: usize) -> Option<usize> {
    let mut len = Len { total: 0, max };
    len.value(value)?;
    Some(len.total)
}

/// About how many bytes of memory `value`'s tree takes, or `None` as soon as that is more than
/// `max`: each node's [`Value`], each map entry's key with its slot, each string's and byte
/// buffer's bytes (an in-process object counts its `Value` only: it is shared). Its JSON can be
/// twenty times smaller (an array of zeros takes two bytes of JSON per element and a whole
/// `Value` in memory), so what a call keeps in memory is measured with this, not [`json_len`].
pub(crate) fn tree_cost(value: &Value, max: usize) -> Option<usize> {
    let mut cost = Cost { total: 0, max };
    cost.value(value)?;
    Some(cost.total)
}

/// A running [`tree_cost`] that gives up once it is past `max`.
struct Cost {
    total: usize,
    max: usize,
}

impl Cost {
    fn add(&mut self, n: usize) -> Option<()> {
        self.total = self.total.checked_add(n)?;
        (self.total <= self.max).then_some(())
    }

    fn value(&mut self, value: &Value) -> Option<()> {
        self.add(std::mem::size_of::<Value>())?;
        match value {
            Value::String(s) => self.add(s.len()),
            Value::Bytes(b) => self.add(b.data().len()),
            Value::Array(items) => items.iter().try_for_each(|item| self.value(item)),
            Value::Map(map) => map.iter().try_for_each(|(k, v)| {
                // The key, and the map's entry and index slot beside the value.
                self.add(
                    std::mem::size_of::<String>() + k.len() + 2 * std::mem::size_of::<usize>(),
                )?;
                self.value(v)
            }),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_) => Some(()),
        }
    }
}

/// The length of `s` written as a JSON string (quotes and escapes included).
pub(crate) fn json_str_len(s: &str) -> usize {
    2 + s.bytes().map(escaped_len).sum::<usize>()
}

/// The length of `bytes` as a `data:` URL ([`Bytes::to_data_url`]), without encoding it.
pub(crate) fn data_url_len(bytes: &Bytes) -> usize {
    let media = bytes.media_type().unwrap_or("application/octet-stream");
    // "data:" + media + ";base64," + padded base64 (4 characters per 3 bytes or part of 3).
    5 + media.len() + 8 + bytes.data().len().div_ceil(3) * 4
}

/// How many bytes serde_json writes for one byte of a string: two for `"`, `\` and the control
/// characters with a short escape, six (`\u00XX`) for the other control characters; every
/// other byte, including those of non-ASCII characters and DEL, as it is.
fn escaped_len(b: u8) -> usize {
    match b {
        b'"' | b'\\' | b'\x08' | b'\t' | b'\n' | b'\x0c' | b'\r' => 2,
        0..=0x1f => 6,
        _ => 1,
    }
}

/// A running total that gives up once it is past `max`.
struct Len {
    total: usize,
    max: usize,
}

impl Len {
    fn add(&mut self, n: usize) -> Option<()> {
        self.total = self.total.checked_add(n)?;
        (self.total <= self.max).then_some(())
    }

    fn value(&mut self, value: &Value) -> Option<()> {
        match value {
            Value::Null => self.add(4),
            Value::Bool(b) => self.add(if *b { 4 } else { 5 }),
            Value::Number(n) => self.add(n.to_string().len()),
            Value::String(s) => self.string(s),
            Value::Bytes(b) => {
                // The media type is the only part that may need escaping; base64 never does.
                let media = b.media_type().unwrap_or("application/octet-stream");
                let escaped = json_str_len(media) - 2 - media.len();
                self.add(data_url_len(b) + escaped + 2)
            }
            Value::Object(o) => match o.get().to_json() {
                Some(json) => self.add(serde_json::to_string(&json).ok()?.len()),
                None => self.string(&mnemon_types::object_type_string(o.type_name())),
            },
            Value::Array(items) => {
                self.add(2 + items.len().saturating_sub(1))?;
                items.iter().try_for_each(|item| self.value(item))
            }
            Value::Map(map) => {
                // Braces, a colon per entry and a comma between entries.
                self.add(2 + map.len() + map.len().saturating_sub(1))?;
                map.iter().try_for_each(|(k, v)| {
                    self.string(k)?;
                    self.value(v)
                })
            }
        }
    }

    fn string(&mut self, s: &str) -> Option<()> {
        // Checked before the bytes are walked, so a long string past the limit costs nothing.
        self.add(s.len() + 2)?;
        self.add(s.bytes().map(|b| escaped_len(b) - 1).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon_types::{AssetObject, Map, Object};
    use proptest::prelude::*;
    use serde_json::json;

    #[derive(Debug)]
    struct Opaque;
    impl AssetObject for Opaque {
        fn type_name(&self) -> &str {
            "my::\"Opaque\""
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| Value::from_json(json!(n))),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| Value::from_json(json!(f))),
            "(.|\n|\t|\"|\\\\|\u{1}|\u{7f}|é|😀){0,12}".prop_map(Value::from),
            (
                proptest::collection::vec(any::<u8>(), 0..40),
                proptest::option::of("[a-z/\"\\\\\u{2}]{0,10}")
            )
                .prop_map(|(data, media)| Value::Bytes(match media {
                    Some(m) => Bytes::with_media_type(data, m),
                    None => Bytes::new(data),
                })),
            Just(()).prop_map(|()| Value::Object(Object::new(Opaque))),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::vec(("(.|\"|\n){0,6}", inner), 0..5)
                    .prop_map(|kv| Value::Map(kv.into_iter().collect::<Map>())),
            ]
        })
    }

    #[test]
    fn tree_cost_counts_nodes_not_json() {
        let zeros = Value::from_json(json!(vec![0; 10_000]));
        let cost = tree_cost(&zeros, usize::MAX).unwrap();
        assert!(cost > 10_000 * std::mem::size_of::<Value>(), "{cost}");
        assert!(cost > 10 * json_len(&zeros, usize::MAX).unwrap(), "{cost}");
        assert_eq!(tree_cost(&zeros, cost), Some(cost));
        assert_eq!(tree_cost(&zeros, cost - 1), None);
    }

    proptest! {
        /// The measured length is the length of the JSON serde_json writes, and any limit below
        /// it gives `None`.
        #[test]
        fn json_len_is_the_written_length(v in value(), cut in 0usize..64) {
            let written = serde_json::to_string(&v).unwrap();
            prop_assert_eq!(json_len(&v, usize::MAX), Some(written.len()));
            prop_assert_eq!(json_len(&v, written.len()), Some(written.len()));
            let below = written.len().saturating_sub(cut + 1);
            if below < written.len() {
                prop_assert_eq!(json_len(&v, below), None);
            }
        }

        #[test]
        fn data_url_len_is_the_url_length(data in proptest::collection::vec(any::<u8>(), 0..100)) {
            let bytes = Bytes::with_media_type(data, "image/png");
            prop_assert_eq!(data_url_len(&bytes), bytes.to_data_url().len());
            let plain = Bytes::new(bytes.data().to_vec());
            prop_assert_eq!(data_url_len(&plain), plain.to_data_url().len());
        }
    }

    #[test]
    fn strings_are_measured_with_their_escapes() {
        for s in [
            "",
            "a",
            "\"",
            "\\",
            "\n\t\r\u{8}\u{c}",
            "\u{0}\u{1f}",
            "\u{7f}é😀",
        ] {
            assert_eq!(
                json_str_len(s),
                serde_json::to_string(s).unwrap().len(),
                "{s:?}"
            );
        }
    }
}
