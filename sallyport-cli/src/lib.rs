//! The `sallyport` command-line tool: a human puts credentials into a vault without exposing
//! them to agents, checks the audit log, and decides calls parked for approval.
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
//!
//! # Reconciling
//!
//! A crash between a call's durable intent and its outcome leaves the attempt unresolved
//! (`sallyport audit unresolved` lists them). `sallyport reconcile [--json] [--min-age SECS]`
//! settles the abandoned ones through each action's read-only reconcile action
//! ([`sallyport_core::Executor::reconcile`]): `completed` when the check finds the effect,
//! `rejected` when it proves it absent, still unknown otherwise (exit
//! [`Exit::Unsettled`]). It never resends. Like `approvals resume` it needs the
//! application's actions, so it works through [`run_with_executor`]; the plain binary
//! refuses it (exit 2).
//!
//! # Connected accounts
//!
//! `sallyport vault grants list [--credential NAME] [--json]` shows the OAuth grants the
//! vault holds: credential, subject, scopes, expiry and state, never a token.
//! `sallyport vault grants disconnect NAME [--subject S] [--force]` revokes the grant at the
//! credential's revocation endpoint (RFC 7009) and removes it
//! ([`sallyport_http::HttpChannel::disconnect`]). When the provider does not revoke it, the
//! grant is kept and the command exits [`Exit::NotRevoked`]; `--force` removes it anyway and
//! says it was not revoked. A credential without a revocation endpoint has its grant removed
//! here only, and the command says so.
//!
//! `sallyport credentials connect NAME [--subject S] [--port P] [--no-browser] [--timeout
//! SECS]` connects an account ([`sallyport_http::HttpChannel::connect`]): it listens on
//! `127.0.0.1` (a free port unless `--port`, RFC 8252 §7.3), prints the provider's
//! authorization URL and tries to open it in a browser, waits for one redirect to
//! `/callback`, answers the browser with a short plain page, and stores the grant: refresh
//! token, access token and the scopes granted. It prints credential, subject, scopes and
//! expiry, never a value. A refusal exits [`Exit::ConnectRefused`], a redirect whose `state`
//! does not match [`Exit::StateMismatch`], no redirect in time [`Exit::ConnectTimedOut`]; none
//! stores anything. `sallyport credentials list` and `sallyport credentials disconnect` are
//! `vault grants list` and `vault grants disconnect`.
//!
//! # A policy in shadow
//!
//! `sallyport policy shadow-report [--since TIME] [--until TIME] [--json]` reads the audit
//! records of a candidate policy run in shadow (`ExecutorBuilder::shadow_policy`) and counts
//! the calls it decided and its flips (where its verdict differs from the enforced policy's)
//! by rule, by action and by session. Times are RFC 3339 or a span back from now (`24h`).
//!
//! # Approvals
//!
//! With deferred consent ([`sallyport_core::approval`]) an executor parks a call that needs a
//! human in its journal and answers the agent `pending` / `awaiting_approval`. A human then
//! decides from here:
//!
//! ```text
//! sallyport approvals list [--state awaiting] [--json]
//! sallyport approvals show apr_…                      # the action card
//! sallyport approvals approve apr_… [--by NAME] [--reason TEXT]
//! sallyport approvals deny apr_… --reason TEXT [--by NAME]
//! ```
//!
//! `approve` and `deny` go through [`sallyport_core::approval::decide`], the one
//! compare-and-set every front end uses, with the decider named `--by` (default `$USER`, or
//! `USERNAME` on Windows, else `cli`) through channel `cli`. A second or late decision
//! changes nothing and exits [`Exit::AlreadyDecided`]; an approval past its expiry exits
//! [`Exit::Expired`]. `show` prints every text the journal holds through
//! [`sallyport_core::consent::escape`], and the agent's reason is labelled as the agent's
//! words, so nothing an agent wrote can move the cursor, add a line or reverse the text.
//! JSON output is ASCII only: non-ASCII characters are written as `\u` escapes.
//!
//! Carrying out an approved call needs the action itself, which the plain binary does not
//! have: it only records the decision, and its `approvals resume` refuses with exit 2. The
//! application that parked the call sends it when it resumes approved calls
//! ([`sallyport_core::Executor::resume_approvals`], at its start). An application can offer
//! the commands with its executor through [`run_with_executor`]; then `approve` also sends
//! the approved call at once ([`sallyport_core::Executor::decide`]) and `resume` carries out
//! every approved call not yet sent:
//!
//! ```no_run
//! use sallyport_core::journal::SqliteJournal;
//! use sallyport_core::{Catalog, ConsentMode, Executor};
//!
//! fn main() -> Result<std::process::ExitCode, Box<dyn std::error::Error>> {
//!     // The application's own catalog, channels and vault go here.
//!     let executor = Executor::builder(Catalog::builder().build()?)
//!         .journal(SqliteJournal::open("journal.db")?)
//!         .consent_mode(ConsentMode::Deferred)
//!         .build()?;
//!     Ok(sallyport_cli::run_with_executor(std::env::args_os(), &executor))
//! }
//! ```

