//! Expiry and filters as operations take them (docs/reference/rest.md#expiry-and-filters): a
//! time-to-live or an instant for a write, the duration syntax of the CLI (`--ttl 30d`,
//! `--gc-interval 5m`), and the metadata filter language of docs/reference/filters.md, parsed
//! with errors that say where the filter is wrong.

use std::time::Duration;

use mnemon_store::{Expiry, Filter};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::OpsError;

/// When a record being written expires. Give at most one field; none keeps the store's
/// default (never, unless the namespace has a default time-to-live).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExpiryInput {
    /// Expire this many seconds after the write (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// Expire at this instant, in milliseconds since the Unix epoch; it must be in the future.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// Never expire, whatever the namespace's default time-to-live (`--default-ttl`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub never_expires: bool,
}

impl ExpiryInput {
    /// Expiry after `ttl` (whole seconds, rounded up so that a sub-second TTL still expires
    /// later rather than at once).
    pub fn after(ttl: Duration) -> ExpiryInput {
        let mut seconds = ttl.as_secs();
        if ttl.subsec_nanos() > 0 {
            seconds = seconds.saturating_add(1);
        }
        ExpiryInput {
            ttl_seconds: Some(seconds),
            ..ExpiryInput::default()
        }
    }

    /// Never expiring, whatever the namespace's default time-to-live.
    pub fn never() -> ExpiryInput {
        ExpiryInput {
            never_expires: true,
            ..ExpiryInput::default()
        }
    }

    /// The store's [`Expiry`] for this input; two fields, a zero TTL or an instant not in the
    /// future are refused.
    pub fn to_expiry(self) -> Result<Expiry, OpsError> {
        if self.never_expires {
            return match (self.ttl_seconds, self.expires_at_ms) {
                (None, None) => Ok(Expiry::Never),
                _ => Err(OpsError::invalid(
                    "give never_expires or an expiry (ttl_seconds, expires_at_ms), not both",
                )),
            };
        }
        match (self.ttl_seconds, self.expires_at_ms) {
            (Some(_), Some(_)) => Err(OpsError::invalid(
                "give either ttl_seconds or expires_at_ms, not both",
            )),
            (Some(0), None) => Err(OpsError::invalid(
                "ttl_seconds must be at least 1; leave it out for no expiry",
            )),
            (Some(seconds), None) => Ok(Expiry::After(Duration::from_secs(seconds))),
            (None, Some(at)) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                if at <= now {
                    return Err(OpsError::invalid(format!(
                        "expires_at_ms {at} is not in the future (now is {now}): the record \
                         would be invisible at once; give a later instant or ttl_seconds"
                    )));
                }
                Ok(Expiry::At(at))
            }
            (None, None) => Ok(Expiry::Default),
        }
    }
}

/// The units of [`parse_duration`], in seconds.
const UNITS: [(char, u64); 5] = [
    ('s', 1),
    ('m', 60),
    ('h', 3_600),
    ('d', 86_400),
    ('w', 604_800),
];

/// Parses a duration as the CLI and `mnemon.toml` write it: one or more `<integer><unit>` groups
/// with units `s`, `m`, `h`, `d`, `w` (seconds to weeks), e.g. `30d`, `90s`, `1h30m`; a bare
/// `0` is zero (used to disable the periodic sweep). The error says what to write instead.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let hint = "write a whole number and a unit: s, m, h, d or w (e.g. 90s, 30d, 1h30m)";
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(format!("the duration is empty; {hint}"));
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let Some(&(_, unit)) = UNITS.iter().find(|(u, _)| *u == c) else {
            return Err(format!("{text:?} has {c:?}, which is not a unit; {hint}"));
        };
        if digits.is_empty() {
            return Err(format!(
                "{text:?} has the unit {c:?} without a number; {hint}"
            ));
        }
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("{text:?} is too long a duration; {hint}"))?;
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(|| format!("{text:?} is too long a duration; {hint}"))?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(format!("{text:?} ends in a number without a unit; {hint}"));
    }
    Ok(Duration::from_secs(total))
}

