//! Channels: transports that turn an authorized attempt into real requests.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use serde_json::Value;

use crate::action::ActionSpec;
use crate::code::{Code, RefusalCode};
use crate::journal::{AttemptId, IdempotencyKey, Journal};
use crate::outcome::{ActionResult, ConnectNeeded, Next, Origin, Refusal, Status};
use crate::scrub::Scrubber;
use crate::vault::{Credential, Vault, VaultError, VaultState};

/// The parts of a call a channel sees when it prepares the request (stage 4).
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

/// The request of one call as its channel built it: once, at stage 4, before anyone is
/// asked. The executor carries it, opaque, through the vault stage (which binds the
/// credential), consent (whose prompt shows [`PreparedRequest::summary`]) and the intent
/// (which records [`PreparedRequest::fingerprint`]) to [`Channel::dispatch`], which sends
/// exactly it; every resend reuses it. What the human approves is what is sent.
///
/// A channel implements it for its own type and gets it back at dispatch with
/// [`Dispatch::prepared`]. Channels whose request is fully described by a text and the
/// arguments can use [`DescribedRequest`].
pub trait PreparedRequest: Any + Send + Sync + fmt::Debug {
    /// Attaches the credential the action binds, resolved at stage 6, and makes every check
    /// that can be made before consent: the credential's kind suits the transport, its
    /// binding covers this request's destination, no field of the request occupies the
    /// credential's place. Called once, and only for actions that bind a credential. After
    /// it, [`PreparedRequest::summary`] names the real destination. The default accepts
    /// every credential and changes nothing.
    ///
    /// # Errors
    ///
    /// A [`Refusal`] (usually `credential_unavailable`) for a credential the channel will not
    /// attach to this request.
    fn bind(&mut self, credential: &Credential) -> Result<(), Refusal> {
        let _ = credential;
        Ok(())
    }

    /// A secret-free description of the exact request (method and real host and path, or
    /// host and argv), for the consent prompt and the audit record. Never cut: the executor
    /// escapes it for display and refuses to ask about one too long to show whole.
    fn summary(&self) -> RequestSummary;

    /// SHA-256 over everything the request will send except the credential and the
    /// idempotency key (added at dispatch); the intent records it, and an approval binds to
    /// it. Use [`fingerprint`] to hash the parts unambiguously.
    fn fingerprint(&self) -> [u8; 32];
}

/// SHA-256 over `parts`, each prefixed by its length, so no two different lists of parts
/// hash alike (`["ab", "c"]` and `["a", "bc"]` differ).
pub fn fingerprint<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in parts {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.finalize().into()
}

/// A prepared request described by a text and the arguments it carries: for channels of an
/// application's own whose dispatch needs nothing more. Its fingerprint covers both.
#[derive(Clone, Debug, PartialEq)]
pub struct DescribedRequest {
    summary: String,
    arguments: Value,
}

impl DescribedRequest {
    /// A request shown to the human as `summary` and dispatched with `arguments`.
    pub fn new(summary: impl Into<String>, arguments: Value) -> Self {
        Self {
            summary: summary.into(),
            arguments,
        }
    }

    /// The arguments it was prepared with.
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }
}

impl PreparedRequest for DescribedRequest {
    fn summary(&self) -> RequestSummary {
        RequestSummary(self.summary.clone())
    }

    fn fingerprint(&self) -> [u8; 32] {
        let arguments = sallyport_vocab::drift::canonical_json(&self.arguments);
        fingerprint([self.summary.as_bytes(), arguments.as_bytes()])
    }
}

/// Everything a channel needs to send one attempt.
#[derive(Debug)]
#[non_exhaustive]
pub struct Dispatch<'a> {
    /// The action card.
    pub spec: &'a ActionSpec,
    /// The request the channel prepared, bound to the credential, as the human approved it.
    pub request: &'a dyn PreparedRequest,
    /// The attempt.
    pub attempt_id: &'a AttemptId,
    /// The executor's idempotency key for this attempt; every resend reuses it.
    pub idempotency_key: &'a IdempotencyKey,
    /// The resolved credential, when the action binds one (for transports that
    /// authenticate with it, such as SSH; an HTTP request already carries it).
    pub credential: Option<&'a Credential>,
    /// Grants each send ([`DispatchContext::permit`]) and counts it. An `Arc`, so a
    /// transport can count a send from the task that actually writes the request (the moment
    /// bytes may leave), not only from `dispatch`.
    pub context: &'a Arc<DispatchContext>,
}

