//! The embedding encoding (docs/reference/library.md#embedding-encoding): little-endian float32
//! values in strict, padded base64.

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use std::cell::RefCell;
use std::ops::Not as _;

/// Standard alphabet, `=` padding required; non-zero trailing bits are accepted, as in Python.
const ENGINE: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
        .with_decode_allow_trailing_bits(true),
);

/// Why a base64 string was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Base64Error {
    /// The length (whitespace removed) is not a multiple of 4, or `=` is misplaced.
    IncorrectPadding,
    /// A character outside the alphabet, at a character offset of the original string.
    InvalidCharacter(char, usize),
}

impl std::fmt::Display for Base64Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Base64Error::IncorrectPadding => f.write_str("Incorrect padding"),
            Base64Error::InvalidCharacter(c, at) => {
                write!(f, "invalid character {c:?} at offset {at}")
            }
        }
    }
}

/// The ASCII whitespace the decoder skips: space, `\t`, `\n`, `\v`, `\f`, `\r`.
fn is_b64_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\u{0b}' | '\u{0c}')
}

fn is_alphabet(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '+' || c == '/'
}

/// Decodes strictly: whitespace removed, length a multiple of 4, `=` only as the last one or two
/// characters, nothing outside the alphabet.
pub(crate) fn decode_strict(s: &str) -> Result<Vec<u8>, Base64Error> {
    // Query embeddings arrive on every request, almost always as canonical base64 without
    // whitespace: the engine alone then applies exactly the checks below, without the
    // per-character bookkeeping the precise error messages need.
    if !s.chars().any(is_b64_space) {
        if let Ok(bytes) = base64_simd::STANDARD.decode_to_vec(s.as_bytes()) {
            return Ok(bytes);
        }
        // The SIMD decoder refuses non-zero trailing bits, which Python (and so the spec)
        // accepts.
        if let Ok(bytes) = ENGINE.decode(s.as_bytes()) {
            return Ok(bytes);
        }
    }
    decode_strict_slow(s)
}

/// [`decode_strict`] character by character, for whitespace and for the errors.
fn decode_strict_slow(s: &str) -> Result<Vec<u8>, Base64Error> {
    let cleaned: Vec<(usize, char)> = s
        .chars()
        .enumerate()
        .filter(|(_, c)| !is_b64_space(*c))
        .collect();
    let n = cleaned.len();
    if !n.is_multiple_of(4) {
        return Err(Base64Error::IncorrectPadding);
    }
    let pad = cleaned.iter().rev().take_while(|(_, c)| *c == '=').count();
    if pad > 2 || cleaned[..n - pad].iter().any(|(_, c)| *c == '=') {
        return Err(Base64Error::IncorrectPadding);
    }
    if let Some(&(at, c)) = cleaned[..n - pad].iter().find(|(_, c)| !is_alphabet(*c)) {
        return Err(Base64Error::InvalidCharacter(c, at));
    }
    let text: String = cleaned.iter().map(|(_, c)| *c).collect();
    // Only pad/length combinations the checks above cannot see (such as "A===") remain.
    ENGINE
        .decode(text.as_bytes())
        .map_err(|_| Base64Error::IncorrectPadding)
}

/// Why an embedding string does not give a vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VectorError {
    Base64(Base64Error),
    /// The decoded byte count is not a multiple of 4.
    ByteCount(usize),
    NonFinite,
}

impl std::fmt::Display for VectorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VectorError::Base64(e) => write!(f, "not valid base64: {e}"),
            VectorError::ByteCount(n) => write!(
                f,
                "decodes to {n} bytes, which is not a whole number of float32 values"
            ),
            VectorError::NonFinite => f.write_str("contains a non-finite value"),
        }
    }
}

/// Little-endian bytes to floats; the byte count must be a multiple of 4.
fn bytes_to_floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Decodes a base64 string to a vector, checking the byte count but not finiteness.
pub(crate) fn decode_vector_unchecked(s: &str) -> Result<Vec<f32>, VectorError> {
    let bytes = decode_strict(s).map_err(VectorError::Base64)?;
    if bytes.len() % 4 != 0 {
        return Err(VectorError::ByteCount(bytes.len()));
    }
    Ok(bytes_to_floats(&bytes))
}

/// Decodes a base64 string to a finite vector (the slow, fully checked path).
pub(crate) fn decode_vector(s: &str) -> Result<Vec<f32>, VectorError> {
    let v = decode_vector_unchecked(s)?;
    if all_finite(&v) {
        Ok(v)
    } else {
        Err(VectorError::NonFinite)
    }
}

