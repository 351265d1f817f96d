//! Recording a call whose future was dropped.

use std::sync::Arc;

use super::filter::scrub_event;
use super::record::CallRecord;
use crate::channel::DispatchContext;
use crate::code::UpstreamCode;
use crate::journal::{Journal, Phase};
use crate::outcome::{Origin, Status};

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
