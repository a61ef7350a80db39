//! Chunking documents, embedding the chunks in checked batches, counting their tokens, and
//! collecting them into a library; saving it atomically.

use std::path::Path;

use mnemon_library::{ChunkBounds, InsertOutcome, Library, NewBit, chunk_text};
use mnemon_types::{Embedder, Tokenizer, check_embeddings};

use crate::document::Document;
use crate::error::ImportError;

/// How documents are cut and embedded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportOptions {
    /// The chunk lengths, in characters (default 1,000 to 2,000).
    pub bounds: ChunkBounds,
    /// Chunks handed to the embedder per call (default 64): small enough that a progress
    /// display moves and a failed call loses little, large enough to amortise a remote call.
    pub batch_size: usize,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            bounds: ChunkBounds::default(),
            batch_size: 64,
        }
    }
}

impl ImportOptions {
    /// Checks that the options can produce a library: at least one chunk per batch, chunks of
    /// at least one character, and `min` not above `max`.
    pub fn validate(&self) -> Result<(), ImportError> {
        if self.batch_size == 0 {
            return Err(ImportError::Options("the batch size must be at least 1"));
        }
        if self.bounds.max == 0 {
            return Err(ImportError::Options(
                "the longest chunk must be at least 1 character",
            ));
        }
        if self.bounds.min > self.bounds.max {
            return Err(ImportError::Options(
                "the shortest chunk length must not exceed the longest",
            ));
        }
        Ok(())
    }
}

/// One chunk of a document, waiting for its vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The chunk's text, as embedded and stored.
    pub text: String,
    /// Its document's URL.
    pub url: String,
    /// Its document's title.
    pub title: String,
}

/// What an import built.
pub struct Imported {
    /// The library: one bit per distinct chunk, in document order.
    pub library: Library,
    /// Bits added.
    pub bits: usize,
    /// Chunks skipped because a bit with the same id (same URL and text) was already there.
    pub duplicates: usize,
    /// The sum of the added bits' token counts.
    pub token_count: usize,
}

impl std::fmt::Debug for Imported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Imported")
            .field("model", &self.library.model())
            .field("bits", &self.bits)
            .field("duplicates", &self.duplicates)
            .field("token_count", &self.token_count)
            .finish_non_exhaustive()
    }
}

/// Builds a library from documents with one embedder and one tokenizer.
///
/// The library's `embedding_model` is the embedder's [`model`](Embedder::model); each bit is
/// `{"text", "embedding", "token_count", "info": {"url", "title"}}`, its `token_count` counted
/// by the tokenizer (the library format's counts are `cl100k_base`:
/// `mnemon_embed::Cl100kTokenizer`).
#[derive(Clone, Copy)]
pub struct Importer<'a> {
    embedder: &'a dyn Embedder,
    tokenizer: &'a dyn Tokenizer,
    options: ImportOptions,
}

impl std::fmt::Debug for Importer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Importer")
            .field("model", &self.embedder.model())
            .field("tokenizer", &self.tokenizer.name())
            .field("options", &self.options)
            .finish()
    }
}

impl<'a> Importer<'a> {
    /// An importer with the default [`ImportOptions`].
    pub fn new(embedder: &'a dyn Embedder, tokenizer: &'a dyn Tokenizer) -> Self {
        Importer {
            embedder,
            tokenizer,
            options: ImportOptions::default(),
        }
    }

    /// The same importer with other options.
    pub fn with_options(self, options: ImportOptions) -> Self {
        Importer { options, ..self }
    }

    /// The options in use.
    pub fn options(&self) -> &ImportOptions {
        &self.options
    }

    /// Cuts the documents into chunks at sentence ends (`mnemon_library::chunk_text`), in
    /// document order. Separate from [`build`](Importer::build) so that a caller knows how
    /// many chunks there are before the (slow) embedding starts.
    pub fn chunks(&self, documents: &[Document]) -> Vec<Chunk> {
        let mut chunks = Vec::new();
        for document in documents {
            for text in chunk_text(&document.body, self.options.bounds) {
                chunks.push(Chunk {
                    text: text.to_owned(),
                    url: document.url.clone(),
                    title: document.title.clone(),
                });
            }
        }
        chunks
    }

