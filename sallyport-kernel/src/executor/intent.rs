//! Stage 9, intent: after consent the vault is checked once more (consent can take
//! minutes), else `vault_locked` or `credential_unavailable`; then the attempt, its
//! executor-made idempotency key and the fingerprint of the prepared request are recorded,
//! else `journal_unavailable`.
//!
//! A state-changing call's intent is durable before the first byte is sent. An observe call
//! commits once: it has no side effect to reconcile, so its attempt is written together with
//! its outcome and audit record at stage 13, in one transaction.

use std::fmt;
use std::sync::atomic::Ordering;

use super::Inner;
use super::call::Call;
use super::consent::Consented;
use crate::approval::{ApprovalId, Claim};
use crate::channel::{fingerprint, still_ready};
use crate::code::RefusalCode;
use crate::journal::{AttemptId, IdempotencyKey, Intent, JournalError};
use crate::outcome::Refusal;

/// A call whose attempt is recorded (or, for an observe call, ready to be recorded with its
/// outcome). Only this stage's `intend` makes one.
pub(crate) struct Intended {
    call: Call,
    intent: Intent,
    written: bool,
}

impl fmt::Debug for Intended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Intended")
            .field("call", &self.call)
            .field("attempt_id", &self.intent.attempt_id)
            .field("fingerprint", &self.intent.fingerprint)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl Intended {
    /// The call as stages 1–9 established it.
    pub(crate) fn call(&self) -> &Call {
        &self.call
    }

    /// The intent.
    pub(crate) fn intent(&self) -> &Intent {
        &self.intent
    }

    /// The idempotency key every send of this attempt carries.
    pub(crate) fn idempotency_key(&self) -> &IdempotencyKey {
        &self.intent.idempotency_key
    }

    /// The intent alone: the stage values it was made from are dropped.
    pub(super) fn into_intent(self) -> Intent {
        self.intent
    }

    /// Whether the intent is already in the journal (state-changing calls, and observe
    /// calls while the journal is known to be unwritable); otherwise it is written with the
    /// audit record.
    pub(crate) fn written(&self) -> bool {
        self.written
    }
}

/// Rechecks the vault, then records the intent of a state-changing call.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its by-value argument twice in its future; a block uses the capture in place"
)]
pub(super) fn intend(
    inner: &Inner,
    attempt_id: &AttemptId,
    session_id: &str,
    consented: Consented,
) -> impl Future<Output = Result<Intended, Refusal>> {
    async move {
        // Consent can take minutes: the vault may have been locked, or the credential replaced
        // or removed, meanwhile. The channel checks again before each send.
        still_ready(inner.vault.as_deref(), consented.call().resolved().as_ref()).await?;
        let intent = intent_of(attempt_id, session_id, consented.call());
        // An observe call writes its attempt now only while the journal is known to be
        // unwritable: a read whose record cannot be written is refused before it is sent.
        let written = intent.durable || inner.journal_unwritable.load(Ordering::SeqCst);
        if written {
            match inner.journal.write_intent(&intent).await {
                Ok(()) => inner.journal_unwritable.store(false, Ordering::SeqCst),
                Err(e) => {
                    inner.journal_unwritable.store(true, Ordering::SeqCst);
                    tracing::error!(attempt = %attempt_id, error = %e, "intent write failed; nothing sent");
                    return Err(unrecorded());
                }
            }
        }
        Ok(Intended {
            call: consented.into_call(),
            intent,
            written,
        })
    }
}

pub(super) fn unrecorded() -> Refusal {
    Refusal::new(
        RefusalCode::JournalUnavailable,
        "the attempt could not be recorded, so nothing was sent; retrying later is safe",
    )
}

/// Why an approved call's intent was not written.
#[derive(Debug)]
pub(super) enum NotIntended {
    /// Refused before anything was written.
    Refused(Refusal),
    /// Another executor holds the approval now; this one must do nothing more.
    Fenced,
    /// The journal failed; the approval stays approved for a later try.
    Unrecorded(Refusal),
}

impl From<Refusal> for NotIntended {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}

/// Stage 9 for an approved call: the vault recheck, then the intent written together with
/// the approval's move to `executing`, only while this executor's claim is the current one.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its by-value argument twice in its future; a block uses the capture in place"
)]
pub(super) fn intend_approved<'a>(
    inner: &'a Inner,
    attempt_id: &'a AttemptId,
    session_id: &'a str,
    consented: Consented,
    approval: &'a ApprovalId,
    claim: &'a Claim,
) -> impl Future<Output = Result<Intended, NotIntended>> + 'a {
    async move {
        still_ready(inner.vault.as_deref(), consented.call().resolved().as_ref())
            .await
            .map_err(NotIntended::Refused)?;
        let intent = intent_of(attempt_id, session_id, consented.call());
        let begun = match inner.approval_store() {
            Ok(store) => store.begin_approved(approval, claim, &intent).await,
            Err(e) => Err(e),
        };
        match begun {
            Ok(()) => Ok(Intended {
                call: consented.into_call(),
                intent,
                written: true,
            }),
            Err(JournalError::Fenced) => Err(NotIntended::Fenced),
            Err(e) => {
                tracing::error!(attempt = %attempt_id, approval = %approval, error = %e, "approved intent write failed; nothing sent");
                Err(NotIntended::Unrecorded(unrecorded()))
            }
        }
    }
}

/// SHA-256 over the action, its definition hash and the prepared request's fingerprint
/// (hex): what an intent and an approval bind to.
pub(super) fn fingerprint_of(call: &Call) -> String {
    let request = call.request().fingerprint();
    crate::hex::hex_lower(&fingerprint([
        call.spec().name.as_bytes(),
        call.definition_hash().as_bytes(),
        request.as_slice(),
    ]))
}

fn intent_of(attempt_id: &AttemptId, session_id: &str, call: &Call) -> Intent {
    let spec = call.spec();
    Intent {
        attempt_id: attempt_id.clone(),
        action: spec.name.to_string(),
        session_id: session_id.to_owned(),
        idempotency_key: IdempotencyKey::generate(),
        fingerprint: fingerprint_of(call),
        definition_hash: call.definition_hash().to_owned(),
        effect: spec.effect,
        arguments: {
            // The journal stores arguments for reconcile; never a secret value among them.
            let mut arguments = call.arguments().clone();
            call.scrubber().scrub_json(&mut arguments);
            arguments
        },
        durable: spec.effect.is_mutating(),
    }
}
