//! The PostgreSQL journal against a real server: durability and order, reservations,
//! atomic observe records, the chain and the attempt rows under `verify`, unresolved
//! attempts, migrations, and signed heads.

use std::sync::Arc;

use futures_util::FutureExt;
use sallyport_core::Status;
use sallyport_core::journal::{BreakKind, HeadSigningKey, Journal, JournalError, Phase};
use sallyport_postgres::SCHEMA_VERSION;
use sallyport_tests::postgres::{TestDb, event, intent, sleep_ms};

/// The attempt row's phase, status and dispatch count, read with SQL.
async fn row(db: &TestDb, attempt: &str) -> Option<(String, Option<String>, i64)> {
    db.sql()
        .await
        .query_opt(
            "SELECT phase, status, dispatches FROM sallyport_attempts WHERE attempt_id = $1",
            &[&attempt],
        )
        .await
        .expect("select")
        .map(|r| (r.get(0), r.get(1), r.get(2)))
}

async fn count(db: &TestDb, table: &str) -> i64 {
    db.sql()
        .await
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .expect("count")
        .get(0)
}

#[tokio::test]
async fn a_durable_intent_is_committed_before_write_intent_returns_and_the_append_closes_it() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    let intent = intent();
    journal.write_intent(&intent).await.expect("intent");
    // Committed: another connection sees it the moment write_intent returned.
    assert_eq!(
        row(&db, intent.attempt_id.as_str()).await,
        Some(("intent_written".to_owned(), None, 0))
    );
    let owner: (String, i64) = db
        .sql()
        .await
        .query_one(
            "SELECT owner, epoch FROM sallyport_attempts WHERE attempt_id = $1",
            &[&intent.attempt_id.as_str()],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .expect("lease columns");
    assert_eq!(owner, ("a".to_owned(), 1));

    journal.note_dispatch(&intent.attempt_id, 1);
    let mut closing = event(&intent);
    closing.dispatches = 1;
    let record = journal.append(closing.clone()).await.expect("append");
    assert_eq!(record.seq, 1);
    assert_eq!(record.event, closing);
    // The dispatch note was applied before the append that was queued after it.
    assert_eq!(
        row(&db, intent.attempt_id.as_str()).await,
        Some(("finished".to_owned(), Some("completed".to_owned()), 1))
    );
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
    let records = journal.records().await.expect("records");
    assert_eq!(records, vec![record]);
}

#[tokio::test]
async fn writes_are_applied_in_the_order_they_were_made() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    let mut expected = Vec::new();
    for _ in 0..20 {
        let intent = intent();
        journal.write_intent(&intent).await.expect("intent");
        journal.note_dispatch(&intent.attempt_id, 1);
        journal.note_dispatch(&intent.attempt_id, 2);
        let mut closing = event(&intent);
        closing.dispatches = 2;
        expected.push(closing.receipt_id.clone());
        journal.append(closing).await.expect("append");
    }
    let records = journal.records().await.expect("records");
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
    let receipts: Vec<_> = records.iter().map(|r| r.event.receipt_id.clone()).collect();
    assert_eq!(receipts, expected);
    let dispatches: i64 = db
        .sql()
        .await
        .query_one("SELECT min(dispatches) FROM sallyport_attempts", &[])
        .await
        .expect("min")
        .get(0);
    assert_eq!(dispatches, 2);
    assert!(journal.verify().await.expect("verify").is_intact());
}

#[tokio::test]
async fn a_dispatch_note_folded_into_a_close_in_its_batch_keeps_the_higher_request_number() {
    // Notes and closes for 40 attempts queued at once, so that most batches hold an
    // attempt's note and its close together (the writer then sends the close alone); every
    // row must still end with the note's higher number and the close's phase and status.
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    let mut intents = Vec::new();
    for _ in 0..40 {
        let intent = intent();
        journal.write_intent(&intent).await.expect("intent");
        intents.push(intent);
    }
    let closes = intents.iter().map(|intent| {
        journal.note_dispatch(&intent.attempt_id, 3);
        let mut closing = event(intent);
        closing.dispatches = 1;
        journal.append(closing)
    });
    for record in futures_util::future::join_all(closes).await {
        record.expect("append");
    }
    for intent in &intents {
        assert_eq!(
            row(&db, intent.attempt_id.as_str()).await,
            Some(("finished".to_owned(), Some("completed".to_owned()), 3)),
            "attempt {}",
            intent.attempt_id
        );
    }
    assert!(journal.verify().await.expect("verify").is_intact());
}

