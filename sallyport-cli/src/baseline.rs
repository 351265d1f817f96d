//! `baseline diff` and `baseline approve` as a library entry point.
//!
//! The catalog is compiled into the application, so the application's own binary runs the
//! baseline commands. Its `main` hands them the catalog and the arguments:
//!
//! ```no_run
//! # use sallyport_core::Catalog;
//! # fn catalog() -> Catalog { Catalog::builder().build().unwrap() }
//! fn main() -> std::process::ExitCode {
//!     let args: Vec<String> = std::env::args().skip(1).collect();
//!     if args.first().map(String::as_str) == Some("baseline") {
//!         let mut out = std::io::stdout();
//!         return sallyport_cli::baseline::run_baseline_command(&catalog(), &args, &mut out).into();
//!     }
//!     // … run the application …
//!     std::process::ExitCode::SUCCESS
//! }
//! ```
//!
//! ```text
//! baseline diff [--json] [--lockfile PATH] [--gateway-id ID] [--server-id ID]
//! baseline approve [ACTION…] [--lockfile PATH]
//! ```
//!
//! `diff` exits 0 when every action matches the baseline, 1 when anything drifted, 2 on an
//! error. `approve` with no action names approves the whole live catalog; with names, only
//! those (a name no longer in the catalog is dropped from the lockfile). The lockfile defaults
//! to `sallyport.baseline.json` (`DEFAULT_LOCKFILE`) in the working directory; a missing lockfile is an empty baseline.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, Parser, Subcommand};
use sallyport_core::Catalog;
use sallyport_core::drift::DriftStatus;
use sallyport_core::drift::baseline::{
    BASELINE_FORMAT, Baseline, BaselineError, BaselineGuard, DEFAULT_LOCKFILE,
};

/// How a baseline command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BaselineExit {
    /// Exit 0: no drift (`diff`), or the lockfile was written (`approve`).
    Clean,
    /// Exit 1: `diff` found drift.
    Drift,
    /// Exit 2: bad arguments or an unreadable or unwritable lockfile.
    Error,
}

impl BaselineExit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Self::Clean => 0,
            Self::Drift => 1,
            Self::Error => 2,
        }
    }
}

impl From<BaselineExit> for std::process::ExitCode {
    fn from(exit: BaselineExit) -> Self {
        Self::from(exit.code())
    }
}

const USAGE: &str = "usage:
  baseline diff [--json] [--lockfile PATH] [--gateway-id ID] [--server-id ID]
  baseline approve [ACTION...] [--lockfile PATH]
";

/// The baseline commands.
#[derive(Debug, Parser)]
#[command(
    name = "baseline",
    disable_help_subcommand = true,
    disable_version_flag = true
)]
struct BaselineCli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compares the live catalog with the lockfile: exit 0 clean, 1 drifted, 2 error.
    Diff {
        /// Print the decisions as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        lockfile: Lockfile,
        /// The gateway id the decisions carry.
        #[arg(long, value_name = "ID")]
        gateway_id: Option<String>,
        /// The server id the decisions carry.
        #[arg(long, value_name = "ID")]
        server_id: Option<String>,
    },
    /// Approves the live definitions of the named actions (all with none) into the lockfile.
    Approve {
        /// The actions to approve; a name no longer in the catalog is dropped from the lockfile.
        #[arg(value_name = "ACTION")]
        names: Vec<String>,
        #[command(flatten)]
        lockfile: Lockfile,
    },
}

#[derive(Debug, Args)]
struct Lockfile {
    /// The lockfile.
    #[arg(long = "lockfile", value_name = "PATH", default_value = DEFAULT_LOCKFILE)]
    path: PathBuf,
}

struct Options {
    command: &'static str,
    json: bool,
    lockfile: PathBuf,
    gateway_id: Option<String>,
    server_id: Option<String>,
    names: Vec<String>,
}

/// What parsing ended in: options to run, or text to print with an exit.
enum Parsed {
    Run(Options),
    Usage,
    Error(String),
}

fn parse(args: &[String]) -> Parsed {
    let rest = match args.first().map(String::as_str) {
        Some("baseline") => &args[1..],
        _ => args,
    };
    let argv = std::iter::once("baseline").chain(rest.iter().map(String::as_str));
    let cli = match BaselineCli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => return clap_error(&e, rest.first().map(String::as_str)),
    };
    match cli.command {
        None => Parsed::Usage,
        Some(Command::Diff {
            json,
            lockfile,
            gateway_id,
            server_id,
        }) => Parsed::Run(Options {
            command: "diff",
            json,
            lockfile: lockfile.path,
            gateway_id,
            server_id,
            names: Vec::new(),
        }),
        Some(Command::Approve { names, lockfile }) => Parsed::Run(Options {
            command: "approve",
            json: false,
            lockfile: lockfile.path,
            gateway_id: None,
            server_id: None,
            names,
        }),
    }
}

/// Says what was wrong with the arguments in one line of our own: clap's message is written
/// for a whole program, and an application embeds these commands in its own.
fn clap_error(e: &clap::Error, command: Option<&str>) -> Parsed {
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => s.clone(),
        Some(ContextValue::Strings(s)) => s.join(" "),
        _ => String::new(),
    };
    let command = command.unwrap_or_default();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            Parsed::Usage
        }
        ErrorKind::InvalidSubcommand => Parsed::Error(format!(
            "unknown baseline command `{}`",
            context(ContextKind::InvalidSubcommand)
        )),
        ErrorKind::InvalidValue | ErrorKind::NoEquals | ErrorKind::WrongNumberOfValues => {
            let arg = context(ContextKind::InvalidArg);
            let flag = arg.split_whitespace().next().unwrap_or_default();
            Parsed::Error(format!("{flag} needs a value"))
        }
        ErrorKind::UnknownArgument => {
            let arg = context(ContextKind::InvalidArg);
            if arg.starts_with('-') {
                Parsed::Error(format!("unknown option `{arg}` for `baseline {command}`"))
            } else {
                Parsed::Error(format!(
                    "`baseline {command}` takes no action names (got `{arg}`)"
                ))
            }
        }
        _ => Parsed::Error(e.kind().as_str().unwrap_or("bad arguments").to_owned()),
    }
}

