//! A file's text as import sees it: its URL, its title, and the body that is chunked and
//! embedded.

use std::path::Path;

use crate::error::ImportError;
use crate::front_matter::split_front_matter;
use crate::source::{Source, is_markdown};

/// The most bytes an import reads of one file (16 MiB): splitting text into sentences holds
/// about 16 bytes per character, so a file bounds that at a quarter of a gibibyte.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// The most characters of a document's title (a Markdown heading or `title:` entry), which
/// every bit of the document carries: a longer one is cut (at a character boundary).
pub const MAX_TITLE_CHARS: usize = 300;

/// One document to import: the text to chunk and embed, and the `info` its bits carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// The bits' `info.url`.
    pub url: String,
    /// The bits' `info.title`.
    pub title: String,
    /// The text that is chunked and embedded (a Markdown file's front matter is not part of
    /// it).
    pub body: String,
}

impl Document {
    /// Reads a source file (UTF-8; a leading byte-order mark is dropped).
    ///
    /// For Markdown files (`.md`, `.markdown`) the YAML front matter is left out of the body
    /// (see [`split_front_matter`]) and the title is its `title:` entry, or else the first
    /// heading; any other file, or a Markdown file with neither, is titled with its file name.
    ///
    /// A file of more than [`MAX_FILE_BYTES`] is [`ImportError::TooLarge`].
    pub fn read(source: &Source) -> Result<Document, ImportError> {
        use std::io::Read as _;
        let read_error = |error| ImportError::Read {
            path: source.path.clone(),
            source: error,
        };
        let file = std::fs::File::open(&source.path).map_err(read_error)?;
        // Read through a bound (the file may grow after a size check): one byte more than the
        // limit says it is over.
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(ImportError::TooLarge {
                path: source.path.clone(),
                max: MAX_FILE_BYTES,
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| ImportError::NotUtf8 {
            path: source.path.clone(),
        })?;
        Ok(Document::from_text(source.url.clone(), &source.path, &text))
    }

    /// A document from text already read: `path` decides how it is read (Markdown or plain
    /// text, by extension) and gives the fallback title (its file name), as in
    /// [`Document::read`].
    ///
    /// ```
    /// use std::path::Path;
    /// use mnemon_import::Document;
    ///
    /// let text = "---\ntitle: Neap tides\n---\n# Tides\n\nTwice a month.\n";
    /// let doc = Document::from_text("https://example.com/tides".into(), Path::new("t.md"), text);
    /// assert_eq!(doc.title, "Neap tides");
    /// assert_eq!(doc.body, "# Tides\n\nTwice a month.\n");
    ///
    /// let plain = Document::from_text("u".into(), Path::new("notes/t.txt"), "# not a title");
    /// assert_eq!(plain.title, "t.txt");
    /// ```
    pub fn from_text(url: String, path: &Path, text: &str) -> Document {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let file_name = || {
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        if !is_markdown(path) {
            return Document {
                url,
                title: file_name(),
                body: text.to_owned(),
            };
        }
        let (front, body) = split_front_matter(text);
        let mut title = front
            .and_then(|f| f.title)
            .or_else(|| markdown_title(body))
            .unwrap_or_else(file_name);
        // Every bit carries the title: a long one would be copied into each of them.
        if let Some((cut, _)) = title.char_indices().nth(MAX_TITLE_CHARS) {
            title.truncate(cut);
        }
        Document {
            url,
            title,
            body: body.to_owned(),
        }
    }
}

/// The first ATX heading (`# Title`) outside fenced code blocks.
pub(crate) fn markdown_title(text: &str) -> Option<String> {
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        for marker in ["```", "~~~"] {
            if trimmed.starts_with(marker) {
                fence = match fence {
                    None => Some(marker),
                    Some(open) if open == marker => None,
                    other => other,
                };
            }
        }
        if fence.is_some() || line.len() - trimmed.len() > 3 {
            continue;
        }
        let hashes = trimmed.bytes().take_while(|&b| b == b'#').count();
        if !(1..=6).contains(&hashes) {
            continue;
        }
        // `hashes` counts ASCII bytes, so this is a character boundary.
        let rest = trimmed.get(hashes..).unwrap_or_default();
        if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
            continue;
        }
        let title = rest.trim().trim_end_matches('#').trim_end();
        if !title.is_empty() {
            return Some(title.to_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every bit carries its document's title: a heading of megabytes was copied into each of
    /// the thousands of chunks its own line became. It is cut to `MAX_TITLE_CHARS`.
    #[test]
    fn a_long_title_is_cut() {
        let heading = "é".repeat(MAX_TITLE_CHARS * 10);
        let doc = Document::from_text("u".into(), Path::new("t.md"), &format!("# {heading}\n"));
        assert_eq!(doc.title.chars().count(), MAX_TITLE_CHARS);
        let front = format!("---\ntitle: {heading}\n---\nbody\n");
        let doc = Document::from_text("u".into(), Path::new("t.md"), &front);
        assert_eq!(doc.title.chars().count(), MAX_TITLE_CHARS);
        let short = Document::from_text("u".into(), Path::new("t.md"), "# Tides\n");
        assert_eq!(short.title, "Tides");
    }

    /// A file past `MAX_FILE_BYTES` is refused naming it, not read whole.
    #[test]
    fn a_file_past_the_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.txt");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(MAX_FILE_BYTES + 1).unwrap();
        let source = Source {
            path: path.clone(),
            url: "u".into(),
        };
        let error = Document::read(&source).unwrap_err();
        assert!(matches!(error, ImportError::TooLarge { .. }), "{error}");
        assert!(error.to_string().contains("big.txt"), "{error}");
        assert!(error.is_input());
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(MAX_FILE_BYTES)
            .unwrap();
        // At the limit it reads (zero bytes are valid UTF-8).
        assert!(Document::read(&source).is_ok());
    }

    #[test]
    fn title_is_the_first_heading_outside_code() {
        let text = "Intro\n```\n# not a title\n```\n    # indented code\n## Real title ##\n# Later";
        assert_eq!(markdown_title(text).as_deref(), Some("Real title"));
        assert_eq!(markdown_title("#hashtag\nplain"), None);
        assert_eq!(markdown_title("####### seven"), None);
        assert_eq!(markdown_title("#\n# Second"), Some("Second".into()));
    }

    #[test]
    fn front_matter_gives_the_title_and_stays_out_of_the_body() {
        let text = "\u{feff}---\ntitle: From front matter\nauthor: Ann\n---\n# Heading\n\nProse.\n";
        let doc = Document::from_text("u".into(), Path::new("a/b.md"), text);
        assert_eq!(doc.title, "From front matter");
        assert_eq!(doc.body, "# Heading\n\nProse.\n");
        assert!(!doc.body.contains("author"));
    }

    #[test]
    fn without_a_front_matter_title_the_heading_then_the_file_name() {
        let doc = Document::from_text(
            "u".into(),
            Path::new("b.md"),
            "---\nauthor: Ann\n---\nText.\n\n# Heading\n",
        );
        assert_eq!(doc.title, "Heading");
        assert_eq!(doc.body, "Text.\n\n# Heading\n");
        let doc = Document::from_text("u".into(), Path::new("dir/b.markdown"), "Only text.");
        assert_eq!(doc.title, "b.markdown");
        assert_eq!(doc.body, "Only text.");
    }

    #[test]
    fn text_files_keep_everything() {
        let text = "---\ntitle: T\n---\n# H\n";
        let doc = Document::from_text("u".into(), Path::new("x.txt"), text);
        assert_eq!(doc.title, "x.txt");
        assert_eq!(doc.body, text);
    }

    #[test]
    fn reading_checks_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.md");
        std::fs::write(&path, [0xff, 0xfe, 0x00]).unwrap();
        let source = Source {
            path: path.clone(),
            url: "u".into(),
        };
        let err = Document::read(&source).unwrap_err();
        assert!(err.to_string().contains("not UTF-8"), "{err}");
        assert!(err.is_input());
        std::fs::write(&path, "---\ntitle: Ok\n---\nBody").unwrap();
        let doc = Document::read(&source).unwrap();
        assert_eq!((doc.title.as_str(), doc.body.as_str()), ("Ok", "Body"));
    }
}
