//! YAML front matter: the `---` … `---` block at the top of a Markdown file, which static site
//! generators and note-taking tools use for a document's title and other metadata.
//!
//! Import reads the title from it and leaves the whole block out of the text it embeds: it is
//! metadata about the document, not part of what a reader asks about.

use serde_yaml_ng::Value;

/// What import uses from a document's front matter.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FrontMatter {
    /// The `title:` entry, trimmed; `None` when absent, empty, or not a string or number.
    pub title: Option<String>,
}

/// Splits a Markdown text into its front matter and its body.
///
/// The text has front matter when its first line is `---` and a later line is `---` or `...`
/// (each possibly followed by spaces or tabs; lines may end in `\n` or `\r\n`), and the lines
/// between form a YAML mapping, or nothing at all. The body is everything after the closing
/// line. Anything else (no closing line, YAML that does not parse, YAML that is a list or a
/// plain sentence, such as a document that opens with a thematic break) is not front matter:
/// the whole text is the body, so no prose is ever dropped on a guess.
///
/// ```
/// use mnemon_import::split_front_matter;
///
/// let (front, body) = split_front_matter("---\ntitle: Tides\ntags: [sea]\n---\nNeap tides.\n");
/// assert_eq!(front.and_then(|f| f.title).as_deref(), Some("Tides"));
/// assert_eq!(body, "Neap tides.\n");
///
/// let (front, body) = split_front_matter("---\nJust a rule above prose.\n---\n");
/// assert!(front.is_none());
/// assert_eq!(body, "---\nJust a rule above prose.\n---\n");
/// ```
pub fn split_front_matter(text: &str) -> (Option<FrontMatter>, &str) {
    let Some((first, mut rest)) = next_line(text) else {
        return (None, text);
    };
    if first.trim_end_matches([' ', '\t']) != "---" {
        return (None, text);
    }
    let yaml_start = text.len() - rest.len();
    while let Some((line, after)) = next_line(rest) {
        let fence = line.trim_end_matches([' ', '\t']);
        if fence == "---" || fence == "..." {
            let yaml_end = text.len() - rest.len();
            let yaml = text.get(yaml_start..yaml_end).unwrap_or_default();
            return match parse(yaml) {
                Some(front) => (Some(front), after),
                None => (None, text),
            };
        }
        rest = after;
    }
    (None, text)
}

/// The first line of `text` without its line ending, and the text after it; `None` for an
/// empty text.
fn next_line(text: &str) -> Option<(&str, &str)> {
    if text.is_empty() {
        return None;
    }
    let (line, rest) = match text.find('\n') {
        Some(end) => (text.get(..end)?, text.get(end + 1..)?),
        None => (text, ""),
    };
    Some((line.strip_suffix('\r').unwrap_or(line), rest))
}

/// The front matter of a YAML block, or `None` when the block is not a mapping (or empty).
fn parse(yaml: &str) -> Option<FrontMatter> {
    if yaml.trim().is_empty() {
        return Some(FrontMatter::default());
    }
    let value: Value = serde_yaml_ng::from_str(yaml).ok()?;
    let mapping = match value {
        Value::Mapping(mapping) => mapping,
        Value::Null => return Some(FrontMatter::default()),
        _ => return None,
    };
    let title = match mapping.get("title") {
        Some(Value::String(s)) => Some(s.trim().to_owned()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    Some(FrontMatter {
        title: title.filter(|t| !t.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn front_matter_is_split_off() {
        let text = "---\ntitle: \"Bees: a primer\"\nauthor: Ann\n---\n# Heading\n\nBody.\n";
        let (front, body) = split_front_matter(text);
        assert_eq!(front.unwrap().title.as_deref(), Some("Bees: a primer"));
        assert_eq!(body, "# Heading\n\nBody.\n");
    }

    #[test]
    fn crlf_dots_trailing_blanks_and_empty_blocks() {
        let (front, body) = split_front_matter("--- \r\ntitle: T\r\n... \r\nText");
        assert_eq!(front.unwrap().title.as_deref(), Some("T"));
        assert_eq!(body, "Text");
        let (front, body) = split_front_matter("---\n---\nText");
        assert_eq!(front, Some(FrontMatter::default()));
        assert_eq!(body, "Text");
        let (front, body) = split_front_matter("---\n# only a comment\n---");
        assert_eq!(front, Some(FrontMatter::default()));
        assert_eq!(body, "");
    }

    #[test]
    fn titles_that_are_not_text_are_ignored() {
        for (yaml, title) in [
            ("title: 2024", Some("2024")),
            ("title: '  '", None),
            ("title: [a, b]", None),
            ("title:", None),
            ("name: x", None),
        ] {
            let text = format!("---\n{yaml}\n---\nbody");
            let (front, body) = split_front_matter(&text);
            assert_eq!(front.unwrap().title.as_deref(), title, "{yaml}");
            assert_eq!(body, "body");
        }
    }

    #[test]
    fn anything_else_is_all_body() {
        for text in [
            "",
            "title: x\n---\n",
            "---",
            "---\ntitle: x\n",
            "----\ntitle: x\n---\n",
            " ---\ntitle: x\n---\n",
            "---\n- a list\n---\nbody",
            "---\nkey: [unclosed\n---\nbody",
            "Intro\n---\ntitle: x\n---\n",
        ] {
            assert_eq!(split_front_matter(text), (None, text), "{text:?}");
        }
    }

    #[test]
    fn an_indented_fence_inside_a_value_does_not_close_the_block() {
        let text = "---\ntitle: |-\n  a\n  ---\n  b\n---\nbody";
        let (front, body) = split_front_matter(text);
        assert_eq!(front.unwrap().title.as_deref(), Some("a\n---\nb"));
        assert_eq!(body, "body");
    }

    proptest! {
        /// Any text: no panic, and the body is always a suffix of the text.
        #[test]
        fn never_panics(text in any::<String>()) {
            let (_, body) = split_front_matter(&text);
            prop_assert!(text.ends_with(body));
        }

        /// Texts shaped like front matter, with arbitrary lines inside: no panic either.
        #[test]
        fn never_panics_on_fenced_blocks(
            lines in proptest::collection::vec("[-. a-z:'\"|>#\\[\\]{}&*!\t]{0,12}", 0..8),
            body in any::<String>(),
        ) {
            let text = format!("---\n{}\n---\n{body}", lines.join("\n"));
            let (_, rest) = split_front_matter(&text);
            prop_assert!(text.ends_with(rest));
        }

        /// A title written by a YAML serializer comes back as it was (trimmed), and the body
        /// after the block is returned untouched.
        #[test]
        fn round_trips_the_title(title in any::<String>(), body in any::<String>()) {
            let mut mapping = serde_yaml_ng::Mapping::new();
            mapping.insert("title".into(), title.clone().into());
            mapping.insert("tags".into(), vec!["a", "b"].into());
            let yaml = serde_yaml_ng::to_string(&mapping).unwrap();
            let text = format!("---\n{yaml}---\n{body}");
            let (front, rest) = split_front_matter(&text);
            let expected = Some(title.trim().to_owned()).filter(|t| !t.is_empty());
            prop_assert_eq!(front.and_then(|f| f.title), expected);
            prop_assert_eq!(rest, body.as_str());
        }
    }
}
