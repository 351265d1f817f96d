//! Approvals that outlive the call: a parked request, decided anywhere, resumed once.
//!
//! With deferred consent ([`ConsentMode::Deferred`]) a call whose rule needs a human is not
//! held open while someone is asked. The executor stores an [`Approval`] in the journal — the
//! prepared request as the human will see it (real destination), its fingerprint, the
//! definition hash, the objects, the agent's note, the session and an expiry — and answers
//! at once: `pending` / `awaiting_approval`, with the approval id and a `next` naming the
//! built-in read-only action [`CHECK_APPROVAL`].
//!
//! A human decides from any front end (the CLI, a signed webhook, a web console, a consent
//! provider) through one path, [`decide`]: a compare-and-set on the stored approval, so of
//! two deliveries only one is recorded and the other is told what is already decided. An
//! approved call is then carried out by an executor that holds the action: it claims the
//! approval (a second compare-and-set with a lease and a fencing epoch), checks scope,
//! definition, vault, credential, preconditions and expiry again, prepares the request again
//! and compares it with the approved one, and writes the intent in the same transaction that
//! proves it still holds the claim. However many processes, webhook retries and consoles
//! race, one request is sent.
//!
//! ```text
//!  awaiting ──decide──▶ approved ──claim──▶ approved+claim ──intent──▶ executing ──▶ finished
//!     │                                         │  (re-checks fail) ─────────────────▶ finished (rejected)
//!     ├──decide──▶ denied
//!     └──expiry──▶ expired
//! ```
//!
//! Every step is audited in the journal's chain: the parked call's record
//! ([`Phase::Deferred`]), each decision and the expiry
//! ([`Phase::Decided`]), each with who decided and through
//! which channel ([`ApprovalNote`]), and the execution's own record with its receipt.
//!
//! ```no_run
//! # async fn demo(journal: &dyn sallyport_core::Journal) -> Result<(), Box<dyn std::error::Error>> {
//! use sallyport_core::approval::{self, ApprovalId, Decider, Verdict};
//! let id = ApprovalId::from_stored("apr_0193…");
//! let decided = approval::decide(journal, &id, Verdict::Approve, &Decider::new("alice", "cli"), None).await?;
//! println!("{}", decided.approval().state);
//! # Ok(()) }
//! ```

pub(crate) mod check;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use self::check::CheckApproval;
pub(crate) use self::check::{ApprovalsChannel, status_outcome};
use crate::action::{ConsentRule, DataClass, EffectClass, Externality, ScopedValue};
use crate::code::{ConsentOutcome, RefusalCode};
pub use crate::ids::ApprovalId;
use crate::ids::{AttemptId, ReceiptId, Status};
use crate::journal::{AuditEvent, Journal, JournalError, Phase};
use crate::outcome::ActionResult;

/// The name of the built-in read-only action every executor with deferred consent offers:
/// `check_approval {"approval_id": "apr_…"}`.
pub const CHECK_APPROVAL: &str = "check_approval";

/// How long an approval waits for a decision unless the host says otherwise: 24 hours.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(24 * 60 * 60);

/// Longest decider name and channel name kept.
const MAX_NAME: usize = 128;
/// Longest reason kept.
const MAX_REASON: usize = 500;

/// How the executor asks for consent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ConsentMode {
    /// Ask the consent provider and wait (up to the consent timeout) inside the call.
    #[default]
    Blocking,
    /// Park the call in the journal and answer `pending` / `awaiting_approval` at once; a
    /// configured consent provider is still asked, as one front end among others.
    Deferred,
}

/// Where an approval stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalState {
    /// Waiting for a human.
    Awaiting,
    /// A human approved; no executor has written the intent yet.
    Approved,
    /// A human denied.
    Denied,
    /// No one decided before the expiry.
    Expired,
    /// An executor wrote the intent and is sending (or crashed while sending: the attempt is
    /// then unresolved, like any other).
    Executing,
    /// The approved call reached its end; [`Approval::result`] holds it.
    Finished,
}

impl ApprovalState {
    /// Every state.
    pub const ALL: [Self; 6] = [
        Self::Awaiting,
        Self::Approved,
        Self::Denied,
        Self::Expired,
        Self::Executing,
        Self::Finished,
    ];

    /// The snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Awaiting => "awaiting",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Executing => "executing",
            Self::Finished => "finished",
        }
    }

    /// Parses a snake-case name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether nothing more will happen to the approval.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Denied | Self::Expired | Self::Finished)
    }
}

impl fmt::Display for ApprovalState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A human's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Send the request.
    Approve,
    /// Do not.
    Deny,
}

impl Verdict {
    /// The snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Deny => "deny",
        }
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
/// human escapes it first ([`crate::consent::escape`]), and marks [`Approval::note`] as the
/// agent's words.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
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

    /// The expiry as RFC 3339.
    pub fn expires_at(&self) -> String {
        rfc3339(self.expires_at_ms)
    }

    /// The creation time as RFC 3339.
    pub fn created_at(&self) -> String {
        rfc3339(self.created_at_ms)
    }

    /// The audit event of a step of this approval, on the parked call's attempt.
    pub(crate) fn event(
        &self,
        phase: Phase,
        status: Status,
        code: Option<RefusalCode>,
        consent: ConsentOutcome,
        note: ApprovalNote,
    ) -> AuditEvent {
        AuditEvent {
            receipt_id: ReceiptId::generate(),
            attempt_id: self.attempt_id.clone(),
            at: crate::clock::now(),
            session_id: self.session.id().as_str().to_owned(),
            action: self.action.clone(),
            definition_hash: Some(self.definition_hash.clone()),
            phase,
            status,
            origin: Some(crate::ids::Origin::Executor),
            code: code.map(Into::into),
            reason: None,
            objects: self.objects.clone(),
            note: self.note.clone(),
            request: Some(self.request.clone()),
            consent: Some(consent),
            divergences: Vec::new(),
            drift_decision: None,
            dispatches: 0,
            upstream_status: None,
            approval: Some(note),
            reconciled: None,
            policy: None,
        }
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

/// The steps of an approval the audit chain records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalStep {
    /// The call was parked.
    Requested,
    /// A human approved.
    Approved,
    /// A human denied.
    Denied,
    /// It expired undecided.
    Expired,
    /// The approved call was driven to its end (the record of the execution itself).
    Resumed,
}

