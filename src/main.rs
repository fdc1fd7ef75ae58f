//! `cicy-agent`: the command-line edge of the cicy runtime.
// The CLI is the one part of cicy that prints to the terminal; the library emits typed events.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
