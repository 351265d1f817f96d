//! Batches with failing writes, on a real journal file.

use std::sync::atomic::Ordering;

use rusqlite::Connection;

use super::*;

fn event(attempt: &AttemptId) -> AuditEvent {
    let mut event = AuditEvent::for_bench(&Intent::for_bench(false));
    event.attempt_id = attempt.clone();
    event
}

/// Runs `ops` as one batch on the journal's connection, as a combining task would.
fn batch(journal: &SqliteJournal, ops: Vec<Write>) {
    lock(&journal.shared.writer).write_all(ops);
}

#[tokio::test]
async fn a_failing_write_is_redone_alone_and_leaves_its_batch_and_the_chain_intact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = SqliteJournal::open(dir.path().join("j.db")).expect("journal");
    let first = Intent::for_bench(false);
    let mut clash = Intent::for_bench(false);
    clash.idempotency_key = first.idempotency_key.clone();
    let doomed = Intent::for_bench(false);
    let last = Intent::for_bench(false);
    // The doomed append's second statement fails after its first has inserted the
    // audit row: only a savepoint takes that row back out.
    lock(&journal.shared.writer)
        .conn
        .execute_batch(&format!(
            "CREATE TEMP TRIGGER refuse BEFORE UPDATE ON attempts WHEN OLD.attempt_id = '{}' \
             BEGIN SELECT RAISE(ABORT, 'refused'); END",
            doomed.attempt_id
        ))
        .expect("trigger");

    let (r1, a1) = oneshot::channel();
    let (r2, a2) = oneshot::channel();
    let (r3, a3) = oneshot::channel();
    let (r4, a4) = oneshot::channel();
    let (r5, a5) = oneshot::channel();
    let (r6, a6) = oneshot::channel();
    let (r7, a7) = oneshot::channel();
    batch(
        &journal,
        vec![
            Write::Intent(Box::new(first.clone()), r1),
            Write::Append(Box::new(event(&first.attempt_id)), Some(r2)),
            Write::Intent(Box::new(clash), r3),
            Write::Intent(Box::new(doomed.clone()), r4),
            Write::Append(Box::new(event(&doomed.attempt_id)), Some(r5)),
            Write::Intent(Box::new(last.clone()), r6),
            Write::Append(Box::new(event(&last.attempt_id)), Some(r7)),
        ],
    );
    a1.await.expect("answered").expect("first intent written");
    let one = a2.await.expect("answered").expect("first append written");
    assert!(matches!(
        a3.await.expect("answered"),
        Err(JournalError::DuplicateKey)
    ));
    a4.await.expect("answered").expect("doomed intent written");
    assert!(matches!(
        a5.await.expect("answered"),
        Err(JournalError::Write(_))
    ));
    a6.await.expect("answered").expect("last intent written");
    let two = a7.await.expect("answered").expect("last append written");
    // The redo rebuilt the chain from the batch's start: no gap, no fork, no orphan row.
    assert_eq!((one.seq, two.seq), (1, 2));
    assert_eq!(two.prev_hash, one.hash);
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 2);
    let stored: i64 = Connection::open(journal.path())
        .expect("second connection")
        .query_row("SELECT count(*) FROM attempts", [], |r| r.get(0))
        .expect("count");
    assert_eq!(stored, 3, "every intent but the clashing one committed");
}

#[tokio::test]
async fn when_the_journal_fills_mid_batch_every_answer_matches_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = SqliteJournal::builder(dir.path().join("j.db"))
        .max_size(64 * 1024)
        .open()
        .expect("journal");
    // Every intent and append of every batch, with the answers it was given.
    let mut calls = Vec::new();
    for round in 0..40 {
        let mut ops = Vec::new();
        for i in 0..8 {
            let mut intent = Intent::for_bench(round % 2 == 0);
            // Rows of growing size, so some need a new page and some still fit.
            intent.arguments = serde_json::json!({"pad": "x".repeat(200 * (i + 1))});
            let attempt = intent.attempt_id.clone();
            let (intent_reply, intent_answer) = oneshot::channel();
            let (append_reply, append_answer) = oneshot::channel();
            ops.push(Write::Intent(Box::new(intent), intent_reply));
            ops.push(Write::Append(Box::new(event(&attempt)), Some(append_reply)));
            calls.push((attempt, intent_answer, append_answer));
        }
        batch(&journal, ops);
    }
    let reader = Connection::open(journal.path()).expect("second connection");
    let rows = |table: &str, attempt: &AttemptId| -> i64 {
        reader
            .query_row(
                &format!("SELECT count(*) FROM {table} WHERE attempt_id = ?1"),
                [attempt.as_str()],
                |r| r.get(0),
            )
            .expect("count")
    };
    let (mut refused, mut appended) = (0, 0);
    for (attempt, intent_answer, append_answer) in calls {
        let written = intent_answer.await.expect("answered").is_ok();
        assert_eq!(rows("attempts", &attempt) == 1, written, "{attempt}");
        let recorded = append_answer.await.expect("answered").is_ok();
        assert_eq!(rows("audit", &attempt) == 1, recorded, "{attempt}");
        refused += usize::from(!written);
        appended += usize::from(recorded);
    }
    assert!(refused > 0, "the cap was reached");
    let report = journal.verify().await.expect("a full journal still reads");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, appended as u64);
}

