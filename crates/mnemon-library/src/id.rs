//! Bit identity (docs/reference/library.md#bit-identity): SHA-256 of the stripped url and text.

use sha2::{Digest, Sha256};

use crate::python::pystrip;

/// A bit's canonical id: the SHA-256 of `pystrip(url) + "\n" + pystrip(text)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BitId(pub [u8; 32]);

impl BitId {
    /// The id of a bit with this url and text (a missing url counts as `""`).
    pub fn of(url: &str, text: &str) -> Self {
        let mut h = Sha256::new();
        h.update(pystrip(url).as_bytes());
        h.update(b"\n");
        h.update(pystrip(text).as_bytes());
        BitId(h.finalize().into())
    }

    /// Parses 64 lowercase or uppercase hex digits.
    pub fn from_hex(s: &str) -> Option<Self> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            out[i] = (hi * 16 + lo) as u8;
        }
        Some(BitId(out))
    }
}

impl std::fmt::Display for BitId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for BitId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BitId({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example() {
        let id = BitId::of(" https://example.com/a ", "  hello\n");
        assert_eq!(
            id.to_string(),
            "5f0d5492cd4546da54993d2b39835bda53f52deb0adb5e4c144fe31be8b0e55a"
        );
        assert_eq!(BitId::from_hex(&id.to_string()), Some(id));
        assert_eq!(BitId::from_hex("zz"), None);
    }
}
