//! An in-memory journal for tests and ephemeral use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use serde_json::Value;

use super::chain::{AttemptRow, ChainCheck, ChainRow};
use super::{
    ApprovalStore, AttemptId, AuditEvent, AuditRecord, DecisionSignal, DecisionWatch, GENESIS_HASH,
    Intent, Journal, JournalError, UnresolvedAttempt, VerifyReport, chain_hash, now,
};
use crate::journal::IdempotencyKey;
use crate::outcome::ActionResult;
use sallyport_vocab::approval::{
    Approval, ApprovalDecision, ApprovalFilter, ApprovalId, Claim, RememberedApproval,
    RememberedId, Revocation, Revoked, Transition,
};

/// A journal that keeps everything in memory, and loses it with the process: for tests,
/// demos and ephemeral executors.
///
/// It keeps the guarantees of a [`Journal`] and an [`ApprovalStore`] within one process:
/// one hash chain made with [`chain_hash`] and checked with [`ChainCheck`] like the other
/// backends', attempt rows closed by their records, and approvals changed by compare-and-set
/// transitions, each with its audit record, under one lock. "Durable" means only "stored"
/// here: nothing survives the process, and nothing is signed ([`Journal::signed_heads`] is
/// empty). Clones share the same journal. A decision wakes the watches of
/// [`ApprovalStore::watch_decisions`] at once, in process.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use sallyport_kernel::journal::{AuditEvent, Intent, Journal, MemoryJournal};
/// let journal = MemoryJournal::new();
/// let intent = Intent::for_bench(true);
/// journal.write_intent(&intent).await?;
/// journal.append(AuditEvent::for_bench(&intent)).await?;
/// assert!(journal.verify().await?.is_intact());
/// assert!(journal.unresolved().await?.is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryJournal {
    state: Arc<Mutex<State>>,
    /// Told of every decision stored.
    decisions: DecisionSignal,
}

/// One attempt row.
#[derive(Debug)]
struct Attempt {
    attempt_id: AttemptId,
    action: String,
    session_id: String,
    idempotency_key: IdempotencyKey,
    arguments: Value,
    phase: String,
    status: Option<String>,
    dispatches: u32,
    created_at: String,
}

/// One stored approval.
#[derive(Debug)]
struct StoredApproval {
    approval: Approval,
}

#[derive(Debug, Default)]
struct State {
    /// Attempt rows, oldest first.
    attempts: Vec<Attempt>,
    /// Attempt id → index in `attempts`.
    by_attempt: HashMap<String, usize>,
    /// Idempotency keys taken.
    keys: std::collections::HashSet<String>,
    /// The chain, as stored rows (event JSON byte for byte as hashed).
    chain: Vec<ChainRow>,
    /// Attempts some record closes.
    closed: std::collections::HashSet<String>,
    /// Approvals, in the order they were parked.
    approvals: Vec<StoredApproval>,
    /// Approval id → index in `approvals`.
    by_approval: HashMap<String, usize>,
    /// Remembered approvals, oldest first.
    remembered: Vec<RememberedApproval>,
    /// Signed checkpoints, oldest first.
    checkpoints: Vec<super::checkpoint::Checkpoint>,
}

impl MemoryJournal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves no half-made change: every change checks
        // before it writes.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn write_error(e: serde_json::Error) -> JournalError {
    JournalError::Write(Box::new(e))
}

fn read_error(e: serde_json::Error) -> JournalError {
    JournalError::Read(Box::new(e))
}

impl State {
    fn head(&self) -> (u64, &str) {
        self.chain.last().map_or((0, GENESIS_HASH), |r| {
            (u64::try_from(r.seq).unwrap_or(0), r.hash.as_str())
        })
    }

    /// Whether `intent` may get a row: its attempt id and its key are both free.
    fn check_new(&self, intent: &Intent) -> Result<(), JournalError> {
        if self.by_attempt.contains_key(intent.attempt_id.as_str())
            || self.keys.contains(intent.idempotency_key.as_str())
        {
            return Err(JournalError::DuplicateKey);
        }
        Ok(())
    }

