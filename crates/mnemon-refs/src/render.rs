//! Replacing markers in text by what they reference (docs/reference/assets.md#markers-in-text).

use std::ops::Range;

use mnemon_store::AssetStore;
use mnemon_types::Value;

use crate::error::RefsError;
use crate::scan::scan;

/// A marker left in the text as written, and why.
#[derive(Debug)]
pub struct Unresolved {
    /// The marker's byte span in the input text.
    pub span: Range<usize>,
    /// The marker as written.
    pub marker: String,
    /// Why it was not replaced: malformed, unterminated, or not resolvable.
    pub error: RefsError,
}

/// The result of [`render`].
#[derive(Debug)]
pub struct Rendered {
    /// The text with every resolvable marker replaced.
    pub text: String,
    /// Every marker that was left as written, in order.
    pub unresolved: Vec<Unresolved>,
}

/// Replaces each marker in `text` that resolves in `store` by `render_value` of its value;
/// everything else, including the white space around markers and every marker that is
/// malformed or does not resolve, stays exactly as written and the latter are reported.
pub fn render(
    text: &str,
    store: &dyn AssetStore,
    mut render_value: impl FnMut(&Value) -> String,
) -> Rendered {
    let mut out = String::with_capacity(text.len());
    let mut unresolved = Vec::new();
    let mut copied = 0;
    for marker in scan(text) {
        let span = marker.span;
        let outcome = marker
            .reference
            .and_then(|r| store.resolve(&r).map_err(RefsError::MarkerUnresolved));
        let original = text.get(span.clone()).unwrap_or_default();
        out.push_str(text.get(copied..span.start).unwrap_or_default());
        match outcome {
            Ok(value) => out.push_str(&render_value(&value)),
            Err(error) => {
                out.push_str(original);
                unresolved.push(Unresolved {
                    span: span.clone(),
                    marker: original.to_owned(),
                    error,
                });
            }
        }
        copied = span.end;
    }
    out.push_str(text.get(copied..).unwrap_or_default());
    Rendered {
        text: out,
        unresolved,
    }
}

/// [`render`] with [`default_renderer`].
pub fn render_default(text: &str, store: &dyn AssetStore) -> Rendered {
    render(text, store, default_renderer)
}

/// The default rendering of a referenced value in text:
/// - strings as they are;
/// - bytes as a `data:` URL (so an image embeds in Markdown), except bytes with a `text/…`
///   media type that are valid UTF-8, which render as that text;
/// - objects through [`AssetObject::to_text`](mnemon_types::AssetObject::to_text);
/// - anything else as compact JSON (bytes inside it as `data:` URLs, objects as their JSON).
pub fn default_renderer(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Bytes(b) => {
            let is_text = b.media_type().is_some_and(|m| m.starts_with("text/"));
            match std::str::from_utf8(b.data()) {
                Ok(text) if is_text => text.to_owned(),
                _ => b.to_data_url(),
            }
        }
        Value::Object(o) => o.get().to_text(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon_store::InMemoryStore;
    use mnemon_types::{Asset, Bytes, Map};
    use proptest::prelude::*;
    use serde_json::json;

    fn store() -> InMemoryStore {
        let s = InMemoryStore::new();
        let mut content = Map::new();
        content.insert(
            "image".into(),
            Bytes::with_media_type(b"PNG".to_vec(), "image/png").into(),
        );
        content.insert(
            "note".into(),
            Bytes::with_media_type(b"hi".to_vec(), "text/plain").into(),
        );
        content.insert("labels".into(), Value::from_json(json!(["cat", "sofa"])));
        content.insert("name".into(), "Tom".into());
        s.put(&Asset::new(Value::Map(content)).with_id("a1"))
            .unwrap();
        s
    }

    #[test]
    fn default_rendering_of_each_kind() {
        let text = "![a cat](<|asset://a1/content/image|>) <|asset://a1/content/name|>: <|{\"asset_id\":\"a1\",\"field_path\":[\"content\",\"labels\"]}|> `<|asset://a1/content/name|>` <|asset://a1/content/note|>";
        let out = render_default(text, &store());
        assert_eq!(
            out.text,
            "![a cat](data:image/png;base64,UE5H) Tom: [\"cat\",\"sofa\"] `<|asset://a1/content/name|>` hi"
        );
        assert!(out.unresolved.is_empty());
    }

    #[test]
    fn unresolved_and_malformed_markers_stay_verbatim_and_are_reported() {
        let text = "a <|asset://a1/content/lables|>  b <|asset://zz|>\tc <|junk|> d <|asset://a1/content/name|>\n";
        let out = render_default(text, &store());
        assert_eq!(
            out.text,
            "a <|asset://a1/content/lables|>  b <|asset://zz|>\tc <|junk|> d Tom\n"
        );
        let markers: Vec<_> = out.unresolved.iter().map(|u| u.marker.as_str()).collect();
        assert_eq!(
            markers,
            [
                "<|asset://a1/content/lables|>",
                "<|asset://zz|>",
                "<|junk|>"
            ]
        );
        assert!(
            out.unresolved[0]
                .error
                .to_string()
                .contains("available keys")
        );
        // The message is the store's, once: no source for a chain-walking reporter to repeat.
        let error = &out.unresolved[1].error;
        assert!(matches!(error, RefsError::MarkerUnresolved(_)), "{error:?}");
        assert_eq!(
            error.to_string(),
            "there is no asset with id \"zz\"; use the asset_id of one of the available assets and try again"
        );
        assert!(std::error::Error::source(error).is_none());
    }

    #[test]
    fn custom_renderer_is_used() {
        let out = render("<|asset://a1/content/name|>!", &store(), |v| {
            format!("[{}]", v.kind())
        });
        assert_eq!(out.text, "[a string]!");
    }

    proptest! {
        #[test]
        fn text_comes_back_unchanged_when_nothing_resolves(text in "(.|\n|<\\||\\|>|asset://a1|`){0,120}") {
            let empty = InMemoryStore::new();
            let out = render_default(&text, &empty);
            prop_assert_eq!(out.text, text);
        }

        #[test]
        fn text_without_markers_is_unchanged(text in "[^<]{0,300}") {
            let out = render_default(&text, &store());
            prop_assert_eq!(&out.text, &text);
            prop_assert!(out.unresolved.is_empty());
        }
    }
}
