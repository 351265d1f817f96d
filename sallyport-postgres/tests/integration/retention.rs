//! Retention on a real PostgreSQL journal (migration 9): a sealed range is pruned in one
//! transaction, what remains verifies signed and grows from the anchor, a later record
//! proves, a second seal carries on, a named shard is sealed alone, an anchor row edited in
//! the database fails `verify_signed`, and a prune no stored checkpoint covers deletes
//! nothing.

use sallyport_core::journal::checkpoint::{
    Checkpoint, DEFAULT_SHARD, InclusionProof, ProveError, ShardHead, make_checkpoint,
};
use sallyport_core::journal::retention::{Anchor, SealedRange};
use sallyport_core::journal::{BreakKind, HeadSigningKey, Journal, JournalError};
use sallyport_tests::postgres::{TestDb, event, intent};

/// `n` records, each closing its own attempt.
async fn append(journal: &impl Journal, n: usize) {
    for _ in 0..n {
        let intent = intent();
        journal.write_intent(&intent).await.expect("intent");
        journal.append(event(&intent)).await.expect("append");
    }
}

/// Seals `shard` at a fresh checkpoint and prunes it, the export checked first; returns the
/// export's text and the anchor.
async fn seal(journal: &impl Journal, key: &HeadSigningKey, shard: &str) -> (String, Anchor) {
    let cp = make_checkpoint(journal, key).await.expect("checkpoint");
    let before = journal
        .anchors()
        .await
        .expect("anchors")
        .into_iter()
        .find(|a| a.shard == shard)
        .unwrap_or_else(|| Anchor::genesis(shard));
    let rows = journal.chain_rows().await.expect("rows");
    let (range, anchor) = SealedRange::build(&before, &rows, &cp).expect("seal");
    let text = range.to_json_lines();
    let sealed = SealedRange::parse(&text)
        .expect("parse")
        .verify(&key.verifying_key())
        .expect("verifies");
    assert_eq!(sealed.anchor, anchor);
    assert_eq!(
        journal.prune_sealed(&anchor).await.expect("prune"),
        anchor.seq - before.seq
    );
    (text, anchor)
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    db.sql()
        .await
        .query_one(sql, &[])
        .await
        .expect("count")
        .get(0)
}

#[tokio::test]
async fn a_sealed_range_is_pruned_and_what_remains_verifies_grows_proves_and_seals_again() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    append(&journal, 6).await;
    let key = HeadSigningKey::generate().expect("key");
    let public = key.verifying_key();

    let (first, anchor) = seal(&journal, &key, DEFAULT_SHARD).await;
    assert_eq!((anchor.seq, anchor.frontier.len()), (6, 2));
    assert!(journal.records().await.expect("records").is_empty());
    assert_eq!(
        count(&db, "SELECT count(*) FROM sallyport_attempts").await,
        0
    );
    assert!(journal.unresolved().await.expect("unresolved").is_empty());
    assert_eq!(
        journal.anchors().await.expect("anchors"),
        std::slice::from_ref(&anchor)
    );
    let report = journal.verify_signed(&public).await.expect("verify");
    assert_eq!((report.first_break, report.last_signed), (None, Some(6)));
    assert_eq!((report.records, report.head.count), (0, 6));

    // The next record follows the pruned ones, linked to the anchor.
    append(&journal, 3).await;
    let records = journal.records().await.expect("records");
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [7, 8, 9]);
    assert_eq!(records[0].prev_hash, anchor.hash);
    let cp = make_checkpoint(&journal, &key).await.expect("checkpoint");
    let report = journal.verify_signed(&public).await.expect("verify");
    assert_eq!((report.first_break, report.last_signed), (None, Some(9)));
    let rows = journal.chain_rows().await.expect("rows");
    let proof =
        InclusionProof::build_from(Some(&anchor), &rows, DEFAULT_SHARD, &cp, 8).expect("proof");
    assert_eq!(proof.verify(&public).expect("verifies").seq, 8);
    assert!(matches!(
        InclusionProof::build_from(Some(&anchor), &rows, DEFAULT_SHARD, &cp, 2),
        Err(ProveError::Pruned { seq: 2, upto: 6 })
    ));

    let (second, anchor2) = seal(&journal, &key, DEFAULT_SHARD).await;
    assert_eq!(anchor2.seq, 9);
    let range = SealedRange::parse(&second).expect("parse");
    assert_eq!(
        (range.header.first_seq, range.header.frontier),
        (7, anchor.frontier)
    );
    for text in [&first, &second] {
        SealedRange::parse(text)
            .expect("parse")
            .verify(&public)
            .expect("verifies");
    }
    append(&journal, 1).await;
    let report = journal.verify().await.expect("verify");
    assert_eq!((report.first_break, report.head.count), (None, 10));
}

