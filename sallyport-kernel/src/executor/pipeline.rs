//! The driver: runs the stages in order, each on the previous stage's value, and fills the
//! call's record from each value as its stage completes.

use serde_json::Value;

use super::Inner;
use super::authorize::{self, Authorized};
use super::cancel::CallGuard;
use super::consent::ConsentRefused;
use super::intent::NotIntended;
use super::policy::Purpose;
use super::validate::{self, Limits};
use super::{
    consent, definition, dispatch, filter, intent, normalize, precheck, record, resolve, vault,
};
use crate::approval::{Approval, ApprovalId, Claim};
use crate::outcome::{ActionResult, Refusal, RefusalCode};
use crate::scrub::Scrubber;
use crate::session::Session;

/// How a call ended.
pub(super) enum Ended {
    /// Its answer, with exactly one audit record behind it.
    Answer(Box<ActionResult>),
    /// Parked, and approved at once by the consent provider: the executor carries the
    /// approval out (the parked call's answer is used if it cannot).
    ApprovedNow(ApprovalId, Box<ActionResult>),
}

/// Runs one call to its end.
pub(super) async fn run(
    inner: &Inner,
    guard: &mut CallGuard,
    session: &Session,
    mut arguments: Value,
) -> Ended {
    // The stages are boxed apart from the call's guard, so each box stays under 1 KB: glibc
    // serves an allocation from 1 KB on from its large bins, which first consolidates every
    // small chunk freed since. It holds with serde_json's `preserve_order` on too (rig-core
    // and cedar-policy turn it on, and `Value` grows from 32 bytes to 72): 864 bytes then,
    // measured with `-Zprint-type-sizes` in release. A refusal's record is boxed on its own
    // (its future is larger, 1.3 KB).
    match Box::pin(pipeline(inner, guard, session, &mut arguments)).await {
        Ok(ended) => ended,
        Err(refusal) => Ended::Answer(Box::new(Box::pin(refuse(inner, guard, refusal)).await)),
    }
}

/// Records `refusal` as the call's end.
pub(super) async fn refuse(inner: &Inner, guard: &CallGuard, refusal: Refusal) -> ActionResult {
    record::refusal(
        inner.journal.as_ref(),
        inner.approval_store.as_deref(),
        guard.record(),
        refusal,
    )
    .await
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
    let purpose = Purpose::Preflight;
    authorized(
        inner,
        &scrubber,
        action,
        session,
        arguments,
        purpose,
        |_| {},
    )
    .map(|_| ())
}

/// Stages 1–4, telling `fill` about each value as it is made.
fn authorized(
    inner: &Inner,
    scrubber: &Scrubber,
    action: &str,
    session: &Session,
    arguments: Value,
    purpose: Purpose<'_>,
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
    let authorized = authorize::authorize(inner, scrubber, session, validated, purpose)?;
    fill(Step::Authorized(&authorized));
    Ok(authorized)
}

