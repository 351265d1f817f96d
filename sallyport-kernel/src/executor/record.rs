//! Stage 13, record: the outcome is appended to the audit chain and the receipt id returned.
//! A refusal at any earlier stage ends here too, with exactly one record.
//!
//! The call record is what the audit record of a call says beyond its outcome. The pipeline
//! fills it from each stage's typed value as the stage completes, so a refusal, a
//! cancellation and a finished call all record what was established before they ended.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use super::Inner;

use super::authorize::Authorized;
use super::cancel::CallGuard;
use super::consent::Consented;
use super::filter::Filtered;
use super::filter::scrub_event;
use super::kept::{KeptRecord, KeptRecords};
use super::resolve::Resolved;
use super::validate::Validated;
use super::vault::Unlocked;
use crate::action::ScopedValue;
use crate::approval::{Approval, ApprovalId, ApprovalNote, ApprovalStep, Claim};
use crate::channel::ApplyOutcome;
use crate::code::{Code, ConsentOutcome, RefusalCode};
use crate::journal::{
    ApprovalStore, AttemptId, AuditEvent, AuditRecord, Journal, JournalError, Phase, ReceiptId,
};
use crate::outcome::{ActionResult, Origin, Refusal, Status};
use crate::scrub::Scrubber;
use crate::session::Session;
use sallyport_vocab::{MAX_ACTION_NAME, MAX_REASON};

/// What one call's audit record says beyond its outcome.
#[derive(Debug)]
pub(crate) struct CallRecord {
    pub(crate) attempt_id: AttemptId,
    /// What every event of the call copies; the last one takes them (see [`record`]).
    texts: Texts,
    consent: Option<ConsentOutcome>,
    /// The remembered approval that let this call go without asking, if one did.
    remembered: Option<Box<crate::approval::RememberedApproval>>,
    /// The approval this call carries out, and the claim it holds: its end is stored with
    /// [`ApprovalStore::settle_approval`](crate::journal::ApprovalStore::settle_approval), which finishes the approval in the same transaction.
    pub(crate) settle: Option<(ApprovalId, Claim)>,
    /// Whether the host's policy let the call through (and so counted it): kept apart from
    /// the texts' policy note, which the last record takes before the call's status is
    /// written to the counts.
    let_through: bool,
    /// The call's scrubber: the vault's when the call began, replaced at stage 6 by the one
    /// built from the credential the call resolved. Every record of the call passes it, the
    /// record of a cancelled call too.
    pub(crate) scrubber: Arc<Scrubber>,
    /// Whether the call's last record has been handed to the journal ([`Self::hand_over`]):
    /// from then on the journal writes it even if the call's future is dropped, and the
    /// call's guard records nothing more.
    handed_over: AtomicBool,
}

/// The longest subject an audit record keeps, in bytes (a longer one is cut, marked).
const MAX_SUBJECT: usize = 256;

impl CallRecord {
    /// A new call's record, before any stage has run: its attempt id, the action as called
    /// (bounded, scrubbed), the session and the scrubber the call begins with. Only the
    /// executor starts a call, so only it makes one.
    pub(super) fn new(
        attempt_id: AttemptId,
        action: &str,
        session: &Session,
        scrubber: Arc<Scrubber>,
    ) -> Self {
        Self {
            attempt_id,
            texts: Texts {
                action: scrubber.bounded(action, MAX_ACTION_NAME),
                session_id: session.id().as_str().to_owned(),
                subject: session.subject().map(|s| scrubber.bounded(s, MAX_SUBJECT)),
                ..Texts::default()
            },
            consent: None,
            remembered: None,
            settle: None,
            let_through: false,
            scrubber,
            handed_over: AtomicBool::new(false),
        }
    }

