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

mod remembered;
pub use remembered::{
    CoveredCall, MAX_REMEMBER, NotRememberable, RememberChoice, RememberScope, RememberedApproval,
    RememberedId, Revocation, Revoked,
};

/// Longest decider name and channel name kept.
const MAX_NAME: usize = 128;

/// Most groups kept of one approver.
const MAX_GROUPS: usize = 64;

/// The expiry of an approval that never expires (Unix milliseconds).
pub const NEVER_EXPIRES: u64 = u64::MAX;

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

/// The approver: who decides, and through which front end (`cli`, `webhook`, `console`,
/// `terminal`, …).
///
/// [`Decider::by`] is the approver's subject (an OS user, an OpenID subject, the name a signed
/// webhook's caller gives); approvals of a quorum count once per subject. The optional parts
/// (display name, groups, key id, signature) are recorded only when a front end knows them, so
/// a decision that names none serializes as it always did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Decider {
    /// The person or system that decided (the approver's subject).
    pub by: String,
    /// The front end it came through.
    pub channel: String,
    /// The approver's display name, when the front end knows one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The approver's groups (a decision policy reads them), when the front end knows them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// The id of the key that authenticated the decision (a signed webhook's credential).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// The approver's own signature over the decision ([`Decider::statement`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<DecisionSignature>,
}

impl Decider {
    /// A decider; both names are cut to 128 characters and stripped of control characters.
    pub fn new(by: impl Into<String>, channel: impl Into<String>) -> Self {
        Self {
            by: clean(&by.into(), MAX_NAME),
            channel: clean(&channel.into(), MAX_NAME),
            name: None,
            groups: Vec::new(),
            key_id: None,
            signature: None,
        }
    }

    /// With the approver's display name (cut and cleaned as the subject is; an empty one is
    /// dropped).
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(clean(&name.into(), MAX_NAME)).filter(|n| !n.is_empty());
        self
    }

    /// With the approver's groups (each cut and cleaned, empty ones dropped, at most 64,
    /// sorted and without repeats).
    #[must_use]
    pub fn with_groups<I, S>(mut self, groups: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut groups: Vec<String> = groups
            .into_iter()
            .map(|g| clean(&g.into(), MAX_NAME))
            .filter(|g| !g.is_empty())
            .take(MAX_GROUPS)
            .collect();
        groups.sort();
        groups.dedup();
        self.groups = groups;
        self
    }

    /// With the id of the key that authenticated the decision.
    #[must_use]
    pub fn with_key_id(mut self, key_id: impl Into<String>) -> Self {
        self.key_id = Some(clean(&key_id.into(), MAX_NAME)).filter(|k| !k.is_empty());
        self
    }

    /// With the approver's signature over [`Decider::statement`].
    #[must_use]
    pub fn with_signature(mut self, signature: DecisionSignature) -> Self {
        self.signature = Some(signature);
        self
    }

    /// The bytes an approver signs to decide `verdict` on `approval`: a versioned line naming
    /// the approval, the exact request's fingerprint, the definition hash, the verdict, this
    /// approver's subject and front end. A signature over it proves who decided what on which
    /// request, and cannot be moved to another approval or request.
    pub fn statement(&self, approval: &Approval, verdict: Verdict) -> Vec<u8> {
        format!(
            "sallyport-decision-v1\n{}\n{}\n{}\n{}\n{}\n{}",
            approval.approval_id.as_str(),
            approval.fingerprint,
            approval.definition_hash,
            verdict.as_str(),
            self.by,
            self.channel,
        )
        .into_bytes()
    }
}

/// An approver's Ed25519 signature over a decision ([`Decider::statement`]), with the public
/// key that verifies it; both lower-case hex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DecisionSignature {
    /// The Ed25519 public key, 32 bytes as hex.
    pub public_key: String,
    /// The signature, 64 bytes as hex.
    pub signature: String,
}

impl DecisionSignature {
    /// A signature by `public_key` (both hex; kept as given, checked when verified).
    pub fn new(public_key: impl Into<String>, signature: impl Into<String>) -> Self {
        Self {
            public_key: clean(&public_key.into(), 64),
            signature: clean(&signature.into(), 128),
        }
    }
}

