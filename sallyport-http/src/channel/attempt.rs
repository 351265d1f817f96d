//! The attempt loop: send the prepared request, read the answer, and resend only as the
//! action's retry rule and the shared after-send rules allow.

use std::borrow::Cow;
use std::sync::Arc;

use sallyport_core::action::RetryRule;
use sallyport_core::after_send::Failure;
use sallyport_core::channel::{ChannelOutcome, Dispatch, DispatchContext};
use sallyport_core::code::{RefusalCode, UpstreamCode};
use sallyport_core::outcome::{ConnectNeeded, Origin, Refusal, Status};

use super::oauth::AccessToken;
use super::{HttpChannel, http_target};
use crate::exchange::{Exchange, LostKind, SendHook, exchange};
use crate::prepared::{self, HttpPrepared};

use crate::response::{self, Call, Step};

impl HttpChannel {
    pub(super) async fn run(&self, call: &Dispatch<'_>) -> ChannelOutcome {
        let Some(prepared) = call.prepared::<HttpPrepared>() else {
            return refused(&Refusal::new(
                RefusalCode::ChannelUnavailable,
                "the request was not prepared by the HTTP channel; nothing was sent",
            ));
        };
        let Some(url) = prepared.destination() else {
            return refused(&prepared::incomplete());
        };
        let target = match http_target(call.spec) {
            Ok(target) => target,
            Err(refusal) => return refused(&refusal),
        };
        // The prepared headers as they are, or a copy with the idempotency key added.
        let mut headers = Cow::Borrowed(&prepared.headers);
        if call.spec.retry == RetryRule::IdempotencyKey {
            match self.idempotency_value(call.idempotency_key.as_str()) {
                Ok(value) => {
                    headers
                        .to_mut()
                        .insert(self.inner.idempotency_header.clone(), value);
                }
                Err(refusal) => return refused(&refusal),
            }
        }
        // A client certificate credential's own client, or the shared one.
        let client = match self.client_for(call.credential, prepared.limits.connect_timeout) {
            Ok(c) => c,
            Err(refusal) => return refused(&refusal),
        };
        let limits = prepared.limits;
        // An OAuth credential's access token, read (or refreshed) now, at send time.
        let oauth_credential = call.credential.filter(|c| c.meta().kind.oauth().is_some());
        let mut token = None;
        if let Some(credential) = oauth_credential {
            match self.access_token(credential, None).await {
                Ok(t) => {
                    headers
                        .to_mut()
                        .insert(reqwest::header::AUTHORIZATION, t.header.clone());
                    token = Some(t);
                }
                Err(refusal) => return refused(&refusal),
            }
        }
        // A token refreshed after the call's scrubber was made is redacted too.
        let mut scrubber = token_scrubber(call.context.scrubber(), token.as_ref());
        let mut refreshed_after_401 = false;
        let mut sent_before = false;
        let mut last: Option<ChannelOutcome> = None;
        let mut attempt = 0;
        while attempt < limits.max_attempts {
            attempt += 1;
            let hook = SendHook::new(Some(Arc::clone(call.context)));
            let request = prepared.request(url, &headers, &hook);
            let result = exchange(
                &client,
                request,
                &hook,
                limits.total_timeout,
                limits.max_response_bytes,
            )
            .await;
            // What the exchange decided lives in a block that ends before the backoff is
            // awaited, so the loop's future does not carry it through the wait.
            let (wait, refused_token) = {
                let mapping = Call {
                    spec: call.spec,
                    target,
                    max_retry_after: limits.max_retry_after,
                    resend: sent_before,
                    credential_attached: call.credential.is_some(),
                    client_certificate: call
                        .credential
                        .filter(|c| {
                            matches!(
                                c.meta().kind,
                                sallyport_core::vault::CredentialKind::ClientCertificate(_)
                            )
                        })
                        .map(|c| c.meta().name.as_str()),
                    idempotency_header: self.inner.idempotency_header.as_str(),
                    attempt_id: call.attempt_id.as_str(),
                    scrubber: scrubber.as_deref().unwrap_or(call.context.scrubber()),
                };
                let step = step_for(&mapping, result, sent_before || hook.fired());
                sent_before |= hook.fired();
                match step {
                    Step::Done(outcome) => {
                        let token_401 = token.is_some()
                            && outcome.credential_rejected
                            && outcome.upstream_status == Some(401);
                        if !token_401 {
                            return finish(outcome, scrubber.as_deref());
                        }
                        if refreshed_after_401 || !mapping.may_resend_after_send() {
                            // No resend: the outcome stands, and the next call gets a fresh
                            // token instead of the credential being marked unusable.
                            if let (Some(credential), Some(t)) = (oauth_credential, &token) {
                                self.token_refused(credential, t.version).await;
                            }
                            let mut outcome = outcome;
                            outcome.credential_rejected = false;
                            outcome.reason = Some(
                                "the upstream refused the OAuth access token (HTTP 401); the next call gets a fresh one"
                                    .to_owned(),
                            );
                            return finish(outcome, scrubber.as_deref());
                        }
                        (std::time::Duration::ZERO, true)
                    }
                    Step::Resend { wait, exhausted } => {
                        if attempt == limits.max_attempts {
                            return finish(exhausted, scrubber.as_deref());
                        }
                        last = Some(exhausted);
                        (
                            wait.unwrap_or_else(|| self.inner.backoff.wait(attempt)),
                            false,
                        )
                    }
                }
            };
            if refused_token {
                // A 401 on an observe or idempotency-key call: refresh once and send the
                // same attempt again (same key, counted as a dispatch), outside the budget
                // of resends.
                let (Some(credential), Some(old)) = (oauth_credential, token.take()) else {
                    break;
                };
                match self.access_token(credential, Some(old.version)).await {
                    Ok(t) => {
                        headers
                            .to_mut()
                            .insert(reqwest::header::AUTHORIZATION, t.header.clone());
                        scrubber = Some(Arc::new(
                            call.context
                                .scrubber()
                                .extended([old.token.expose(), t.token.expose()]),
                        ));
                        token = Some(t);
                    }
                    Err(refusal) => return finish(refused(&refusal), scrubber.as_deref()),
                }
                refreshed_after_401 = true;
                attempt -= 1;
                tracing::debug!(
                    attempt,
                    "resending with a refreshed OAuth token after HTTP 401"
                );
                continue;
            }
            tracing::debug!(attempt, wait_ms = wait.as_millis() as u64, "resending");
            tokio::time::sleep(wait).await;
        }
        let outcome = last.unwrap_or_else(|| {
            ChannelOutcome::new(Status::Rejected).with_code(UpstreamCode::NotSent)
        });
        finish(outcome, scrubber.as_deref())
    }
}

