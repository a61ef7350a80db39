//! The offline hashing embedder (feature hashing of word unigrams and bigrams).

use mnemon_types::{EmbedError, Embedder};

/// The prefix of every hashing model name; the dimension follows it (`mnemon:hashing-v1-512`).
///
/// The `v1` names the algorithm below. Any change that alters a vector must bump it, because
/// libraries store the model name and queries must use the same vector space.
const MODEL_PREFIX: &str = "mnemon:hashing-v1-";

/// Weight of a word bigram relative to a single word: bigrams add some word order without
/// drowning out the words themselves.
const BIGRAM_WEIGHT: f64 = 0.5;

/// An offline, deterministic [`Embedder`] based on feature hashing.
///
/// The vector of a text is built as follows (this is the `v1` algorithm, stable across versions
/// and platforms):
///
/// 1. The text is lowercased and split into words: maximal runs of alphanumeric characters
///    (Unicode `char::is_alphanumeric`); everything else separates words.
/// 2. Features are every word (weight 1) and every pair of adjacent words (weight ½).
/// 3. Each feature's UTF-8 bytes (a pair as `first`, a space, `second`) are hashed with 64-bit
///    FNV-1a followed by the murmur3 `fmix64` finaliser. The high half of the product
///    `hash × D` picks the dimension, and the lowest bit of the hash picks the sign, so
///    colliding features tend to cancel rather than pile up.
/// 4. The sum is L2-normalised. A text without words gives the zero vector.
///
/// Similarity between two vectors therefore measures shared words and word pairs: it is
/// **lexical, not semantic**. Use a real embedding model where meaning matters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashingEmbedder {
    dimension: usize,
    model: String,
}

impl HashingEmbedder {
    /// The dimension of [`HashingEmbedder::default`].
    pub const DEFAULT_DIMENSION: usize = 512;

    /// The largest dimension [`new`](Self::new) accepts. A model name comes from a flag or a
    /// library file, and every embedding allocates its dimension in `f64`s: without a bound,
    /// `mnemon:hashing-v1-100000000000` was accepted and its first embedding tried to allocate
    /// 800 GB, which aborts the process. Hashing spaces past a few thousand dimensions add
    /// nothing (few texts have that many distinct words).
    pub const MAX_DIMENSION: usize = 1 << 16;

    /// A hashing embedder producing vectors of `dimension` floats, with model name
    /// `mnemon:hashing-v1-<dimension>`.
    ///
    /// Fails when `dimension` is 0 or above [`MAX_DIMENSION`](Self::MAX_DIMENSION).
    pub fn new(dimension: usize) -> Result<Self, EmbedError> {
        let model = format!("{MODEL_PREFIX}{dimension}");
        if dimension == 0 {
            return Err(EmbedError::new(
                model,
                "the dimension must be at least 1; 512 is a good default",
            ));
        }
        if dimension > Self::MAX_DIMENSION {
            return Err(EmbedError::new(
                model,
                format!(
                    "the dimension must be at most {}; 512 is a good default",
                    Self::MAX_DIMENSION
                ),
            ));
        }
        Ok(HashingEmbedder { dimension, model })
    }

    /// The embedder a model name such as `mnemon:hashing-v1-512` stands for, or `None` when the
    /// name is not a hashing model or names a dimension [`new`](Self::new) refuses.
    pub fn from_model_name(model: &str) -> Option<Self> {
        Self::parse_model_name(model)?.ok()
    }

    /// `None` when `model` is not a hashing model name; otherwise the embedder it names, or why
    /// its dimension is refused.
    pub(crate) fn parse_model_name(model: &str) -> Option<Result<Self, EmbedError>> {
        let digits = model.strip_prefix(MODEL_PREFIX)?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // Digits past `usize` are past the bound as well.
        let dimension = digits.parse().unwrap_or(usize::MAX);
        Some(Self::new(dimension).map_err(|e| EmbedError::new(model, e.message)))
    }

    /// Embeds one text (infallible; [`Embedder::embed`] does this for each text of a batch).
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut acc = vec![0f64; self.dimension];
        let mut previous: Option<String> = None;
        for word in words(text) {
            self.add(&mut acc, &[word.as_bytes()], 1.0);
            if let Some(prev) = &previous {
                self.add(
                    &mut acc,
                    &[prev.as_bytes(), b" ", word.as_bytes()],
                    BIGRAM_WEIGHT,
                );
            }
            previous = Some(word);
        }
        let norm = acc.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm > 0.0 {
            acc.iter().map(|x| (x / norm) as f32).collect()
        } else {
            vec![0.0; self.dimension]
        }
    }

    fn add(&self, acc: &mut [f64], parts: &[&[u8]], weight: f64) {
        let hash = fmix64(fnv1a(parts));
        // Multiply-shift maps the hash uniformly onto 0..D for any D, power of two or not.
        let index = ((u128::from(hash) * self.dimension as u128) >> 64) as usize;
        let signed = if hash & 1 == 0 { weight } else { -weight };
        if let Some(slot) = acc.get_mut(index) {
            *slot += signed;
        }
    }
}

impl Default for HashingEmbedder {
    fn default() -> Self {
        HashingEmbedder {
            dimension: Self::DEFAULT_DIMENSION,
            model: format!("{MODEL_PREFIX}{}", Self::DEFAULT_DIMENSION),
        }
    }
}

