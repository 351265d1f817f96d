//! A conformance suite any [`ApprovalStore`] backend runs: attempts and the chain, and every
//! transition of the approval store (see `sallyport_core::approval`).
//!
//! Each check is a public async function taking a fresh, empty journal; [`run_all`] runs
//! them all, one fresh journal each, from a factory:
//!
//! ```no_run
//! # async fn demo() {
//! use std::sync::Arc;
//! use sallyport_core::journal::{ApprovalStore, SqliteJournal};
//! let dir = tempfile::tempdir().expect("tempdir");
//! let mut n = 0;
//! sallyport_testkit::conformance::run_all(|| {
//!     n += 1;
//!     let path = dir.path().join(format!("journal-{n}.db"));
//!     async move { Arc::new(SqliteJournal::open(path).expect("open")) as Arc<dyn ApprovalStore> }
//! })
//! .await;
//! # }
//! ```
//!
//! The checks use only the [`Journal`](sallyport_core::journal::Journal) and [`ApprovalStore`] traits,
//! so they hold for every backend. The concurrency check spawns tasks: run the suite on a
//! multi-threaded runtime.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sallyport_core::approval::{
    self, Approval, ApprovalDecision, ApprovalFilter, ApprovalId, ApprovalNote, ApprovalState,
    ApprovalStep, Claim, Decided, Decider, Transition, Verdict,
};
use sallyport_core::code::ConsentOutcome;
use sallyport_core::journal::{
    ApprovalStore, AttemptId, AuditEvent, AuditRecord, Intent, JournalError, Phase,
};
use sallyport_core::outcome::ActionResult;
use sallyport_core::{RefusalCode, Session, Status};
use serde_json::json;

/// An hour, in milliseconds: the expiry of approvals no check lets expire.
const HOUR_MS: u64 = 60 * 60 * 1000;

/// An approval as an executor parks it (state `awaiting`), of a `pay_invoice` call in
/// session `session_id`, created at `created_at_ms` and expiring at `expires_at_ms`.
///
/// Built from its JSON, as a backend stores it, since [`Approval`] is `#[non_exhaustive]`.
pub fn sample_approval(
    session_id: &str,
    fingerprint: &str,
    created_at_ms: u64,
    expires_at_ms: u64,
) -> Approval {
    serde_json::from_value(json!({
        "approval_id": ApprovalId::generate(),
        "attempt_id": AttemptId::generate(),
        "action": "pay_invoice",
        "summary": "Pay one invoice.",
        "effect": "external_commitment",
        "externality": "external",
        "rule": "per_call",
        "session": Session::new(session_id).requested_by("finance-bot"),
        "objects": [{"kind": "invoice", "field": "invoice_id", "value": "inv_1"}],
        "note": "the agent's words",
        "request": "POST http://127.0.0.1:9/v1/invoices/inv_1/pay",
        "fingerprint": fingerprint,
        "definition_hash": "d".repeat(64),
        "definition_status": "no definition guard configured",
        "arguments": {"invoice_id": "inv_1"},
        "created_at_ms": created_at_ms,
        "expires_at_ms": expires_at_ms,
        "state": "awaiting",
    }))
    .expect("the sample is an approval")
}

/// An audit event on the parked call's attempt of `approval`, for the approval step `step`.
pub fn approval_event(
    approval: &Approval,
    phase: Phase,
    status: Status,
    step: ApprovalStep,
) -> AuditEvent {
    let mut event = AuditEvent::for_bench(&Intent::for_bench(false));
    event.attempt_id = approval.attempt_id.clone();
    event.session_id = approval.session.id().as_str().to_owned();
    event.action = approval.action.clone();
    event.definition_hash = Some(approval.definition_hash.clone());
    event.phase = phase;
    event.status = status;
    event.dispatches = 0;
    event.request = Some(approval.request.clone());
    event.approval = Some(ApprovalNote::new(approval.approval_id.clone(), step));
    event
}

/// The parked call's record (`deferred` / `pending` / `awaiting_approval`).
pub fn parked_event(approval: &Approval) -> AuditEvent {
    let mut event = approval_event(
        approval,
        Phase::Deferred,
        Status::Pending,
        ApprovalStep::Requested,
    );
    event.code = Some(RefusalCode::AwaitingApproval.into());
    event
}

/// A decision's record, as [`approval::decide`] writes it.
pub fn decision_event(approval: &Approval, verdict: Verdict) -> AuditEvent {
    let (status, step, consent) = match verdict {
        Verdict::Approve => (
            Status::Pending,
            ApprovalStep::Approved,
            ConsentOutcome::Approved,
        ),
        Verdict::Deny => (
            Status::Rejected,
            ApprovalStep::Denied,
            ConsentOutcome::Denied,
        ),
    };
    let mut event = approval_event(approval, Phase::Decided, status, step);
    event.consent = Some(consent);
    if verdict == Verdict::Deny {
        event.code = Some(RefusalCode::ConsentDenied.into());
    }
    event
}

/// The durable intent of an approved call's execution (an attempt of its own).
pub fn execution_intent(approval: &Approval) -> Intent {
    let mut intent = Intent::for_bench(true);
    intent.action = approval.action.clone();
    intent.session_id = approval.session.id().as_str().to_owned();
    intent.fingerprint = approval.fingerprint.clone();
    intent.definition_hash = approval.definition_hash.clone();
    intent.arguments = approval.arguments.clone();
    intent
}

/// The execution's result and record: `completed` after one request.
pub fn execution_outcome(approval: &Approval, intent: &Intent) -> (ActionResult, AuditEvent) {
    let mut event = AuditEvent::for_bench(intent);
    event.approval = Some(ApprovalNote::new(
        approval.approval_id.clone(),
        ApprovalStep::Resumed,
    ));
    let result = serde_json::from_value(json!({
        "status": "completed",
        "action": approval.action,
        "data": {"paid": true},
        "attempt_id": intent.attempt_id,
        "receipt_id": event.receipt_id,
    }))
    .expect("the sample is a result");
    (result, event)
}

