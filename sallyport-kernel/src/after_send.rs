//! The failure rules every channel shares: what a request that brought back no complete
//! answer means for the call (DESIGN.md, "Failure rules").
//!
//! A channel says what it knows — how far this request got ([`Failure`]) and whether an
//! earlier request of the same call had already left — and [`AfterSend::failed`] answers
//! with the outcome: status, code and a reason that ends with what the agent may do. So HTTP
//! and SSH report the same code for the same situation:
//!
//! | what happened | code | status |
//! |---|---|---|
//! | never left: unreachable / connect timed out / untrusted peer, nothing left before | `connect_failed` / `connect_timeout` / `tls_untrusted` | `rejected` |
//! | never left, but an earlier request of this call did | `connection_lost_after_send` | uncertain |
//! | left, connection lost before any answer | `connection_lost_after_send` | uncertain |
//! | left, the answer began and was cut off | `response_truncated` | uncertain |
//! | left, no complete answer within the timeout | `timeout_after_send` | uncertain |
//!
//! "Uncertain" ([`AfterSend::uncertain`]) is `unknown` for a state-changing action (it may or
//! may not have taken effect: do not retry, check with the reconcile action) and `rejected`
//! for an observe action (nothing changes by reading, so a later call may succeed).
//!
//! Whether to resend is the channel's decision under the action's retry rule; the one rule
//! that holds for every channel is [`Failure::left`]: a request that provably never left is
//! always safe to resend.

use crate::action::{ActionSpec, EffectClass};
use crate::channel::ChannelOutcome;
use crate::code::{Code, UpstreamCode};
use crate::outcome::Status;

/// How far one request got before it failed to bring back a complete answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// Never left: the upstream could not be reached (refused, reset or closed before the
    /// request was written).
    ConnectFailed,
    /// Never left: connecting did not finish within the connect timeout.
    ConnectTimedOut,
    /// Never left: the upstream's certificate is not trusted by this executor.
    Untrusted,
    /// Left; the connection was lost before any answer.
    ConnectionLost,
    /// Left; the answer began and was cut off.
    CutOff,
    /// Left; no complete answer came within the timeout.
    TimedOut,
}

impl Failure {
    /// Whether the request may have reached the upstream. One that did not is always safe
    /// to resend, whatever the action's retry rule.
    pub fn left(self) -> bool {
        matches!(self, Self::ConnectionLost | Self::CutOff | Self::TimedOut)
    }

    /// The code when nothing of the call was sent before.
    fn code(self) -> UpstreamCode {
        match self {
            Self::ConnectFailed => UpstreamCode::ConnectFailed,
            Self::ConnectTimedOut => UpstreamCode::ConnectTimeout,
            Self::Untrusted => UpstreamCode::TlsUntrusted,
            Self::ConnectionLost => UpstreamCode::ConnectionLostAfterSend,
            Self::CutOff => UpstreamCode::ResponseTruncated,
            Self::TimedOut => UpstreamCode::TimeoutAfterSend,
        }
    }
}

/// The outcome of the first request of a call when it met `failure` (the same as
/// [`AfterSend::failed`] with `sent_before` false, for any action), for a channel that knows
/// nothing left before it (SSH sends one command per call, after connecting). A `failure`
/// after which the request may have left is `unknown`: without the action's card there is
/// no telling whether a read was meant.
pub fn first_not_sent(failure: Failure, what: &str) -> ChannelOutcome {
    if failure.left() {
        return AfterSend::for_effect(EffectClass::ExternalCommitment, None)
            .uncertain(failure.code(), what);
    }
    let advice = match failure {
        Failure::Untrusted => "nothing was sent",
        _ => "nothing was sent, so calling again later is safe",
    };
    ChannelOutcome::new(Status::Rejected)
        .with_code(failure.code())
        .with_reason(format!("{what}; {advice}"))
}

/// The after-send rules for one call, from the two things of its card they depend on: the
/// effect class and the reconcile action.
#[derive(Clone, Copy, Debug)]
pub struct AfterSend<'a> {
    mutating: bool,
    reconcile: Option<&'a str>,
}

impl<'a> AfterSend<'a> {
    /// The rules for a call of the action `spec`.
    pub fn new(spec: &'a ActionSpec) -> Self {
        Self::for_effect(spec.effect, spec.reconcile.as_deref())
    }

    /// The rules for an action with `effect` and, optionally, a read-only `reconcile`
    /// action that tells whether it took effect.
    pub fn for_effect(effect: EffectClass, reconcile: Option<&'a str>) -> Self {
        Self {
            mutating: effect.is_mutating(),
            reconcile,
        }
    }

