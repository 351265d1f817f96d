//! OpenTelemetry spans for every call, following the GenAI semantic conventions for tool
//! execution.
//!
//! With the cargo feature `otel` (off by default), each call to [`Executor::call`] (and
//! [`call_with`], [`call_json`], [`call_json_with`], [`run`]) is one [`tracing`] span named
//! `execute_tool {action}`, with a child span for the wait on a human's consent and one for
//! the dispatch, so a trace shows where the time went:
//!
//! ```text
//! execute_tool create_invoice        gen_ai.operation.name, gen_ai.tool.name, gen_ai.tool.call.id,
//! │                                  error.type, sallyport.{effect_class,status,origin,code,consent,
//! │                                  dispatches,receipt_id,attempt_id}
//! ├─ sallyport.consent_wait          the consent provider's answer, or its timeout
//! └─ sallyport.dispatch              sallyport.channel, sallyport.dispatches
//! ```
//!
//! The spans are plain `tracing` spans with OpenTelemetry field names: core depends on no
//! OpenTelemetry crate, and the host exports them with `tracing-opentelemetry`'s layer, which
//! turns the special field `otel.name` into the span's name and `otel.status_code` into its
//! status (`Error` for `rejected` and `unknown`, unset otherwise). Without the feature the
//! hooks compile to nothing.
//!
//! A span carries names, codes and ids only: never the arguments, the request, the result's
//! data or reason (both may quote an argument), a credential, or the idempotency key. The
//! action name and the tool-call id are bounded and pass the call's scrubber, like every
//! other string that leaves the executor. An action the catalog does not hold is named
//! `execute_tool` alone, so an agent inventing names cannot multiply span names; the name it
//! called is in `gen_ai.tool.name`.
//!
//! The model's tool-call id reaches the span through [`CallOptions::with_tool_call_id`]:
//!
//! ```no_run
//! # use sallyport_core::{Executor, Session};
//! # use sallyport_core::executor::CallOptions;
//! # async fn demo(executor: Executor, session: Session) {
//! let options = CallOptions::new().with_tool_call_id("call_8Hq2");
//! let arguments = serde_json::json!({"invoice_id": "inv_1"});
//! let result = executor.call_with("send_invoice", arguments, &session, &options).await;
//! # let _ = result; }
//! ```
//!
//! A call whose future is dropped ends its span without `sallyport.status`: the journal
//! records the cancellation (`cancelled_before_send`, or `unknown` once a request may have
//! left), and the span shows how long the call ran and where it stopped.
//!
//! # Approvals
//!
//! A call parked for a human's approval, its decisions, its expiry and its resumption are
//! span events, each named by [`event`] and carrying the approval's id
//! ([`attr::APPROVAL_ID`]):
//!
//! ```text
//! execute_tool send_invoice          the agent's call, pending
//! │  event sallyport.approval.parked
//! sallyport.approval.decide          a front end's decision (CLI, console, webhook, …)
//! │  event sallyport.approval.decided   sallyport.{approver,verdict,front_end,decision,approval_state}
//! │  event sallyport.approval.expired   (a decision that came too late records the expiry)
//! execute_tool send_invoice          the approved call, carried out (Executor::resume_approval)
//! │  event sallyport.approval.resumed   sallyport.executor
//! └─ sallyport.dispatch
//! ```
//!
//! A decision made where a span is current (a consent provider answering inside the agent's
//! call, a host's request span) is an event on that span; elsewhere it gets a
//! `sallyport.approval.decide` span of its own, since an OpenTelemetry event lives in a span.
//! An expiry seen by `check_approval` is an event on that call's span. A resumed call is an
//! `execute_tool {action}` span of its own, with [`attr::APPROVAL_ID`] and the same
//! attributes as any call (a child of the span current where it is resumed, such as the
//! `check_approval` call's); an approval that expired before it was carried out adds an
//! `expired` event there. A call a consent provider approves at once is carried out inside
//! the agent's own call span, which then holds both the `decided` and the `resumed` event. The approver's name and front end are bounded to 128 bytes; the
//! decision's reason is never exported (it may quote the agent), as no argument is.
//!
//! [`Executor::call`]: crate::Executor::call
//! [`Executor::resume_approval`]: crate::Executor::resume_approval
//! [`call_with`]: crate::Executor::call_with
//! [`call_json`]: crate::Executor::call_json
//! [`call_json_with`]: crate::Executor::call_json_with
//! [`run`]: crate::Executor::run
//! [`CallOptions::with_tool_call_id`]: crate::executor::CallOptions::with_tool_call_id

