//! Stage 8, consent: per the action's rule, a human approves the exact prepared request,
//! else `consent_denied`, `consent_timeout` or `consent_unavailable`. When the host's policy
//! required consent for the call (stage 4), the rule is `per_call` whatever the action's:
//! a human is asked for this one call, and no session grant covers it or is made from it.
//!
//! Before anyone is asked, a remembered approval ([`crate::approval::remember_under`]) may
//! cover the call: one that is live (not revoked, not expired), of the same action under
//! the **same definition hash**, whose scope matches (the same prepared request, the same
//! session, or a time window), and made by someone other than the call's requester. The call
//! then goes on unasked, consent `remembered`, and its record and result name the
//! remembered approval. Never for a call the host's policy sends to a human per call, an
//! `irreversible_or_broad` action, or an action that needs a quorum; a store that cannot be
//! read means asking, never sending unasked.
//!
//! With deferred consent the call is parked instead ([`crate::approval`]): the approval is
//! stored with the call's own record and the call ends `pending` / `awaiting_approval`; a
//! configured provider is still asked, as one front end. An approved call comes back here
//! through `approved`, which checks that the request prepared again is the one approved.

use std::fmt;

use super::Inner;
use super::call::Call;
use super::filter::{scrub_cut, scrub_cut_in_place, scrub_in_place};
use super::precheck::Checked;
use super::record::{self, CallRecord};
use crate::action::ConsentRule;
use crate::action::EffectClass;
use crate::approval::{
    self, Approval, ApprovalFilter, ApprovalId, ApprovalState, ConsentMode, CoveredCall, Decided,
    Decider, RememberedApproval, Verdict,
};
use crate::channel::ApplyOutcome;
use crate::code::{ConsentOutcome, RefusalCode};
use crate::consent::{ConsentDecision, ConsentDisplay, ConsentRequest, MAX_SHOWN_BYTES};
use crate::outcome::ActionResult;
use crate::outcome::Refusal;
use crate::scrub::Scrubber;
use crate::session::Session;

/// A call a human approved, or whose rule needs no one. Only this stage's `consent` makes one.
pub(crate) struct Consented {
    call: Call,
    decision: ConsentOutcome,
    /// The remembered approval that let the call go unasked (boxed: most calls have none).
    remembered: Option<Box<RememberedApproval>>,
}

impl fmt::Debug for Consented {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consented")
            .field("call", &self.call)
            .field("decision", &self.decision)
            .field("remembered", &self.remembered)
            .finish()
    }
}

impl Consented {
    /// The call as stages 1–8 established it.
    pub(crate) fn call(&self) -> &Call {
        &self.call
    }

    /// The call alone, for stage 9 to carry on.
    pub(super) fn into_call(self) -> Call {
        self.call
    }

    /// How consent was given.
    pub(crate) fn decision(&self) -> ConsentOutcome {
        self.decision
    }

    /// The remembered approval that let the call go without asking, if one did.
    pub(crate) fn remembered(&self) -> Option<&RememberedApproval> {
        self.remembered.as_deref()
    }
}

/// How stage 8 ended when the call may not go on now.
#[derive(Debug)]
pub(super) enum ConsentRefused {
    /// Refused, with the consent outcome the audit record names.
    Refused {
        decision: ConsentOutcome,
        refusal: Refusal,
    },
    /// Parked for a later decision: the call's record is written, this is its answer.
    Parked(Box<ActionResult>),
    /// Parked, and a provider approved it at once: the executor carries it out as an
    /// approved call.
    ApprovedNow(ApprovalId, Box<ActionResult>),
}

fn refused(decision: ConsentOutcome, refusal: Refusal) -> ConsentRefused {
    ConsentRefused::Refused { decision, refusal }
}

/// Asks for consent as the action's rule requires.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its by-value argument twice in its future; a block uses the capture in place"
)]
pub(super) fn consent(
    inner: &Inner,
    record: &CallRecord,
    session: &Session,
    checked: Checked,
) -> impl Future<Output = Result<Consented, ConsentRefused>> {
    async move {
        match rule_for(inner, session, checked.call()) {
            Ok(decision) => Ok(Consented {
                call: checked.into_call(),
                decision,
                remembered: None,
            }),
            // Someone must decide. That path's state (the prompt, the wait, the parking) is
            // boxed, so the future of a call that needs no one does not carry it: the whole
            // call's future is allocated and moved once per call.
            Err(rule) => Box::pin(ask(inner, record, session, checked, rule)).await,
        }
    }
}