/// The length of the canonical padded base64 text for `bytes` bytes.
pub(crate) fn encoded_len(bytes: usize) -> usize {
    bytes.div_ceil(3) * 4
}

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The fast path: decodes `s` straight into the first `dim` floats of `row` (a matrix row,
/// possibly with padding after them) when it is canonical base64 of exactly `dim` finite
/// floats. Returns false otherwise; the caller then uses [`decode_vector`] for the precise error
/// (or for whitespace-wrapped input). Padding floats may be overwritten with zeros.
pub(crate) fn decode_into_row(s: &str, row: &mut [f32], dim: usize) -> bool {
    let bytes = dim * 4;
    if s.len() != encoded_len(bytes) || row.len() < dim {
        return false;
    }
    if cfg!(target_endian = "little") {
        // SAFETY: viewing initialised f32s as bytes is sound (u8 has alignment 1), the length
        // covers exactly `row`, and every byte pattern written back is a valid f32.
        let out =
            unsafe { std::slice::from_raw_parts_mut(row.as_mut_ptr().cast::<u8>(), row.len() * 4) };
        let (values, padding) = out.split_at_mut(bytes);
        let simd = base64_simd::STANDARD;
        // `decode` panics when the output is shorter than the padding implies: check first.
        let decoded = simd.decoded_length(s.as_bytes()).is_ok_and(|n| n == bytes)
            && simd
                .decode(s.as_bytes(), base64_simd::Out::from_slice(values))
                .is_ok_and(|d| d.len() == bytes);
        if decoded {
            // Padding must stay zero for kernels that read whole lanes.
            padding.fill(0);
            return all_finite(&row[..dim]);
        }
        // Otherwise the engine below decides (it also takes non-zero trailing bits).
    }
    // The decoder wants room for its length estimate, which can exceed the exact size by up to
    // two bytes; row padding usually provides it, otherwise a scratch buffer does.
    let estimate = s.len() / 4 * 3;
    let ok = if row.len() * 4 >= estimate && cfg!(target_endian = "little") {
        // SAFETY: viewing initialised f32s as bytes is sound (u8 has alignment 1), the length
        // covers exactly `row`, and every byte pattern written back is a valid f32.
        let out =
            unsafe { std::slice::from_raw_parts_mut(row.as_mut_ptr().cast::<u8>(), row.len() * 4) };
        let ok = matches!(ENGINE.decode_slice(s.as_bytes(), out), Ok(n) if n == bytes);
        // Padding must stay zero for kernels that read whole lanes.
        out[bytes..].fill(0);
        ok
    } else {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.resize(estimate.max(bytes), 0);
            if !matches!(ENGINE.decode_slice(s.as_bytes(), &mut scratch[..]), Ok(n) if n == bytes) {
                return false;
            }
            for (dst, c) in row.iter_mut().zip(scratch.chunks_exact(4)) {
                *dst = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
            true
        })
    };
    ok && all_finite(&row[..dim])
}

/// Whether every value is finite. Without the early exit of `all`, the loop vectorises: a
/// library load checks every float of the matrix.
fn all_finite(v: &[f32]) -> bool {
    const EXPONENT: u32 = 0x7f80_0000;
    v.iter()
        .fold(false, |bad, x| bad | (x.to_bits() & EXPONENT == EXPONENT))
        .not()
}

