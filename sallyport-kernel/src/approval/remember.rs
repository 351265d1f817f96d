//! "Approve and remember": an approver approves a parked call and, in the same step, lets
//! later calls of the action go out without asking, within an explicit scope
//! ([`RememberScope`]); and revokes such a standing approval.
//!
//! A remembered approval counts as its approver's approval of the parked call itself (it is
//! recorded through [`decide_under`], with its decision policy, separation of duties and
//! signature checks). It is refused before anything is decided for an
//! `irreversible_or_broad` action and for a call that needs a quorum: one approver's
//! standing consent never stands in for several approvers. The executor applies it at
//! stage 8 (see `executor::consent`), never to a call the host's policy sends to a human
//! per call, and only while the action's definition hash is the one it was made under: the
//! first call that meets a changed definition revokes it (recorded as revoked by
//! `sallyport` through `definition_drift`), so it stays revoked if the definition changes
//! back.
//!
//! Each step is audited in the journal's chain: the record `remembered` (appended before the
//! remembered approval is stored, so a crash between the two leaves a record of something
//! that covers nothing), `revoked` (appended after the revocation is stored, so a crash
//! leaves it revoked), and each call it lets through says so in its own record
//! (`applied_remembered`, consent `remembered`).

use super::{
    ApprovalError, ApprovalNote, ApprovalState, ApprovalStep, Decided, Decider, DecisionPolicy,
    RememberChoice, RememberScope, RememberedApproval, RememberedId, Revocation, Revoked, Verdict,
    decide_under, event,
};
use crate::code::ConsentOutcome;
use crate::journal::{ApprovalStore, Phase};
use crate::outcome::Status;

/// What [`remember_under`] did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RememberOutcome {
    /// The decision on the parked call, as [`decide_under`] answered it.
    pub decided: Decided,
    /// The remembered approval, when this approver's approval was recorded and approved the
    /// call; `None` when nothing was recorded (already decided, expired, refused, counted).
    pub remembered: Option<RememberedApproval>,
}

/// Approves the parked call `id` as `decider` under `policy` (exactly as [`decide_under`]
/// does) and, when that approval is recorded and approves the call, remembers it for later
/// calls of the same action within `choice`, bound to the call's definition hash.
///
/// Nothing is remembered when the decision is not recorded (someone decided first, it
/// expired, the approver was refused or already counted).
///
/// # Errors
///
/// [`ApprovalError::NotRememberable`] before anything is decided: the action is
/// `irreversible_or_broad`, the call needs a quorum, or the window is empty or longer than
/// [`super::MAX_REMEMBER`]. [`ApprovalError::NotFound`], or the journal's failure; when
/// storing the remembered approval fails after the approval was recorded, the call stays
/// approved (once) and the error says the remembering failed.
pub async fn remember_under(
    journal: &dyn ApprovalStore,
    policy: Option<&dyn DecisionPolicy>,
    id: &super::ApprovalId,
    decider: &Decider,
    reason: Option<&str>,
    choice: RememberChoice,
) -> Result<RememberOutcome, ApprovalError> {
    let Some(current) = journal.approval(id).await? else {
        return Err(ApprovalError::NotFound(id.clone()));
    };
    // Checked before deciding, so a refused remember decides nothing.
    RememberScope::for_approval(choice, &current, crate::clock::now_ms())
        .map_err(ApprovalError::NotRememberable)?;
    let decided = decide_under(journal, policy, id, Verdict::Approve, decider, reason).await?;
    let approved = match &decided {
        Decided::Recorded(a) if a.state != ApprovalState::Awaiting => a.clone(),
        _ => {
            return Ok(RememberOutcome {
                decided,
                remembered: None,
            });
        }
    };
    let now = crate::clock::now_ms();
    let (scope, expires_at_ms) = RememberScope::for_approval(choice, &approved, now)
        .map_err(ApprovalError::NotRememberable)?;
    let remembered = RememberedApproval {
        remembered_id: RememberedId::generate(),
        source: approved.approval_id.clone(),
        action: approved.action.clone(),
        definition_hash: approved.definition_hash.clone(),
        scope,
        created_by: decider.clone(),
        created_at_ms: now,
        expires_at_ms,
        revoked: None,
    };
    let mut note = note(&remembered, ApprovalStep::Remembered, decider);
    note.expires_at = Some(remembered.expires_at());
    let mut record = event(
        &approved,
        Phase::Decided,
        Status::Pending,
        None,
        ConsentOutcome::Approved,
        note,
    );
    record.reason = Some(format!(
        "approved and remembered for later calls of `{}` (scope {}, until {}, while its definition is unchanged)",
        remembered.action,
        remembered.scope.describe(),
        remembered.expires_at()
    ));
    // The record first: a crash before the store leaves a record of nothing live.
    journal.append(record).await?;
    journal.store_remembered(&remembered).await?;
    Ok(RememberOutcome {
        decided,
        remembered: Some(remembered),
    })
}

/// Revokes the remembered approval `id` as `by`: from then on it covers no call, and the
/// next call it would have covered is asked again. A second revocation changes nothing
/// ([`Revoked::Unchanged`]). The revocation is audited (the step `revoked`).
///
/// # Errors
///
/// The journal's failure (and [`JournalError::Unsupported`](crate::journal::JournalError::Unsupported)
/// from a store that keeps no remembered approvals).
pub async fn revoke_remembered(
    journal: &dyn ApprovalStore,
    id: &RememberedId,
    by: &Decider,
) -> Result<Revoked, ApprovalError> {
    let revocation = Revocation::new(by.clone(), crate::clock::now_ms());
    let revoked = journal.revoke_remembered(id, &revocation).await?;
    if let Revoked::Applied(r) = &revoked {
        // The parked call it was made on names the record's attempt and session; approvals
        // are never deleted, so it is there.
        let Some(source) = journal.approval(&r.source).await? else {
            return Err(ApprovalError::NotFound(r.source.clone()));
        };
        let mut record = event(
            &source,
            Phase::Decided,
            Status::Pending,
            None,
            ConsentOutcome::Approved,
            note(r, ApprovalStep::Revoked, by),
        );
        record.reason = Some(format!(
            "remembered approval {} revoked; later calls of `{}` are asked again",
            r.remembered_id, r.action
        ));
        journal.append(record).await?;
    }
    Ok(revoked)
}

/// The approval note of a step of `r`, by `decider`.
pub(crate) fn note(r: &RememberedApproval, step: ApprovalStep, decider: &Decider) -> ApprovalNote {
    let mut note = ApprovalNote::new(r.source.clone(), step).with_decider(decider);
    note.remembered = Some(r.remembered_id.clone());
    note.scope = Some(r.scope.describe());
    note
}
