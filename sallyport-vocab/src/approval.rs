//! The approval store's vocabulary, below the journal that stores it: approvals, their
//! states, decisions, claims and filters, and the rules by which an approval changes state.
//! `sallyport-kernel`'s `approval` module re-exports them and adds what works on a journal
//! (`approval::decide`, the expiry, `check_approval`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::action::{ConsentRule, DataClass, EffectClass, Externality, ScopedValue};
use crate::clock::{now_ms, rfc3339};
pub use crate::ids::ApprovalId;
use crate::ids::AttemptId;
use crate::outcome::ActionResult;
use crate::{MAX_REASON, string_enum};

/// Longest decider name and channel name kept.
const MAX_NAME: usize = 128;

string_enum! {
    /// How the executor asks for consent.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub enum ConsentMode {
        /// Ask the consent provider and wait (up to the consent timeout) inside the call.
        #[default]
        Blocking => "blocking",
        /// Park the call in the journal and answer `pending` / `awaiting_approval` at once; a
        /// configured consent provider is still asked, as one front end among others.
        Deferred => "deferred",
    }
}

string_enum! {
    /// Where an approval stands.
    ///
    /// Not `#[non_exhaustive]`: the approval status check and the journals must say what each
    /// state means, and a new one must be a compile error there rather than a wildcard arm.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ApprovalState {
        /// Waiting for a human.
        Awaiting => "awaiting",
        /// A human approved; no executor has written the intent yet.
        Approved => "approved",
        /// A human denied.
        Denied => "denied",
        /// No one decided before the expiry.
        Expired => "expired",
        /// An executor wrote the intent and is sending (or crashed while sending: the attempt is
        /// then unresolved, like any other).
        Executing => "executing",
        /// The approved call reached its end; [`Approval::result`] holds it.
        Finished => "finished",
    }
}

impl ApprovalState {
    /// Whether nothing more will happen to the approval.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Denied | Self::Expired | Self::Finished)
    }
}

string_enum! {
    /// A human's verdict.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Verdict {
        /// Send the request.
        Approve => "approve",
        /// Do not.
        Deny => "deny",
    }
}

/// Who decides, and through which front end (`cli`, `webhook`, `console`, `terminal`, …).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decider {
    /// The person or system that decided.
    pub by: String,
    /// The front end it came through.
    pub channel: String,
}

impl Decider {
    /// A decider; both names are cut to 128 characters and stripped of control characters.
    pub fn new(by: impl Into<String>, channel: impl Into<String>) -> Self {
        Self {
            by: clean(&by.into(), MAX_NAME),
            channel: clean(&channel.into(), MAX_NAME),
        }
    }
}

/// A recorded decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ApprovalDecision {
    /// Approve or deny.
    pub verdict: Verdict,
    /// Who, and through which front end.
    pub decider: Decider,
    /// The reason given (shown to the agent when denied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When, in Unix milliseconds.
    pub at_ms: u64,
}

impl ApprovalDecision {
    /// A decision made now; the reason is cut to 500 characters and stripped of control
    /// characters other than newlines.
    pub fn new(verdict: Verdict, decider: Decider, reason: Option<&str>) -> Self {
        Self {
            verdict,
            decider,
            reason: reason
                .map(|r| clean(r, MAX_REASON))
                .filter(|r| !r.is_empty()),
            at_ms: now_ms(),
        }
    }
}

/// An executor's claim on an approved call: who drives it to dispatch, until when, and the
/// fencing epoch that makes a claim taken over after its lease void for its old holder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The executor instance holding it.
    pub owner: String,
    /// Incremented by every claim; the intent is written only with the current epoch.
    pub epoch: u64,
    /// The lease ends then (Unix milliseconds); after it another executor may claim.
    pub until_ms: u64,
}

