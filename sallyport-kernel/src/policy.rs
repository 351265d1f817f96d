//! The host's policy, consulted at the authorize stage (4): who may call which action, on
//! what, how often, and which calls need a human although the action's rule says none.
//!
//! A [`Policy`] sees a [`PolicyRequest`] for every call that passed the scope check and the
//! channel's static checks: the session (its id and the attributes the host set with
//! [`Session::with_attribute`]), the action and its card (effect class, data classes,
//! externality, consent rule), the scoped objects the call names, the arguments the author
//! marked `#[policy]`, and how often this session called this action lately
//! ([`CallCounts`]). It answers with a [`PolicyDecision`]:
//!
//! | verdict | what the executor does |
//! |---|---|
//! | [`PolicyVerdict::Allow`] | the call goes on; the action's consent rule applies |
//! | [`PolicyVerdict::Deny`] | `rejected` / `policy_denied` with the policy's reason; nothing is sent; one audit record names the policy |
//! | [`PolicyVerdict::RequireConsent`] | the call goes on, and stage 8 asks a human for this one call whatever the action's rule (a session grant does not cover it) |
//!
//! Every call's audit record names the policy's decision (`policy: {name, decision, reason,
//! rules}`) when a policy is configured. A policy runs synchronously inside the pipeline and
//! must be fast: evaluate in memory (Cedar, a table); a remote decision point belongs behind
//! a cache the policy reads.
//!
//! ```
//! use sallyport_core::policy::{Policy, PolicyDecision, PolicyRequest};
//! use sallyport_core::EffectClass;
//!
//! /// Interns may read, nothing else; external commitments always need a human.
//! #[derive(Debug)]
//! struct InternsRead;
//!
//! impl Policy for InternsRead {
//!     fn name(&self) -> &str {
//!         "interns-read"
//!     }
//!
//!     fn decide(&self, request: &PolicyRequest<'_>) -> PolicyDecision {
//!         let intern = request.session.attribute("role") == Some("intern");
//!         match request.effect {
//!             EffectClass::Observe => PolicyDecision::allow(),
//!             _ if intern => PolicyDecision::deny("interns may only read"),
//!             EffectClass::ExternalCommitment => {
//!                 PolicyDecision::require_consent("external commitments need a human")
//!             }
//!             _ => PolicyDecision::allow(),
//!         }
//!     }
//! }
//! ```
//!
//! # Call counts
//!
//! [`PolicyRequest::calls`] counts the *earlier* calls of this action in this session that
//! the policy let through (allowed or sent to consent) within the last minute, hour and day,
//! whatever happened to them afterwards: a call a human then denied still counts, so a rate
//! limit fails closed. Calls the policy denied do not count (an agent that keeps trying does
//! not lock itself out for longer). A parked call resumed after its approval is decided again
//! (a policy changed since can still stop it) and is not counted twice.
//!
//! # The session's recent calls
//!
//! [`PolicyRequest::session_calls`] holds what the session did lately, whatever the action
//! ([`SessionCalls`]): how many calls of each effect class the policy let through in the last
//! minute, hour and day ([`EffectCounts`]: "at most 3 external commitments per hour"), and
//! the most recent of those calls themselves, newest first ([`RecentCall`]: action, objects,
//! effect, status, time: "an object may be deleted only after it was read in this
//! session"). The list is bounded (16 calls by default,
//! [`ExecutorBuilder::policy_recent_calls`](crate::executor::ExecutorBuilder::policy_recent_calls));
//! [`SessionCalls::complete`] says whether it holds every such call of the last day, so a
//! rule that needs an older call can deny rather than guess. A call's status is filled in
//! when the call ends (`None` until then, and for a call whose future was dropped).
//!
//! # Where the counts live
//!
//! Reading the counts, the policy's decision and counting the call let through are one step:
//! two concurrent calls of one session never both see the last free slot. Where that step
//! happens is a [`calls::CallStore`]:
//!
//! * **Shared by the fleet** when the journal offers one ([`Journal::call_store`]): the
//!   SQLite journal (every process on the file) and the PostgreSQL journal (every process on
//!   the database) keep the counts in a table of their own, so a limit of 5 an hour is 5 an
//!   hour across all the executors on that journal. The executor builder picks it up with the
//!   journal; [`ExecutorBuilder::local_call_counts`] opts out.
//! * **In memory, per process** otherwise (the in-memory journal, a journal that offers no
//!   store, or a host that opted out): the counts start at zero when the process starts, and
//!   executors in other processes keep their own.
//!
//! [`Executor::preflight`](crate::Executor::preflight) decides without touching the journal:
//! it sees the calls this process counted (all of them with in-memory counts; with a shared
//! store, the ones this process let through), and counts nothing.
//!
//! # A policy in shadow
//!
//! A candidate policy (a [`CedarPolicy`](https://docs.rs/sallyport-cedar) or any [`Policy`])
//! can run beside the enforced one before it is trusted with calls
//! ([`ExecutorBuilder::shadow_policy`]). Whenever the enforced policy is asked about a call,
//! the candidate is asked too, on the same [`PolicyRequest`]: the same arguments, the same
//! [`CallCounts`] and [`SessionCalls`] (it never counts anything itself: the counts are the
//! enforced policy's, so a candidate rate limit sees what the enforced policy let through).
//! Its decision never changes the call. The call's audit record carries it as `shadow:
//! {name, decision, reason, rules, flip}` ([`ShadowNote`]), `flip: true` when its verdict
//! differs from the enforced one; `sallyport policy shadow-report` sums the flips by rule,
//! action and session over a time range. A candidate that panics is recorded as failed
//! (`failed: "panicked: …"`, no decision, no flip) and the call goes on as the enforced
//! policy decided. The candidate's reason is scrubbed like the enforced one's. Records
//! without a candidate keep their JSON (and hashes) as they were.
//!
//! [`Journal::call_store`]: crate::journal::Journal::call_store
//! [`ExecutorBuilder::shadow_policy`]: crate::executor::ExecutorBuilder::shadow_policy
//! [`ExecutorBuilder::local_call_counts`]: crate::executor::ExecutorBuilder::local_call_counts

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::action::{ActionSpec, ConsentRule, DataClass, EffectClass, Externality, ScopedValue};
use crate::outcome::Status;
use crate::session::Session;
use sallyport_vocab::journal::AttemptId;