impl Dispatch<'_> {
    /// The prepared request as the channel's own type `T`; `None` when it is another type
    /// (a request prepared by another channel: a bug, to be refused, never sent).
    pub fn prepared<T: PreparedRequest>(&self) -> Option<&T> {
        let any: &dyn Any = self.request;
        any.downcast_ref::<T>()
    }
}

/// Shared between the executor and a channel during dispatch: grants each send only while
/// the vault is unlocked and the credential the call resolved is still the vault's current
/// one, counts the requests handed to the transport (so the journal's count equals what the
/// server saw, and a cancelled call knows whether bytes may have left), and holds the call's
/// scrubber for the texts a channel cuts.
pub struct DispatchContext {
    sends: AtomicU32,
    attempt_id: AttemptId,
    session_id: String,
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

/// Taking a channel's outcome into a result: here rather than on [`ActionResult`], whose crate
/// (the vocabulary) sits below channels.
pub(crate) trait ApplyOutcome {
    /// Takes status, origin, code, reason, data and `next` from `outcome` (the answer of the
    /// approval status check), keeping this call's ids.
    fn apply(&mut self, outcome: &ChannelOutcome);
}

impl ApplyOutcome for ActionResult {
    fn apply(&mut self, outcome: &ChannelOutcome) {
        self.status = outcome.status;
        self.origin = matches!(
            outcome.status,
            Status::Rejected | Status::Unknown | Status::Pending
        )
        .then_some(outcome.origin);
        self.code = outcome.code.clone();
        self.reason = outcome.reason.clone();
        self.data = outcome.data.clone();
        self.next = outcome.next.clone();
        self.connect = outcome.connect.clone();
    }
}

impl DispatchContext {
    /// `journal_sends`: whether each send is also noted in the journal's attempt row (for
    /// state-changing actions, so a crash shows whether the request may have left). An
    /// observe call's count reaches the journal with its audit record only.
    pub(crate) fn new(
        attempt_id: AttemptId,
        session_id: String,
        journal: Arc<dyn Journal>,
        journal_sends: bool,
        vault: Option<Arc<dyn Vault>>,
        credential: Option<ResolvedName>,
        scrubber: Arc<Scrubber>,
    ) -> Self {
        Self {
            sends: AtomicU32::new(0),
            attempt_id,
            session_id,
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

    /// The session the call was made in.
    pub fn session_id(&self) -> &str {
        &self.session_id
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
    /// For the host, with a `credential_unavailable` refusal: the account a human must
    /// connect (a subject's grant missing or refused by its provider). Never shown to the
    /// agent ([`ActionResult::connect_needed`]).
    pub connect: Option<ConnectNeeded>,
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
            connect: None,
        }
    }

    /// Sets the account a human must connect before the call can go out.
    #[must_use]
    pub fn with_connect(mut self, connect: ConnectNeeded) -> Self {
        self.connect = Some(connect);
        self
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
/// `prepare` builds the call's request once, before consent, without sending anything;
/// `dispatch` sends exactly that request, asking [`DispatchContext::permit`] before each
/// request it hands to the transport (and returning the refusal's outcome unchanged when it
/// is refused) and spending the permit with [`SendPermit::sending`] as the request leaves,
/// and returns the normalized outcome. A send that is not counted is a bug: the executor
/// treats an outcome with no counted send as "nothing was sent". A channel never returns
/// `completed` for an outcome the action did not declare.
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sallyport channel",
    note = "channels come from `sallyport-http`, `sallyport-ssh`, or implement `sallyport_core::Channel`"
)]
pub trait Channel: Send + Sync + 'static {
    /// The name actions target (`http`, `ssh`, …).
    fn name(&self) -> &str;

    /// Checks the concrete call and builds the request it will send, without sending (stage
    /// 4, and [`Executor::preflight`](crate::Executor::preflight)). Called once per call: a
    /// hand-written request builder runs once, and what is sent is what was checked.
    ///
    /// # Errors
    ///
    /// A [`Refusal`] (usually `invalid_request`) for a call that must not be sent.
    fn prepare(&self, call: &CallView<'_>) -> Result<Box<dyn PreparedRequest>, Refusal>;

    /// Sends the prepared attempt ([`Dispatch::prepared`]) and normalizes the answer.
    async fn dispatch(&self, call: Dispatch<'_>) -> ChannelOutcome;
}
