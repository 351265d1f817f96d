//! The approval store on a real journal file: the schema's upgrade, batches mixing
//! approval changes with failing writes, and the JSON kept in step with the columns. The
//! transitions themselves are checked by the backend conformance suite
//! (`sallyport-testkit`, feature `conformance`).

use rusqlite::Connection;
use serde_json::json;

use super::*;
use sallyport_kernel::action::{ConsentRule, EffectClass, Externality};
use sallyport_kernel::approval::{ApprovalState, Decider, Verdict};
use sallyport_kernel::journal::Phase;
use sallyport_kernel::outcome::Status;

/// Built from its JSON, as a backend stores it: [`Approval`] is `#[non_exhaustive]`.
fn approval(expires_in_ms: u64) -> Approval {
    let now = sallyport_kernel::clock::now_ms();
    serde_json::from_value(json!({
        "approval_id": ApprovalId::generate(),
        "attempt_id": AttemptId::generate(),
        "action": "pay_invoice",
        "summary": "Pay one invoice.",
        "effect": EffectClass::ExternalCommitment,
        "externality": Externality::External,
        "rule": ConsentRule::PerCall,
        "data_classes": [],
        "session": sallyport_kernel::session::Session::new("ses_unit"),
        "objects": [],
        "note": "the agent's words",
        "request": "POST http://127.0.0.1:1/v1/pay",
        "fingerprint": "f".repeat(64),
        "definition_hash": "d".repeat(64),
        "definition_status": "no definition guard configured",
        "arguments": {"invoice_id": "inv_1"},
        "created_at_ms": now,
        "expires_at_ms": now + expires_in_ms,
        "state": ApprovalState::Awaiting,
    }))
    .expect("the sample is an approval")
}

fn event(approval: &Approval, phase: Phase, status: Status) -> AuditEvent {
    let mut event = AuditEvent::for_bench(&Intent::for_bench(false));
    event.attempt_id = approval.attempt_id.clone();
    event.phase = phase;
    event.status = status;
    event.dispatches = 0;
    event
}

fn decision() -> ApprovalDecision {
    ApprovalDecision::new(Verdict::Approve, Decider::new("alice", "unit"), None)
}

/// Every approval row's state and claim columns beside the same fields of its JSON.
fn columns_and_json(path: &Path) -> Vec<(String, String, Option<String>, i64)> {
    let conn = Connection::open(path).expect("second connection");
    let mut stmt = conn
        .prepare("SELECT state, claim_owner, claim_epoch, execution, approval FROM approvals")
        .expect("prepare");
    stmt.query_map([], |r| {
        let json: String = r.get(4)?;
        let stored: Approval = serde_json::from_str(&json).expect("stored JSON is an approval");
        let state: String = r.get(0)?;
        assert_eq!(state, stored.state.as_str(), "state column and JSON agree");
        let owner: Option<String> = r.get(1)?;
        assert_eq!(owner, stored.claim.as_ref().map(|c| c.owner.clone()));
        let epoch: i64 = r.get(2)?;
        if let Some(claim) = &stored.claim {
            assert_eq!(epoch, i64::try_from(claim.epoch).expect("epoch"));
        }
        let execution: Option<String> = r.get(3)?;
        assert_eq!(
            execution,
            stored.execution.as_ref().map(|a| a.as_str().to_owned())
        );
        Ok((state, json, owner, epoch))
    })
    .expect("query")
    .collect::<rusqlite::Result<_>>()
    .expect("rows")
}

#[tokio::test]
async fn a_journal_made_before_approvals_gains_the_table_and_still_verifies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let intent = Intent::for_bench(true);
    {
        let journal = SqliteJournal::open(&path).expect("journal");
        journal.write_intent(&intent).await.expect("intent");
        journal
            .append(AuditEvent::for_bench(&intent))
            .await
            .expect("append");
    }
    // The file as a build before approvals left it: format 1, no approvals table.
    let conn = Connection::open(&path).expect("raw");
    conn.execute_batch(
        "DROP INDEX approvals_state; DROP INDEX approvals_session_fingerprint; DROP TABLE approvals;",
    )
    .expect("drop");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, 1);
    drop(conn);

    let journal = SqliteJournal::open(&path).expect("reopens");
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 1);
    let parked = approval(60_000);
    let record = journal
        .park_approval(&parked, event(&parked, Phase::Deferred, Status::Pending))
        .await
        .expect("the new table takes approvals");
    assert_eq!(record.seq, 2);
    let conn = Connection::open(&path).expect("raw");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, 1, "the format stays 1");
    let indexes: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'approvals' AND name LIKE 'approvals_%'",
            [],
            |r| r.get(0),
        )
        .expect("indexes");
    assert_eq!(indexes, 2);
    assert!(journal.verify().await.expect("verify").is_intact());
}