pub mod calls;

pub use sallyport_vocab::policy::{PolicyDecision, PolicyNote, PolicyVerdict, ShadowNote};

/// The host's policy: decides every call that passed the scope check. See the
/// [module](self) docs.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sallyport policy",
    label = "this type does not implement `Policy`",
    note = "implement `sallyport_core::policy::Policy` (`name` and `decide`), or use `sallyport_cedar::CedarPolicy`"
)]
pub trait Policy: fmt::Debug + Send + Sync + 'static {
    /// The policy's name, as the audit record names it (`invoices.cedar`, `interns-read`).
    fn name(&self) -> &str;

    /// Decides one call. Called once per call, synchronously, before consent; it must not
    /// block. A policy that cannot decide (an evaluation error, a state it cannot read)
    /// should deny: the executor sends nothing then.
    fn decide(&self, request: &PolicyRequest<'_>) -> PolicyDecision;
}

impl<P: Policy + ?Sized> Policy for Arc<P> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn decide(&self, request: &PolicyRequest<'_>) -> PolicyDecision {
        (**self).decide(request)
    }
}

/// A candidate policy run in shadow beside the enforced one, under the name its records
/// carry (see the [module](self) docs).
#[derive(Clone, Debug)]
pub(crate) struct ShadowPolicy {
    name: String,
    policy: Arc<dyn Policy>,
}

impl ShadowPolicy {
    /// `policy` in shadow, named `name` (its own name when `None`).
    pub(crate) fn new(name: Option<String>, policy: Arc<dyn Policy>) -> Self {
        let name = name.unwrap_or_else(|| policy.name().to_owned());
        Self { name, policy }
    }