#[tokio::test]
async fn a_batch_that_fails_midway_writes_nothing_and_leaves_every_connection_usable() {
    // A batch is sent in two flights. Made to fail in each from outside: a constraint the
    // close breaks fails the first flight (before `COMMIT` was sent), a row put in the
    // chain's next position fails the second (beside its `COMMIT`). Each time the whole
    // batch must be undone, and the connection must come back to the pool out of its failed
    // transaction, so every later batch works.
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    let first = intent();
    journal.write_intent(&first).await.expect("intent");
    journal.append(event(&first)).await.expect("append");
    let sql = db.sql().await;
    let faults = [
        (
            "ALTER TABLE sallyport_attempts ADD CONSTRAINT no_completed
             CHECK (status IS DISTINCT FROM 'completed') NOT VALID",
            "ALTER TABLE sallyport_attempts DROP CONSTRAINT no_completed",
        ),
        (
            "INSERT INTO sallyport_audit (seq, receipt_id, attempt_id, prev_hash, hash, event)
             SELECT seq + 1, 'squatter', 'a', 'p', 'h', '{}' FROM sallyport_chain_head",
            "DELETE FROM sallyport_audit WHERE receipt_id = 'squatter'",
        ),
    ];
    for (break_it, mend_it) in faults {
        sql.batch_execute(break_it).await.expect("break");
        let blocked = intent();
        journal.write_intent(&blocked).await.expect("intent");
        let failed = journal.append(event(&blocked)).await;
        assert!(matches!(failed, Err(JournalError::Write(_))), "{failed:?}");
        assert_eq!(
            row(&db, blocked.attempt_id.as_str()).await,
            Some(("intent_written".to_owned(), None, 0)),
            "the failed batch's close was undone with it ({break_it})"
        );
        sql.batch_execute(mend_it).await.expect("mend");
        // More batches than the pool has connections: one left inside the failed
        // transaction would fail them.
        journal.append(event(&blocked)).await.expect("append again");
        for _ in 0..8 {
            let next = intent();
            journal.write_intent(&next).await.expect("intent");
            journal.append(event(&next)).await.expect("append");
        }
    }
    assert_eq!(count(&db, "sallyport_audit").await, 19);
    assert!(journal.verify().await.expect("verify").is_intact());
}

/// Two journals' batches holding the same two keys, listed in opposite orders. The first
/// batch reserves the lowest key, then waits on a middle key a third transaction holds;
/// the second reserves the highest key, then waits on the lowest, which the first holds.
/// When the holder lets go, the first batch goes on to the highest key. Before attempt
/// rows were written in key order, that was a deadlock: PostgreSQL found it after
/// `deadlock_timeout` and aborted one batch, whose calls failed with a backend error
/// instead of a duplicate key. In key order the second batch waits on the lowest key
/// first, and finds both taken when the first commits.
#[tokio::test]
async fn batches_holding_the_same_keys_in_opposite_orders_do_not_deadlock() {
    let db = TestDb::create().await;
    let a = Arc::new(db.journal("a").await);
    let b = Arc::new(db.journal("b").await);
    let mut keys = [intent(), intent(), intent()];
    keys.sort_by(|x, y| x.idempotency_key.as_str().cmp(y.idempotency_key.as_str()));
    let [low, middle, high] = keys;
    let mut b_high = intent();
    b_high.idempotency_key = high.idempotency_key.clone();
    let mut b_low = intent();
    b_low.idempotency_key = low.idempotency_key.clone();

    let holder = db.sql().await;
    holder
        .batch_execute(&format!(
            "BEGIN; INSERT INTO sallyport_attempts (attempt_id, action, session_id, \
             idempotency_key, fingerprint, definition_hash, effect, arguments, phase, \
             created_at, updated_at, owner, lease_until) VALUES ('held', 'x', 's', '{}', \
             'f', 'd', 'observe', '{{}}', 'intent_written', 'now', 'now', 'holder', now())",
            middle.idempotency_key.as_str()
        ))
        .await
        .expect("the holder takes the middle key");
    let first = {
        let a = Arc::clone(&a);
        tokio::spawn(async move {
            let (x, y, z) = tokio::join!(
                a.write_intent(&low),
                a.write_intent(&middle),
                a.write_intent(&high)
            );
            [x, y, z]
        })
    };
    sleep_ms(150).await;
    let second = {
        let b = Arc::clone(&b);
        tokio::spawn(async move {
            let (x, y) = tokio::join!(b.write_intent(&b_high), b.write_intent(&b_low));
            [x, y]
        })
    };
    sleep_ms(150).await;
    holder.batch_execute("ROLLBACK").await.expect("rollback");
    let first = first.await.expect("first batch");
    let second = second.await.expect("second batch");
    assert!(
        first.iter().all(Result::is_ok),
        "the first batch reserves its three keys: {first:?}"
    );
    assert!(
        second
            .iter()
            .all(|r| matches!(r, Err(JournalError::DuplicateKey))),
        "the second finds its two keys taken, and is not aborted: {second:?}"
    );
    assert_eq!(count(&db, "sallyport_attempts").await, 3);
}