    /// The journal's write of this call's last record, marking the record handed over once
    /// the write has been polled (the journal then carries it out even if it is dropped;
    /// see [`Journal`]).
    pub(crate) fn hand_over<F: Future + Unpin>(&self, write: F) -> HandOver<'_, F> {
        HandOver {
            write,
            handed_over: &self.handed_over,
        }
    }

    /// The call's last record is kept by the executor to be written when the journal is
    /// back ([`super::kept`]): the guard records nothing more.
    fn kept(&self) {
        self.handed_over.store(true, Ordering::Relaxed);
    }

    /// Whether the call's last record has been handed to the journal.
    pub(crate) fn is_handed_over(&self) -> bool {
        self.handed_over.load(Ordering::Relaxed)
    }

    /// The action as called (bounded, scrubbed).
    pub(crate) fn action(&self) -> &str {
        &self.texts.action
    }

    /// The session's id.
    pub(crate) fn session_id(&self) -> &str {
        &self.texts.session_id
    }

    pub(super) fn resolved(&mut self, resolved: &Resolved) {
        self.texts.definition_hash = Some(resolved.entry().definition_hash().to_owned());
    }

    pub(super) fn validated(&mut self, validated: &Validated) {
        self.texts.objects = validated.objects().to_vec();
        self.texts.note = validated.note().map(str::to_owned);
        self.texts.divergences = validated.divergences().to_vec();
    }

    /// Whether the host's policy let this call through (and so counted it).
    pub(super) fn let_through_by_policy(&self) -> bool {
        self.let_through
    }

    pub(super) fn authorized(&mut self, authorized: &Authorized) {
        let call = authorized.call();
        self.texts.request = Some(call.summary().0.clone());
        self.texts.policy = call.policy().note().cloned();
        self.texts.shadow = call.policy().shadow().cloned();
        self.let_through = self
            .texts
            .policy
            .as_ref()
            .is_some_and(|note| note.decision != crate::policy::PolicyVerdict::Deny);
    }

    pub(super) fn unlocked(&mut self, unlocked: &Unlocked) {
        let call = unlocked.call();
        // Bound to the credential, the summary names the real destination (without one it
        // is the summary already recorded, not copied again).
        let summary = &call.summary().0;
        if self.texts.request.as_ref() != Some(summary) {
            self.texts.request = Some(summary.clone());
        }
        self.scrubber = Arc::clone(call.scrubber());
    }

    pub(super) fn consented(&mut self, consented: &Consented) {
        self.consent = Some(consented.decision());
        self.remembered = consented.remembered().cloned().map(Box::new);
    }

    pub(super) fn consent_refused(&mut self, decision: ConsentOutcome) {
        self.consent = Some(decision);
    }

    /// The host's hooks ran on the call: every later record of it names them.
    pub(super) fn hooks_ran(&mut self, notes: Vec<crate::hooks::HookNote>) {
        self.texts.hooks.extend(notes);
    }

    /// An audit event for this call with the given outcome.
    pub(crate) fn event(
        &self,
        phase: Phase,
        status: Status,
        origin: Option<Origin>,
        code: Option<Code>,
        reason: Option<String>,
        dispatches: u32,
    ) -> AuditEvent {
        let mut event = self.event_with(self.texts.clone(), phase, status, dispatches);
        event.origin = origin;
        event.code = code;
        event.reason = reason;
        event
    }

    /// An event of `phase` and `status` carrying `texts` (the record's own, copied or
    /// taken), with no origin, code or reason yet.
    fn event_with(
        &self,
        texts: Texts,
        phase: Phase,
        status: Status,
        dispatches: u32,
    ) -> AuditEvent {
        AuditEvent {
            receipt_id: ReceiptId::generate(),
            attempt_id: self.attempt_id.clone(),
            at: crate::clock::now(),
            session_id: texts.session_id,
            subject: texts.subject,
            action: texts.action,
            definition_hash: texts.definition_hash,
            phase,
            status,
            origin: None,
            code: None,
            reason: None,
            objects: texts.objects,
            note: texts.note,
            request: texts.request,
            consent: self.consent,
            divergences: texts.divergences,
            drift_decision: None,
            dispatches,
            upstream_status: None,
            approval: match (&self.settle, &self.remembered) {
                (Some((id, _)), _) => Some(crate::approval::ApprovalNote::new(
                    id.clone(),
                    ApprovalStep::Resumed,
                )),
                (None, Some(r)) => Some(crate::approval::remember_note(
                    r,
                    ApprovalStep::AppliedRemembered,
                    &r.created_by,
                )),
                (None, None) => None,
            },
            reconciled: None,
            policy: texts.policy,
            findings: Vec::new(),
            shadow: texts.shadow,
            hooks: texts.hooks,
        }
    }
}

