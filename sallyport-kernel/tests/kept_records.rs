//! Records kept through a journal outage, on the in-memory journal and a real SQLite file:
//! a state-changing call whose record the journal refuses after its request left answers
//! `record_pending`, and the executor writes that record (same attempt, its true outcome,
//! the requests counted) when the journal takes writes again, in the order the records
//! were kept; a record it gives up, or still keeps when it is dropped, has its attempt
//! released for the reconciler, which counts the request whose effect it found.
//!
//! The outage is injected by a journal wrapper in front of the real journal, switched off
//! by the channel the moment its request is sent (after the durable intent, before the
//! answer), as a database going away mid-call looks to the executor. A scripted channel:
//! these are pipeline tests; the PostgreSQL tests prove it over real HTTP and a real server.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sallyport_core::channel::{
    CallView, Channel, ChannelOutcome, DescribedRequest, Dispatch, PreparedRequest,
};
use sallyport_core::executor::{ReconcileOptions, ReconcileOutcome};
use sallyport_core::journal::{
    AttemptId, AuditEvent, AuditRecord, Intent, Journal, JournalError, MemoryJournal, Phase,
    SqliteJournal, UnresolvedAttempt, VerifyReport,
};
use sallyport_core::outcome::{ActionResult, Refusal};
use sallyport_core::{Action, Catalog, Executor, Session, Status};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Send one thing.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "send_thing", effect = reversible_change, consent = none,
         reconcile = "get_thing")]
#[channel(name = "test")]
#[allow(dead_code, reason = "read by the derive's schema only")]
struct SendThing {
    id: String,
}

/// Read one thing.
#[derive(Action, Deserialize, JsonSchema)]
#[action(name = "get_thing", effect = observe)]
#[channel(name = "test")]
#[allow(dead_code, reason = "read by the derive's schema only")]
struct GetThing {
    id: String,
}

/// A real journal behind two switches, intents and the rest: while one is off, its writes
/// fail as a journal whose database went away fails them (dispatch notes are lost), and
/// what is released is noted.
struct Switched {
    inner: Arc<dyn Journal>,
    intents_up: Arc<AtomicBool>,
    up: Arc<AtomicBool>,
    released: Mutex<Vec<AttemptId>>,
}

fn offline() -> JournalError {
    JournalError::Write(Box::new(std::io::Error::other("the journal is offline")))
}

impl Switched {
    fn is_up(&self) -> bool {
        self.up.load(Ordering::SeqCst)
    }

    /// The database is back (or, with `intents_only`, takes intents again and nothing else).
    fn restore(&self, intents_only: bool) {
        self.intents_up.store(true, Ordering::SeqCst);
        if !intents_only {
            self.up.store(true, Ordering::SeqCst);
        }
    }

