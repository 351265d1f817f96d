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
//! Where the call counts live is [`CallCounting`]'s choice: a [`CallStore`] shared by the
//! fleet when the executor has one (the journal's, unless the host opted out), else the
//! in-memory `CallLog` of this process. Either way, reading the counts, deciding and counting
//! the call let through are one step: the store's lock (a transaction that holds against the
//! other processes) or, in memory, one lock per session, so two concurrent calls cannot both
//! see the last free slot, whichever actions they call (a session-wide rule such as "3
//! commitments an hour" holds too).
//!
//! With a shared store, the calls this process lets through are also noted in its `CallLog`,
//! which [`crate::Executor::preflight`] decides with (it never touches the journal).
//!
//! A candidate policy in shadow ([`ShadowPolicy`]) decides inside the same step, right after
//! the enforced policy and on the same request, counts and recent calls; only the enforced
//! decision is counted and acted on. Its [`ShadowNote`] rides on the [`PolicyCheck`] (or on
//! the `policy_denied` refusal) to the call's audit record.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::validate::Validated;
use crate::code::RefusalCode;
use crate::journal::AttemptId;
use crate::outcome::{Refusal, Status};
use crate::policy::calls::{CallQuery, CallStore, Decide};
use crate::policy::{
    CallCounts, EffectCounts, Policy, PolicyDecision, PolicyNote, PolicyRequest, PolicyVerdict,
    RecentCall, SessionCalls, ShadowNote, ShadowPolicy, visible_arguments,
};
use crate::scrub::Scrubber;
use crate::session::Session;
use sallyport_vocab::MAX_REASON;

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);
const DAY: Duration = Duration::from_secs(86_400);

/// How many sessions' windows may pile up before empty ones are swept.
const SWEEP_AT: usize = 4_096;

/// How many recent calls a policy sees by default.
pub(crate) const DEFAULT_RECENT: usize = 16;

/// What the policy decided about a call that may go on. Only this stage's `check` makes one.
#[derive(Clone, Debug, Default)]
pub(crate) struct PolicyCheck {
    note: Option<PolicyNote>,
    requires_consent: bool,
    shadow: Option<ShadowNote>,
}

impl PolicyCheck {
    /// The decision as the audit record names it; `None` without a policy.
    pub(crate) fn note(&self) -> Option<&PolicyNote> {
        self.note.as_ref()
    }

