//! Replacing markers in text by what they reference (docs/reference/assets.md#markers-in-text).
//!
//! Each distinct reference is resolved once per call (a durable store reads the whole asset for
//! each resolution), and its rendering is copied for every later marker that repeats it.
//! [`render_limited`] also bounds the markers and the output ([`Limits`]).

use std::collections::HashMap;
use std::ops::Range;

use mnemon_store::{AssetStore, ResolveError, StoreError};
use mnemon_types::{AssetRef, Value};

use crate::error::RefsError;
use crate::fetched::Fetched;
use crate::limits::{CappedText, Limits};
use crate::scan::scan_at_most;
use crate::size::{data_url_len, json_len};

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
///
/// Each distinct reference is resolved, and `render_value` called, once; markers repeating it
/// get the same text. There is no limit on the markers or the output: for text the caller
/// trusts. Text from a client goes through [`render_limited`].
pub fn render(
    text: &str,
    store: &dyn AssetStore,
    mut render_value: impl FnMut(&Value) -> String,
) -> Rendered {
    // Without limits the output is measured after it is built: nothing can be refused.
    let mut piece = |value: &Value, _room: usize| Some(render_value(value));
    match render_with(text, store, Limits::NONE, &mut piece) {
        Ok(rendered) => rendered,
        // Unreachable without limits (no text holds usize::MAX markers or bytes); were it
        // reached, the text comes back as written with the reason, as an unrenderable one does.
        Err(error) => Rendered {
            text: text.to_owned(),
            unresolved: vec![Unresolved {
                span: 0..text.len(),
                marker: text.to_owned(),
                error,
            }],
        },
    }
}

/// [`render`] with [`default_renderer`].
pub fn render_default(text: &str, store: &dyn AssetStore) -> Rendered {
    render(text, store, default_renderer)
}

/// [`render_default`] within `limits`: for text from a client.
///
/// Fails with [`RefsError::TooManyMarkers`] before anything is resolved when the text holds
/// more than [`Limits::max_references`] markers, and with [`RefsError::RenderTooLarge`] as soon
/// as the output would pass [`Limits::max_output_bytes`]: the rendered text plus, for each
/// marker left as written, the marker and its error message (a client receives both). A value
/// whose rendering would not fit is refused before it is rendered when its size is known from
/// the value (strings, bytes, JSON), so the call never holds more than the limit of output.
///
/// ```
/// use mnemon_refs::{Limits, RefsError, render_limited};
/// use mnemon_store::{AssetStore, InMemoryStore};
/// use mnemon_types::Asset;
///
/// let store = InMemoryStore::new();
/// store.put(&Asset::from_json(serde_json::json!({"asset_id": "a1", "content": "cat"}))?)?;
/// let limits = Limits::default().with_max_output_bytes(8);
/// assert_eq!(render_limited("<|asset://a1/content|>!", &store, limits)?.text, "cat!");
/// let refused = render_limited("<|asset://a1/content|> and <|asset://a1/content|>", &store, limits);
/// assert!(matches!(refused, Err(RefsError::RenderTooLarge { limit: 8 })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn render_limited(
    text: &str,
    store: &dyn AssetStore,
    limits: Limits,
) -> Result<Rendered, RefsError> {
    render_with(text, store, limits, &mut default_piece)
}

/// What is known of a reference already met in this call.
enum Seen {
    /// Its rendering, at this range of the output.
    Rendered(Range<usize>),
    /// It does not resolve, for this reason (a storage failure is not kept: it may pass).
    Unresolvable(ResolveError),
}

/// The one rendering loop: `piece(value, room)` renders a value, or gives `None` when its
/// rendering would take more than `room` bytes.
/// What a render charges at least for the message of a marker left by a storage failure: a
/// server sends a fixed text instead of the storage's own (which names its files and hosts), up
/// to this long, and the charge keeps the answer within the output limit either way.
pub const WITHHELD_MESSAGE_BYTES: usize = 256;

