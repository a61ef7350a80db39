//! Asset references: the object form and `asset://` URLs
//! (docs/reference/assets.md#asset-references).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::UrlError;

/// One step of a field path: a map key or an array index.
///
/// Serializes as a JSON string or a non-negative JSON integer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PathSegment {
    /// An array index (also reaches a map key written in decimal).
    Index(u64),
    /// A map key.
    Key(String),
}

impl PathSegment {
    /// The segment with a canonical decimal key (`"10"`) turned into an index (`10`), which is
    /// how it comes back from a URL. Both forms resolve to the same place.
    pub fn normalized(&self) -> PathSegment {
        match self {
            PathSegment::Key(k) => match canonical_index(k) {
                Some(i) => PathSegment::Index(i),
                None => self.clone(),
            },
            PathSegment::Index(_) => self.clone(),
        }
    }
}

impl fmt::Display for PathSegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathSegment::Index(i) => write!(f, "{i}"),
            PathSegment::Key(k) => f.write_str(k),
        }
    }
}

impl From<&str> for PathSegment {
    fn from(key: &str) -> Self {
        PathSegment::Key(key.to_owned())
    }
}

impl From<String> for PathSegment {
    fn from(key: String) -> Self {
        PathSegment::Key(key)
    }
}

impl From<u64> for PathSegment {
    fn from(index: u64) -> Self {
        PathSegment::Index(index)
    }
}

/// The value of `s` if it is a canonical decimal: `0` or `[1-9][0-9]*`, fitting in a `u64`.
///
/// Signs, spaces, underscores and leading zeros (`007`) disqualify a string, so such keys stay
/// keys.
pub fn canonical_index(s: &str) -> Option<u64> {
    let bytes = s.as_bytes();
    match bytes {
        [] => None,
        [b'0'] => Some(0),
        [b'0', ..] => None,
        _ if bytes.iter().all(u8::is_ascii_digit) => s.parse().ok(),
        _ => None,
    }
}

/// A reference to an asset, or to a field inside one.
///
/// `field_path` starts at the asset's root object, so `["content", "labels", 0]` reaches into
/// the content; an empty path means the whole asset. The URL form is available through
/// [`Display`](fmt::Display) and [`FromStr`]:
///
/// ```
/// use mnemon_types::{AssetRef, PathSegment};
///
/// let r: AssetRef = "asset://a1/content/labels/0".parse()?;
/// assert_eq!(r.asset_id, "a1");
/// assert_eq!(r.field_path, vec!["content".into(), "labels".into(), PathSegment::Index(0)]);
/// assert_eq!(r.to_string(), "asset://a1/content/labels/0");
/// # Ok::<(), mnemon_types::UrlError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "ObjectForm")]
pub struct AssetRef {
    /// The referenced asset's id.
    pub asset_id: String,
    /// The path from the asset's root; empty for the whole asset.
    #[serde(default)]
    pub field_path: Vec<PathSegment>,
}

/// The object form as written, before the id is checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectForm {
    asset_id: String,
    #[serde(default)]
    field_path: Vec<PathSegment>,
}

impl TryFrom<ObjectForm> for AssetRef {
    type Error = UrlError;

    fn try_from(form: ObjectForm) -> Result<Self, Self::Error> {
        if form.asset_id.is_empty() {
            return Err(UrlError::EmptyId);
        }
        Ok(AssetRef {
            asset_id: form.asset_id,
            field_path: form.field_path,
        })
    }
}

/// The URL scheme prefix, lowercase as written.
const SCHEME: &str = "asset://";

impl AssetRef {
    /// A reference to a whole asset.
    pub fn new(asset_id: impl Into<String>) -> Self {
        AssetRef {
            asset_id: asset_id.into(),
            field_path: Vec::new(),
        }
    }

    /// This reference extended by one segment.
    pub fn child(mut self, segment: impl Into<PathSegment>) -> Self {
        self.field_path.push(segment.into());
        self
    }

    /// Parses an `asset://` URL (docs/reference/assets.md#url-grammar).
    pub fn parse_url(url: &str) -> Result<AssetRef, UrlError> {
        let rest = url
            .get(..SCHEME.len())
            .filter(|s| s.eq_ignore_ascii_case(SCHEME))
            .and_then(|_| url.get(SCHEME.len()..))
            .ok_or_else(|| UrlError::WrongScheme {
                found: url.chars().take(40).collect(),
            })?;
        check_characters(rest, SCHEME.len())?;
        let mut offset = SCHEME.len();
        let mut id = None;
        let mut field_path = Vec::new();
        for part in rest.split('/') {
            let decoded = decode(part, offset)?;
            offset += part.len() + 1;
            match id {
                None => id = Some(decoded),
                Some(_) => field_path.push(PathSegment::Key(decoded).normalized()),
            }
        }
        let id = id.filter(|id| !id.is_empty()).ok_or(UrlError::EmptyId)?;
        Ok(AssetRef {
            asset_id: id,
            field_path,
        })
    }