/// How consent is given without asking anyone (`Ok`), or the rule a human must decide by.
fn rule_for(inner: &Inner, session: &Session, call: &Call) -> Result<ConsentOutcome, ConsentRule> {
    let spec = call.spec();
    let rule = if call.policy().requires_consent() {
        ConsentRule::PerCall
    } else {
        spec.consent
    };
    match rule {
        ConsentRule::None => Ok(ConsentOutcome::NotRequired),
        ConsentRule::Session
            if inner
                .grants
                .has(session.id().as_str(), &spec.name, call.definition_hash()) =>
        {
            Ok(ConsentOutcome::SessionGrant)
        }
        ConsentRule::Session | ConsentRule::PerCall => Err(rule),
    }
}

/// Asks a human (or parks the call) under `rule`.
async fn ask(
    inner: &Inner,
    record: &CallRecord,
    session: &Session,
    checked: Checked,
    rule: ConsentRule,
) -> Result<Consented, ConsentRefused> {
    let attempt_id = &record.attempt_id;
    let session_id = session.id().as_str();
    let call = checked.call();
    let spec = call.spec();
    let hash = call.definition_hash();
    let done = |checked: Checked, decision| {
        Ok(Consented {
            call: checked.into_call(),
            decision,
            remembered: None,
        })
    };
    if let Some(remembered) = covering(inner, session, call).await {
        return Ok(Consented {
            call: checked.into_call(),
            decision: ConsentOutcome::Remembered,
            remembered: Some(Box::new(remembered)),
        });
    }
    // Deferred consent parks the call (and asks the provider, if any, from there).
    let deferred = inner.approvals.mode_for(&spec.name) == ConsentMode::Deferred;
    let provider = match &inner.consent {
        _ if deferred => None,
        Some(provider) => Some(provider),
        None => {
            return Err(refused(
                ConsentOutcome::Unavailable,
                Refusal::new(
                    RefusalCode::ConsentUnavailable,
                    "this action needs a human's approval and no one can be asked here",
                ),
            ));
        }
    };
    let scrubber = call.scrubber();
    let request = ConsentRequest {
        attempt_id: attempt_id.to_string(),
        session_id: session_id.to_owned(),
        action: spec.name.to_string(),
        summary: spec.summary.to_string(),
        effect: spec.effect,
        externality: spec.externality,
        rule,
        objects: call.objects().to_vec(),
        note: call.note().map(str::to_owned),
        request: call.summary().0.clone(),
        definition_hash: hash.to_owned(),
        display: ConsentDisplay::default(),
    };
    // The human sees no secret either: an agent may have written one into its note. The
    // display form is escaped from the scrubbed text, and shown whole or not at all.
    let request = scrub_consent(scrubber, request).with_display();
    let shown = request.display.shown_bytes();
    if shown > MAX_SHOWN_BYTES {
        return Err(refused(
            ConsentOutcome::TooLargeToShow,
            Refusal::new(
                RefusalCode::ArgumentsTooLarge,
                format!(
                    "this call needs a human's approval, and its request is {shown} bytes as shown; a consent prompt shows at most {MAX_SHOWN_BYTES} bytes and never cuts one; nothing was sent; call again with shorter values"
                ),
            ),
        ));
    }
    let Some(provider) = provider else {
        return Err(park(inner, record, session, call, request).await);
    };
    let ask = crate::executor::spans::consent_wait(provider.ask(&request));
    let decision = tokio::time::timeout(inner.consent_timeout, ask).await;
    let approve = |ttl| {
        if rule == ConsentRule::Session {
            inner.grants.grant(session_id, &spec.name, hash, ttl);
            ConsentOutcome::ApprovedForSession
        } else {
            ConsentOutcome::Approved
        }
    };
    match decision {
        Err(_) => Err(refused(
            ConsentOutcome::Timeout,
            Refusal::new(
                RefusalCode::ConsentTimeout,
                format!(
                    "no one answered the consent request within {} s; nothing was sent",
                    inner.consent_timeout.as_secs()
                ),
            ),
        )),
        Ok(ConsentDecision::Approve) => {
            let decision = approve(inner.session_grant_ttl);
            done(checked, decision)
        }
        Ok(ConsentDecision::ApproveForSession { ttl }) => {
            let decision = approve(ttl);
            done(checked, decision)
        }
        Ok(ConsentDecision::Deny { reason }) => {
            let reason = match reason {
                Some(r) => format!("a human denied this call: {}", scrubber.bounded(&r, 200)),
                None => "a human denied this call".to_owned(),
            };
            Err(refused(
                ConsentOutcome::Denied,
                Refusal::new(RefusalCode::ConsentDenied, reason),
            ))
        }
        Ok(ConsentDecision::Unavailable) => Err(refused(
            ConsentOutcome::Unavailable,
            Refusal::new(
                RefusalCode::ConsentUnavailable,
                "this action needs a human's approval and no one could be asked",
            ),
        )),
    }
}

