//! A stored message with its marks, holding its embedding compactly.
//!
//! A message's embedding is an extra like any other, so inside a [`Msg`] it is a JSON array: at
//! 1536 dimensions that is 1536 `serde_json::Value`s of 72 bytes each (with `preserve_order`),
//! about 110 KB per message. An [`Entry`] moves the numbers out into a plain `f64` slice (12 KB
//! per message) and leaves a `null` in the extra's place, so
//! the key keeps its position and [`Entry::message`] rebuilds the very same message. `f64` is
//! what a JSON float holds, so nothing is rounded and exports stay byte-identical. Arrays with
//! integers (`[1, 2]`) are rare and are left inside the message, because an integer and the
//! equal float are written differently. Measured with a counting allocator, 10,000 messages of
//! 1536 dimensions took 1,481 MB as messages and take 131 MB as entries (193 MB with the
//! retrieval cache).

use std::borrow::Cow;

use mnemon_types::Msg;
use mnemon_types::msg::EMBEDDING_KEY;
use serde_json::{Number, Value};

/// A stored message with its marks.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    /// The message; when `embedding` is set, its `embedding` extra is a `null` placeholder.
    msg: Msg,
    /// The numbers of the `embedding` extra, moved out of `msg`.
    embedding: Option<Box<[f64]>>,
    /// The message's marks, in the order they were given.
    pub(crate) marks: Vec<String>,
    /// When the message expires (milliseconds since the Unix epoch, `mnemon_db::expiry`), or
    /// `None` for never: what a durable store writes to the row's `expires_at`.
    pub(crate) expires_at: Option<i64>,
    /// The model that made the message's embedding, when known (an embedder filled it in, or
    /// the add said so): what a durable store writes to the row's `embedding_model`.
    pub(crate) embedding_model: Option<String>,
    /// Whether the document the entry was loaded from stated its expiry (`"__expires_at"`
    /// present, `null` for never): a load then keeps `expires_at` as it is instead of applying
    /// the handle's default time-to-live (docs/reference/memory.md#loading-documents).
    pub(crate) expiry_stated: bool,
}

