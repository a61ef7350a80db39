//! Builds embedding libraries from Markdown and text files: the pipeline behind
//! `mnemon library import`, as a library API.
//!
//! An import runs in four steps, each usable on its own:
//!
//! 1. [`find_sources`]: the files to import (directories walked for `.md`, `.markdown`, `.txt`
//!    and `.text`, sorted, hidden entries skipped) and the URL each one's bits get.
//! 2. [`Document::read`]: a file's text (UTF-8), its title and its body. A Markdown file's YAML
//!    front matter ([`split_front_matter`]) gives the title (`title:`) and is not embedded;
//!    without one the title is the first heading, and last the file name.
//! 3. [`Importer::chunks`]: documents cut into chunks at sentence ends (1,000 to 2,000
//!    characters by default, [`ImportOptions`]).
//! 4. [`Importer::build`]: chunks embedded in batches by any
//!    [`Embedder`](mnemon_types::Embedder), every batch checked against the embedder contract
//!    ([`check_embeddings`](mnemon_types::check_embeddings)), token counts from any
//!    [`Tokenizer`](mnemon_types::Tokenizer), collected into a
//!    [`Library`](mnemon_library::Library) whose `embedding_model` is the embedder's.
//!
//! [`save_library`] then writes it atomically (`mnemon_db::atomic_file`). The crate sits above
//! `mnemon-library`, `mnemon-types` and `mnemon-db` and below the `mnemon` facade; the embedders
//! and the `cl100k_base` tokenizer come from `mnemon-embed` (or anywhere else).
//!
//! ```
//! use mnemon_embed::{Cl100kTokenizer, HashingEmbedder};
//! use mnemon_import::{Document, Importer, find_sources, save_library};
//!
//! let dir = tempfile::tempdir()?;
//! std::fs::write(
//!     dir.path().join("tides.md"),
//!     "---\ntitle: Tides\n---\nSpring tides come twice a month. Neap tides fall between.\n",
//! )?;
//!
//! let sources = find_sources(&[dir.path()], Some("https://example.com/"))?;
//! let documents = sources.iter().map(Document::read).collect::<Result<Vec<_>, _>>()?;
//! let embedder = HashingEmbedder::new(64)?;
//! let importer = Importer::new(&embedder, &Cl100kTokenizer);
//! let chunks = importer.chunks(&documents);
//! assert_eq!(chunks.len(), 1);
//! assert_eq!(chunks[0].title, "Tides");
//! assert_eq!(chunks[0].url, "https://example.com/tides.md");
//! assert!(!chunks[0].text.contains("title:"));
//!
//! let imported = importer.build(&chunks, |done| eprintln!("embedded {done} chunks"))?;
//! assert_eq!((imported.bits, imported.duplicates), (1, 0));
//! assert_eq!(imported.library.len(), 1);
//!
//! let path = dir.path().join("libraries/tides.json");
//! save_library(&imported.library, &path)?;
//! assert_eq!(mnemon_library::Library::open(&path)?.model(), "mnemon:hashing-v1-64");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod document;
mod error;
mod front_matter;
mod pipeline;
mod source;

pub use document::{Document, MAX_FILE_BYTES, MAX_TITLE_CHARS};
pub use error::ImportError;
pub use front_matter::{FrontMatter, split_front_matter};
pub use pipeline::{Chunk, ImportOptions, Imported, Importer, save_library};
pub use source::{EXTENSIONS, Source, find_sources};