fn render_with(
    text: &str,
    store: &dyn AssetStore,
    limits: Limits,
    piece: &mut dyn FnMut(&Value, usize) -> Option<String>,
) -> Result<Rendered, RefsError> {
    let markers = scan_at_most(text, limits.max_references);
    if markers.len() > limits.max_references {
        return Err(RefsError::TooManyMarkers {
            limit: limits.max_references,
        });
    }
    let mut out = CappedText::new(limits.max_output_bytes, text.len(), |limit| {
        RefsError::RenderTooLarge { limit }
    });
    let mut unresolved = Vec::new();
    let mut seen: HashMap<AssetRef, Seen> = HashMap::new();
    let mut fetched = Fetched::new(store);
    let mut copied = 0;
    for marker in markers {
        let span = marker.span;
        out.push(text.get(copied..span.start).unwrap_or_default())?;
        copied = span.end;
        let error = match marker.reference {
            Err(error) => error,
            Ok(reference) => match seen.get(&reference) {
                Some(Seen::Rendered(range)) => {
                    out.repeat(range.clone())?;
                    continue;
                }
                Some(Seen::Unresolvable(error)) => {
                    RefsError::MarkerUnresolved(StoreError::Resolve(error.clone()))
                }
                None => match fetched.resolve(&reference)? {
                    Ok(value) => {
                        let start = out.len();
                        let rendered = piece(&value, out.room()).ok_or_else(|| out.refusal())?;
                        out.push(&rendered)?;
                        seen.insert(reference, Seen::Rendered(start..out.len()));
                        continue;
                    }
                    Err(StoreError::Resolve(error)) => {
                        seen.insert(reference, Seen::Unresolvable(error.clone()));
                        RefsError::MarkerUnresolved(StoreError::Resolve(error))
                    }
                    Err(error) => RefsError::MarkerUnresolved(error),
                },
            },
        };
        let original = text.get(span.clone()).unwrap_or_default();
        out.push(original)?;
        // The report goes to the client too: the marker again and the message (which can list
        // an asset's keys), so both count. A storage failure's message is charged at least
        // [`WITHHELD_MESSAGE_BYTES`]: a server sends a fixed text of up to that size instead.
        let mut message = error.to_string().len();
        if !error.is_caller_error() {
            message = message.max(WITHHELD_MESSAGE_BYTES);
        }
        out.charge(original.len().saturating_add(message))?;
        unresolved.push(Unresolved {
            span,
            marker: original.to_owned(),
            error,
        });
    }
    out.push(text.get(copied..).unwrap_or_default())?;
    Ok(Rendered {
        text: out.into_string(),
        unresolved,
    })
}

/// The default rendering of a referenced value in text:
/// - strings as they are;
/// - bytes as a `data:` URL (so an image embeds in Markdown), except bytes with a `text/…`
///   media type that are valid UTF-8, which render as that text;
/// - objects through [`AssetObject::to_text`](mnemon_types::AssetObject::to_text);
/// - anything else as compact JSON (bytes inside it as `data:` URLs, objects as their JSON).
pub fn default_renderer(value: &Value) -> String {
    default_piece(value, usize::MAX).unwrap_or_default()
}

