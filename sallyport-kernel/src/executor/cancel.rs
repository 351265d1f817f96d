//! Recording a call whose future was dropped.

use std::sync::Arc;

use super::record::CallRecord;
use crate::channel::DispatchContext;
use crate::code::{Code, UpstreamCode};
use crate::journal::{AuditEvent, Journal, Phase};
use crate::outcome::{Origin, Status};
use crate::scrub::{CUT, Scrubber};

/// Holds the call's [`CallRecord`] and records a cancellation if the call's future is
/// dropped before the pipeline finishes: `cancelled_before_send`, or `unknown` once a
/// request may have left. Once the call's last record has been handed to the journal
/// ([`CallRecord::hand_over`]) it records nothing: that record is the call's one record.
pub(crate) struct CallGuard {
    journal: Arc<dyn Journal>,
    record: CallRecord,
    dispatch: Option<Arc<DispatchContext>>,
    armed: bool,
}

impl CallGuard {
    pub(crate) fn new(journal: Arc<dyn Journal>, record: CallRecord) -> Self {
        Self {
            journal,
            record,
            dispatch: None,
            armed: true,
        }
    }

    /// What the call's record says so far.
    pub(crate) fn record(&self) -> &CallRecord {
        &self.record
    }

    /// The record, for the pipeline to fill from the stage values.
    pub(crate) fn record_mut(&mut self) -> &mut CallRecord {
        &mut self.record
    }

    /// Stage 10 began: from now on the sends the context counts decide how a cancellation is
    /// recorded.
    pub(crate) fn dispatching(&mut self, context: Arc<DispatchContext>) {
        self.dispatch = Some(context);
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    fn sends(&self) -> u32 {
        self.dispatch.as_ref().map_or(0, |d| d.sends())
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        // A call whose last record the journal has taken is recorded by it.
        if !self.armed || self.record.is_handed_over() {
            return;
        }
        let sends = self.sends();
        let mut event = if sends > 0 {
            self.record.event(
                Phase::CancelledUnknown,
                Status::Unknown,
                Some(Origin::Executor),
                Some(UpstreamCode::CancelledAfterSend.into()),
                Some("the call was cancelled after a request may have left".to_owned()),
                sends,
            )
        } else {
            self.record.event(
                Phase::CancelledBeforeSend,
                Status::Rejected,
                Some(Origin::Executor),
                Some(UpstreamCode::CancelledBeforeSend.into()),
                Some("the call was cancelled before anything was sent".to_owned()),
                sends,
            )
        };
        scrub_event(&self.record.scrubber, &mut event);
        self.journal.append_detached(event);
    }
}

/// Scrubs every text of an audit event; a text that was cut ([`CUT`] at its end) also loses
/// a secret fragment left at the cut.
pub(crate) fn scrub_event(scrubber: &Scrubber, event: &mut AuditEvent) {
    scrub_in_place(scrubber, &mut event.action);
    scrub_code(scrubber, &mut event.code);
    for text in [&mut event.reason, &mut event.note, &mut event.request]
        .into_iter()
        .flatten()
    {
        scrub_cut_in_place(scrubber, text);
    }
    for object in &mut event.objects {
        scrub_in_place(scrubber, &mut object.value);
    }
    if let Some(reason) = event.policy.as_mut().and_then(|p| p.reason.as_mut()) {
        scrub_cut_in_place(scrubber, reason);
    }
}

/// Scrubs `text` where it is: a text with nothing to redact (the usual case) is left as it
/// is, not copied.
pub(crate) fn scrub_in_place(scrubber: &Scrubber, text: &mut String) {
    if let std::borrow::Cow::Owned(clean) = scrubber.scrub(text) {
        *text = clean;
    }
}

/// [`scrub_cut`] where the text is, copying it only when something is redacted.
pub(crate) fn scrub_cut_in_place(scrubber: &Scrubber, text: &mut String) {
    if let std::borrow::Cow::Owned(clean) = scrub_cut(scrubber, text) {
        *text = clean;
    }
}

/// Scrubs a code: a channel may report a code of its own making, so it passes the scrubber
/// too; a known code is left as it is.
pub(crate) fn scrub_code(scrubber: &Scrubber, code: &mut Option<Code>) {
    if let Some(text) = code
        && let std::borrow::Cow::Owned(clean) = scrubber.scrub(text.as_str())
    {
        *text = Code::from(clean);
    }
}

/// `text` scrubbed; when it ends with the [`CUT`] mark, a secret fragment before the mark is
/// redacted too.
pub(crate) fn scrub_cut<'t>(scrubber: &Scrubber, text: &'t str) -> std::borrow::Cow<'t, str> {
    match text.strip_suffix(CUT) {
        Some(head) => format!("{}{CUT}", scrubber.scrub_head(head)).into(),
        None => scrubber.scrub(text),
    }
}