/// Encodes a vector as padded base64 of its little-endian bytes.
pub(crate) fn encode_vector(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    ENGINE.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spec_example() {
        assert_eq!(encode_vector(&[0.1, 0.2, 0.3]), "zczMPc3MTD6amZk+");
        assert_eq!(
            decode_vector("zczMPc3MTD6amZk+").unwrap(),
            vec![0.1, 0.2, 0.3]
        );
        let mut row = [0.0f32; 3];
        assert!(decode_into_row("zczMPc3MTD6amZk+", &mut row, 3));
        assert_eq!(row, [0.1, 0.2, 0.3]);
        let mut padded = [7.0f32; 16];
        assert!(decode_into_row("zczMPc3MTD6amZk+", &mut padded, 3));
        assert_eq!(padded[..4], [0.1, 0.2, 0.3, 0.0]);
    }

    #[test]
    fn finiteness() {
        assert!(all_finite(&[]));
        assert!(all_finite(&[
            0.0,
            -0.0,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            1e-45
        ]));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN] {
            let mut v = vec![1.0f32; 37];
            v[20] = bad;
            assert!(!all_finite(&v), "{bad}");
        }
    }

    #[test]
    fn strictness() {
        assert_eq!(decode_strict("AAAAAAA"), Err(Base64Error::IncorrectPadding));
        assert_eq!(decode_strict("AA=A"), Err(Base64Error::IncorrectPadding));
        assert_eq!(decode_strict("A==="), Err(Base64Error::IncorrectPadding));
        assert_eq!(
            decode_strict("AA-A"),
            Err(Base64Error::InvalidCharacter('-', 2))
        );
        assert_eq!(decode_strict(" zczM\nPc3M\tTD6a\rmZk+ ").unwrap().len(), 12);
        assert_eq!(decode_strict("").unwrap(), Vec::<u8>::new());
        assert_eq!(
            decode_vector("AAA=").unwrap_err().to_string(),
            "decodes to 2 bytes, which is not a whole number of float32 values"
        );
        assert_eq!(
            decode_vector(&encode_vector(&[f32::NAN])).unwrap_err(),
            VectorError::NonFinite
        );
        let mut row = [0.0f32; 1];
        assert!(!decode_into_row(
            &encode_vector(&[f32::INFINITY]),
            &mut row,
            1
        ));
    }

    proptest! {
        #[test]
        fn round_trip(v in proptest::collection::vec(-1e30f32..1e30, 0..100)) {
            let s = encode_vector(&v);
            prop_assert_eq!(decode_vector(&s).unwrap(), v.clone());
            let mut row = vec![0.0; v.len()];
            prop_assert!(decode_into_row(&s, &mut row, v.len()));
            prop_assert_eq!(&row, &v);
            let mut padded = vec![1.0; v.len().div_ceil(16) * 16 + 16];
            prop_assert!(decode_into_row(&s, &mut padded, v.len()));
            prop_assert_eq!(&padded[..v.len()], &v[..]);
            prop_assert!(padded[v.len()..].iter().all(|x| *x == 0.0));
        }

        /// The fast path accepts exactly what the character-by-character decoder accepts, and
        /// decodes it the same way.
        #[test]
        fn fast_path_agrees_with_the_slow_one(s in "[A-Za-z0-9+/=\\- \n]{0,24}") {
            prop_assert_eq!(decode_strict(&s), decode_strict_slow(&s));
        }

        /// Decoding into a row accepts exactly the finite vectors the precise decoder accepts.
        #[test]
        fn row_decoding_agrees_with_the_precise_decoder(
            bytes in proptest::collection::vec(any::<u8>(), 0..12).prop_map(|mut b| {
                b.truncate(b.len() / 4 * 4);
                b
            }),
            at in any::<usize>(),
            c in "[A-Za-z0-9+/=\\- ]",
            mutate in any::<bool>(),
        ) {
            let mut text: Vec<char> = ENGINE.encode(&bytes).chars().collect();
            if mutate && !text.is_empty() {
                let i = at % text.len();
                text[i] = c.chars().next().unwrap_or('=');
            }
            let text: String = text.into_iter().collect();
            let dim = bytes.len() / 4;
            let mut row = vec![9.0f32; dim + 3];
            let fast = decode_into_row(&text, &mut row, dim);
            match decode_vector(&text) {
                Ok(v) if v.len() == dim => {
                    prop_assert!(fast, "{text:?}");
                    prop_assert_eq!(&row[..dim], &v[..]);
                    prop_assert!(row[dim..].iter().all(|x| *x == 0.0));
                }
                _ => prop_assert!(!fast, "{text:?}"),
            }
        }

        /// The same near valid encodings: one character replaced in a canonical one.
        #[test]
        fn fast_path_agrees_near_valid_input(
            bytes in proptest::collection::vec(any::<u8>(), 1..40),
            at in any::<usize>(),
            c in "[A-Za-z0-9+/=\\- ]",
        ) {
            let mut text: Vec<char> = ENGINE.encode(&bytes).chars().collect();
            let i = at % text.len();
            text[i] = c.chars().next().unwrap_or('=');
            let text: String = text.into_iter().collect();
            prop_assert_eq!(decode_strict(&text), decode_strict_slow(&text));
        }

        #[test]
        fn decoding_never_panics(s in ".{0,64}") {
            let _ = decode_vector(&s);
            let mut row = [0.0f32; 4];
            let _ = decode_into_row(&s, &mut row, 4);
        }
    }
}