//! # Scaffolding
//!
//! `sallyport scaffold --openapi FILE --operation ID [--operation ID …] [--out FILE]
//! [--force] [--credential NAME]` writes a Rust module of actions from operations of an
//! OpenAPI 3.0 / 3.1 document ([`sallyport_scaffold`]). Effect, consent and retry are left as
//! `choose` (the module does not compile until the author decides); operations it cannot
//! express are printed to standard error with the reason, and it exits
//! [`Exit::NothingGenerated`] only when none could be generated. `--out` refuses an existing
//! file unless `--force` (it may hold the author's decisions).

mod approvals;
mod args;
mod audit;
pub mod baseline;
mod console;
mod credentials;
mod exit;
mod grants;
mod policy;
mod prompt;
mod reconcile;
mod scaffold;
mod seal;
mod signing;
mod vault;

use std::ffi::OsString;
use std::process::ExitCode;

use sallyport_core::Executor;

pub use crate::args::Cli;
pub use crate::exit::Exit;

/// Parses `args` (the first item is the program name) and runs the command, printing to
/// standard output and standard error. Returns the documented exit code (see [`Exit`]).
///
/// Call it from synchronous code: it runs its own runtime (inside an async runtime it runs
/// the command on a thread of its own and blocks the caller until it is done).
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    run_inner(args, None)
}

/// [`run`] for an application that holds its [`Executor`]: the `approvals` commands use the
/// executor's journal (not `--journal`), `approvals approve` also carries the approved call
/// out ([`Executor::decide`]), and `approvals resume` carries out every approved call not yet
/// sent ([`Executor::resume_approvals`]) and prints each result; `reconcile` settles
/// abandoned attempts ([`Executor::reconcile`]). Every other command is as in [`run`].
pub fn run_with_executor<I, T>(args: I, executor: &Executor) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    run_inner(args, Some(executor))
}

fn run_inner<I, T>(args: I, executor: Option<&Executor>) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::parse_args(args) {
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
    // The commands block on a runtime of their own, which tokio refuses inside another one.
    let outcome = if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| {
            s.spawn(|| dispatch(&cli, executor))
                .join()
                .unwrap_or_else(|_| Err(exit::Failure::new(Exit::Failure, "the command panicked")))
        })
    } else {
        dispatch(&cli, executor)
    };
    match outcome {
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

fn dispatch(cli: &Cli, executor: Option<&Executor>) -> Result<(), exit::Failure> {
    match &cli.command {
        args::Command::Vault(cmd) => vault::run(cli, cmd),
        args::Command::Credentials(cmd) => credentials::run(cli, cmd),
        args::Command::Audit(cmd) => audit::run(cli, cmd),
        args::Command::Approvals(cmd) => approvals::run(cli, cmd, executor),
        args::Command::Policy(cmd) => policy::run(cli, cmd),
        args::Command::Reconcile { json, min_age } => reconcile::run(executor, *json, *min_age),
        args::Command::Console(a) => console::run(cli, a, executor),
        args::Command::Scaffold(a) => scaffold::run(a),
    }
}
