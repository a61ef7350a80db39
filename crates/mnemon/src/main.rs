//! The `mnemon` command-line tool. See `mnemon --help`.

mod cli;

fn main() -> std::process::ExitCode {
    cli::run()
}
