//! A file's text as import sees it: its URL, its title, and the body that is chunked and
//! embedded.

use std::path::Path;

use crate::error::ImportError;
use crate::front_matter::split_front_matter;
use crate::source::{Source, is_markdown};

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
    pub fn read(source: &Source) -> Result<Document, ImportError> {
        let bytes = std::fs::read(&source.path).map_err(|error| ImportError::Read {
            path: source.path.clone(),
            source: error,
        })?;
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
        let title = front
            .and_then(|f| f.title)
            .or_else(|| markdown_title(body))
            .unwrap_or_else(file_name);
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
