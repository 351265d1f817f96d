//! Signed checkpoints and inclusion proofs on a real PostgreSQL journal: stored by
//! migration 7 beside the chain, checked by `verify_signed`, and a database from before the
//! migration gains them with every record still verifiable.

use sallyport_core::journal::checkpoint::{
    DEFAULT_SHARD, InclusionProof, ProofError, ProveError, make_checkpoint,
};
use sallyport_core::journal::{BreakKind, HeadSigningKey, Journal, chain_hash};
use sallyport_postgres::SCHEMA_VERSION;
use sallyport_tests::postgres::{TestDb, event, intent};

/// `n` records, each closing its own attempt.
async fn append(journal: &impl Journal, n: usize) {
    for _ in 0..n {
        let intent = intent();
        journal.write_intent(&intent).await.expect("intent");
        journal.append(event(&intent)).await.expect("append");
    }
}

#[tokio::test]
async fn records_prove_against_a_stored_checkpoint_and_verify_signed_checks_it() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    append(&journal, 6).await;
    let key = HeadSigningKey::generate().expect("key");
    let public = key.verifying_key();
    assert!(journal.checkpoints().await.expect("none").is_empty());
    let cp = make_checkpoint(&journal, &key).await.expect("checkpoint");
    assert_eq!(journal.checkpoints().await.expect("read"), vec![cp.clone()]);
    let report = journal.verify_signed(&public).await.expect("verify");
    assert_eq!((report.first_break, report.last_signed), (None, Some(6)));

    let rows = journal.chain_rows().await.expect("rows");
    for seq in 1..=6 {
        let proof = InclusionProof::build(&rows, DEFAULT_SHARD, &cp, seq).expect("proof");
        assert_eq!(proof.verify(&public).expect("verifies").seq, seq);
    }
    let kept = InclusionProof::build(&rows, DEFAULT_SHARD, &cp, 3).expect("proof");

    // Record 3 rewritten and every later hash recomputed: the unkeyed chain links up, the
    // checkpoint does not, and no proof is made from the rewritten journal.
    let sql = db.sql().await;
    let mut prev = rows[1].hash.clone();
    for row in &rows[2..] {
        let forged = row
            .event_json
            .replacen("\"session_id\":\"", "\"session_id\":\"x", 1);
        let hash = chain_hash(&prev, u64::try_from(row.seq).expect("seq"), &forged);
        sql.execute(
            "UPDATE sallyport_audit SET event = $2, prev_hash = $3, hash = $4 WHERE seq = $1",
            &[&row.seq, &forged, &prev, &hash],
        )
        .await
        .expect("rewrite");
        prev = hash;
    }
    assert!(journal.verify().await.expect("verify").is_intact());
    let report = journal.verify_signed(&public).await.expect("verify");
    let brk = report.first_break.expect("mismatch");
    assert_eq!(
        (brk.seq, brk.kind),
        (6, BreakKind::HeadMismatch),
        "{}",
        brk.detail
    );
    let rewritten = journal.chain_rows().await.expect("rows");
    assert!(matches!(
        InclusionProof::build(&rewritten, DEFAULT_SHARD, &cp, 3),
        Err(ProveError::Rewritten { .. })
    ));
    let mut forged = kept.clone();
    forged.record.event = rewritten[2].event_json.clone();
    assert_eq!(forged.verify(&public), Err(ProofError::Path));
    kept.verify(&public)
        .expect("the proof of the record as signed");
}

#[tokio::test]
async fn a_database_at_schema_version_6_gains_checkpoints_and_every_record_still_verifies() {
    let db = TestDb::create().await;
    let journal = db.journal("a").await;
    append(&journal, 3).await;
    let before = journal.chain_rows().await.expect("rows");
    drop(journal);
    // Back to what a build with six migrations left.
    db.sql()
        .await
        .batch_execute(&format!(
            "{} DROP TABLE sallyport_checkpoints; \
             DELETE FROM sallyport_schema_version WHERE version > 6;",
            super::shards::UNDO_MIGRATION_8
        ))
        .await
        .expect("downgrade");
    let journal = db.journal("b").await;
    let versions: i64 = db
        .sql()
        .await
        .query_one("SELECT max(version) FROM sallyport_schema_version", &[])
        .await
        .expect("version")
        .get(0);
    assert_eq!(versions, SCHEMA_VERSION);
    assert!(journal.verify().await.expect("verify").is_intact());
    let key = HeadSigningKey::generate().expect("key");
    let cp = make_checkpoint(&journal, &key).await.expect("checkpoint");
    let rows = journal.chain_rows().await.expect("rows");
    assert_eq!(rows, before, "no record was rewritten");
    let proof = InclusionProof::build(&rows, DEFAULT_SHARD, &cp, 2).expect("proof");
    proof.verify(&key.verifying_key()).expect("verifies");
}
