//! The reconciler: settles attempts an executor left between intent and outcome (a crash, a
//! `kill -9`, a lost machine) by asking the upstream what happened, never by sending again.
//!
//! For each [`UnresolvedAttempt`] whose owner is gone and whose action this executor holds
//! and declares a `reconcile` action, [`Executor::reconcile`] runs that read-only action as
//! an ordinary observe call through the whole pipeline (scope, drift, vault, journal: it
//! gets its own audit record), with its arguments taken from the attempt's stored arguments
//! as `next` is built for an `unknown` answer. Then:
//!
//! * the check answers `completed` or `already_in_desired_state`: the effect is there, and
//!   the attempt is settled `completed`;
//! * the check answers `rejected` with the upstream's `not_found`: absence is proven, and the
//!   attempt is settled `rejected`;
//! * anything else (a 500, a refusal, a timeout): the attempt stays unresolved and is
//!   reported `unknown`.
//!
//! The settling record names the check and its receipt ([`ReconcileNote`]) and is appended
//! with [`Journal::settle_unresolved`](crate::journal::Journal::settle_unresolved), a compare-and-set: two reconcilers running at once
//! settle an attempt once. An attempt that carries out an approval (state `executing`) is
//! settled through [`ApprovalStore::settle_approval`](crate::journal::ApprovalStore::settle_approval) under the claim it was begun with, so the
//! approval finishes with the settled result in the same transaction.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use super::Executor;
use crate::approval::{
    Approval, ApprovalFilter, ApprovalId, ApprovalNote, ApprovalState, ApprovalStep,
};
use crate::catalog::Entry;
use crate::clock;
use crate::journal::{
    AttemptId, AuditEvent, JournalError, Phase, ReceiptId, ReconcileNote, UnresolvedAttempt,
};
use crate::outcome::{ActionResult, Origin, Status};
use crate::session::Session;
use sallyport_vocab::string_enum;

/// The session id reconcile checks run under (their audit records say so).
pub const RECONCILE_SESSION: &str = "reconcile";

/// How [`Executor::reconcile`] chooses the attempts it settles.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReconcileOptions {
    /// An attempt without lease information (the SQLite journal keeps none) is taken to be
    /// abandoned once it is this old. A live executor's in-flight call is unresolved too —
    /// its intent is written before the request leaves and closed when the answer comes —
    /// so the age must exceed the longest call (timeouts and retries included) any executor
    /// on the journal can still be making. Default 60 s.
    pub min_age: Duration,
}

impl Default for ReconcileOptions {
    fn default() -> Self {
        Self {
            min_age: Duration::from_secs(60),
        }
    }
}

impl ReconcileOptions {
    /// The defaults (`min_age` 60 s).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`ReconcileOptions::min_age`].
    #[must_use]
    pub fn with_min_age(mut self, min_age: Duration) -> Self {
        self.min_age = min_age;
        self
    }
}

string_enum! {
    /// What the reconciler concluded about one attempt.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[non_exhaustive]
    pub enum ReconcileOutcome {
        /// The check found the effect: settled `completed`.
        Completed => "completed",
        /// The check proved the effect absent: settled `rejected`.
        Rejected => "rejected",
        /// The check could not tell (or could not run): still unresolved.
        Unknown => "unknown",
    }
}

/// One attempt [`Executor::reconcile`] looked at.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Reconciled {
    /// The unresolved attempt.
    pub attempt_id: AttemptId,
    /// Its action (the state-changing one, never resent).
    pub action: String,
    /// What the check concluded.
    pub outcome: ReconcileOutcome,
    /// The reconcile action run as the check, if one ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    /// The check's receipt (its own audit record): the evidence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<ReceiptId>,
    /// The receipt of the record this run appended to settle the attempt; `None` when the
    /// attempt stays unresolved or another reconciler settled it first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settled: Option<ReceiptId>,
    /// The approval the attempt carried out, if any (finished with the settled result).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<ApprovalId>,
    /// A sentence for a human: what the check answered and what was done.
    pub reason: String,
}

/// Why [`Executor::reconcile`] stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReconcileError {
    /// The journal could not be read or a settling record could not be written; attempts
    /// reported before the failure are settled, the rest are not.
    #[error("the journal failed while reconciling")]
    Journal(#[source] JournalError),
}