    /// The name its records carry.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// What the candidate decides about `request`, beside the enforced verdict `enforced`;
    /// a candidate that panics is caught and recorded as failed (its reason and the panic's
    /// message are scrubbed by the caller).
    pub(crate) fn decide(
        &self,
        request: &PolicyRequest<'_>,
        enforced: PolicyVerdict,
    ) -> ShadowNote {
        // The candidate sees the request only through `&`, and whatever it left half-done
        // when it panicked is its own state, never read again by the executor.
        let decided =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.policy.decide(request)));
        match decided {
            Ok(decision) => ShadowNote::decided(&self.name, &decision, enforced),
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned());
                let why = match message {
                    Some(message) => format!("panicked: {message}"),
                    None => "panicked".to_owned(),
                };
                ShadowNote::failed(&self.name, why)
            }
        }
    }
}

/// What a policy sees of one call.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PolicyRequest<'a> {
    /// The session: its id, requester and the attributes the host set.
    pub session: &'a Session,
    /// The action's name.
    pub action: &'a str,
    /// The objects the call names (its `#[scope(kind)]` fields), each already inside the
    /// session's scope.
    pub objects: &'a [ScopedValue],
    /// The action's effect class.
    pub effect: EffectClass,
    /// The data classes the action reads or returns.
    pub data_classes: &'a [DataClass],
    /// Whether the action's effect is visible outside the organisation.
    pub externality: Externality,
    /// The action's own consent rule.
    pub consent: ConsentRule,
    /// The arguments the author marked `#[policy]`, by the name the agent sends, as the
    /// payload check let them through. A field the call left out is absent.
    pub arguments: &'a Map<String, Value>,
    /// How often this session called this action lately.
    pub calls: CallCounts,
    /// What this session did lately, whatever the action: counts by effect class and the
    /// most recent calls the policy let through (see the [module](self) docs).
    pub session_calls: &'a SessionCalls,
}

impl<'a> PolicyRequest<'a> {
    /// A request for a call of `spec` in `session`, naming `objects`, with the policy-visible
    /// `arguments` and the `calls` counts. The executor makes these; a host makes one to
    /// test its policy.
    pub fn new(
        session: &'a Session,
        spec: &'a ActionSpec,
        objects: &'a [ScopedValue],
        arguments: &'a Map<String, Value>,
        calls: CallCounts,
    ) -> Self {
        Self {
            session,
            action: &spec.name,
            objects,
            effect: spec.effect,
            data_classes: &spec.data_classes,
            externality: spec.externality,
            consent: spec.consent,
            arguments,
            calls,
            session_calls: SessionCalls::none(),
        }
    }

    /// The session's recent calls (none by default).
    #[must_use]
    pub fn with_session_calls(mut self, session_calls: &'a SessionCalls) -> Self {
        self.session_calls = session_calls;
        self
    }
}

/// How many earlier calls of one action one session made that the policy let through,
/// within the last minute, hour and day (see the [module](self) docs for where they are
/// kept).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CallCounts {
    /// Within the last 60 seconds.
    pub minute: u64,
    /// Within the last 3,600 seconds.
    pub hour: u64,
    /// Within the last 86,400 seconds.
    pub day: u64,
}

impl CallCounts {
    /// Counts for the last minute, hour and day.
    pub const fn new(minute: u64, hour: u64, day: u64) -> Self {
        Self { minute, hour, day }
    }

    /// Counts one call made `age_ms` milliseconds ago (one day or older is not counted).
    pub fn count(&mut self, age_ms: u64) {
        self.day += u64::from(age_ms < DAY_MS);
        self.hour += u64::from(age_ms < HOUR_MS);
        self.minute += u64::from(age_ms < MINUTE_MS);
    }
}

/// A minute, in milliseconds.
pub(crate) const MINUTE_MS: u64 = 60_000;
/// An hour, in milliseconds.
pub(crate) const HOUR_MS: u64 = 3_600_000;
/// A day, in milliseconds: how long a call is remembered.
pub(crate) const DAY_MS: u64 = 86_400_000;

/// How many calls of each effect class one session made, whatever the action, that the
/// policy let through, within the last minute, hour and day.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EffectCounts {
    /// Calls of `observe` actions.
    pub observe: CallCounts,
    /// Calls of `reversible_change` actions.
    pub reversible_change: CallCounts,
    /// Calls of `external_commitment` actions.
    pub external_commitment: CallCounts,
    /// Calls of `irreversible_or_broad` actions.
    pub irreversible_or_broad: CallCounts,
}

