//! `cicy-agent`: the command-line edge of the cicy runtime.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
