//! The audit chain in shards on a real PostgreSQL journal (migration 8): journals on
//! different shards append to chains of their own under head rows of their own, so one
//! never waits on the other's lock; `verify` checks each shard, one checkpoint signs every
//! shard's head, and a database from before the migration keeps every record's hash.

use std::sync::Arc;
use std::time::Duration;

use sallyport_core::journal::checkpoint::{DEFAULT_SHARD, InclusionProof, make_checkpoint};
use sallyport_core::journal::{BreakKind, HeadSigningKey, Journal, JournalError};
use sallyport_postgres::{PostgresJournal, SCHEMA_VERSION};
use sallyport_tests::postgres::{TestDb, event, intent};

/// What migrations 8 and 9 did, undone: the tables as a build with seven migrations left
/// them.
pub(crate) const UNDO_MIGRATION_8: &str = "
    DROP TABLE sallyport_anchors; -- migration 9's, which comes after
    ALTER TABLE sallyport_audit DROP COLUMN shard;
    ALTER TABLE sallyport_audit ADD PRIMARY KEY (seq);
    ALTER TABLE sallyport_chain_head DROP COLUMN shard;
    ALTER TABLE sallyport_chain_head ADD COLUMN id INTEGER NOT NULL DEFAULT 1 CHECK (id = 1);
    ALTER TABLE sallyport_chain_head ALTER COLUMN id DROP DEFAULT;
    ALTER TABLE sallyport_chain_head ADD PRIMARY KEY (id);
    ALTER TABLE sallyport_heads DROP COLUMN shard;
    ALTER TABLE sallyport_heads ADD PRIMARY KEY (count);
    DELETE FROM sallyport_schema_version WHERE version > 7;";

/// `n` records, each closing its own attempt.
async fn append(journal: &impl Journal, n: usize) {
    for _ in 0..n {
        let intent = intent();
        journal.write_intent(&intent).await.expect("intent");
        journal.append(event(&intent)).await.expect("append");
    }
}

/// A signing key kept in a file, so that each journal of a test reads its own copy.
struct Key {
    dir: tempfile::TempDir,
    key: HeadSigningKey,
}

impl Key {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let key = HeadSigningKey::generate().expect("key");
        key.write_new(dir.path().join("head.key")).expect("write");
        Self { dir, key }
    }

    fn copy(&self) -> HeadSigningKey {
        HeadSigningKey::read_file(self.dir.path().join("head.key")).expect("read")
    }
}

async fn on_shard(db: &TestDb, shard: &str, key: &Key) -> Arc<PostgresJournal> {
    Arc::new(
        db.builder()
            .owner(shard)
            .audit_shard(shard)
            .signing_key(key.copy())
            .connect()
            .await
            .expect("journal connects"),
    )
}

#[tokio::test]
async fn journals_on_three_shards_append_at_once_and_one_checkpoint_signs_them_all() {
    let db = TestDb::create().await;
    let key = Key::new();
    let public = key.key.verifying_key();
    let default = on_shard(&db, DEFAULT_SHARD, &key).await;
    let (eu, us) = (
        on_shard(&db, "eu", &key).await,
        on_shard(&db, "us", &key).await,
    );
    // Each journal's calls in flight at once, the three journals at once.
    let many = |j: &Arc<PostgresJournal>| {
        let j = Arc::clone(j);
        async move {
            let calls = (0..12).map(|_| {
                let j = Arc::clone(&j);
                async move {
                    let intent = intent();
                    j.write_intent(&intent).await.expect("intent");
                    j.append(event(&intent)).await.expect("append")
                }
            });
            futures_util::future::join_all(calls).await
        }
    };
    let (d, e, u) = tokio::join!(many(&default), many(&eu), many(&us));
    assert!(d.iter().all(|r| r.shard == DEFAULT_SHARD));
    assert!(e.iter().all(|r| r.shard == "eu"));
    let mut seqs: Vec<u64> = u.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (1..=12).collect::<Vec<_>>(),
        "each shard counts from 1"
    );

    // Every shard verifies, each signed head by head, from any journal of the database.
    let report = eu.verify_signed(&public).await.expect("verify");
    assert_eq!(report.first_break, None, "{report:?}");
    assert_eq!(report.records, 36);
    let shards: Vec<(&str, u64, Option<u64>)> = report
        .shards
        .iter()
        .map(|s| (s.shard.as_str(), s.head.count, s.last_signed))
        .collect();
    assert_eq!(
        shards,
        [
            ("default", 12, Some(12)),
            ("eu", 12, Some(12)),
            ("us", 12, Some(12))
        ]
    );

    // One checkpoint over every shard; a record of `us` proves against it.
    let cp = make_checkpoint(default.as_ref(), &key.key)
        .await
        .expect("checkpoint");
    let sizes: Vec<(&str, u64)> = cp
        .shards
        .iter()
        .map(|h| (h.shard.as_str(), h.size))
        .collect();
    assert_eq!(sizes, [("default", 12), ("eu", 12), ("us", 12)]);
    let rows = us.chain_rows().await.expect("rows");
    let proof = InclusionProof::build(&rows, "us", &cp, 5).expect("proof");
    let proven = proof.verify(&public).expect("verifies");
    assert_eq!((proven.shard.as_str(), proven.seq), ("us", 5));
    assert_eq!(
        proof.receipt_id,
        u.iter().find(|r| r.seq == 5).expect("5").event.receipt_id
    );

    // A record of `us` edited in the database: the break names `us`, the others are intact.
    db.sql()
        .await
        .execute(
            "UPDATE sallyport_audit SET event = replace(event, '\"bench\"', '\"forged\"') \
             WHERE shard = 'us' AND seq = 7",
            &[],
        )
        .await
        .expect("edit");
    let report = default.verify().await.expect("verify");
    let brk = report.first_break.expect("a break");
    assert_eq!(
        (brk.shard.as_deref(), brk.seq, brk.kind),
        (Some("us"), 7, BreakKind::Edited)
    );
    assert_eq!(report.shards[0].first_break, None);
    assert_eq!(report.shards[1].first_break, None);
}

