//! The key format, how keys are generated and how a presented key is hashed
//! (docs/reference/keys.md, "The key format").
//!
//! A key reads `mnk_<id>_<secret>`: the prefix `mnk_` (so a leaked key is recognisable by
//! secret scanners and by people), an id of [`ID_HEX`] lowercase hex digits (64 random bits:
//! the lookup key, shown by `mnemon keys list`, not secret) and a secret of [`SECRET_HEX`]
//! lowercase hex digits (256 random bits from the operating system). Every character is
//! URL-safe and a double click selects the whole key. The parser is strict (exact length, exact
//! alphabet), so a malformed key is refused before any database work and without hashing input
//! of unbounded size.
//!
//! Only a digest of the key is stored. SHA-256 rather than a password hash (argon2, scrypt):
//! those are slow on purpose, to make guessing a low-entropy password expensive; a 256-bit
//! random secret cannot be guessed however fast the hash, and the server checks a key on every
//! request, where argon2's tens of milliseconds would cap it at a few dozen requests per second
//! per core. The digest covers a domain label and the id as well as the secret, so a stored
//! hash is bound to its key id.

use std::fmt;

use rand::TryRngCore;
use rand::rngs::OsRng;
use sha2::{Digest, Sha256};

use crate::KeyError;

/// The prefix every key starts with.
pub const PREFIX: &str = "mnk_";
/// Hex digits in a key id (8 random bytes).
pub const ID_HEX: usize = 16;
/// Hex digits in a key's secret (32 random bytes: 256 bits).
pub const SECRET_HEX: usize = 64;
/// The length of every well-formed key: `mnk_` + id + `_` + secret.
pub const KEY_LEN: usize = PREFIX.len() + ID_HEX + 1 + SECRET_HEX;

/// The label hashed in front of every digest, so a digest made here means nothing elsewhere.
const DOMAIN: &[u8] = b"mnemon-keys/v1";

/// A stored key hash: SHA-256 of the domain label, the id and the secret.
pub(crate) type KeyHash = [u8; 32];

/// A key split into its id and secret, borrowed from the presented string. Its Debug shows the
/// id only.
pub(crate) struct Presented<'a> {
    pub(crate) id: &'a str,
    secret: &'a str,
}

impl fmt::Debug for Presented<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Presented")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl<'a> Presented<'a> {
    /// Splits `key`, or `None` when it is not exactly `mnk_<16 hex>_<64 hex>` (lowercase).
    pub(crate) fn parse(key: &'a str) -> Option<Presented<'a>> {
        if key.len() != KEY_LEN {
            return None;
        }
        let rest = key.strip_prefix(PREFIX)?;
        let (id, secret) = rest.split_once('_')?;
        if !is_id(id) || secret.len() != SECRET_HEX || !is_lower_hex(secret) {
            return None;
        }
        Some(Presented { id, secret })
    }

    /// The digest to compare with the stored one.
    pub(crate) fn digest(&self) -> KeyHash {
        digest(self.id, self.secret)
    }
}

/// Whether `id` has the shape of a key id: [`ID_HEX`] lowercase hex digits.
pub fn is_id(id: &str) -> bool {
    id.len() == ID_HEX && is_lower_hex(id)
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// SHA-256 of the domain label, the id and the secret, each followed by a NUL byte (neither
/// contains one, so the encoding is unambiguous).
pub(crate) fn digest(id: &str, secret: &str) -> KeyHash {
    let mut hasher = Sha256::new();
    for part in [DOMAIN, id.as_bytes(), secret.as_bytes()] {
        hasher.update(part);
        hasher.update([0u8]);
    }
    hasher.finalize().into()
}

/// A new key from the operating system's random generator: its id, the whole key and its
/// digest.
pub(crate) struct Generated {
    pub(crate) id: String,
    pub(crate) key: String,
    pub(crate) hash: KeyHash,
}

impl fmt::Debug for Generated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generated")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Generated {
    /// Draws a fresh id and secret. Fails only when the operating system's random generator
    /// does.
    pub(crate) fn new() -> Result<Generated, KeyError> {
        let mut id = [0u8; ID_HEX / 2];
        let mut secret = [0u8; SECRET_HEX / 2];
        let mut rng = OsRng;
        rng.try_fill_bytes(&mut id)
            .and_then(|()| rng.try_fill_bytes(&mut secret))
            .map_err(|e| KeyError::Random {
                detail: e.to_string(),
            })?;
        let id = hex(&id);
        let secret = hex(&secret);
        let hash = digest(&id, &secret);
        Ok(Generated {
            key: format!("{PREFIX}{id}_{secret}"),
            id,
            hash,
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn generated_keys_parse_back_to_their_id_and_digest() {
        let generated = Generated::new().unwrap();
        assert_eq!(generated.key.len(), KEY_LEN);
        assert!(generated.key.starts_with("mnk_"));
        let presented = Presented::parse(&generated.key).unwrap();
        assert_eq!(presented.id, generated.id);
        assert_eq!(presented.digest(), generated.hash);
        // URL-safe without escaping.
        assert!(
            generated
                .key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        );
    }

    #[test]
    fn two_keys_never_share_an_id_or_secret() {
        let a = Generated::new().unwrap();
        let b = Generated::new().unwrap();
        assert_ne!(a.id, b.id);
        assert_ne!(a.key, b.key);
        assert_ne!(a.hash, b.hash);
    }

    #[test]
    fn the_digest_binds_the_id() {
        let secret = "0".repeat(SECRET_HEX);
        assert_ne!(
            digest("0000000000000000", &secret),
            digest("0000000000000001", &secret)
        );
    }

    #[test]
    fn near_misses_are_malformed() {
        let good = Generated::new().unwrap().key;
        let cases = [
            String::new(),
            good.to_uppercase(),
            good.replacen("mnk_", "mnx_", 1),
            format!("{good}0"),
            good[..good.len() - 1].to_owned(),
            format!(" {}", &good[1..]),
            // The separator moved: a 15-digit id and a 65-digit secret.
            format!("mnk_{}_{}", &good[4..19], &good[19..].replace('_', "0")),
            // A non-hex letter in the secret.
            format!("{}g", &good[..good.len() - 1]),
            // Multi-byte characters at the right byte length.
            format!("mnk_{}", "é".repeat((KEY_LEN - 4) / 2)),
        ];
        for case in &cases {
            assert!(Presented::parse(case).is_none(), "{case:?}");
        }
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let generated = Generated::new().unwrap();
        let secret = &generated.key[PREFIX.len() + ID_HEX + 1..];
        let presented = Presented::parse(&generated.key).unwrap();
        for text in [format!("{presented:?}"), format!("{generated:?}")] {
            assert!(!text.contains(secret), "{text}");
            assert!(text.contains(&generated.id), "{text}");
        }
    }

    proptest! {
        /// Any string: parsing never panics, and what parses is exactly the key shape.
        #[test]
        fn parsing_any_string_is_safe(text in "\\PC{0,100}") {
            if let Some(presented) = Presented::parse(&text) {
                prop_assert_eq!(text.len(), KEY_LEN);
                prop_assert_eq!(&text[4..20], presented.id);
            }
        }

        /// Strings built from the key alphabet at the key's length: parse exactly when shaped.
        #[test]
        fn shaped_strings_parse(id in "[0-9a-f]{16}", secret in "[0-9a-f]{64}") {
            let key = format!("mnk_{id}_{secret}");
            let presented = Presented::parse(&key).unwrap();
            prop_assert_eq!(presented.id, id.as_str());
            prop_assert_eq!(presented.digest(), digest(&id, &secret));
        }
    }
}