#[tokio::test]
async fn a_named_shard_is_sealed_alone_and_the_default_shard_keeps_its_records() {
    let db = TestDb::create().await;
    let default = db.journal("a").await;
    let eu = db
        .builder()
        .owner("b")
        .audit_shard("eu")
        .connect()
        .await
        .expect("eu journal");
    append(&default, 2).await;
    append(&eu, 5).await;
    let key = HeadSigningKey::generate().expect("key");
    let (_, anchor) = seal(&eu, &key, "eu").await;
    assert_eq!((anchor.shard.as_str(), anchor.seq), ("eu", 5));
    let left: Vec<(String, u64)> = default
        .records()
        .await
        .expect("records")
        .into_iter()
        .map(|r| (r.shard, r.seq))
        .collect();
    assert_eq!(left, [("default".to_owned(), 1), ("default".to_owned(), 2)]);
    append(&eu, 1).await;
    make_checkpoint(&eu, &key).await.expect("checkpoint");
    let report = eu
        .verify_signed(&key.verifying_key())
        .await
        .expect("verify");
    assert_eq!(report.first_break, None, "{report:?}");
    let shards: Vec<(&str, u64, Option<u64>)> = report
        .shards
        .iter()
        .map(|s| (s.shard.as_str(), s.head.count, s.last_signed))
        .collect();
    assert_eq!(shards, [("default", 2, Some(2)), ("eu", 6, Some(6))]);
}

#[tokio::test]
async fn an_anchor_row_edited_in_the_database_fails_verify_signed() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    append(&journal, 5).await;
    let key = HeadSigningKey::generate().expect("key");
    seal(&journal, &key, DEFAULT_SHARD).await;
    append(&journal, 2).await;
    make_checkpoint(&journal, &key).await.expect("checkpoint");
    assert!(
        journal
            .verify_signed(&key.verifying_key())
            .await
            .expect("verify")
            .is_intact()
    );
    db.sql()
        .await
        .execute(
            "UPDATE sallyport_anchors SET frontier = $1",
            &[&serde_json::to_string(&vec!["0".repeat(64), "0".repeat(64)]).expect("json")],
        )
        .await
        .expect("tamper");
    let report = journal
        .verify_signed(&key.verifying_key())
        .await
        .expect("verify");
    let brk = report.first_break.expect("found");
    assert_eq!(
        (brk.seq, brk.kind),
        (5, BreakKind::HeadMismatch),
        "{}",
        brk.detail
    );
}

#[tokio::test]
async fn a_prune_no_stored_checkpoint_covers_deletes_nothing() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    append(&journal, 4).await;
    let key = HeadSigningKey::generate().expect("key");
    let rows = journal.chain_rows().await.expect("rows");
    let hashes: Vec<String> = rows.iter().map(|r| r.hash.clone()).collect();
    let head = ShardHead::over(DEFAULT_SHARD, &hashes).expect("head");
    let cp = Checkpoint::sign(&key, vec![head], "2026-01-01T00:00:00Z");
    let (_, anchor) =
        SealedRange::build(&Anchor::genesis(DEFAULT_SHARD), &rows, &cp).expect("range");
    let err = journal.prune_sealed(&anchor).await.expect_err("refused");
    assert!(matches!(err, JournalError::PruneRefused { .. }), "{err}");
    assert_eq!(count(&db, "SELECT count(*) FROM sallyport_audit").await, 4);
    assert!(journal.anchors().await.expect("anchors").is_empty());
    let mut other = anchor;
    other.shard = "nowhere".to_owned();
    assert!(matches!(
        journal.prune_sealed(&other).await,
        Err(JournalError::PruneRefused { .. })
    ));
}
