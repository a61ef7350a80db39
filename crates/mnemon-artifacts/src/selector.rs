//! JSONPath selectors for step configs: RFC 9535 through `serde_json_path`, plus the original
//! configs' paths without a leading `$`.

use serde_json::Value;
use serde_json_path::JsonPath;

use crate::ArtifactError;

/// A compiled JSONPath, remembering how it was written and which setting held it.
#[derive(Debug, Clone)]
pub(crate) struct Selector {
    setting: &'static str,
    written: String,
    path: JsonPath,
}

impl Selector {
    /// Compiles `written`, found in config setting `setting`.
    ///
    /// A path that does not start with `$` is read as `$.` followed by it
    /// (`generated_file_json.data` → `$.generated_file_json.data`), or as `$` followed by it
    /// when it starts with a bracket (`['my key']` → `$['my key']`), which is the only reading
    /// RFC 9535 accepts for such a path.
    pub(crate) fn compile(setting: &'static str, written: &str) -> Result<Self, ArtifactError> {
        let full = absolute(written);
        let path = JsonPath::parse(&full).map_err(|e| ArtifactError::InvalidJsonPath {
            setting,
            path: written.to_owned(),
            message: e.to_string(),
        })?;
        Ok(Selector {
            setting,
            written: written.to_owned(),
            path,
        })
    }

    /// Every value the path selects, in document order.
    pub(crate) fn select<'v>(&self, inputs: &'v Value) -> Vec<&'v Value> {
        self.path.query(inputs).all()
    }

    /// The single value the path selects; zero or several are an error naming the path and
    /// the count.
    pub(crate) fn exactly_one<'v>(
        &self,
        inputs: &'v Value,
        hint: &'static str,
    ) -> Result<&'v Value, ArtifactError> {
        let mut found = self.select(inputs);
        match found.len() {
            1 => found.pop().ok_or_else(|| self.count_error(0, hint)),
            count => Err(self.count_error(count, hint)),
        }
    }

    fn count_error(&self, count: usize, hint: &'static str) -> ArtifactError {
        ArtifactError::MatchCount {
            setting: self.setting,
            path: self.written.clone(),
            count,
            hint,
        }
    }

    /// The path as written in the config.
    pub(crate) fn written(&self) -> &str {
        &self.written
    }
}

/// The RFC 9535 form of a possibly `$`-less path.
fn absolute(written: &str) -> String {
    if written.starts_with('$') {
        written.to_owned()
    } else if written.starts_with('[') {
        format!("${written}")
    } else {
        format!("$.{written}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn paths_without_dollar_are_rooted() {
        assert_eq!(
            absolute("generated_file_json.data"),
            "$.generated_file_json.data"
        );
        assert_eq!(absolute("['a b']"), "$['a b']");
        assert_eq!(absolute("$.x"), "$.x");
        let inputs = json!({"generated_file_json": {"data": "fn main() {}"}});
        let s = Selector::compile("content_path", "generated_file_json.data").unwrap();
        assert_eq!(s.exactly_one(&inputs, "").unwrap(), "fn main() {}");
    }

    #[test]
    fn invalid_paths_name_the_setting() {
        let err = Selector::compile("content_path", "$..[").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("content_path") && text.contains("$..["),
            "{text}"
        );
    }

    proptest! {
        #[test]
        fn compiling_never_panics(p in "\\PC{0,40}") {
            let _ = Selector::compile("content_path", &p);
        }
    }
}