    /// The canonical URL: everything outside RFC 3986 `unreserved` is percent-encoded, so every
    /// id and key round-trips through [`AssetRef::parse_url`].
    pub fn to_url(&self) -> String {
        let mut url = String::from(SCHEME);
        encode_into(&self.asset_id, &mut url);
        for segment in &self.field_path {
            url.push('/');
            match segment {
                PathSegment::Index(i) => url.push_str(&i.to_string()),
                PathSegment::Key(k) => encode_into(k, &mut url),
            }
        }
        url
    }

    /// The same reference with every canonical decimal key turned into an index, as parsing its
    /// URL would give. Two references are equivalent when their normalized forms are equal.
    pub fn normalized(&self) -> AssetRef {
        AssetRef {
            asset_id: self.asset_id.clone(),
            field_path: self
                .field_path
                .iter()
                .map(PathSegment::normalized)
                .collect(),
        }
    }

    /// The URL of the first `len` segments of this reference; used in error messages to name the
    /// place that was reached.
    pub fn url_prefix(&self, len: usize) -> String {
        AssetRef {
            asset_id: self.asset_id.clone(),
            field_path: self.field_path.iter().take(len).cloned().collect(),
        }
        .to_url()
    }
}

impl fmt::Display for AssetRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_url())
    }
}

impl FromStr for AssetRef {
    type Err = UrlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AssetRef::parse_url(s)
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn is_pchar_literal(b: u8) -> bool {
    is_unreserved(b)
        || matches!(
            b,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
}

/// Rejects every character outside the grammar, with a specific error for the common mistakes.
fn check_characters(rest: &str, base: usize) -> Result<(), UrlError> {
    for (i, ch) in rest.char_indices() {
        let position = base + i;
        match ch {
            '/' | '%' => {}
            '?' => return Err(UrlError::QueryNotAllowed { position }),
            '#' => return Err(UrlError::FragmentNotAllowed { position }),
            c if c.is_whitespace() => {
                return Err(UrlError::WhitespaceNotAllowed { position, found: c });
            }
            c if c.is_ascii() && is_pchar_literal(c as u8) => {}
            c => {
                return Err(UrlError::InvalidCharacter { position, found: c });
            }
        }
    }
    Ok(())
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decodes one id or segment (already checked for allowed characters).
fn decode(part: &str, offset: usize) -> Result<String, UrlError> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hi = bytes.get(i + 1).copied().and_then(hex_value);
            let lo = bytes.get(i + 2).copied().and_then(hex_value);
            match (hi, lo) {
                (Some(hi), Some(lo)) => out.push(hi << 4 | lo),
                _ => {
                    return Err(UrlError::BadPercentEscape {
                        position: offset + i,
                        found: part
                            .get(i..(i + 3).min(part.len()))
                            .unwrap_or("%")
                            .to_owned(),
                    });
                }
            }
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| UrlError::InvalidUtf8 {
        part: part.to_owned(),
    })
}

fn encode_into(s: &str, out: &mut String) {
    for &b in s.as_bytes() {
        if is_unreserved(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn key(s: &str) -> PathSegment {
        PathSegment::Key(s.to_owned())
    }

    #[test]
    fn spec_examples_parse() {
        let r = AssetRef::parse_url("asset://a1/content/labels/0").unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"asset_id": "a1", "field_path": ["content", "labels", 0]})
        );
        assert_eq!(
            AssetRef::parse_url("asset://a1").unwrap(),
            AssetRef::new("a1")
        );
        assert_eq!(
            AssetRef::parse_url("asset://a1/").unwrap().field_path,
            vec![key("")]
        );
    }

    #[test]
    fn scheme_is_case_insensitive_but_id_is_not() {
        let r = AssetRef::parse_url("ASSET://MyAsset/Content").unwrap();
        assert_eq!(r.asset_id, "MyAsset");
        assert_eq!(r.field_path, vec![key("Content")]);
    }

    #[test]
    fn plus_and_sub_delims_are_literal() {
        let r = AssetRef::parse_url("asset://a+b/x:y@z/!$&'()*,;=").unwrap();
        assert_eq!(r.asset_id, "a+b");
        assert_eq!(r.field_path, vec![key("x:y@z"), key("!$&'()*,;=")]);
    }