/// Runs every check, each on a fresh journal from `factory`.
pub async fn run_all<F, Fut>(mut factory: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Arc<dyn ApprovalStore>>,
{
    an_intent_then_its_append_closes_the_attempt(factory().await).await;
    append_with_intent_stores_both_or_neither(factory().await).await;
    a_duplicate_idempotency_key_is_refused(factory().await).await;
    an_intact_chain_verifies_and_links(factory().await).await;
    unresolved_lists_an_open_attempt_with_its_dispatches(factory().await).await;
    parked_approvals_read_back_list_newest_first_and_filter(factory().await).await;
    a_second_decision_is_unchanged(factory().await).await;
    a_decision_after_expiry_is_unchanged_and_the_expiry_applies_once(factory().await).await;
    claims_take_over_after_the_lease_and_fence_the_old_holder(factory().await).await;
    an_approval_refused_at_recheck_settles_without_an_intent(factory().await).await;
    concurrent_decisions_apply_exactly_once(factory().await).await;
    concurrent_quorum_approvals_count_each_approver_once(factory().await).await;
    settling_an_unresolved_attempt_appends_once_and_only_while_open(factory().await).await;
    concurrent_settles_of_one_attempt_append_exactly_once(factory().await).await;
    a_last_record_dropped_after_its_first_poll_is_written(factory().await).await;
    remembered_approvals_are_stored_listed_bound_and_revoked_once(factory().await).await;
    concurrent_revocations_apply_exactly_once(factory().await).await;
}

/// How many records the chain holds, checking that it verifies.
async fn intact_count(journal: &dyn ApprovalStore) -> u64 {
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "the chain verifies: {report:?}");
    report.records
}

/// The chain's last record.
async fn last_step(journal: &dyn ApprovalStore) -> AuditRecord {
    journal
        .records()
        .await
        .expect("records")
        .pop()
        .expect("a record")
}

fn step_of(record: &AuditRecord) -> Option<ApprovalStep> {
    record.event.approval.as_ref().map(|n| n.step)
}

/// Parks `approval`, checking that exactly its record was appended.
async fn park(journal: &dyn ApprovalStore, approval: &Approval) -> AuditRecord {
    let before = intact_count(journal).await;
    let record = journal
        .park_approval(approval, parked_event(approval))
        .await
        .expect("parked");
    assert_eq!(record.seq, before + 1, "parking appends one record");
    assert_eq!(record.event.phase, Phase::Deferred);
    assert_eq!(intact_count(journal).await, before + 1);
    record
}

/// `decide_approval` with a decision made now, straight on the store.
async fn decide_raw(
    journal: &dyn ApprovalStore,
    approval: &Approval,
    verdict: Verdict,
) -> Transition {
    let decision = ApprovalDecision::new(verdict, Decider::new("conformance", "suite"), None);
    journal
        .decide_approval(
            &approval.approval_id,
            &decision,
            decision_event(approval, verdict),
        )
        .await
        .expect("decide")
}

fn applied(transition: Transition, what: &str) -> Approval {
    match transition {
        Transition::Applied(a) => a,
        other => panic!("{what}: expected Applied, got {other:?}"),
    }
}

fn unchanged(transition: Transition, what: &str) -> Approval {
    match transition {
        Transition::Unchanged(a) => a,
        other => panic!("{what}: expected Unchanged, got {other:?}"),
    }
}

async fn stored(journal: &dyn ApprovalStore, id: &ApprovalId) -> Approval {
    journal
        .approval(id)
        .await
        .expect("read")
        .expect("the approval is stored")
}

/// A durable intent then its record: listed unresolved in between, closed after.
pub async fn an_intent_then_its_append_closes_the_attempt(journal: Arc<dyn ApprovalStore>) {
    let intent = Intent::for_bench(true);
    journal.write_intent(&intent).await.expect("intent");
    let open = journal.unresolved().await.expect("unresolved");
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].attempt_id, intent.attempt_id);
    assert_eq!(open[0].phase, Phase::IntentWritten);
    let record = journal
        .append(AuditEvent::for_bench(&intent))
        .await
        .expect("append");
    assert_eq!(record.seq, 1);
    assert_eq!(record.event.attempt_id, intent.attempt_id);
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
    assert_eq!(intact_count(journal.as_ref()).await, 1);
}

/// An observe call's closed attempt and its record: both stored, or after an error neither
/// (a closed attempt row without its record would break `verify`).
pub async fn append_with_intent_stores_both_or_neither(journal: Arc<dyn ApprovalStore>) {
    let intent = Intent::for_bench(false);
    let record = journal
        .append_with_intent(intent.clone(), AuditEvent::for_bench(&intent))
        .await
        .expect("observe record");
    assert_eq!(record.seq, 1);
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
    // Another attempt reusing the key: refused, and neither its row nor its record stays.
    let mut clash = Intent::for_bench(false);
    clash.idempotency_key = intent.idempotency_key.clone();
    let refused = journal
        .append_with_intent(clash.clone(), AuditEvent::for_bench(&clash))
        .await;
    assert!(
        matches!(refused, Err(JournalError::DuplicateKey)),
        "{refused:?}"
    );
    assert_eq!(intact_count(journal.as_ref()).await, 1);
    let records = journal.records().await.expect("records");
    assert!(
        records
            .iter()
            .all(|r| r.event.attempt_id != clash.attempt_id)
    );
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
}

/// A second intent with the key of the first is refused; the first stays.
pub async fn a_duplicate_idempotency_key_is_refused(journal: Arc<dyn ApprovalStore>) {
    let first = Intent::for_bench(true);
    journal.write_intent(&first).await.expect("intent");
    let mut clash = Intent::for_bench(true);
    clash.idempotency_key = first.idempotency_key.clone();
    let refused = journal.write_intent(&clash).await;
    assert!(
        matches!(refused, Err(JournalError::DuplicateKey)),
        "{refused:?}"
    );
    let open = journal.unresolved().await.expect("unresolved");
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].attempt_id, first.attempt_id);
    assert_eq!(open[0].idempotency_key, first.idempotency_key);
    // The same attempt twice is a duplicate too.
    let again = journal.write_intent(&first).await;
    assert!(
        matches!(again, Err(JournalError::DuplicateKey)),
        "{again:?}"
    );
}