    /// What the candidate policy in shadow would have decided; `None` without one.
    pub(crate) fn shadow(&self) -> Option<&ShadowNote> {
        self.shadow.as_ref()
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

impl<'a> Purpose<'a> {
    /// `query`, recording or leaving out the attempt as the purpose says.
    fn apply(self, query: CallQuery<'a>) -> CallQuery<'a> {
        match self {
            Purpose::Preflight => query,
            Purpose::Call(attempt) => query.recording(attempt),
            Purpose::Resume(attempt) => query.except(attempt),
        }
    }
}

/// Where the executor counts the calls its policy lets through.
pub(crate) struct CallCounting {
    /// This process's calls: the counts themselves without a shared store, and what
    /// preflight decides with.
    local: CallLog,
    /// The store shared by the fleet, when there is one.
    shared: Option<Arc<dyn CallStore>>,
    /// How many recent calls a policy sees.
    recent: usize,
}

impl CallCounting {
    /// Counting in `shared` when given, else in memory; policies see `recent` recent calls.
    pub(crate) fn new(shared: Option<Arc<dyn CallStore>>, recent: usize) -> Self {
        Self {
            local: CallLog::default(),
            shared,
            recent,
        }
    }

    /// Whether the counts are shared beyond this process.
    pub(crate) fn is_shared(&self) -> bool {
        self.shared.is_some()
    }
}

/// The per-process call log: per session, the calls the policy let through in the last day.
#[derive(Debug, Default)]
pub(crate) struct CallLog {
    windows: Mutex<Windows>,
}

/// The windows by session id.
type Windows = HashMap<String, Arc<Mutex<Window>>>;

/// One session's calls: when each was let through, oldest first.
#[derive(Debug, Default)]
struct Window {
    calls: VecDeque<(Instant, RecentCall)>,
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

    /// The counts and recent calls at `now` for `query`, leaving out `query.except`.
    fn read(&self, now: Instant, query: &CallQuery<'_>) -> (CallCounts, SessionCalls) {
        let mut counts = CallCounts::default();
        let mut by_effect = EffectCounts::default();
        let mut recent = Vec::new();
        let mut complete = true;
        for (at, call) in self.calls.iter().rev() {
            if query.except == Some(&call.attempt_id) {
                continue;
            }
            let age = now.saturating_duration_since(*at);
            let tally = |counts: &mut CallCounts| {
                counts.day += u64::from(age < DAY);
                counts.hour += u64::from(age < HOUR);
                counts.minute += u64::from(age < MINUTE);
            };
            if call.action == query.action {
                tally(&mut counts);
            }
            tally(by_effect.of_mut(call.effect));
            if recent.len() < query.recent {
                recent.push(call.clone());
            } else {
                complete = false;
            }
        }
        (counts, SessionCalls::new(by_effect, recent, complete))
    }
}

impl CallLog {
    fn window(&self, session: &str) -> Arc<Mutex<Window>> {
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
        Arc::clone(windows.entry(session.to_owned()).or_default())
    }

    /// Runs `decide` with the counts of `query` at `now`, under the session's lock, and
    /// counts the call (`query.record`) when the decision lets it through.
    fn decide_counting(
        &self,
        query: &CallQuery<'_>,
        now: Instant,
        decide: &mut Decide<'_>,
    ) -> PolicyDecision {
        let window = self.window(query.session);
        let mut window = window.lock().unwrap_or_else(PoisonError::into_inner);
        window.forget_before(now);
        let (counts, session_calls) = window.read(now, query);
        let decision = decide(counts, &session_calls);
        if let Some(attempt) = query.record
            && decision.verdict != PolicyVerdict::Deny
        {
            window.calls.push_back((now, recent_call(query, attempt)));
        }
        decision
    }

    /// Notes a call a shared store counted, for preflight.
    fn note(&self, query: &CallQuery<'_>, attempt: &AttemptId, now: Instant) {
        let window = self.window(query.session);
        let mut window = window.lock().unwrap_or_else(PoisonError::into_inner);
        window.forget_before(now);
        window.calls.push_back((now, recent_call(query, attempt)));
    }

    /// Writes how a counted call ended.
    fn settle(&self, session: &str, attempt: &AttemptId, status: Status) {
        let window = self.window(session);
        let mut window = window.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, call)) = window
            .calls
            .iter_mut()
            .rev()
            .find(|(_, call)| &call.attempt_id == attempt)
        {
            call.status = Some(status);
        }
    }

    /// The old shape, for this module's tests: counts of (session, action) only.
    #[cfg(test)]
    fn decide_and_count(
        &self,
        session: &str,
        action: &str,
        now: Instant,
        purpose: Purpose<'_>,
        decide: impl FnOnce(CallCounts) -> PolicyDecision + Send,
    ) -> PolicyDecision {
        let query = purpose.apply(CallQuery::new(
            session,
            action,
            crate::action::EffectClass::Observe,
            &[],
            0,
        ));
        let mut decide = Some(decide);
        self.decide_counting(&query, now, &mut |counts, _| {
            decide.take().map_or_else(
                || PolicyDecision::deny("decided twice"),
                |decide| decide(counts),
            )
        })
    }
}

/// The call `query` describes, let through as `attempt`.
fn recent_call(query: &CallQuery<'_>, attempt: &AttemptId) -> RecentCall {
    RecentCall::new(
        attempt.clone(),
        query.action,
        query.effect,
        query.objects.to_vec(),
        query.now_ms,
    )
}

/// The call's query: who, what, on what, now, for `purpose`.
fn query<'a>(
    counting: &CallCounting,
    session: &'a Session,
    validated: &'a Validated,
    purpose: Purpose<'a>,
) -> CallQuery<'a> {
    let spec = validated.entry().spec();
    purpose.apply(
        CallQuery::new(
            session.id().as_str(),
            &spec.name,
            spec.effect,
            validated.objects(),
            crate::clock::now_ms(),
        )
        .with_recent(counting.recent),
    )
}

/// Whether the policy is asked about this call: there is one, and the action is the host's
/// (sallyport's built-in `check_approval` reads the journal only).
fn asked<'p>(policy: Option<&'p dyn Policy>, validated: &Validated) -> Option<&'p dyn Policy> {
    let spec = validated.entry().spec();
    policy.filter(|_| spec.target.channel_name() != Some(crate::approval::check::CHANNEL))
}