#[tokio::test]
async fn a_reused_idempotency_key_or_attempt_id_is_a_duplicate_in_every_process() {
    let db = TestDb::create().await;
    let a = db.journal("a").await;
    let b = db.journal("b").await;
    let first = intent();
    a.write_intent(&first).await.expect("first");

    let mut same_key = intent();
    same_key.idempotency_key = first.idempotency_key.clone();
    assert!(matches!(
        b.write_intent(&same_key).await,
        Err(JournalError::DuplicateKey)
    ));
    assert!(matches!(
        a.write_intent(&same_key).await,
        Err(JournalError::DuplicateKey)
    ));
    let mut same_id = intent();
    same_id.attempt_id = first.attempt_id.clone();
    assert!(matches!(
        b.write_intent(&same_id).await,
        Err(JournalError::DuplicateKey)
    ));
    // An observe call with a taken key stores neither its row nor its record.
    let mut observe = sallyport_core::journal::Intent::for_bench(false);
    observe.idempotency_key = first.idempotency_key.clone();
    assert!(matches!(
        b.append_with_intent(observe.clone(), event(&observe)).await,
        Err(JournalError::DuplicateKey)
    ));
    assert_eq!(count(&db, "sallyport_attempts").await, 1);
    assert_eq!(count(&db, "sallyport_audit").await, 0);

    // Two reservations of one key racing in one batch: exactly one wins.
    let x = intent();
    let mut y = intent();
    y.idempotency_key = x.idempotency_key.clone();
    let (rx, ry) = tokio::join!(a.write_intent(&x), a.write_intent(&y));
    assert_eq!(
        [rx.is_ok(), ry.is_ok()].iter().filter(|ok| **ok).count(),
        1,
        "{rx:?} {ry:?}"
    );
    assert!(matches!(
        rx.err().or(ry.err()),
        Some(JournalError::DuplicateKey)
    ));
    // The journal goes on writing after a refused reservation.
    a.append(event(&first))
        .await
        .expect("append after duplicates");
    assert!(a.verify().await.expect("verify").is_intact());
}

#[tokio::test]
async fn an_observe_record_and_its_attempt_row_are_stored_together_or_not_at_all() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    let observe = sallyport_core::journal::Intent::for_bench(false);
    let record = journal
        .append_with_intent(observe.clone(), event(&observe))
        .await
        .expect("observe");
    assert_eq!(record.seq, 1);
    assert_eq!(
        row(&db, observe.attempt_id.as_str()).await,
        Some(("finished".to_owned(), Some("completed".to_owned()), 1))
    );

    // The record's insert fails after the attempt row went in: neither stays.
    db.sql()
        .await
        .batch_execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
                 $$ BEGIN RAISE EXCEPTION 'refused by test'; END $$;
             CREATE TRIGGER refuse BEFORE INSERT ON sallyport_audit
                 FOR EACH ROW EXECUTE FUNCTION refuse();",
        )
        .await
        .expect("trigger");
    let doomed = sallyport_core::journal::Intent::for_bench(false);
    let err = journal
        .append_with_intent(doomed.clone(), event(&doomed))
        .await
        .expect_err("the record cannot be written");
    assert!(matches!(err, JournalError::Write(_)), "{err:?}");
    assert!(format!("{:?}", err).contains("refused by test"), "{err:?}");
    assert_eq!(row(&db, doomed.attempt_id.as_str()).await, None);
    assert_eq!(count(&db, "sallyport_audit").await, 1);

    db.sql()
        .await
        .batch_execute("DROP TRIGGER refuse ON sallyport_audit")
        .await
        .expect("drop trigger");
    let again = journal
        .append_with_intent(doomed.clone(), event(&doomed))
        .await
        .expect("written once the server accepts it");
    assert_eq!(again.seq, 2);
    assert_eq!(again.prev_hash, record.hash);
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 2);
}

