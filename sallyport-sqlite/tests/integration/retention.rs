//! Retention on a real SQLite file: a range sealed behind a checkpoint is exported and
//! pruned, what remains verifies (signed too) and grows, a second seal carries on from the
//! first, proofs of later records still build, and an anchor edited in the file, records
//! pruned without a seal, or a prune no checkpoint covers are refused or found.

use sallyport_core::journal::checkpoint::{
    Checkpoint, DEFAULT_SHARD, InclusionProof, ProveError, checkpoint_if_grown, make_checkpoint,
};
use sallyport_core::journal::merkle::Accumulator;
use sallyport_core::journal::retention::{Anchor, SealedRange};
use sallyport_core::journal::{
    AuditEvent, BreakKind, HeadSigningKey, Intent, Journal, JournalError, SqliteJournal,
};

use super::audit::{journal_with, tamper};

/// Seals the default shard at a fresh checkpoint: the export's text and the anchor pruned
/// to. Checks the export before pruning, as `sallyport audit seal` does.
async fn seal(journal: &SqliteJournal, key: &HeadSigningKey) -> (String, Anchor, Checkpoint) {
    let cp = make_checkpoint(journal, key).await.expect("checkpoint");
    let before = journal
        .anchors()
        .await
        .expect("anchors")
        .into_iter()
        .find(|a| a.shard == DEFAULT_SHARD)
        .unwrap_or_else(|| Anchor::genesis(DEFAULT_SHARD));
    let rows = journal.chain_rows().await.expect("rows");
    let (range, anchor) = SealedRange::build(&before, &rows, &cp).expect("seal");
    let text = range.to_json_lines();
    let sealed = SealedRange::parse(&text)
        .expect("parse")
        .verify(&key.verifying_key())
        .expect("the export verifies");
    assert_eq!(sealed.anchor, anchor);
    let pruned = journal.prune_sealed(&anchor).await.expect("prune");
    assert_eq!(pruned, anchor.seq - before.seq);
    (text, anchor, cp)
}

/// Appends `n` observe records (attempt row and record together).
async fn append(journal: &SqliteJournal, n: usize) {
    for _ in 0..n {
        let intent = Intent::for_bench(false);
        let event = AuditEvent::for_bench(&intent);
        journal
            .append_with_intent(intent, event)
            .await
            .expect("append");
    }
}

fn count(path: &std::path::Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.query_row(sql, [], |r| r.get(0)).expect("count")
}

#[tokio::test]
async fn a_sealed_range_is_pruned_and_what_remains_verifies_grows_and_seals_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 7).await;
    let key = HeadSigningKey::generate().expect("key");
    let public = key.verifying_key();
    // The journal signs its heads with the same key (read back from its file).
    let key_file = dir.path().join("head.key");
    key.write_new(&key_file).expect("write key");
    let journal = SqliteJournal::builder(&path)
        .signing_key(HeadSigningKey::read_file(&key_file).expect("read key"))
        .open()
        .expect("open");
    assert_eq!(count(&path, "SELECT count(*) FROM attempts"), 7);
    assert_eq!(count(&path, "PRAGMA user_version"), 1);

    let (first, anchor, _) = seal(&journal, &key).await;
    // Format 2 from the first prune: a build that knows no anchors refuses the file rather
    // than restart the chain at record 1.
    assert_eq!(count(&path, "PRAGMA user_version"), 2);
    assert_eq!((anchor.seq, anchor.frontier.len()), (7, 3));
    assert!(journal.records().await.expect("records").is_empty());
    assert_eq!(count(&path, "SELECT count(*) FROM audit"), 0);
    assert_eq!(
        count(&path, "SELECT count(*) FROM attempts"),
        0,
        "the attempt rows the pruned records closed went with them"
    );
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
    let report = journal.verify().await.expect("verify");
    assert_eq!(report.first_break, None, "{report:?}");
    assert_eq!((report.records, report.head.count), (0, 7));
    assert_eq!(report.head.hash, anchor.hash);
    let report = journal.verify_signed(&public).await.expect("verify");
    assert_eq!((report.first_break, report.last_signed), (None, Some(7)));

    // The seal's checkpoint covers the pruned shard: a periodic checkpoint signs nothing.
    assert_eq!(
        checkpoint_if_grown(&journal, &key).await.expect("checked"),
        None
    );

    // Appending after the prune carries on at record 8, linked to the anchor, signed.
    append(&journal, 4).await;
    let records = journal.records().await.expect("records");
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [8, 9, 10, 11]);
    assert_eq!(records[0].prev_hash, anchor.hash);
    let report = journal.verify_signed(&public).await.expect("verify");
    assert_eq!((report.first_break, report.last_signed), (None, Some(11)));

    // A later record proves against a checkpoint made after the prune; a pruned one not.
    let cp = checkpoint_if_grown(&journal, &key)
        .await
        .expect("checkpoint")
        .expect("the journal grew");
    assert_eq!(cp.shard(DEFAULT_SHARD).map(|h| h.size), Some(11));
    let rows = journal.chain_rows().await.expect("rows");
    let anchors = journal.anchors().await.expect("anchors");
    assert_eq!(anchors, std::slice::from_ref(&anchor));
    let proof =
        InclusionProof::build_from(Some(&anchor), &rows, DEFAULT_SHARD, &cp, 9).expect("proof");
    assert_eq!(proof.verify(&public).expect("verifies").seq, 9);
    assert!(matches!(
        InclusionProof::build_from(Some(&anchor), &rows, DEFAULT_SHARD, &cp, 3),
        Err(ProveError::Pruned { seq: 3, upto: 7 })
    ));

    // A second seal starts where the first ended; both exports verify on their own.
    let (second, anchor2, _) = seal(&journal, &key).await;
    assert_eq!(anchor2.seq, 11);
    let second_range = SealedRange::parse(&second).expect("parse");
    assert_eq!(
        (second_range.header.first_seq, second_range.header.last_seq),
        (8, 11)
    );
    assert_eq!(second_range.header.frontier, anchor.frontier);
    for text in [&first, &second] {
        SealedRange::parse(text)
            .expect("parse")
            .verify(&public)
            .expect("verifies");
    }
    // The proof made before the second prune still verifies: it carries its record.
    proof.verify(&public).expect("still verifies");
    append(&journal, 2).await;
    drop(journal);
    let journal = SqliteJournal::open(&path).expect("reopen");
    let report = journal.verify_signed(&public).await.expect("verify");
    assert_eq!((report.first_break, report.last_signed), (None, Some(13)));
    assert_eq!(journal.records().await.expect("records").len(), 2);
}

