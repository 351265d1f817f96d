//! Stage 8, consent: per the action's rule, a human approves the exact prepared request,
//! else `consent_denied`, `consent_timeout` or `consent_unavailable`.

use std::fmt;

use super::Inner;
use super::cancel::scrub_cut;
use super::precheck::Checked;
use crate::action::ConsentRule;
use crate::code::ConsentOutcome;
use crate::consent::{ConsentDecision, ConsentDisplay, ConsentRequest, MAX_SHOWN_BYTES};
use crate::journal::AttemptId;
use crate::outcome::{Refusal, RefusalCode};
use crate::scrub::Scrubber;

/// A call a human approved, or whose rule needs no one. Only this stage's `consent` makes one.
pub struct Consented {
    checked: Checked,
    decision: ConsentOutcome,
}

impl fmt::Debug for Consented {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consented")
            .field("checked", &self.checked)
            .field("decision", &self.decision)
            .finish()
    }
}

impl Consented {
    /// What stage 7 established.
    pub fn checked(&self) -> &Checked {
        &self.checked
    }

    /// How consent was given.
    pub fn decision(&self) -> ConsentOutcome {
        self.decision
    }
}

/// A refusal at stage 8, with the consent outcome the audit record names.
#[derive(Debug)]
pub(super) struct ConsentRefused {
    pub(super) decision: ConsentOutcome,
    pub(super) refusal: Refusal,
}

fn refused(decision: ConsentOutcome, refusal: Refusal) -> ConsentRefused {
    ConsentRefused { decision, refusal }
}

/// Asks for consent as the action's rule requires.
pub(super) async fn consent(
    inner: &Inner,
    attempt_id: &AttemptId,
    session_id: &str,
    checked: Checked,
) -> Result<Consented, ConsentRefused> {
    let unlocked = checked.unlocked();
    let authorized = unlocked.approved().authorized();
    let validated = authorized.validated();
    let entry = validated.entry();
    let spec = entry.spec();
    let hash = entry.definition_hash();
    let done = |checked, decision| Ok(Consented { checked, decision });
    match spec.consent {
        ConsentRule::None => return done(checked, ConsentOutcome::NotRequired),
        ConsentRule::Session if inner.grants.has(session_id, &spec.name, hash) => {
            return done(checked, ConsentOutcome::SessionGrant);
        }
        ConsentRule::Session | ConsentRule::PerCall => {}
    }
    let Some(provider) = &inner.consent else {
        return Err(refused(
            ConsentOutcome::Unavailable,
            Refusal::new(
                RefusalCode::ConsentUnavailable,
                "this action needs a human's approval and no one can be asked here",
            ),
        ));
    };
    let scrubber = unlocked.scrubber();
    let request = ConsentRequest {
        attempt_id: attempt_id.to_string(),
        session_id: session_id.to_owned(),
        action: spec.name.to_string(),
        summary: spec.summary.to_string(),
        effect: spec.effect,
        externality: spec.externality,
        rule: spec.consent,
        objects: validated.objects().to_vec(),
        note: validated.note().map(str::to_owned),
        request: unlocked.summary().0.clone(),
        definition_hash: hash.to_owned(),
        display: ConsentDisplay::default(),
    };
    // The human sees no secret either: an agent may have written one into its note. The
    // display form is escaped from the scrubbed text, and shown whole or not at all.
    let request = scrub_consent(scrubber, request).with_display();
    let shown = request.display.shown_bytes();
    if shown > MAX_SHOWN_BYTES {
        return Err(refused(
            ConsentOutcome::TooLargeToShow,
            Refusal::new(
                RefusalCode::ArgumentsTooLarge,
                format!(
                    "this call needs a human's approval, and its request is {shown} bytes as shown; a consent prompt shows at most {MAX_SHOWN_BYTES} bytes and never cuts one; nothing was sent; call again with shorter values"
                ),
            ),
        ));
    }
    let decision = tokio::time::timeout(inner.consent_timeout, provider.ask(&request)).await;
    let approve = |ttl| {
        if spec.consent == ConsentRule::Session {
            inner.grants.grant(session_id, &spec.name, hash, ttl);
            ConsentOutcome::ApprovedForSession
        } else {
            ConsentOutcome::Approved
        }
    };
    match decision {
        Err(_) => Err(refused(
            ConsentOutcome::Timeout,
            Refusal::new(
                RefusalCode::ConsentTimeout,
                format!(
                    "no one answered the consent request within {} s; nothing was sent",
                    inner.consent_timeout.as_secs()
                ),
            ),
        )),
        Ok(ConsentDecision::Approve) => {
            let decision = approve(inner.session_grant_ttl);
            done(checked, decision)
        }
        Ok(ConsentDecision::ApproveForSession { ttl }) => {
            let decision = approve(ttl);
            done(checked, decision)
        }
        Ok(ConsentDecision::Deny { reason }) => {
            let reason = match reason {
                Some(r) => format!("a human denied this call: {}", scrubber.bounded(&r, 200)),
                None => "a human denied this call".to_owned(),
            };
            Err(refused(
                ConsentOutcome::Denied,
                Refusal::new(RefusalCode::ConsentDenied, reason),
            ))
        }
        Ok(ConsentDecision::Unavailable) => Err(refused(
            ConsentOutcome::Unavailable,
            Refusal::new(
                RefusalCode::ConsentUnavailable,
                "this action needs a human's approval and no one could be asked",
            ),
        )),
    }
}

fn scrub_consent(scrubber: &Scrubber, mut request: ConsentRequest) -> ConsentRequest {
    for text in [&mut request.request, &mut request.action]
        .into_iter()
        .chain(request.note.as_mut())
    {
        *text = scrub_cut(scrubber, text);
    }
    for object in &mut request.objects {
        object.value = scrubber.scrub(&object.value).into_owned();
    }
    request
}
