//! The driver: runs the stages in order, each on the previous stage's value, and fills the
//! call's record from each value as its stage completes.

use std::sync::Arc;

use serde_json::Value;

use super::Inner;
use super::authorize::{self, Authorized};
use super::cancel::CallGuard;
use super::consent::ConsentRefused;
use super::intent::NotIntended;
use super::policy::Purpose;
use super::validate::{self, Limits};
use super::{
    consent, definition, dispatch, filter, hooks, intent, normalize, precheck, record, resolve,
    vault,
};
use crate::approval::{Approval, ApprovalId, Claim};
use crate::code::RefusalCode;
use crate::outcome::{ActionResult, Refusal};
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
    match Box::pin(pipeline(
        inner,
        guard,
        session,
        &mut arguments,
        Consent::Ask,
    ))
    .await
    {
        Ok(ended) => ended,
        Err(stop) => {
            // Only an approved call's intent can be fenced (`Journal::begin_approved`); a
            // fresh call's never is. Were it ever, the call is refused and recorded: nothing
            // was sent.
            let refusal = match stop {
                NotIntended::Refused(refusal) | NotIntended::Unrecorded(refusal) => refusal,
                NotIntended::Fenced => intent::unrecorded(),
            };
            Ended::Answer(Box::new(Box::pin(refuse(inner, guard, refusal)).await))
        }
    }
}

/// Records `refusal` as the call's end.
pub(super) async fn refuse(inner: &Inner, guard: &CallGuard, refusal: Refusal) -> ActionResult {
    record::refusal(
        inner.journal.as_ref(),
        inner.approval_store.as_deref(),
        &inner.kept,
        guard.record(),
        refusal,
    )
    .await
}

/// Stages 1–4 only: nothing is recorded, nothing is sent, no human is asked, and no journal
/// is needed (the policy decides with the calls this process counted).
pub(super) fn preflight(
    inner: &Inner,
    action: &str,
    session: &Session,
    arguments: Value,
) -> Result<(), Refusal> {
    let scrubber = inner.current_scrubber();
    let validated = validated(inner, &scrubber, action, arguments, |_| {})?;
    authorize::authorize_now(inner, scrubber, session, validated).map(|_| ())
}