fn scrub_consent(scrubber: &Scrubber, mut request: ConsentRequest) -> ConsentRequest {
    for text in [&mut request.request, &mut request.action]
        .into_iter()
        .chain(request.note.as_mut())
    {
        scrub_cut_in_place(scrubber, text);
    }
    for object in &mut request.objects {
        scrub_in_place(scrubber, &mut object.value);
    }
    request
}

/// Parks the call: stores its approval with the call's record, answers `pending`, and asks
/// the provider (if any) as one front end among others.
async fn park(
    inner: &Inner,
    record: &CallRecord,
    session: &Session,
    call: &Call,
    request: ConsentRequest,
) -> ConsentRefused {
    let spec = call.spec();
    let fingerprint = super::intent::fingerprint_of(call);
    crate::executor::spans::consented(ConsentOutcome::Deferred);
    let now = crate::clock::now_ms();
    // The same call again, in the same session, while an approval of it lives: the answer
    // is where that approval stands, and no one is asked twice.
    let same = ApprovalFilter::all()
        .session(session.id().as_str())
        .fingerprint(&fingerprint)
        .limit(8);
    // Deferred consent is never built without an approval store.
    let store = match inner.approval_store() {
        Ok(store) => store,
        Err(e) => return store_failed(&e),
    };
    match store.approvals(&same).await {
        Ok(existing) => {
            if let Some(approval) = existing.into_iter().find(|a| !a.is_expired_at(now)) {
                return ConsentRefused::Parked(Box::new(
                    record::parked_again(store, record, &approval).await,
                ));
            }
        }
        Err(e) => return store_failed(&e),
    }
    let mut arguments = call.arguments().clone();
    call.scrubber().scrub_json(&mut arguments);
    let approval = Approval {
        approval_id: ApprovalId::generate(),
        attempt_id: record.attempt_id.clone(),
        action: request.action.clone(),
        summary: request.summary.clone(),
        effect: spec.effect,
        externality: spec.externality,
        rule: request.rule,
        data_classes: spec.data_classes.clone(),
        session: session.clone(),
        objects: request.objects.clone(),
        note: request.note.clone(),
        request: request.request.clone(),
        fingerprint,
        definition_hash: call.definition_hash().to_owned(),
        definition_status: super::definition::status(inner.definition_guard.as_deref()).to_owned(),
        arguments,
        created_at_ms: now,
        expires_at_ms: inner.approvals.expires_at_ms(&request.action, now),
        required_approvals: inner.approvals.quorum_for(&request.action, spec.effect),
        approvals: Vec::new(),
        state: ApprovalState::Awaiting,
        decision: None,
        claim: None,
        execution: None,
        result: None,
    };
    let parked = match record::parked(store, record, &approval).await {
        Ok(result) => result,
        Err(e) => return store_failed(&e),
    };
    for notifier in &inner.approvals.notifiers {
        notifier.parked(&approval);
    }
    let Some(provider) = &inner.consent else {
        return ConsentRefused::Parked(Box::new(parked));
    };
    // A provider that answers in time decides through the same path as every other front
    // end; one that cannot ask, or does not answer, leaves the call parked.
    let ask = crate::executor::spans::consent_wait(provider.ask(&request));
    let verdict = match tokio::time::timeout(inner.consent_timeout, ask).await {
        Ok(ConsentDecision::Approve | ConsentDecision::ApproveForSession { .. }) => {
            (Verdict::Approve, None)
        }
        Ok(ConsentDecision::Deny { reason }) => (Verdict::Deny, reason),
        Ok(ConsentDecision::Unavailable) | Err(_) => {
            return ConsentRefused::Parked(Box::new(parked));
        }
    };
    let decider = Decider::new("operator", provider.channel());
    let id = approval.approval_id.clone();
    let policy = inner.approvals.decision_policy.as_deref();
    match approval::decide_under(
        store,
        policy,
        &id,
        verdict.0,
        &decider,
        verdict.1.as_deref(),
    )
    .await
    {
        Ok(Decided::Recorded(a)) if a.state == ApprovalState::Approved => {
            ConsentRefused::ApprovedNow(id, Box::new(parked))
        }
        Ok(decided) => {
            let mut answer = parked;
            answer.apply(&approval::status_outcome(decided.approval()));
            ConsentRefused::Parked(Box::new(answer))
        }
        Err(e) => {
            tracing::error!(approval = %id, error = %e, "a provider's decision could not be recorded");
            ConsentRefused::Parked(Box::new(parked))
        }
    }
}