/// What an audit event takes from its call's record beyond the ids.
#[derive(Clone, Debug, Default)]
struct Texts {
    session_id: String,
    subject: Option<String>,
    action: String,
    definition_hash: Option<String>,
    objects: Vec<ScopedValue>,
    note: Option<String>,
    request: Option<String>,
    divergences: Vec<crate::drift::Divergence>,
    policy: Option<crate::policy::PolicyNote>,
    shadow: Option<crate::policy::ShadowNote>,
    hooks: Vec<crate::hooks::HookNote>,
}

/// A write of a call's last record that marks the record handed over when first polled.
pub(crate) struct HandOver<'a, F> {
    write: F,
    handed_over: &'a AtomicBool,
}

impl<F: Future + Unpin> Future for HandOver<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let polled = Pin::new(&mut self.write).poll(cx);
        self.handed_over.store(true, Ordering::Relaxed);
        polled
    }
}

/// The journal's future that writes a call's last record (it does nothing until polled).
type Storing<'a> = Pin<Box<dyn Future<Output = Result<AuditRecord, JournalError>> + Send + 'a>>;

/// Makes the journal's future that stores a call's last record: with its approval when the
/// call carries one out, else as a plain append (or, for an observe call not yet journaled,
/// with its attempt). `result` gets the record's receipt id (and the approval's id) now; the
/// caller takes the receipt id back if the write fails.
///
/// Not an `async fn`: the event and the intent move straight into the journal's future, so
/// the caller's future does not hold a second copy of them while the write is awaited.
fn store<'a>(
    journal: &'a dyn Journal,
    approvals: Option<&'a dyn ApprovalStore>,
    record: &'a CallRecord,
    intent: Option<crate::journal::Intent>,
    event: AuditEvent,
    result: &mut ActionResult,
) -> Storing<'a> {
    result.receipt_id = Some(event.receipt_id.clone());
    result.remembered_approval = record.remembered.as_ref().map(|r| r.remembered_id.clone());
    match (&record.settle, intent) {
        (Some((id, claim)), _) => {
            result.approval_id = Some(id.clone());
            let settled = result.clone();
            Box::pin(async move {
                // A call carries an approval out only on an executor with a store.
                match approvals {
                    Some(store) => store.settle_approval(id, claim, &settled, event).await,
                    None => Err(JournalError::Unsupported("approvals")),
                }
            })
        }
        (None, Some(intent)) => journal.append_with_intent(intent, event),
        (None, None) => journal.append(event),
    }
}

/// The answer of a parked call, `pending` / `awaiting_approval`, stored with its approval
/// and this call's record.
pub(super) async fn parked(
    journal: &dyn ApprovalStore,
    record: &CallRecord,
    approval: &Approval,
) -> Result<ActionResult, JournalError> {
    let mut result = ActionResult::new(Status::Pending, record.action(), record.attempt_id.clone());
    result.apply(&crate::approval::status_outcome(approval));
    result.reason = Some(format!(
        "a human must approve this call; it is parked until {} and nothing was sent; check with {} (do not make the call again)",
        approval.expires_at(),
        crate::approval::CHECK_APPROVAL
    ));
    result.approval_id = Some(approval.approval_id.clone());
    let mut event = parked_event(record, &result, approval);
    let mut note = ApprovalNote::new(approval.approval_id.clone(), ApprovalStep::Requested);
    note.expires_at = Some(approval.expires_at());
    event.approval = Some(note);
    let stored = record
        .hand_over(journal.park_approval(approval, event))
        .await?;
    result.receipt_id = Some(stored.event.receipt_id);
    Ok(result)
}