    #[test]
    fn canonical_decimals_become_indices() {
        let r = AssetRef::parse_url("asset://a/0/10/007/-1/1_0/99999999999999999999999").unwrap();
        assert_eq!(
            r.field_path,
            vec![
                PathSegment::Index(0),
                PathSegment::Index(10),
                key("007"),
                key("-1"),
                key("1_0"),
                key("99999999999999999999999"),
            ]
        );
    }

    #[test]
    fn percent_decoding_is_utf8() {
        let r = AssetRef::parse_url("asset://caf%C3%A9/a%2Fb/%25/%20x").unwrap();
        assert_eq!(r.asset_id, "café");
        assert_eq!(r.field_path, vec![key("a/b"), key("%"), key(" x")]);
    }

    #[test]
    fn each_invalid_url_has_its_own_error() {
        type Check = fn(&UrlError) -> bool;
        let cases: &[(&str, Check)] = &[
            ("asset://", |e| matches!(e, UrlError::EmptyId)),
            ("asset:///x", |e| matches!(e, UrlError::EmptyId)),
            ("asset://a1?x=1", |e| {
                matches!(e, UrlError::QueryNotAllowed { position: 10 })
            }),
            ("asset://a1#frag", |e| {
                matches!(e, UrlError::FragmentNotAllowed { .. })
            }),
            ("asset://a1/%zz", |e| {
                matches!(e, UrlError::BadPercentEscape { .. })
            }),
            ("asset://a1/%4", |e| {
                matches!(e, UrlError::BadPercentEscape { .. })
            }),
            ("asset://a1/%FF%FE", |e| {
                matches!(e, UrlError::InvalidUtf8 { .. })
            }),
            ("asset://a1/has space", |e| {
                matches!(e, UrlError::WhitespaceNotAllowed { .. })
            }),
            ("http://a1/x", |e| matches!(e, UrlError::WrongScheme { .. })),
            ("asset:/a1", |e| matches!(e, UrlError::WrongScheme { .. })),
            ("asset://a1/<x>", |e| {
                matches!(e, UrlError::InvalidCharacter { found: '<', .. })
            }),
            ("asset://a1/é", |e| {
                matches!(e, UrlError::InvalidCharacter { found: 'é', .. })
            }),
        ];
        let mut messages = std::collections::HashSet::new();
        for (url, check) in cases {
            let err = AssetRef::parse_url(url).unwrap_err();
            assert!(check(&err), "{url}: unexpected error {err:?}");
            messages.insert(err.to_string());
        }
        // Every message is distinct and names what to fix.
        assert!(messages.len() >= 10);
    }

    #[test]
    fn writer_encodes_everything_outside_unreserved() {
        let r = AssetRef::new("a b/c")
            .child("x+y")
            .child(PathSegment::Index(3))
            .child("ü");
        assert_eq!(r.to_url(), "asset://a%20b%2Fc/x%2By/3/%C3%BC");
    }

    #[test]
    fn object_form_serde() {
        let r: AssetRef = serde_json::from_value(json!({"asset_id": "a1"})).unwrap();
        assert_eq!(r, AssetRef::new("a1"));
        assert!(
            serde_json::from_value::<AssetRef>(json!({"asset_id": "a", "field_path": [-1]}))
                .is_err()
        );
        assert!(serde_json::from_value::<AssetRef>(json!({"asset_id": "a", "other": 1})).is_err());
    }

    fn segment() -> impl Strategy<Value = PathSegment> {
        prop_oneof![
            any::<u64>().prop_map(PathSegment::Index),
            any::<String>().prop_map(PathSegment::Key),
            "[0-9]{1,4}".prop_map(PathSegment::Key),
            "[/%+ ?#~]{0,4}".prop_map(PathSegment::Key),
            Just(PathSegment::Key(String::new())),
        ]
    }

    proptest! {
        #[test]
        fn write_then_parse_round_trips(
            id in prop_oneof![".+", "[/%+ 0-9]{1,5}"],
            path in proptest::collection::vec(segment(), 0..6),
        ) {
            let r = AssetRef { asset_id: id, field_path: path };
            let parsed = AssetRef::parse_url(&r.to_url()).unwrap();
            prop_assert_eq!(parsed, r.normalized());
        }

        #[test]
        fn parser_never_panics(s in ".*") {
            let _ = AssetRef::parse_url(&s);
            let _ = AssetRef::parse_url(&format!("asset://{s}"));
        }

        #[test]
        fn parser_never_panics_on_url_like_bytes(s in "asset://[a-zA-Z0-9%/?#+ ]{0,20}") {
            let _ = AssetRef::parse_url(&s);
        }
    }
}