/// Runs `baseline diff` or `baseline approve` over `catalog`, writing to `out`. `args` may
/// start with `baseline`. Never panics; errors are written to `out` and reported as
/// [`BaselineExit::Error`].
pub fn run_baseline_command(
    catalog: &Catalog,
    args: &[String],
    out: &mut dyn Write,
) -> BaselineExit {
    let options = match parse(args) {
        Parsed::Run(options) => options,
        Parsed::Usage => {
            let _ = write!(out, "{USAGE}");
            return BaselineExit::Clean;
        }
        Parsed::Error(message) => {
            let _ = write!(out, "error: {message}\n{USAGE}");
            return BaselineExit::Error;
        }
    };
    let result = match options.command {
        "approve" => approve(catalog, &options, out),
        _ => diff(catalog, &options, out),
    };
    match result {
        Ok(exit) => exit,
        Err(e) => {
            let mut message = format!("error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                message.push_str(&format!(": {s}"));
                source = s.source();
            }
            let _ = writeln!(out, "{message}");
            BaselineExit::Error
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Baseline(#[from] BaselineError),
    #[error("cannot write the output")]
    Output(#[from] std::io::Error),
}

/// A missing lockfile is an empty baseline.
fn load(path: &Path) -> Result<(Baseline, bool), BaselineError> {
    match Baseline::load(path) {
        Ok(b) => Ok((b, true)),
        Err(BaselineError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok((Baseline::empty(), false))
        }
        Err(e) => Err(e),
    }
}

fn diff(
    catalog: &Catalog,
    options: &Options,
    out: &mut dyn Write,
) -> Result<BaselineExit, CliError> {
    let (baseline, existed) = load(&options.lockfile)?;
    let mut guard = BaselineGuard::new(catalog, baseline);
    if options.gateway_id.is_some() || options.server_id.is_some() {
        guard = guard.with_identity(
            options
                .gateway_id
                .clone()
                .unwrap_or_else(|| "sallyport".to_owned()),
            options
                .server_id
                .clone()
                .unwrap_or_else(|| "default".to_owned()),
        );
    }
    let decisions = guard.decisions();
    let drifted = decisions.iter().filter(|d| d.drift_detected).count();
    let baseline = guard.baseline();
    if options.json {
        let doc = json!({
            "format": BASELINE_FORMAT,
            "lockfile": options.lockfile.display().to_string(),
            "lockfile_exists": existed,
            "baseline_id": baseline.baseline_id,
            "drift_detected": drifted > 0,
            "decisions": decisions,
        });
        serde_json::to_writer_pretty(&mut *out, &doc).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "baseline {} ({}{}): {} actions, {} drifted",
            baseline.baseline_id,
            options.lockfile.display(),
            if existed { "" } else { ", not found: empty" },
            decisions.len(),
            drifted
        )?;
        for d in &decisions {
            if d.drift_status == DriftStatus::Clean {
                writeln!(out, "  clean            {}", d.tool_name)?;
                continue;
            }
            let reasons: Vec<&str> = d.reasons.iter().map(|r| r.as_str()).collect();
            writeln!(
                out,
                "  {:<16} {}  {} · severity {} ({}) · {} · {}",
                d.drift_status.as_str(),
                d.tool_name,
                d.core_disposition.as_str(),
                d.severity.as_str(),
                d.risk_score,
                d.recommended_action.as_str(),
                reasons.join(", ")
            )?;
            for change in &d.changes {
                let field = if change.field.is_empty() {
                    "(whole definition)"
                } else {
                    &change.field
                };
                writeln!(
                    out,
                    "      {field}: {} -> {}",
                    brief(&change.before),
                    brief(&change.after)
                )?;
            }
        }
        if drifted > 0 {
            writeln!(
                out,
                "review the changes, then run `baseline approve [ACTION...]` to accept them"
            )?;
        }
    }
    Ok(if drifted > 0 {
        BaselineExit::Drift
    } else {
        BaselineExit::Clean
    })
}

fn brief(value: &serde_json::Value) -> String {
    let text = if value.is_null() {
        "(absent)".to_owned()
    } else {
        value.to_string()
    };
    if text.chars().count() > 120 {
        let cut: String = text.chars().take(117).collect();
        format!("{cut}...")
    } else {
        text
    }
}

fn approve(
    catalog: &Catalog,
    options: &Options,
    out: &mut dyn Write,
) -> Result<BaselineExit, CliError> {
    let (before, _) = load(&options.lockfile)?;
    let after = before.approve(catalog, &options.names)?;
    after.save(&options.lockfile)?;
    let what = if options.names.is_empty() {
        format!("all {} actions", after.actions.len())
    } else {
        options.names.join(", ")
    };
    writeln!(
        out,
        "approved {what}: baseline {} -> {} written to {}",
        before.baseline_id,
        after.baseline_id,
        options.lockfile.display()
    )?;
    Ok(BaselineExit::Clean)
}