#[tokio::test]
async fn a_failing_write_alone_in_its_batch_leaves_nothing_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = SqliteJournal::open(dir.path().join("j.db")).expect("journal");
    let first = Intent::for_bench(false);
    journal.write_intent(&first).await.expect("written");
    let mut clash = Intent::for_bench(false);
    clash.idempotency_key = first.idempotency_key.clone();
    assert!(matches!(
        journal.write_intent(&clash).await,
        Err(JournalError::DuplicateKey)
    ));
    // The journal goes on: the failed batch was rolled back, not left open.
    let after = Intent::for_bench(false);
    journal.write_intent(&after).await.expect("written after");
    let record = journal
        .append(event(&after.attempt_id))
        .await
        .expect("appended");
    assert_eq!(record.seq, 1);
    assert!(journal.verify().await.expect("verify").is_intact());
}

/// A fresh journal (in a directory the caller keeps) that has seen writes arriving
/// together, so a call's last record waits its turn before its task applies the queue.
fn batching_journal() -> (tempfile::TempDir, SqliteJournal) {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = SqliteJournal::open(dir.path().join("j.db")).expect("journal");
    journal
        .shared
        .concurrent
        .store(combine::CONCURRENT, Ordering::Relaxed);
    (dir, journal)
}

/// A call's last record waits one turn of the scheduler before its task applies the queue
/// (so calls finishing together share a transaction). Queued, it is handed over: a call
/// dropped in that turn is recorded by this record, written once by whoever applies the
/// queue next (here the journal thread, which the dropped waiter wakes), and the executor
/// records nothing more for it. Taking the write back instead left a window in which a
/// batch had already taken it and the call was recorded twice.
#[tokio::test]
async fn a_record_dropped_while_it_waits_for_its_batch_is_written_once() {
    use std::task::{Context, Waker};

    let (_dir, journal) = batching_journal();
    let observed = Intent::for_bench(false);
    let refused = AttemptId::generate();
    let mut cx = Context::from_waker(Waker::noop());
    {
        let mut observe = journal.append_with_intent(observed.clone(), event(&observed.attempt_id));
        let mut append = journal.append(event(&refused));
        assert!(
            observe.as_mut().poll(&mut cx).is_pending(),
            "it waits its turn"
        );
        assert!(
            append.as_mut().poll(&mut cx).is_pending(),
            "it waits its turn"
        );
        assert_eq!(lock(&journal.shared.queued).len(), 2, "both are queued");
    }
    // The dropped two stay handed over; a record queued after them is applied after them.
    let kept = Intent::for_bench(false);
    let record = journal
        .append_with_intent(kept.clone(), event(&kept.attempt_id))
        .await
        .expect("appended");
    assert_eq!(record.seq, 3, "the dropped two were written first");
    let records = journal.records().await.expect("records");
    let attempts: Vec<&AttemptId> = records.iter().map(|r| &r.event.attempt_id).collect();
    assert_eq!(
        attempts,
        [&observed.attempt_id, &refused, &kept.attempt_id],
        "each record once, in the order queued"
    );
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
    assert!(journal.verify().await.expect("verify").is_intact());
}