impl Entry {
    /// An entry for `msg`, moving a float embedding out of it.
    pub(crate) fn new(mut msg: Msg, marks: Vec<String>) -> Self {
        let embedding = match msg.extra(EMBEDDING_KEY) {
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::Number(n) if n.is_f64() => n.as_f64(),
                    _ => None,
                })
                .collect::<Option<Box<[f64]>>>(),
            _ => None,
        };
        // Setting `null` on an existing extra keeps its position and cannot fail validation.
        let embedding = embedding.filter(|_| msg.set_extra(EMBEDDING_KEY, Value::Null).is_ok());
        Entry {
            msg,
            embedding,
            marks,
            expires_at: None,
            embedding_model: None,
            expiry_stated: false,
        }
    }

    /// An entry from a message whose `embedding` extra is the `null` placeholder of
    /// [`Entry::msg_without_embedding`] and the numbers moved out of it (as
    /// [`Entry::numbers`] gave them): how a store that keeps the numbers apart from the
    /// message's JSON rebuilds the very same entry. `None` when `msg` has no such placeholder.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn from_parts(msg: Msg, numbers: Box<[f64]>, marks: Vec<String>) -> Option<Self> {
        matches!(msg.extra(EMBEDDING_KEY), Some(Value::Null)).then_some(Entry {
            msg,
            embedding: Some(numbers),
            marks,
            expires_at: None,
            embedding_model: None,
            expiry_stated: false,
        })
    }

    /// The numbers moved out of the message's `embedding` extra, exactly as the message held
    /// them; `None` when nothing was moved out (no embedding, or one with an integer).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn numbers(&self) -> Option<&[f64]> {
        self.embedding.as_deref()
    }

    /// This entry, expiring at `expires_at` (`None`: never).
    pub(crate) fn expiring(mut self, expires_at: Option<i64>) -> Self {
        self.expires_at = expires_at;
        self
    }

    /// The expiry a load gives this entry: its own when its document stated one (`None`, never,
    /// included), else `default` (the loading handle's default time-to-live).
    pub(crate) fn loaded_expiry(&self, default: Option<i64>) -> Option<i64> {
        if self.expiry_stated {
            self.expires_at
        } else {
            self.expires_at.or(default)
        }
    }

    /// This entry, its embedding made by `model` (`None`: unknown). Only an entry with an
    /// embedding keeps a model.
    pub(crate) fn embedded_by(mut self, model: Option<String>) -> Self {
        self.embedding_model = model.filter(|_| self.has_embedding());
        self
    }

    /// The message's id.
    pub(crate) fn id(&self) -> &str {
        self.msg.id()
    }

    /// The message without its embedding numbers (a `null` may hold their place): enough for
    /// ids, content and text forms, but not for handing out. [`Entry::message`] is the whole.
    pub(crate) fn msg_without_embedding(&self) -> &Msg {
        &self.msg
    }

    /// The whole message, embedding included.
    pub(crate) fn message(&self) -> Msg {
        self.full().into_owned()
    }

    /// The message to hand out: [`Entry::message`] when `with_embedding`, else the message
    /// without its embedding numbers (a `null` in their place when there were any), which
    /// costs no JSON array.
    pub(crate) fn message_for(&self, with_embedding: bool) -> Msg {
        if with_embedding {
            self.message()
        } else {
            self.msg.clone()
        }
    }

    /// The whole message, borrowed when nothing was moved out of it.
    pub(crate) fn full(&self) -> Cow<'_, Msg> {
        match &self.embedding {
            None => Cow::Borrowed(&self.msg),
            Some(numbers) => {
                let mut msg = self.msg.clone();
                let array = numbers
                    .iter()
                    .map(|&x| Number::from_f64(x).map_or(Value::Null, Value::Number))
                    .collect();
                // The numbers came from a valid embedding, so this cannot fail; were it to, the
                // placeholder `null` (no embedding) would remain.
                let _ = msg.set_extra(EMBEDDING_KEY, Value::Array(array));
                Cow::Owned(msg)
            }
        }
    }

    /// Whether the message has a non-null embedding.
    pub(crate) fn has_embedding(&self) -> bool {
        self.embedding.is_some() || self.msg.has_embedding()
    }

    /// The embedding as `f32`s (docs/reference/memory.md#numbers-and-the-cache: retrieval reads the
    /// stored numbers as `f32`).
    pub(crate) fn embedding(&self) -> Option<Vec<f32>> {
        match &self.embedding {
            Some(numbers) => Some(numbers.iter().map(|&x| x as f32).collect()),
            None => self.msg.embedding(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::test_factory;
    use serde_json::json;

    #[test]
    fn float_embeddings_move_out_and_come_back_in_place() {
        let f = test_factory();
        let msg = f
            .msg("n", "c")
            .extra("before", 1)
            .extra(EMBEDDING_KEY, json!([0.12, -0.5, 1e-7, 0.1]))
            .extra("after", true)
            .build()
            .unwrap();
        let entry = Entry::new(msg.clone(), vec![]);
        assert!(entry.embedding.is_some());
        assert_eq!(
            entry.msg_without_embedding().extra(EMBEDDING_KEY),
            Some(&Value::Null)
        );
        assert!(entry.has_embedding());
        assert_eq!(entry.message(), msg);
        assert_eq!(
            serde_json::to_string(&entry.message()).unwrap(),
            serde_json::to_string(&msg).unwrap()
        );
        assert_eq!(entry.embedding(), msg.embedding());
    }

    #[test]
    fn integer_and_null_embeddings_stay_in_the_message() {
        let f = test_factory();
        for value in [json!([1, 2.5]), Value::Null] {
            let msg = f
                .msg("n", "c")
                .extra(EMBEDDING_KEY, value.clone())
                .build()
                .unwrap();
            let entry = Entry::new(msg.clone(), vec![]);
            assert!(entry.embedding.is_none());
            assert_eq!(entry.message(), msg);
            assert_eq!(entry.has_embedding(), !value.is_null());
        }
    }
}