/// The attribute names the spans carry. The `gen_ai.*` and `error.type` names are the
/// OpenTelemetry semantic conventions' (defined here because the semconv crate marks the
/// `gen_ai.*` ones deprecated); the `sallyport.*` names are this crate's.
pub mod attr {
    /// `"execute_tool"` on every call span ([`super::OPERATION_EXECUTE_TOOL`]).
    pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
    /// The action as the agent called it (bounded to 128 bytes, scrubbed).
    pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
    /// The model's id for this tool call, when the caller passed it in
    /// [`CallOptions`](crate::executor::CallOptions) (bounded to 128 bytes, scrubbed).
    pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    /// On `rejected` and `unknown` calls: the result's code (`out_of_scope`,
    /// `timeout_after_send`, …), or `_OTHER` when the result has none.
    pub const ERROR_TYPE: &str = "error.type";
    /// The action's effect class (`observe`, `reversible_change`, …); absent for an action the
    /// catalog does not hold.
    pub const EFFECT_CLASS: &str = "sallyport.effect_class";
    /// The result's status: `completed`, `pending`, `already_in_desired_state`, `rejected` or
    /// `unknown`.
    pub const STATUS: &str = "sallyport.status";
    /// Who decided a `rejected`, `unknown` or `pending` result: `executor` or `upstream`.
    pub const ORIGIN: &str = "sallyport.origin";
    /// The result's code, whatever its status.
    pub const CODE: &str = "sallyport.code";
    /// What the consent stage decided (`not_required`, `approved`, `denied`, `timeout`,
    /// `deferred`, …, as the audit record's `consent`); absent when the call ended before it.
    pub const CONSENT: &str = "sallyport.consent";
    /// Requests handed to the transport. On the call span the call's total (0 for every
    /// refusal); on a dispatch span that dispatch's.
    pub const DISPATCHES: &str = "sallyport.dispatches";
    /// The receipt id of the call's audit record, to look it up in the journal.
    pub const RECEIPT_ID: &str = "sallyport.receipt_id";
    /// The attempt id of the call (the attempt that carried it out, for a call approved at
    /// once and carried out in the same call).
    pub const ATTEMPT_ID: &str = "sallyport.attempt_id";
    /// On a dispatch span: the channel that sent (`http`, `ssh`, …).
    pub const CHANNEL: &str = "sallyport.channel";
    /// The approval a resumed call or an approval event belongs to (`apr_…`).
    pub const APPROVAL_ID: &str = "sallyport.approval_id";
    /// On a decision: who decided, as the front end names them (bounded to 128 bytes).
    pub const APPROVER: &str = "sallyport.approver";
    /// On a decision: `approve` or `deny`.
    pub const VERDICT: &str = "sallyport.verdict";
    /// On a decision: the front end it came through (`cli`, `console`, `webhook`, …).
    pub const FRONT_END: &str = "sallyport.front_end";
    /// On a decision: what became of it — `recorded`, `already_decided` (someone decided
    /// first; nothing changed), `expired` (too late; the expiry is what stands),
    /// `already_counted` (this approver's approval of a quorum was counted before) or
    /// `refused` (no authority, self-approval or a bad signature; nothing changed).
    pub const DECISION: &str = "sallyport.decision";
    /// On a decision: the approval's state after it (`approved`, `denied`, `expired`, …).
    pub const APPROVAL_STATE: &str = "sallyport.approval_state";
    /// On a resumption: the executor instance that claimed the approved call.
    pub const EXECUTOR: &str = "sallyport.executor";
}

/// The names of the approval events (see [the module docs](self#approvals)).
pub mod event {
    /// A call was parked for a human's approval (on the agent's call span).
    pub const PARKED: &str = "sallyport.approval.parked";
    /// A human's decision reached the approval store, recorded or not
    /// ([`super::attr::DECISION`]).
    pub const DECIDED: &str = "sallyport.approval.decided";
    /// An approval expired: undecided, or approved but not carried out in time.
    pub const EXPIRED: &str = "sallyport.approval.expired";
    /// An executor claimed an approved call and carries it out (on the resumed call's span).
    pub const RESUMED: &str = "sallyport.approval.resumed";
}

/// The span names.
pub mod span {
    /// The call span's `tracing` name; exported as `execute_tool {action}` through `otel.name`.
    pub const EXECUTE_TOOL: &str = "execute_tool";
    /// The child span of the wait on a consent provider.
    pub const CONSENT_WAIT: &str = "sallyport.consent_wait";
    /// The child span of the channel's dispatch (every send and resend of the attempt).
    pub const DISPATCH: &str = "sallyport.dispatch";
    /// A front end's decision on an approval, when no span is current where it is made.
    pub const APPROVAL_DECIDE: &str = "sallyport.approval.decide";
}

/// The value of [`attr::GEN_AI_OPERATION_NAME`].
pub const OPERATION_EXECUTE_TOOL: &str = "execute_tool";

/// The `tracing` target of every span, for filters (`RUST_LOG=sallyport=info`).
pub const TARGET: &str = "sallyport";

#[cfg(test)]
mod tests {
    use super::{OPERATION_EXECUTE_TOOL, attr, event, span};

    #[test]
    fn attribute_names_are_the_semantic_conventions_and_sallyport_namespaced() {
        assert_eq!(attr::GEN_AI_OPERATION_NAME, "gen_ai.operation.name");
        assert_eq!(attr::GEN_AI_TOOL_NAME, "gen_ai.tool.name");
        assert_eq!(attr::GEN_AI_TOOL_CALL_ID, "gen_ai.tool.call.id");
        assert_eq!(attr::ERROR_TYPE, "error.type");
        assert_eq!(OPERATION_EXECUTE_TOOL, span::EXECUTE_TOOL);
        for name in [
            attr::EFFECT_CLASS,
            attr::STATUS,
            attr::ORIGIN,
            attr::CODE,
            attr::CONSENT,
            attr::DISPATCHES,
            attr::RECEIPT_ID,
            attr::ATTEMPT_ID,
            attr::CHANNEL,
            attr::APPROVAL_ID,
            attr::APPROVER,
            attr::VERDICT,
            attr::FRONT_END,
            attr::DECISION,
            attr::APPROVAL_STATE,
            attr::EXECUTOR,
            span::CONSENT_WAIT,
            span::DISPATCH,
            span::APPROVAL_DECIDE,
            event::PARKED,
            event::DECIDED,
            event::EXPIRED,
            event::RESUMED,
        ] {
            assert!(name.starts_with("sallyport."), "{name}");
        }
    }
}