/// A parked call and where its approval stands, as the journal stores it.
///
/// Every text is as the executor scrubbed it; none is escaped. A front end showing it to a
/// human escapes it first (`sallyport_core::consent::escape`), and marks [`Approval::note`] as the
/// agent's words.
///
/// Not `#[non_exhaustive]`: the executor parks a call by building the whole value, so a field
/// added here must be a compile error where it is built, not a default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// The approval.
    pub approval_id: ApprovalId,
    /// The parked call's attempt (the execution gets one of its own).
    pub attempt_id: AttemptId,
    /// The action.
    pub action: String,
    /// The action's summary (its card).
    pub summary: String,
    /// The effect class.
    pub effect: EffectClass,
    /// Internal or external.
    pub externality: Externality,
    /// The consent rule that asked.
    pub rule: ConsentRule,
    /// The sensitivity of what the action reads or returns (`pii`, `financial`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_classes: Vec<DataClass>,
    /// The session the call was made in, with its scope then.
    pub session: crate::session::Session,
    /// The objects the call names.
    pub objects: Vec<ScopedValue>,
    /// The agent's stated reason (free text, the agent's words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The exact request as it will be sent, credential bound: method, real host, path.
    pub request: String,
    /// SHA-256 over the action, the definition hash and the prepared request (hex), as the
    /// intent of the execution will carry it.
    pub fingerprint: String,
    /// The action's definition hash when the call was made.
    pub definition_hash: String,
    /// What the definition check found when the call was made, for the approver
    /// (`matches the approved baseline`, `no definition guard configured`). The executor
    /// checks the definition again before sending; drift since then voids the approval.
    pub definition_status: String,
    /// The validated arguments (scrubbed), from which the request is prepared again.
    pub arguments: Value,
    /// When the call was parked (Unix milliseconds).
    pub created_at_ms: u64,
    /// When an undecided approval expires (Unix milliseconds).
    pub expires_at_ms: u64,
    /// Where it stands.
    pub state: ApprovalState,
    /// The decision, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<ApprovalDecision>,
    /// The executor driving an approved call, if one claimed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Claim>,
    /// The execution's attempt, once its intent is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<AttemptId>,
    /// The executed call's result, once finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ActionResult>,
}

impl Approval {
    /// Whether an undecided approval's expiry has passed at `now_ms`.
    pub fn is_expired_at(&self, now_ms: u64) -> bool {
        now_ms >= self.expires_at_ms
    }

    /// Applies a human's `decision` if the rules allow it: only an `awaiting` approval whose
    /// expiry has not passed at the decision's time is decided. Returns whether it changed.
    /// The one statement of the rule: every backend applies it to the row it loaded.
    pub fn decide(&mut self, decision: &ApprovalDecision) -> bool {
        if self.state != ApprovalState::Awaiting || self.is_expired_at(decision.at_ms) {
            return false;
        }
        self.state = match decision.verdict {
            Verdict::Approve => ApprovalState::Approved,
            Verdict::Deny => ApprovalState::Denied,
        };
        self.decision = Some(decision.clone());
        true
    }

    /// Marks an `awaiting` approval `expired` if its expiry has passed at `now_ms`. Returns
    /// whether it changed.
    pub fn expire(&mut self, now_ms: u64) -> bool {
        if self.state != ApprovalState::Awaiting || !self.is_expired_at(now_ms) {
            return false;
        }
        self.state = ApprovalState::Expired;
        true
    }

    /// Makes the approval as a journal parks it: `awaiting`, with no decision, claim,
    /// execution or result, whatever it came with. The one statement of the rule; every
    /// backend stores what this leaves.
    pub fn park(&mut self) {
        self.state = ApprovalState::Awaiting;
        self.decision = None;
        self.claim = None;
        self.execution = None;
        self.result = None;
    }

    /// Whether the approval is held under `claim`: its claim has the same owner and epoch
    /// (the epoch alone fences a holder whose lease was taken over).
    pub fn is_held_under(&self, claim: &Claim) -> bool {
        self.claim
            .as_ref()
            .is_some_and(|c| c.owner == claim.owner && c.epoch == claim.epoch)
    }