#[tokio::test]
async fn verify_passes_an_intact_chain_and_finds_an_edited_record_and_an_edited_attempt_row() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    let mut intents = Vec::new();
    for _ in 0..3 {
        let intent = intent();
        journal.write_intent(&intent).await.expect("intent");
        journal.append(event(&intent)).await.expect("append");
        intents.push(intent);
    }
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 3);
    let records = journal.records().await.expect("records");
    assert_eq!(report.head.hash, records[2].hash);

    // An attempt row edited to claim another outcome.
    let sql = db.sql().await;
    sql.execute(
        "UPDATE sallyport_attempts SET status = 'rejected' WHERE attempt_id = $1",
        &[&intents[1].attempt_id.as_str()],
    )
    .await
    .expect("edit attempt");
    let report = journal.verify().await.expect("verify");
    let brk = report.first_break.expect("attempt edit found");
    assert_eq!(brk.kind, BreakKind::AttemptEdited);
    assert_eq!(brk.seq, 2);
    assert_eq!(brk.attempt.as_ref(), Some(&intents[1].attempt_id));
    sql.execute(
        "UPDATE sallyport_attempts SET status = 'completed' WHERE attempt_id = $1",
        &[&intents[1].attempt_id.as_str()],
    )
    .await
    .expect("restore attempt");
    assert!(journal.verify().await.expect("verify").is_intact());

    // A record's content edited (same length, so only the hash can tell).
    let changed = sql
        .execute(
            "UPDATE sallyport_audit SET event = replace(event, '\"completed\"', '\"cancelled\"') WHERE seq = 2",
            &[],
        )
        .await
        .expect("edit record");
    assert_eq!(changed, 1);
    let report = journal.verify().await.expect("verify");
    let brk = report.first_break.expect("edit found");
    assert_eq!((brk.kind, brk.seq), (BreakKind::Edited, 2));

    // A record deleted is a gap.
    sql.execute("DELETE FROM sallyport_audit WHERE seq = 2", &[])
        .await
        .expect("delete");
    let brk = journal
        .verify()
        .await
        .expect("verify")
        .first_break
        .expect("gap found");
    assert_eq!((brk.kind, brk.seq), (BreakKind::Deleted, 3));
}

#[tokio::test]
async fn unresolved_lists_exactly_the_attempts_no_record_closes_in_any_process() {
    let db = TestDb::create().await;
    let a = db.journal("a").await;
    let b = db.journal("b").await;
    let open = intent();
    let sent = intent();
    let closed = intent();
    for i in [&open, &sent, &closed] {
        a.write_intent(i).await.expect("intent");
    }
    a.note_dispatch(&sent.attempt_id, 1);
    a.append(event(&closed)).await.expect("append");

    // Another process sees the same list.
    let listed = b.unresolved().await.expect("unresolved");
    let mut by_id: Vec<_> = listed
        .iter()
        .map(|u| (u.attempt_id.clone(), u.phase, u.dispatches))
        .collect();
    by_id.sort_by(|x, y| x.0.as_str().cmp(y.0.as_str()));
    let mut expected = vec![
        (open.attempt_id.clone(), Phase::IntentWritten, 0),
        (sent.attempt_id.clone(), Phase::Dispatched, 1),
    ];
    expected.sort_by(|x, y| x.0.as_str().cmp(y.0.as_str()));
    assert_eq!(by_id, expected);
    let first = listed
        .iter()
        .find(|u| u.attempt_id == open.attempt_id)
        .expect("listed");
    assert_eq!(first.idempotency_key, open.idempotency_key);
    assert_eq!(first.arguments, open.arguments);
    assert_eq!(first.action, open.action);

    // A row edited to look finished stays listed: the chain decides, not the row.
    db.sql()
        .await
        .execute(
            "UPDATE sallyport_attempts SET phase = 'finished', status = 'completed' WHERE attempt_id = $1",
            &[&open.attempt_id.as_str()],
        )
        .await
        .expect("edit");
    let listed = b.unresolved().await.expect("unresolved");
    let edited = listed
        .iter()
        .find(|u| u.attempt_id == open.attempt_id)
        .expect("still listed");
    assert_eq!(edited.phase, Phase::Dispatched);
    let brk = b
        .verify()
        .await
        .expect("verify")
        .first_break
        .expect("found");
    assert_eq!(brk.kind, BreakKind::AttemptEdited);
    assert_eq!(brk.attempt.as_ref(), Some(&open.attempt_id));
}

