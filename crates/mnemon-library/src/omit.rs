//! The omit grammar (docs/reference/library.md#omit-grammar), shared by stored `omit` and the query
//! argument.

use serde_json::Value;

use crate::error::{LibraryError, Result};
use crate::python::display_value;

/// One legal omit item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OmitKey {
    /// `*`: no bits at all.
    All,
    /// `""`: omit nothing.
    Nothing,
    /// `similarity`.
    Similarity,
    /// `embedding`.
    Embedding,
    /// `token_count`.
    TokenCount,
    /// `info`.
    Info,
    /// `access_tag`.
    AccessTag,
}

impl OmitKey {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "*" => OmitKey::All,
            "" => OmitKey::Nothing,
            "similarity" => OmitKey::Similarity,
            "embedding" => OmitKey::Embedding,
            "token_count" => OmitKey::TokenCount,
            "info" => OmitKey::Info,
            "access_tag" => OmitKey::AccessTag,
            _ => return None,
        })
    }

    /// The item as written.
    pub fn as_str(self) -> &'static str {
        match self {
            OmitKey::All => "*",
            OmitKey::Nothing => "",
            OmitKey::Similarity => "similarity",
            OmitKey::Embedding => "embedding",
            OmitKey::TokenCount => "token_count",
            OmitKey::Info => "info",
            OmitKey::AccessTag => "access_tag",
        }
    }
}

/// A validated omit list: its items in the given order without duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Omit {
    items: Vec<OmitKey>,
}

impl Default for Omit {
    /// The query default: `embedding`.
    fn default() -> Self {
        Omit {
            items: vec![OmitKey::Embedding],
        }
    }
}

impl Omit {
    /// Omits nothing.
    pub fn nothing() -> Self {
        Omit {
            items: vec![OmitKey::Nothing],
        }
    }

    /// Parses a comma-separated string.
    pub fn parse_str(s: &str) -> Result<Self> {
        let items: Vec<Value> = s.split(',').map(|p| Value::String(p.to_owned())).collect();
        Self::from_items(&items)
    }

    /// Parses a JSON value: a string or a list of strings.
    pub fn parse_value(value: &Value) -> Result<Self> {
        match value {
            Value::String(s) => Self::parse_str(s),
            Value::Array(items) if items.is_empty() => Self::parse_str(""),
            Value::Array(items) => Self::from_items(items),
            _ => Err(LibraryError::OmitBadType),
        }
    }

    fn from_items(items: &[Value]) -> Result<Self> {
        let many = items.len() > 1;
        let mut out: Vec<OmitKey> = Vec::new();
        for item in items {
            let key = item
                .as_str()
                .and_then(OmitKey::parse)
                .ok_or_else(|| LibraryError::IllegalOmitKey(display_value(item)))?;
            if many && key == OmitKey::Nothing {
                return Err(LibraryError::EmptyOmitNotAlone);
            }
            if many && key == OmitKey::All {
                return Err(LibraryError::StarOmitNotAlone);
            }
            if !out.contains(&key) {
                out.push(key);
            }
        }
        Ok(Omit { items: out })
    }

    /// Whether `*` was given.
    pub fn all(&self) -> bool {
        self.items.contains(&OmitKey::All)
    }

    /// Whether `key` is listed.
    pub fn contains(&self, key: OmitKey) -> bool {
        self.items.contains(&key)
    }

    /// Whether the field named `field` is listed.
    pub fn contains_field(&self, field: &str) -> bool {
        OmitKey::parse(field)
            .is_some_and(|k| k != OmitKey::All && k != OmitKey::Nothing && self.contains(k))
    }

    /// The listed field names (without `*` and `""`), in order.
    pub fn fields(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.items
            .iter()
            .filter(|k| !matches!(k, OmitKey::All | OmitKey::Nothing))
            .map(|k| k.as_str())
    }

    /// The echo written into results: the items joined by `,`.
    pub fn echo(&self) -> String {
        self.items
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The `omit` value written into query results: the single item as a string (`"embedding"`,
    /// `""`, `"*"`), or a list of the items when there are several (`["embedding",
    /// "similarity"]`). The reference echoes `"embedding,similarity"`, which the TypeScript
    /// client `@polymath-ai/client` rejects: it accepts one field name or a list.
    pub fn echo_value(&self) -> Value {
        match self.items.as_slice() {
            [one] => Value::from(one.as_str()),
            [] => Value::from(""),
            many => Value::Array(many.iter().map(|k| Value::from(k.as_str())).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        Omit::parse_value(&v).unwrap_err().to_string()
    }

    #[test]
    fn grammar() {
        assert_eq!(
            err(json!("embedding, similarity")),
            "Illegal omit key type:  similarity"
        );
        assert_eq!(
            err(json!(["*", "bogus"])),
            "If '*' is provided, it must be the only item."
        );
        assert_eq!(err(json!(["bogus", "*"])), "Illegal omit key type: bogus");
        assert_eq!(
            err(json!(["", "info"])),
            "If '' is provided, it must be the only item."
        );
        assert_eq!(err(json!([1])), "Illegal omit key type: 1");
        assert_eq!(err(json!(5)), "omit must be a string or a list of strings");
        assert_eq!(err(json!("Embedding")), "Illegal omit key type: Embedding");
        let o = Omit::parse_value(&json!("embedding,similarity,embedding")).unwrap();
        assert_eq!(o.echo(), "embedding,similarity");
        assert_eq!(Omit::parse_value(&json!([])).unwrap().echo(), "");
        assert_eq!(Omit::parse_value(&json!(["info"])).unwrap().echo(), "info");
        assert!(Omit::parse_str("*").unwrap().all());
    }

    #[test]
    fn results_echo_a_list_for_several_keys() {
        for input in [
            json!("embedding,similarity"),
            json!(["embedding", "similarity"]),
        ] {
            assert_eq!(
                Omit::parse_value(&input).unwrap().echo_value(),
                json!(["embedding", "similarity"])
            );
        }
        assert_eq!(
            Omit::parse_value(&json!(["info"])).unwrap().echo_value(),
            json!("info")
        );
        assert_eq!(
            Omit::parse_value(&json!([])).unwrap().echo_value(),
            json!("")
        );
        assert_eq!(
            Omit::parse_value(&json!("*")).unwrap().echo_value(),
            json!("*")
        );
    }
}