impl EffectCounts {
    /// No calls.
    pub const fn new() -> Self {
        Self {
            observe: CallCounts::new(0, 0, 0),
            reversible_change: CallCounts::new(0, 0, 0),
            external_commitment: CallCounts::new(0, 0, 0),
            irreversible_or_broad: CallCounts::new(0, 0, 0),
        }
    }

    /// The counts of one effect class.
    pub fn of(&self, effect: EffectClass) -> CallCounts {
        match effect {
            EffectClass::Observe => self.observe,
            EffectClass::ReversibleChange => self.reversible_change,
            EffectClass::ExternalCommitment => self.external_commitment,
            EffectClass::IrreversibleOrBroad => self.irreversible_or_broad,
        }
    }

    /// The counts of one effect class, to add to.
    pub fn of_mut(&mut self, effect: EffectClass) -> &mut CallCounts {
        match effect {
            EffectClass::Observe => &mut self.observe,
            EffectClass::ReversibleChange => &mut self.reversible_change,
            EffectClass::ExternalCommitment => &mut self.external_commitment,
            EffectClass::IrreversibleOrBroad => &mut self.irreversible_or_broad,
        }
    }
}

/// One earlier call of the session that the policy let through.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecentCall {
    /// The call's attempt.
    pub attempt_id: AttemptId,
    /// The action called.
    pub action: String,
    /// The objects the call named (its `#[scope(kind)]` fields).
    pub objects: Vec<ScopedValue>,
    /// The action's effect class.
    pub effect: EffectClass,
    /// How the call ended; `None` while it has not (or its end was never known: its future
    /// was dropped, or the store could not be written when it ended).
    pub status: Option<Status>,
    /// When the policy let it through, in Unix milliseconds.
    pub at_ms: u64,
}

impl RecentCall {
    /// A call of `action` with `effect`, let through at `at_ms`, naming `objects`, whose end
    /// is not known yet.
    pub fn new(
        attempt_id: AttemptId,
        action: impl Into<String>,
        effect: EffectClass,
        objects: Vec<ScopedValue>,
        at_ms: u64,
    ) -> Self {
        Self {
            attempt_id,
            action: action.into(),
            objects,
            effect,
            status: None,
            at_ms,
        }
    }

    /// The call, ended with `status`.
    #[must_use]
    pub fn with_status(mut self, status: Status) -> Self {
        self.status = Some(status);
        self
    }

    /// Whether the call named the object `value` of scope kind `kind`.
    pub fn names(&self, kind: &str, value: &str) -> bool {
        self.objects
            .iter()
            .any(|object| object.kind == kind && object.value == value)
    }
}

/// What one session did lately, whatever the action (see the [module](self) docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionCalls {
    /// The session's calls the policy let through in the last minute, hour and day, by
    /// effect class.
    pub by_effect: EffectCounts,
    /// The most recent of those calls within the last day, newest first, at most the
    /// executor's bound.
    pub recent: Vec<RecentCall>,
    /// Whether `recent` holds every call of the session the policy let through in the last
    /// day (`false`: older ones were left off).
    pub complete: bool,
}

/// The session calls of a request that was given none.
static NO_SESSION_CALLS: SessionCalls = SessionCalls {
    by_effect: EffectCounts::new(),
    recent: Vec::new(),
    complete: true,
};

impl SessionCalls {
    /// Calls counted by effect, and the most recent ones (`complete` when they are all the
    /// session made in the last day).
    pub fn new(by_effect: EffectCounts, recent: Vec<RecentCall>, complete: bool) -> Self {
        Self {
            by_effect,
            recent,
            complete,
        }
    }

    /// No calls at all.
    pub fn none() -> &'static Self {
        &NO_SESSION_CALLS
    }

    /// The most recent call (within the list) of `action` that named the object `value` of
    /// scope kind `kind` and ended with `status`.
    pub fn find(
        &self,
        action: &str,
        kind: &str,
        value: &str,
        status: Status,
    ) -> Option<&RecentCall> {
        self.recent.iter().find(|call| {
            call.action == action && call.status == Some(status) && call.names(kind, value)
        })
    }
}