impl From<JournalError> for ReconcileError {
    fn from(e: JournalError) -> Self {
        Self::Journal(e)
    }
}

impl Executor {
    /// Settles the unresolved attempts whose owner is gone, through each action's declared
    /// read-only reconcile action (see [`Executor::reconcile`](crate::Executor::reconcile)); never resends a
    /// state-changing request. Attempts whose action this executor's catalog does not hold
    /// are left for an executor that does; attempts whose owner may still be working on
    /// them (lease not expired, or younger than [`ReconcileOptions::min_age`] without a
    /// lease) are left alone. Reports every attempt it looked at.
    ///
    /// Each check runs in session [`RECONCILE_SESSION`] whose scope is exactly the objects
    /// the original call named (decoded again from its stored arguments): the check may
    /// read what the call was allowed to change, nothing else.
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Journal`] when the journal cannot be read or written.
    pub async fn reconcile(
        &self,
        options: ReconcileOptions,
    ) -> Result<Vec<Reconciled>, ReconcileError> {
        let journal = self.journal();
        let open = journal.unresolved().await?;
        if open.is_empty() {
            return Ok(Vec::new());
        }
        let executing = match self.inner.approval_store() {
            Ok(store) => {
                store
                    .approvals(&ApprovalFilter::states([ApprovalState::Executing]))
                    .await
            }
            Err(e) => Err(e),
        };
        let executing = match executing {
            Ok(list) => list,
            Err(JournalError::Unsupported(_)) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let now_ms = clock::now_ms();
        let mut report = Vec::new();
        for attempt in open {
            let Some(entry) = self.inner.catalog.get(&attempt.action).cloned() else {
                continue;
            };
            let approval = executing
                .iter()
                .find(|a| a.execution.as_ref() == Some(&attempt.attempt_id));
            if !owner_gone(&attempt, approval, now_ms, options.min_age) {
                continue;
            }
            report.push(self.reconcile_one(&attempt, &entry, approval).await?);
        }
        Ok(report)
    }

    async fn reconcile_one(
        &self,
        attempt: &UnresolvedAttempt,
        entry: &Entry,
        approval: Option<&Approval>,
    ) -> Result<Reconciled, ReconcileError> {
        let mut report = Reconciled {
            attempt_id: attempt.attempt_id.clone(),
            action: attempt.action.clone(),
            outcome: ReconcileOutcome::Unknown,
            check: None,
            evidence: None,
            settled: None,
            approval_id: approval.map(|a| a.approval_id.clone()),
            reason: String::new(),
        };
        let Some(check) = entry.spec().reconcile.as_deref() else {
            report.reason = format!(
                "{} declares no reconcile action; the outcome stays unknown",
                attempt.action
            );
            return Ok(report);
        };
        report.check = Some(check.to_owned());
        let objects = entry
            .decode(&attempt.arguments)
            .map(|d| d.objects)
            .unwrap_or_default();
        let mut session = Session::new(RECONCILE_SESSION).requested_by("sallyport reconciler");
        for object in &objects {
            session = session.allow(object.kind.clone(), [object.value.clone()]);
        }
        let arguments = check_arguments(self, check, &attempt.arguments);
        let result = self.call(check, arguments, &session).await;
        report.evidence = result.receipt_id.clone();
        let outcome = verdict(&result);
        let Some(evidence) = result.receipt_id.clone().filter(|_| outcome.is_some()) else {
            report.reason = format!(
                "{check} answered {}{}; the outcome stays unknown",
                result.status,
                result
                    .code_str()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default()
            );
            return Ok(report);
        };
        let (status, origin, reason) = match outcome {
            Some(ReconcileOutcome::Rejected) => (
                Status::Rejected,
                Origin::Upstream,
                format!(
                    "settled by the reconciler: {check} (receipt {evidence}) found no trace of the effect; it was not applied"
                ),
            ),
            _ => (
                Status::Completed,
                Origin::Upstream,
                format!(
                    "settled by the reconciler: {check} (receipt {evidence}) found the effect applied"
                ),
            ),
        };
        report.outcome = outcome.unwrap_or(ReconcileOutcome::Unknown);
        let mut event = AuditEvent {
            receipt_id: ReceiptId::generate(),
            attempt_id: attempt.attempt_id.clone(),
            at: clock::now(),
            session_id: attempt.session_id.clone(),
            subject: None,
            action: attempt.action.clone(),
            definition_hash: None,
            phase: Phase::Finished,
            status,
            origin: Some(origin),
            code: None,
            reason: Some(reason.clone()),
            objects,
            note: None,
            request: None,
            consent: None,
            divergences: Vec::new(),
            drift_decision: None,
            dispatches: dispatches_found(outcome, attempt.dispatches),
            upstream_status: None,
            approval: approval
                .map(|a| ApprovalNote::new(a.approval_id.clone(), ApprovalStep::Resumed)),
            reconciled: Some(ReconcileNote::new(check, evidence, result.status)),
            policy: None,
            findings: Vec::new(),
            shadow: None,
            hooks: Vec::new(),
        };
        super::filter::scrub_event(&self.inner.current_scrubber(), &mut event);
        let receipt = event.receipt_id.clone();
        let settled = match approval.and_then(|a| a.claim.clone().map(|c| (a, c))) {
            Some((approval, claim)) => {
                let mut settled =
                    ActionResult::new(status, &attempt.action, attempt.attempt_id.clone());
                settled.origin = (status == Status::Rejected).then_some(origin);
                settled.reason = Some(reason.clone());
                settled.receipt_id = Some(receipt.clone());
                settled.approval_id = Some(approval.approval_id.clone());
                match self
                    .inner
                    .approval_store()?
                    .settle_approval(&approval.approval_id, &claim, &settled, event)
                    .await
                {
                    Ok(_) => true,
                    // Another reconciler (or the owner, back) finished it first.
                    Err(JournalError::Fenced) => false,
                    Err(e) => return Err(e.into()),
                }
            }
            None => {
                self.journal()
                    .settle_unresolved(&attempt.attempt_id, event)
                    .await?
            }
        };
        if settled {
            report.settled = Some(receipt);
            report.reason = reason;
        } else {
            report.reason = format!(
                "{check} (receipt {}) answered {}, but the attempt was settled by someone else first",
                report.evidence.as_ref().map_or("none", ReceiptId::as_str),
                result.status
            );
        }
        Ok(report)
    }
}

/// Whether the attempt's owner is gone: its lease (the attempt's, or for an approved call
/// the approval's claim) ended, or, with no lease, it is older than `min_age`.
fn owner_gone(
    attempt: &UnresolvedAttempt,
    approval: Option<&Approval>,
    now_ms: u64,
    min_age: Duration,
) -> bool {
    let lease = attempt
        .lease_until_ms
        .or_else(|| approval.and_then(|a| a.claim.as_ref()).map(|c| c.until_ms));
    if let Some(until) = lease {
        return until < now_ms;
    }
    let Ok(created) = time::OffsetDateTime::parse(
        &attempt.created_at,
        &time::format_description::well_known::Rfc3339,
    ) else {
        // A time that does not parse cannot show the attempt is old: leave it.
        return false;
    };
    let age = clock::now_utc() - created;
    age >= min_age
}

/// The request count the settling record carries: the attempt row's, or, when the check
/// found the effect, at least the one request that made it. The row's count comes from
/// dispatch notes, which may not have reached the journal (an outage while the request
/// left), and a found effect is proof a request was sent.
fn dispatches_found(outcome: Option<ReconcileOutcome>, noted: u32) -> u32 {
    match outcome {
        Some(ReconcileOutcome::Completed) => noted.max(1),
        _ => noted,
    }
}

/// What the check's answer proves: the effect (`Completed`), its absence (`Rejected`), or
/// nothing (`None`). Absence only from the upstream's own `not_found`, never from a refusal
/// of the executor's.
fn verdict(check: &ActionResult) -> Option<ReconcileOutcome> {
    match check.status {
        Status::Completed | Status::AlreadyInDesiredState => Some(ReconcileOutcome::Completed),
        Status::Rejected
            if check.origin == Some(Origin::Upstream) && check.code_str() == Some("not_found") =>
        {
            Some(ReconcileOutcome::Rejected)
        }
        _ => None,
    }
}

/// The check's arguments: each input field of the reconcile action taken from the stored
/// arguments of the attempt (as `next` is built for an `unknown` answer, without data).
fn check_arguments(executor: &Executor, check: &str, arguments: &Value) -> Value {
    let properties = executor
        .inner
        .catalog
        .get(check)
        .and_then(|target| target.input_schema().get("properties"))
        .and_then(Value::as_object);
    let mut args = Map::new();
    for name in properties.into_iter().flat_map(Map::keys) {
        if let Some(v) = arguments.get(name) {
            args.insert(name.clone(), v.clone());
        }
    }
    Value::Object(args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::{Code, UpstreamCode};

    fn attempt(created_at: &str, lease_until_ms: Option<u64>) -> UnresolvedAttempt {
        UnresolvedAttempt {
            attempt_id: AttemptId::from_stored("att_1"),
            action: "send".to_owned(),
            session_id: "s".to_owned(),
            idempotency_key: crate::journal::IdempotencyKey::from_stored("k"),
            phase: Phase::Dispatched,
            dispatches: 1,
            arguments: serde_json::json!({}),
            created_at: created_at.to_owned(),
            owner: lease_until_ms.map(|_| "exe_1".to_owned()),
            lease_until_ms,
        }
    }

    #[test]
    fn without_a_lease_an_attempt_is_abandoned_only_past_min_age() {
        let now = clock::now();
        let young = attempt(&now, None);
        assert!(!owner_gone(&young, None, 0, Duration::from_secs(60)));
        assert!(owner_gone(&young, None, 0, Duration::ZERO));
        let old = attempt("2020-01-01T00:00:00Z", None);
        assert!(owner_gone(&old, None, 0, Duration::from_secs(60)));
        let garbled = attempt("yesterday", None);
        assert!(!owner_gone(&garbled, None, 0, Duration::ZERO));
    }

    #[test]
    fn a_lease_decides_whatever_the_age() {
        let old_but_leased = attempt("2020-01-01T00:00:00Z", Some(2_000));
        assert!(!owner_gone(&old_but_leased, None, 1_999, Duration::ZERO));
        assert!(!owner_gone(&old_but_leased, None, 2_000, Duration::ZERO));
        assert!(owner_gone(
            &old_but_leased,
            None,
            2_001,
            Duration::from_secs(3600)
        ));
    }

    #[test]
    fn a_found_effect_counts_at_least_the_request_that_made_it() {
        assert_eq!(dispatches_found(Some(ReconcileOutcome::Completed), 0), 1);
        assert_eq!(dispatches_found(Some(ReconcileOutcome::Completed), 2), 2);
        assert_eq!(dispatches_found(Some(ReconcileOutcome::Rejected), 0), 0);
        assert_eq!(dispatches_found(Some(ReconcileOutcome::Rejected), 1), 1);
    }

    #[test]
    fn only_the_upstreams_not_found_proves_absence() {
        let id = AttemptId::from_stored("att_1");
        let mut found = ActionResult::new(Status::Completed, "get", id.clone());
        assert_eq!(verdict(&found), Some(ReconcileOutcome::Completed));
        found.status = Status::AlreadyInDesiredState;
        assert_eq!(verdict(&found), Some(ReconcileOutcome::Completed));
        let mut absent = ActionResult::new(Status::Rejected, "get", id.clone());
        absent.origin = Some(Origin::Upstream);
        absent.code = Some(Code::Upstream(UpstreamCode::NotFound));
        assert_eq!(verdict(&absent), Some(ReconcileOutcome::Rejected));
        absent.origin = Some(Origin::Executor);
        assert_eq!(verdict(&absent), None);
        let mut failed = ActionResult::new(Status::Rejected, "get", id.clone());
        failed.origin = Some(Origin::Upstream);
        failed.code = Some(Code::Upstream(UpstreamCode::GatewayError));
        assert_eq!(verdict(&failed), None);
        let unknown = ActionResult::new(Status::Unknown, "get", id);
        assert_eq!(verdict(&unknown), None);
    }
}
