//! Recognising a reference inside a JSON value (docs/reference/assets.md#tool-call-parameters).

use mnemon_types::AssetRef;

/// What a JSON value is, as far as references go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detected {
    /// Not written as a reference: passed through.
    Plain,
    /// A valid reference.
    Reference(AssetRef),
    /// Written as a reference (an object with exactly `asset_id` and `field_path`, or a string
    /// starting with `asset://`), but invalid; the text says why.
    Invalid(String),
}

/// Classifies `value`: an object with exactly the keys `asset_id` and `field_path`, or a string
/// that is an `asset://` URL, optionally wrapped in `<| |>` (which may also wrap the JSON object
/// form), is a reference. Surrounding white space is ignored; the URL scheme is matched without
/// regard to case.
///
/// ```
/// use mnemon_refs::{detect_reference, Detected};
/// use serde_json::json;
///
/// assert!(matches!(detect_reference(&json!("<|asset://a1/content|>")), Detected::Reference(_)));
/// assert!(matches!(detect_reference(&json!({"asset_id": "a1", "field_path": []})), Detected::Reference(_)));
/// assert_eq!(detect_reference(&json!("a cat")), Detected::Plain);
/// assert!(matches!(detect_reference(&json!("asset://a1?x")), Detected::Invalid(_)));
/// ```
pub fn detect_reference(value: &serde_json::Value) -> Detected {
    match value {
        serde_json::Value::Object(map) => {
            let exact =
                map.len() == 2 && map.contains_key("asset_id") && map.contains_key("field_path");
            if exact {
                from_object(value.clone())
            } else {
                Detected::Plain
            }
        }
        serde_json::Value::String(s) => detect_in_string(s),
        _ => Detected::Plain,
    }
}

fn detect_in_string(s: &str) -> Detected {
    let trimmed = s.trim();
    let (inner, wrapped) = match trimmed
        .strip_prefix("<|")
        .and_then(|rest| rest.strip_suffix("|>"))
    {
        Some(inner) => (inner.trim(), true),
        None => (trimmed, false),
    };
    if wrapped && inner.starts_with('{') {
        return match serde_json::from_str::<serde_json::Value>(inner) {
            Ok(json) => from_object(json),
            Err(e) => Detected::Invalid(format!("the JSON inside <| |> does not parse: {e}")),
        };
    }
    let is_url = inner
        .get(..8)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("asset://"));
    if !is_url {
        return if wrapped {
            Detected::Invalid(format!(
                "{inner:?} inside <| |> is not an asset URL; write <|asset://ASSET_ID/FIELD/...|>"
            ))
        } else {
            Detected::Plain
        };
    }
    match AssetRef::parse_url(inner) {
        Ok(r) => Detected::Reference(r),
        Err(e) => Detected::Invalid(e.to_string()),
    }
}

/// The object form: `asset_id` (a non-empty string) and `field_path` (strings and non-negative
/// integers).
pub(crate) fn from_object(json: serde_json::Value) -> Detected {
    match serde_json::from_value::<AssetRef>(json) {
        Ok(r) if r.asset_id.is_empty() => Detected::Invalid(
            "asset_id is empty; write the id of one of the available assets".to_owned(),
        ),
        Ok(r) => Detected::Reference(r),
        Err(e) => Detected::Invalid(format!(
            "not a valid object-form reference ({e}); write {{\"asset_id\": \"ID\", \"field_path\": [\"content\", 0]}} with keys as strings and indices as non-negative integers"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon_types::PathSegment;
    use serde_json::json;

    #[test]
    fn forms_are_recognised() {
        let want = AssetRef::new("a1")
            .child("content")
            .child(PathSegment::Index(0));
        for v in [
            json!("asset://a1/content/0"),
            json!("  ASSET://a1/content/0 "),
            json!("<|asset://a1/content/0|>"),
            json!("<| asset://a1/content/0 |>"),
            json!({"asset_id": "a1", "field_path": ["content", 0]}),
            json!("<|{\"asset_id\":\"a1\",\"field_path\":[\"content\",0]}|>"),
        ] {
            assert_eq!(
                detect_reference(&v),
                Detected::Reference(want.clone()),
                "{v}"
            );
        }
    }

    #[test]
    fn plain_values_pass() {
        for v in [
            json!("cat"),
            json!("see asset://a1 here"),
            json!(3),
            json!(null),
            json!({"asset_id": "a1"}),
            json!({"asset_id": "a1", "field_path": [], "x": 1}),
            json!(["asset://a1"]),
        ] {
            assert_eq!(detect_reference(&v), Detected::Plain, "{v}");
        }
    }

    #[test]
    fn broken_references_are_invalid_not_plain() {
        for v in [
            json!("asset://a1/con tent"),
            json!("asset://"),
            json!("<|not a url|>"),
            json!("<|{\"asset_id\": |>"),
            json!({"asset_id": "a1", "field_path": [-1]}),
            json!({"asset_id": "", "field_path": []}),
            json!({"asset_id": 5, "field_path": []}),
        ] {
            assert!(matches!(detect_reference(&v), Detected::Invalid(_)), "{v}");
        }
    }
}
