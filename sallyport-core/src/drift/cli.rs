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
//!         return sallyport_core::drift::cli::run_baseline_command(&catalog(), &args, &mut out).into();
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
//! to [`DEFAULT_LOCKFILE`] in the working directory; a missing lockfile is an empty baseline.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::baseline::{BASELINE_FORMAT, Baseline, BaselineError, BaselineGuard, DEFAULT_LOCKFILE};
use crate::catalog::Catalog;
use crate::drift_model::DriftStatus;

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

struct Options {
    command: String,
    json: bool,
    lockfile: PathBuf,
    gateway_id: Option<String>,
    server_id: Option<String>,
    names: Vec<String>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut args = args.iter().map(String::as_str).peekable();
    if args.peek() == Some(&"baseline") {
        args.next();
    }
    let command = match args.next() {
        Some(c @ ("diff" | "approve")) => c.to_owned(),
        Some("--help" | "-h" | "help") | None => return Err(String::new()),
        Some(other) => return Err(format!("unknown baseline command `{other}`")),
    };
    let mut options = Options {
        command,
        json: false,
        lockfile: PathBuf::from(DEFAULT_LOCKFILE),
        gateway_id: None,
        server_id: None,
        names: Vec::new(),
    };
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (arg, None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next().map(str::to_owned))
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag {
            "--json" if options.command == "diff" => options.json = true,
            "--lockfile" => options.lockfile = PathBuf::from(value("--lockfile")?),
            "--gateway-id" => options.gateway_id = Some(value("--gateway-id")?),
            "--server-id" => options.server_id = Some(value("--server-id")?),
            "--help" | "-h" => return Err(String::new()),
            f if f.starts_with('-') => {
                return Err(format!(
                    "unknown option `{f}` for `baseline {}`",
                    options.command
                ));
            }
            name if options.command == "approve" => options.names.push(name.to_owned()),
            name => {
                return Err(format!(
                    "`baseline diff` takes no action names (got `{name}`)"
                ));
            }
        }
    }
    Ok(options)
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
        Ok(o) => o,
        Err(message) => {
            let _ = if message.is_empty() {
                write!(out, "{USAGE}")
            } else {
                write!(out, "error: {message}\n{USAGE}")
            };
            return if message.is_empty() {
                BaselineExit::Clean
            } else {
                BaselineExit::Error
            };
        }
    };
    let result = match options.command.as_str() {
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
