//! `sallyport console`: the web console for approvals and the audit trail
//! ([`sallyport_console`]), served on its own.
//!
//! The plain binary has no executor: its console records decisions in the journal but
//! cannot carry calls out; the application that parked them does (its approval worker, at
//! its start, or the agent's `check_approval`). Through `run_with_executor` the console
//! decides with the application's executor and carries approved calls out at once.

use std::net::SocketAddr;
use std::path::PathBuf;

use sallyport_console::{Console, LoginToken};
use sallyport_core::Executor;

use crate::args::Cli;
use crate::exit::{Exit, Failure};

/// `console` options.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The plain `sallyport` binary has no executor: this console records \
decisions, and the application that parked a call carries it out (its approval worker, at its \
start, or the agent's `check_approval`)."
)]
pub struct ConsoleArgs {
    /// Where to listen. A non-loopback address is refused unless --behind-tls.
    #[arg(long, default_value = "127.0.0.1:8640", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// The console user every decision is recorded as (`decided_by`) [default: $USER].
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// Read the login token from the first line of this file (at least 32 bytes)
    /// instead of generating one and printing it once.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// The console is served over TLS terminated in front of it: the cookie is `Secure`, and
    /// a non-loopback --listen is accepted.
    #[arg(long)]
    pub behind_tls: bool,
}

pub(crate) fn run(
    cli: &Cli,
    args: &ConsoleArgs,
    executor: Option<&Executor>,
) -> Result<(), Failure> {
    sallyport_console::check_listen(args.listen, args.behind_tls)
        .map_err(|e| Failure::new(Exit::Usage, e.to_string()))?;
    let (token, generated) = match &args.token_file {
        Some(path) => (LoginToken::from_file(path), false),
        None => (LoginToken::generate(), true),
    };
    let token = token.map_err(|e| Failure::new(Exit::Usage, format!("login token: {e}")))?;
    let user = args
        .user
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "console".to_owned());
    // The runtime first: a PostgreSQL journal's tasks run on it.
    let rt = crate::audit::runtime()?;
    let builder = match executor {
        Some(executor) => Console::builder(executor.clone()),
        None => Console::journal_only(crate::audit::open_approval_store(cli, &rt)?),
    };
    let console = builder
        .user(user.clone(), token.clone())
        .behind_tls(args.behind_tls)
        .build()
        .map_err(|e| Failure::new(Exit::Usage, e.to_string()))?;
    println!("sallyport console: http://{}/ (user {user})", args.listen);
    if generated {
        println!("login token (shown once): {}", token.expose());
    }
    if executor.is_none() {
        println!(
            "this console records decisions only; the application that parked a call carries it out"
        );
    }
    rt.block_on(console.listen(args.listen))
        .map_err(|e| Failure::new(Exit::Failure, e.to_string()))
}