fn store_failed(e: &crate::journal::JournalError) -> ConsentRefused {
    tracing::error!(error = %e, "the approval store cannot be used");
    refused(
        ConsentOutcome::Deferred,
        Refusal::new(
            RefusalCode::JournalUnavailable,
            "this call needs a human's approval, and the approval request could not be stored; nothing was sent and no one was asked; retrying later is safe",
        ),
    )
}

/// Stage 8 for a call a human approved earlier: the approval holds only for the request it
/// was given for, and only until it expires.
pub(super) fn approved(checked: Checked, approval: &Approval) -> Result<Consented, Refusal> {
    let call = checked.call();
    if approval.is_expired_at(crate::clock::now_ms()) {
        return Err(Refusal::new(
            RefusalCode::ApprovalExpired,
            format!(
                "the approval expired at {} before the call could be carried out; nothing was sent; make the call again to ask again",
                approval.expires_at()
            ),
        ));
    }
    let request = scrub_cut(call.scrubber(), &call.summary().0);
    if super::intent::fingerprint_of(call) != approval.fingerprint || request != approval.request {
        return Err(Refusal::new(
            RefusalCode::RequestChanged,
            "the request prepared now is not the one a human approved (another destination or content); the approval is void; nothing was sent; make the call again to ask again",
        ));
    }
    Ok(Consented {
        call: checked.into_call(),
        decision: ConsentOutcome::Approved,
        remembered: None,
    })
}

/// The remembered approval that lets `call` go without asking, if one does (see the module
/// docs for when none may).
async fn covering(inner: &Inner, session: &Session, call: &Call) -> Option<RememberedApproval> {
    let spec = call.spec();
    // The host's policy asked for a human on this very call: nothing remembered answers it.
    if call.policy().requires_consent()
        || spec.effect == EffectClass::IrreversibleOrBroad
        || inner.approvals.quorum_for(&spec.name, spec.effect) > 1
    {
        return None;
    }
    let store = inner.approval_store().ok()?;
    let remembered = match store.remembered_approvals(Some(&spec.name)).await {
        Ok(list) => list,
        Err(e) => {
            // Fail closed: the call is asked as if nothing were remembered.
            tracing::warn!(error = %e, "remembered approvals cannot be read; asking");
            return None;
        }
    };
    let fingerprint = super::intent::fingerprint_of(call);
    let covered = CoveredCall::new(
        &spec.name,
        call.definition_hash(),
        session.id().as_str(),
        &fingerprint,
        crate::clock::now_ms(),
    )
    .requested_by(session.requester());
    // Drift revokes: a live remembered approval made under another definition of this
    // action is revoked (and audited) the first time a call meets the changed definition, so
    // it stays revoked even if that definition comes back.
    for drifted in remembered
        .iter()
        .filter(|r| r.definition_hash != covered.definition_hash && r.is_live_at(covered.now_ms))
    {
        let by = crate::approval::Decider::new("sallyport", DRIFT_REVOKER);
        if let Err(e) = crate::approval::revoke_remembered(store, &drifted.remembered_id, &by).await
        {
            tracing::warn!(error = %e, remembered = %drifted.remembered_id.as_str(), "a remembered approval of a changed definition could not be revoked; it covers nothing all the same");
        }
    }
    remembered.into_iter().find(|r| r.covers(&covered))
}

/// The front end a remembered approval's revocation by definition drift is recorded as.
const DRIFT_REVOKER: &str = "definition_drift";
