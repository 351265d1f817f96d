//! Stage 4, last step: the host's [`Policy`] decides the call, else `policy_denied`.
//!
//! It runs after the scope check and after the channel prepared the request, so only a call
//! that passed every static check is decided (and counted). It runs *before* the definition
//! check of stage 5: authorization is one stage, so [`crate::Executor::preflight`] answers
//! a policy denial too, and a decision taken on a card that drifted from the baseline never
//! leads to a send, because stage 5 refuses that card next (a deny is safe either way). A
//! call the policy let through and a later stage refused still counts in the call counts:
//! rate limits fail closed.
//!
//! The call counts (`CallLog`) are kept here, in memory, per process: per session and
//! action, the instants of the calls the policy let through in the last day. Deciding and
//! counting happen under one lock per (session, action), so two concurrent calls cannot both
//! see the last free slot.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::validate::Validated;
use crate::code::RefusalCode;
use crate::journal::AttemptId;
use crate::outcome::Refusal;
use crate::policy::{
    CallCounts, Policy, PolicyDecision, PolicyNote, PolicyRequest, PolicyVerdict, visible_arguments,
};
use crate::scrub::Scrubber;
use crate::session::Session;
use sallyport_vocab::MAX_REASON;

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);
const DAY: Duration = Duration::from_secs(86_400);

/// How many (session, action) windows may pile up before empty ones are swept.
const SWEEP_AT: usize = 4_096;

/// What the policy decided about a call that may go on. Only this stage's `check` makes one.
#[derive(Clone, Debug, Default)]
pub(crate) struct PolicyCheck {
    note: Option<PolicyNote>,
    requires_consent: bool,
}

impl PolicyCheck {
    /// The decision as the audit record names it; `None` without a policy.
    pub(crate) fn note(&self) -> Option<&PolicyNote> {
        self.note.as_ref()
    }

    /// Whether the policy asked for a human's approval of this one call.
    pub(crate) fn requires_consent(&self) -> bool {
        self.requires_consent
    }
}