/// The answer of a call identical to a parked one: where that approval stands. This call
/// gets a record of its own, naming the approval.
pub(super) async fn parked_again(
    journal: &dyn ApprovalStore,
    record: &CallRecord,
    approval: &Approval,
) -> ActionResult {
    let mut result = ActionResult::new(Status::Pending, record.action(), record.attempt_id.clone());
    result.apply(&crate::approval::status_outcome(approval));
    result.approval_id = Some(approval.approval_id.clone());
    let mut event = parked_event(record, &result, approval);
    event.approval = Some(ApprovalNote::new(
        approval.approval_id.clone(),
        ApprovalStep::Requested,
    ));
    match record.hand_over(journal.append(event)).await {
        Ok(stored) => result.receipt_id = Some(stored.event.receipt_id),
        Err(e) => {
            tracing::error!(attempt = %record.attempt_id, error = %e, "audit append failed for a repeated parked call");
        }
    }
    result
}

fn parked_event(record: &CallRecord, result: &ActionResult, approval: &Approval) -> AuditEvent {
    let mut event = record.event(
        Phase::Deferred,
        result.status,
        result.origin,
        result.code.clone(),
        result.reason.clone(),
        0,
    );
    event.consent = Some(ConsentOutcome::Deferred);
    event.request = Some(approval.request.clone());
    scrub_event(&record.scrubber, &mut event);
    event
}

/// Appends the finished call's record and returns the answer with its receipt id. An observe
/// call's attempt is written here, with the record, in one transaction.
///
/// A state-changing call's record that the journal cannot take (its request left; the
/// journal went away) is kept and written when the journal is back ([`super::kept`]); the
/// answer then says `record_pending`, with no receipt. While records are kept, a new one
/// goes behind them, so they are written in the order they were made.
///
/// The event and the journal's future for its write are made before the returned future is
/// first polled (the journal's does nothing until then): the returned future holds only
/// the answer and a pointer to the write, not the stage values, the event or the intent.
pub(super) fn record<'a>(
    inner: &'a Inner,
    guard: &'a mut CallGuard,
    filtered: Filtered,
) -> impl Future<Output = ActionResult> + Send + 'a {
    let (intended, sends, mut result, upstream_status) = filtered.into_parts();
    // The call's last record, handed over below within this poll of the caller (it awaits
    // the returned future at once); once the journal holds it the guard records nothing
    // more, so the record's texts move into the event instead of being copied.
    let texts = std::mem::take(&mut guard.record_mut().texts);
    let record = guard.record();
    let mut event = record.event_with(texts, Phase::Finished, result.status, sends);
    event.origin = result.origin;
    event.code = result.code.clone();
    event.reason = result.reason.clone();
    event.upstream_status = upstream_status;
    event.findings = result.findings.clone();
    scrub_event(&record.scrubber, &mut event);
    // The stage values are done with: only the intent goes on (into the journal's write,
    // when it is not written yet), so the future does not carry them while it waits.
    let durable = intended.intent().durable;
    let intent = (!intended.written()).then(|| intended.into_intent());
    // A state-changing call's record is kept if the journal cannot take it: a copy, boxed
    // so the future stays small. Behind records already kept it is not written now.
    let copy = durable.then(|| Box::new(event.clone()));
    let behind = durable && !inner.kept.is_empty();
    // The event and the intent move straight into the journal's (boxed) future.
    let storing = record.hand_over(store(
        inner.journal.as_ref(),
        inner.approval_store.as_deref(),
        record,
        intent,
        event,
        &mut result,
    ));
    // A block, not an `async fn`: its captures are used in place, not copied into locals
    // beside them.
    async move {
        // Behind kept records, the journal's write is dropped unpolled: nothing is queued.
        // This call's intent was written, so the journal may be back: the kept ones are
        // tried now.
        let error = if behind {
            inner.kept.nudge();
            None
        } else {
            match storing.await {
                Ok(_) => {
                    inner.journal_unwritable.store(false, Ordering::SeqCst);
                    return result;
                }
                Err(e) => {
                    inner.journal_unwritable.store(true, Ordering::SeqCst);
                    tracing::error!(attempt = %record.attempt_id, error = %e, "audit append failed after dispatch");
                    Some(e)
                }
            }
        };
        match copy {
            // Fenced: another executor closed the attempt (a reconciler took it over), and
            // this record must not enter the chain.
            Some(event) if !matches!(error, Some(JournalError::Fenced)) => {
                let kept = match &record.settle {
                    Some((id, claim)) => {
                        KeptRecord::settle(*event, id.clone(), claim.clone(), result.clone())
                    }
                    None => KeptRecord::append(*event),
                };
                inner.kept.keep(kept);
                record.kept();
                result.receipt_id = None;
                result.record_pending = true;
            }
            Some(_) => result.receipt_id = None,
            // No unaudited data reaches the agent. A read changed nothing upstream.
            None => result = withheld(&result),
        }
        result
    }
}

