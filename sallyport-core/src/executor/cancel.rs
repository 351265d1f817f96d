//! Recording a call whose future was dropped.

use std::sync::Arc;

use crate::action::ScopedValue;
use crate::channel::DispatchContext;
use crate::code::{Code, ConsentOutcome, UpstreamCode};
use crate::journal::{AttemptId, AuditEvent, Journal, Phase, ReceiptId};
use crate::outcome::{Origin, Status};
use crate::scrub::{CUT, Scrubber};
use crate::session::Session;

/// Owns what the audit record of a call needs, and records a cancellation if the call's
/// future is dropped before the pipeline finishes.
pub(crate) struct CallGuard {
    journal: Arc<dyn Journal>,
    pub(crate) attempt_id: AttemptId,
    pub(crate) action: String,
    pub(crate) session_id: String,
    pub(crate) definition_hash: Option<String>,
    pub(crate) objects: Vec<ScopedValue>,
    pub(crate) note: Option<String>,
    pub(crate) request: Option<String>,
    pub(crate) consent: Option<ConsentOutcome>,
    pub(crate) divergences: Vec<crate::drift::Divergence>,
    pub(crate) dispatch: Option<Arc<DispatchContext>>,
    /// The call's scrubber: the vault's when the call began, replaced at stage 6 by the one
    /// built from the credential the call resolved. Every record of the call passes it,
    /// the record of a cancelled call too.
    pub(crate) scrubber: Arc<Scrubber>,
    armed: bool,
}

impl CallGuard {
    pub(crate) fn new(
        journal: Arc<dyn Journal>,
        attempt_id: AttemptId,
        action: &str,
        session: &Session,
        scrubber: Arc<Scrubber>,
    ) -> Self {
        Self {
            journal,
            attempt_id,
            action: scrubber.bounded(action, 128),
            session_id: session.id().as_str().to_owned(),
            definition_hash: None,
            objects: Vec::new(),
            note: None,
            request: None,
            consent: None,
            divergences: Vec::new(),
            dispatch: None,
            scrubber,
            armed: true,
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    pub(crate) fn sends(&self) -> u32 {
        self.dispatch.as_ref().map_or(0, |d| d.sends())
    }

    /// An audit event for this call with the given outcome.
    pub(crate) fn event(
        &self,
        phase: Phase,
        status: Status,
        origin: Option<Origin>,
        code: Option<Code>,
        reason: Option<String>,
    ) -> AuditEvent {
        AuditEvent {
            receipt_id: ReceiptId::generate(),
            attempt_id: self.attempt_id.clone(),
            at: crate::journal::now(),
            session_id: self.session_id.clone(),
            action: self.action.clone(),
            definition_hash: self.definition_hash.clone(),
            phase,
            status,
            origin,
            code,
            reason,
            objects: self.objects.clone(),
            note: self.note.clone(),
            request: self.request.clone(),
            consent: self.consent,
            divergences: self.divergences.clone(),
            drift_decision: None,
            dispatches: self.sends(),
            upstream_status: None,
        }
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let event = if self.sends() > 0 {
            self.event(
                Phase::CancelledUnknown,
                Status::Unknown,
                Some(Origin::Executor),
                Some(UpstreamCode::CancelledAfterSend.into()),
                Some("the call was cancelled after a request may have left".to_owned()),
            )
        } else {
            self.event(
                Phase::CancelledBeforeSend,
                Status::Rejected,
                Some(Origin::Executor),
                Some(UpstreamCode::CancelledBeforeSend.into()),
                Some("the call was cancelled before anything was sent".to_owned()),
            )
        };
        let mut event = event;
        scrub_event(&self.scrubber, &mut event);
        self.journal.append_detached(event);
    }
}

/// Scrubs every text of an audit event; a text that was cut ([`CUT`] at its end) also loses
/// a secret fragment left at the cut.
pub(crate) fn scrub_event(scrubber: &Scrubber, event: &mut AuditEvent) {
    event.action = scrubber.scrub(&event.action).into_owned();
    // A channel may report a code of its own making: it passes the scrubber too.
    if let Some(code) = &mut event.code
        && let std::borrow::Cow::Owned(clean) = scrubber.scrub(code.as_str())
    {
        *code = Code::from(clean);
    }
    for text in [&mut event.reason, &mut event.note, &mut event.request]
        .into_iter()
        .flatten()
    {
        *text = scrub_cut(scrubber, text);
    }
    for object in &mut event.objects {
        object.value = scrubber.scrub(&object.value).into_owned();
    }
}

/// `text` scrubbed; when it ends with the [`CUT`] mark, a secret fragment before the mark is
/// redacted too.
pub(crate) fn scrub_cut(scrubber: &Scrubber, text: &str) -> String {
    match text.strip_suffix(CUT) {
        Some(head) => format!("{}{CUT}", scrubber.scrub_head(head)),
        None => scrubber.scrub(text).into_owned(),
    }
}