    /// The outcome of a request that met `failure`, when `sent_before` says whether an
    /// earlier request of the same call had left. `what` says what happened in the
    /// channel's words, without advice ("could not reach host `web1` (connection
    /// refused)"); the reason is `what` followed by what the agent may do.
    pub fn failed(&self, failure: Failure, sent_before: bool, what: &str) -> ChannelOutcome {
        if failure.left() {
            return self.uncertain(failure.code(), what);
        }
        if sent_before {
            return self.uncertain(
                UpstreamCode::ConnectionLostAfterSend,
                &format!(
                    "an earlier request of this call was sent and got no answer, and then {what}"
                ),
            );
        }
        first_not_sent(failure, what)
    }

    /// An outcome for something after a send that may or may not have taken effect:
    /// `unknown` for a state-changing action, `rejected` (nothing changes anyway) for an
    /// observe action. `what` is as for [`failed`](Self::failed).
    pub fn uncertain(&self, code: impl Into<Code>, what: &str) -> ChannelOutcome {
        if self.mutating {
            let check = match self.reconcile {
                Some(action) => format!("; do not retry; check with {action}"),
                None => "; do not retry".to_owned(),
            };
            ChannelOutcome::new(Status::Unknown)
                .with_code(code)
                .with_reason(format!(
                    "{what}; it may or may not have taken effect{check}"
                ))
        } else {
            ChannelOutcome::new(Status::Rejected)
                .with_code(code)
                .with_reason(format!(
                    "{what}; nothing was changed, a later call may succeed"
                ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Origin;

    const ALL: [Failure; 6] = [
        Failure::ConnectFailed,
        Failure::ConnectTimedOut,
        Failure::Untrusted,
        Failure::ConnectionLost,
        Failure::CutOff,
        Failure::TimedOut,
    ];

    fn code(outcome: &ChannelOutcome) -> &str {
        outcome.code.as_ref().map_or("", Code::as_str)
    }

    #[test]
    fn a_request_that_never_left_is_rejected_with_its_own_code_when_nothing_left_before() {
        let rules = AfterSend::for_effect(EffectClass::ExternalCommitment, Some("get_invoice"));
        let expect = [
            (Failure::ConnectFailed, "connect_failed"),
            (Failure::ConnectTimedOut, "connect_timeout"),
            (Failure::Untrusted, "tls_untrusted"),
        ];
        for (failure, expected) in expect {
            assert!(!failure.left());
            let outcome = rules.failed(failure, false, "the upstream could not be reached");
            assert_eq!(outcome.status, Status::Rejected, "{failure:?}");
            assert_eq!(outcome.origin, Origin::Upstream);
            assert_eq!(code(&outcome), expected);
        }
        let outcome = rules.failed(Failure::ConnectFailed, false, "could not reach `web1`");
        assert_eq!(
            outcome.reason.as_deref(),
            Some("could not reach `web1`; nothing was sent, so calling again later is safe")
        );
        assert_eq!(
            first_not_sent(Failure::ConnectFailed, "could not reach `web1`"),
            outcome
        );
        assert_eq!(
            first_not_sent(Failure::TimedOut, "x").status,
            Status::Unknown,
            "without the card, a request that may have left is unknown"
        );
    }

    #[test]
    fn a_request_that_never_left_after_one_that_did_is_connection_lost_after_send() {
        let rules = AfterSend::for_effect(EffectClass::ReversibleChange, Some("get_invoice"));
        for failure in ALL.into_iter().filter(|f| !f.left()) {
            let outcome = rules.failed(failure, true, "the upstream became unreachable");
            assert_eq!(outcome.status, Status::Unknown, "{failure:?}");
            assert_eq!(code(&outcome), "connection_lost_after_send");
            assert_eq!(
                outcome.reason.as_deref(),
                Some(
                    "an earlier request of this call was sent and got no answer, and then the upstream became unreachable; it may or may not have taken effect; do not retry; check with get_invoice"
                )
            );
        }
    }

    #[test]
    fn a_request_that_left_is_unknown_for_a_change_and_rejected_for_a_read() {
        let expect = [
            (Failure::ConnectionLost, "connection_lost_after_send"),
            (Failure::CutOff, "response_truncated"),
            (Failure::TimedOut, "timeout_after_send"),
        ];
        let change = AfterSend::for_effect(EffectClass::IrreversibleOrBroad, None);
        let read = AfterSend::for_effect(EffectClass::Observe, Some("unused"));
        for (failure, expected) in expect {
            assert!(failure.left());
            for sent_before in [false, true] {
                let outcome = change.failed(failure, sent_before, "the request was sent");
                assert_eq!(outcome.status, Status::Unknown);
                assert_eq!(code(&outcome), expected);
                assert_eq!(
                    outcome.reason.as_deref(),
                    Some("the request was sent; it may or may not have taken effect; do not retry")
                );
                let outcome = read.failed(failure, sent_before, "the request was sent");
                assert_eq!(outcome.status, Status::Rejected);
                assert_eq!(code(&outcome), expected);
                assert_eq!(
                    outcome.reason.as_deref(),
                    Some("the request was sent; nothing was changed, a later call may succeed")
                );
            }
        }
    }
}
