//! Signed checkpoints and inclusion proofs on a real SQLite file: a checkpoint is stored
//! beside the chain without changing a record, every record proves with the public key
//! alone, `verify_signed` checks every checkpoint, and a journal rewritten since its
//! checkpoint is found and gives no proof.

use sallyport_core::journal::checkpoint::{
    CheckpointError, DEFAULT_SHARD, InclusionProof, ProofError, ProveError, make_checkpoint,
};
use sallyport_core::journal::{BreakKind, HeadSigningKey, Journal, SqliteJournal};

use super::audit::{journal_with, rewrite_and_rehash_from, tamper};

/// Every `audit` row as stored: what must not change when a checkpoint is made.
fn stored_rows(path: &std::path::Path) -> Vec<(i64, String, String, String)> {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.prepare("SELECT seq, prev_hash, hash, event FROM audit ORDER BY seq")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[tokio::test]
async fn every_record_proves_with_the_public_key_after_a_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 7).await;
    let before = stored_rows(&path);
    let key = HeadSigningKey::generate().expect("key");
    let public = key.verifying_key();
    let journal = SqliteJournal::open(&path).expect("open");
    assert!(journal.checkpoints().await.expect("none yet").is_empty());

    let cp = make_checkpoint(&journal, &key).await.expect("checkpoint");
    assert_eq!(cp.shard(DEFAULT_SHARD).map(|h| h.size), Some(7));
    drop(journal);
    assert_eq!(stored_rows(&path), before, "no record was rewritten");

    let journal = SqliteJournal::open(&path).expect("reopen");
    assert_eq!(journal.checkpoints().await.expect("read"), vec![cp.clone()]);
    let report = journal.verify_signed(&public).await.expect("verify");
    assert_eq!((report.first_break, report.last_signed), (None, Some(7)));
    let rows = journal.chain_rows().await.expect("rows");
    for (seq, stored) in (1..=7).zip(&before) {
        let proof = InclusionProof::build(&rows, DEFAULT_SHARD, &cp, seq).expect("proof");
        assert_eq!(proof.record.event, stored.3, "the event JSON byte for byte");
        assert_eq!(proof.verify(&public).expect("verifies").seq, seq);
    }
}

#[tokio::test]
async fn a_journal_made_before_checkpoints_gains_them_without_a_record_rewritten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, head) = journal_with(dir.path(), 4).await;
    // The file as a build without checkpoints left it: the same format version, no table.
    tamper(&path, "DROP TABLE checkpoints");
    let before = stored_rows(&path);
    let key = HeadSigningKey::generate().expect("key");
    let journal = SqliteJournal::open(&path).expect("open the older file");
    let report = journal.verify().await.expect("verify");
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.head, head);
    let cp = make_checkpoint(&journal, &key).await.expect("checkpoint");
    let rows = journal.chain_rows().await.expect("rows");
    let proof = InclusionProof::build(&rows, DEFAULT_SHARD, &cp, 1).expect("proof");
    proof.verify(&key.verifying_key()).expect("verifies");
    drop(journal);
    assert_eq!(stored_rows(&path), before);
}

#[tokio::test]
async fn records_rewritten_and_rehashed_after_a_checkpoint_are_found_and_give_no_proof() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 5).await;
    let key = HeadSigningKey::generate().expect("key");
    let public = key.verifying_key();
    let (cp, old_proof) = {
        let journal = SqliteJournal::open(&path).expect("open");
        let cp = make_checkpoint(&journal, &key).await.expect("checkpoint");
        let rows = journal.chain_rows().await.expect("rows");
        let proof = InclusionProof::build(&rows, DEFAULT_SHARD, &cp, 4).expect("proof");
        (cp, proof)
    };
    rewrite_and_rehash_from(&path, 3);
    let journal = SqliteJournal::open(&path).expect("reopen");
    // The unkeyed chain links up again; the checkpoint does not.
    assert!(journal.verify().await.expect("verify").is_intact());
    let report = journal.verify_signed(&public).await.expect("verify");
    let brk = report.first_break.expect("mismatch");
    assert_eq!(
        (brk.seq, brk.kind),
        (5, BreakKind::HeadMismatch),
        "{}",
        brk.detail
    );
    let rows = journal.chain_rows().await.expect("rows");
    assert!(matches!(
        InclusionProof::build(&rows, DEFAULT_SHARD, &cp, 4),
        Err(ProveError::Rewritten { .. })
    ));
    // The rewritten record with the old path: the path no longer leads to the signed root.
    let mut forged = old_proof.clone();
    forged.record.event = rows[3].event_json.clone();
    forged.record.prev_hash = rows[3].prev_hash.clone();
    assert_eq!(forged.verify(&public), Err(ProofError::Path));
    // The proof taken before still holds: it is of the record as signed.
    old_proof.verify(&public).expect("the original record");
}

#[tokio::test]
async fn a_deleted_record_breaks_the_checkpoint_and_a_broken_chain_is_not_checkpointed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 4).await;
    let key = HeadSigningKey::generate().expect("key");
    {
        let journal = SqliteJournal::open(&path).expect("open");
        make_checkpoint(&journal, &key).await.expect("checkpoint");
    }
    // The last record and its attempt row, so only the checkpoint can tell.
    tamper(
        &path,
        "DELETE FROM attempts WHERE attempt_id = \
         (SELECT json_extract(event, '$.attempt_id') FROM audit WHERE seq = 4); \
         DELETE FROM audit WHERE seq = 4",
    );
    assert!(
        SqliteJournal::open(&path)
            .expect("open")
            .verify()
            .await
            .expect("verify")
            .is_intact()
    );
    let journal = SqliteJournal::open(&path).expect("reopen");
    let report = journal
        .verify_signed(&key.verifying_key())
        .await
        .expect("verify");
    let brk = report.first_break.expect("truncated");
    assert_eq!(
        (brk.seq, brk.kind),
        (4, BreakKind::Deleted),
        "{}",
        brk.detail
    );
    drop(journal);

    tamper(&path, "DELETE FROM audit WHERE seq = 2");
    let journal = SqliteJournal::open(&path).expect("reopen");
    let err = make_checkpoint(&journal, &key).await.expect_err("broken");
    assert!(
        matches!(err, CheckpointError::Broken(ref b) if b.kind == BreakKind::Deleted),
        "{err}"
    );
    assert_eq!(journal.checkpoints().await.expect("read").len(), 1);
}

#[tokio::test]
async fn an_unreadable_stored_checkpoint_is_reported_not_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = journal_with(dir.path(), 2).await;
    let key = HeadSigningKey::generate().expect("key");
    {
        let journal = SqliteJournal::open(&path).expect("open");
        make_checkpoint(&journal, &key).await.expect("checkpoint");
    }
    tamper(
        &path,
        "UPDATE checkpoints SET checkpoint = '{\"format\":1}'",
    );
    let journal = SqliteJournal::open(&path).expect("reopen");
    let err = journal.checkpoints().await.expect_err("unreadable");
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    assert!(
        text.contains("checkpoint 1 is not a readable checkpoint"),
        "{text}"
    );
    assert!(journal.verify_signed(&key.verifying_key()).await.is_err());
}
