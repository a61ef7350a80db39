//! The `mnemon` command-line tool. See `mnemon --help`.

mod cli;

fn main() -> std::process::ExitCode {
    restore_default_sigpipe();
    cli::run()
}

/// Rust ignores SIGPIPE, so printing into a closed pipe (`mnemon … | head`) would panic inside
/// `println!`. A command-line filter should end quietly instead, as `cat` does.
#[cfg(unix)]
fn restore_default_sigpipe() {
    // SAFETY: called first thing in `main`, before any other thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn restore_default_sigpipe() {}
