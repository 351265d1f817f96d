//! The hooks that put each call, its consent wait and its dispatch in spans named by
//! [`crate::telemetry`] (which holds only the names, so it imports nothing of the executor),
//! and an approval's steps (parked, decided, expired, resumed) in span events. Without the
//! `otel` feature every hook hands its future back unchanged.

use std::future::Future;

use crate::approval::{Approval, ApprovalId};
use crate::channel::DispatchContext;
use crate::code::ConsentOutcome;
use crate::executor::{CallOptions, Inner};
use crate::outcome::ActionResult;
#[cfg(feature = "otel")]
use crate::telemetry::{OPERATION_EXECUTE_TOOL, TARGET, attr, span};

/// Runs `call` (one whole call, to its answer) inside its `execute_tool` span and records
/// the answer on it.
#[cfg(feature = "otel")]
pub(crate) fn traced<F>(
    inner: &Inner,
    action: &str,
    options: &CallOptions,
    call: F,
) -> impl Future<Output = crate::outcome::ActionResult> + use<F>
where
    F: Future<Output = crate::outcome::ActionResult>,
{
    use tracing::Instrument as _;

    let span = enabled::call_span(inner, action, options);
    let recorded = span.clone();
    enabled::CALL.scope(
        enabled::CallState::default(),
        async move {
            let result = call.await;
            enabled::finish(&recorded, &result);
            result
        }
        .instrument(span),
    )
}

/// Without the feature: `call` itself.
#[cfg(not(feature = "otel"))]
pub(crate) fn traced<F>(
    _inner: &Inner,
    _action: &str,
    _options: &CallOptions,
    call: F,
) -> impl Future<Output = crate::outcome::ActionResult> + use<F>
where
    F: Future<Output = crate::outcome::ActionResult>,
{
    call
}

/// Runs `run` (an approved call carried out under its claim) inside an `execute_tool` span
/// of its own, with the approval's id and a `resumed` event, and records its answer there.
#[cfg(feature = "otel")]
pub(crate) fn resumed<F>(
    inner: &Inner,
    approval: &Approval,
    executor: &str,
    run: F,
) -> impl Future<Output = Option<ActionResult>> + use<F>
where
    F: Future<Output = Option<ActionResult>>,
{
    use tracing::Instrument as _;

    let span = enabled::call_span(inner, &approval.action, &CallOptions::new());
    span.record(
        crate::telemetry::attr::APPROVAL_ID,
        approval.approval_id.as_str(),
    );
    let recorded = span.clone();
    let id = approval.approval_id.clone();
    let executor = executor.to_owned();
    enabled::CALL.scope(
        enabled::CallState::default(),
        async move {
            enabled::event_resumed(&id, &executor);
            let result = run.await;
            if let Some(result) = &result {
                if result.code_str() == Some(crate::code::RefusalCode::ApprovalExpired.as_str()) {
                    crate::approval::events::expired(&id);
                }
                enabled::finish(&recorded, result);
            }
            result
        }
        .instrument(span),
    )
}

/// Without the feature: `run` itself.
#[cfg(not(feature = "otel"))]
pub(crate) fn resumed<F>(
    _inner: &Inner,
    _approval: &Approval,
    _executor: &str,
    run: F,
) -> impl Future<Output = Option<ActionResult>> + use<F>
where
    F: Future<Output = Option<ActionResult>>,
{
    run
}

/// An approved call carried out inside the agent's call (a consent provider approved it at
/// once): a `resumed` event on the call's span.
pub(crate) fn resumed_in_call(id: &ApprovalId, executor: &str) {
    #[cfg(feature = "otel")]
    enabled::event_resumed(id, executor);
    #[cfg(not(feature = "otel"))]
    let _ = (id, executor);
}

/// The consent stage decided `outcome`; the call span names the last decision of the call.
pub(crate) fn consented(outcome: ConsentOutcome) {
    #[cfg(feature = "otel")]
    enabled::with_call(|state| state.consent.set(Some(outcome)));
    #[cfg(not(feature = "otel"))]
    let _ = outcome;
}

/// `ask`, the wait on a consent provider, inside a `sallyport.consent_wait` span.
#[cfg(feature = "otel")]
pub(crate) fn consent_wait<F: Future>(ask: F) -> impl Future<Output = F::Output> {
    use tracing::Instrument as _;
    ask.instrument(tracing::info_span!(target: TARGET, span::CONSENT_WAIT))
}

/// Without the feature: `ask` itself.
#[cfg(not(feature = "otel"))]
pub(crate) fn consent_wait<F: Future>(ask: F) -> F {
    ask
}

/// `send`, the channel's dispatch, inside a `sallyport.dispatch` span that records the sends
/// `context` counted; they are added to the call's total.
///
/// A future of its own rather than an `async fn`: the span is held once (an `async fn`
/// around `send.instrument(span.clone())` held it twice, and the dispatch stage's future
/// grew by 168 bytes, not 64), so the boxed pipeline stays under 1 KB with this feature on
/// as without it (1,016 bytes before: a 1,024-byte chunk, which glibc serves from its large
/// bins, consolidating first).
#[cfg(feature = "otel")]
pub(crate) fn dispatch<'a, F: Future + Unpin>(
    channel: &str,
    context: &'a DispatchContext,
    send: F,
) -> enabled::Dispatching<'a, F> {
    let span = tracing::info_span!(
        target: TARGET,
        span::DISPATCH,
        { attr::CHANNEL } = channel,
        { attr::DISPATCHES } = tracing::field::Empty,
    );
    enabled::Dispatching {
        send,
        span,
        context,
    }
}

