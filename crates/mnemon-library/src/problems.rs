//! [`Library::problems`]: every fault in library JSON, for a validator (`mnemon library
//! validate`) that reports more than the first.

use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Value};

use crate::builder::{RawBit, check_bit, int_of};
use crate::error::LibraryError;
use crate::id::BitId;
use crate::library::Library;
use crate::load::known_dimension;
use crate::omit::Omit;

/// One problem found by [`Library::problems`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Problem {
    /// The bit's index in file order (for a version-0 file, after the upgrade), or `None` for
    /// a problem of the top level.
    pub bit: Option<usize>,
    /// For a version-0 file, the bit's key in `content`.
    pub content_key: Option<String>,
    /// What is wrong.
    pub kind: ProblemKind,
}

/// What a [`Problem`] is.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProblemKind {
    /// A fault that makes loading fail; the error is the one loading would give for it.
    Error(LibraryError),
    /// The bit has the same id as an earlier one. Not an error: loading keeps the first copy
    /// and drops this one.
    Duplicate {
        /// The shared id.
        id: BitId,
        /// The index of the first copy.
        first: usize,
    },
}

impl Problem {
    fn top(error: LibraryError) -> Self {
        Problem {
            bit: None,
            content_key: None,
            kind: ProblemKind::Error(error),
        }
    }

    /// Whether the problem makes loading fail (a duplicate does not).
    pub fn is_error(&self) -> bool {
        matches!(self.kind, ProblemKind::Error(_))
    }

    /// The field at fault (see [`LibraryError::field`]), if the problem is about one.
    pub fn field(&self) -> Option<&str> {
        match &self.kind {
            ProblemKind::Error(e) => e.field(),
            ProblemKind::Duplicate { .. } => None,
        }
    }
}

/// `bit 3, field "embedding": <message>`, `top level, field "version": Version invalid`,
/// `bit 5: duplicate of bit 2 (id …); loading keeps the first`.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.bit {
            Some(i) => write!(f, "bit {i}")?,
            None => f.write_str("top level")?,
        }
        if let Some(key) = &self.content_key {
            write!(f, " (content key {})", Value::from(key.as_str()))?;
        }
        if let Some(field) = self.field() {
            write!(f, ", field \"{field}\"")?;
        }
        match &self.kind {
            ProblemKind::Error(e) => write!(f, ": {e}"),
            ProblemKind::Duplicate { id, first } => write!(
                f,
                ": duplicate of bit {first} (id {id}); loading keeps the first and drops this one"
            ),
        }
    }
}

/// Where the bits of a file are, once the version is known.
enum BitsSource {
    /// Version 1: the `bits` value, checked after the model and omit as loading does.
    V1,
    /// Version 0: `content` values in `sort.ids` order (or key order), with their keys.
    V0(Vec<(String, Value)>),
    /// Nothing to check.
    None,
}

impl Library {
    /// Every problem in library JSON, where loading stops at the first: all top-level faults
    /// (version, `embedding_model`, `omit`, `bits`, a version-0 file's `content` and
    /// `sort.ids`), then every fault of every bit with its index and field, each bit checked
    /// against the dimension set by the bits before it. Duplicate ids, which loading drops
    /// silently, are reported as [`ProblemKind::Duplicate`]. The first error is the one loading
    /// reports; no error means the file loads.
    pub fn problems(bytes: &[u8]) -> Vec<Problem> {
        let top: Map<String, Value> = match serde_json::from_slice(bytes) {
            Ok(Value::Object(top)) => top,
            Ok(_) => {
                return vec![Problem::top(LibraryError::InvalidJson(
                    "expected a JSON object at the top level".into(),
                ))];
            }
            Err(e) => return vec![Problem::top(LibraryError::InvalidJson(e.to_string()))],
        };
        let mut out = Vec::new();

        // Version and upgrade. A bad version is reported and the bits are still checked,
        // read as version 1 when there is a `bits` key and as version 0 otherwise.
        let version = match top.get("version") {
            None => Some(0),
            Some(v) => int_of(v),
        };
        let source = match version {
            Some(0) => version_zero_bits(&top, &mut out),
            Some(1) => BitsSource::V1,
            _ => {
                out.push(Problem::top(LibraryError::VersionInvalid));
                if top.contains_key("bits") || !top.contains_key("content") {
                    BitsSource::V1
                } else {
                    version_zero_bits(&top, &mut out)
                }
            }
        };

        let model = match top.get("embedding_model") {
            Some(Value::String(m)) if !m.is_empty() => Some(m.as_str()),
            _ => {
                out.push(Problem::top(LibraryError::InvalidModel));
                None
            }
        };
        let mut omit = match top.get("omit") {
            None => None,
            Some(Value::String(s)) => match Omit::parse_str(s) {
                Ok(o) => Some(o),
                Err(e) => {
                    out.push(Problem::top(e));
                    None
                }
            },
            Some(_) => {
                out.push(Problem::top(LibraryError::OmitNotString));
                None
            }
        };

        let bits: Vec<(Option<String>, &Value)> = match &source {
            BitsSource::V1 => match top.get("bits") {
                Some(Value::Array(bits)) => bits.iter().map(|b| (None, b)).collect(),
                Some(_) => {
                    out.push(Problem::top(LibraryError::BitsNotList));
                    Vec::new()
                }
                None => {
                    out.push(Problem::top(LibraryError::MissingBits));
                    Vec::new()
                }
            },
            BitsSource::V0(bits) => bits.iter().map(|(k, b)| (Some(k.clone()), b)).collect(),
            BitsSource::None => Vec::new(),
        };
        if omit.as_ref().is_some_and(Omit::all) && !bits.is_empty() {
            out.push(Problem::top(LibraryError::OmitAllButBits));
            // Checking bits against "omit everything" says nothing more; check them plainly.
            omit = None;
        }

        let mut dim = model.and_then(known_dimension);
        let mut first_of: HashMap<BitId, usize> = HashMap::new();
        for (index, (content_key, bit)) in bits.into_iter().enumerate() {
            let report = check_bit(index, &RawBit::from_value(bit), dim, omit.as_ref());
            if dim.is_none() {
                dim = report.dimension.filter(|&d| d > 0);
            }
            if report.faults.is_empty()
                && let Some(id) = report.id
            {
                if let Some(&first) = first_of.get(&id) {
                    out.push(Problem {
                        bit: Some(index),
                        content_key,
                        kind: ProblemKind::Duplicate { id, first },
                    });
                } else {
                    first_of.insert(id, index);
                }
                continue;
            }
            out.extend(report.faults.into_iter().map(|e| Problem {
                bit: Some(index),
                content_key: content_key.clone(),
                kind: ProblemKind::Error(e),
            }));
        }
        out
    }
}

