//! Seeded synthetic libraries for benchmarks and tests: unit-norm vectors, texts of about 450 ASCII
//! characters, unique URLs, written in the saved-file layout (docs/reference/library.md#saving).

use std::io::{self, Write};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::codec::encode_vector;

const WORDS: [&str; 32] = [
    "harbour", "engine", "garden", "vector", "library", "signal", "river", "tomato", "compass",
    "lantern", "memory", "orbit", "pepper", "saddle", "canvas", "thread", "basalt", "meadow",
    "rudder", "quartz", "index", "kettle", "window", "pebble", "summit", "ledger", "violin",
    "timber", "glacier", "cobalt", "walnut", "beacon",
];

/// A seeded random unit vector of `dim` floats.
pub fn unit_vector(rng: &mut ChaCha8Rng, dim: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..dim).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect();
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// Writes a library of `bits` bits with `dim`-dimensional embeddings under `model`, drawn from
/// `ChaCha8Rng::seed_from_u64(seed)`, streaming (nothing is held in memory).
pub fn write_synthetic(
    mut w: impl Write,
    model: &str,
    bits: usize,
    dim: usize,
    seed: u64,
) -> io::Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    write!(
        w,
        "{{\n\t\"version\": 1,\n\t\"embedding_model\": \"{model}\",\n\t\"bits\": ["
    )?;
    for i in 0..bits {
        let mut text = String::with_capacity(480);
        while text.len() < 440 {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(WORDS[rng.random_range(0..WORDS.len())]);
        }
        text.push('.');
        let tokens = text.len() / 4;
        let embedding = encode_vector(&unit_vector(&mut rng, dim));
        let sep = if i == 0 { "" } else { "," };
        write!(
            w,
            "{sep}\n\t\t{{\n\t\t\t\"text\": \"{text}\",\n\t\t\t\"info\": {{\n\t\t\t\t\"url\": \"https://bench.example.com/doc/{i}\",\n\t\t\t\t\"title\": \"Document {i}\"\n\t\t\t}},\n\t\t\t\"embedding\": \"{embedding}\",\n\t\t\t\"token_count\": {tokens}\n\t\t}}"
        )?;
    }
    write!(w, "{}]\n}}", if bits == 0 { "" } else { "\n\t" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Library;

    #[test]
    fn synthetic_library_loads_and_saves_identically() {
        let mut bytes = Vec::new();
        write_synthetic(&mut bytes, "m", 50, 24, 7).unwrap();
        let lib = Library::from_bytes(&bytes).unwrap();
        assert_eq!(lib.len(), 50);
        assert_eq!(lib.dimension(), Some(24));
        let mut out = Vec::new();
        lib.to_writer(&mut out, true).unwrap();
        assert!(out == bytes);
        let mut empty = Vec::new();
        write_synthetic(&mut empty, "m", 0, 24, 7).unwrap();
        assert!(Library::from_bytes(&empty).unwrap().is_empty());
    }
}
