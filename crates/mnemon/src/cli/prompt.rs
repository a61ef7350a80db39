//! `mnemon prompt …`: prompt templates with `{name}` placeholders.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use clap::Subcommand;
use mnemon_artifacts::PromptTemplate;

use super::artifact::{artifact_error, read_json};
use super::{CliError, CliResult};

/// Commands on prompt templates.
#[derive(Debug, Subcommand)]
pub(crate) enum PromptCommand {
    /// Fill a template's `{name}` placeholders from a JSON object and print the result.
    Render {
        /// The template text (`{{` and `}}` are literal braces).
        #[arg(value_name = "TEMPLATE.txt")]
        template: PathBuf,
        /// A JSON object of variables; strings are inserted as they are, other values as JSON.
        #[arg(long, value_name = "VARS.json")]
        vars: PathBuf,
    },
}

/// Runs a `prompt` command.
pub(crate) fn run(command: PromptCommand) -> CliResult {
    match command {
        PromptCommand::Render { template, vars } => {
            let text = render(&template, &vars)?;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(CliError::failure)
        }
    }
}

/// The rendered template, exactly (a trailing newline only if the template has one).
fn render(template: &Path, vars: &Path) -> Result<String, CliError> {
    let text = std::fs::read_to_string(template)
        .with_context(|| format!("cannot read template {}", template.display()))
        .map_err(CliError::input)?;
    let parsed = PromptTemplate::parse(&text)
        .with_context(|| format!("in {}", template.display()))
        .map_err(CliError::input)?;
    let variables = read_json(vars)?;
    let Some(variables) = variables.as_object() else {
        return Err(CliError::input(anyhow!(
            "{} must hold a JSON object mapping variable names to values",
            vars.display()
        )));
    };
    parsed.render(variables).map_err(artifact_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_files(template: &str, vars: &str) -> (PathBuf, PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "mnemon-cli-prompt-{}",
            mnemon_artifacts::Uuid::now_v7()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let t = dir.join("t.txt");
        let v = dir.join("v.json");
        std::fs::write(&t, template).unwrap();
        std::fs::write(&v, vars).unwrap();
        (dir, t, v)
    }

    #[test]
    fn renders_the_spec_template() {
        let (dir, t, v) = temp_files(
            "{related_artifacts}\n\nTell me about the artifact [{artifact_keys}]\n",
            r#"{"related_artifacts": "RELATED ARTIFACTS", "artifact_keys": "plan"}"#,
        );
        let out = render(&t, &v);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            out.unwrap(),
            "RELATED ARTIFACTS\n\nTell me about the artifact [plan]\n"
        );
    }

    #[test]
    fn missing_variables_and_bad_templates_are_input_errors() {
        let (dir, t, v) = temp_files("{a} {b}", r#"{"a": 1}"#);
        let missing = render(&t, &v);
        std::fs::write(&t, "{unclosed").unwrap();
        let bad = render(&t, &v);
        std::fs::write(&v, "[1]").unwrap();
        std::fs::write(&t, "{a}").unwrap();
        let not_object = render(&t, &v);
        std::fs::remove_dir_all(&dir).unwrap();
        match missing {
            Err(CliError::Input(e)) => assert!(e.to_string().contains(": b;"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(bad, Err(CliError::Input(_))));
        assert!(matches!(not_object, Err(CliError::Input(_))));
    }
}