/// The answer to a read whose record could not be written: its data is withheld.
fn withheld(read: &ActionResult) -> ActionResult {
    let mut result = ActionResult::new(Status::Rejected, &read.action, read.attempt_id.clone());
    result.origin = Some(Origin::Executor);
    result.code = Some(RefusalCode::JournalUnavailable.into());
    result.reason = Some(
        "the read's answer could not be recorded, so it is withheld; nothing changed upstream; retrying later is safe"
            .to_owned(),
    );
    result
}

/// Records a refusal (exactly one audit record) and answers the agent.
///
/// A refusal because the journal could not be written (`journal_unavailable`) whose record
/// the journal refuses too is kept and written when the journal is back
/// ([`super::kept`]): its intent may have been committed without the executor learning it
/// (the connection broke on the way back), and this record then closes that attempt as
/// refused with nothing sent, instead of leaving it to the reconciler, whose check would
/// find the effect of the call the agent made again and count a request never sent.
pub(super) async fn refusal(
    journal: &dyn Journal,
    approvals: Option<&dyn ApprovalStore>,
    kept: &KeptRecords,
    record: &CallRecord,
    refusal: Refusal,
) -> ActionResult {
    let unrecorded = refusal.code == RefusalCode::JournalUnavailable && record.settle.is_none();
    let scrubber = &record.scrubber;
    let reason = scrubber.bounded(&refusal.reason, MAX_REASON);
    let action = scrubber.scrub(record.action()).into_owned();
    let mut result = ActionResult::new(Status::Rejected, &action, record.attempt_id.clone());
    result.origin = Some(Origin::Executor);
    result.code = Some(refusal.code.into());
    result.reason = Some(reason.clone());
    result.divergences = refusal.divergences.clone();
    result.connect = refusal.connect.map(|c| *c);
    let mut event = record.event(
        Phase::Refused,
        Status::Rejected,
        Some(Origin::Executor),
        Some(refusal.code.into()),
        Some(reason),
        0,
    );
    if event.divergences.is_empty() {
        event.divergences = refusal.divergences;
    }
    if let Some(note) = refusal.policy {
        event.policy = Some(*note);
    }
    if let Some(note) = refusal.shadow {
        event.shadow = Some(*note);
    }
    if let Some(mut decision) = refusal.decision {
        // The decision is audited by this record: its receipt is the record's.
        decision.receipt_id = Some(event.receipt_id.clone());
        result.drift = Some(decision.partner());
        event.drift_decision = Some(decision);
    }
    scrub_event(scrubber, &mut event);
    let copy = unrecorded.then(|| Box::new(event.clone()));
    match record
        .hand_over(store(journal, approvals, record, None, event, &mut result))
        .await
    {
        Ok(_) => {}
        Err(e) => {
            result.receipt_id = None;
            tracing::error!(attempt = %record.attempt_id, error = %e, "audit append failed for a refusal");
            if let Some(drift) = &mut result.drift {
                drift.receipt_id = None;
            }
            if let Some(event) = copy
                && !matches!(e, JournalError::Fenced)
            {
                kept.keep(KeptRecord::append(*event));
                record.kept();
            }
        }
    }
    result
}
