//! Reading the upstream's answer: the mapping from status codes, declared statuses and body
//! predicates to the five statuses, one concern per file — [`codes`] the codes with rules of
//! their own and the default mapping, [`declared`] body predicates, declared statuses and the
//! result projection, [`headers`] `Retry-After` and request ids, [`message`] the filtered
//! error message.

mod codes;
mod declared;
mod headers;
mod message;

use std::time::Duration;

use reqwest::header::HeaderMap;
use sallyport_core::action::{ActionSpec, EffectClass, RetryRule};
use sallyport_core::after_send::AfterSend;
use sallyport_core::channel::ChannelOutcome;
use sallyport_core::code::Code;
use sallyport_core::scrub::Scrubber;
use sallyport_core::target::HttpTarget;

use self::codes::Reading;
use self::declared::declared_outcome;
use self::headers::correlation_id;
use crate::exchange::Answer;

/// What the channel does with one answer.
#[derive(Debug)]
pub(crate) enum Step {
    /// The call is decided.
    Done(ChannelOutcome),
    /// Resend after `wait` (or the backoff when `None`); `exhausted` when no resend is left.
    Resend {
        wait: Option<Duration>,
        exhausted: ChannelOutcome,
    },
}

/// What the mapping needs to know about the call.
pub(crate) struct Call<'a> {
    pub(crate) spec: &'a ActionSpec,
    pub(crate) target: &'a HttpTarget,
    pub(crate) max_retry_after: Duration,
    /// A request of this attempt was already sent before this one.
    pub(crate) resend: bool,
    pub(crate) credential_attached: bool,
    /// The client certificate credential presented in the TLS handshake, if any.
    pub(crate) client_certificate: Option<&'a str>,
    pub(crate) idempotency_header: &'a str,
    pub(crate) attempt_id: &'a str,
    /// The call's scrubber: messages are scrubbed before they are cut.
    pub(crate) scrubber: &'a Scrubber,
}

impl Call<'_> {
    /// Whether the channel may resend after a request left.
    pub(crate) fn may_resend_after_send(&self) -> bool {
        match self.spec.retry {
            RetryRule::IdempotencyKey => true,
            RetryRule::Safe => self.spec.effect == EffectClass::Observe,
            RetryRule::Never => false,
        }
    }

    fn mutating(&self) -> bool {
        self.spec.effect.is_mutating()
    }

    fn reference(&self, headers: &HeaderMap) -> String {
        correlation_id(headers).unwrap_or_else(|| self.attempt_id.to_owned())
    }

    /// The failure rules every channel shares, for this call.
    pub(crate) fn after_send(&self) -> AfterSend<'_> {
        AfterSend::new(self.spec)
    }

    /// An outcome for something after send that may or may not have taken effect:
    /// `unknown` for a mutating action, `rejected` (nothing changes anyway) for an observe.
    pub(crate) fn uncertain(&self, code: impl Into<Code>, what: &str) -> ChannelOutcome {
        self.after_send().uncertain(code, what)
    }
}

/// Maps one answer: the codes with a rule of their own first (authentication, rate limits,
/// the Idempotency-Key draft's answers), then a status the action declares to be an answer
/// in itself (its result a constant: the body is not read), then a success-range body's
/// predicates, then the status the action declares for the code, then the default mapping.
pub(crate) fn classify(call: &Call<'_>, answer: &Answer) -> Step {
    let reading = Reading::new(call, answer);
    let rule = call.target.declared_rule(reading.code);
    if let Some(step) = reading.own_rule(rule.map(|rule| rule.status)) {
        return step;
    }
    if let Some(rule) = rule
        && let Some(constant) = rule.result.constant()
    {
        return Step::Done(reading.constant_answer(rule.status, constant));
    }
    if answer.status.is_success()
        && let Some(outcome) = reading.success_predicates()
    {
        return Step::Done(outcome);
    }
    match rule {
        Some(rule) => Step::Done(declared_outcome(
            call,
            rule.status,
            reading.code,
            reading.body,
            &reading.reference,
            answer.too_large(),
        )),
        None => reading.by_code(),
    }
}