#[tokio::test]
async fn an_anchor_edited_in_the_file_fails_verify_signed() {
    for (what, sql) in [
        (
            "frontier",
            "UPDATE anchors SET frontier = '[\"0000000000000000000000000000000000000000000000000000000000000000\",\"0000000000000000000000000000000000000000000000000000000000000000\"]'",
        ),
        (
            "hash",
            "UPDATE anchors SET hash = '1111111111111111111111111111111111111111111111111111111111111111'",
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, _) = journal_with(dir.path(), 6).await;
        let key = HeadSigningKey::generate().expect("key");
        {
            let journal = SqliteJournal::open(&path).expect("open");
            seal(&journal, &key).await;
            let report = journal
                .verify_signed(&key.verifying_key())
                .await
                .expect("verify");
            assert_eq!(report.first_break, None, "{report:?}");
        }
        tamper(&path, sql);
        let journal = SqliteJournal::open(&path).expect("open");
        let report = journal
            .verify_signed(&key.verifying_key())
            .await
            .expect("verify");
        let brk = report.first_break.expect("an edited anchor is found");
        assert_eq!(
            (brk.seq, brk.kind),
            (6, BreakKind::HeadMismatch),
            "{what}: {}",
            brk.detail
        );
    }
}

#[tokio::test]
async fn records_pruned_without_a_signed_seal_fail_verify_signed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 5).await;
    let key = HeadSigningKey::generate().expect("key");
    let journal = SqliteJournal::open(&path).expect("open");
    make_checkpoint(&journal, &key).await.expect("checkpoint");
    // Someone with the file but not the key deletes records 1 to 3 and writes a correct
    // anchor for them by hand: the chain links, but no signed checkpoint is at record 3.
    let rows = journal.chain_rows().await.expect("rows");
    drop(journal);
    let mut acc = Accumulator::new();
    for row in &rows[..3] {
        acc.push(sallyport_core::journal::checkpoint::record_leaf(&row.hash).expect("leaf"));
    }
    let forged = Anchor::new(DEFAULT_SHARD, rows[2].hash.clone(), &acc);
    let frontier = serde_json::to_string(&forged.frontier).expect("json");
    tamper(
        &path,
        &format!(
            "DELETE FROM attempts WHERE attempt_id IN \
               (SELECT json_extract(event, '$.attempt_id') FROM audit WHERE seq <= 3); \
             DELETE FROM audit WHERE seq <= 3; \
             INSERT INTO anchors (shard, seq, hash, frontier) VALUES ('default', 3, '{}', '{frontier}')",
            forged.hash
        ),
    );
    let journal = SqliteJournal::open(&path).expect("reopen");
    let report = journal.verify().await.expect("verify");
    assert_eq!(report.first_break, None, "unkeyed, the chain links up");
    let report = journal
        .verify_signed(&key.verifying_key())
        .await
        .expect("verify");
    let brk = report.first_break.expect("found");
    assert_eq!(
        (brk.seq, brk.kind),
        (3, BreakKind::HeadMismatch),
        "{}",
        brk.detail
    );
    assert!(
        brk.detail.contains("matches no checkpoint"),
        "{}",
        brk.detail
    );
}

#[tokio::test]
async fn pruning_refuses_a_range_no_stored_checkpoint_covers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 4).await;
    let key = HeadSigningKey::generate().expect("key");
    let journal = SqliteJournal::open(&path).expect("open");
    let rows = journal.chain_rows().await.expect("rows");
    // A checkpoint signed but never stored in the journal.
    let hashes: Vec<String> = rows.iter().map(|r| r.hash.clone()).collect();
    let head =
        sallyport_core::journal::checkpoint::ShardHead::over(DEFAULT_SHARD, &hashes).expect("head");
    let cp = Checkpoint::sign(&key, vec![head], "2026-01-01T00:00:00Z");
    let (_, anchor) =
        SealedRange::build(&Anchor::genesis(DEFAULT_SHARD), &rows, &cp).expect("range");
    let err = journal.prune_sealed(&anchor).await.expect_err("refused");
    assert!(matches!(err, JournalError::PruneRefused { .. }), "{err}");
    assert!(err.to_string().contains("no stored checkpoint"), "{err}");
    assert_eq!(
        count(&path, "SELECT count(*) FROM audit"),
        4,
        "nothing deleted"
    );
    assert!(journal.anchors().await.expect("anchors").is_empty());
    // Another shard than the one the file holds.
    let mut other = anchor.clone();
    other.shard = "eu".to_owned();
    assert!(matches!(
        journal.prune_sealed(&other).await,
        Err(JournalError::PruneRefused { .. })
    ));
}