/// Which approvals [`Journal::approvals`] lists. The default lists all, newest first.
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
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Transition {
    /// The change was made (and its audit record appended): the approval as it is now.
    Applied(Approval),
    /// The approval was not in the state the change needs: as it is.
    Unchanged(Approval),
    /// No approval has that id.
    NotFound,
}

/// What [`decide`] did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Decided {
    /// This decision was recorded.
    Recorded(Approval),
    /// Someone decided first (or it already expired, or ran): nothing changed; the approval
    /// as it stands.
    AlreadyDecided(Approval),
    /// The approval had expired undecided; the expiry is recorded now and nothing is sent.
    Expired(Approval),
}

impl Decided {
    /// The approval as it stands after the decision.
    pub fn approval(&self) -> &Approval {
        match self {
            Self::Recorded(a) | Self::AlreadyDecided(a) | Self::Expired(a) => a,
        }
    }
}

/// Why a decision could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// No approval has that id.
    #[error("no approval `{0}` in this journal")]
    NotFound(ApprovalId),
    /// The journal could not be read or written; nothing was decided.
    #[error("the approval store cannot be used")]
    Journal(#[from] JournalError),
}

/// Decides approval `id`: the one path every front end takes.
///
/// A compare-and-set: the decision is recorded only while the approval is awaiting and
/// before its expiry, with its audit record in the same transaction. A later or racing
/// delivery gets [`Decided::AlreadyDecided`] with what stands; an expired one records the
/// expiry. Deciding sends nothing: an executor holding the action carries an approved call
/// out ([`crate::Executor::decide`] does both).
///
/// # Errors
///
/// [`ApprovalError::NotFound`], or the journal's failure (nothing was decided).
pub async fn decide(
    journal: &dyn Journal,
    id: &ApprovalId,
    verdict: Verdict,
    decider: &Decider,
    reason: Option<&str>,
) -> Result<Decided, ApprovalError> {
    let decision = ApprovalDecision::new(verdict, decider.clone(), reason);
    let Some(current) = journal.approval(id).await? else {
        return Err(ApprovalError::NotFound(id.clone()));
    };
    if current.state != ApprovalState::Awaiting {
        return Ok(Decided::AlreadyDecided(current));
    }
    if current.is_expired_at(decision.at_ms) {
        return match expire(journal, &current, decision.at_ms).await? {
            Transition::Applied(a) => Ok(Decided::Expired(a)),
            Transition::Unchanged(a) => Ok(Decided::AlreadyDecided(a)),
            Transition::NotFound => Err(ApprovalError::NotFound(id.clone())),
        };
    }
    let mut note = ApprovalNote::new(id.clone(), step_of(verdict));
    note.by = Some(decider.by.clone());
    note.channel = Some(decider.channel.clone());
    let (status, code, consent) = match verdict {
        Verdict::Approve => (Status::Pending, None, ConsentOutcome::Approved),
        Verdict::Deny => (
            Status::Rejected,
            Some(RefusalCode::ConsentDenied),
            ConsentOutcome::Denied,
        ),
    };
    let mut event = current.event(Phase::Decided, status, code, consent, note);
    event.reason = decision.reason.clone();
    match journal.decide_approval(id, &decision, event).await? {
        Transition::Applied(a) => Ok(Decided::Recorded(a)),
        Transition::Unchanged(a) => Ok(Decided::AlreadyDecided(a)),
        Transition::NotFound => Err(ApprovalError::NotFound(id.clone())),
    }
}

/// Records that `approval` expired undecided (a compare-and-set, audited).
///
/// # Errors
///
/// The journal's failure.
pub async fn expire(
    journal: &dyn Journal,
    approval: &Approval,
    now_ms: u64,
) -> Result<Transition, JournalError> {
    let note = ApprovalNote::new(approval.approval_id.clone(), ApprovalStep::Expired);
    let mut event = approval.event(
        Phase::Decided,
        Status::Rejected,
        Some(RefusalCode::ApprovalExpired),
        ConsentOutcome::Timeout,
        note,
    );
    event.reason = Some("no one decided before the approval expired; nothing was sent".into());
    journal
        .expire_approval(&approval.approval_id, now_ms, event)
        .await
}

fn step_of(verdict: Verdict) -> ApprovalStep {
    match verdict {
        Verdict::Approve => ApprovalStep::Approved,
        Verdict::Deny => ApprovalStep::Denied,
    }
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

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Unix milliseconds as RFC 3339 (UTC).
pub fn rfc3339(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_only_three_are_final() {
        for state in ApprovalState::ALL {
            assert_eq!(ApprovalState::parse(state.as_str()), Some(state));
            let json = serde_json::to_value(state).expect("serialize");
            assert_eq!(json, Value::from(state.as_str()));
        }
        let finals: Vec<_> = ApprovalState::ALL
            .into_iter()
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

    #[test]
    fn rfc3339_of_a_known_instant() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_500), "1970-01-01T00:00:01.5Z");
    }
}
