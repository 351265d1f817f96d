//! The driver: runs the stages in order, each on the previous stage's value, and fills the
//! call's record from each value as its stage completes.

use serde_json::Value;

use super::Inner;
use super::authorize::{self, Authorized};
use super::cancel::CallGuard;
use super::validate::{self, Limits};
use super::{
    consent, definition, dispatch, filter, intent, normalize, precheck, record, resolve, vault,
};
use crate::outcome::{ActionResult, Refusal};
use crate::scrub::Scrubber;
use crate::session::Session;

/// Runs one call to its end: the answer, with exactly one audit record behind it.
pub(super) async fn run(
    inner: &Inner,
    guard: &mut CallGuard,
    session: &Session,
    arguments: Value,
) -> ActionResult {
    match pipeline(inner, guard, session, arguments).await {
        Ok(result) => result,
        Err(refusal) => refuse(inner, guard, refusal).await,
    }
}

/// Records `refusal` as the call's end.
pub(super) async fn refuse(inner: &Inner, guard: &CallGuard, refusal: Refusal) -> ActionResult {
    record::refusal(inner.journal.as_ref(), guard.record(), refusal).await
}

/// Stages 1–4 only: nothing is recorded, nothing is sent, no human is asked, and no journal
/// is needed.
pub(super) fn preflight(
    inner: &Inner,
    action: &str,
    session: &Session,
    arguments: Value,
) -> Result<(), Refusal> {
    let scrubber = inner.current_scrubber();
    authorized(inner, &scrubber, action, session, arguments, |_| {}).map(|_| ())
}

/// Stages 1–4, telling `fill` about each value as it is made.
fn authorized(
    inner: &Inner,
    scrubber: &Scrubber,
    action: &str,
    session: &Session,
    arguments: Value,
    mut fill: impl FnMut(Step<'_>),
) -> Result<Authorized, Refusal> {
    let resolved = resolve::resolve(&inner.catalog, action)?;
    fill(Step::Resolved(&resolved));
    let limits = Limits {
        drift_mode: inner.drift_mode,
        max_argument_bytes: inner.max_argument_bytes,
    };
    let validated = validate::validate(limits, scrubber, resolved, arguments)?;
    fill(Step::Validated(&validated));
    let authorized = authorize::authorize(&inner.channels, session, validated)?;
    fill(Step::Authorized(&authorized));
    Ok(authorized)
}

/// A value of stages 1–4, for the record.
enum Step<'a> {
    Resolved(&'a resolve::Resolved),
    Validated(&'a validate::Validated),
    Authorized(&'a Authorized),
}

async fn pipeline(
    inner: &Inner,
    guard: &mut CallGuard,
    session: &Session,
    arguments: Value,
) -> Result<ActionResult, Refusal> {
    let scrubber = std::sync::Arc::clone(&guard.record().scrubber);
    let action = guard.record().action.clone();
    let authorized = authorized(inner, &scrubber, &action, session, arguments, |step| {
        let record = guard.record_mut();
        match step {
            Step::Resolved(v) => record.resolved(v),
            Step::Validated(v) => record.validated(v),
            Step::Authorized(v) => record.authorized(v),
        }
    })?;
    let approved = definition::check(inner.definition_guard.as_deref(), authorized)?;
    let unlocked = vault::unlock(inner.vault.as_ref(), &inner.unusable, approved).await?;
    guard.record_mut().unlocked(&unlocked);
    let checked = precheck::precheck(unlocked).await?;
    let attempt_id = guard.record().attempt_id.clone();
    let session_id = guard.record().session_id.clone();
    let consented = match consent::consent(inner, &attempt_id, &session_id, checked).await {
        Ok(consented) => consented,
        Err(refused) => {
            guard.record_mut().consent_refused(refused.decision);
            return Err(refused.refusal);
        }
    };
    guard.record_mut().consented(&consented);
    let intended = intent::intend(inner, &attempt_id, &session_id, consented).await?;
    let dispatched = dispatch::dispatch(inner, guard, intended).await;
    let normalized = normalize::normalize(inner, &action, dispatched);
    let filtered = filter::filter(normalized);
    Ok(record::record(inner, guard, filtered).await)
}
