//! Channels: transports that turn an authorized attempt into real requests.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use serde_json::Value;

use crate::action::ActionSpec;
use crate::code::Code;
use crate::journal::{AttemptId, IdempotencyKey, Journal};
use crate::outcome::{Next, Origin, Refusal, RefusalCode, Status};
use crate::scrub::Scrubber;
use crate::vault::{Credential, CredentialMeta, Vault, VaultError, VaultState};

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
    /// Grants each send ([`DispatchContext::permit`]) and counts it. An `Arc`, so a
    /// transport can count a send from the task that actually writes the request (the moment
    /// bytes may leave), not only from `dispatch`.
    pub context: &'a Arc<DispatchContext>,
}

/// Shared between the executor and a channel during dispatch: grants each send only while
/// the vault is unlocked and the credential the call resolved is still the vault's current
/// one, counts the requests handed to the transport (so the journal's count equals what the
/// server saw, and a cancelled call knows whether bytes may have left), and holds the call's
/// scrubber for the texts a channel cuts.
pub struct DispatchContext {
    sends: AtomicU32,
    attempt_id: AttemptId,
    journal: Arc<dyn Journal>,
    journal_sends: bool,
    vault: Option<Arc<dyn Vault>>,
    credential: Option<ResolvedName>,
    scrubber: Arc<Scrubber>,
}

/// The name and version of the credential a call resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResolvedName {
    pub(crate) name: String,
    pub(crate) version: u64,
}

impl std::fmt::Debug for DispatchContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatchContext")
            .field("sends", &self.sends())
            .field("attempt_id", &self.attempt_id)
            .field("credential", &self.credential)
            .finish_non_exhaustive()
    }
}

/// Leave to hand one request to the transport, from [`DispatchContext::permit`]. Spend it
/// with [`SendPermit::sending`] immediately before the request is written; a permit that is
/// dropped unspent counts nothing (the request must then not be sent).
#[must_use = "a permit counts nothing until `sending` is called right before the request leaves"]
pub struct SendPermit {
    context: Arc<DispatchContext>,
}

impl std::fmt::Debug for SendPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendPermit")
            .field("attempt_id", &self.context.attempt_id)
            .finish_non_exhaustive()
    }
}

impl SendPermit {
    /// Counts the send: call immediately before handing the request to the transport. From
    /// here on, a cancelled call is recorded as `unknown`.
    pub fn sending(self) {
        let context = &self.context;
        let n = context.sends.fetch_add(1, Ordering::SeqCst) + 1;
        if context.journal_sends {
            context.journal.note_dispatch(&context.attempt_id, n);
        }
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
        vault: Option<Arc<dyn Vault>>,
        credential: Option<ResolvedName>,
        scrubber: Arc<Scrubber>,
    ) -> Self {
        Self {
            sends: AtomicU32::new(0),
            attempt_id,
            journal,
            journal_sends,
            vault,
            credential,
            scrubber,
        }
    }

    /// Asks to send one request (once per resend too), immediately before the channel
    /// hands it to the transport. Granted while the vault is unlocked and the credential
    /// the call resolved is still in it at the same version; otherwise the answer is the
    /// outcome to return unchanged from [`Channel::dispatch`], and nothing may be sent:
    /// `rejected` with `vault_locked` or `credential_unavailable`, or `unknown` when an
    /// earlier request of this call already left.
    ///
    /// # Errors
    ///
    /// The [`ChannelOutcome`] that ends the dispatch, as above.
    pub async fn permit(self: &Arc<Self>) -> Result<SendPermit, ChannelOutcome> {
        match still_ready(self.vault.as_deref(), self.credential.as_ref()).await {
            Ok(()) => Ok(SendPermit {
                context: Arc::clone(self),
            }),
            Err(refusal) => {
                tracing::info!(attempt = %self.attempt_id, code = refusal.code.as_str(), "send refused: the vault changed during the call");
                let mut outcome = ChannelOutcome::new(Status::Rejected)
                    .with_origin(Origin::Executor)
                    .with_code(refusal.code)
                    .with_reason(refusal.reason);
                if self.sends() > 0 {
                    outcome.status = Status::Unknown;
                    outcome.reason = Some(format!(
                        "{}; an earlier request of this call was sent and its outcome is unknown; do not retry",
                        match refusal.code {
                            RefusalCode::VaultLocked =>
                                "the vault was locked before the request could be sent again",
                            _ => "the credential changed before the request could be sent again",
                        }
                    ));
                }
                Err(outcome)
            }
        }
    }

    /// Requests handed to the transport so far.
    pub fn sends(&self) -> u32 {
        self.sends.load(Ordering::SeqCst)
    }

    /// The call's scrubber (every secret the vault knew when the call resolved its
    /// credential, and that credential): for text the channel cuts, which must be scrubbed
    /// before the cut ([`Scrubber::bounded`], [`Scrubber::scrub_head`], …).
    pub fn scrubber(&self) -> &Scrubber {
        &self.scrubber
    }
}

/// Checks that the vault is unlocked and that `credential` is still in it at the same
/// version: before consent (stage 6), after it, and before each send.
pub(crate) async fn still_ready(
    vault: Option<&dyn Vault>,
    credential: Option<&ResolvedName>,
) -> Result<(), Refusal> {
    let locked = || {
        Refusal::new(
            RefusalCode::VaultLocked,
            "the credential vault was locked during the call; nothing was sent",
        )
    };
    let Some(vault) = vault else {
        return match credential {
            Some(_) => Err(Refusal::new(
                RefusalCode::CredentialUnavailable,
                "no vault is configured",
            )),
            None => Ok(()),
        };
    };
    if vault.state() == VaultState::Locked {
        return Err(locked());
    }
    let Some(credential) = credential else {
        return Ok(());
    };
    let name = &credential.name;
    match vault.resolve(name).await {
        Ok(current) if current.meta().version == credential.version => Ok(()),
        Ok(_) => Err(Refusal::new(
            RefusalCode::CredentialUnavailable,
            format!("credential `{name}` was replaced during the call; nothing was sent"),
        )),
        Err(VaultError::Locked) => Err(locked()),
        Err(VaultError::NotFound(_)) => Err(Refusal::new(
            RefusalCode::CredentialUnavailable,
            format!("credential `{name}` was removed during the call; nothing was sent"),
        )),
        Err(_) => Err(Refusal::new(
            RefusalCode::CredentialUnavailable,
            format!("credential `{name}` could not be read from the vault; nothing was sent"),
        )),
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
    pub code: Option<Code>,
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

    /// Sets the code: an [`UpstreamCode`](crate::code::UpstreamCode), a
    /// [`RefusalCode`], or a string (one that spells a known code becomes that code).
    #[must_use]
    pub fn with_code(mut self, code: impl Into<Code>) -> Self {
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
/// `prepare` runs before consent and must not send anything; `dispatch` sends, asking
/// [`DispatchContext::permit`] before each request it hands to the transport (and returning
/// the refusal's outcome unchanged when it is refused) and spending the permit with
/// [`SendPermit::sending`] as the request leaves, and returns the normalized outcome. A send
/// that is not counted is a bug: the executor treats an outcome with no counted send as
/// "nothing was sent". A channel never returns `completed` for an outcome the action did not
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