/// The call's scrubber extended with `token`, when it does not know it yet (a token
/// refreshed after the call resolved its credential); `None` when it does.
fn token_scrubber(
    scrubber: &sallyport_core::scrub::Scrubber,
    token: Option<&AccessToken>,
) -> Option<Arc<sallyport_core::scrub::Scrubber>> {
    let token = token?;
    (!scrubber.covers(token.token.expose()))
        .then(|| Arc::new(scrubber.extended(std::iter::once(token.token.expose()))))
}

/// The outcome, its reason and data scrubbed of tokens the call's own scrubber does not
/// know (the executor scrubs it again with that one).
fn finish(
    mut outcome: ChannelOutcome,
    scrubber: Option<&sallyport_core::scrub::Scrubber>,
) -> ChannelOutcome {
    if let Some(scrubber) = scrubber {
        if let Some(reason) = &outcome.reason {
            outcome.reason = Some(scrubber.scrub(reason).into_owned());
        }
        if let Some(data) = &mut outcome.data {
            scrubber.scrub_json(data);
        }
    }
    outcome
}

/// How one exchange continues the attempt. What a failed exchange means is decided by the
/// rules every channel shares ([`AfterSend`](sallyport_core::after_send::AfterSend)); this only says what happened and whether to
/// resend.
fn step_for(call: &Call<'_>, result: Exchange, any_sent: bool) -> Step {
    let rules = call.after_send();
    match result {
        Exchange::Refused(outcome) => Step::Done(outcome),
        Exchange::Answered(answer) => response::classify(call, &answer),
        // A certificate this executor does not trust stays untrusted on a resend.
        Exchange::Untrusted => Step::Done(rules.failed(
            Failure::Untrusted,
            any_sent,
            if any_sent {
                "the upstream's certificate was refused"
            } else {
                "the upstream's certificate is not trusted by this executor"
            },
        )),
        // The upstream read no request: definitely not applied, and a resend would be
        // refused the same way.
        Exchange::ClientCertificateRefused => {
            Step::Done(client_certificate_refused(call.client_certificate))
        }
        // Nothing left: always safe to resend. When exhausted, the truth depends on whether
        // an earlier request of this attempt left.
        Exchange::NotSent { timed_out } => Step::Resend {
            wait: None,
            exhausted: rules.failed(
                if timed_out {
                    Failure::ConnectTimedOut
                } else {
                    Failure::ConnectFailed
                },
                any_sent,
                if any_sent {
                    "the upstream became unreachable"
                } else {
                    "the upstream could not be reached"
                },
            ),
        },
        Exchange::Lost { kind, status } => {
            let (failure, what) = match (kind, status) {
                (LostKind::Timeout, _) => (
                    Failure::TimedOut,
                    "the request was sent and no complete answer came within the timeout"
                        .to_owned(),
                ),
                (LostKind::Connection, Some(s)) => (
                    Failure::CutOff,
                    format!(
                        "the request was sent and the answer (HTTP {}) was cut off",
                        s.as_u16()
                    ),
                ),
                (LostKind::Connection, None) => (
                    Failure::ConnectionLost,
                    "the request was sent and the connection was lost before an answer".to_owned(),
                ),
            };
            let mut outcome = rules.failed(failure, any_sent, &what);
            if let Some(s) = status {
                outcome = outcome.with_upstream_status(i64::from(s.as_u16()));
            }
            if call.may_resend_after_send() {
                Step::Resend {
                    wait: None,
                    exhausted: outcome,
                }
            } else {
                Step::Done(outcome)
            }
        }
    }
}

