//! What an answer's HTTP status code decides: the codes with a rule of their own
//! (authentication, rate limits, the IETF Idempotency-Key draft's answers, redirects,
//! timeouts, server errors), the success range's body predicates, and the default mapping
//! of the rest.

use std::time::Duration;

use sallyport_core::action::RetryRule;
use sallyport_core::channel::ChannelOutcome;
use sallyport_core::code::UpstreamCode;
use sallyport_core::outcome::Status;
use serde_json::Value;

use super::declared::{body_rules, project_optional, success};
use super::headers::{RetryAfter, retry_after};
use super::message::{mentions_idempotency, message};
use super::{Call, Step};
use crate::exchange::Answer;

/// One answer as the mapping reads it.
pub(super) struct Reading<'a> {
    pub(super) call: &'a Call<'a>,
    pub(super) answer: &'a Answer,
    /// The HTTP status code.
    pub(super) code: u16,
    pub(super) body: Option<&'a [u8]>,
    /// The upstream's correlation id, or else the attempt id: what the human looks it up by.
    pub(super) reference: String,
}

impl<'a> Reading<'a> {
    /// Reads `answer` to `call`.
    pub(super) fn new(call: &'a Call<'a>, answer: &'a Answer) -> Self {
        Self {
            call,
            answer,
            code: answer.status.as_u16(),
            body: answer.body.as_deref(),
            reference: call.reference(&answer.headers),
        }
    }

    /// `o`, marked with the upstream's status code.
    fn upstream(&self, o: ChannelOutcome) -> ChannelOutcome {
        o.with_upstream_status(i64::from(self.code))
    }

    /// `rejected` with `code_name`, saying `what` with the status code, the upstream's
    /// filtered message (when the action declares one) and the reference.
    fn rejected(&self, code_name: UpstreamCode, what: &str) -> ChannelOutcome {
        let (code, reference) = (self.code, &self.reference);
        let reason = match message(self.call, self.body) {
            Some(m) => format!("{what} (HTTP {code}): {m}; correlation id {reference}"),
            None => format!("{what} (HTTP {code}); correlation id {reference}"),
        };
        self.upstream(
            ChannelOutcome::new(Status::Rejected)
                .with_code(code_name)
                .with_reason(reason),
        )
    }

    /// The codes with a rule of their own, whatever the action declares for them:
    /// authentication (stop, and mark the credential unusable), rate limits (wait only for a
    /// usable `Retry-After` within the cap) and the IETF Idempotency-Key draft's answers.
    pub(super) fn own_rule(&self, declared: Option<Status>) -> Option<Step> {
        match self.code {
            401 | 403 => Some(Step::Done(self.credential_refused())),
            429 => Some(self.rate_limited()),
            _ => self.idempotency_answer(declared).map(Step::Done),
        }
    }

    /// A status the action declares to be an answer in itself (`completed(empty)`,
    /// `completed(value = …)`): `status` with `constant` read as the declared result type,
    /// and no data for `null`. The body is not read. The catalog build checked that the
    /// type reads the constant; should it not, that is no evidence of the declared status.
    pub(super) fn constant_answer(&self, status: Status, constant: &Value) -> ChannelOutcome {
        let data = match &self.call.target.result {
            Some(shape) => shape.project(constant.clone()),
            None => Ok(Value::Null),
        };
        match data {
            Ok(Value::Null) => self.upstream(ChannelOutcome::new(status)),
            Ok(data) => self.upstream(ChannelOutcome::new(status).with_data(data)),
            Err(_) => self.upstream(self.call.uncertain(
                UpstreamCode::UnexpectedResponse,
                &format!(
                    "the result this action declares for HTTP {} does not match its result type",
                    self.code
                ),
            )),
        }
    }

    /// 401 and 403: stop, and mark the credential unusable when one was attached.
    fn credential_refused(&self) -> ChannelOutcome {
        let o = self.rejected(
            UpstreamCode::AuthFailed,
            "the upstream refused the credential; a human must check or replace it",
        );
        if self.call.credential_attached {
            o.with_credential_rejected()
        } else {
            o
        }
    }