    /// Claims an `approved` approval for `owner` until `now_ms + lease_ms`, if no claim
    /// holds it at `now_ms` (none was taken, or its lease has ended). The new claim's epoch
    /// is one past the last claim's (1 for the first), which voids the last holder's
    /// writes. Returns whether it changed.
    pub fn take_claim(&mut self, owner: &str, now_ms: u64, lease_ms: u64) -> bool {
        let free = self.claim.as_ref().is_none_or(|c| c.until_ms <= now_ms);
        if self.state != ApprovalState::Approved || !free {
            return false;
        }
        let epoch = self.claim.as_ref().map_or(0, |c| c.epoch).saturating_add(1);
        self.claim = Some(Claim {
            owner: owner.to_owned(),
            epoch,
            until_ms: now_ms.saturating_add(lease_ms),
        });
        true
    }

    /// Moves an `approved` approval held under `claim` to `executing`, its execution being
    /// the attempt `execution` (whose intent the backend writes in the same transaction).
    /// Returns whether it changed; `false` means the claim was taken over (or the approval
    /// is no longer approved), and nothing may be written.
    pub fn begin_execution(&mut self, claim: &Claim, execution: &AttemptId) -> bool {
        if self.state != ApprovalState::Approved || !self.is_held_under(claim) {
            return false;
        }
        self.state = ApprovalState::Executing;
        self.execution = Some(execution.clone());
        true
    }

    /// Moves an `approved` or `executing` approval held under `claim` to `finished` with
    /// `result`. Returns whether it changed; `false` means the claim was taken over (or the
    /// approval already ended), and nothing may be written.
    pub fn settle(&mut self, claim: &Claim, result: &ActionResult) -> bool {
        let live = matches!(
            self.state,
            ApprovalState::Approved | ApprovalState::Executing
        );
        if !live || !self.is_held_under(claim) {
            return false;
        }
        self.state = ApprovalState::Finished;
        self.result = Some(result.clone());
        true
    }

    /// The expiry as RFC 3339.
    pub fn expires_at(&self) -> String {
        rfc3339(self.expires_at_ms)
    }

    /// The creation time as RFC 3339.
    pub fn created_at(&self) -> String {
        rfc3339(self.created_at_ms)
    }
}

/// What an audit record says about an approval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ApprovalNote {
    /// The approval.
    pub approval_id: ApprovalId,
    /// Which step this record is.
    pub step: ApprovalStep,
    /// Who decided (decisions only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Through which front end (decisions only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The expiry (requests only), RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

impl ApprovalNote {
    /// A note of `step` for `approval_id`.
    pub fn new(approval_id: ApprovalId, step: ApprovalStep) -> Self {
        Self {
            approval_id,
            step,
            by: None,
            channel: None,
            expires_at: None,
        }
    }
}

string_enum! {
    /// The steps of an approval the audit chain records.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[non_exhaustive]
    pub enum ApprovalStep {
        /// The call was parked.
        Requested => "requested",
        /// A human approved.
        Approved => "approved",
        /// A human denied.
        Denied => "denied",
        /// It expired undecided.
        Expired => "expired",
        /// The approved call was driven to its end (the record of the execution itself).
        Resumed => "resumed",
    }
}

/// Which approvals `ApprovalStore::approvals` lists. The default lists all, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalFilter {
    /// Only these states (all when empty).
    pub states: Vec<ApprovalState>,
    /// Only this session's.
    pub session_id: Option<String>,
    /// Only approvals of this fingerprint.
    pub fingerprint: Option<String>,
    /// At most this many.
    pub limit: Option<usize>,
}

impl ApprovalFilter {
    /// Every approval.
    pub fn all() -> Self {
        Self::default()
    }