/// Stages 1–3, telling `fill` about each value as it is made.
fn validated(
    inner: &Inner,
    scrubber: &Scrubber,
    action: &str,
    arguments: Value,
    mut fill: impl FnMut(Step<'_>),
) -> Result<validate::Validated, Refusal> {
    let resolved = resolve::resolve(&inner.catalog, action)?;
    fill(Step::Resolved(&resolved));
    let limits = Limits {
        drift_mode: inner.drift_mode,
        max_argument_bytes: inner.max_argument_bytes,
    };
    let validated = validate::validate(limits, scrubber, resolved, arguments)?;
    fill(Step::Validated(&validated));
    Ok(validated)
}

/// Stages 1–4, telling `fill` about each value as it is made. `scrubber` is the one the call
/// begins with; the call keeps it until stage 6 gives it its own.
async fn authorized(
    inner: &Inner,
    scrubber: Arc<Scrubber>,
    action: &str,
    session: &Session,
    arguments: Value,
    purpose: Purpose<'_>,
    mut fill: impl FnMut(Step<'_>),
) -> Result<Authorized, Refusal> {
    let validated = validated(inner, &scrubber, action, arguments, &mut fill)?;
    let authorized = authorize::authorize(inner, scrubber, session, validated, purpose).await?;
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

/// What stage 8 goes on: ask as the action's rule requires, or a human's approval given
/// while the call was parked.
#[derive(Clone, Copy)]
pub(super) enum Consent<'a> {
    /// A fresh call: ask (or park the call) as the action's rule requires.
    Ask,
    /// A parked call a human approved, carried out under this executor's claim.
    Approved {
        approval: &'a Approval,
        claim: &'a Claim,
    },
}

/// The thirteen stages, for a fresh call and a resumed approval alike: only stage 8 (consent
/// asked, or the approval checked against the request prepared now) and stage 9 (the intent
/// written alone, or with the approval's move to `executing` under the claim) differ.
///
/// The arguments come by reference and are taken out of the caller's future: an argument
/// of an `async fn` keeps its slot in the future to its end, and the caller's future holds
/// them anyway. What stages 1–5 use alone lives in a block that ends before the first await,
/// for the same reason.
async fn pipeline(
    inner: &Inner,
    guard: &mut CallGuard,
    session: &Session,
    arguments: &mut Value,
    consent: Consent<'_>,
) -> Result<Ended, NotIntended> {
    let approved = {
        let scrubber = Arc::clone(&guard.record().scrubber);
        let action = guard.record().action().to_owned();
        let attempt = guard.record().attempt_id.clone();
        let purpose = match consent {
            Consent::Ask => Purpose::Call(&attempt),
            Consent::Approved { approval, .. } => Purpose::Resume(&approval.attempt_id),
        };
        let authorized = authorized(
            inner,
            scrubber,
            &action,
            session,
            std::mem::take(arguments),
            purpose,
            |step| step.fill(guard.record_mut()),
        )
        .await?;
        let approved = definition::check(inner.definition_guard.as_deref(), authorized)?;
        if let Consent::Approved { approval, .. } = consent
            && approved.call().definition_hash() != approval.definition_hash
        {
            return Err(NotIntended::Refused(Refusal::new(
                RefusalCode::DefinitionDrift,
                "the action's definition changed after this approval was requested; the approval is void; nothing was sent; make the call again to ask again",
            )));
        }
        approved
    };
    // A stage value the record borrowed lives in a block that ends before the next stage is
    // awaited: moved on but still in scope, it would keep its slot in this future to the end
    // (424 bytes for `Unlocked`, 432 for `Consented`).
    let checked = {
        let unlocked = vault::unlock(
            inner.vault.as_ref(),
            &inner.unusable,
            session.subject(),
            approved,
        )
        .await?;
        guard.record_mut().unlocked(&unlocked);
        precheck::precheck(unlocked)
    }
    .await?;
    let intended = {
        let consented = match consent {
            Consent::Ask => match consent::consent(inner, guard.record(), session, checked).await {
                Ok(consented) => consented,
                Err(ConsentRefused::Refused { decision, refusal }) => {
                    guard.record_mut().consent_refused(decision);
                    crate::executor::spans::consented(decision);
                    return Err(NotIntended::Refused(refusal));
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
            },
            Consent::Approved { approval, .. } => consent::approved(checked, approval)?,
        };
        guard.record_mut().consented(&consented);
        crate::executor::spans::consented(consented.decision());
        // The host's pre-dispatch hooks: they see the approved request, and a denial (or a
        // hook that fails closed) refuses the call before its intent is written. Boxed, so
        // an executor without hooks does not carry their state in this future.
        if inner.hooks.any_pre() {
            Box::pin(hooks::pre_dispatch(
                &inner.hooks,
                guard.record_mut(),
                session,
                &consented,
            ))
            .await?;
        }
        let record = guard.record();
        match consent {
            Consent::Ask => {
                intent::intend(inner, &record.attempt_id, record.session_id(), consented).await?
            }
            Consent::Approved { approval, claim } => {
                intent::intend_approved(
                    inner,
                    &record.attempt_id,
                    record.session_id(),
                    consented,
                    &approval.approval_id,
                    claim,
                )
                .await?
            }
        }
    };
    let dispatched = dispatch::dispatch(inner, guard, intended).await;
    let normalized = normalize::normalize(inner, guard.record().action(), dispatched);
    let filtered = filter::filter(inner, normalized);
    // Stage 12 ends with the host's post-result hooks, on the answer the executor filtered.
    // The answer moves into their boxed future, so this one does not hold it across the
    // await (nor their state, without hooks).
    let filtered = if inner.hooks.any_post() {
        Box::pin(hooks::post_result(
            &inner.hooks,
            guard.record_mut(),
            session,
            filtered,
        ))
        .await
    } else {
        filtered
    };
    Ok(Ended::Answer(Box::new(
        record::record(inner, guard, filtered).await,
    )))
}

/// Carries out an approved call under `claim`: the same stages on the stored arguments,
/// the approval in place of asking at stage 8, the intent written with the approval's move
/// to `executing`. Every end is stored with the approval ([`crate::journal::ApprovalStore::settle_approval`]).
/// `None` when the claim was lost: another executor carries the call out, and this one wrote
/// nothing.
pub(super) async fn resume(
    inner: &Inner,
    guard: &mut CallGuard,
    session: &Session,
    approval: &Approval,
    claim: &Claim,
) -> Option<ActionResult> {
    guard.record_mut().settle = Some((approval.approval_id.clone(), claim.clone()));
    let mut arguments = approval.arguments.clone();
    let consent = Consent::Approved { approval, claim };
    match pipeline(inner, guard, session, &mut arguments, consent).await {
        Ok(Ended::Answer(result)) => Some(*result),
        // Stage 8 of an approved call never asks, so it never parks.
        Ok(Ended::ApprovedNow(_, result)) => Some(*result),
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