#[tokio::test]
async fn a_refusal_without_an_attempt_row_is_recorded() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    let never_written = intent();
    let mut refusal = event(&never_written);
    refusal.phase = Phase::Refused;
    refusal.status = Status::Rejected;
    refusal.dispatches = 0;
    let record = journal.append(refusal).await.expect("append");
    assert_eq!(record.seq, 1);
    assert_eq!(count(&db, "sallyport_attempts").await, 0);
    assert!(journal.verify().await.expect("verify").is_intact());
}

#[tokio::test]
async fn a_detached_append_is_written_in_order() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    let dropped = intent();
    journal.write_intent(&dropped).await.expect("intent");
    let mut cancelled = event(&dropped);
    cancelled.phase = Phase::CancelledBeforeSend;
    cancelled.status = Status::Rejected;
    journal.append_detached(cancelled);
    let after = intent();
    journal.write_intent(&after).await.expect("intent");
    let record = journal.append(event(&after)).await.expect("append");
    assert_eq!(record.seq, 2, "the detached record went first");
    assert_eq!(
        row(&db, dropped.attempt_id.as_str()).await,
        Some((
            "cancelled_before_send".to_owned(),
            Some("rejected".to_owned()),
            1
        ))
    );
    assert!(journal.verify().await.expect("verify").is_intact());
}

#[tokio::test]
async fn a_database_migrated_by_a_newer_build_is_refused_untouched() {
    let db = TestDb::create().await;
    drop(db.journal("a").await);
    let sql = db.sql().await;
    let versions: Vec<i64> = sql
        .query(
            "SELECT version FROM sallyport_schema_version ORDER BY version",
            &[],
        )
        .await
        .expect("versions")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    // Connecting again runs nothing twice.
    drop(db.journal("b").await);
    assert_eq!(count(&db, "sallyport_schema_version").await, SCHEMA_VERSION);

    sql.execute(
        "INSERT INTO sallyport_schema_version (version) VALUES ($1)",
        &[&(SCHEMA_VERSION + 98)],
    )
    .await
    .expect("newer");
    let err = db.builder().connect().await.expect_err("newer refused");
    match err {
        JournalError::NewerFormat { found, supported } => {
            assert_eq!((found, supported), (SCHEMA_VERSION + 98, SCHEMA_VERSION));
        }
        other => panic!("expected NewerFormat, got {other:?}"),
    }
    assert_eq!(
        count(&db, "sallyport_schema_version").await,
        SCHEMA_VERSION + 1
    );
}

