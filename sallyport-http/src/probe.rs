//! The idempotency verification probe: does the upstream really honour the key?
//!
//! Opt-in, and meant for a staging upstream: it sends real requests outside the executor
//! (no consent, no journal). It sends the same key twice with the same payload, then the
//! same key with a changed payload, and reports whether the server replays, rejects, or
//! silently executes both.

use std::any::Any;

use sallyport_core::action::ActionSpec;
use sallyport_core::journal::IdempotencyKey;
use sallyport_core::vault::Credential;
use serde::Serialize;
use serde_json::Value;

use crate::channel::{HttpChannel, probe_exchange};
use crate::error::ProbeError;
use crate::exchange::Answer;

/// What the upstream did with a repeated key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RepeatBehaviour {
    /// Same status and byte-identical body: the stored response was replayed.
    Replayed,
    /// A success with another body: the request ran again.
    ExecutedAgain,
    /// `409`: the server says the original is still in flight.
    InFlightConflict,
    /// `422`: the server noticed the payload differs from the key's original.
    RejectedMismatch,
    /// Another error status.
    Rejected,
}

/// The probe's overall verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProbeVerdict {
    /// The key is honoured: the repeat was replayed and the changed payload refused.
    Honoured,
    /// The repeat was replayed but the changed payload was answered as if nothing differed:
    /// resends are safe, but a payload bug would go unnoticed.
    IgnoresPayloadChanges,
    /// Both requests with the same key took effect: `retry = idempotency_key` is unsafe
    /// against this upstream.
    ExecutesBoth,
    /// The answers fit none of the above (errors, conflicts); look at the statuses.
    Inconclusive,
}

/// The probe's report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ProbeReport {
    /// Status of the first request.
    pub first_status: u16,
    /// Status of the same key with the same payload.
    pub repeat_status: u16,
    /// What the repeat showed.
    pub repeat: RepeatBehaviour,
    /// Status of the same key with the changed payload.
    pub changed_status: u16,
    /// What the changed payload showed.
    pub changed: RepeatBehaviour,
    /// The verdict.
    pub verdict: ProbeVerdict,
}

impl HttpChannel {
    /// Runs the idempotency verification probe for an `HttpTarget` action against the
    /// channel's configured upstream. **Sends three real requests outside the executor**:
    /// point it at staging.
    ///
    /// `input` and `changed_input` are the decoded inputs (used only by hand-written request
    /// builders); `arguments` and `changed_arguments` must produce different payloads.
    ///
    /// # Errors
    ///
    /// [`ProbeError`] when the requests would be refused, the payloads are identical, or a
    /// request got no response.
    pub async fn probe_idempotency(
        &self,
        spec: &ActionSpec,
        arguments: &Value,
        changed_arguments: &Value,
        credential: Option<&Credential>,
    ) -> Result<ProbeReport, ProbeError> {
        let none: &(dyn Any + Send + Sync) = &();
        let key = IdempotencyKey::generate();
        let build = |args: &Value| {
            let mut prepared = self
                .assemble(spec, args, none, credential)
                .map_err(|r| ProbeError::Refused(r.reason))?;
            let value = self
                .idempotency_value(key.as_str())
                .map_err(|r| ProbeError::Refused(r.reason))?;
            prepared
                .headers
                .insert(self.idempotency_header().clone(), value);
            Ok::<_, ProbeError>(prepared)
        };
        let original = build(arguments)?;
        let changed = build(changed_arguments)?;
        if original.plan.body == changed.plan.body
            && original.url == changed.url
            && original.headers == changed.headers
        {
            return Err(ProbeError::SamePayload);
        }
        let first = probe_exchange(self, &original, credential)
            .await
            .ok_or(ProbeError::NoResponse { step: 1 })?;
        let repeat = probe_exchange(self, &original, credential)
            .await
            .ok_or(ProbeError::NoResponse { step: 2 })?;
        let third = probe_exchange(self, &changed, credential)
            .await
            .ok_or(ProbeError::NoResponse { step: 3 })?;
        let repeat_behaviour = behaviour(&first, &repeat);
        let changed_behaviour = behaviour(&first, &third);
        let verdict = match (repeat_behaviour, changed_behaviour) {
            (RepeatBehaviour::ExecutedAgain, _) | (_, RepeatBehaviour::ExecutedAgain) => {
                ProbeVerdict::ExecutesBoth
            }
            (
                RepeatBehaviour::Replayed,
                RepeatBehaviour::RejectedMismatch | RepeatBehaviour::Rejected,
            ) => ProbeVerdict::Honoured,
            (RepeatBehaviour::Replayed, RepeatBehaviour::Replayed) => {
                ProbeVerdict::IgnoresPayloadChanges
            }
            _ => ProbeVerdict::Inconclusive,
        };
        Ok(ProbeReport {
            first_status: first.status.as_u16(),
            repeat_status: repeat.status.as_u16(),
            repeat: repeat_behaviour,
            changed_status: third.status.as_u16(),
            changed: changed_behaviour,
            verdict,
        })
    }
}

fn behaviour(first: &Answer, later: &Answer) -> RepeatBehaviour {
    let code = later.status.as_u16();
    match code {
        409 => RepeatBehaviour::InFlightConflict,
        422 => RepeatBehaviour::RejectedMismatch,
        200..=299 if later.status == first.status && later.body == first.body => {
            RepeatBehaviour::Replayed
        }
        200..=299 => RepeatBehaviour::ExecutedAgain,
        _ => RepeatBehaviour::Rejected,
    }
}