/// Without the feature: `send` itself.
#[cfg(not(feature = "otel"))]
pub(crate) fn dispatch<F: Future + Unpin>(
    _channel: &str,
    _context: &DispatchContext,
    send: F,
) -> F {
    send
}

#[cfg(feature = "otel")]
mod enabled {
    use std::cell::Cell;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, ready};

    use tracing::Span;
    use tracing::field::Empty;

    use super::{OPERATION_EXECUTE_TOOL, TARGET, attr};
    use crate::approval::ApprovalId;
    use crate::channel::DispatchContext;
    use crate::code::ConsentOutcome;
    use crate::executor::{CallOptions, Inner};
    use crate::outcome::ActionResult;
    use crate::telemetry::event;
    use sallyport_vocab::MAX_ACTION_NAME;

    /// What the stages of one call tell its span. One per call, set for the call's future
    /// (a task-local value, so the stages need no handle and a call nested in a consent
    /// provider has its own).
    #[derive(Default)]
    pub(super) struct CallState {
        pub(super) consent: Cell<Option<ConsentOutcome>>,
        pub(super) sends: Cell<u32>,
    }

    tokio::task_local! {
        pub(super) static CALL: CallState;
    }

    /// The channel's dispatch, polled inside its span ([`super::dispatch`]).
    pub(crate) struct Dispatching<'a, F> {
        pub(super) send: F,
        pub(super) span: Span,
        pub(super) context: &'a DispatchContext,
    }

    impl<F: Future + Unpin> Future for Dispatching<'_, F> {
        type Output = F::Output;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
            let this = &mut *self;
            let outcome = {
                let _entered = this.span.enter();
                ready!(Pin::new(&mut this.send).poll(cx))
            };
            let sends = this.context.sends();
            this.span.record(attr::DISPATCHES, sends);
            with_call(|state| state.sends.set(state.sends.get().saturating_add(sends)));
            Poll::Ready(outcome)
        }
    }

    /// Runs `f` on the current call's state; outside a traced call (a call resumed from a
    /// front end), nothing.
    pub(super) fn with_call(f: impl FnOnce(&CallState)) {
        let _ = CALL.try_with(f);
    }

    /// The call's span, made (its name formatted, its texts scrubbed) only when a
    /// subscriber wants it. The check comes first because the span macro alone still
    /// computes the fields when no subscriber is set and tracing's `log` feature is on (it
    /// then writes spans as log records): without a subscriber, a call has no span.
    pub(super) fn call_span(inner: &Inner, action: &str, options: &CallOptions) -> Span {
        if !tracing::span_enabled!(target: TARGET, tracing::Level::INFO) {
            return Span::none();
        }
        let scrubber = inner.current_scrubber();
        let tool = scrubber.bounded(action, MAX_ACTION_NAME);
        let spec = inner.catalog.get(action).map(|entry| entry.spec());
        // Only a catalog name makes a span name: span names stay few.
        let name = match spec {
            Some(spec) => format!("{OPERATION_EXECUTE_TOOL} {}", spec.name),
            None => OPERATION_EXECUTE_TOOL.to_owned(),
        };
        let call_id = options
            .tool_call_id()
            .map(|id| scrubber.bounded(id, MAX_ACTION_NAME));
        tracing::info_span!(
            target: TARGET,
            super::span::EXECUTE_TOOL,
            otel.name = name,
            otel.status_code = Empty,
            { attr::GEN_AI_OPERATION_NAME } = OPERATION_EXECUTE_TOOL,
            { attr::GEN_AI_TOOL_NAME } = tool,
            { attr::GEN_AI_TOOL_CALL_ID } = call_id,
            { attr::EFFECT_CLASS } = spec.map(|s| s.effect.as_str()),
            { attr::ERROR_TYPE } = Empty,
            { attr::STATUS } = Empty,
            { attr::ORIGIN } = Empty,
            { attr::CODE } = Empty,
            { attr::CONSENT } = Empty,
            { attr::DISPATCHES } = Empty,
            { attr::RECEIPT_ID } = Empty,
            { attr::ATTEMPT_ID } = Empty,
            { attr::APPROVAL_ID } = Empty,
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
    pub(super) fn event_resumed(id: &ApprovalId, executor: &str) {
        tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            {
                sallyport.approval_id = id.as_str(),
                sallyport.executor = bounded(executor),
            },
            "{}",
            event::RESUMED
        );
    }

    fn event_parked(id: &ApprovalId) {
        tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            {
                sallyport.approval_id = id.as_str(),
            },
            "{}",
            event::PARKED
        );
    }

    /// Records the call's answer on its span, each field once.
    pub(super) fn finish(span: &Span, result: &ActionResult) {
        span.record(attr::STATUS, result.status.as_str());
        if let Some(origin) = result.origin {
            span.record(attr::ORIGIN, origin.as_str());
        }
        let code = result.code_str();
        if let Some(code) = code {
            span.record(attr::CODE, code);
        }
        if result.is_error() {
            span.record(attr::ERROR_TYPE, code.unwrap_or("_OTHER"));
            span.record("otel.status_code", "error");
        }
        if let Some(receipt) = &result.receipt_id {
            span.record(attr::RECEIPT_ID, receipt.as_str());
        }
        span.record(attr::ATTEMPT_ID, result.attempt_id.as_str());
        with_call(|state| {
            if let Some(consent) = state.consent.get() {
                span.record(attr::CONSENT, consent.as_str());
                // Parked: the call ends pending with an approval to wait for.
                if consent == ConsentOutcome::Deferred
                    && let Some(id) = &result.approval_id
                {
                    span.in_scope(|| event_parked(id));
                }
            }
            span.record(attr::DISPATCHES, state.sends.get());
        });
    }
}