/// Records get positions 1, 2, 3 linking each to the one before; `verify` reports the head.
pub async fn an_intact_chain_verifies_and_links(journal: Arc<dyn ApprovalStore>) {
    let empty = journal.verify().await.expect("verify");
    assert!(empty.is_intact());
    assert_eq!(empty.records, 0);
    let mut appended = Vec::new();
    for _ in 0..3 {
        let intent = Intent::for_bench(true);
        journal.write_intent(&intent).await.expect("intent");
        appended.push(
            journal
                .append(AuditEvent::for_bench(&intent))
                .await
                .expect("append"),
        );
    }
    assert_eq!(
        appended.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(appended[1].prev_hash, appended[0].hash);
    assert_eq!(appended[2].prev_hash, appended[1].hash);
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 3);
    assert_eq!(report.head.count, 3);
    assert_eq!(report.head.hash, appended[2].hash);
    assert_eq!(journal.records().await.expect("records"), appended);
}

/// An attempt no record closes is listed with its key, arguments and dispatches.
pub async fn unresolved_lists_an_open_attempt_with_its_dispatches(journal: Arc<dyn ApprovalStore>) {
    let mut intent = Intent::for_bench(true);
    intent.arguments = json!({"invoice_id": "inv_7"});
    journal.write_intent(&intent).await.expect("intent");
    journal.note_dispatch(&intent.attempt_id, 1);
    // The note is not awaited: wait until a read sees it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let open = loop {
        let open = journal.unresolved().await.expect("unresolved");
        if open.first().is_some_and(|a| a.phase == Phase::Dispatched) || Instant::now() > deadline {
            break open;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(open.len(), 1);
    let attempt = &open[0];
    assert_eq!(attempt.attempt_id, intent.attempt_id);
    assert_eq!(attempt.phase, Phase::Dispatched);
    assert_eq!(attempt.dispatches, 1);
    assert_eq!(attempt.action, intent.action);
    assert_eq!(attempt.session_id, intent.session_id);
    assert_eq!(attempt.idempotency_key, intent.idempotency_key);
    assert_eq!(attempt.arguments, json!({"invoice_id": "inv_7"}));
    // A verify of a journal with an open attempt is intact: the attempt is unresolved, not
    // edited.
    assert_eq!(intact_count(journal.as_ref()).await, 0);
}

/// Parked approvals read back as stored, list newest first and filter by state, session,
/// fingerprint and count; an unknown id is none; a second park of one id is refused.
pub async fn parked_approvals_read_back_list_newest_first_and_filter(
    journal: Arc<dyn ApprovalStore>,
) {
    let j = journal.as_ref();
    let now = sallyport_core::clock::now_ms();
    let (fa, fb) = ("a".repeat(64), "b".repeat(64));
    let oldest = sample_approval("ses_one", &fa, now - 3_000, now + HOUR_MS);
    let middle = sample_approval("ses_two", &fb, now - 2_000, now + HOUR_MS);
    let newest = sample_approval("ses_one", &fb, now - 1_000, now + HOUR_MS);
    for a in [&middle, &oldest, &newest] {
        let record = park(j, a).await;
        assert_eq!(step_of(&record), Some(ApprovalStep::Requested));
        assert_eq!(record.event.attempt_id, a.attempt_id);
    }
    for a in [&oldest, &middle, &newest] {
        assert_eq!(&stored(j, &a.approval_id).await, a, "read back as parked");
    }
    assert_eq!(
        j.approval(&ApprovalId::from_stored("apr_unknown"))
            .await
            .expect("read"),
        None
    );
    let ids = |list: Vec<Approval>| {
        list.into_iter()
            .map(|a| a.approval_id.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    let all = j.approvals(&ApprovalFilter::all()).await.expect("list");
    assert_eq!(
        ids(all),
        [
            newest.approval_id.as_str(),
            middle.approval_id.as_str(),
            oldest.approval_id.as_str()
        ]
    );
    let session = j
        .approvals(&ApprovalFilter::all().session("ses_one"))
        .await
        .expect("list");
    assert_eq!(
        ids(session),
        [newest.approval_id.as_str(), oldest.approval_id.as_str()]
    );
    let by_print = j
        .approvals(&ApprovalFilter::all().fingerprint(fb.clone()))
        .await
        .expect("list");
    assert_eq!(
        ids(by_print),
        [newest.approval_id.as_str(), middle.approval_id.as_str()]
    );
    let both = j
        .approvals(&ApprovalFilter::all().session("ses_two").fingerprint(fb))
        .await
        .expect("list");
    assert_eq!(ids(both), [middle.approval_id.as_str()]);
    let first = j
        .approvals(&ApprovalFilter::all().limit(1))
        .await
        .expect("list");
    assert_eq!(ids(first), [newest.approval_id.as_str()]);

    applied(decide_raw(j, &middle, Verdict::Deny).await, "deny middle");
    let denied = j
        .approvals(&ApprovalFilter::states([ApprovalState::Denied]))
        .await
        .expect("list");
    assert_eq!(ids(denied), [middle.approval_id.as_str()]);
    let open = j
        .approvals(&ApprovalFilter::states([
            ApprovalState::Awaiting,
            ApprovalState::Approved,
        ]))
        .await
        .expect("list");
    assert_eq!(
        ids(open),
        [newest.approval_id.as_str(), oldest.approval_id.as_str()]
    );
    let none = j
        .approvals(&ApprovalFilter::states([ApprovalState::Finished]))
        .await
        .expect("list");
    assert!(none.is_empty());

    let before = intact_count(j).await;
    let again = j.park_approval(&oldest, parked_event(&oldest)).await;
    assert!(
        matches!(again, Err(JournalError::DuplicateKey)),
        "{again:?}"
    );
    assert_eq!(
        intact_count(j).await,
        before,
        "a refused park appends nothing"
    );
    assert_eq!(stored(j, &oldest.approval_id).await, oldest);
}

/// The first decision applies and is audited; a second (either verdict) is unchanged and
/// audited by nothing, through the store and through [`approval::decide`].
pub async fn a_second_decision_is_unchanged(journal: Arc<dyn ApprovalStore>) {
    let j = journal.as_ref();
    let now = sallyport_core::clock::now_ms();
    let approved = sample_approval("ses_dec", &"c".repeat(64), now, now + HOUR_MS);
    park(j, &approved).await;
    let before = intact_count(j).await;
    let decided = approval::decide(
        j,
        &approved.approval_id,
        Verdict::Approve,
        &Decider::new("alice", "cli"),
        Some("looks right"),
    )
    .await
    .expect("decide");
    let Decided::Recorded(now_approved) = decided else {
        panic!("the first decision is recorded: {decided:?}");
    };
    assert_eq!(now_approved.state, ApprovalState::Approved);
    let decision = now_approved.decision.clone().expect("the decision is kept");
    assert_eq!(decision.verdict, Verdict::Approve);
    assert_eq!(decision.decider, Decider::new("alice", "cli"));
    assert_eq!(decision.reason.as_deref(), Some("looks right"));
    assert_eq!(stored(j, &approved.approval_id).await, now_approved);
    assert_eq!(intact_count(j).await, before + 1, "one decision record");
    let record = last_step(j).await;
    assert_eq!(record.event.phase, Phase::Decided);
    assert_eq!(step_of(&record), Some(ApprovalStep::Approved));
    let note = record.event.approval.expect("note");
    assert_eq!(
        (note.by.as_deref(), note.channel.as_deref()),
        (Some("alice"), Some("cli"))
    );

    for verdict in [Verdict::Approve, Verdict::Deny] {
        let kept = unchanged(decide_raw(j, &approved, verdict).await, "second decision");
        assert_eq!(kept, now_approved, "what stands is answered");
        let again = approval::decide(
            j,
            &approved.approval_id,
            verdict,
            &Decider::new("bob", "webhook"),
            None,
        )
        .await
        .expect("decide");
        assert!(
            matches!(&again, Decided::AlreadyDecided(a) if *a == now_approved),
            "{again:?}"
        );
    }
    assert_eq!(intact_count(j).await, before + 1, "no record for unchanged");

    let denied = sample_approval("ses_dec", &"c".repeat(64), now + 1, now + HOUR_MS);
    park(j, &denied).await;
    let now_denied = applied(decide_raw(j, &denied, Verdict::Deny).await, "deny");
    assert_eq!(now_denied.state, ApprovalState::Denied);
    assert_eq!(step_of(&last_step(j).await), Some(ApprovalStep::Denied));
    unchanged(
        decide_raw(j, &denied, Verdict::Approve).await,
        "approve after deny",
    );
    assert_eq!(
        stored(j, &denied.approval_id).await.state,
        ApprovalState::Denied
    );
    assert_eq!(intact_count(j).await, before + 3);

    let unknown = sample_approval("ses_dec", &"c".repeat(64), now, now + HOUR_MS);
    assert_eq!(
        decide_raw(j, &unknown, Verdict::Approve).await,
        Transition::NotFound
    );
    let missing = approval::decide(
        j,
        &unknown.approval_id,
        Verdict::Approve,
        &Decider::new("alice", "cli"),
        None,
    )
    .await;
    assert!(
        matches!(missing, Err(approval::ApprovalError::NotFound(_))),
        "{missing:?}"
    );
    assert_eq!(intact_count(j).await, before + 3);
}

/// Past its expiry an approval takes no decision; the expiry applies once (not before it is
/// due), and [`approval::decide`] records the expiry instead of the decision.
pub async fn a_decision_after_expiry_is_unchanged_and_the_expiry_applies_once(
    journal: Arc<dyn ApprovalStore>,
) {
    let j = journal.as_ref();
    let now = sallyport_core::clock::now_ms();
    let lapsed = sample_approval("ses_exp", &"e".repeat(64), now - 2_000, now - 1_000);
    park(j, &lapsed).await;
    let before = intact_count(j).await;
    let kept = unchanged(
        decide_raw(j, &lapsed, Verdict::Approve).await,
        "late decision",
    );
    assert_eq!(kept.state, ApprovalState::Awaiting);
    assert_eq!(intact_count(j).await, before);

    let early = approval::expire(j, &lapsed, lapsed.expires_at_ms - 1)
        .await
        .expect("expire");
    assert_eq!(
        unchanged(early, "expiry not yet due").state,
        ApprovalState::Awaiting
    );
    assert_eq!(intact_count(j).await, before);

    let expired = applied(
        approval::expire(j, &lapsed, lapsed.expires_at_ms)
            .await
            .expect("expire"),
        "expiry at its time",
    );
    assert_eq!(expired.state, ApprovalState::Expired);
    assert_eq!(stored(j, &lapsed.approval_id).await, expired);
    let record = last_step(j).await;
    assert_eq!(step_of(&record), Some(ApprovalStep::Expired));
    assert_eq!(record.event.phase, Phase::Decided);
    assert_eq!(intact_count(j).await, before + 1);
    let again = approval::expire(j, &lapsed, now).await.expect("expire");
    assert_eq!(unchanged(again, "second expiry"), expired);
    unchanged(
        decide_raw(j, &lapsed, Verdict::Deny).await,
        "decide after expiry",
    );
    assert_eq!(intact_count(j).await, before + 1);

    // Deciding a lapsed approval through the one path records the expiry.
    let other = sample_approval("ses_exp", &"e".repeat(64), now - 2_000, now - 1);
    park(j, &other).await;
    let decided = approval::decide(
        j,
        &other.approval_id,
        Verdict::Approve,
        &Decider::new("alice", "cli"),
        None,
    )
    .await
    .expect("decide");
    assert!(
        matches!(&decided, Decided::Expired(a) if a.state == ApprovalState::Expired),
        "{decided:?}"
    );
    assert_eq!(intact_count(j).await, before + 3);
    assert_eq!(step_of(&last_step(j).await), Some(ApprovalStep::Expired));
}

/// Only an approved approval is claimed; a held claim is unchanged until its lease ends,
/// then taken over with the next epoch; the old epoch is fenced off the intent and the
/// settlement (writing nothing), the current one writes the intent and settles, closing the
/// execution's attempt. Claims and intents add no record; the chain verifies at the end with
/// every approval phase in it.
pub async fn claims_take_over_after_the_lease_and_fence_the_old_holder(
    journal: Arc<dyn ApprovalStore>,
) {
    let j = journal.as_ref();
    let now = sallyport_core::clock::now_ms();
    let parked = sample_approval("ses_claim", &"f".repeat(64), now, now + HOUR_MS);
    let id = parked.approval_id.clone();
    park(j, &parked).await;
    unchanged(
        j.claim_approval(&id, "exe_a", now, 1_000)
            .await
            .expect("claim"),
        "claim before approval",
    );
    assert_eq!(
        j.claim_approval(&ApprovalId::from_stored("apr_unknown"), "exe_a", now, 1_000)
            .await
            .expect("claim"),
        Transition::NotFound
    );
    applied(decide_raw(j, &parked, Verdict::Approve).await, "approve");
    let records = intact_count(j).await;

    let first = applied(
        j.claim_approval(&id, "exe_a", now, 1_000)
            .await
            .expect("claim"),
        "first claim",
    );
    let claim_a = first.claim.clone().expect("claim");
    assert_eq!(
        claim_a,
        Claim {
            owner: "exe_a".into(),
            epoch: 1,
            until_ms: now + 1_000
        }
    );
    assert_eq!(first.state, ApprovalState::Approved);
    assert_eq!(stored(j, &id).await, first);
    let held = unchanged(
        j.claim_approval(&id, "exe_b", now + 999, 1_000)
            .await
            .expect("claim"),
        "claim during the lease",
    );
    assert_eq!(held.claim, Some(claim_a.clone()));
    let taken = applied(
        j.claim_approval(&id, "exe_b", now + 1_000, 1_000)
            .await
            .expect("claim"),
        "claim at the lease's end",
    );
    let claim_b = taken.claim.clone().expect("claim");
    assert_eq!(
        claim_b,
        Claim {
            owner: "exe_b".into(),
            epoch: 2,
            until_ms: now + 2_000
        }
    );
    assert_eq!(intact_count(j).await, records, "claims are not audited");

    // The old holder: fenced, nothing written.
    let stale_intent = execution_intent(&parked);
    let fenced = j.begin_approved(&id, &claim_a, &stale_intent).await;
    assert!(matches!(fenced, Err(JournalError::Fenced)), "{fenced:?}");
    let forged = Claim {
        owner: "exe_a".into(),
        ..claim_b.clone()
    };
    let fenced = j.begin_approved(&id, &forged, &stale_intent).await;
    assert!(matches!(fenced, Err(JournalError::Fenced)), "{fenced:?}");
    let old_epoch = Claim {
        epoch: 1,
        ..claim_b.clone()
    };
    let fenced = j.begin_approved(&id, &old_epoch, &stale_intent).await;
    assert!(matches!(fenced, Err(JournalError::Fenced)), "{fenced:?}");
    assert!(
        j.unresolved().await.expect("unresolved").is_empty(),
        "a fenced intent writes no attempt row"
    );
    assert_eq!(stored(j, &id).await, taken);
    assert_eq!(intact_count(j).await, records);

    // The current holder writes the intent.
    let intent = execution_intent(&parked);
    j.begin_approved(&id, &claim_b, &intent)
        .await
        .expect("the current claim writes the intent");
    let executing = stored(j, &id).await;
    assert_eq!(executing.state, ApprovalState::Executing);
    assert_eq!(executing.execution, Some(intent.attempt_id.clone()));
    assert_eq!(executing.claim, Some(claim_b.clone()));
    let open = j.unresolved().await.expect("unresolved");
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].attempt_id, intent.attempt_id);
    assert_eq!(open[0].phase, Phase::IntentWritten);
    assert_eq!(intact_count(j).await, records, "the intent adds no record");
    let twice = j
        .begin_approved(&id, &claim_b, &execution_intent(&parked))
        .await;
    assert!(matches!(twice, Err(JournalError::Fenced)), "{twice:?}");
    unchanged(
        j.claim_approval(&id, "exe_c", now + HOUR_MS, 1_000)
            .await
            .expect("claim"),
        "claim while executing",
    );

    // Settling: the old holder is fenced, the current one stores the result.
    let (result, event) = execution_outcome(&parked, &intent);
    let fenced = j
        .settle_approval(&id, &claim_a, &result, event.clone())
        .await;
    assert!(matches!(fenced, Err(JournalError::Fenced)), "{fenced:?}");
    assert_eq!(intact_count(j).await, records);
    let record = j
        .settle_approval(&id, &claim_b, &result, event)
        .await
        .expect("settled");
    assert_eq!(record.seq, records + 1);
    assert_eq!(record.event.attempt_id, intent.attempt_id);
    assert_eq!(step_of(&record), Some(ApprovalStep::Resumed));
    let finished = stored(j, &id).await;
    assert_eq!(finished.state, ApprovalState::Finished);
    assert_eq!(finished.result, Some(result.clone()));
    assert_eq!(finished.execution, Some(intent.attempt_id.clone()));
    assert!(
        j.unresolved().await.expect("unresolved").is_empty(),
        "the settlement closed the execution's attempt"
    );
    let again = j
        .settle_approval(
            &id,
            &claim_b,
            &result,
            execution_outcome(&parked, &intent).1,
        )
        .await;
    assert!(matches!(again, Err(JournalError::Fenced)), "{again:?}");
    unchanged(
        decide_raw(j, &parked, Verdict::Deny).await,
        "decide after finish",
    );

    let report = j.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, records + 1);
    let phases: Vec<Phase> = j
        .records()
        .await
        .expect("records")
        .into_iter()
        .map(|r| r.event.phase)
        .collect();
    assert_eq!(phases, [Phase::Deferred, Phase::Decided, Phase::Finished]);
}