    /// 429: wait and resend only for a usable `Retry-After` within the cap, and only when
    /// the action may be resent after a send; otherwise say when the agent may call again.
    fn rate_limited(&self) -> Step {
        let cap = self.call.max_retry_after;
        match retry_after(&self.answer.headers) {
            // The request left; only an action that may be resent after a send waits and
            // resends. Any other says when the agent may call again, and sends nothing more.
            RetryAfter::Delay(d) if d <= cap && !self.call.may_resend_after_send() => {
                Step::Done(self.limited(
                    format!(
                        "rate limited by the upstream; this action is never resent automatically, call again in {} s",
                        d.as_secs()
                    ),
                    Some(d),
                ))
            }
            RetryAfter::Delay(d) if d <= cap => Step::Resend {
                wait: Some(d),
                exhausted: self.limited(
                    format!(
                        "rate limited by the upstream; try again in {} s",
                        d.as_secs()
                    ),
                    Some(d),
                ),
            },
            RetryAfter::Delay(d) => Step::Done(self.limited(
                format!(
                    "rate limited by the upstream for {} s, longer than this action waits ({} s); try again later",
                    d.as_secs(),
                    cap.as_secs()
                ),
                Some(d),
            )),
            RetryAfter::Missing => Step::Done(self.limited(
                "rate limited by the upstream, which gave no Retry-After; try again later"
                    .to_owned(),
                None,
            )),
            RetryAfter::Invalid => Step::Done(self.limited(
                "rate limited by the upstream, whose Retry-After is unusable; try again later"
                    .to_owned(),
                None,
            )),
        }
    }

    /// A `rate_limited` rejection giving `reason`, and the delay when the upstream gave a
    /// usable one.
    fn limited(&self, reason: String, delay: Option<Duration>) -> ChannelOutcome {
        let o = self.upstream(
            ChannelOutcome::new(Status::Rejected)
                .with_code(UpstreamCode::RateLimited)
                .with_reason(reason),
        );
        match delay {
            Some(d) => o.with_data(serde_json::json!({ "retry_after_seconds": d.as_secs() })),
            None => o,
        }
    }

    /// The IETF Idempotency-Key draft's answers (409 still processing, 422 key reused with
    /// another payload, 400 key required), told apart from the same codes' other meanings by
    /// a body mentioning idempotency or, for an action that sends a key, by this being a
    /// resend (a 409 only when the action declares no status of its own for it).
    fn idempotency_answer(&self, declared: Option<Status>) -> Option<ChannelOutcome> {
        let (call, code) = (self.call, self.code);
        let key_action = call.spec.retry == RetryRule::IdempotencyKey;
        let idem = mentions_idempotency(self.body);
        if code == 409 && key_action && (idem || (call.resend && declared.is_none())) {
            return Some(self.upstream(
                ChannelOutcome::new(Status::Pending)
                    .with_code(UpstreamCode::IdempotencyConflict)
                    .with_reason(format!(
                        "the upstream is still processing the original request with this idempotency key{}",
                        match &call.spec.reconcile {
                            Some(r) => format!("; check with {r}"),
                            None => String::new(),
                        }
                    )),
            ));
        }
        if code == 422 && key_action && (idem || call.resend) {
            return Some(self.rejected(
                UpstreamCode::IdempotencyMismatch,
                "the upstream says this idempotency key was used with another payload; nothing was applied for this call",
            ));
        }
        if code == 400 && idem {
            let what = if key_action {
                format!(
                    "the upstream requires an idempotency key and did not accept the one sent in header `{}`; the HTTP channel's idempotency header name or quoting is misconfigured",
                    call.idempotency_header
                )
            } else {
                format!(
                    "the upstream requires an idempotency key, and action `{}` does not declare retry = idempotency_key; its definition must be fixed",
                    call.spec.name
                )
            };
            return Some(self.rejected(UpstreamCode::IdempotencyKeyRequired, &what));
        }
        None
    }