#[tokio::test]
async fn a_fenced_intent_and_a_clashing_key_in_one_batch_leave_the_decision_recorded_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = SqliteJournal::open(dir.path().join("j.db")).expect("journal");
    let parked = approval(60_000);
    journal
        .park_approval(&parked, event(&parked, Phase::Deferred, Status::Pending))
        .await
        .expect("parked");
    let first = Intent::for_bench(false);
    journal.write_intent(&first).await.expect("intent");
    let mut clash = Intent::for_bench(false);
    clash.idempotency_key = first.idempotency_key.clone();
    let stale = Claim {
        owner: "nobody".into(),
        epoch: 7,
        until_ms: u64::MAX,
    };
    let fenced_intent = Intent::for_bench(true);

    let (r1, decided) = oneshot::channel();
    let (r2, clashed) = oneshot::channel();
    let (r3, began) = oneshot::channel();
    lock(&journal.shared.writer).write_all(vec![
        Write::Approval(Box::new(ApprovalWrite::Decide(
            parked.approval_id.clone(),
            Box::new(decision()),
            Box::new(event(&parked, Phase::Decided, Status::Pending)),
            r1,
        ))),
        Write::Intent(Box::new(clash), r2),
        Write::Approval(Box::new(ApprovalWrite::Begin(
            parked.approval_id.clone(),
            Box::new(stale),
            Box::new(fenced_intent.clone()),
            r3,
        ))),
    ]);
    let Transition::Applied(now) = decided.await.expect("answered").expect("decided") else {
        panic!("the decision applies");
    };
    assert_eq!(now.state, ApprovalState::Approved);
    assert!(matches!(
        clashed.await.expect("answered"),
        Err(JournalError::DuplicateKey)
    ));
    assert!(matches!(
        began.await.expect("answered"),
        Err(JournalError::Fenced)
    ));
    // The batch ran twice (the clash forced the savepoint pass): one decision, one record.
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 2, "the parked record and one decision");
    let open = journal.unresolved().await.expect("unresolved");
    assert_eq!(
        open.iter().map(|a| &a.attempt_id).collect::<Vec<_>>(),
        [&first.attempt_id],
        "the fenced intent wrote no attempt row"
    );
    let rows = columns_and_json(journal.path());
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].0, "approved");
}

#[tokio::test]
async fn the_stored_json_follows_the_columns_through_every_transition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = SqliteJournal::open(dir.path().join("j.db")).expect("journal");
    let parked = approval(60_000);
    let id = parked.approval_id.clone();
    journal
        .park_approval(&parked, event(&parked, Phase::Deferred, Status::Pending))
        .await
        .expect("parked");
    assert_eq!(columns_and_json(journal.path())[0].0, "awaiting");
    journal
        .decide_approval(
            &id,
            &decision(),
            event(&parked, Phase::Decided, Status::Pending),
        )
        .await
        .expect("decided");
    assert_eq!(columns_and_json(journal.path())[0].0, "approved");
    let now = sallyport_kernel::clock::now_ms();
    let Transition::Applied(claimed) = journal
        .claim_approval(&id, "exe_unit", now, 30_000)
        .await
        .expect("claim")
    else {
        panic!("claimed");
    };
    let claim = claimed.claim.expect("claim");
    let rows = columns_and_json(journal.path());
    assert_eq!(
        (rows[0].2.as_deref(), rows[0].3),
        (Some("exe_unit"), 1),
        "owner and epoch columns"
    );
    let mut intent = Intent::for_bench(true);
    intent.fingerprint = parked.fingerprint.clone();
    journal
        .begin_approved(&id, &claim, &intent)
        .await
        .expect("begun");
    assert_eq!(columns_and_json(journal.path())[0].0, "executing");
    let result: ActionResult = serde_json::from_value(json!({
        "status": "completed",
        "action": "pay_invoice",
        "attempt_id": intent.attempt_id,
    }))
    .expect("result");
    journal
        .settle_approval(&id, &claim, &result, AuditEvent::for_bench(&intent))
        .await
        .expect("settled");
    let rows = columns_and_json(journal.path());
    assert_eq!(rows[0].0, "finished");
    let stored: Approval = serde_json::from_str(&rows[0].1).expect("json");
    assert_eq!(stored.result, Some(result));
    assert_eq!(stored.execution, Some(intent.attempt_id));
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 3);
}