/// Asks the policy, when there is one; without one every call goes on as before. With a
/// shared store the counts are the fleet's; if the store cannot be read, the call is
/// refused (`journal_unavailable`) and nothing is sent.
pub(super) async fn check(
    policy: Option<&dyn Policy>,
    shadow: Option<&ShadowPolicy>,
    counting: &CallCounting,
    scrubber: &Scrubber,
    session: &Session,
    validated: &Validated,
    purpose: Purpose<'_>,
) -> Result<PolicyCheck, Refusal> {
    let Some(policy) = asked(policy, validated) else {
        return Ok(PolicyCheck::default());
    };
    let Some(store) = &counting.shared else {
        return check_now(
            Some(policy),
            shadow,
            counting,
            scrubber,
            session,
            validated,
            purpose,
        );
    };
    let spec = validated.entry().spec();
    let arguments = visible_arguments(spec, validated.arguments());
    let query = query(counting, session, validated, purpose);
    let mut shadow_note = None;
    let mut decide = |calls: CallCounts, session_calls: &SessionCalls| {
        let request = PolicyRequest::new(session, spec, validated.objects(), &arguments, calls)
            .with_session_calls(session_calls);
        decide_both(policy, shadow, &request, &mut shadow_note)
    };
    let decision = match store.decide_and_count(&query, &mut decide).await {
        Ok(decision) => decision,
        Err(error) => {
            tracing::warn!(
                error = %error,
                action = %spec.name,
                "the policy's shared call counts could not be read; call refused"
            );
            return Err(Refusal::new(
                RefusalCode::JournalUnavailable,
                "the policy's call counts could not be read; nothing was sent; try again later",
            ));
        }
    };
    if let Some(attempt) = query.record
        && decision.verdict != PolicyVerdict::Deny
    {
        counting.local.note(&query, attempt, Instant::now());
    }
    conclude(policy, &decision, shadow_note, scrubber)
}

/// [`check`] without waiting: decided with this process's counts (for preflight, and for
/// every call when the counts are kept in memory).
pub(super) fn check_now(
    policy: Option<&dyn Policy>,
    shadow: Option<&ShadowPolicy>,
    counting: &CallCounting,
    scrubber: &Scrubber,
    session: &Session,
    validated: &Validated,
    purpose: Purpose<'_>,
) -> Result<PolicyCheck, Refusal> {
    let Some(policy) = asked(policy, validated) else {
        return Ok(PolicyCheck::default());
    };
    let spec = validated.entry().spec();
    let arguments = visible_arguments(spec, validated.arguments());
    let query = query(counting, session, validated, purpose);
    let mut shadow_note = None;
    let decision = counting.local.decide_counting(
        &query,
        Instant::now(),
        &mut |calls: CallCounts, session_calls: &SessionCalls| {
            let request = PolicyRequest::new(session, spec, validated.objects(), &arguments, calls)
                .with_session_calls(session_calls);
            decide_both(policy, shadow, &request, &mut shadow_note)
        },
    );
    conclude(policy, &decision, shadow_note, scrubber)
}

/// The enforced policy's decision on `request`, which the call goes on with; the candidate
/// in shadow, when there is one, decides the same request after it, into `shadow_note` (the
/// last decision wins should a store run the step again).
fn decide_both(
    policy: &dyn Policy,
    shadow: Option<&ShadowPolicy>,
    request: &PolicyRequest<'_>,
    shadow_note: &mut Option<ShadowNote>,
) -> PolicyDecision {
    let decision = policy.decide(request);
    if let Some(shadow) = shadow {
        *shadow_note = Some(shadow.decide(request, decision.verdict));
    }
    decision
}

/// Writes how a call the policy let through ended, where it was counted. A shared store
/// that cannot be written leaves the status unknown (logged): the call already happened.
pub(super) async fn settle(
    counting: &CallCounting,
    session: &str,
    attempt: &AttemptId,
    status: Status,
) {
    counting.local.settle(session, attempt, status);
    if let Some(store) = &counting.shared
        && let Err(error) = store.settle(session, attempt, status).await
    {
        tracing::warn!(
            error = %error,
            "a call's status could not be written to the shared call counts"
        );
    }
}