impl Embedder for HashingEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

/// Lowercase words: maximal runs of alphanumeric characters.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// 64-bit FNV-1a over the concatenation of `parts`.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    }
    h
}

/// murmur3's 64-bit finaliser: FNV-1a alone mixes its high bits poorly for short inputs.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a(&[b""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(&[b"foo", b"bar"]), fnv1a(&[b"foobar"]));
        assert_eq!(fnv1a(&[b"foobar"]), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn model_name_carries_the_dimension() {
        let e = HashingEmbedder::new(64).unwrap();
        assert_eq!(e.model(), "mnemon:hashing-v1-64");
        assert_eq!(e.dimension(), 64);
        assert_eq!(HashingEmbedder::default().model(), "mnemon:hashing-v1-512");
        assert_eq!(
            HashingEmbedder::from_model_name("mnemon:hashing-v1-64"),
            Some(e)
        );
        assert_eq!(
            HashingEmbedder::from_model_name("mnemon:hashing-v1-0"),
            None
        );
        assert_eq!(
            HashingEmbedder::from_model_name("mnemon:hashing-v1-+5"),
            None
        );
        assert_eq!(HashingEmbedder::from_model_name("openai.com:x"), None);
        let err = HashingEmbedder::new(0).unwrap_err();
        assert!(err.to_string().contains("at least 1"), "{err}");
    }

    #[test]
    fn dimensions_past_the_bound_are_refused() {
        let largest = HashingEmbedder::MAX_DIMENSION;
        assert_eq!(HashingEmbedder::new(largest).unwrap().dimension(), largest);
        for name in [
            format!("mnemon:hashing-v1-{}", largest + 1),
            "mnemon:hashing-v1-100000000000".to_owned(),
            "mnemon:hashing-v1-99999999999999999999999999".to_owned(),
        ] {
            assert_eq!(HashingEmbedder::from_model_name(&name), None, "{name}");
            let err = crate::embedder_for_model(&name).err().unwrap();
            assert!(err.to_string().contains("at most 65536"), "{err}");
            assert!(err.to_string().contains(&name), "{err}");
        }
    }

    #[test]
    fn vectors_are_unit_length_and_deterministic() {
        let e = HashingEmbedder::default();
        let a = e.embed_one("The hive keeps its brood near thirty-five degrees.");
        let b = e.embed_one("The hive keeps its brood near thirty-five degrees.");
        assert_eq!(a, b);
        let norm: f32 = dot(&a, &a).sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    }

    #[test]
    fn case_and_punctuation_do_not_matter() {
        let e = HashingEmbedder::default();
        assert_eq!(
            e.embed_one("Sourdough, starter!"),
            e.embed_one("sourdough starter")
        );
        assert_eq!(e.embed_one("ÉCLAIR"), e.embed_one("éclair"));
    }

    #[test]
    fn texts_without_words_give_the_zero_vector() {
        let e = HashingEmbedder::new(16).unwrap();
        assert_eq!(e.embed_one(""), vec![0.0; 16]);
        assert_eq!(e.embed_one(" ,.;-- "), vec![0.0; 16]);
    }

    #[test]
    fn shared_words_score_higher_than_unrelated_ones() {
        let e = HashingEmbedder::default();
        let q = e.embed_one("how do bees find flowers");
        let near = e.embed_one("Forager bees find flowers by scent and by the waggle dance.");
        let far = e.embed_one("Knead the dough until it passes the windowpane test.");
        assert!(dot(&q, &near) > dot(&q, &far) + 0.2);
    }

    #[test]
    fn word_order_matters_through_bigrams() {
        let e = HashingEmbedder::default();
        let a = e.embed_one("dog bites man");
        let b = e.embed_one("man bites dog");
        let d = dot(&a, &b);
        assert!(d < 0.999 && d > 0.5, "{d}");
    }

    /// Pins the v1 algorithm: a change here changes every stored hashing vector, which needs a
    /// new model name.
    #[test]
    fn the_v1_algorithm_is_pinned() {
        let e = HashingEmbedder::new(8).unwrap();
        let v = e.embed_one("tide pools at dawn");
        let pinned: Vec<i32> = v.iter().map(|x| (x * 1000.0).round() as i32).collect();
        assert_eq!(pinned, PINNED_V1);
    }

    const PINNED_V1: [i32; 8] = [459, 229, -459, 688, 0, 0, 229, 0];

    #[test]
    fn batch_embeds_in_order() {
        let e = HashingEmbedder::new(32).unwrap();
        let v = e.embed(&["a b", "c"]).unwrap();
        assert_eq!(v, vec![e.embed_one("a b"), e.embed_one("c")]);
    }

    proptest! {
        #[test]
        fn never_panics_and_is_finite(text in any::<String>(), dim in 1usize..300) {
            let e = HashingEmbedder::new(dim).unwrap();
            let v = e.embed_one(&text);
            prop_assert_eq!(v.len(), dim);
            prop_assert!(v.iter().all(|x| x.is_finite()));
            let norm = dot(&v, &v).sqrt();
            prop_assert!(norm == 0.0 || (norm - 1.0).abs() < 1e-4);
        }
    }
}