/// A value of stages 1–4, for the record.
enum Step<'a> {
    Resolved(&'a resolve::Resolved),
    Validated(&'a validate::Validated),
    Authorized(&'a Authorized),
}

impl Step<'_> {
    /// Fills the call's record from the value.
    fn fill(self, record: &mut record::CallRecord) {
        match self {
            Step::Resolved(v) => record.resolved(v),
            Step::Validated(v) => record.validated(v),
            Step::Authorized(v) => record.authorized(v),
        }
    }
}

/// The arguments come by reference and are taken out of the caller's future: an argument
/// of an `async fn` keeps its slot in the future to its end, and the caller's future holds
/// them anyway. What stages 1–5 use alone lives in a block that ends before the first await,
/// for the same reason.
async fn pipeline(
    inner: &Inner,
    guard: &mut CallGuard,
    session: &Session,
    arguments: &mut Value,
) -> Result<Ended, Refusal> {
    let approved = {
        let scrubber = std::sync::Arc::clone(&guard.record().scrubber);
        let action = guard.record().action().to_owned();
        let attempt = guard.record().attempt_id.clone();
        let purpose = Purpose::Call(&attempt);
        let authorized = authorized(
            inner,
            &scrubber,
            &action,
            session,
            std::mem::take(arguments),
            purpose,
            |step| step.fill(guard.record_mut()),
        )?;
        definition::check(inner.definition_guard.as_deref(), authorized)?
    };
    // A stage value the record borrowed lives in a block that ends before the next stage is
    // awaited: moved on but still in scope, it would keep its slot in this future to the end
    // (424 bytes for `Unlocked`, 432 for `Consented`).
    let checked = {
        let unlocked = vault::unlock(inner.vault.as_ref(), &inner.unusable, approved).await?;
        guard.record_mut().unlocked(&unlocked);
        precheck::precheck(unlocked)
    }
    .await?;
    let intended = {
        let consented = match consent::consent(inner, guard.record(), session, checked).await {
            Ok(consented) => consented,
            Err(ConsentRefused::Refused { decision, refusal }) => {
                guard.record_mut().consent_refused(decision);
                crate::executor::spans::consented(decision);
                return Err(refusal);
            }
            // The parked call's record is written: nothing is left for the guard to record.
            Err(ConsentRefused::Parked(answer)) => {
                guard.disarm();
                return Ok(Ended::Answer(answer));
            }
            Err(ConsentRefused::ApprovedNow(id, answer)) => {
                guard.disarm();
                return Ok(Ended::ApprovedNow(id, answer));
            }
        };
        guard.record_mut().consented(&consented);
        crate::executor::spans::consented(consented.decision());
        let record = guard.record();
        intent::intend(inner, &record.attempt_id, record.session_id(), consented)
    }
    .await?;
    let dispatched = dispatch::dispatch(inner, guard, intended).await;
    let normalized = normalize::normalize(inner, guard.record().action(), dispatched);
    let filtered = filter::filter(normalized);
    Ok(Ended::Answer(Box::new(
        record::record(inner, guard, filtered).await,
    )))
}

/// Carries out an approved call under `claim`: stages 1–7 again on the stored arguments,
/// the approval in place of stage 8, the intent written with the approval's move to
/// `executing`, then dispatch to record as for any call. Every end is stored with the
/// approval ([`crate::journal::ApprovalStore::settle_approval`]). `None` when the claim was lost: another
/// executor carries the call out, and this one wrote nothing.
pub(super) async fn resume(
    inner: &Inner,
    guard: &mut CallGuard,
    session: &Session,
    approval: &Approval,
    claim: &Claim,
) -> Option<ActionResult> {
    guard.record_mut().settle = Some((approval.approval_id.clone(), claim.clone()));
    match resumed(inner, guard, session, approval, claim).await {
        Ok(result) => Some(result),
        Err(NotIntended::Fenced) => None,
        Err(NotIntended::Refused(refusal)) => Some(refuse(inner, guard, refusal).await),
        // The journal failed before anything was sent: the approval stays approved, and
        // this attempt's refusal is recorded on its own.
        Err(NotIntended::Unrecorded(refusal)) => {
            guard.record_mut().settle = None;
            Some(refuse(inner, guard, refusal).await)
        }
    }
}

async fn resumed(
    inner: &Inner,
    guard: &mut CallGuard,
    session: &Session,
    approval: &Approval,
    claim: &Claim,
) -> Result<ActionResult, NotIntended> {
    let scrubber = std::sync::Arc::clone(&guard.record().scrubber);
    let arguments = approval.arguments.clone();
    let authorized = authorized(
        inner,
        &scrubber,
        &approval.action,
        session,
        arguments,
        Purpose::Resume(&approval.attempt_id),
        |step| step.fill(guard.record_mut()),
    )
    .map_err(NotIntended::Refused)?;
    let approved = definition::check(inner.definition_guard.as_deref(), authorized)
        .map_err(NotIntended::Refused)?;
    if approved.authorized().validated().entry().definition_hash() != approval.definition_hash {
        return Err(NotIntended::Refused(Refusal::new(
            RefusalCode::DefinitionDrift,
            "the action's definition changed after this approval was requested; the approval is void; nothing was sent; make the call again to ask again",
        )));
    }
    let unlocked = vault::unlock(inner.vault.as_ref(), &inner.unusable, approved)
        .await
        .map_err(NotIntended::Refused)?;
    guard.record_mut().unlocked(&unlocked);
    let checked = precheck::precheck(unlocked)
        .await
        .map_err(NotIntended::Refused)?;
    let consented = consent::approved(checked, approval).map_err(NotIntended::Refused)?;
    guard.record_mut().consented(&consented);
    crate::executor::spans::consented(consented.decision());
    let attempt_id = guard.record().attempt_id.clone();
    let session_id = guard.record().session_id().to_owned();
    let intended = intent::intend_approved(
        inner,
        &attempt_id,
        &session_id,
        consented,
        &approval.approval_id,
        claim,
    )
    .await?;
    let dispatched = dispatch::dispatch(inner, guard, intended).await;
    let normalized = normalize::normalize(inner, &approval.action, dispatched);
    let filtered = filter::filter(normalized);
    Ok(record::record(inner, guard, filtered).await)
}
