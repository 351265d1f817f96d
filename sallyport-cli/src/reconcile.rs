//! `sallyport reconcile`: settles attempts a crashed executor left unresolved, through each
//! action's read-only reconcile action ([`sallyport_core::Executor::reconcile`]).

use std::time::Duration;

use sallyport_core::Executor;
use sallyport_core::executor::{ReconcileOptions, ReconcileOutcome, Reconciled};

use crate::approvals::ascii_json;
use crate::exit::{Exit, Failure};

/// What the plain binary answers: it has no actions to run checks with.
pub(crate) const RECONCILE_NEEDS_EXECUTOR: &str = "`reconcile` needs the application's \
actions (it runs each action's read-only reconcile action), which the plain `sallyport` binary \
does not have, so it changes nothing. Run `reconcile` through the application's own command \
(`sallyport_cli::run_with_executor`), or call `Executor::reconcile` from the application; \
`audit unresolved` lists the unresolved attempts.";

/// Runs the reconciler and prints what it did. Exits [`Exit::Unsettled`] when an attempt it
/// looked at is still unknown.
pub(crate) fn run(
    executor: Option<&Executor>,
    json: bool,
    min_age_secs: Option<u64>,
) -> Result<(), Failure> {
    let Some(executor) = executor else {
        return Err(Failure::new(Exit::Usage, RECONCILE_NEEDS_EXECUTOR));
    };
    let mut options = ReconcileOptions::new();
    if let Some(secs) = min_age_secs {
        options = options.with_min_age(Duration::from_secs(secs));
    }
    let rt = crate::audit::runtime()?;
    let report = rt
        .block_on(executor.reconcile(options))
        .map_err(|e| match e {
            sallyport_core::executor::ReconcileError::Journal(e) => Failure::from(e),
            other => Failure::new(Exit::Failure, other.to_string()),
        })?;
    if json {
        println!("{}", ascii_json(&report)?);
    } else if report.is_empty() {
        println!("no abandoned attempts to reconcile");
    } else {
        for reconciled in &report {
            println!("{}", line(reconciled));
        }
    }
    let unknown = report
        .iter()
        .filter(|r| r.outcome == ReconcileOutcome::Unknown)
        .count();
    if unknown > 0 {
        return Err(Failure::new(
            Exit::Unsettled,
            format!("{unknown} attempts are still unknown; nothing was resent"),
        ));
    }
    Ok(())
}

/// One attempt on one line: id, action, outcome, evidence and the reason (escaped: the
/// reason quotes what the upstream answered).
fn line(r: &Reconciled) -> String {
    format!(
        "{}  {}  {}  evidence {}  {}",
        r.attempt_id,
        sallyport_core::consent::escape(&r.action),
        r.outcome.as_str(),
        r.evidence.as_ref().map_or("-", |e| e.as_str()),
        sallyport_core::consent::escape(&r.reason)
    )
}
