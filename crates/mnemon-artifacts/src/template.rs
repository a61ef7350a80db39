//! Prompt templates with `{name}` placeholders (docs/reference/artifacts.md#prompt-templates), in
//! Python's `str.format` convention.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::ArtifactError;

/// A parsed prompt template.
///
/// `{name}` is a placeholder; `{{` and `}}` are literal braces. Names are taken exactly as
/// written between the braces. Python's format specs (`{x:>8}`), conversions (`{x!r}`) and
/// positional fields (`{}`) are refused rather than ignored.
///
/// ```
/// use mnemon_artifacts::PromptTemplate;
/// use serde_json::json;
///
/// let t = PromptTemplate::parse("{related_artifacts}\n\nTell me about the artifact [{artifact_keys}]")?;
/// assert_eq!(t.input_variables(), ["related_artifacts", "artifact_keys"]);
/// let vars = json!({"related_artifacts": "", "artifact_keys": "plan"});
/// assert_eq!(t.render(vars.as_object().unwrap())?, "\n\nTell me about the artifact [plan]");
/// # Ok::<(), mnemon_artifacts::ArtifactError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Variable(String),
}

impl PromptTemplate {
    /// Parses `template`, reporting the byte position of the first syntax error.
    pub fn parse(template: &str) -> Result<Self, ArtifactError> {
        let syntax = |position, reason| ArtifactError::TemplateSyntax { position, reason };
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut chars = template.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' if chars.next_if(|&(_, c)| c == '{').is_some() => text.push('{'),
                '}' if chars.next_if(|&(_, c)| c == '}').is_some() => text.push('}'),
                '}' => {
                    return Err(syntax(
                        at,
                        "a single '}' has no matching '{'; write '}}' for a literal brace",
                    ));
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some((_, '}')) => break,
                            Some((_, '{')) | None => {
                                return Err(syntax(
                                    at,
                                    "this '{' is not closed by '}'; write '{{' for a literal brace",
                                ));
                            }
                            Some((_, c)) => name.push(c),
                        }
                    }
                    if name.is_empty() {
                        return Err(syntax(
                            at,
                            "'{}' has no variable name; name it, like {related_artifacts}",
                        ));
                    }
                    if name.contains([':', '!']) {
                        return Err(syntax(
                            at,
                            "format specs and conversions ({x:...}, {x!r}) are not supported; use a plain {name}",
                        ));
                    }
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(Part::Variable(name));
                }
                other => text.push(other),
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Ok(PromptTemplate { parts })
    }

    /// The variables the template needs, each once, in order of first use.
    pub fn input_variables(&self) -> Vec<&str> {
        let mut seen = HashSet::new();
        self.parts
            .iter()
            .filter_map(|p| match p {
                Part::Variable(name) if seen.insert(name.as_str()) => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The variables the template needs that `provided` lacks, in order of first use; a chain
    /// calls it before running to check that its memories will provide everything.
    pub fn missing_variables<'a>(&'a self, provided: &[&str]) -> Vec<&'a str> {
        self.input_variables()
            .into_iter()
            .filter(|name| !provided.contains(name))
            .collect()
    }

    /// Fills every placeholder from `variables`: strings as they are, other values as compact
    /// JSON. Every missing variable is named in the error.
    pub fn render(&self, variables: &Map<String, Value>) -> Result<String, ArtifactError> {
        let provided: Vec<&str> = variables.keys().map(String::as_str).collect();
        let missing = self.missing_variables(&provided);
        if !missing.is_empty() {
            return Err(ArtifactError::MissingVariables {
                names: missing.into_iter().map(str::to_owned).collect(),
            });
        }
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Variable(name) => match variables.get(name) {
                    Some(Value::String(s)) => out.push_str(s),
                    Some(other) => out.push_str(&other.to_string()),
                    None => {
                        return Err(ArtifactError::MissingVariables {
                            names: vec![name.clone()],
                        });
                    }
                },
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn vars(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn doubled_braces_are_literal() {
        let t = PromptTemplate::parse("{{not a var}} {x} }}{{").unwrap();
        assert_eq!(t.input_variables(), ["x"]);
        assert_eq!(
            t.render(&vars(json!({"x": 1}))).unwrap(),
            "{not a var} 1 }{"
        );
    }

    #[test]
    fn variables_are_listed_once_in_first_use_order() {
        let t = PromptTemplate::parse("{b} {a} {b}").unwrap();
        assert_eq!(t.input_variables(), ["b", "a"]);
        assert_eq!(t.missing_variables(&["a"]), ["b"]);
        assert_eq!(
            t.render(&vars(json!({"a": "A", "b": "B"}))).unwrap(),
            "B A B"
        );
    }

    #[test]
    fn every_missing_variable_is_named() {
        let t = PromptTemplate::parse("{a}{b}{c}").unwrap();
        let err = t.render(&vars(json!({"b": ""}))).unwrap_err();
        assert!(matches!(&err, ArtifactError::MissingVariables { names } if names == &["a", "c"]));
        assert!(err.to_string().contains("a, c"), "{err}");
    }

    #[test]
    fn syntax_errors_give_the_position() {
        for (bad, at) in [
            ("ab}", 2),
            ("a{b", 1),
            ("{}", 0),
            ("x{a{b}}", 1),
            ("{x:>3}", 0),
            ("{x!r}", 0),
        ] {
            match PromptTemplate::parse(bad) {
                Err(ArtifactError::TemplateSyntax { position, .. }) => {
                    assert_eq!(position, at, "{bad}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn values_are_not_reinterpreted() {
        let t = PromptTemplate::parse("[{x}]").unwrap();
        assert_eq!(t.render(&vars(json!({"x": "{y} {{"}))).unwrap(), "[{y} {{]");
    }

    proptest! {
        #[test]
        fn parsing_never_panics(s in "\\PC{0,60}") {
            let _ = PromptTemplate::parse(&s);
        }

        #[test]
        fn escaped_text_renders_back(s in "\\PC{0,60}") {
            let escaped = s.replace('{', "{{").replace('}', "}}");
            let t = PromptTemplate::parse(&escaped).unwrap();
            prop_assert!(t.input_variables().is_empty());
            prop_assert_eq!(t.render(&Map::new()).unwrap(), s);
        }
    }
}