    /// Embeds the chunks, `batch_size` at a time, and collects them into a new library.
    /// `progress` is called after each batch with the number of chunks it held.
    ///
    /// Every batch's vectors pass [`check_embeddings`] before any is used, so an embedder that
    /// answers with the wrong count, length or a non-finite number fails the import
    /// ([`ImportError::EmbedderContract`]) instead of producing a library of wrong scores.
    pub fn build(
        &self,
        chunks: &[Chunk],
        mut progress: impl FnMut(usize),
    ) -> Result<Imported, ImportError> {
        self.options.validate()?;
        if chunks.is_empty() {
            return Err(ImportError::NoText);
        }
        let mut library = Library::blank(self.embedder.model());
        let (mut bits, mut duplicates, mut token_count) = (0usize, 0usize, 0usize);
        for batch in chunks.chunks(self.options.batch_size) {
            let texts: Vec<&str> = batch.iter().map(|c| c.text.as_str()).collect();
            let vectors = self.embedder.embed(&texts)?;
            check_embeddings(self.embedder.dimension(), texts.len(), &vectors).map_err(
                |source| ImportError::EmbedderContract {
                    model: self.embedder.model().to_owned(),
                    source,
                },
            )?;
            for (chunk, vector) in batch.iter().zip(vectors) {
                let tokens = self.tokenizer.count(&chunk.text);
                // The vector goes in as floats: the library owns its file encoding.
                let bit = NewBit {
                    text: &chunk.text,
                    embedding: &vector,
                    token_count: i64::try_from(tokens).unwrap_or(i64::MAX),
                    url: &chunk.url,
                    title: Some(&chunk.title),
                    access_tag: None,
                };
                match library.insert_bit(&bit)? {
                    InsertOutcome::Duplicate(_) => duplicates += 1,
                    _ => {
                        bits += 1;
                        token_count += tokens;
                    }
                }
            }
            progress(batch.len());
        }
        Ok(Imported {
            library,
            bits,
            duplicates,
            token_count,
        })
    }

    /// [`chunks`](Importer::chunks) then [`build`](Importer::build), without progress reports.
    pub fn import(&self, documents: &[Document]) -> Result<Imported, ImportError> {
        self.build(&self.chunks(documents), |_| {})
    }
}