/// An approved, claimed call refused when checked again settles from `approved`, with no
/// intent written; without the claim it is fenced.
pub async fn an_approval_refused_at_recheck_settles_without_an_intent(
    journal: Arc<dyn ApprovalStore>,
) {
    let j = journal.as_ref();
    let now = sallyport_core::clock::now_ms();
    let parked = sample_approval("ses_recheck", &"9".repeat(64), now, now + HOUR_MS);
    let id = parked.approval_id.clone();
    park(j, &parked).await;
    applied(decide_raw(j, &parked, Verdict::Approve).await, "approve");
    let unclaimed = Claim {
        owner: "exe_a".into(),
        epoch: 0,
        until_ms: now + 1_000,
    };
    let refusal: ActionResult = serde_json::from_value(json!({
        "status": "rejected",
        "action": parked.action,
        "origin": "executor",
        "code": "definition_drift",
        "reason": "the action's definition changed since the approval",
        "attempt_id": AttemptId::generate(),
    }))
    .expect("result");
    let mut event = approval_event(
        &parked,
        Phase::Refused,
        Status::Rejected,
        ApprovalStep::Resumed,
    );
    event.attempt_id = refusal.attempt_id.clone();
    let records = intact_count(j).await;
    let fenced = j
        .settle_approval(&id, &unclaimed, &refusal, event.clone())
        .await;
    assert!(matches!(fenced, Err(JournalError::Fenced)), "{fenced:?}");
    assert_eq!(intact_count(j).await, records);
    let claim = applied(
        j.claim_approval(&id, "exe_a", now, 1_000)
            .await
            .expect("claim"),
        "claim",
    )
    .claim
    .expect("claim");
    let record = j
        .settle_approval(&id, &claim, &refusal, event)
        .await
        .expect("settled from approved");
    assert_eq!(record.seq, records + 1);
    let finished = stored(j, &id).await;
    assert_eq!(finished.state, ApprovalState::Finished);
    assert_eq!(finished.execution, None);
    assert_eq!(finished.result, Some(refusal));
    assert!(j.unresolved().await.expect("unresolved").is_empty());
    assert_eq!(intact_count(j).await, records + 1);
}