    /// Approvals in one of `states`.
    pub fn states(states: impl IntoIterator<Item = ApprovalState>) -> Self {
        Self {
            states: states.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Only this session's.
    #[must_use]
    pub fn session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// Only this fingerprint's.
    #[must_use]
    pub fn fingerprint(mut self, fingerprint: impl Into<String>) -> Self {
        self.fingerprint = Some(fingerprint.into());
        self
    }

    /// At most `n`.
    #[must_use]
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Whether `approval` passes (for backends that filter in memory).
    pub fn matches(&self, approval: &Approval) -> bool {
        (self.states.is_empty() || self.states.contains(&approval.state))
            && self
                .session_id
                .as_deref()
                .is_none_or(|s| approval.session.id().as_str() == s)
            && self
                .fingerprint
                .as_deref()
                .is_none_or(|f| approval.fingerprint == f)
    }
}

/// The answer of a compare-and-set on an approval.
///
/// Not `#[non_exhaustive]`: every caller of a compare-and-set must handle each answer, and a
/// new one must be a compile error there rather than a wildcard arm.
#[derive(Clone, Debug, PartialEq)]
pub enum Transition {
    /// The change was made (and its audit record appended): the approval as it is now.
    Applied(Approval),
    /// The approval was not in the state the change needs: as it is.
    Unchanged(Approval),
    /// No approval has that id.
    NotFound,
}

/// `text` without control characters (newlines kept in reasons), at most `max` characters.
fn clean(text: &str, max: usize) -> String {
    text.chars()
        .filter(|c| !c.is_control() || (*c == '\n' && max == MAX_REASON))
        .take(max)
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_only_three_are_final() {
        for &state in ApprovalState::ALL {
            assert_eq!(ApprovalState::parse(state.as_str()), Some(state));
            let json = serde_json::to_value(state).expect("serialize");
            assert_eq!(json, Value::from(state.as_str()));
        }
        let finals: Vec<_> = ApprovalState::ALL
            .iter()
            .copied()
            .filter(|s| s.is_final())
            .collect();
        assert_eq!(
            finals,
            [
                ApprovalState::Denied,
                ApprovalState::Expired,
                ApprovalState::Finished
            ]
        );
    }

    /// An awaiting approval created at 1,000 ms that expires at 2,000 ms.
    fn awaiting() -> Approval {
        serde_json::from_value(serde_json::json!({
            "approval_id": ApprovalId::generate(),
            "attempt_id": AttemptId::generate(),
            "action": "pay_invoice",
            "summary": "Pay one invoice.",
            "effect": "external_commitment",
            "externality": "external",
            "rule": "per_call",
            "session": crate::session::Session::new("s1"),
            "objects": [],
            "request": "POST http://127.0.0.1:9/pay",
            "fingerprint": "f".repeat(64),
            "definition_hash": "d".repeat(64),
            "definition_status": "no definition guard configured",
            "arguments": {},
            "created_at_ms": 1_000,
            "expires_at_ms": 2_000,
            "state": "awaiting",
        }))
        .expect("an approval")
    }

    fn decision(verdict: Verdict, at_ms: u64) -> ApprovalDecision {
        let mut decision = ApprovalDecision::new(verdict, Decider::new("alice", "cli"), None);
        decision.at_ms = at_ms;
        decision
    }

    fn approved() -> Approval {
        let mut approval = awaiting();
        assert!(approval.decide(&decision(Verdict::Approve, 1_500)));
        approval
    }

    fn result(approval: &Approval) -> ActionResult {
        ActionResult::new(
            crate::ids::Status::Completed,
            &approval.action,
            AttemptId::generate(),
        )
    }

    #[test]
    fn parking_clears_everything_a_parked_call_cannot_have_yet() {
        let mut approval = approved();
        assert!(approval.take_claim("exec-1", 1_600, 100));
        approval.park();
        assert_eq!(approval.state, ApprovalState::Awaiting);
        assert_eq!(approval.decision, None);
        assert_eq!(approval.claim, None);
        assert_eq!(approval.execution, None);
        assert_eq!(approval.result, None);
    }

    #[test]
    fn only_an_awaiting_unexpired_approval_is_decided_and_only_a_due_one_expires() {
        let mut late = awaiting();
        assert!(!late.decide(&decision(Verdict::Approve, 2_000)));
        assert_eq!(late.state, ApprovalState::Awaiting);
        assert!(!late.expire(1_999));
        assert!(late.expire(2_000));
        assert_eq!(late.state, ApprovalState::Expired);
        assert!(!late.expire(3_000));

        let mut denied = awaiting();
        assert!(denied.decide(&decision(Verdict::Deny, 1_999)));
        assert_eq!(denied.state, ApprovalState::Denied);
        assert!(!denied.decide(&decision(Verdict::Approve, 1_999)));
        assert!(!denied.expire(2_000));
        assert_eq!(denied.state, ApprovalState::Denied);
    }

    #[test]
    fn a_claim_needs_an_approved_approval_and_a_free_or_lapsed_lease() {
        let mut waiting = awaiting();
        assert!(!waiting.take_claim("exec-1", 1_500, 100));
        assert_eq!(waiting.claim, None);

        let mut approval = approved();
        assert!(approval.take_claim("exec-1", 1_600, 100));
        let first = approval.claim.clone().expect("claimed");
        assert_eq!(
            (first.owner.as_str(), first.epoch, first.until_ms),
            ("exec-1", 1, 1_700)
        );
        // Held until the lease ends: another executor is refused before, served at its end.
        assert!(!approval.take_claim("exec-2", 1_699, 100));
        assert_eq!(approval.claim.as_ref(), Some(&first));
        assert!(approval.take_claim("exec-2", 1_700, 50));
        let second = approval.claim.clone().expect("claimed");
        assert_eq!(
            (second.owner.as_str(), second.epoch, second.until_ms),
            ("exec-2", 2, 1_750)
        );
        assert!(approval.is_held_under(&second));
        assert!(!approval.is_held_under(&first));
    }

    #[test]
    fn only_the_current_holder_begins_and_settles() {
        let mut approval = approved();
        assert!(approval.take_claim("exec-1", 1_600, 100));
        let old = approval.claim.clone().expect("claimed");
        assert!(approval.take_claim("exec-2", 1_800, 100));
        let current = approval.claim.clone().expect("claimed");
        let execution = AttemptId::generate();

        assert!(!approval.begin_execution(&old, &execution));
        assert_eq!(approval.state, ApprovalState::Approved);
        assert!(approval.begin_execution(&current, &execution));
        assert_eq!(approval.state, ApprovalState::Executing);
        assert_eq!(approval.execution.as_ref(), Some(&execution));
        assert!(!approval.begin_execution(&current, &execution));

        let done = result(&approval);
        assert!(!approval.settle(&old, &done));
        assert_eq!(approval.state, ApprovalState::Executing);
        assert!(approval.settle(&current, &done));
        assert_eq!(approval.state, ApprovalState::Finished);
        assert_eq!(approval.result.as_ref(), Some(&done));
        assert!(!approval.settle(&current, &done));
    }

    #[test]
    fn an_approved_call_refused_before_its_intent_settles_without_executing() {
        let mut approval = approved();
        assert!(approval.take_claim("exec-1", 1_600, 100));
        let claim = approval.claim.clone().expect("claimed");
        let done = result(&approval);
        assert!(approval.settle(&claim, &done));
        assert_eq!(approval.state, ApprovalState::Finished);
        assert_eq!(approval.execution, None);
        // A finished approval is never claimed again.
        assert!(!approval.take_claim("exec-2", 5_000, 100));
    }

    #[test]
    fn decider_names_and_reasons_lose_control_characters_and_length() {
        let d = Decider::new("ali\u{1b}[2Jce", "c\nli");
        assert_eq!(d.by, "ali[2Jce");
        assert_eq!(d.channel, "cli");
        let long = "x".repeat(1000);
        let decision = ApprovalDecision::new(Verdict::Deny, d, Some(&format!("no\n{long}")));
        let reason = decision.reason.expect("reason");
        assert!(reason.starts_with("no\nx"));
        assert_eq!(reason.chars().count(), MAX_REASON);
        let empty = ApprovalDecision::new(Verdict::Deny, Decider::new("a", "b"), Some(" \u{7} "));
        assert_eq!(empty.reason, None);
    }
}
