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

pub(crate) mod check;

use std::time::Duration;

pub use self::check::CheckApproval;
pub(crate) use self::check::{ApprovalHost, ApprovalsChannel, status_outcome};
use crate::code::{ConsentOutcome, RefusalCode};
use crate::journal::ReceiptId;
use crate::journal::{ApprovalStore, AuditEvent, JournalError, Phase};
use crate::outcome::{Origin, Status};
pub use sallyport_vocab::approval::{
    Approval, ApprovalDecision, ApprovalFilter, ApprovalId, ApprovalNote, ApprovalState,
    ApprovalStep, Claim, ConsentMode, Decider, Transition, Verdict,
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
    }
}

/// What [`decide`] did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Decided {
    /// This decision was recorded.
    Recorded(Approval),
    /// Someone decided first (or it already expired, or ran): nothing changed; the approval
    /// as it stands.
    AlreadyDecided(Approval),
    /// The approval had expired undecided; the expiry is recorded now and nothing is sent.
    Expired(Approval),
}

impl Decided {
    /// The approval as it stands after the decision.
    pub fn approval(&self) -> &Approval {
        match self {
            Self::Recorded(a) | Self::AlreadyDecided(a) | Self::Expired(a) => a,
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
}

/// Decides approval `id`: the one path every front end takes.
///
/// A compare-and-set: the decision is recorded only while the approval is awaiting and
/// before its expiry, with its audit record in the same transaction. A later or racing
/// delivery gets [`Decided::AlreadyDecided`] with what stands; an expired one records the
/// expiry. Deciding sends nothing: an executor holding the action carries an approved call
/// out ([`crate::Executor::decide`] does both).
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
    let decision = ApprovalDecision::new(verdict, decider.clone(), reason);
    let Some(current) = journal.approval(id).await? else {
        return Err(ApprovalError::NotFound(id.clone()));
    };
    if current.state != ApprovalState::Awaiting {
        return Ok(Decided::AlreadyDecided(current));
    }
    if current.is_expired_at(decision.at_ms) {
        return match expire(journal, &current, decision.at_ms).await? {
            Transition::Applied(a) => Ok(Decided::Expired(a)),
            Transition::Unchanged(a) => Ok(Decided::AlreadyDecided(a)),
            Transition::NotFound => Err(ApprovalError::NotFound(id.clone())),
        };
    }
    let mut note = ApprovalNote::new(id.clone(), step_of(verdict));
    note.by = Some(decider.by.clone());
    note.channel = Some(decider.channel.clone());
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
        Transition::Applied(a) => Ok(Decided::Recorded(a)),
        Transition::Unchanged(a) => Ok(Decided::AlreadyDecided(a)),
        Transition::NotFound => Err(ApprovalError::NotFound(id.clone())),
    }
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
    journal
        .expire_approval(&approval.approval_id, now_ms, event)
        .await
}

fn step_of(verdict: Verdict) -> ApprovalStep {
    match verdict {
        Verdict::Approve => ApprovalStep::Approved,
        Verdict::Deny => ApprovalStep::Denied,
    }
}
