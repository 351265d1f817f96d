//! Channels: transports that turn an authorized attempt into real requests.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use serde_json::Value;

use crate::action::ActionSpec;
use crate::journal::{AttemptId, IdempotencyKey, Journal};
use crate::outcome::{Next, Origin, Refusal, Status};
use crate::vault::{Credential, CredentialMeta};

/// The parts of a call a channel sees before consent (to check it and describe it).
#[derive(Debug)]
#[non_exhaustive]
pub struct CallView<'a> {
    /// The action card.
    pub spec: &'a ActionSpec,
    /// The validated arguments.
    pub arguments: &'a Value,
    /// The decoded input (downcast to the action type for hand-written request building).
    pub input: &'a (dyn Any + Send + Sync),
}

/// Everything a channel needs to send one attempt.
#[derive(Debug)]
#[non_exhaustive]
pub struct Dispatch<'a> {
    /// The action card.
    pub spec: &'a ActionSpec,
    /// The validated arguments.
    pub arguments: &'a Value,
    /// The decoded input.
    pub input: &'a (dyn Any + Send + Sync),
    /// The attempt.
    pub attempt_id: &'a AttemptId,
    /// The executor's idempotency key for this attempt; every resend reuses it.
    pub idempotency_key: &'a IdempotencyKey,
    /// The resolved credential, when the action binds one.
    pub credential: Option<&'a Credential>,
    /// Records each send. An `Arc`, so a transport can count a send from the task that
    /// actually writes the request (the moment bytes may leave), not only from `dispatch`.
    pub context: &'a Arc<DispatchContext>,
}

/// Shared between the executor and a channel during dispatch: counts the requests handed to
/// the transport, so the journal's count equals what the server saw, and so a cancelled call
/// knows whether bytes may have left.
pub struct DispatchContext {
    sends: AtomicU32,
    attempt_id: AttemptId,
    journal: Arc<dyn Journal>,
    journal_sends: bool,
}

impl std::fmt::Debug for DispatchContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatchContext")
            .field("sends", &self.sends())
            .field("attempt_id", &self.attempt_id)
            .finish_non_exhaustive()
    }
}

impl DispatchContext {
    /// `journal_sends`: whether each send is also noted in the journal's attempt row (for
    /// state-changing actions, so a crash shows whether the request may have left). An
    /// observe call's count reaches the journal with its audit record only.
    pub(crate) fn new(
        attempt_id: AttemptId,
        journal: Arc<dyn Journal>,
        journal_sends: bool,
    ) -> Self {
        Self {
            sends: AtomicU32::new(0),
            attempt_id,
            journal,
            journal_sends,
        }
    }

    /// Call immediately before handing a request to the transport (once per resend too).
    /// From here on, a cancelled call is recorded as `unknown`.
    pub fn sending(&self) {
        let n = self.sends.fetch_add(1, Ordering::SeqCst) + 1;
        if self.journal_sends {
            self.journal.note_dispatch(&self.attempt_id, n);
        }
    }

    /// Requests handed to the transport so far.
    pub fn sends(&self) -> u32 {
        self.sends.load(Ordering::SeqCst)
    }
}

/// A short, secret-free description of the exact request, for the consent prompt and the
/// audit record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestSummary(pub String);

/// What a channel reports after dispatch: the normalized status and the evidence.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ChannelOutcome {
    /// The normalized status.
    pub status: Status,
    /// Who decided (`Upstream` for anything after send).
    pub origin: Origin,
    /// A machine-readable code.
    pub code: Option<String>,
    /// A short reason, safe to show (the executor scrubs it again).
    pub reason: Option<String>,
    /// The projected result data.
    pub data: Option<Value>,
    /// A follow-up call, when the channel knows one better than the card's reconcile action.
    pub next: Option<Next>,
    /// The upstream rejected the credential (401/403, SSH auth failure): the executor marks
    /// it unusable until it is replaced.
    pub credential_rejected: bool,
    /// The upstream's status (HTTP status or exit code), for the audit record.
    pub upstream_status: Option<i64>,
}

impl ChannelOutcome {
    /// An outcome with `status`, decided by the upstream.
    pub fn new(status: Status) -> Self {
        Self {
            status,
            origin: Origin::Upstream,
            code: None,
            reason: None,
            data: None,
            next: None,
            credential_rejected: false,
            upstream_status: None,
        }
    }

    /// A completed outcome carrying `data`.
    pub fn completed(data: Value) -> Self {
        Self::new(Status::Completed).with_data(data)
    }

    /// Sets the code.
    #[must_use]
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// Sets the reason.
    #[must_use]
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Sets the data.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// Sets the follow-up call.
    #[must_use]
    pub fn with_next(mut self, next: Next) -> Self {
        self.next = Some(next);
        self
    }

    /// Sets who decided.
    #[must_use]
    pub fn with_origin(mut self, origin: Origin) -> Self {
        self.origin = origin;
        self
    }

    /// Marks the credential as rejected by the upstream.
    #[must_use]
    pub fn with_credential_rejected(mut self) -> Self {
        self.credential_rejected = true;
        self
    }

    /// Records the upstream's status code.
    #[must_use]
    pub fn with_upstream_status(mut self, status: i64) -> Self {
        self.upstream_status = Some(status);
        self
    }
}

/// A transport (`http`, `ssh`, or the application's own).
///
/// `prepare` runs before consent and must not send anything; `dispatch` sends, calling
/// [`DispatchContext::sending`] before each request it hands to the transport, and returns the
/// normalized outcome. A channel never returns `completed` for an outcome the action did not
/// declare.
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sallyport channel",
    note = "channels come from `sallyport-http`, `sallyport-ssh`, or implement `sallyport_core::Channel`"
)]
pub trait Channel: Send + Sync + 'static {
    /// The name actions target (`http`, `ssh`, …).
    fn name(&self) -> &str;

    /// Checks the concrete call and describes it for the human, without sending.
    ///
    /// # Errors
    ///
    /// A [`Refusal`] (usually `invalid_request`) for a call that must not be sent.
    fn prepare(&self, call: &CallView<'_>) -> Result<RequestSummary, Refusal>;

    /// Checks that the credential the action binds may be attached to this call (its binding
    /// covers the destination, its kind suits the transport), before consent and without
    /// sending. The default accepts every credential.
    ///
    /// # Errors
    ///
    /// A [`Refusal`] (usually `credential_unavailable`) for a credential the channel will not
    /// attach to this call.
    fn check_credential(
        &self,
        call: &CallView<'_>,
        credential: &CredentialMeta,
    ) -> Result<(), Refusal> {
        let _ = (call, credential);
        Ok(())
    }

    /// Sends the attempt and normalizes the answer.
    async fn dispatch(&self, call: Dispatch<'_>) -> ChannelOutcome;
}
