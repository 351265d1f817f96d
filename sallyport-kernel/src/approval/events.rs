//! The OpenTelemetry events of a decision (see [`crate::telemetry`]): they live beside the
//! decision, not in the executor, because deciding needs no executor.

use std::future::Future;

use super::{ApprovalError, ApprovalId, Decided, Decider, Verdict};

/// Runs `decide` (one decision on approval `id`) and records a `decided` event with its
/// approver, verdict, front end and what became of it: on the current span, or on a
/// `sallyport.approval.decide` span of its own when none is current.
#[cfg(feature = "otel")]
pub(crate) async fn decision<F>(
    id: &ApprovalId,
    verdict: Verdict,
    decider: &Decider,
    decide: F,
) -> Result<Decided, ApprovalError>
where
    F: Future<Output = Result<Decided, ApprovalError>>,
{
    use tracing::Instrument as _;

    let span = enabled::own_span_unless_current(id);
    let result = decide.instrument(span.clone()).await;
    if let Ok(decided) = &result {
        span.in_scope(|| enabled::event_decided(id, verdict, decider, decided));
    }
    result
}

/// Without the feature: `decide` itself.
#[cfg(not(feature = "otel"))]
pub(crate) async fn decision<F>(
    _id: &ApprovalId,
    _verdict: Verdict,
    _decider: &Decider,
    decide: F,
) -> Result<Decided, ApprovalError>
where
    F: Future<Output = Result<Decided, ApprovalError>>,
{
    decide.await
}

/// Approval `id` was recorded as expired undecided: an `expired` event on the current span.
pub(crate) fn expired(id: &ApprovalId) {
    #[cfg(feature = "otel")]
    enabled::event_expired(id);
    #[cfg(not(feature = "otel"))]
    let _ = id;
}

#[cfg(feature = "otel")]
mod enabled {
    use tracing::Span;

    use crate::approval::{ApprovalId, Decided, Decider, Verdict};
    use crate::telemetry::{TARGET, attr, event, span};
    use sallyport_vocab::MAX_ACTION_NAME;

    /// A `sallyport.approval.decide` span for approval `id` when no span is current and a
    /// subscriber wants it; otherwise none (the events go to the current span).
    pub(super) fn own_span_unless_current(id: &ApprovalId) -> Span {
        if !Span::current().is_none()
            || !tracing::span_enabled!(target: TARGET, tracing::Level::INFO)
        {
            return Span::none();
        }
        tracing::info_span!(
            target: TARGET,
            span::APPROVAL_DECIDE,
            { attr::APPROVAL_ID } = id.as_str(),
        )
    }

    /// `text` cut to 128 bytes at a character boundary (names only: never a secret).
    fn bounded(text: &str) -> &str {
        let mut end = text.len().min(MAX_ACTION_NAME);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        &text[..end]
    }

    // The event macros take field names as written (`a.b`), not as constants: each name
    // below is the `attr` constant of the same spelling (the OpenTelemetry tests compare the
    // exported events with the constants).
    pub(super) fn event_decided(
        id: &ApprovalId,
        verdict: Verdict,
        decider: &Decider,
        decided: &Decided,
    ) {
        let decision = match decided {
            Decided::Recorded(_) => "recorded",
            Decided::AlreadyDecided(_) => "already_decided",
            Decided::Expired(_) => "expired",
            Decided::AlreadyCounted(_) => "already_counted",
            Decided::Refused { .. } => "refused",
        };
        tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            {
                sallyport.approval_id = id.as_str(),
                sallyport.approver = bounded(&decider.by),
                sallyport.verdict = verdict.as_str(),
                sallyport.front_end = bounded(&decider.channel),
                sallyport.decision = decision,
                sallyport.approval_state = decided.approval().state.as_str(),
            },
            "{}",
            event::DECIDED
        );
    }

    pub(super) fn event_expired(id: &ApprovalId) {
        tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            {
                sallyport.approval_id = id.as_str(),
            },
            "{}",
            event::EXPIRED
        );
    }
}
