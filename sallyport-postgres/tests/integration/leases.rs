//! Leases, takeover and fencing between journals (each its own pool, as separate processes
//! would be), and one chain for many concurrent writers.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use sallyport_core::journal::{Journal, JournalError, Phase};
use sallyport_tests::postgres::{TestDb, event, intent, sleep_ms};

/// A journal whose heartbeat never comes in time: its leases lapse while it lives (a
/// stalled process).
async fn stalled(db: &TestDb, owner: &str, lease_ms: u64) -> sallyport_postgres::PostgresJournal {
    db.builder()
        .owner(owner)
        .lease(Duration::from_millis(lease_ms))
        .renew_every(Duration::from_secs(3600))
        .connect()
        .await
        .expect("journal")
}

async fn lease_columns(db: &TestDb, attempt: &str) -> (String, i64, String, i64) {
    let r = db
        .sql()
        .await
        .query_one(
            "SELECT owner, epoch, phase, dispatches FROM sallyport_attempts WHERE attempt_id = $1",
            &[&attempt],
        )
        .await
        .expect("row");
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

#[tokio::test]
async fn a_claimed_attempt_is_finished_by_its_new_owner_and_never_by_the_old_one() {
    let db = TestDb::create().await;
    let old = stalled(&db, "old", 200).await;
    let new = db.journal("new").await;
    let intent = intent();
    old.write_intent(&intent).await.expect("intent");
    old.note_dispatch(&intent.attempt_id, 1);

    // Not expired yet: nothing to claim.
    assert!(new.claim_expired(10).await.expect("claim").is_empty());
    sleep_ms(400).await;
    let claimed = new.claim_expired(10).await.expect("claim");
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert_eq!(claimed[0].attempt.attempt_id, intent.attempt_id);
    assert_eq!(claimed[0].attempt.phase, Phase::Dispatched);
    assert_eq!(claimed[0].attempt.dispatches, 1);
    assert_eq!(claimed[0].epoch, 2);
    assert_eq!(claimed[0].previous_owner, "old");
    // Claimed once: a second claim finds nothing.
    assert!(new.claim_expired(10).await.expect("claim").is_empty());

    // The old owner wakes up: its dispatch note changes nothing, its outcome is refused.
    old.note_dispatch(&intent.attempt_id, 2);
    let err = old
        .append(event(&intent))
        .await
        .expect_err("the old owner is fenced");
    assert!(matches!(err, JournalError::Fenced), "{err:?}");
    assert_eq!(
        lease_columns(&db, intent.attempt_id.as_str()).await,
        ("new".to_owned(), 2, "dispatched".to_owned(), 1)
    );
    assert!(old.records().await.expect("records").is_empty());
    assert_eq!(old.unresolved().await.expect("unresolved").len(), 1);

    // The new owner settles it.
    let mut settled = event(&intent);
    settled.dispatches = 1;
    let record = new.append(settled).await.expect("new owner appends");
    assert_eq!(record.seq, 1);
    assert_eq!(
        lease_columns(&db, intent.attempt_id.as_str()).await,
        ("new".to_owned(), 2, "finished".to_owned(), 1)
    );
    assert!(new.unresolved().await.expect("unresolved").is_empty());
    let report = old.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 1);
    // Closed: nobody can claim it again, and the old owner still cannot append.
    sleep_ms(50).await;
    assert!(old.claim_expired(10).await.expect("claim").is_empty());
}

#[tokio::test]
async fn the_heartbeat_keeps_a_live_owners_leases_from_being_claimed() {
    let db = TestDb::create().await;
    let live = db
        .builder()
        .owner("live")
        .lease(Duration::from_millis(300))
        .renew_every(Duration::from_millis(50))
        .connect()
        .await
        .expect("journal");
    let other = db.journal("other").await;
    let intent = intent();
    live.write_intent(&intent).await.expect("intent");
    for _ in 0..6 {
        sleep_ms(150).await;
        assert!(
            other.claim_expired(10).await.expect("claim").is_empty(),
            "a renewed lease was claimed"
        );
    }
    live.append(event(&intent))
        .await
        .expect("the live owner finishes");
    assert_eq!(
        lease_columns(&db, intent.attempt_id.as_str()).await,
        ("live".to_owned(), 1, "finished".to_owned(), 1)
    );
}

#[tokio::test]
async fn a_dropped_journal_stops_renewing_and_its_attempts_are_claimed() {
    let db = TestDb::create().await;
    let gone = db
        .builder()
        .owner("gone")
        .lease(Duration::from_millis(200))
        .renew_every(Duration::from_millis(40))
        .connect()
        .await
        .expect("journal");
    let first = intent();
    let second = intent();
    gone.write_intent(&first).await.expect("intent");
    gone.write_intent(&second).await.expect("intent");
    assert_eq!(gone.renew_leases().await.expect("renew"), 2);
    drop(gone);
    let heir = db.journal("heir").await;
    sleep_ms(450).await;
    // One at a time, oldest first.
    let one = heir.claim_expired(1).await.expect("claim");
    let two = heir.claim_expired(1).await.expect("claim");
    assert_eq!(one.len(), 1);
    assert_eq!(two.len(), 1);
    let claimed: HashSet<_> = [&one[0], &two[0]]
        .iter()
        .map(|c| c.attempt.attempt_id.clone())
        .collect();
    assert_eq!(
        claimed,
        HashSet::from([first.attempt_id.clone(), second.attempt_id.clone()])
    );
    assert!(heir.claim_expired(10).await.expect("claim").is_empty());
    for c in [&one[0], &two[0]] {
        assert_eq!(c.previous_owner, "gone");
        let mut closing = event(&intent());
        closing.attempt_id = c.attempt.attempt_id.clone();
        heir.append(closing).await.expect("heir closes");
    }
    assert_eq!(heir.renew_leases().await.expect("renew"), 0);
    assert!(heir.unresolved().await.expect("unresolved").is_empty());
    assert!(heir.verify().await.expect("verify").is_intact());
}