/// The policy's decision as the call goes on with it, or the refusal.
fn conclude(
    policy: &dyn Policy,
    decision: &PolicyDecision,
    shadow: Option<ShadowNote>,
    scrubber: &Scrubber,
) -> Result<PolicyCheck, Refusal> {
    let mut note = PolicyNote::new(policy.name(), decision);
    note.reason = note.reason.map(|r| scrubber.bounded(&r, MAX_REASON));
    let shadow = shadow.map(|mut shadow| {
        shadow.reason = shadow.reason.map(|r| scrubber.bounded(&r, MAX_REASON));
        shadow.failed = shadow.failed.map(|f| scrubber.bounded(&f, MAX_REASON));
        shadow.name = scrubber.bounded(&shadow.name, MAX_REASON);
        shadow
    });
    match decision.verdict {
        PolicyVerdict::Deny => {
            let reason = match &note.reason {
                Some(reason) => format!(
                    "policy `{}` denied this call: {reason}; nothing was sent",
                    note.name
                ),
                None => format!("policy `{}` denied this call; nothing was sent", note.name),
            };
            let refusal = Refusal::new(RefusalCode::PolicyDenied, reason).with_policy(note);
            Err(match shadow {
                Some(shadow) => refusal.with_shadow(shadow),
                None => refusal,
            })
        }
        PolicyVerdict::RequireConsent => Ok(PolicyCheck {
            note: Some(note),
            requires_consent: true,
            shadow,
        }),
        PolicyVerdict::Allow => Ok(PolicyCheck {
            note: Some(note),
            requires_consent: false,
            shadow,
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

    /// A candidate whose reason (or panic) quotes a secret the scrubber knows.
    #[derive(Debug)]
    struct Leaky {
        panics: bool,
    }

    impl Policy for Leaky {
        fn name(&self) -> &str {
            "leaky"
        }

        fn decide(&self, _: &PolicyRequest<'_>) -> PolicyDecision {
            assert!(!self.panics, "token sk_live_canary_123 rejected");
            PolicyDecision::deny("token sk_live_canary_123 is not allowed").with_rule("r")
        }
    }

    #[derive(Debug)]
    struct Verdict(PolicyDecision);

    impl Policy for Verdict {
        fn name(&self) -> &str {
            "enforced"
        }

        fn decide(&self, _: &PolicyRequest<'_>) -> PolicyDecision {
            self.0.clone()
        }
    }

    #[test]
    fn the_candidates_note_is_scrubbed_and_rides_on_the_check_or_the_refusal() {
        let spec = crate::action::ActionSpec::new("a", crate::action::EffectClass::Observe);
        let session = Session::new("s");
        let arguments = serde_json::Map::new();
        let request = PolicyRequest::new(&session, &spec, &[], &arguments, CallCounts::default());
        let scrubber = Scrubber::new(["sk_live_canary_123"]);
        let enforced = Verdict(PolicyDecision::allow());
        for panics in [false, true] {
            let shadow = ShadowPolicy::new(None, Arc::new(Leaky { panics }));
            let mut note = None;
            let decision = decide_both(&enforced, Some(&shadow), &request, &mut note);
            assert_eq!(decision, PolicyDecision::allow());
            let check = conclude(&enforced, &decision, note, &scrubber).expect("allowed");
            let shadow = check.shadow().expect("a shadow note");
            let json = serde_json::to_string(shadow).expect("json");
            assert!(!json.contains("sk_live_canary_123"), "{json}");
            assert_eq!(shadow.name, "leaky");
            assert_eq!(shadow.flip, !panics);
            assert_eq!(shadow.failed.is_some(), panics);
            assert_eq!(check.note().map(|n| n.decision), Some(PolicyVerdict::Allow));
        }
        // A deny by the enforced policy carries the candidate's note on its refusal.
        let deny = Verdict(PolicyDecision::deny("no"));
        let shadow = ShadowPolicy::new(
            Some("v2".into()),
            Arc::new(Verdict(PolicyDecision::allow())),
        );
        let mut note = None;
        let decision = decide_both(&deny, Some(&shadow), &request, &mut note);
        let refusal = conclude(&deny, &decision, note, &scrubber).expect_err("denied");
        let shadow = refusal.shadow.expect("shadow on the refusal");
        assert_eq!(
            (shadow.name.as_str(), shadow.decision, shadow.flip),
            ("v2", Some(PolicyVerdict::Allow), true)
        );
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

    #[test]
    fn session_counts_and_recent_calls_span_the_sessions_actions_newest_first() {
        use crate::action::{EffectClass, ScopedValue};
        let log = CallLog::default();
        let start = Instant::now();
        let it1 = [ScopedValue::new("item", "item_id", "it_1")];
        let it2 = [ScopedValue::new("item", "item_id", "it_2")];
        let calls = [
            ("get_item", EffectClass::Observe, &it1),
            ("publish_item", EffectClass::ExternalCommitment, &it1),
            ("mail_item", EffectClass::ExternalCommitment, &it2),
        ];
        let ids: Vec<AttemptId> = calls.iter().map(|_| AttemptId::generate()).collect();
        for (i, ((action, effect, objects), id)) in calls.iter().zip(&ids).enumerate() {
            let at = i as u64 * 1_000;
            let query = CallQuery::new("s", action, *effect, objects.as_slice(), at).recording(id);
            let now = start + Duration::from_secs(i as u64);
            log.decide_counting(&query, now, &mut |_, _| PolicyDecision::allow());
        }
        // Another session's call is not this session's.
        let other = AttemptId::generate();
        let query = CallQuery::new("t", "mail_item", EffectClass::ExternalCommitment, &[], 0)
            .recording(&other);
        log.decide_counting(&query, start, &mut |_, _| PolicyDecision::allow());
        log.settle("s", &ids[0], Status::Completed);

        let mut seen = None;
        let query = CallQuery::new(
            "s",
            "mail_item",
            EffectClass::ExternalCommitment,
            &[],
            9_000,
        )
        .with_recent(2);
        log.decide_counting(
            &query,
            start + Duration::from_secs(70),
            &mut |counts, calls| {
                seen = Some((counts, calls.clone()));
                PolicyDecision::allow()
            },
        );
        let (counts, calls) = seen.expect("decided");
        assert_eq!(counts, CallCounts::new(0, 1, 1), "this action's own counts");
        assert_eq!(
            calls.by_effect.external_commitment,
            CallCounts::new(0, 2, 2)
        );
        assert_eq!(calls.by_effect.observe, CallCounts::new(0, 1, 1));
        assert_eq!(calls.by_effect.reversible_change, CallCounts::default());
        let recent: Vec<(&str, &AttemptId, Option<Status>, u64)> = calls
            .recent
            .iter()
            .map(|c| (c.action.as_str(), &c.attempt_id, c.status, c.at_ms))
            .collect();
        assert_eq!(
            recent,
            [
                ("mail_item", &ids[2], None, 2_000),
                ("publish_item", &ids[1], None, 1_000),
            ]
        );
        assert!(!calls.complete, "the read was left off");
        assert_eq!(calls.recent[1].objects, it1);

        // With room for all three, the read is there, completed, and the list is complete.
        let mut seen = None;
        let query = CallQuery::new(
            "s",
            "delete_item",
            EffectClass::IrreversibleOrBroad,
            &it1,
            0,
        )
        .with_recent(16);
        log.decide_counting(&query, start + Duration::from_secs(70), &mut |_, calls| {
            seen = Some(calls.clone());
            PolicyDecision::allow()
        });
        let calls = seen.expect("decided");
        assert!(calls.complete);
        assert_eq!(calls.recent.len(), 3);
        let read = calls.find("get_item", "item", "it_1", Status::Completed);
        assert_eq!(read.map(|c| &c.attempt_id), Some(&ids[0]));
        assert_eq!(
            calls.find("get_item", "item", "it_2", Status::Completed),
            None
        );
        assert_eq!(
            calls.find("publish_item", "item", "it_1", Status::Completed),
            None
        );
    }

    #[test]
    fn concurrent_calls_of_different_actions_in_one_session_never_both_take_the_last_slot() {
        use crate::action::EffectClass;
        let log = Arc::new(CallLog::default());
        let start = Instant::now();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    let id = AttemptId::generate();
                    let action = if i % 2 == 0 { "publish" } else { "mail" };
                    let query =
                        CallQuery::new("s", action, EffectClass::ExternalCommitment, &[], 0)
                            .recording(&id);
                    log.decide_counting(&query, start, &mut |_, calls| {
                        if calls.by_effect.external_commitment.hour >= 3 {
                            PolicyDecision::deny("three")
                        } else {
                            PolicyDecision::allow()
                        }
                    })
                    .verdict
                })
            })
            .collect();
        let allowed = threads
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .filter(|v| *v == PolicyVerdict::Allow)
            .count();
        assert_eq!(allowed, 3);
    }
}