string_enum! {
    /// Why a decision was refused without changing anything.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[non_exhaustive]
    pub enum DecisionRefusal {
        /// The decision policy gives this approver no authority over this approval.
        NoAuthority => "no_authority",
        /// The decision's signature does not verify.
        BadSignature => "bad_signature",
        /// The approver is the principal that requested the call (separation of duties).
        SelfApproval => "self_approval",
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
    /// The compare-and-set's expectation: how many approvals the decider saw counted. An
    /// approval is applied only if the stored approval still counts that many, so two
    /// approvers racing for the last place of a quorum cannot both be told they completed
    /// it. Never stored (a decision in the journal has no expectation).
    #[serde(skip)]
    pub counted_before: Option<u32>,
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
            counted_before: None,
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
    /// When an undecided approval expires (Unix milliseconds; [`NEVER_EXPIRES`] for never).
    pub expires_at_ms: u64,
    /// How many distinct approvers must approve before the call is sent (1 unless the host
    /// asked for a quorum; then absent from the JSON, as before quorums existed).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub required_approvals: u32,
    /// The approvals counted so far towards a quorum (only when more than one is required),
    /// one per distinct approver, in the order they landed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalDecision>,
    /// Where it stands.
    pub state: ApprovalState,
    /// The decision, once made (with a quorum: the approval that completed it, or the
    /// denial that ended it).
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
    /// expiry has not passed at the decision's time is decided; the principal that requested
    /// the call never approves it ([`Approval::refusal`]); a denial ends it; an approval
    /// counts once per distinct approver ([`Decider::by`]) and the approval becomes
    /// `approved` when the [`Approval::required_approvals`]-th lands. Returns whether it
    /// changed. The one statement of the rule: every backend applies it to the row it loaded.
    pub fn decide(&mut self, decision: &ApprovalDecision) -> bool {
        if self.state != ApprovalState::Awaiting
            || self.is_expired_at(decision.at_ms)
            || self.refusal(decision.verdict, &decision.decider).is_some()
        {
            return false;
        }
        // What is kept: the decision without its compare-and-set expectation.
        let kept = ApprovalDecision {
            counted_before: None,
            ..decision.clone()
        };
        match decision.verdict {
            Verdict::Deny => {
                self.state = ApprovalState::Denied;
                self.decision = Some(kept);
            }
            Verdict::Approve => {
                let stale = decision
                    .counted_before
                    .is_some_and(|seen| seen != self.approval_count());
                if stale || self.has_counted(&decision.decider) {
                    return false;
                }
                let count = if self.required_approvals > 1 {
                    self.approvals.push(kept.clone());
                    self.approval_count()
                } else {
                    1
                };
                if count >= self.required_approvals {
                    self.state = ApprovalState::Approved;
                    self.decision = Some(kept);
                }
            }
        }
        true
    }

    /// Why the rules refuse `decider`'s `verdict` whatever the state: the principal that
    /// requested the call ([`crate::session::Session::requester`]) never approves it.
    pub fn refusal(&self, verdict: Verdict, decider: &Decider) -> Option<DecisionRefusal> {
        let requester = self.session.requester().map(str::trim);
        (verdict == Verdict::Approve && requester.is_some_and(|r| r == decider.by.trim()))
            .then_some(DecisionRefusal::SelfApproval)
    }

    /// Whether `decider`'s approval is already counted.
    pub fn has_counted(&self, decider: &Decider) -> bool {
        self.approvals.iter().any(|a| a.decider.by == decider.by)
            || self
                .decision
                .as_ref()
                .is_some_and(|d| d.verdict == Verdict::Approve && d.decider.by == decider.by)
    }

    /// How many distinct approvers have approved so far.
    pub fn approval_count(&self) -> u32 {
        let approved = self
            .decision
            .as_ref()
            .is_some_and(|d| d.verdict == Verdict::Approve);
        if self.approvals.is_empty() {
            u32::from(approved)
        } else {
            u32::try_from(self.approvals.len()).unwrap_or(u32::MAX)
        }
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
        self.approvals.clear();
        self.required_approvals = self.required_approvals.max(1);
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

    /// The expiry as RFC 3339, or `never`.
    pub fn expires_at(&self) -> String {
        if self.expires_at_ms == NEVER_EXPIRES {
            "never".to_owned()
        } else {
            rfc3339(self.expires_at_ms)
        }
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
    /// The approver's display name (decisions whose front end knows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The approver's groups (decisions whose front end knows them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// The id of the key that authenticated the decision (signed webhooks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// The approver's own signature over the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<DecisionSignature>,
    /// With a quorum: the distinct approvals counted after this record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<u32>,
    /// With a quorum: how many approvals the call needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<u32>,
    /// A refused decision: why (`self_approval`, `no_authority`, `bad_signature`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<DecisionRefusal>,
    /// The remembered approval this record is about (steps `remembered`, `revoked`,
    /// `applied_remembered`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remembered: Option<RememberedId>,
    /// The remembered approval's scope, in words (`exact arguments`, `session s1`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
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
            name: None,
            groups: Vec::new(),
            key_id: None,
            signature: None,
            approvals: None,
            required: None,
            refusal: None,
            remembered: None,
            scope: None,
        }
    }

    /// With who decided: the subject, the front end and whatever else the front end knows
    /// of the approver.
    #[must_use]
    pub fn with_decider(mut self, decider: &Decider) -> Self {
        self.by = Some(decider.by.clone());
        self.channel = Some(decider.channel.clone());
        self.name.clone_from(&decider.name);
        self.groups.clone_from(&decider.groups);
        self.key_id.clone_from(&decider.key_id);
        self.signature.clone_from(&decider.signature);
        self
    }
}

string_enum! {
    /// The steps of an approval the audit chain records.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[non_exhaustive]
    pub enum ApprovalStep {
        /// The call was parked.
        Requested => "requested",
        /// A human approved (with a quorum: the approval that completed it).
        Approved => "approved",
        /// A human approved and more approvals are needed (a quorum).
        Counted => "counted",
        /// A decision was refused and changed nothing (self-approval, no authority, a bad
        /// signature).
        Refused => "refused",
        /// A human denied.
        Denied => "denied",
        /// It expired undecided.
        Expired => "expired",
        /// The approved call was driven to its end (the record of the execution itself).
        Resumed => "resumed",
        /// An approver approved and remembered the approval ([`RememberedApproval`]).
        Remembered => "remembered",
        /// A remembered approval was revoked.
        Revoked => "revoked",
        /// A later call went out without asking, under a remembered approval (the record
        /// of that call itself).
        AppliedRemembered => "applied_remembered",
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

fn one() -> u32 {
    1
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_one(n: &u32) -> bool {
    *n == 1
}

/// `text` without control characters (newlines kept in reasons), at most `max` characters.
pub(crate) fn clean(text: &str, max: usize) -> String {
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
    pub(super) fn awaiting() -> Approval {
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

    fn by(verdict: Verdict, who: &str, at_ms: u64) -> ApprovalDecision {
        let mut decision = ApprovalDecision::new(verdict, Decider::new(who, "cli"), None);
        decision.at_ms = at_ms;
        decision
    }

    fn quorum(n: u32) -> Approval {
        let mut approval = awaiting();
        approval.required_approvals = n;
        approval.session = crate::session::Session::new("s1").requested_by("rita");
        approval
    }

    #[test]
    fn a_two_of_three_quorum_is_approved_by_the_second_distinct_approver_only() {
        let mut approval = quorum(2);
        assert!(approval.decide(&by(Verdict::Approve, "alice", 1_100)));
        assert_eq!(approval.state, ApprovalState::Awaiting);
        assert_eq!(approval.approval_count(), 1);
        assert_eq!(approval.decision, None);
        // The same approver again counts once, through any front end.
        let mut again = by(Verdict::Approve, "alice", 1_200);
        again.decider.channel = "webhook".into();
        assert!(!approval.decide(&again));
        assert_eq!(approval.approval_count(), 1);
        assert_eq!(approval.state, ApprovalState::Awaiting);
        assert!(approval.decide(&by(Verdict::Approve, "bob", 1_300)));
        assert_eq!(approval.state, ApprovalState::Approved);
        assert_eq!(approval.approval_count(), 2);
        let names: Vec<_> = approval
            .approvals
            .iter()
            .map(|a| a.decider.by.as_str())
            .collect();
        assert_eq!(names, ["alice", "bob"]);
        assert_eq!(
            approval.decision.as_ref().map(|d| d.decider.by.as_str()),
            Some("bob")
        );
        // The third approver finds it decided.
        assert!(!approval.decide(&by(Verdict::Approve, "carol", 1_400)));
        assert_eq!(approval.approvals.len(), 2);
    }

    #[test]
    fn an_approval_that_saw_a_stale_count_is_not_applied() {
        let mut approval = quorum(3);
        let mut seen_none = by(Verdict::Approve, "alice", 1_100);
        seen_none.counted_before = Some(0);
        let mut also_seen_none = by(Verdict::Approve, "bob", 1_100);
        also_seen_none.counted_before = Some(0);
        assert!(approval.decide(&seen_none));
        assert!(!approval.decide(&also_seen_none), "bob saw 0, 1 is counted");
        also_seen_none.counted_before = Some(1);
        assert!(approval.decide(&also_seen_none));
        assert_eq!(approval.approval_count(), 2);
        assert_eq!(approval.state, ApprovalState::Awaiting);
    }

    #[test]
    fn one_denial_ends_a_quorum_and_expiry_ends_it_undecided() {
        let mut denied = quorum(2);
        assert!(denied.decide(&by(Verdict::Approve, "alice", 1_100)));
        assert!(denied.decide(&by(Verdict::Deny, "bob", 1_200)));
        assert_eq!(denied.state, ApprovalState::Denied);
        assert!(!denied.decide(&by(Verdict::Approve, "carol", 1_300)));
        assert_eq!(denied.state, ApprovalState::Denied);

        let mut lapsed = quorum(2);
        assert!(lapsed.decide(&by(Verdict::Approve, "alice", 1_100)));
        assert!(!lapsed.decide(&by(Verdict::Approve, "bob", 2_000)));
        assert!(lapsed.expire(2_000));
        assert_eq!(lapsed.state, ApprovalState::Expired);
        assert_eq!(
            lapsed.decision, None,
            "an expired approval carries no denial"
        );
    }

    #[test]
    fn the_requester_never_approves_its_own_call_but_may_withdraw_it() {
        let mut approval = quorum(1);
        assert_eq!(
            approval.refusal(Verdict::Approve, &Decider::new("rita", "console")),
            Some(DecisionRefusal::SelfApproval)
        );
        assert!(!approval.decide(&by(Verdict::Approve, "rita", 1_100)));
        assert_eq!(approval.state, ApprovalState::Awaiting);
        assert_eq!(
            approval.refusal(Verdict::Deny, &Decider::new("rita", "cli")),
            None
        );
        assert!(approval.decide(&by(Verdict::Deny, "rita", 1_100)));
        assert_eq!(approval.state, ApprovalState::Denied);
    }

    #[test]
    fn a_single_approver_approval_serializes_as_before_quorums() {
        let mut approval = approved();
        approval.session = crate::session::Session::new("s1");
        let json = serde_json::to_value(&approval).expect("json");
        assert!(json.get("required_approvals").is_none(), "{json}");
        assert!(json.get("approvals").is_none(), "{json}");
        assert_eq!(
            json["decision"]["decider"],
            serde_json::json!({"by": "alice", "channel": "cli"})
        );
        let back: Approval = serde_json::from_value(json).expect("back");
        assert_eq!(back.required_approvals, 1);
        assert_eq!(back, approval);
        let note = ApprovalNote::new(approval.approval_id.clone(), ApprovalStep::Approved)
            .with_decider(&Decider::new("alice", "cli"));
        assert_eq!(
            serde_json::to_value(&note).expect("json"),
            serde_json::json!({
                "approval_id": approval.approval_id, "step": "approved",
                "by": "alice", "channel": "cli"
            })
        );
    }

    #[test]
    fn a_decider_keeps_name_groups_and_key_id_clean_and_the_statement_binds_the_request() {
        let d = Decider::new("u-17", "webhook")
            .with_name("Ali\u{7}ce")
            .with_groups(["ops", "", "finance", "ops"])
            .with_key_id("hook-key");
        assert_eq!(d.name.as_deref(), Some("Alice"));
        assert_eq!(d.groups, ["finance", "ops"]);
        assert_eq!(d.key_id.as_deref(), Some("hook-key"));
        let approval = awaiting();
        let statement = String::from_utf8(d.statement(&approval, Verdict::Approve)).expect("utf-8");
        assert_eq!(
            statement,
            format!(
                "sallyport-decision-v1\n{}\n{}\n{}\napprove\nu-17\nwebhook",
                approval.approval_id.as_str(),
                "f".repeat(64),
                "d".repeat(64)
            )
        );
        assert_ne!(
            d.statement(&approval, Verdict::Deny),
            d.statement(&approval, Verdict::Approve)
        );
    }

    #[test]
    fn a_never_expiring_approval_says_never() {
        let mut approval = awaiting();
        approval.expires_at_ms = NEVER_EXPIRES;
        assert_eq!(approval.expires_at(), "never");
        assert!(!approval.expire(u64::MAX - 1));
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