/// Saves a library to `path` atomically and durably, creating missing folders: a reader (or a
/// crash) sees the old file or the complete new one, never half a library
/// (`mnemon_db::atomic_file`). Access tags are not written (imported bits have none).
pub fn save_library(library: &Library, path: &Path) -> Result<(), ImportError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| ImportError::Save {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    mnemon_db::atomic_file::write_atomic(path, |out| {
        library
            .to_writer(out, false)
            .map_err(|e| std::io::Error::other(e.to_string()))
    })
    .map_err(|e| ImportError::Save {
        path: path.to_path_buf(),
        source: e.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon_embed::{Cl100kTokenizer, HashingEmbedder};
    use mnemon_types::{ContractError, EmbedError, WhitespaceTokenizer};

    /// An embedder that answers every batch with `answer(batch size)`.
    struct Answering<F>(F);

    impl<F: Fn(usize) -> Vec<Vec<f32>> + Send + Sync> Embedder for Answering<F> {
        fn model(&self) -> &str {
            "test:answering"
        }
        fn dimension(&self) -> usize {
            2
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            Ok((self.0)(texts.len()))
        }
    }

    fn doc(url: &str, body: &str) -> Document {
        Document {
            url: url.into(),
            title: format!("title of {url}"),
            body: body.into(),
        }
    }

    fn sentences(n: usize) -> String {
        (0..n)
            .map(|i| format!("Sentence number {i} is here. "))
            .collect()
    }

    /// Files that are all empty or whitespace make no chunk: refused, rather than an empty
    /// library written (over a good one, with `--force`).
    #[test]
    fn no_text_is_refused() {
        let embedder = HashingEmbedder::new(16).unwrap();
        let importer = Importer::new(&embedder, &WhitespaceTokenizer);
        let error = importer
            .import(&[doc("a", ""), doc("b", "  \n\t ")])
            .unwrap_err();
        assert!(matches!(error, ImportError::NoText), "{error}");
        assert!(error.is_input());
    }

    #[test]
    fn builds_bits_with_counts_titles_and_duplicates() {
        let embedder = HashingEmbedder::new(16).unwrap();
        let options = ImportOptions {
            bounds: ChunkBounds { min: 40, max: 80 },
            batch_size: 2,
        };
        let importer = Importer::new(&embedder, &Cl100kTokenizer).with_options(options);
        // The same document twice under one URL: its chunks are duplicates the second time.
        let documents = [
            doc("a", &sentences(6)),
            doc("b", "Short."),
            doc("a", &sentences(6)),
        ];
        let chunks = importer.chunks(&documents);
        assert!(chunks.len() >= 5, "{chunks:?}");
        let mut batches = Vec::new();
        let imported = importer.build(&chunks, |n| batches.push(n)).unwrap();
        assert_eq!(batches.iter().sum::<usize>(), chunks.len());
        assert!(batches.iter().all(|&n| (1..=2).contains(&n)));
        let distinct = (chunks.len() - 1) / 2 + 1;
        assert_eq!(imported.bits, distinct);
        assert_eq!(imported.duplicates, chunks.len() - distinct);
        assert_eq!(imported.library.len(), distinct);
        assert_eq!(imported.library.model(), "mnemon:hashing-v1-16");
        let expected_tokens: usize = chunks[..distinct]
            .iter()
            .map(|c| Cl100kTokenizer.count(&c.text))
            .sum();
        assert_eq!(imported.token_count, expected_tokens);
        let mut file = Vec::new();
        imported.library.to_writer(&mut file, false).unwrap();
        let saved: serde_json::Value = serde_json::from_slice(&file).unwrap();
        let bits = saved["bits"].as_array().unwrap();
        assert_eq!(
            bits[0]["info"],
            serde_json::json!({"url": "a", "title": "title of a"})
        );
        let keys: Vec<&str> = bits[0]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(keys, ["text", "embedding", "token_count", "info"]);
    }

    #[test]
    fn every_broken_answer_is_refused() {
        let documents = [doc("a", "One sentence. Another one.")];
        for (answer, expected) in [
            (
                Box::new(|n: usize| vec![vec![1.0f32, 0.0]; n + 1])
                    as Box<dyn Fn(usize) -> _ + Send + Sync>,
                ContractError::WrongCount { texts: 1, got: 2 },
            ),
            (
                Box::new(|n: usize| vec![vec![1.0, 0.0, 0.0]; n]),
                ContractError::WrongDimension {
                    index: 0,
                    dimension: 2,
                    got: 3,
                },
            ),
            (
                Box::new(|n: usize| vec![vec![f32::NAN, 0.0]; n]),
                ContractError::NotFinite { index: 0 },
            ),
        ] {
            let embedder = Answering(answer);
            let err = Importer::new(&embedder, &WhitespaceTokenizer)
                .import(&documents)
                .unwrap_err();
            assert!(!err.is_input());
            let message = err.to_string();
            match err {
                ImportError::EmbedderContract { model, source } => {
                    assert_eq!(model, "test:answering");
                    assert_eq!(source, expected);
                }
                other => panic!("{other:?}"),
            }
            assert!(message.contains("broke its contract"), "{message}");
        }
        let good = Answering(|n: usize| vec![vec![0.6, 0.8]; n]);
        let imported = Importer::new(&good, &WhitespaceTokenizer)
            .import(&documents)
            .unwrap();
        assert_eq!(imported.token_count, 4);
    }

    #[test]
    fn options_that_cannot_work_are_refused_before_embedding() {
        let embedder = Answering(|_: usize| -> Vec<Vec<f32>> { panic!("not called") });
        for options in [
            ImportOptions {
                batch_size: 0,
                ..ImportOptions::default()
            },
            ImportOptions {
                bounds: ChunkBounds { min: 0, max: 0 },
                batch_size: 1,
            },
            ImportOptions {
                bounds: ChunkBounds { min: 5, max: 4 },
                batch_size: 1,
            },
        ] {
            let err = Importer::new(&embedder, &WhitespaceTokenizer)
                .with_options(options)
                .build(&[], |_| {})
                .unwrap_err();
            assert!(
                err.is_input() && matches!(err, ImportError::Options(_)),
                "{err}"
            );
        }
    }

    #[test]
    fn saving_creates_folders_and_replaces_whole_files() {
        let dir = tempfile::tempdir().unwrap();
        let embedder = HashingEmbedder::new(8).unwrap();
        let imported = Importer::new(&embedder, &WhitespaceTokenizer)
            .import(&[doc("u", "Some text.")])
            .unwrap();
        let path = dir.path().join("a/b/lib.json");
        save_library(&imported.library, &path).unwrap();
        let reopened = Library::open(&path).unwrap();
        assert_eq!(reopened.len(), 1);
        // Replacing leaves no temporary file beside it.
        save_library(&imported.library, &path).unwrap();
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["lib.json"]);

        // A folder that cannot be created: an error naming it, and nothing written.
        let blocked = dir.path().join("file");
        std::fs::write(&blocked, "x").unwrap();
        let err = save_library(&imported.library, &blocked.join("lib.json")).unwrap_err();
        assert!(
            matches!(&err, ImportError::Save { path, .. } if path == &blocked),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&blocked).unwrap(), "x");
    }
}
