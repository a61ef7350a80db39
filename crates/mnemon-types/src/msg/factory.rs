//! Building messages: [`MsgFactory`] fills in ids and timestamps from its providers, and
//! [`MsgBuilder`] checks each field as it is set.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::agentscope::{decode_marked, ingest_plain};
use super::error::{empty_id, invalid_embedding};
use super::{Clock, EMBEDDING_KEY, IdGen, Msg, MsgError, MsgKind, MsgUrl};
use super::{check_extra, embedding_to_json};

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

    /// Converts a plain message object (docs/reference/memory.md#message-fields) of the given kind.
    /// Marker keys are skipped.
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
        if self.error.is_none()
            && let Err(e) = check_extra(&key, &value, 0)
        {
            self.error = Some(e);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::test_factory as factory;
    use serde_json::json;

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
}
