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
    /// The one statement of the rule for backends that keep approvals as values (the SQLite
    /// journal states the same rule in its SQL).
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