/// The policy-visible arguments of a call: the fields of `arguments` that `spec` marks
/// `#[policy]`, in the order the card lists them.
pub fn visible_arguments(spec: &ActionSpec, arguments: &Value) -> Map<String, Value> {
    let mut visible = Map::new();
    if let Value::Object(all) = arguments {
        for field in &spec.policy_fields {
            if let Some(value) = all.get(field.as_ref()) {
                visible.insert(field.to_string(), value.clone());
            }
        }
    }
    visible
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct ByAmount;

    impl Policy for ByAmount {
        fn name(&self) -> &str {
            "by-amount"
        }

        fn decide(&self, request: &PolicyRequest<'_>) -> PolicyDecision {
            let amount = request.arguments.get("amount").and_then(Value::as_i64);
            match amount {
                Some(a) if a > 10_000 => {
                    PolicyDecision::deny("amounts over 10000 need finance").with_rule("cap")
                }
                Some(a) if a > 1_000 => PolicyDecision::require_consent("large amount"),
                _ if request.calls.hour >= 5 => PolicyDecision::deny("five an hour"),
                _ => PolicyDecision::allow(),
            }
        }
    }

    fn spec() -> ActionSpec {
        ActionSpec::new("create_invoice", EffectClass::ReversibleChange)
            .with_policy_field("amount")
            .with_policy_field("currency")
    }

    #[test]
    fn only_the_fields_marked_policy_visible_reach_the_policy() {
        let spec = spec();
        let arguments = serde_json::json!({"amount": 5, "customer_id": "cus_1", "currency": "EUR"});
        let visible = visible_arguments(&spec, &arguments);
        assert_eq!(
            Value::Object(visible),
            serde_json::json!({"amount": 5, "currency": "EUR"})
        );
        let absent = visible_arguments(&spec, &serde_json::json!({"customer_id": "cus_1"}));
        assert!(absent.is_empty());
    }

    #[test]
    fn a_hand_written_policy_decides_from_arguments_and_counts() {
        let spec = spec();
        let session = Session::new("chat-1").with_attribute("team", "billing");
        let decide = |amount: i64, hour: u64| {
            let arguments = visible_arguments(&spec, &serde_json::json!({ "amount": amount }));
            let request = PolicyRequest::new(
                &session,
                &spec,
                &[],
                &arguments,
                CallCounts::new(0, hour, hour),
            );
            assert_eq!(request.action, "create_invoice");
            assert_eq!(request.session.attribute("team"), Some("billing"));
            ByAmount.decide(&request)
        };
        assert_eq!(decide(10, 0), PolicyDecision::allow());
        assert_eq!(
            decide(20_000, 0),
            PolicyDecision::deny("amounts over 10000 need finance").with_rule("cap")
        );
        assert_eq!(decide(2_000, 0).verdict, PolicyVerdict::RequireConsent);
        assert_eq!(decide(10, 5), PolicyDecision::deny("five an hour"));
    }

    #[test]
    fn a_policy_note_serializes_to_the_audit_shape_and_back() {
        let decision = PolicyDecision::deny("over the cap").with_rule("cap");
        let note = PolicyNote::new("invoices.cedar", &decision);
        let json = serde_json::to_string(&note).unwrap();
        assert_eq!(
            json,
            r#"{"name":"invoices.cedar","decision":"deny","reason":"over the cap","rules":["cap"]}"#
        );
        assert_eq!(serde_json::from_str::<PolicyNote>(&json).unwrap(), note);
        let allow = PolicyNote::new("p", &PolicyDecision::allow());
        assert_eq!(
            serde_json::to_string(&allow).unwrap(),
            r#"{"name":"p","decision":"allow"}"#
        );
        for verdict in [
            PolicyVerdict::Allow,
            PolicyVerdict::Deny,
            PolicyVerdict::RequireConsent,
        ] {
            assert_eq!(
                serde_json::to_string(&verdict).unwrap(),
                format!("\"{}\"", verdict.as_str())
            );
        }
    }
}