    fn released(&self) -> Vec<AttemptId> {
        self.released
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl Journal for Switched {
    async fn write_intent(&self, intent: &Intent) -> Result<(), JournalError> {
        if !self.intents_up.load(Ordering::SeqCst) {
            return Err(offline());
        }
        self.inner.write_intent(intent).await
    }

    fn note_dispatch(&self, attempt: &AttemptId, n: u32) {
        if self.is_up() {
            self.inner.note_dispatch(attempt, n);
        }
    }

    async fn append(&self, event: AuditEvent) -> Result<AuditRecord, JournalError> {
        if !self.is_up() {
            return Err(offline());
        }
        self.inner.append(event).await
    }

    async fn append_with_intent(
        &self,
        intent: Intent,
        event: AuditEvent,
    ) -> Result<AuditRecord, JournalError> {
        if !self.is_up() {
            return Err(offline());
        }
        self.inner.append_with_intent(intent, event).await
    }

    fn append_detached(&self, event: AuditEvent) {
        if self.is_up() {
            self.inner.append_detached(event);
        }
    }

    async fn verify(&self) -> Result<VerifyReport, JournalError> {
        self.inner.verify().await
    }

    async fn records(&self) -> Result<Vec<AuditRecord>, JournalError> {
        self.inner.records().await
    }

    async fn unresolved(&self) -> Result<Vec<UnresolvedAttempt>, JournalError> {
        self.inner.unresolved().await
    }

    async fn settle_unresolved(
        &self,
        attempt: &AttemptId,
        event: AuditEvent,
    ) -> Result<bool, JournalError> {
        if !self.is_up() {
            return Err(offline());
        }
        self.inner.settle_unresolved(attempt, event).await
    }

    fn release_lease(&self, attempt: &AttemptId) {
        self.released
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(attempt.clone());
        self.inner.release_lease(attempt);
    }
}

/// Counts the requests it sends; a state-changing send can switch the journal off as it
/// leaves (before its dispatch note).
struct Counting {
    sends: AtomicU32,
    journal_up: [Arc<AtomicBool>; 2],
    cut_at_send: AtomicBool,
}

#[async_trait]
impl Channel for Counting {
    fn name(&self) -> &str {
        "test"
    }

    fn prepare(&self, call: &CallView<'_>) -> Result<Box<dyn PreparedRequest>, Refusal> {
        Ok(Box::new(DescribedRequest::new(
            format!("TEST {}", call.spec.name),
            call.arguments.clone(),
        )))
    }

    async fn dispatch(&self, call: Dispatch<'_>) -> ChannelOutcome {
        let permit = match call.context.permit().await {
            Ok(permit) => permit,
            Err(refused) => return refused,
        };
        let mutating = call.spec.name == "send_thing";
        if mutating && self.cut_at_send.load(Ordering::SeqCst) {
            for up in &self.journal_up {
                up.store(false, Ordering::SeqCst);
            }
        }
        permit.sending();
        if mutating {
            self.sends.fetch_add(1, Ordering::SeqCst);
        }
        ChannelOutcome::completed(json!({}))
    }
}

struct Rig {
    journal: Arc<Switched>,
    channel: Arc<Counting>,
    executor: Executor,
}

fn rig(inner: Arc<dyn Journal>, keep_for: Duration) -> Rig {
    let (intents_up, up) = (
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(true)),
    );
    let journal = Arc::new(Switched {
        inner,
        intents_up: Arc::clone(&intents_up),
        up: Arc::clone(&up),
        released: Mutex::default(),
    });
    let channel = Arc::new(Counting {
        sends: AtomicU32::new(0),
        journal_up: [intents_up, up],
        cut_at_send: AtomicBool::new(true),
    });
    let executor = Executor::builder(
        Catalog::builder()
            .action::<SendThing>()
            .action::<GetThing>()
            .build()
            .expect("catalog"),
    )
    .journal_arc(Arc::clone(&journal) as Arc<dyn Journal>)
    .channel_arc(Arc::clone(&channel) as Arc<dyn Channel>)
    .kept_records_for(keep_for)
    .build()
    .expect("executor");
    Rig {
        journal,
        channel,
        executor,
    }
}

fn memory() -> Arc<dyn Journal> {
    Arc::new(MemoryJournal::new())
}

fn sqlite(dir: &tempfile::TempDir) -> Arc<dyn Journal> {
    Arc::new(SqliteJournal::open(dir.path().join("journal.db")).expect("sqlite journal"))
}

async fn send(executor: &Executor, id: &str) -> ActionResult {
    executor
        .call("send_thing", json!({ "id": id }), &Session::new("outage"))
        .await
}

async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn assert_record_pending(r: &ActionResult) {
    assert_eq!(r.status, Status::Completed, "{}", r.to_json());
    assert!(r.record_pending, "{}", r.to_json());
    assert_eq!(r.receipt_id, None);
    assert!(r.to_json().contains("\"record_pending\":true"));
}

async fn kept_records_are_written_in_order_when_the_journal_is_back(inner: Arc<dyn Journal>) {
    let Rig {
        journal,
        channel,
        executor,
    } = rig(inner, Duration::from_secs(300));
    // Two calls whose journal goes away as their request leaves.
    let first = send(&executor, "t1").await;
    assert_record_pending(&first);
    journal.restore(true);
    let second = send(&executor, "t2").await;
    assert_record_pending(&second);
    assert_eq!(executor.kept_records(), 2);
    // While the journal is away, nothing else is sent: a new call is refused unsent.
    let refused = send(&executor, "t3").await;
    assert_eq!(refused.code_str(), Some("journal_unavailable"));
    assert!(!refused.record_pending, "nothing was sent: a plain refusal");
    assert_eq!(executor.kept_records(), 3, "its record is kept too");
    assert_eq!(channel.sends.load(Ordering::SeqCst), 2);

    channel.cut_at_send.store(false, Ordering::SeqCst);
    journal.restore(false);
    wait_until("the kept records are written", || {
        executor.kept_records() == 0
    })
    .await;
    let third = send(&executor, "t4").await;
    assert_eq!(third.status, Status::Completed);
    assert!(!third.record_pending);

    assert!(journal.unresolved().await.expect("unresolved").is_empty());
    let records = journal.records().await.expect("records");
    let seq_of = |r: &ActionResult| {
        let closing: Vec<&AuditRecord> = records
            .iter()
            .filter(|rec| rec.event.attempt_id == r.attempt_id)
            .collect();
        assert_eq!(closing.len(), 1, "one record for {}", r.attempt_id);
        let event = &closing[0].event;
        assert_eq!(
            (event.phase, event.status, event.dispatches),
            (Phase::Finished, Status::Completed, 1)
        );
        closing[0].seq
    };
    let (a, b, c) = (seq_of(&first), seq_of(&second), seq_of(&third));
    assert!(a < b && b < c, "in the order they were made: {a} {b} {c}");
    // The refusal's record was kept too, and written in its place.
    let refusal: Vec<&AuditRecord> = records
        .iter()
        .filter(|rec| rec.event.attempt_id == refused.attempt_id)
        .collect();
    assert_eq!(refusal.len(), 1);
    assert_eq!(
        (refusal[0].event.phase, refusal[0].event.dispatches),
        (Phase::Refused, 0)
    );
    assert!(b < refusal[0].seq && refusal[0].seq < c);
    let sent: u32 = records
        .iter()
        .filter(|r| r.event.action == "send_thing")
        .map(|r| r.event.dispatches)
        .sum();
    assert_eq!(sent, channel.sends.load(Ordering::SeqCst));
    assert!(journal.released().is_empty());
    assert!(journal.verify().await.expect("verify").is_intact());
}

async fn a_record_given_up_is_released_and_reconciled_with_its_send(inner: Arc<dyn Journal>) {
    let Rig {
        journal,
        channel,
        executor,
    } = rig(inner, Duration::from_millis(100));
    let sent = send(&executor, "t1").await;
    assert_record_pending(&sent);
    wait_until("the kept record is given up", || {
        executor.kept_records() == 0
    })
    .await;
    assert_eq!(journal.released(), vec![sent.attempt_id.clone()]);

    journal.restore(false);
    channel.cut_at_send.store(false, Ordering::SeqCst);
    let open = journal.unresolved().await.expect("unresolved");
    assert_eq!(open.len(), 1);
    // Its dispatch note was lost with the journal: the row says nothing was sent.
    assert_eq!(open[0].dispatches, 0);
    let reconciled = executor
        .reconcile(ReconcileOptions::new().with_min_age(Duration::ZERO))
        .await
        .expect("reconcile");
    assert_eq!(reconciled.len(), 1);
    assert_eq!(reconciled[0].outcome, ReconcileOutcome::Completed);
    let records = journal.records().await.expect("records");
    let closing: Vec<&AuditRecord> = records
        .iter()
        .filter(|r| r.event.attempt_id == sent.attempt_id)
        .collect();
    assert_eq!(closing.len(), 1);
    assert_eq!(
        closing[0].event.dispatches,
        channel.sends.load(Ordering::SeqCst),
        "the reconciler counts the request whose effect it found"
    );
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
}

async fn a_dropped_executor_releases_what_it_kept(inner: Arc<dyn Journal>) {
    let Rig {
        journal,
        channel: _channel,
        executor,
    } = rig(inner, Duration::from_secs(300));
    let sent = send(&executor, "t1").await;
    assert_record_pending(&sent);
    assert!(journal.released().is_empty());
    drop(executor);
    assert_eq!(journal.released(), vec![sent.attempt_id]);
}

#[tokio::test]
async fn memory_journal_kept_records_are_written_in_order_when_it_is_back() {
    kept_records_are_written_in_order_when_the_journal_is_back(memory()).await;
}

#[tokio::test]
async fn sqlite_journal_kept_records_are_written_in_order_when_it_is_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    kept_records_are_written_in_order_when_the_journal_is_back(sqlite(&dir)).await;
}

#[tokio::test]
async fn memory_journal_a_record_given_up_is_released_and_reconciled_with_its_send() {
    a_record_given_up_is_released_and_reconciled_with_its_send(memory()).await;
}

#[tokio::test]
async fn sqlite_journal_a_record_given_up_is_released_and_reconciled_with_its_send() {
    let dir = tempfile::tempdir().expect("tempdir");
    a_record_given_up_is_released_and_reconciled_with_its_send(sqlite(&dir)).await;
}

#[tokio::test]
async fn memory_journal_a_dropped_executor_releases_what_it_kept() {
    a_dropped_executor_releases_what_it_kept(memory()).await;
}

#[tokio::test]
async fn sqlite_journal_a_dropped_executor_releases_what_it_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    a_dropped_executor_releases_what_it_kept(sqlite(&dir)).await;
}