/// 32 tasks decide one approval at once (half approve, half deny): exactly one decision is
/// applied and audited, the other 31 are told what stands.
pub async fn concurrent_decisions_apply_exactly_once(journal: Arc<dyn ApprovalStore>) {
    const TASKS: usize = 32;
    let now = sallyport_core::clock::now_ms();
    let parked = sample_approval("ses_race", &"7".repeat(64), now, now + HOUR_MS);
    park(journal.as_ref(), &parked).await;
    let before = intact_count(journal.as_ref()).await;
    let start = Arc::new(tokio::sync::Barrier::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (journal, parked, start) = (journal.clone(), parked.clone(), start.clone());
            tokio::spawn(async move {
                let verdict = if i % 2 == 0 {
                    Verdict::Approve
                } else {
                    Verdict::Deny
                };
                start.wait().await;
                (
                    verdict,
                    decide_raw(journal.as_ref(), &parked, verdict).await,
                )
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut losers = 0;
    for task in tasks {
        match task.await.expect("task") {
            (verdict, Transition::Applied(a)) => winners.push((verdict, a)),
            (_, Transition::Unchanged(_)) => losers += 1,
            (_, other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one decision applies");
    assert_eq!(losers, TASKS - 1);
    let (verdict, winner) = winners.remove(0);
    let expected = match verdict {
        Verdict::Approve => ApprovalState::Approved,
        Verdict::Deny => ApprovalState::Denied,
    };
    assert_eq!(winner.state, expected);
    assert_eq!(stored(journal.as_ref(), &parked.approval_id).await, winner);
    assert_eq!(intact_count(journal.as_ref()).await, before + 1);
    let decisions = journal
        .records()
        .await
        .expect("records")
        .into_iter()
        .filter(|r| r.event.phase == Phase::Decided)
        .count();
    assert_eq!(decisions, 1);
}

/// A 2-of-N quorum decided through [`approval::decide`] by three distinct approvers, each
/// delivering four times at once: exactly two distinct approvals are counted (one record
/// `counted`, one `approved` saying 2 of 2), the approval is `approved` once, every other
/// delivery changes nothing, and the chain holds exactly those two decision records.
pub async fn concurrent_quorum_approvals_count_each_approver_once(journal: Arc<dyn ApprovalStore>) {
    const APPROVERS: [&str; 3] = ["alice", "bob", "carol"];
    const DELIVERIES: usize = 4;
    let now = sallyport_core::clock::now_ms();
    let mut parked = sample_approval("ses_quorum", &"8".repeat(64), now, now + HOUR_MS);
    parked.required_approvals = 2;
    park(journal.as_ref(), &parked).await;
    let before = intact_count(journal.as_ref()).await;
    let start = Arc::new(tokio::sync::Barrier::new(APPROVERS.len() * DELIVERIES));
    let tasks: Vec<_> = (0..APPROVERS.len() * DELIVERIES)
        .map(|i| {
            let (journal, id, start) = (journal.clone(), parked.approval_id.clone(), start.clone());
            let who = APPROVERS[i % APPROVERS.len()];
            tokio::spawn(async move {
                start.wait().await;
                let decider = Decider::new(who, if i % 2 == 0 { "cli" } else { "webhook" });
                approval::decide(journal.as_ref(), &id, Verdict::Approve, &decider, None)
                    .await
                    .expect("decide")
            })
        })
        .collect();
    let mut recorded = Vec::new();
    for task in tasks {
        if let approval::Decided::Recorded(a) = task.await.expect("task") {
            recorded.push(a);
        }
    }
    assert_eq!(
        recorded.len(),
        2,
        "two distinct approvals land: {recorded:#?}"
    );
    let now_stored = stored(journal.as_ref(), &parked.approval_id).await;
    assert_eq!(now_stored.state, ApprovalState::Approved);
    let counted: Vec<&str> = now_stored
        .approvals
        .iter()
        .map(|a| a.decider.by.as_str())
        .collect();
    assert_eq!(counted.len(), 2, "{counted:?}");
    assert_ne!(counted[0], counted[1], "distinct approvers");
    assert_eq!(
        now_stored.decision.as_ref().map(|d| d.decider.by.as_str()),
        Some(counted[1]),
        "the approval that completed the quorum is the decision"
    );
    assert_eq!(intact_count(journal.as_ref()).await, before + 2);
    let notes: Vec<ApprovalNote> = journal
        .records()
        .await
        .expect("records")
        .into_iter()
        .filter(|r| r.event.phase == Phase::Decided)
        .filter_map(|r| r.event.approval)
        .collect();
    type Step = (ApprovalStep, Option<u32>, Option<u32>, Option<String>);
    let steps: Vec<Step> = notes
        .into_iter()
        .map(|n| (n.step, n.approvals, n.required, n.by))
        .collect();
    assert_eq!(
        steps,
        [
            (
                ApprovalStep::Counted,
                Some(1),
                Some(2),
                Some(counted[0].to_owned())
            ),
            (
                ApprovalStep::Approved,
                Some(2),
                Some(2),
                Some(counted[1].to_owned())
            ),
        ]
    );
}

/// A reconciler's record for `intent`'s attempt: finished, with `status`.
fn settle_event(intent: &Intent, status: Status) -> AuditEvent {
    let mut event = AuditEvent::for_bench(intent);
    event.status = status;
    event.reason = Some("settled by the conformance suite".to_owned());
    event
}

/// `settle_unresolved` appends the record that closes an open attempt; a second settle, a
/// settle of an attempt closed by a plain append and a settle of an attempt the journal
/// never saw all answer `false` and write nothing.
pub async fn settling_an_unresolved_attempt_appends_once_and_only_while_open(
    journal: Arc<dyn ApprovalStore>,
) {
    let open = Intent::for_bench(true);
    journal.write_intent(&open).await.expect("intent");
    let closed = Intent::for_bench(true);
    journal.write_intent(&closed).await.expect("intent");
    journal
        .append(AuditEvent::for_bench(&closed))
        .await
        .expect("append");
    assert_eq!(intact_count(journal.as_ref()).await, 1);

    let first = settle_event(&open, Status::Rejected);
    let receipt = first.receipt_id.clone();
    assert!(
        journal
            .settle_unresolved(&open.attempt_id, first)
            .await
            .expect("settle"),
        "an open attempt is settled"
    );
    assert_eq!(intact_count(journal.as_ref()).await, 2);
    let last = last_step(journal.as_ref()).await;
    assert_eq!(last.event.receipt_id, receipt);
    assert_eq!(last.event.status, Status::Rejected);
    assert!(journal.unresolved().await.expect("unresolved").is_empty());

    let again = settle_event(&open, Status::Completed);
    assert!(
        !journal
            .settle_unresolved(&open.attempt_id, again)
            .await
            .expect("settle again"),
        "a settled attempt is not settled twice"
    );
    assert!(
        !journal
            .settle_unresolved(&closed.attempt_id, settle_event(&closed, Status::Completed))
            .await
            .expect("settle closed"),
        "an attempt closed by its own record is not settled"
    );
    let stranger = Intent::for_bench(true);
    assert!(
        !journal
            .settle_unresolved(
                &stranger.attempt_id,
                settle_event(&stranger, Status::Completed)
            )
            .await
            .expect("settle unknown"),
        "an attempt without a row is not settled"
    );
    assert_eq!(
        intact_count(journal.as_ref()).await,
        2,
        "nothing more was written"
    );
}

/// Eight tasks settle one attempt at once, each with its own record: exactly one appends.
pub async fn concurrent_settles_of_one_attempt_append_exactly_once(
    journal: Arc<dyn ApprovalStore>,
) {
    let intent = Intent::for_bench(true);
    journal.write_intent(&intent).await.expect("intent");
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let journal = Arc::clone(&journal);
            let event = settle_event(&intent, Status::Completed);
            let attempt = intent.attempt_id.clone();
            tokio::spawn(async move { journal.settle_unresolved(&attempt, event).await })
        })
        .collect();
    let mut appended = 0;
    for task in tasks {
        if task.await.expect("task").expect("settle") {
            appended += 1;
        }
    }
    assert_eq!(appended, 1, "exactly one settle appends");
    assert_eq!(intact_count(journal.as_ref()).await, 1);
    let closing = journal
        .records()
        .await
        .expect("records")
        .into_iter()
        .filter(|r| r.event.attempt_id == intent.attempt_id)
        .count();
    assert_eq!(closing, 1);
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
}

/// A call's last record is handed over on the first poll of its write (see [`Journal`](sallyport_core::journal::Journal)):
/// an append, an observe call's record and a parked approval, each polled once and then
/// dropped, are all written, once each. The executor relies on it and records no
/// cancellation for such a call.
pub async fn a_last_record_dropped_after_its_first_poll_is_written(
    journal: Arc<dyn ApprovalStore>,
) {
    use std::task::{Context, Waker};

    let mutating = Intent::for_bench(true);
    journal.write_intent(&mutating).await.expect("intent");
    let observed = Intent::for_bench(false);
    let now = sallyport_core::clock::now_ms();
    let parked = sample_approval("ses_dropped", &"7".repeat(64), now, now + HOUR_MS);
    let mut cx = Context::from_waker(Waker::noop());
    {
        let mut append = journal.append(AuditEvent::for_bench(&mutating));
        let _ = append.as_mut().poll(&mut cx);
    }
    {
        let mut observe =
            journal.append_with_intent(observed.clone(), AuditEvent::for_bench(&observed));
        let _ = observe.as_mut().poll(&mut cx);
    }
    {
        let mut park = journal.park_approval(&parked, parked_event(&parked));
        let _ = park.as_mut().poll(&mut cx);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let records = loop {
        let records = journal.records().await.expect("records");
        if records.len() >= 3 || Instant::now() > deadline {
            break records;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let attempts: Vec<&AttemptId> = records.iter().map(|r| &r.event.attempt_id).collect();
    assert_eq!(
        attempts,
        [
            &mutating.attempt_id,
            &observed.attempt_id,
            &parked.attempt_id
        ],
        "each dropped write was carried out, once, in order"
    );
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
    assert_eq!(
        stored(journal.as_ref(), &parked.approval_id).await.state,
        ApprovalState::Awaiting
    );
    assert_eq!(intact_count(journal.as_ref()).await, 3);
}

/// "Approve and remember" approves the parked call once and stores a remembered approval
/// that reads back as made, bound to the call's action and definition hash; it is listed by
/// action, newest first; it covers the same request and not another definition; a
/// revocation applies once (the second is `Unchanged`), is audited, and from then on it
/// covers nothing. An unknown id is `NotFound`. Refused remembers decide nothing.
pub async fn remembered_approvals_are_stored_listed_bound_and_revoked_once(
    journal: Arc<dyn ApprovalStore>,
) {
    use sallyport_core::approval::{CoveredCall, RememberChoice, RememberScope, Revoked};
    let now = sallyport_core::clock::now_ms();
    let fingerprint = "7".repeat(64);
    let parked = sample_approval("ses_remember", &fingerprint, now, now + HOUR_MS);
    park(journal.as_ref(), &parked).await;
    let alice = Decider::new("alice", "cli");
    // A window longer than 30 days is refused before anything is decided.
    let too_long = approval::remember_under(
        journal.as_ref(),
        None,
        &parked.approval_id,
        &alice,
        None,
        RememberChoice::Window(Duration::from_secs(31 * 24 * 3600)),
    )
    .await
    .expect_err("refused");
    assert!(
        matches!(too_long, approval::ApprovalError::NotRememberable(_)),
        "{too_long:?}"
    );
    assert_eq!(
        stored(journal.as_ref(), &parked.approval_id).await.state,
        ApprovalState::Awaiting
    );
    let before = intact_count(journal.as_ref()).await;
    let outcome = approval::remember_under(
        journal.as_ref(),
        None,
        &parked.approval_id,
        &alice,
        Some("routine"),
        RememberChoice::ExactArguments,
    )
    .await
    .expect("remember");
    let remembered = outcome.remembered.expect("remembered");
    assert!(matches!(&outcome.decided, Decided::Recorded(a) if a.state == ApprovalState::Approved));
    assert_eq!(
        remembered.scope,
        RememberScope::ExactArguments {
            fingerprint: fingerprint.clone()
        }
    );
    assert_eq!(remembered.definition_hash, parked.definition_hash);
    assert_eq!(remembered.source, parked.approval_id);
    // The decision's record, then the remembered one.
    assert_eq!(intact_count(journal.as_ref()).await, before + 2);
    let last = last_step(journal.as_ref()).await;
    let note = last.event.approval.clone().expect("a note");
    assert_eq!(note.step, ApprovalStep::Remembered);
    assert_eq!(note.remembered.as_ref(), Some(&remembered.remembered_id));
    assert_eq!(note.by.as_deref(), Some("alice"));
    assert_eq!(note.scope.as_deref(), Some("exact arguments"));

    let listed = journal
        .remembered_approvals(Some("pay_invoice"))
        .await
        .expect("list");
    assert_eq!(
        listed,
        std::slice::from_ref(&remembered),
        "read back as made"
    );
    assert!(
        journal
            .remembered_approvals(Some("refund"))
            .await
            .expect("list")
            .is_empty()
    );
    let t = sallyport_core::clock::now_ms();
    let same = CoveredCall::new(
        "pay_invoice",
        &parked.definition_hash,
        "ses_other",
        &fingerprint,
        t,
    );
    assert!(listed[0].covers(&same));
    let other_hash = "e".repeat(64);
    let drifted = CoveredCall::new("pay_invoice", &other_hash, "ses_other", &fingerprint, t);
    assert!(
        !listed[0].covers(&drifted),
        "another definition is not covered"
    );

    let bob = Decider::new("bob", "console");
    let first = approval::revoke_remembered(journal.as_ref(), &remembered.remembered_id, &bob)
        .await
        .expect("revoke");
    let Revoked::Applied(revoked) = first else {
        panic!("expected Applied, got {first:?}");
    };
    assert_eq!(
        revoked.revoked.as_ref().map(|r| r.by.by.as_str()),
        Some("bob")
    );
    let last = last_step(journal.as_ref()).await;
    let note = last.event.approval.expect("a note");
    assert_eq!(note.step, ApprovalStep::Revoked);
    assert_eq!(note.by.as_deref(), Some("bob"));
    let count = intact_count(journal.as_ref()).await;
    let again = approval::revoke_remembered(journal.as_ref(), &remembered.remembered_id, &alice)
        .await
        .expect("revoke again");
    assert!(
        matches!(&again, Revoked::Unchanged(r) if r.revoked.as_ref().is_some_and(|v| v.by.by == "bob")),
        "{again:?}"
    );
    assert_eq!(
        intact_count(journal.as_ref()).await,
        count,
        "nothing appended"
    );
    let listed = journal.remembered_approvals(None).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert!(
        !listed[0].covers(&same),
        "a revoked approval covers nothing"
    );
    let unknown = approval::revoke_remembered(
        journal.as_ref(),
        &approval::RememberedId::from_stored("rem_unknown"),
        &bob,
    )
    .await
    .expect("revoke unknown");
    assert_eq!(unknown, Revoked::NotFound);

    // A second one, made later, is listed first.
    let later = sample_approval("ses_remember", &"6".repeat(64), now + 1, now + HOUR_MS);
    park(journal.as_ref(), &later).await;
    let carol = Decider::new("carol", "cli");
    let second = approval::remember_under(
        journal.as_ref(),
        None,
        &later.approval_id,
        &carol,
        None,
        RememberChoice::Session,
    )
    .await
    .expect("remember")
    .remembered
    .expect("remembered");
    let listed = journal.remembered_approvals(None).await.expect("list");
    let ids: Vec<_> = listed.iter().map(|r| r.remembered_id.clone()).collect();
    assert_eq!(ids, [second.remembered_id, remembered.remembered_id]);
    intact_count(journal.as_ref()).await;
}

/// Revocations racing from several front ends: exactly one applies, and exactly one
/// `revoked` record is appended.
pub async fn concurrent_revocations_apply_exactly_once(journal: Arc<dyn ApprovalStore>) {
    use sallyport_core::approval::{RememberChoice, Revoked};
    const RACERS: usize = 8;
    let now = sallyport_core::clock::now_ms();
    let parked = sample_approval("ses_revoke", &"5".repeat(64), now, now + HOUR_MS);
    park(journal.as_ref(), &parked).await;
    let remembered = approval::remember_under(
        journal.as_ref(),
        None,
        &parked.approval_id,
        &Decider::new("alice", "cli"),
        None,
        RememberChoice::Window(Duration::from_secs(3600)),
    )
    .await
    .expect("remember")
    .remembered
    .expect("remembered");
    let before = intact_count(journal.as_ref()).await;
    let start = Arc::new(tokio::sync::Barrier::new(RACERS));
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let (journal, id, start) = (
                journal.clone(),
                remembered.remembered_id.clone(),
                start.clone(),
            );
            tokio::spawn(async move {
                start.wait().await;
                let by = Decider::new(format!("op{i}"), "console");
                approval::revoke_remembered(journal.as_ref(), &id, &by)
                    .await
                    .expect("revoke")
            })
        })
        .collect();
    let mut applied = 0;
    for task in tasks {
        match task.await.expect("task") {
            Revoked::Applied(_) => applied += 1,
            Revoked::Unchanged(_) => {}
            Revoked::NotFound => panic!("not found"),
        }
    }
    assert_eq!(applied, 1, "one revocation applies");
    assert_eq!(intact_count(journal.as_ref()).await, before + 1);
}