#[tokio::test]
async fn two_journals_claiming_at_once_never_claim_one_attempt_twice() {
    let db = TestDb::create().await;
    let dead = stalled(&db, "dead", 100).await;
    let mut written = HashSet::new();
    for _ in 0..40 {
        let intent = intent();
        dead.write_intent(&intent).await.expect("intent");
        written.insert(intent.attempt_id.clone());
    }
    sleep_ms(300).await;
    let a = db.journal("a").await;
    let b = db.journal("b").await;
    let mut seen = HashSet::new();
    loop {
        let (ca, cb) = tokio::join!(a.claim_expired(7), b.claim_expired(7));
        let (ca, cb) = (ca.expect("claim a"), cb.expect("claim b"));
        if ca.is_empty() && cb.is_empty() {
            break;
        }
        for c in ca.iter().chain(&cb) {
            assert!(seen.insert(c.attempt.attempt_id.clone()), "claimed twice");
            assert_eq!(c.epoch, 2);
        }
    }
    assert_eq!(seen, written);
}

/// Appends one closed attempt through `journal` and returns its record's position.
async fn close_one(journal: &sallyport_postgres::PostgresJournal) -> u64 {
    let intent = intent();
    journal.write_intent(&intent).await.expect("intent");
    journal.append(event(&intent)).await.expect("append").seq
}

#[tokio::test]
async fn a_journal_whose_last_head_was_moved_by_another_chains_on_the_new_head() {
    // Each journal chains its next batch on the head it last wrote, without reading it;
    // when another journal moved it meanwhile, the batch must be undone and chained again.
    let db = TestDb::create().await;
    let a = db.journal("a").await;
    let b = db.journal("b").await;
    assert_eq!(close_one(&a).await, 1);
    assert_eq!(close_one(&b).await, 2);
    assert_eq!(close_one(&a).await, 3, "a's cached head (1) had moved");
    assert_eq!(close_one(&a).await, 4);
    assert_eq!(close_one(&b).await, 5, "b's cached head (2) had moved");
    let report = a.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 5);
    let records = b.records().await.expect("records");
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    for pair in records.windows(2) {
        assert_eq!(pair[1].prev_hash, pair[0].hash, "chained on the real head");
    }
}

#[tokio::test]
async fn a_fenced_close_is_refused_even_when_its_batch_was_sent_in_one_flight() {
    // `old` has appended before, so its next batch of closes goes out in one flight with
    // its record already chained: the fenced close must undo the record with it.
    let db = TestDb::create().await;
    let old = stalled(&db, "old", 200).await;
    let new = db.journal("new").await;
    assert_eq!(close_one(&old).await, 1);
    let intent = intent();
    old.write_intent(&intent).await.expect("intent");
    sleep_ms(400).await;
    assert_eq!(new.claim_expired(10).await.expect("claim").len(), 1);
    let err = old
        .append(event(&intent))
        .await
        .expect_err("the old owner is fenced");
    assert!(matches!(err, JournalError::Fenced), "{err:?}");
    assert_eq!(old.records().await.expect("records").len(), 1);
    assert_eq!(
        lease_columns(&db, intent.attempt_id.as_str()).await,
        ("new".to_owned(), 2, "intent_written".to_owned(), 0)
    );
    // The old owner's next close still appends, after the head it last wrote.
    assert_eq!(close_one(&old).await, 2);
    let report = new.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_journals_appending_800_records_at_once_make_one_chain_without_gaps() {
    const JOURNALS: usize = 4;
    const APPENDS: usize = 200;
    const IN_FLIGHT: usize = 16;
    let db = TestDb::create().await;
    let mut journals = Vec::new();
    for i in 0..JOURNALS {
        journals.push(Arc::new(db.journal(&format!("writer-{i}")).await));
    }
    let mut tasks = Vec::new();
    for journal in &journals {
        for lane in 0..IN_FLIGHT {
            let journal = Arc::clone(journal);
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                for _ in (lane..APPENDS).step_by(IN_FLIGHT) {
                    let intent = intent();
                    journal.write_intent(&intent).await.expect("intent");
                    journal.note_dispatch(&intent.attempt_id, 1);
                    let record = journal.append(event(&intent)).await.expect("append");
                    mine.push((record.seq, intent.attempt_id));
                }
                mine
            }));
        }
    }
    let mut seqs = Vec::new();
    let mut attempts = HashSet::new();
    for task in tasks {
        for (seq, attempt) in task.await.expect("task") {
            seqs.push(seq);
            assert!(attempts.insert(attempt));
        }
    }
    seqs.sort_unstable();
    let total = (JOURNALS * APPENDS) as u64;
    assert_eq!(
        seqs,
        (1..=total).collect::<Vec<_>>(),
        "one position each, no gaps"
    );
    let report = journals[0].verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, total);
    let records = journals[3].records().await.expect("records");
    let recorded: HashSet<_> = records.iter().map(|r| r.event.attempt_id.clone()).collect();
    assert_eq!(recorded, attempts);
    assert!(
        journals[1]
            .unresolved()
            .await
            .expect("unresolved")
            .is_empty()
    );
}