    fn insert_attempt(&mut self, intent: &Intent) {
        self.keys.insert(intent.idempotency_key.as_str().to_owned());
        self.by_attempt
            .insert(intent.attempt_id.as_str().to_owned(), self.attempts.len());
        self.attempts.push(Attempt {
            attempt_id: intent.attempt_id.clone(),
            action: intent.action.clone(),
            session_id: intent.session_id.clone(),
            idempotency_key: intent.idempotency_key.clone(),
            arguments: intent.arguments.clone(),
            phase: "intent_written".to_owned(),
            status: None,
            dispatches: 0,
            created_at: now(),
        });
    }

    /// The event's JSON, made before anything changes (so a failure writes nothing).
    fn json(event: &AuditEvent) -> Result<String, JournalError> {
        serde_json::to_string(event).map_err(write_error)
    }

    /// Appends `event` (already serialized as `json`) and closes its attempt.
    fn append(&mut self, event: AuditEvent, json: String) -> AuditRecord {
        let (count, prev) = self.head();
        let prev_hash = prev.to_owned();
        let seq = count + 1;
        let hash = chain_hash(&prev_hash, seq, &json);
        self.chain.push(ChainRow::new(
            i64::try_from(seq).unwrap_or(i64::MAX),
            prev_hash.clone(),
            hash.clone(),
            json,
        ));
        self.closed.insert(event.attempt_id.as_str().to_owned());
        if let Some(&i) = self.by_attempt.get(event.attempt_id.as_str()) {
            let row = &mut self.attempts[i];
            row.phase = event.phase.as_str().to_owned();
            row.status = Some(event.status.as_str().to_owned());
            row.dispatches = row.dispatches.max(event.dispatches);
        }
        AuditRecord {
            shard: super::checkpoint::DEFAULT_SHARD.to_owned(),
            seq,
            prev_hash,
            hash,
            event,
        }
    }

    fn approval(&self, id: &ApprovalId) -> Option<&StoredApproval> {
        self.by_approval
            .get(id.as_str())
            .map(|&i| &self.approvals[i])
    }

    fn approval_mut(&mut self, id: &ApprovalId) -> Option<&mut StoredApproval> {
        self.by_approval
            .get(id.as_str())
            .map(|&i| &mut self.approvals[i])
    }
}

#[async_trait]
impl Journal for MemoryJournal {
    async fn write_intent(&self, intent: &Intent) -> Result<(), JournalError> {
        let mut state = self.lock();
        state.check_new(intent)?;
        state.insert_attempt(intent);
        Ok(())
    }

    fn note_dispatch(&self, attempt: &AttemptId, n: u32) {
        let mut state = self.lock();
        if let Some(&i) = state.by_attempt.get(attempt.as_str()) {
            let row = &mut state.attempts[i];
            row.phase = "dispatched".to_owned();
            row.dispatches = row.dispatches.max(n);
        }
    }

    async fn append(&self, event: AuditEvent) -> Result<AuditRecord, JournalError> {
        let json = State::json(&event)?;
        Ok(self.lock().append(event, json))
    }