/// [`default_renderer`], or `None` when the rendering would take more than `room` bytes: told
/// from the value before anything is built, except for in-process objects (whose text only
/// they can give).
fn default_piece(value: &Value, room: usize) -> Option<String> {
    match value {
        Value::String(s) => (s.len() <= room).then(|| s.clone()),
        Value::Bytes(b) => {
            let is_text = b.media_type().is_some_and(|m| m.starts_with("text/"));
            match std::str::from_utf8(b.data()) {
                Ok(text) if is_text => (text.len() <= room).then(|| text.to_owned()),
                _ => (data_url_len(b) <= room).then(|| b.to_data_url()),
            }
        }
        Value::Object(o) => Some(o.get().to_text()).filter(|text| text.len() <= room),
        other => {
            json_len(other, room)?;
            Some(serde_json::to_string(other).unwrap_or_default())
        }
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

    /// Markers repeating a reference read the store once per distinct reference: 1,000 copies
    /// of one marker cost one read, not 1,000 (each one a whole asset read on a durable store);
    /// and references into one asset read it once.
    #[test]
    fn each_distinct_reference_is_resolved_once() {
        let asset =
            Asset::from_json(json!({"asset_id": "a1", "content": {"name": "Tom"}})).unwrap();
        let counting = crate::test_store::CountingStore::with(&[asset]);
        let text = "<|asset://a1/content/name|> <|asset://a1/content/nope|> ".repeat(1_000);
        let out = render_default(&text, &counting);
        assert_eq!(counting.reads(), 1);
        assert_eq!(out.text, "Tom <|asset://a1/content/nope|> ".repeat(1_000));
        // Every copy of the unresolved marker is still reported, with its own span.
        assert_eq!(out.unresolved.len(), 1_000);
        let second = &out.unresolved[1];
        assert_eq!(&text[second.span.clone()], "<|asset://a1/content/nope|>");
        assert!(second.error.to_string().contains("has no key \"nope\""));
    }

    /// A store holding `big`: 3,000 bytes of PNG, a 4,026-byte `data:` URL.
    fn big_store() -> crate::test_store::CountingStore {
        let image = Bytes::with_media_type(vec![1u8; 3_000], "image/png");
        crate::test_store::CountingStore::with(&[Asset::new(Value::Bytes(image)).with_id("big")])
    }

    const URL_LEN: usize = 22 + 4_000;

    #[test]
    fn the_output_stays_within_the_limit() {
        let store = big_store();
        let limits = Limits::default().with_max_output_bytes(3 * URL_LEN + 3);
        // Three copies and their separators fit exactly.
        let text = "<|asset://big/content|> ".repeat(3);
        let out = render_limited(&text, &store, limits).unwrap();
        assert_eq!(out.text.len(), 3 * URL_LEN + 3);
        // A fourth is refused, whether the value is new or repeated.
        let text = "<|asset://big/content|> ".repeat(4);
        let err = render_limited(&text, &store, limits).unwrap_err();
        assert!(matches!(err, RefsError::RenderTooLarge { limit } if limit == 3 * URL_LEN + 3));
        assert!(
            err.to_string().contains("render fewer markers per call"),
            "{err}"
        );
        // Text around markers counts as well.
        let text = format!("{}<|asset://big/content|>", "x".repeat(3 * URL_LEN));
        assert!(render_limited(&text, &store, limits).is_err());
        let text = "x".repeat(3 * URL_LEN + 4);
        assert!(render_limited(&text, &store, limits).is_err());
    }

    /// A value that cannot fit is refused from its size, before its rendering is built.
    #[test]
    fn a_piece_larger_than_the_room_is_refused_unbuilt() {
        let store = big_store();
        let limits = Limits::default().with_max_output_bytes(URL_LEN - 1);
        let mut built = 0;
        let mut piece = |value: &Value, room: usize| {
            let fits = default_piece(value, room);
            built += usize::from(fits.is_some());
            fits
        };
        let refused = render_with("<|asset://big/content|>", &store, limits, &mut piece);
        assert!(matches!(refused, Err(RefsError::RenderTooLarge { .. })));
        assert_eq!(built, 0);
        // Each kind of value is measured before it is rendered.
        let json = Value::from_json(json!({"a": ["\n", 1.5, null, true]}));
        let written = serde_json::to_string(&json).unwrap();
        assert_eq!(default_piece(&json, written.len()), Some(written.clone()));
        assert_eq!(default_piece(&json, written.len() - 1), None);
        let text = Value::Bytes(Bytes::with_media_type(b"hi".to_vec(), "text/plain"));
        assert_eq!(default_piece(&text, 2).as_deref(), Some("hi"));
        assert_eq!(default_piece(&text, 1), None);
        assert_eq!(default_piece(&Value::from("abc"), 2), None);
    }

    /// Markers left as written count with their messages, so a text of unresolvable markers
    /// whose messages are long cannot grow the report past the limit either.
    #[test]
    fn reports_of_unresolved_markers_count() {
        let store = big_store();
        let marker = "<|asset://nope|>";
        let message = "there is no asset with id \"nope\"; use the asset_id of one of the available assets and try again";
        let limits =
            Limits::default().with_max_output_bytes(2 * (2 * marker.len() + message.len()));
        let out = render_limited(&marker.repeat(2), &store, limits).unwrap();
        assert_eq!(out.unresolved.len(), 2);
        assert_eq!(out.unresolved[0].error.to_string(), message);
        assert!(render_limited(&marker.repeat(3), &store, limits).is_err());
    }

    #[test]
    fn too_many_markers_are_refused_before_any_is_resolved() {
        let store = big_store();
        let limits = Limits::default().with_max_references(3);
        let text = "<|asset://big/content|> <|junk|> <|asset://x|>";
        assert_eq!(
            render_limited(text, &store, limits)
                .unwrap()
                .unresolved
                .len(),
            2
        );
        let text = format!("{text} `<|in code|>` <|asset://big/content|>");
        let err = render_limited(&text, &store, limits).unwrap_err();
        assert!(
            matches!(err, RefsError::TooManyMarkers { limit: 3 }),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "the text holds more than 3 markers, the most one render resolves; split the text and render the parts in separate calls"
        );
        assert_eq!(store.reads(), 2);
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