/// A dropped waiter wakes the journal thread: its record is written with no other write
/// coming after it.
#[tokio::test]
async fn a_dropped_waiters_record_is_written_by_the_journal_thread() {
    use std::task::{Context, Waker};

    let (_dir, journal) = batching_journal();
    let observed = Intent::for_bench(false);
    let mut cx = Context::from_waker(Waker::noop());
    {
        let mut observe = journal.append_with_intent(observed.clone(), event(&observed.attempt_id));
        assert!(observe.as_mut().poll(&mut cx).is_pending());
    }
    // Watched from a second connection: a read through the journal would itself wake the
    // thread.
    let reader = Connection::open(journal.path()).expect("second connection");
    let mut stored = 0;
    for _ in 0..400 {
        stored = reader
            .query_row("SELECT count(*) FROM audit", [], |row| row.get::<_, i64>(0))
            .expect("count");
        if stored > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(stored, 1, "the thread applied the dropped record");
    let records = journal.records().await.expect("records");
    assert_eq!(records[0].event.attempt_id, observed.attempt_id);
}

/// Two records whose tasks both wait their turn are applied in one transaction, in the
/// order they were made; a caller alone does not wait.
#[tokio::test]
async fn records_queued_while_their_tasks_wait_share_one_batch() {
    use std::task::{Context, Waker};

    let (_dir, journal) = batching_journal();
    let (a, b) = (Intent::for_bench(false), Intent::for_bench(false));
    let mut cx = Context::from_waker(Waker::noop());
    let mut first = journal.append_with_intent(a.clone(), event(&a.attempt_id));
    let mut second = journal.append_with_intent(b.clone(), event(&b.attempt_id));
    assert!(first.as_mut().poll(&mut cx).is_pending());
    assert!(second.as_mut().poll(&mut cx).is_pending());
    // The first task's next turn applies both writes at once.
    let first = first.await.expect("first");
    assert!(
        lock(&journal.shared.queued).is_empty(),
        "the first task's batch took the second's write too"
    );
    let second = second.await.expect("second");
    assert_eq!((first.seq, second.seq), (1, 2));
    // That batch of two keeps records waiting; eight batches of one end it.
    assert_eq!(
        journal.shared.concurrent.load(Ordering::Relaxed),
        combine::CONCURRENT
    );
    for _ in 0..combine::CONCURRENT {
        let intent = Intent::for_bench(false);
        journal
            .append_with_intent(intent.clone(), event(&intent.attempt_id))
            .await
            .expect("appended");
    }
    assert_eq!(journal.shared.concurrent.load(Ordering::Relaxed), 0);
    let lone = Intent::for_bench(false);
    let mut alone = journal.append_with_intent(lone.clone(), event(&lone.attempt_id));
    assert!(
        alone.as_mut().poll(&mut cx).is_ready(),
        "a lone record is applied at once, without waiting a turn"
    );
}

/// Frames in the journal's WAL file: the most it has held since it was made (a WAL that
/// starts over is written again from its start, not truncated).
fn wal_frames(db: &std::path::Path) -> u64 {
    let wal = std::fs::metadata(db.with_extension("db-wal")).map_or(0, |m| m.len());
    wal.saturating_sub(32) / (4096 + 24)
}

/// No commit checkpoints: under a writer that leaves checkpoints to the journal thread, the
/// WAL grows past SQLite's automatic threshold, and every commit past it asks for a
/// checkpoint. Once one is made on another connection, the WAL starts over and the asking
/// stops.
#[test]
fn commits_leave_checkpoints_to_the_journal_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let conn = open::open_connection(&open::OpenOptions {
        path: &path,
        busy_timeout: std::time::Duration::from_secs(5),
        max_size: None,
        signing: false,
    })
    .expect("open");
    let mut writer = Writer::new(conn, None, true);
    let mut asked_at = None;
    for _ in 0..10_000 {
        if wal_frames(&path) >= 1_500 {
            break;
        }
        let attempt = AttemptId::generate();
        writer.write_all(vec![Write::Append(Box::new(event(&attempt)), None)]);
        if writer.take_checkpoint_ask() {
            asked_at.get_or_insert(wal_frames(&path));
        }
    }
    assert!(
        wal_frames(&path) >= 1_500,
        "no commit checkpointed, so the WAL holds every commit's frames"
    );
    let asked_at = asked_at.expect("a commit past 1,000 WAL pages asked for a checkpoint");
    assert!(
        (1_000..1_010).contains(&asked_at),
        "the first ask came at {asked_at} frames"
    );

    let checkpointer = open::open_checkpointer(&path).expect("a second connection");
    combine::checkpoint(&checkpointer);
    writer.write_all(vec![Write::Append(
        Box::new(event(&AttemptId::generate())),
        None,
    )]);
    assert!(
        !writer.take_checkpoint_ask(),
        "after the checkpoint the WAL started over, and a commit no longer asks"
    );
}
