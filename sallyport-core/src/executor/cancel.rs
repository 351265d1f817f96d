//! Recording a call whose future was dropped.

use std::sync::Arc;

use crate::action::ScopedValue;
use crate::channel::DispatchContext;
use crate::journal::{AttemptId, AuditEvent, Journal, Phase, ReceiptId};
use crate::outcome::{Origin, Status};
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
    pub(crate) consent: Option<String>,
    pub(crate) divergences: Vec<crate::drift::Divergence>,
    pub(crate) dispatch: Option<Arc<DispatchContext>>,
    armed: bool,
}

impl CallGuard {
    pub(crate) fn new(
        journal: Arc<dyn Journal>,
        attempt_id: AttemptId,
        action: &str,
        session: &Session,
    ) -> Self {
        Self {
            journal,
            attempt_id,
            action: bounded(action, 128),
            session_id: session.id().as_str().to_owned(),
            definition_hash: None,
            objects: Vec::new(),
            note: None,
            request: None,
            consent: None,
            divergences: Vec::new(),
            dispatch: None,
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
        code: Option<String>,
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
            consent: self.consent.clone(),
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
                Some("cancelled_after_send".to_owned()),
                Some("the call was cancelled after a request may have left".to_owned()),
            )
        } else {
            self.event(
                Phase::CancelledBeforeSend,
                Status::Rejected,
                Some(Origin::Executor),
                Some("cancelled_before_send".to_owned()),
                Some("the call was cancelled before anything was sent".to_owned()),
            )
        };
        self.journal.append_detached(event);
    }
}

/// `text` cut to at most `max` bytes at a character boundary.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