#[tokio::test]
async fn an_append_to_one_shard_does_not_wait_for_another_shards_head_lock() {
    let db = TestDb::create().await;
    let key = Key::new();
    let default = on_shard(&db, DEFAULT_SHARD, &key).await;
    let eu = on_shard(&db, "eu", &key).await;
    append(default.as_ref(), 1).await;
    append(eu.as_ref(), 1).await;

    // Another session holds the default shard's head row, as a batch mid-commit does.
    let mut holder = db.sql().await;
    let tx = holder.transaction().await.expect("begin");
    tx.query_one(
        "SELECT seq FROM sallyport_chain_head WHERE shard = 'default' FOR UPDATE",
        &[],
    )
    .await
    .expect("lock");

    // `eu` appends at once; `default` waits for the lock.
    let intent_eu = intent();
    eu.write_intent(&intent_eu).await.expect("intent");
    let appended = tokio::time::timeout(Duration::from_secs(10), eu.append(event(&intent_eu)))
        .await
        .expect("the eu append did not wait for the default shard's lock")
        .expect("append");
    assert_eq!((appended.shard.as_str(), appended.seq), ("eu", 2));
    let intent_d = intent();
    default.write_intent(&intent_d).await.expect("intent");
    let waiting = tokio::spawn({
        let default = Arc::clone(&default);
        async move { default.append(event(&intent_d)).await }
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !waiting.is_finished(),
        "the default shard's append went through its locked head row"
    );
    tx.rollback().await.expect("release");
    let record = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the default append finished once the lock was released")
        .expect("task")
        .expect("append");
    assert_eq!((record.shard.as_str(), record.seq), (DEFAULT_SHARD, 2));
    assert!(default.verify().await.expect("verify").is_intact());
}

#[tokio::test]
async fn a_shard_name_outside_the_rules_is_refused_at_connect_with_the_rule() {
    let db = TestDb::create().await;
    for bad in ["", "EU", "a b", "a;drop"] {
        let err = db
            .builder()
            .audit_shard(bad)
            .connect()
            .await
            .expect_err("refused");
        assert!(matches!(err, JournalError::Open { .. }), "{err:?}");
        let said = format!(
            "{err} {:?}",
            std::error::Error::source(&err).map(ToString::to_string)
        );
        assert!(said.contains("shard name"), "{said}");
    }
}

#[tokio::test]
async fn a_database_at_schema_version_7_gains_shards_and_every_record_keeps_its_hash() {
    let db = TestDb::create().await;
    let key = Key::new();
    let journal = on_shard(&db, DEFAULT_SHARD, &key).await;
    append(journal.as_ref(), 4).await;
    let cp = make_checkpoint(journal.as_ref(), &key.key)
        .await
        .expect("checkpoint");
    let before = journal.chain_rows().await.expect("rows");
    let heads = journal.signed_heads().await.expect("heads");
    drop(journal);
    db.sql()
        .await
        .batch_execute(UNDO_MIGRATION_8)
        .await
        .expect("downgrade");
    let seven: i64 = db
        .sql()
        .await
        .query_one("SELECT max(version) FROM sallyport_schema_version", &[])
        .await
        .expect("version")
        .get(0);
    assert_eq!(seven, 7);

    // Opened by this build: migrated, every record and signed head as it was, all signed.
    let journal = on_shard(&db, "eu", &key).await;
    let version: i64 = db
        .sql()
        .await
        .query_one("SELECT max(version) FROM sallyport_schema_version", &[])
        .await
        .expect("version")
        .get(0);
    assert_eq!(version, SCHEMA_VERSION);
    assert_eq!(journal.chain_rows().await.expect("rows"), before);
    assert_eq!(journal.signed_heads().await.expect("heads"), heads);
    let public = key.key.verifying_key();
    let report = journal.verify_signed(&public).await.expect("verify");
    assert_eq!((report.first_break, report.last_signed), (None, Some(4)));
    let proof = InclusionProof::build(&before, DEFAULT_SHARD, &cp, 3).expect("proof");
    proof
        .verify(&public)
        .expect("the old checkpoint still proves");
    // And the new shard appends beside the old chain.
    append(journal.as_ref(), 2).await;
    let report = journal.verify_signed(&public).await.expect("verify");
    assert_eq!(report.first_break, None, "{report:?}");
    assert_eq!(report.shards[1].head.count, 2);
}
