//! Approvals that outlive the call: a parked request, decided anywhere, resumed once.
//!
//! With deferred consent ([`ConsentMode::Deferred`]) a call whose rule needs a human is not
//! held open while someone is asked. The executor stores an [`Approval`] in the journal — the
//! prepared request as the human will see it (real destination), its fingerprint, the
//! definition hash, the objects, the agent's note, the session and an expiry — and answers
//! at once: `pending` / `awaiting_approval`, with the approval id and a `next` naming the
//! built-in read-only action [`CHECK_APPROVAL`].
//!
//! A human decides from any front end (the CLI, a signed webhook, a web console, a consent
//! provider) through one path, [`decide`]: a compare-and-set on the stored approval, so of
//! two deliveries only one is recorded and the other is told what is already decided. An
//! approved call is then carried out by an executor that holds the action: it claims the
//! approval (a second compare-and-set with a lease and a fencing epoch), checks scope,
//! definition, vault, credential, preconditions and expiry again, prepares the request again
//! and compares it with the approved one, and writes the intent in the same transaction that
//! proves it still holds the claim. However many processes, webhook retries and consoles
//! race, one request is sent.
//!
//! ```text
//!  awaiting ──decide──▶ approved ──claim──▶ approved+claim ──intent──▶ executing ──▶ finished
//!     │                                         │  (re-checks fail) ─────────────────▶ finished (rejected)
//!     ├──decide──▶ denied
//!     └──expiry──▶ expired
//! ```
//!
//! Every step is audited in the journal's chain: the parked call's record
//! ([`Phase::Deferred`]), each decision and the expiry
//! ([`Phase::Decided`]), each with who decided and through
//! which channel ([`ApprovalNote`]), and the execution's own record with its receipt.
//!
//! ```no_run
//! # async fn demo(journal: &dyn sallyport_core::journal::ApprovalStore) -> Result<(), Box<dyn std::error::Error>> {
//! use sallyport_core::approval::{self, ApprovalId, Decider, Verdict};
//! let id = ApprovalId::from_stored("apr_0193…");
//! let decided = approval::decide(journal, &id, Verdict::Approve, &Decider::new("alice", "cli"), None).await?;
//! println!("{}", decided.approval().state);
//! # Ok(()) }
//! ```

mod authority;
pub(crate) mod check;
pub(crate) mod events;
pub mod notify;
mod remember;

use std::time::Duration;

pub use self::authority::{
    Authority, DecisionPolicy, DecisionRequest, SignatureCheck, check_signature,
};
pub use self::check::CheckApproval;
pub(crate) use self::check::{ApprovalHost, ApprovalsChannel, status_outcome};
pub(crate) use self::remember::note as remember_note;
pub use self::remember::{RememberOutcome, remember_under, revoke_remembered};
use crate::code::{ConsentOutcome, RefusalCode};
use crate::journal::ReceiptId;
use crate::journal::{ApprovalStore, AuditEvent, JournalError, Phase};
use crate::outcome::{Origin, Status};
pub use sallyport_vocab::approval::{
    Approval, ApprovalDecision, ApprovalFilter, ApprovalId, ApprovalNote, ApprovalState,
    ApprovalStep, Claim, ConsentMode, CoveredCall, Decider, DecisionRefusal, DecisionSignature,
    MAX_REMEMBER, NEVER_EXPIRES, NotRememberable, RememberChoice, RememberScope,
    RememberedApproval, RememberedId, Revocation, Revoked, Transition, Verdict,
};

/// The name of the built-in read-only action every executor with deferred consent offers:
/// `check_approval {"approval_id": "apr_…"}`.
pub const CHECK_APPROVAL: &str = "check_approval";

/// How long an approval waits for a decision unless the host says otherwise: 24 hours.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(24 * 60 * 60);

/// The audit event of a step of `approval`, on the parked call's attempt.
fn event(
    approval: &Approval,
    phase: Phase,
    status: Status,
    code: Option<RefusalCode>,
    consent: ConsentOutcome,
    note: ApprovalNote,
) -> AuditEvent {
    AuditEvent {
        receipt_id: ReceiptId::generate(),
        attempt_id: approval.attempt_id.clone(),
        at: crate::clock::now(),
        session_id: approval.session.id().as_str().to_owned(),
        subject: approval.session.subject().map(str::to_owned),
        action: approval.action.clone(),
        definition_hash: Some(approval.definition_hash.clone()),
        phase,
        status,
        origin: Some(Origin::Executor),
        code: code.map(Into::into),
        reason: None,
        objects: approval.objects.clone(),
        note: approval.note.clone(),
        request: Some(approval.request.clone()),
        consent: Some(consent),
        divergences: Vec::new(),
        drift_decision: None,
        dispatches: 0,
        upstream_status: None,
        approval: Some(note),
        reconciled: None,
        policy: None,
        findings: Vec::new(),
        shadow: None,
        hooks: Vec::new(),
    }
}