    async fn append_with_intent(
        &self,
        intent: Intent,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError> {
        let json = State::json(&event)?;
        let mut state = self.lock();
        state.check_new(&intent)?;
        state.insert_attempt(&intent);
        Ok(state.append(event, json))
    }

    fn append_detached(&self, event: AuditEvent) {
        match State::json(&event) {
            Ok(json) => {
                self.lock().append(event, json);
            }
            Err(e) => tracing::error!(error = %e, "detached audit append failed"),
        }
    }

    async fn verify(&self) -> Result<VerifyReport, JournalError> {
        let state = self.lock();
        let mut check = ChainCheck::new(state.chain.iter().cloned());
        if check.is_intact() {
            check.check_attempts(state.attempts.iter().map(|a| {
                AttemptRow::new(
                    a.attempt_id.as_str().to_owned(),
                    a.phase.clone(),
                    a.status.clone(),
                )
            }));
        }
        Ok(check.into_report())
    }

    async fn chain_rows(&self) -> Result<Vec<ChainRow>, JournalError> {
        Ok(self.lock().chain.clone())
    }

    async fn checkpoints(&self) -> Result<Vec<super::checkpoint::Checkpoint>, JournalError> {
        Ok(self.lock().checkpoints.clone())
    }

    async fn store_checkpoint(
        &self,
        checkpoint: &super::checkpoint::Checkpoint,
    ) -> Result<(), JournalError> {
        self.lock().checkpoints.push(checkpoint.clone());
        Ok(())
    }

    async fn records(&self) -> Result<Vec<AuditRecord>, JournalError> {
        let rows = self.lock().chain.clone();
        rows.into_iter()
            .map(|row| row.into_record().map_err(read_error))
            .collect()
    }

    async fn unresolved(&self) -> Result<Vec<UnresolvedAttempt>, JournalError> {
        let state = self.lock();
        Ok(state
            .attempts
            .iter()
            .filter(|a| !state.closed.contains(a.attempt_id.as_str()))
            .map(|a| {
                let row = AttemptRow::new(a.attempt_id.as_str().to_owned(), a.phase.clone(), None);
                UnresolvedAttempt {
                    attempt_id: a.attempt_id.clone(),
                    action: a.action.clone(),
                    session_id: a.session_id.clone(),
                    idempotency_key: a.idempotency_key.clone(),
                    phase: row.unresolved_phase(),
                    dispatches: a.dispatches,
                    arguments: a.arguments.clone(),
                    created_at: a.created_at.clone(),
                    // No owner or lease: the reconciler goes by the attempt's age.
                    owner: None,
                    lease_until_ms: None,
                }
            })
            .collect())
    }

    async fn settle_unresolved(
        &self,
        attempt: &AttemptId,
        event: AuditEvent,
    ) -> Result<bool, JournalError> {
        let json = State::json(&event)?;
        let mut state = self.lock();
        let open = state.by_attempt.contains_key(attempt.as_str())
            && !state.closed.contains(attempt.as_str());
        if !open || event.attempt_id != *attempt {
            return Ok(false);
        }
        state.append(event, json);
        Ok(true)
    }

    fn approval_store(self: Arc<Self>) -> Option<Arc<dyn ApprovalStore>> {
        Some(self)
    }
}

#[async_trait]
impl ApprovalStore for MemoryJournal {
    async fn park_approval(
        &self,
        approval: &Approval,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError> {
        let json = State::json(&event)?;
        let mut stored = approval.clone();
        stored.park();
        let mut state = self.lock();
        if state.by_approval.contains_key(stored.approval_id.as_str()) {
            return Err(JournalError::DuplicateKey);
        }
        let index = state.approvals.len();
        state
            .by_approval
            .insert(stored.approval_id.as_str().to_owned(), index);
        state.approvals.push(StoredApproval { approval: stored });
        Ok(state.append(event, json))
    }

    async fn approval(&self, id: &ApprovalId) -> Result<Option<Approval>, JournalError> {
        Ok(self.lock().approval(id).map(|s| s.approval.clone()))
    }

    async fn approvals(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>, JournalError> {
        let state = self.lock();
        let mut list: Vec<&Approval> = state
            .approvals
            .iter()
            .map(|s| &s.approval)
            .filter(|a| filter.states.is_empty() || filter.states.contains(&a.state))
            .filter(|a| {
                filter
                    .session_id
                    .as_deref()
                    .is_none_or(|s| a.session.id().as_str() == s)
            })
            .filter(|a| {
                filter
                    .fingerprint
                    .as_deref()
                    .is_none_or(|f| a.fingerprint == f)
            })
            .collect();
        // Newest first, then by id, newest first (as the SQL backends order them).
        list.sort_by(|a, b| {
            b.created_at_ms
                .cmp(&a.created_at_ms)
                .then_with(|| b.approval_id.as_str().cmp(a.approval_id.as_str()))
        });
        Ok(list
            .into_iter()
            .take(filter.limit.unwrap_or(usize::MAX))
            .cloned()
            .collect())
    }

    async fn decide_approval(
        &self,
        id: &ApprovalId,
        decision: &ApprovalDecision,
        event: AuditEvent,
    ) -> Result<Transition, JournalError> {
        let json = State::json(&event)?;
        let mut state = self.lock();
        let Some(stored) = state.approval_mut(id) else {
            return Ok(Transition::NotFound);
        };
        if !stored.approval.decide(decision) {
            return Ok(Transition::Unchanged(stored.approval.clone()));
        }
        let next = stored.approval.clone();
        state.append(event, json);
        drop(state);
        self.decisions.notify();
        Ok(Transition::Applied(next))
    }

    async fn expire_approval(
        &self,
        id: &ApprovalId,
        now_ms: u64,
        event: AuditEvent,
    ) -> Result<Transition, JournalError> {
        let json = State::json(&event)?;
        let mut state = self.lock();
        let Some(stored) = state.approval_mut(id) else {
            return Ok(Transition::NotFound);
        };
        if !stored.approval.expire(now_ms) {
            return Ok(Transition::Unchanged(stored.approval.clone()));
        }
        let next = stored.approval.clone();
        state.append(event, json);
        Ok(Transition::Applied(next))
    }

    async fn claim_approval(
        &self,
        id: &ApprovalId,
        owner: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Transition, JournalError> {
        let mut state = self.lock();
        let Some(stored) = state.approval_mut(id) else {
            return Ok(Transition::NotFound);
        };
        if !stored.approval.take_claim(owner, now_ms, lease_ms) {
            return Ok(Transition::Unchanged(stored.approval.clone()));
        }
        Ok(Transition::Applied(stored.approval.clone()))
    }

    async fn begin_approved(
        &self,
        id: &ApprovalId,
        claim: &Claim,
        intent: &Intent,
    ) -> Result<(), JournalError> {
        let mut state = self.lock();
        let Some(stored) = state.approval(id) else {
            return Err(JournalError::Fenced);
        };
        let mut next = stored.approval.clone();
        if !next.begin_execution(claim, &intent.attempt_id) {
            return Err(JournalError::Fenced);
        }
        state.check_new(intent)?;
        if let Some(stored) = state.approval_mut(id) {
            stored.approval = next;
        }
        state.insert_attempt(intent);
        Ok(())
    }

    async fn settle_approval(
        &self,
        id: &ApprovalId,
        claim: &Claim,
        result: &ActionResult,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError> {
        let json = State::json(&event)?;
        let mut state = self.lock();
        let Some(stored) = state.approval_mut(id) else {
            return Err(JournalError::Fenced);
        };
        if !stored.approval.settle(claim, result) {
            return Err(JournalError::Fenced);
        }
        Ok(state.append(event, json))
    }

    fn watch_decisions(&self) -> DecisionWatch {
        self.decisions.watch()
    }

    async fn store_remembered(&self, remembered: &RememberedApproval) -> Result<(), JournalError> {
        let mut state = self.lock();
        if state
            .remembered
            .iter()
            .any(|r| r.remembered_id == remembered.remembered_id)
        {
            return Err(JournalError::DuplicateKey);
        }
        state.remembered.push(remembered.clone());
        Ok(())
    }

    async fn remembered_approvals(
        &self,
        action: Option<&str>,
    ) -> Result<Vec<RememberedApproval>, JournalError> {
        let state = self.lock();
        Ok(state
            .remembered
            .iter()
            .rev()
            .filter(|r| action.is_none_or(|a| r.action == a))
            .cloned()
            .collect())
    }

    async fn revoke_remembered(
        &self,
        id: &RememberedId,
        revocation: &Revocation,
    ) -> Result<Revoked, JournalError> {
        let mut state = self.lock();
        let Some(found) = state.remembered.iter_mut().find(|r| &r.remembered_id == id) else {
            return Ok(Revoked::NotFound);
        };
        Ok(if found.revoke(revocation) {
            Revoked::Applied(found.clone())
        } else {
            Revoked::Unchanged(found.clone())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn records_link_up_and_close_their_attempts() {
        let journal = MemoryJournal::new();
        let first = Intent::for_bench(true);
        journal.write_intent(&first).await.expect("intent");
        journal.note_dispatch(&first.attempt_id, 1);
        assert_eq!(journal.unresolved().await.expect("open").len(), 1);
        let a = journal
            .append(AuditEvent::for_bench(&first))
            .await
            .expect("append");
        let second = Intent::for_bench(false);
        let b = journal
            .append_with_intent(second.clone(), AuditEvent::for_bench(&second))
            .await
            .expect("append with intent");
        assert_eq!((a.seq, b.seq), (1, 2));
        assert_eq!(a.prev_hash, GENESIS_HASH);
        assert_eq!(b.prev_hash, a.hash);
        let json = serde_json::to_string(&b.event).expect("json");
        assert_eq!(b.hash, chain_hash(&a.hash, 2, &json));
        let report = journal.verify().await.expect("verify");
        assert!(report.is_intact(), "{report:?}");
        assert_eq!(report.head.count, 2);
        assert!(journal.unresolved().await.expect("open").is_empty());
        assert_eq!(journal.records().await.expect("records"), vec![a, b]);
    }

    #[tokio::test]
    async fn a_reused_key_is_refused_and_writes_nothing() {
        let journal = MemoryJournal::new();
        let intent = Intent::for_bench(true);
        journal.write_intent(&intent).await.expect("intent");
        let mut again = Intent::for_bench(true);
        again.idempotency_key = intent.idempotency_key.clone();
        assert!(matches!(
            journal
                .append_with_intent(again.clone(), AuditEvent::for_bench(&again))
                .await,
            Err(JournalError::DuplicateKey)
        ));
        assert!(journal.records().await.expect("records").is_empty());
        assert_eq!(journal.unresolved().await.expect("open").len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_decision_wakes_a_watch_made_on_a_clone_at_once() {
        use crate::action::{ConsentRule, EffectClass, Externality};
        use sallyport_vocab::approval::{ApprovalState, Decider, Verdict};
        let journal = MemoryJournal::new();
        let now = crate::clock::now_ms();
        let parked: Approval = serde_json::from_value(serde_json::json!({
            "approval_id": ApprovalId::generate(),
            "attempt_id": AttemptId::generate(),
            "action": "pay_invoice",
            "summary": "Pay one invoice.",
            "effect": EffectClass::ExternalCommitment,
            "externality": Externality::External,
            "rule": ConsentRule::PerCall,
            "data_classes": [],
            "session": crate::session::Session::new("ses_unit"),
            "objects": [],
            "note": "the agent's words",
            "request": "POST http://127.0.0.1:1/v1/pay",
            "fingerprint": "f".repeat(64),
            "definition_hash": "d".repeat(64),
            "definition_status": "no definition guard configured",
            "arguments": {"invoice_id": "inv_1"},
            "created_at_ms": now,
            "expires_at_ms": now + 60_000,
            "state": ApprovalState::Awaiting,
        }))
        .expect("the sample is an approval");
        let mut event = AuditEvent::for_bench(&Intent::for_bench(false));
        event.attempt_id = parked.attempt_id.clone();
        journal
            .park_approval(&parked, event.clone())
            .await
            .expect("parked");
        let mut watch = journal.clone().watch_decisions();
        let start = tokio::time::Instant::now();
        assert!(
            !watch.wait(Duration::from_secs(10)).await,
            "parking decides nothing"
        );
        let decision = ApprovalDecision::new(Verdict::Approve, Decider::new("alice", "unit"), None);
        let decided = journal
            .decide_approval(&parked.approval_id, &decision, event.clone())
            .await
            .expect("decided");
        assert!(matches!(decided, Transition::Applied(_)));
        assert!(watch.wait(Duration::from_secs(3600)).await);
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(10),
            "woken without waiting"
        );
        // A decision that changes nothing wakes nobody.
        let again = journal
            .decide_approval(&parked.approval_id, &decision, event)
            .await
            .expect("decided again");
        assert!(matches!(again, Transition::Unchanged(_)));
        assert!(!watch.wait(Duration::from_secs(10)).await);
    }

    #[test]
    fn it_says_it_is_an_approval_store_and_clones_share_it() {
        let journal = MemoryJournal::new();
        let clone = journal.clone();
        clone.lock().keys.insert("k".to_owned());
        assert!(journal.lock().keys.contains("k"));
        let shared: Arc<dyn Journal> = Arc::new(journal);
        assert!(shared.approval_store().is_some());
    }
}