/// Why the policy is asked.
#[derive(Clone, Copy, Debug)]
pub(super) enum Purpose<'a> {
    /// [`crate::Executor::preflight`]: decided, not counted.
    Preflight,
    /// A new call: decided, and counted when let through.
    Call(&'a AttemptId),
    /// A parked call resumed after its approval: decided again, with counts that leave out
    /// the call itself (counted when it was first let through), and not counted again.
    Resume(&'a AttemptId),
}

/// The per-process call counts: per (session, action), the calls the policy let through in
/// the last day.
#[derive(Debug, Default)]
pub(crate) struct CallLog {
    windows: Mutex<Windows>,
}

/// The windows by (session id, action name).
type Windows = HashMap<(String, String), Arc<Mutex<Window>>>;

/// One session's calls of one action: when each was let through, oldest first.
#[derive(Debug, Default)]
struct Window {
    calls: VecDeque<(Instant, AttemptId)>,
}

impl Window {
    fn forget_before(&mut self, now: Instant) {
        while let Some((at, _)) = self.calls.front() {
            if now.saturating_duration_since(*at) >= DAY {
                self.calls.pop_front();
            } else {
                break;
            }
        }
    }

    /// The counts at `now`, leaving out `except`.
    fn counts(&self, now: Instant, except: Option<&AttemptId>) -> CallCounts {
        let mut counts = CallCounts::default();
        for (at, attempt) in &self.calls {
            if except == Some(attempt) {
                continue;
            }
            let age = now.saturating_duration_since(*at);
            counts.day += u64::from(age < DAY);
            counts.hour += u64::from(age < HOUR);
            counts.minute += u64::from(age < MINUTE);
        }
        counts
    }
}

impl CallLog {
    fn window(&self, session: &str, action: &str) -> Arc<Mutex<Window>> {
        // A poisoned map only ever holds complete entries: recovered.
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        if windows.len() >= SWEEP_AT {
            let now = Instant::now();
            windows.retain(|_, window| {
                let mut window = window.lock().unwrap_or_else(PoisonError::into_inner);
                window.forget_before(now);
                !window.calls.is_empty()
            });
        }
        Arc::clone(
            windows
                .entry((session.to_owned(), action.to_owned()))
                .or_default(),
        )
    }

    /// Runs `decide` with the counts of (session, action) at `now`, under that window's lock,
    /// and counts the call (`record`) when the decision lets it through.
    fn decide_and_count(
        &self,
        session: &str,
        action: &str,
        now: Instant,
        purpose: Purpose<'_>,
        decide: impl FnOnce(CallCounts) -> PolicyDecision,
    ) -> PolicyDecision {
        let window = self.window(session, action);
        let mut window = window.lock().unwrap_or_else(PoisonError::into_inner);
        window.forget_before(now);
        let except = match purpose {
            Purpose::Resume(attempt) => Some(attempt),
            Purpose::Preflight | Purpose::Call(_) => None,
        };
        let decision = decide(window.counts(now, except));
        if let Purpose::Call(attempt) = purpose
            && decision.verdict != PolicyVerdict::Deny
        {
            window.calls.push_back((now, attempt.clone()));
        }
        decision
    }
}

/// Asks the policy, when there is one; without one every call goes on as before.
pub(super) fn check(
    policy: Option<&dyn Policy>,
    log: &CallLog,
    scrubber: &Scrubber,
    session: &Session,
    validated: &Validated,
    purpose: Purpose<'_>,
) -> Result<PolicyCheck, Refusal> {
    let Some(policy) = policy else {
        return Ok(PolicyCheck::default());
    };
    let spec = validated.entry().spec();
    // sallyport's built-in `check_approval` reads the journal only; it is not the host's.
    if spec.target.channel_name() == Some(crate::approval::check::CHANNEL) {
        return Ok(PolicyCheck::default());
    }
    let arguments = visible_arguments(spec, validated.arguments());
    let decision = log.decide_and_count(
        session.id().as_str(),
        &spec.name,
        Instant::now(),
        purpose,
        |calls| {
            let request = PolicyRequest::new(session, spec, validated.objects(), &arguments, calls);
            policy.decide(&request)
        },
    );
    let mut note = PolicyNote::new(policy.name(), &decision);
    note.reason = note.reason.map(|r| scrubber.bounded(&r, MAX_REASON));
    match decision.verdict {
        PolicyVerdict::Deny => {
            let reason = match &note.reason {
                Some(reason) => format!(
                    "policy `{}` denied this call: {reason}; nothing was sent",
                    note.name
                ),
                None => format!("policy `{}` denied this call; nothing was sent", note.name),
            };
            Err(Refusal::new(RefusalCode::PolicyDenied, reason).with_policy(note))
        }
        PolicyVerdict::RequireConsent => Ok(PolicyCheck {
            note: Some(note),
            requires_consent: true,
        }),
        PolicyVerdict::Allow => Ok(PolicyCheck {
            note: Some(note),
            requires_consent: false,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capped(limit: u64) -> impl Fn(CallCounts) -> PolicyDecision {
        move |calls| {
            if calls.hour >= limit {
                PolicyDecision::deny("cap")
            } else {
                PolicyDecision::allow()
            }
        }
    }

    #[test]
    fn only_calls_let_through_are_counted_and_a_full_window_denies() {
        let log = CallLog::default();
        let start = Instant::now();
        let ids: Vec<AttemptId> = (0..7).map(|_| AttemptId::generate()).collect();
        let mut verdicts = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let now = start + Duration::from_secs(i as u64);
            let d = log.decide_and_count("s", "a", now, Purpose::Call(id), capped(5));
            verdicts.push(d.verdict);
        }
        use PolicyVerdict::{Allow, Deny};
        assert_eq!(verdicts, [Allow, Allow, Allow, Allow, Allow, Deny, Deny]);
        // Another session and another action have windows of their own.
        let other = AttemptId::generate();
        let d = log.decide_and_count("t", "a", start, Purpose::Call(&other), capped(5));
        assert_eq!(d.verdict, Allow);
        let d = log.decide_and_count("s", "b", start, Purpose::Call(&other), capped(5));
        assert_eq!(d.verdict, Allow);
    }

    #[test]
    fn counts_age_out_of_the_minute_hour_and_day() {
        let log = CallLog::default();
        let start = Instant::now();
        let id = AttemptId::generate();
        log.decide_and_count("s", "a", start, Purpose::Call(&id), |_| {
            PolicyDecision::allow()
        });
        let seen = |after: Duration| {
            let mut seen = CallCounts::default();
            log.decide_and_count("s", "a", start + after, Purpose::Preflight, |c| {
                seen = c;
                PolicyDecision::allow()
            });
            seen
        };
        assert_eq!(seen(Duration::from_secs(1)), CallCounts::new(1, 1, 1));
        assert_eq!(seen(Duration::from_secs(61)), CallCounts::new(0, 1, 1));
        assert_eq!(seen(Duration::from_secs(3_601)), CallCounts::new(0, 0, 1));
        assert_eq!(seen(Duration::from_secs(86_401)), CallCounts::new(0, 0, 0));
    }

    #[test]
    fn preflight_is_not_counted_and_a_resumed_call_does_not_see_itself() {
        let log = CallLog::default();
        let now = Instant::now();
        let parked = AttemptId::generate();
        for _ in 0..3 {
            log.decide_and_count("s", "a", now, Purpose::Preflight, |_| {
                PolicyDecision::allow()
            });
        }
        log.decide_and_count("s", "a", now, Purpose::Call(&parked), |c| {
            assert_eq!(c, CallCounts::default());
            PolicyDecision::require_consent("human")
        });
        let mut seen = None;
        log.decide_and_count("s", "a", now, Purpose::Resume(&parked), |c| {
            seen = Some(c);
            PolicyDecision::allow()
        });
        assert_eq!(seen, Some(CallCounts::default()));
        let mut after = None;
        log.decide_and_count("s", "a", now, Purpose::Preflight, |c| {
            after = Some(c);
            PolicyDecision::allow()
        });
        assert_eq!(after, Some(CallCounts::new(1, 1, 1)));
    }
}