/// What [`decide`] did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Decided {
    /// This decision was recorded. With a quorum, an approval that is not yet the last one
    /// needed leaves the approval `awaiting`, with this approval counted.
    Recorded(Approval),
    /// Someone decided first (or it already expired, or ran): nothing changed; the approval
    /// as it stands.
    AlreadyDecided(Approval),
    /// This approver's approval was already counted towards the quorum: nothing changed.
    AlreadyCounted(Approval),
    /// The approval had expired undecided; the expiry is recorded now and nothing is sent.
    Expired(Approval),
    /// The decision was refused (the refusal is audited) and nothing changed.
    Refused {
        /// The approval as it stands.
        approval: Approval,
        /// Why, as a code.
        refusal: DecisionRefusal,
        /// Why, for the approver.
        reason: String,
    },
}

impl Decided {
    /// The approval as it stands after the decision.
    pub fn approval(&self) -> &Approval {
        match self {
            Self::Recorded(a)
            | Self::AlreadyDecided(a)
            | Self::AlreadyCounted(a)
            | Self::Expired(a)
            | Self::Refused { approval: a, .. } => a,
        }
    }
}

/// Why a decision could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// No approval has that id.
    #[error("no approval `{0}` in this journal")]
    NotFound(ApprovalId),
    /// The journal could not be read or written; nothing was decided.
    #[error("the approval store cannot be used")]
    Journal(#[from] JournalError),
    /// "Approve and remember" was refused before anything was decided (an
    /// `irreversible_or_broad` action, a quorum, a window out of range).
    #[error("cannot remember this approval")]
    NotRememberable(#[source] NotRememberable),
}

/// How often an approval of a quorum is tried again when another approval landed between
/// reading the count and the compare-and-set.
const COUNT_RETRIES: usize = 64;

/// Decides approval `id`: the one path every front end takes, with no decision policy
/// ([`decide_under`] with `None`).
///
/// # Errors
///
/// [`ApprovalError::NotFound`], or the journal's failure (nothing was decided).
pub async fn decide(
    journal: &dyn ApprovalStore,
    id: &ApprovalId,
    verdict: Verdict,
    decider: &Decider,
    reason: Option<&str>,
) -> Result<Decided, ApprovalError> {
    decide_under(journal, None, id, verdict, decider, reason).await
}

/// Decides approval `id` under `policy`: the one path every front end takes.
///
/// A compare-and-set: the decision is recorded only while the approval is awaiting and
/// before its expiry, with its audit record in the same transaction. A later or racing
/// delivery gets [`Decided::AlreadyDecided`] with what stands; an expired one records the
/// expiry. Before anything changes, a decision is refused ([`Decided::Refused`], audited as
/// the step `refused`, nothing else changes) when its signature does not verify, when the
/// approver is the session's requester approving its own call (separation of duties, with or
/// without a policy), or when `policy` gives the approver no authority.
///
/// With a quorum ([`Approval::required_approvals`] above 1) each approval counts once per
/// distinct approver ([`Decided::AlreadyCounted`] for a second one); the approval that
/// completes the quorum moves it to `approved`, its record's step `approved`, the ones before
/// it `counted`. The count is part of the compare-and-set, so racing approvers from any front
/// ends neither double-count nor both complete it. Deciding sends nothing: an executor
/// holding the action carries an approved call out ([`crate::Executor::decide`] does both).
///
/// # Errors
///
/// [`ApprovalError::NotFound`], or the journal's failure (nothing was decided).
pub async fn decide_under(
    journal: &dyn ApprovalStore,
    policy: Option<&dyn DecisionPolicy>,
    id: &ApprovalId,
    verdict: Verdict,
    decider: &Decider,
    reason: Option<&str>,
) -> Result<Decided, ApprovalError> {
    // With the `otel` feature, the decision is a span event (see `crate::telemetry`).
    let decide = decide_once(journal, policy, id, verdict, decider, reason);
    events::decision(id, verdict, decider, decide).await
}

async fn decide_once(
    journal: &dyn ApprovalStore,
    policy: Option<&dyn DecisionPolicy>,
    id: &ApprovalId,
    verdict: Verdict,
    decider: &Decider,
    reason: Option<&str>,
) -> Result<Decided, ApprovalError> {
    let mut decision = ApprovalDecision::new(verdict, decider.clone(), reason);
    let mut tries = 0;
    loop {
        tries += 1;
        let Some(current) = journal.approval(id).await? else {
            return Err(ApprovalError::NotFound(id.clone()));
        };
        if current.state != ApprovalState::Awaiting {
            return Ok(Decided::AlreadyDecided(current));
        }
        decision.at_ms = crate::clock::now_ms();
        if current.is_expired_at(decision.at_ms) {
            return match expire(journal, &current, decision.at_ms).await? {
                Transition::Applied(a) => Ok(Decided::Expired(a)),
                Transition::Unchanged(a) => Ok(Decided::AlreadyDecided(a)),
                Transition::NotFound => Err(ApprovalError::NotFound(id.clone())),
            };
        }
        if let Some((refusal, why)) = refusal(&current, policy, decider, verdict) {
            return refuse(journal, current, decider, refusal, why).await;
        }
        if verdict == Verdict::Approve && current.has_counted(decider) {
            return Ok(Decided::AlreadyCounted(current));
        }
        let quorum = current.required_approvals > 1;
        let before = current.approval_count();
        let completes = verdict == Verdict::Approve && before + 1 >= current.required_approvals;
        let step = match verdict {
            Verdict::Approve if !completes => ApprovalStep::Counted,
            _ => step_of(verdict),
        };
        let mut note = ApprovalNote::new(id.clone(), step).with_decider(decider);
        if quorum {
            decision.counted_before = Some(before);
            note.approvals = Some(if verdict == Verdict::Approve {
                before + 1
            } else {
                before
            });
            note.required = Some(current.required_approvals);
        }
        let (status, code, consent) = match verdict {
            Verdict::Approve => (Status::Pending, None, ConsentOutcome::Approved),
            Verdict::Deny => (
                Status::Rejected,
                Some(RefusalCode::ConsentDenied),
                ConsentOutcome::Denied,
            ),
        };
        let mut event = event(&current, Phase::Decided, status, code, consent, note);
        event.reason = decision.reason.clone();
        match journal.decide_approval(id, &decision, event).await? {
            Transition::Applied(a) => return Ok(Decided::Recorded(a)),
            Transition::NotFound => return Err(ApprovalError::NotFound(id.clone())),
            Transition::Unchanged(a) => {
                // Another approval of the quorum landed first: count again.
                let recount = quorum
                    && a.state == ApprovalState::Awaiting
                    && !a.has_counted(decider)
                    && tries < COUNT_RETRIES;
                if !recount {
                    return Ok(
                        if a.state == ApprovalState::Awaiting && a.has_counted(decider) {
                            Decided::AlreadyCounted(a)
                        } else {
                            Decided::AlreadyDecided(a)
                        },
                    );
                }
            }
        }
    }
}

/// Why `decider` may not give `verdict` on `current`, if it may not: a signature that does
/// not verify, self-approval, or no authority under `policy`.
fn refusal(
    current: &Approval,
    policy: Option<&dyn DecisionPolicy>,
    decider: &Decider,
    verdict: Verdict,
) -> Option<(DecisionRefusal, String)> {
    if check_signature(current, decider, verdict) == SignatureCheck::Invalid {
        return Some((
            DecisionRefusal::BadSignature,
            "the decision's signature does not verify with the key it names; nothing was decided"
                .to_owned(),
        ));
    }
    if let Some(refusal) = current.refusal(verdict, decider) {
        return Some((
            refusal,
            format!(
                "`{}` requested this call and cannot approve it (separation of duties); another \
                 approver must decide; nothing was decided",
                decider.by
            ),
        ));
    }
    match policy?.authorize(&DecisionRequest::new(current, decider, verdict)) {
        Authority::Allow => None,
        Authority::Refuse { reason } => Some((
            DecisionRefusal::NoAuthority,
            format!(
                "`{}` has no authority to decide this approval under the decision policy ({}); \
                 nothing was decided",
                decider.by,
                reason.chars().take(300).collect::<String>()
            ),
        )),
    }
}

/// Audits a refused decision (the step `refused`; the call stays as it was) and answers it.
async fn refuse(
    journal: &dyn ApprovalStore,
    current: Approval,
    decider: &Decider,
    refusal: DecisionRefusal,
    reason: String,
) -> Result<Decided, ApprovalError> {
    let mut note =
        ApprovalNote::new(current.approval_id.clone(), ApprovalStep::Refused).with_decider(decider);
    note.refusal = Some(refusal);
    // The call still waits: its consent stays deferred.
    let mut event = event(
        &current,
        Phase::Decided,
        Status::Pending,
        None,
        ConsentOutcome::Deferred,
        note,
    );
    event.reason = Some(reason.clone());
    journal.append(event).await?;
    Ok(Decided::Refused {
        approval: current,
        refusal,
        reason,
    })
}

/// Records that `approval` expired undecided (a compare-and-set, audited).
///
/// # Errors
///
/// The journal's failure.
pub async fn expire(
    journal: &dyn ApprovalStore,
    approval: &Approval,
    now_ms: u64,
) -> Result<Transition, JournalError> {
    let note = ApprovalNote::new(approval.approval_id.clone(), ApprovalStep::Expired);
    let mut event = event(
        approval,
        Phase::Decided,
        Status::Rejected,
        Some(RefusalCode::ApprovalExpired),
        ConsentOutcome::Timeout,
        note,
    );
    event.reason = Some("no one decided before the approval expired; nothing was sent".into());
    let expired = journal
        .expire_approval(&approval.approval_id, now_ms, event)
        .await?;
    if matches!(expired, Transition::Applied(_)) {
        events::expired(&approval.approval_id);
    }
    Ok(expired)
}

fn step_of(verdict: Verdict) -> ApprovalStep {
    match verdict {
        Verdict::Approve => ApprovalStep::Approved,
        Verdict::Deny => ApprovalStep::Denied,
    }
}
