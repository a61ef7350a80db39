//! Who may see restricted bits (docs/reference/library.md#query-pipeline step 3 and
//! docs/reference/host.md#host-config).

use std::path::Path;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{LibraryError, Result};

/// The tag a token with no `access_tags` is granted when the config names no default.
pub const DEFAULT_PRIVATE_TAG: &str = "unpublished";

struct Grant {
    hash: [u8; 32],
    tags: Vec<String>,
}

/// Access tokens and how restricted results are reported.
///
/// Secrets are kept only as SHA-256 hashes and compared in constant time against every token,
/// without early exit. `Default` has no tokens, `restricted_count` false and an empty message.
#[derive(Default)]
pub struct AccessPolicy {
    grants: Vec<Grant>,
    /// Write `details.counts.restricted` into results.
    pub restricted_count: bool,
    /// Text appended to `details.message` when restricted bits were left out.
    pub restricted_message: String,
    default_tag: String,
}

impl std::fmt::Debug for AccessPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessPolicy")
            .field("tokens", &self.grants.len())
            .field("restricted_count", &self.restricted_count)
            .field("restricted_message", &self.restricted_message)
            .finish()
    }
}

/// The access a query runs under: the tags it may see and how the hidden bits are reported.
/// Made by [`AccessPolicy::grant`] from the caller's token; [`AccessGrant::default`] sees only
/// untagged bits and reports nothing about the others.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessGrant {
    /// Tags whose bits are visible besides the untagged ones.
    pub tags: Vec<String>,
    /// Write `details.counts.restricted` into the result (the policy's `restricted_count`).
    pub report_restricted: bool,
    /// Appended to `details.message` when restricted bits were left out; empty writes no
    /// message.
    pub restricted_message: String,
}

impl AccessGrant {
    /// Whether bits tagged `tag` are visible.
    pub fn opens(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }
}

fn sha256(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

impl AccessPolicy {
    /// A policy with no tokens.
    pub fn new() -> Self {
        Self::default()
    }

    /// The tag granted to tokens that list no tags (`unpublished` unless configured).
    pub fn default_tag(&self) -> &str {
        if self.default_tag.is_empty() {
            DEFAULT_PRIVATE_TAG
        } else {
            &self.default_tag
        }
    }

    /// Sets the default private tag (empty means `unpublished`).
    pub fn set_default_tag(&mut self, tag: &str) {
        self.default_tag = tag.to_owned();
    }

    /// Adds a token granting `tags` (an empty list grants the default tag). An empty secret
    /// never matches and is ignored.
    pub fn add_token(&mut self, secret: &str, tags: Vec<String>) {
        if secret.is_empty() {
            return;
        }
        self.grants.push(Grant {
            hash: sha256(secret),
            tags,
        });
    }

    /// The tags `token` grants, or `None` for an empty or unknown token.
    pub fn grants(&self, token: &str) -> Option<Vec<String>> {
        if token.is_empty() {
            return None;
        }
        let hash = sha256(token);
        let mut found: Option<&Grant> = None;
        for grant in &self.grants {
            let equal: bool = grant.hash.ct_eq(&hash).into();
            if equal && found.is_none() {
                found = Some(grant);
            }
        }
        found.map(|g| {
            if g.tags.is_empty() {
                vec![self.default_tag().to_owned()]
            } else {
                g.tags.clone()
            }
        })
    }

    /// What a caller presenting `token` (or none) may see, with how this policy reports what
    /// it may not: the grant a query runs under ([`Library::query`](crate::Library::query)).
    /// An empty or unknown token grants no tags; untagged bits are visible to everyone.
    pub fn grant(&self, token: Option<&str>) -> AccessGrant {
        AccessGrant {
            tags: token.and_then(|t| self.grants(t)).unwrap_or_default(),
            report_restricted: self.restricted_count,
            restricted_message: self.restricted_message.clone(),
        }
    }

    /// Reads a host configuration (the `host.SECRET.json` format) already parsed as JSON.
    pub fn from_host_config(config: &Value) -> Result<Self> {
        let bad = |what: &str| LibraryError::InvalidConfig(what.to_owned());
        let root = config
            .as_object()
            .ok_or_else(|| bad("the config must be a JSON object"))?;
        let mut policy = AccessPolicy::new();
        let string = |v: Option<&Value>, what: &str| -> Result<String> {
            match v {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(bad(&format!("{what} must be a string"))),
            }
        };
        if let Some(r) = root.get("restricted").filter(|v| !v.is_null()) {
            let r = r
                .as_object()
                .ok_or_else(|| bad("restricted must be an object"))?;
            policy.restricted_count = match r.get("count") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(bad("restricted.count must be true or false")),
            };
            policy.restricted_message = string(r.get("message"), "restricted.message")?;
        }
        policy.default_tag = string(
            root.get("default_private_access_tag"),
            "default_private_access_tag",
        )?;
        let empty = Map::new();
        let tokens = match root.get("tokens") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(t)) => t,
            Some(_) => return Err(bad("tokens must be an object")),
        };
        for (user, record) in tokens {
            let record = record
                .as_object()
                .ok_or_else(|| bad(&format!("tokens.{user} must be an object")))?;
            let secret = string(record.get("token"), &format!("tokens.{user}.token"))?;
            string(
                record.get("description"),
                &format!("tokens.{user}.description"),
            )?;
            let tags = match record.get("access_tags") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|t| {
                        t.as_str().map(str::to_owned).ok_or_else(|| {
                            bad(&format!(
                                "tokens.{user}.access_tags must be a list of strings"
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?,
                Some(_) => {
                    return Err(bad(&format!(
                        "tokens.{user}.access_tags must be a list of strings"
                    )));
                }
            };
            policy.add_token(&secret, tags);
        }
        Ok(policy)
    }

    /// Reads a host configuration file. A missing file fails with
    /// `Config file "<path>" does not exist`.
    pub fn from_host_config_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if !path.exists() {
            return Err(LibraryError::ConfigMissing(path.display().to_string()));
        }
        let bytes = std::fs::read(path).map_err(|e| LibraryError::io(path, e))?;
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| LibraryError::InvalidConfig(format!("{}: {e}", path.display())))?;
        Self::from_host_config(&value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokens_and_defaults() {
        let p = AccessPolicy::from_host_config(&json!({
            "restricted": {"count": true, "message": "m"},
            "tokens": {
                "a": {"token": "ta", "description": "x"},
                "b": {"token": "tb", "access_tags": ["team"]},
                "c": {"token": ""}
            }
        }))
        .unwrap();
        assert!(p.restricted_count);
        assert_eq!(p.grants("ta"), Some(vec!["unpublished".to_owned()]));
        assert_eq!(p.grants("tb"), Some(vec!["team".to_owned()]));
        assert_eq!(p.grants(""), None);
        assert_eq!(p.grants("nope"), None);
        assert!(AccessPolicy::from_host_config(&json!({"tokens": []})).is_err());
        assert!(AccessPolicy::from_host_config(&json!({"restricted": {"count": "yes"}})).is_err());
        let d = AccessPolicy::from_host_config(
            &json!({"default_private_access_tag": "p", "tokens": {"a": {"token": "x"}}}),
        )
        .unwrap();
        assert_eq!(d.grants("x"), Some(vec!["p".to_owned()]));
        assert_eq!(
            AccessPolicy::from_host_config_file("/nonexistent/h.json")
                .unwrap_err()
                .to_string(),
            "Config file \"/nonexistent/h.json\" does not exist"
        );
    }
}