#[tokio::test]
async fn journal_tables_without_a_schema_version_are_refused_as_corrupt() {
    let db = TestDb::create().await;
    db.sql()
        .await
        .batch_execute("CREATE TABLE sallyport_audit (seq BIGINT)")
        .await
        .expect("foreign table");
    let err = db.builder().connect().await.expect_err("refused");
    assert!(matches!(err, JournalError::Corrupt { .. }), "{err:?}");
    assert_eq!(count(&db, "sallyport_audit").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journals_connecting_to_a_fresh_database_at_once_all_migrate_it_once() {
    let db = TestDb::create().await;
    let connects = (0..6).map(|i| {
        let builder = db.builder().owner(format!("p{i}"));
        tokio::spawn(builder.connect())
    });
    for joined in futures_util::future::join_all(connects).await {
        joined.expect("task").expect("connects");
    }
    assert_eq!(count(&db, "sallyport_schema_version").await, SCHEMA_VERSION);
}

#[tokio::test]
async fn with_a_signing_key_every_batch_signs_its_head_and_verify_signed_covers_the_chain() {
    let db = TestDb::create().await;
    let key = HeadSigningKey::generate().expect("key");
    let verifying = key.verifying_key();
    let journal = db
        .builder()
        .owner("a")
        .signing_key(key)
        .connect()
        .await
        .expect("journal");
    for _ in 0..5 {
        let intent = intent();
        journal.write_intent(&intent).await.expect("intent");
        journal.append(event(&intent)).await.expect("append");
    }
    let heads = journal.signed_heads().await.expect("heads");
    assert_eq!(heads.last().map(|h| h.count), Some(5));
    let report = journal.verify_signed(&verifying).await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.last_signed, Some(5));

    // Heads signed by another key prove nothing.
    let other = HeadSigningKey::generate().expect("other key");
    let report = journal
        .verify_signed(&other.verifying_key())
        .await
        .expect("verify");
    assert_eq!(report.last_signed, None);
    assert!(!report.is_intact());
}

#[tokio::test]
async fn a_database_at_schema_version_1_is_upgraded_and_its_chain_still_verifies() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    let intent = intent();
    journal.write_intent(&intent).await.expect("intent");
    let record = journal.append(event(&intent)).await.expect("append");
    drop(journal);
    // Back to what a build with only the first migration left: every later migration's
    // tables dropped.
    db.sql()
        .await
        .batch_execute(&format!(
            "{} DROP TABLE sallyport_approvals; DROP TABLE sallyport_policy_calls; \
             DROP TABLE sallyport_grants; DROP TABLE sallyport_remembered_approvals; \
             DROP TABLE sallyport_checkpoints; \
             DELETE FROM sallyport_schema_version WHERE version > 1;",
            super::shards::UNDO_MIGRATION_8
        ))
        .await
        .expect("downgrade");

    let journal = db.journal("b").await;
    assert_eq!(count(&db, "sallyport_schema_version").await, SCHEMA_VERSION);
    assert_eq!(count(&db, "sallyport_approvals").await, 0);
    assert_eq!(count(&db, "sallyport_policy_calls").await, 0);
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(journal.records().await.expect("records"), vec![record]);
}

/// A call cancelled while its intent is queued records its cancellation (a detached
/// append, which another writer applies than the intent) after the intent, never before:
/// the row is closed by the record and the chain and rows verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_made_while_its_intent_is_still_queued_is_applied_after_the_intent() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    for _ in 0..10 {
        let intent = intent();
        // Polled once: queued, then dropped unanswered, as a cancelled call's is.
        // (Exactly once: a timer of zero can let it run on until the next millisecond tick,
        // time enough for a commit.)
        let queued = journal.write_intent(&intent).now_or_never();
        assert!(
            queued.is_none(),
            "answered before any commit could have run: {queued:?}"
        );
        let mut cancelled = event(&intent);
        cancelled.phase = Phase::CancelledBeforeSend;
        cancelled.status = Status::Rejected;
        cancelled.dispatches = 0;
        journal.append_detached(cancelled);
        let closed = async {
            loop {
                if let Some((phase, Some(status), _)) = row(&db, intent.attempt_id.as_str()).await {
                    return (phase, status);
                }
                sleep_ms(5).await;
            }
        };
        let (phase, status) = tokio::time::timeout(std::time::Duration::from_secs(10), closed)
            .await
            .expect("the cancellation closes the row");
        assert_eq!(
            (phase.as_str(), status.as_str()),
            ("cancelled_before_send", "rejected")
        );
    }
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.head.count, 10);
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
}

/// The journal's idle-in-transaction limit ends a write batch stopped midway, never a read
/// or a migration: a snapshot sits idle between its statements while the client checks the
/// chain it read (set on the sessions instead, a limit of 1 ms ended this verification, and
/// the migration of a journal connecting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_snapshot_is_not_ended_by_the_idle_in_transaction_limit() {
    const RECORDS: usize = 2000;
    let db = TestDb::create().await;
    let journal = Arc::new(db.journal("writer").await);
    let writes = (0..RECORDS).map(|_| {
        let journal = Arc::clone(&journal);
        async move {
            let intent = intent();
            journal.write_intent(&intent).await.expect("intent");
            journal.append(event(&intent)).await.expect("append");
        }
    });
    futures_util::future::join_all(writes).await;
    let reader = db
        .builder()
        .owner("reader")
        .idle_in_transaction_timeout(std::time::Duration::from_millis(1))
        .connect()
        .await
        .expect("reader");
    let report = reader
        .verify()
        .await
        .expect("verify under a 1 ms idle limit");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, RECORDS as u64);
    assert_eq!(reader.records().await.expect("records").len(), RECORDS);
}