/// The bits of a version-0 file in upgrade order (docs/reference/library.md#version-0-files),
/// reporting a missing `content` and every unknown `sort.ids` entry.
fn version_zero_bits(top: &Map<String, Value>, out: &mut Vec<Problem>) -> BitsSource {
    let Some(Value::Object(content)) = top.get("content") else {
        out.push(Problem::top(LibraryError::MissingContent));
        return BitsSource::None;
    };
    let ids = crate::load::v0_sort_ids(top.get("sort").and_then(|s| s.get("ids")));
    if ids.is_empty() {
        return BitsSource::V0(
            content
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        );
    }
    let mut left = content.clone();
    let mut bits = Vec::with_capacity(ids.len());
    for key in ids {
        // As in the upgrade, an id listed twice is unknown the second time (`swap_remove`:
        // constant time, and the order of `left` is not used).
        match left.swap_remove(&key) {
            Some(v) => bits.push((key, v)),
            None => out.push(Problem::top(LibraryError::UnknownSortId(key))),
        }
    }
    BitsSource::V0(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_vector;
    use proptest::prelude::*;
    use serde_json::json;

    fn bit(text: &str, v: &[f32]) -> Value {
        json!({"text": text, "info": {"url": format!("https://x/{text}")},
               "embedding": encode_vector(v), "token_count": 3})
    }

    fn listed(doc: &Value) -> Vec<String> {
        Library::problems(&serde_json::to_vec(doc).unwrap())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn every_fault_of_every_bit_and_the_top_level() {
        let id = |t: &str| BitId::of(&format!("https://x/{t}"), t).to_string();
        let mut b1 = bit("b", &[1.0, 2.0, 3.0]);
        b1["token_count"] = json!(2.5);
        b1["access_tag"] = json!(7);
        let mut b3 = bit("d", &[1.0, 2.0]);
        b3["embedding"] = json!("AA-A");
        b3["info"] = json!({"title": "no url"});
        b3.as_object_mut().unwrap().remove("token_count");
        let doc = json!({"version": "one", "embedding_model": "", "omit": "nope", "bits": [
            bit("a", &[1.0, 2.0]),
            b1,
            5,
            b3,
            bit("a", &[1.0, 2.0]),
        ]});
        let d_id = BitId::of("", "d").to_string();
        assert_eq!(
            listed(&doc),
            [
                "top level, field \"version\": Version invalid".to_owned(),
                "top level, field \"embedding_model\": Invalid model name".to_owned(),
                "top level, field \"omit\": Illegal omit key type: nope".to_owned(),
                format!(
                    "bit 1, field \"embedding\": {} had the wrong length of embedding, expected 2",
                    id("b")
                ),
                "bit 1, field \"token_count\": token_count not int as expected".to_owned(),
                format!(
                    "bit 1, field \"access_tag\": {} access_tag not str as expected",
                    id("b")
                ),
                "bit 2: bit 2 is not an object".to_owned(),
                format!(
                    "bit 3, field \"embedding\": {d_id} has an invalid embedding: not valid \
                     base64: invalid character '-' at offset 2"
                ),
                format!("bit 3, field \"token_count\": {d_id} is missing token_count"),
                format!("bit 3, field \"info.url\": {d_id} info is missing required url"),
                format!(
                    "bit 4: duplicate of bit 0 (id {}); loading keeps the first and drops this one",
                    id("a")
                ),
            ]
        );
        let problems = Library::problems(&serde_json::to_vec(&doc).unwrap());
        assert_eq!(problems.iter().filter(|p| p.is_error()).count(), 10);
        assert_eq!(problems[4].bit, Some(1));
        assert_eq!(problems[4].field(), Some("token_count"));
    }

    #[test]
    fn version_zero_bits_are_reported_with_index_and_key() {
        let mut bad = bit("y", &[1.0]);
        bad["text"] = json!(3);
        bad.as_object_mut().unwrap().remove("info");
        let doc = json!({"embedding_model": "m", "omit": "similarity",
            "content": {"x": bit("x", &[1.0]), "y": bad, "z": {"similarity": 1}},
            "sort": {"ids": ["y", "q", "x", "z"]}});
        let id_y = BitId::of("", "").to_string();
        let z_id = BitId::of("", "").to_string();
        assert_eq!(
            listed(&doc),
            [
                "top level, field \"sort.ids\": sort.ids names unknown bit q".to_owned(),
                "bit 0 (content key \"y\"), field \"text\": bit 0 text not str as expected"
                    .to_owned(),
                format!("bit 0 (content key \"y\"), field \"info\": {id_y} is missing info"),
                "bit 2 (content key \"z\"), field \"similarity\": Expected similarity to be \
                 omitted but it was included"
                    .to_owned(),
                format!("bit 2 (content key \"z\"), field \"text\": {z_id} is missing text"),
                format!(
                    "bit 2 (content key \"z\"), field \"embedding\": {z_id} is missing embedding"
                ),
                format!(
                    "bit 2 (content key \"z\"), field \"token_count\": {z_id} is missing token_count"
                ),
                format!("bit 2 (content key \"z\"), field \"info\": {z_id} is missing info"),
            ]
        );
        assert!(listed(&json!({"version": 0, "embedding_model": "m"}))[0].contains("content"));
    }

    #[test]
    fn a_good_file_has_no_problems() {
        let doc = json!({"version": 1, "embedding_model": "m", "bits": [bit("a", &[1.0])]});
        assert!(listed(&doc).is_empty());
        assert_eq!(listed(&json!([])).len(), 1);
        assert!(listed(&json!(null))[0].starts_with("top level: invalid JSON"));
    }

    proptest! {
        /// The first error listed is the one loading reports, and a file without errors loads.
        #[test]
        fn first_problem_is_the_load_error(
            version in prop_oneof![Just(json!(1)), Just(json!(0)), Just(json!("1")), Just(json!(2))],
            model in prop_oneof![Just(json!("m")), Just(json!("")), Just(json!(3))],
            omit in prop_oneof![Just(None), Just(Some(json!(""))), Just(Some(json!("similarity"))),
                                Just(Some(json!("*"))), Just(Some(json!(1))), Just(Some(json!("x")))],
            bits in proptest::collection::vec(
                (0usize..4, prop_oneof![Just(json!(1)), Just(json!(1.5)), Just(json!(null))],
                 prop_oneof![Just(0usize), Just(1), Just(2)], any::<bool>(), any::<bool>(), any::<bool>()),
                0..5),
        ) {
            let bits: Vec<Value> = bits
                .into_iter()
                .map(|(t, tc, dims, sim, url, obj)| {
                    if !obj && t == 0 {
                        return json!("not a bit");
                    }
                    let mut b = bit(&format!("t{t}"), &vec![0.5; dims + 1]);
                    b["token_count"] = tc;
                    if dims == 0 && t == 3 {
                        b["embedding"] = json!("A=A=");
                    }
                    if sim {
                        b["similarity"] = json!(0.5);
                    }
                    if !url {
                        b["info"] = json!({});
                    }
                    b
                })
                .collect();
            let mut doc = json!({"version": version, "embedding_model": model});
            if version == json!(0) {
                let content: Map<String, Value> =
                    bits.into_iter().enumerate().map(|(i, b)| (format!("k{i}"), b)).collect();
                doc["content"] = Value::Object(content);
            } else {
                doc["bits"] = Value::Array(bits);
            }
            if let Some(o) = omit {
                doc["omit"] = o;
            }
            let bytes = serde_json::to_vec(&doc).unwrap();
            let problems = Library::problems(&bytes);
            let first = problems.iter().find_map(|p| match &p.kind {
                ProblemKind::Error(e) => Some(e.to_string()),
                ProblemKind::Duplicate { .. } => None,
            });
            match Library::from_bytes(&bytes) {
                Ok(_) => prop_assert_eq!(first, None),
                Err(e) => prop_assert_eq!(first, Some(e.to_string())),
            }
        }
    }
}
