//! The `sallyport` command-line tool: a human puts credentials into a vault without exposing
//! them to agents, and checks the audit log.
//!
//! Secrets are read from a no-echo terminal prompt or, when standard input is not a terminal,
//! from standard input (one line each, in the order the prompts would ask) — never from
//! arguments or environment variables. No command prints a secret.
//!
//! The binary is a thin wrapper around [`run`], so an application can embed the same commands
//! in its own binary:
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     sallyport_cli::run(std::env::args_os())
//! }
//! ```

mod args;
mod audit;
mod exit;
mod prompt;
mod vault;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser as _;

pub use crate::args::Cli;
pub use crate::exit::Exit;

/// Parses `args` (the first item is the program name) and runs the command, printing to
/// standard output and standard error. Returns the documented exit code (see [`Exit`]).
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                Exit::Usage.into()
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match dispatch(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("sallyport: {}", failure.message);
            failure.exit.into()
        }
    }
}

/// The binary's `main`: [`run`] over the process arguments.
pub fn main() -> ExitCode {
    run(std::env::args_os())
}

fn dispatch(cli: &Cli) -> Result<(), exit::Failure> {
    match &cli.command {
        args::Command::Vault(cmd) => vault::run(cli, cmd),
        args::Command::Audit(cmd) => audit::run(cli, cmd),
    }
}