/// The upstream refused the TLS client certificate of `credential` (or, with `None`, asked
/// for one this call does not present) in the handshake: `rejected`/`auth_failed`. A
/// refused certificate marks its credential unusable, as a 401 does a token; a missing one
/// marks nothing (no credential of this call was refused).
fn client_certificate_refused(credential: Option<&str>) -> ChannelOutcome {
    let outcome = ChannelOutcome::new(Status::Rejected)
        .with_origin(Origin::Upstream)
        .with_code(UpstreamCode::AuthFailed);
    match credential {
        Some(name) => outcome
            .with_reason(format!(
                "the upstream refused the TLS client certificate of credential `{name}` in the handshake and read no request; a human must check or replace it"
            ))
            .with_credential_rejected(),
        None => outcome.with_reason(
            "the upstream requires a TLS client certificate, and this action presents none; it read no request"
                .to_owned(),
        ),
    }
}

/// A refusal found at dispatch (nothing sent).
fn refused(refusal: &Refusal) -> ChannelOutcome {
    let outcome = ChannelOutcome::new(Status::Rejected)
        .with_origin(Origin::Executor)
        .with_code(refusal.code)
        .with_reason(refusal.reason.clone());
    match &refusal.connect {
        Some(connect) => outcome.with_connect(ConnectNeeded::clone(connect)),
        None => outcome,
    }
}

/// Used by the probe: one bare exchange with a fresh hook and no journal.
pub(crate) async fn probe_exchange(
    channel: &HttpChannel,
    prepared: &HttpPrepared,
    credential: Option<&sallyport_core::vault::Credential>,
) -> Option<crate::exchange::Answer> {
    let client = channel
        .client_for(credential, prepared.limits.connect_timeout)
        .ok()?;
    let url = prepared.destination()?;
    let hook = SendHook::new(None::<Arc<DispatchContext>>);
    match exchange(
        &client,
        prepared.request(url, &prepared.headers, &hook),
        &hook,
        prepared.limits.total_timeout,
        prepared.limits.max_response_bytes,
    )
    .await
    {
        Exchange::Answered(answer) => Some(answer),
        _ => None,
    }
}