/// The filter of an input (the JSON of docs/reference/filters.md), checked: a malformed one is
/// [`OpsError::InvalidFilter`] with the filter's own message (where it is wrong).
pub fn parse_filter(value: Option<&serde_json::Value>) -> Result<Option<Filter>, OpsError> {
    value
        .map(|v| {
            Filter::parse(v).map_err(|e| OpsError::InvalidFilter {
                message: e.to_string(),
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn durations_parse_as_documented() {
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_duration(" 90s "), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(1_209_600)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "30", "d", "5x", "1.5h", "-1s", "99999999999999999999s"] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.contains("e.g. 90s"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn expiry_inputs_map_to_the_stores_expiry() {
        assert_eq!(ExpiryInput::default().to_expiry().unwrap(), Expiry::Default);
        let ttl = ExpiryInput {
            ttl_seconds: Some(60),
            ..ExpiryInput::default()
        };
        assert_eq!(
            ttl.to_expiry().unwrap(),
            Expiry::After(Duration::from_secs(60))
        );
        let later = 4_000_000_000_000;
        let at = ExpiryInput {
            expires_at_ms: Some(later),
            ..ExpiryInput::default()
        };
        assert_eq!(at.to_expiry().unwrap(), Expiry::At(later));
        let past = ExpiryInput {
            expires_at_ms: Some(5),
            ..ExpiryInput::default()
        };
        assert!(
            past.to_expiry()
                .unwrap_err()
                .to_string()
                .contains("not in the future")
        );
        let both = ExpiryInput {
            ttl_seconds: Some(1),
            expires_at_ms: Some(5),
            ..ExpiryInput::default()
        };
        assert!(
            both.to_expiry()
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
        let zero = ExpiryInput {
            ttl_seconds: Some(0),
            ..ExpiryInput::default()
        };
        assert_eq!(zero.to_expiry().unwrap_err().code(), "invalid_input");
        assert_eq!(ExpiryInput::never().to_expiry().unwrap(), Expiry::Never);
        let never_and_ttl = ExpiryInput {
            ttl_seconds: Some(60),
            ..ExpiryInput::never()
        };
        assert!(
            never_and_ttl
                .to_expiry()
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
        assert_eq!(
            ExpiryInput::after(Duration::from_millis(1_500)).ttl_seconds,
            Some(2)
        );
    }

    #[test]
    fn bad_filters_are_invalid_filter_errors_that_say_where() {
        assert!(parse_filter(None).unwrap().is_none());
        let good = serde_json::json!({"eq": {"path": "asset_type", "value": "image"}});
        assert!(parse_filter(Some(&good)).unwrap().is_some());
        let bad = serde_json::json!({"eq": {"path": "asset_type", "valeu": "image"}});
        let error = parse_filter(Some(&bad)).unwrap_err();
        assert_eq!(error.code(), "invalid_filter");
        assert!(!error.to_string().is_empty());
    }

    #[test]
    fn assets_and_artifacts_expire_and_filter_through_the_service() {
        use crate::artifacts::{ArtifactIdInput, ArtifactQueryInput, ArtifactSaveInput};
        use crate::assets::{AssetBody, AssetIdInput, AssetPutInput, AssetQueryInput};
        use crate::{Service, Stores};

        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(Stores::open(dir.path()).unwrap());
        let body = |id: &str, kind: &str| AssetBody {
            asset_id: Some(id.into()),
            asset_type: Some(kind.into()),
            asset_name: None,
            description: None,
            content_type: None,
            content: Some(serde_json::json!({"n": 1})),
            content_base64: None,
            extra: serde_json::Map::new(),
        };
        let put = |id: &str, kind: &str, expiry: ExpiryInput| {
            service
                .asset_put_expiring(
                    AssetPutInput {
                        asset: body(id, kind),
                    },
                    expiry,
                )
                .unwrap()
        };
        put("a-keep", "image", ExpiryInput::default());
        put(
            "a-ttl",
            "image",
            ExpiryInput::after(Duration::from_secs(3_600)),
        );
        put(
            "a-gone",
            "image",
            ExpiryInput::after(Duration::from_secs(1)),
        );
        put("b-table", "table", ExpiryInput::default());

        let got = service
            .asset_get(AssetIdInput {
                asset_id: "a-ttl".into(),
            })
            .unwrap();
        let deadline = got.expires_at_ms.unwrap();
        assert!(deadline > 1_700_000_000_000, "{deadline}");
        let kept = service
            .asset_get(AssetIdInput {
                asset_id: "a-keep".into(),
            })
            .unwrap();
        assert_eq!(kept.expires_at_ms, None);
        // Expired: invisible to every read from its instant on.
        std::thread::sleep(Duration::from_millis(1_100));
        let gone = service.asset_get(AssetIdInput {
            asset_id: "a-gone".into(),
        });
        assert_eq!(gone.unwrap_err().code(), "asset_not_found");

        let images = service
            .asset_query(AssetQueryInput {
                filter: Some(serde_json::json!({"eq": {"path": "asset_type", "value": "image"}})),
                ..AssetQueryInput::default()
            })
            .unwrap();
        let ids: Vec<_> = images.assets.iter().map(|a| a.asset_id.as_str()).collect();
        assert_eq!(ids, ["a-keep", "a-ttl"]);
        assert_eq!(images.assets[1].expires_at_ms, Some(deadline));
        // A page of one, then the next: the filter applies before the cut.
        let first = service
            .asset_query(AssetQueryInput {
                asset_type: Some("image".into()),
                limit: Some(1),
                ..AssetQueryInput::default()
            })
            .unwrap();
        assert_eq!(first.assets.len(), 1);
        let second = service
            .asset_query(AssetQueryInput {
                asset_type: Some("image".into()),
                cursor: first.next_cursor,
                ..AssetQueryInput::default()
            })
            .unwrap();
        assert_eq!(second.assets[0].asset_id, "a-ttl");
        assert!(second.next_cursor.is_none());
        let bad = service.asset_query(AssetQueryInput {
            filter: Some(serde_json::json!({"gt": {"path": "asset_type", "value": [1, 2]}})),
            ..AssetQueryInput::default()
        });
        let error = bad.unwrap_err();
        assert_eq!(error.code(), "invalid_filter", "{error}");
        assert_eq!(error.kind(), crate::ErrorKind::BadRequest);

        let save = |key: &str, expiry: ExpiryInput| {
            service
                .artifact_save_expiring(
                    ArtifactSaveInput {
                        scope: "chat".into(),
                        key: key.into(),
                        artifact_type: "plan".into(),
                        name: key.into(),
                        description: None,
                        content: serde_json::json!([key]),
                        storage: None,
                        storage_id: None,
                    },
                    expiry,
                )
                .unwrap()
        };
        let ttl = save("p1", ExpiryInput::after(Duration::from_secs(60)));
        assert!(ttl.expires_at_ms.unwrap() > 1_700_000_000_000);
        save("p2", ExpiryInput::default());
        let expired = save("p3", ExpiryInput::after(Duration::from_secs(1)));
        std::thread::sleep(Duration::from_millis(1_100));
        assert_eq!(
            service
                .artifact_get(ArtifactIdInput {
                    id: expired.artifact.id.to_string(),
                })
                .unwrap_err()
                .code(),
            "artifact_not_found"
        );
        let listed = service
            .artifact_query(ArtifactQueryInput {
                filter: Some(serde_json::json!({"in": {"path": "key", "values": ["p1", "p3"]}})),
                ..ArtifactQueryInput::default()
            })
            .unwrap();
        assert_eq!(listed.artifacts.len(), 1);
        assert_eq!(listed.artifacts[0].artifact.key, "p1");
        assert_eq!(listed.artifacts[0].expires_at_ms, ttl.expires_at_ms);
    }

    proptest! {
        /// Every sum of groups parses to its seconds, whatever the order of the units.
        #[test]
        fn groups_add_up(groups in proptest::collection::vec((0u64..10_000, 0usize..5), 1..5)) {
            let text: String = groups
                .iter()
                .map(|(n, u)| format!("{n}{}", UNITS[*u].0))
                .collect();
            let want: u64 = groups.iter().map(|(n, u)| n * UNITS[*u].1).sum();
            prop_assert_eq!(parse_duration(&text), Ok(Duration::from_secs(want)));
        }

        /// Any text either parses or is refused with the hint; it never panics.
        #[test]
        fn any_text_is_parsed_or_refused(text in "\\PC{0,12}") {
            if let Err(error) = parse_duration(&text) {
                prop_assert!(error.contains("e.g. 90s"));
            }
        }
    }
}