#[test]
fn an_approved_calls_durable_intent_takes_the_fsynced_path_and_a_decision_does_not() {
    let parked = approval(60_000);
    let claim = Claim {
        owner: "exe_unit".into(),
        epoch: 1,
        until_ms: u64::MAX,
    };
    let begin = |durable: bool| {
        let (reply, _) = oneshot::channel();
        Op::Write(Write::Approval(Box::new(ApprovalWrite::Begin(
            parked.approval_id.clone(),
            Box::new(claim.clone()),
            Box::new(Intent::for_bench(durable)),
            reply,
        ))))
    };
    let is_durable_write = |op: &Op| matches!(op, Op::Write(w) if w.has_durable_intent());
    // Durable writes go to the journal thread, whose batch commits with synchronous=FULL.
    assert!(is_durable_write(&begin(true)) && begin(true).is_for_thread());
    assert!(!is_durable_write(&begin(false)) && !begin(false).is_for_thread());
    let (reply, _) = oneshot::channel();
    let decide = Op::Write(Write::Approval(Box::new(ApprovalWrite::Decide(
        parked.approval_id.clone(),
        Box::new(decision()),
        Box::new(event(&parked, Phase::Decided, Status::Pending)),
        reply,
    ))));
    assert!(
        matches!(&decide, Op::Write(w) if w.appends())
            && !is_durable_write(&decide)
            && !decide.is_for_thread()
    );
    let (reply, _) = oneshot::channel();
    let read = Op::Read(Read::Approval(parked.approval_id.clone(), reply));
    assert!(!matches!(read, Op::Write(_)) && read.is_for_thread());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_approved_through_another_connection_wakes_the_watch_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let watcher = SqliteJournal::builder(&path)
        .decision_poll(Duration::from_millis(5))
        .open()
        .expect("watching journal");
    // A second journal on the file: its own connection and writer, as another process has.
    let decider = SqliteJournal::open(&path).expect("deciding journal");
    let (approved, denied) = (approval(60_000), approval(60_000));
    for parked in [&approved, &denied] {
        decider
            .park_approval(parked, event(parked, Phase::Deferred, Status::Pending))
            .await
            .expect("parked");
    }
    let mut watch = watcher.watch_decisions();
    assert!(watch.is_notified());
    assert!(
        !watch.wait(Duration::from_millis(300)).await,
        "parked calls are not decisions: nothing to wake for"
    );
    let deny = ApprovalDecision::new(Verdict::Deny, Decider::new("bob", "unit"), None);
    let t = decider
        .decide_approval(
            &denied.approval_id,
            &deny,
            event(&denied, Phase::Decided, Status::Rejected),
        )
        .await
        .expect("denied");
    assert!(matches!(t, Transition::Applied(_)));
    assert!(
        !watch.wait(Duration::from_millis(300)).await,
        "a denial sends nothing, so it wakes nobody"
    );
    let t = decider
        .decide_approval(
            &approved.approval_id,
            &decision(),
            event(&approved, Phase::Decided, Status::Pending),
        )
        .await
        .expect("approved");
    assert!(matches!(t, Transition::Applied(_)));
    assert!(
        watch.wait(Duration::from_secs(20)).await,
        "the approval wakes the watch long before its 20 s fallback"
    );
    assert!(
        !watch.wait(Duration::from_millis(300)).await,
        "one approval wakes the watch once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_approved_before_the_watch_was_made_wakes_its_first_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let journal = SqliteJournal::open(&path).expect("journal");
    let parked = approval(60_000);
    journal
        .park_approval(&parked, event(&parked, Phase::Deferred, Status::Pending))
        .await
        .expect("parked");
    journal
        .decide_approval(
            &parked.approval_id,
            &decision(),
            event(&parked, Phase::Decided, Status::Pending),
        )
        .await
        .expect("approved");
    // A worker that makes its watch now lists right after; its first wait wakes once more
    // (harmless), so a decision landing between the watch and the listing is never missed.
    let mut watch = journal.watch_decisions();
    assert!(watch.wait(Duration::from_secs(20)).await);
    assert!(!watch.wait(Duration::from_millis(300)).await);
    // The poller stops with its last watch, and a new watch starts it again.
    drop(watch);
    for _ in 0..200 {
        if !*journal.decisions.running() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !*journal.decisions.running(),
        "no watch left: the poller stopped"
    );
    let mut again = journal.watch_decisions();
    assert!(*journal.decisions.running());
    assert!(
        again.wait(Duration::from_secs(20)).await,
        "a fresh poller compares with nothing seen"
    );
}