    /// A success-range answer's body predicates: a body too large to read is no evidence of
    /// success, and a body rule that matches decides; `None` leaves it to the declared or
    /// default mapping.
    pub(super) fn success_predicates(&self) -> Option<ChannelOutcome> {
        let code = self.code;
        if self.answer.too_large() {
            return Some(self.upstream(self.call.uncertain(
                UpstreamCode::ResponseTooLarge,
                &format!(
                    "the upstream answered HTTP {code} with a body larger than this action reads"
                ),
            )));
        }
        body_rules(self.call, self.body, code, &self.reference)
    }

    /// The default mapping, for a code the action declares no status for and no rule
    /// above decided.
    pub(super) fn by_code(&self) -> Step {
        let (call, body, code) = (self.call, self.body, self.code);
        let done = match code {
            200 | 201 | 204 => self.upstream(success(call, body)),
            202 => self.upstream(project_optional(call, Status::Pending, body)),
            300..=399 => self.redirected(),
            408 => return self.timed_out(),
            400 => self.rejected(
                UpstreamCode::BadRequest,
                "the upstream rejected the request",
            ),
            404 => self.rejected(UpstreamCode::NotFound, "the upstream found no such object"),
            409 => self.rejected(UpstreamCode::Conflict, "the upstream reported a conflict"),
            410 => self.rejected(UpstreamCode::NotFound, "the object is gone upstream"),
            422 => self.rejected(
                UpstreamCode::Unprocessable,
                "the upstream rejected the request's content",
            ),
            402..=499 => self.rejected(
                UpstreamCode::ClientError,
                "the upstream rejected the request",
            ),
            500..=599 => return self.server_error(),
            _ => self.upstream(call.uncertain(
                UpstreamCode::UnexpectedResponse,
                &format!("the upstream answered HTTP {code}, which this action does not declare"),
            )),
        };
        Step::Done(done)
    }

    /// A 3xx: redirects are never followed. After a mutating request a 303 (see other) may
    /// mean it was applied; any other redirect refuses the call.
    fn redirected(&self) -> ChannelOutcome {
        if self.code == 303 && self.call.mutating() {
            self.upstream(self.call.uncertain(
                UpstreamCode::RedirectNotFollowed,
                "the upstream answered with a redirect after the request was sent; redirects are never followed",
            ))
        } else {
            self.rejected(
                UpstreamCode::RedirectRefused,
                "the upstream redirected the call elsewhere; redirects are never followed",
            )
        }
    }

    /// A 408, resent (after the backoff) when the action may be resent after a send.
    fn timed_out(&self) -> Step {
        // The request left, and a proxy or server in front of the upstream may have
        // passed it on before giving up: not proof that nothing was applied.
        let outcome = self.upstream(self.call.uncertain(
            UpstreamCode::RequestTimeout,
            &format!(
                "the upstream answered HTTP 408 (request timeout) after the request was sent; correlation id {}",
                self.reference
            ),
        ));
        if self.call.may_resend_after_send() {
            Step::Resend {
                wait: None,
                exhausted: outcome,
            }
        } else {
            Step::Done(outcome)
        }
    }

    /// A 5xx (a gateway's 502 to 504 named as such), resent when the action may be resent
    /// after a send, after a usable `Retry-After` within the cap or else the backoff.
    fn server_error(&self) -> Step {
        let code = self.code;
        let (code_name, what) = if matches!(code, 502..=504) {
            (
                UpstreamCode::GatewayError,
                format!("the upstream's gateway answered HTTP {code}"),
            )
        } else {
            (
                UpstreamCode::UpstreamError,
                format!("the upstream failed with HTTP {code}"),
            )
        };
        let exhausted = self.upstream(self.call.uncertain(
            code_name,
            &format!("{what}; correlation id {}", self.reference),
        ));
        let wait = match retry_after(&self.answer.headers) {
            RetryAfter::Delay(d) if d <= self.call.max_retry_after => Some(d),
            _ => None,
        };
        if self.call.may_resend_after_send() {
            Step::Resend { wait, exhausted }
        } else {
            Step::Done(exhausted)
        }
    }
}
