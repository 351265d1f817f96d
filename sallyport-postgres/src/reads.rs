//! Reads: each in one repeatable-read, read-only transaction, so the chain, the attempt
//! rows and the heads are one consistent snapshot even while other processes append.

use deadpool_postgres::Transaction;
use sallyport_core::journal::chain::{AttemptRow, ChainCheck, ChainRow};
use sallyport_core::journal::checkpoint::{Checkpoint, DEFAULT_SHARD};
use sallyport_core::journal::retention::Anchor;
use sallyport_core::journal::{
    AttemptId, AuditRecord, HeadVerifyingKey, IdempotencyKey, JournalError, Phase, SignedHead,
    UnresolvedAttempt, VerifyReport,
};
use tokio_postgres::IsolationLevel;
use tokio_postgres::Row;

use crate::error::PostgresError;
use crate::shared::Shared;
use crate::sql;

/// Runs `read` in one snapshot.
macro_rules! snapshot {
    ($shared:expr, |$tx:ident| $body:expr) => {{
        let shared: &Shared = $shared;
        let mut client = shared
            .pool
            .get()
            .await
            .map_err(|e| read_failed(shared.redactor.other(&e)))?;
        let $tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(|e| read_failed(shared.redactor.postgres(&e)))?;
        let out: Result<_, PostgresError> = $body;
        out.map_err(read_failed)
    }};
}

fn read_failed(e: PostgresError) -> JournalError {
    JournalError::Read(Box::new(e))
}

/// Every stored anchor (see `anchors.rs`).
pub(crate) async fn stored_anchors(
    shared: &Shared,
    tx: &Transaction<'_>,
) -> Result<Vec<Anchor>, PostgresError> {
    let rows = tx
        .query(sql::ANCHORS, &[])
        .await
        .map_err(|e| shared.redactor.postgres(&e))?;
    rows.iter()
        .map(|r| {
            let shard: String = r.get(0);
            let frontier: Vec<String> =
                serde_json::from_str(&r.get::<_, String>(3)).map_err(|e| {
                    PostgresError::own(format!(
                        "the anchor of shard `{shard}` has no readable frontier: {e}"
                    ))
                })?;
            let mut anchor = Anchor::genesis(shard);
            anchor.seq = u64::try_from(r.get::<_, i64>(1)).unwrap_or(0);
            anchor.hash = r.get(2);
            anchor.frontier = frontier;
            Ok(anchor)
        })
        .collect()
}

pub(crate) async fn chain_rows(
    shared: &Shared,
    tx: &Transaction<'_>,
) -> Result<Vec<ChainRow>, PostgresError> {
    let rows = tx
        .query(sql::CHAIN_ROWS, &[])
        .await
        .map_err(|e| shared.redactor.postgres(&e))?;
    Ok(rows
        .iter()
        .map(|r| {
            ChainRow::new(
                r.get::<_, i64>(0),
                r.get::<_, String>(1),
                r.get::<_, String>(2),
                r.get::<_, String>(3),
            )
            .in_shard(r.get::<_, String>(4))
        })
        .collect())
}

async fn check_chain(shared: &Shared, tx: &Transaction<'_>) -> Result<ChainCheck, PostgresError> {
    let mut check = ChainCheck::with_anchors(
        stored_anchors(shared, tx).await?,
        chain_rows(shared, tx).await?,
    );
    if check.is_intact() {
        let rows = tx
            .query(sql::ATTEMPT_ROWS, &[])
            .await
            .map_err(|e| shared.redactor.postgres(&e))?;
        check.check_attempts(rows.iter().map(|r| {
            AttemptRow::new(
                r.get::<_, String>(0),
                r.get::<_, String>(1),
                r.get::<_, Option<String>>(2),
            )
        }));
    }
    Ok(check)
}

async fn heads(shared: &Shared, tx: &Transaction<'_>) -> Result<Vec<SignedHead>, PostgresError> {
    let rows = tx
        .query(sql::HEADS, &[])
        .await
        .map_err(|e| shared.redactor.postgres(&e))?;
    Ok(rows
        .iter()
        .map(|r| {
            SignedHead::from_stored(
                u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
            )
            .in_shard(r.get::<_, String>(5))
        })
        .collect())
}

pub(crate) async fn stored_checkpoints(
    shared: &Shared,
    tx: &Transaction<'_>,
) -> Result<Vec<Checkpoint>, PostgresError> {
    let rows = tx
        .query(sql::CHECKPOINTS, &[])
        .await
        .map_err(|e| shared.redactor.postgres(&e))?;
    rows.iter()
        .map(|r| {
            let id: i64 = r.get(0);
            serde_json::from_str::<Checkpoint>(&r.get::<_, String>(1)).map_err(|e| {
                PostgresError::own(format!("checkpoint {id} is not a readable checkpoint: {e}"))
            })
        })
        .collect()
}

/// Every audit row as stored, oldest first.
pub(crate) async fn rows(shared: &Shared) -> Result<Vec<ChainRow>, JournalError> {
    snapshot!(shared, |tx| chain_rows(shared, &tx).await)
}

/// Every anchor of a pruned shard.
pub(crate) async fn anchors(shared: &Shared) -> Result<Vec<Anchor>, JournalError> {
    snapshot!(shared, |tx| stored_anchors(shared, &tx).await)
}

/// Every signed checkpoint, oldest first.
pub(crate) async fn checkpoints(shared: &Shared) -> Result<Vec<Checkpoint>, JournalError> {
    snapshot!(shared, |tx| stored_checkpoints(shared, &tx).await)
}

/// Stores a signed checkpoint.
pub(crate) async fn store_checkpoint(
    shared: &Shared,
    checkpoint: &Checkpoint,
) -> Result<(), JournalError> {
    let body = serde_json::to_string(checkpoint).map_err(|e| JournalError::Write(Box::new(e)))?;
    let size = checkpoint
        .shard(DEFAULT_SHARD)
        .map_or(0, |h| i64::try_from(h.size).unwrap_or(i64::MAX));
    let client = shared
        .pool
        .get()
        .await
        .map_err(|e| JournalError::Write(Box::new(shared.redactor.other(&e))))?;
    client
        .execute(
            sql::INSERT_CHECKPOINT,
            &[&size, &checkpoint.signed_at, &body],
        )
        .await
        .map_err(|e| JournalError::Write(Box::new(shared.redactor.postgres(&e))))?;
    Ok(())
}

/// The chain and the attempt rows, checked.
pub(crate) async fn verify(shared: &Shared) -> Result<VerifyReport, JournalError> {
    snapshot!(shared, |tx| check_chain(shared, &tx)
        .await
        .map(ChainCheck::into_report))
}

/// The chain, the attempt rows, the signed heads and the checkpoints, checked with `key`.
pub(crate) async fn verify_signed(
    shared: &Shared,
    key: &HeadVerifyingKey,
) -> Result<VerifyReport, JournalError> {
    snapshot!(shared, |tx| {
        match (
            heads(shared, &tx).await,
            stored_checkpoints(shared, &tx).await,
        ) {
            (Ok(heads), Ok(checkpoints)) => check_chain(shared, &tx).await.map(|mut check| {
                check.check_signed(&heads, &checkpoints, key);
                check.into_report()
            }),
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    })
}

/// The signed heads, oldest first.
pub(crate) async fn signed_heads(shared: &Shared) -> Result<Vec<SignedHead>, JournalError> {
    snapshot!(shared, |tx| heads(shared, &tx).await)
}

/// Every record, oldest first.
pub(crate) async fn records(shared: &Shared) -> Result<Vec<AuditRecord>, JournalError> {
    snapshot!(shared, |tx| {
        match chain_rows(shared, &tx).await {
            Ok(rows) => rows
                .into_iter()
                .map(|row| {
                    let seq = row.seq;
                    row.into_record().map_err(|e| {
                        PostgresError::own(format!("record {seq} is not an audit event: {e}"))
                    })
                })
                .collect(),
            Err(e) => Err(e),
        }
    })
}

/// Attempts no record closes.
pub(crate) async fn unresolved(shared: &Shared) -> Result<Vec<UnresolvedAttempt>, JournalError> {
    snapshot!(shared, |tx| {
        tx.query(sql::UNRESOLVED, &[])
            .await
            .map_err(|e| shared.redactor.postgres(&e))
            .map(|rows| rows.iter().map(with_lease).collect())
    })
}

/// An unresolved attempt with its owner and lease (columns 8 and 9 of [`sql::UNRESOLVED`]).
/// The lease is read as the time left on the server's clock and placed on this machine's
/// clock, so a reconciler comparing it with its own time is not misled by clock skew.
fn with_lease(row: &Row) -> UnresolvedAttempt {
    let mut attempt = unresolved_attempt(row);
    let left: i64 = row.get(9);
    let now = sallyport_core::clock::now_ms();
    attempt.owner = Some(row.get(8));
    attempt.lease_until_ms = Some(if left >= 0 {
        now.saturating_add(left.unsigned_abs())
    } else {
        now.saturating_sub(left.unsigned_abs())
    });
    attempt
}

/// An unresolved attempt from the first eight columns of `row` (see [`sql::UNRESOLVED`]).
pub(crate) fn unresolved_attempt(row: &Row) -> UnresolvedAttempt {
    let phase =
        AttemptRow::new(row.get::<_, String>(0), row.get::<_, String>(4), None).unresolved_phase();
    debug_assert!(matches!(phase, Phase::IntentWritten | Phase::Dispatched));
    UnresolvedAttempt {
        attempt_id: AttemptId::from_stored(row.get::<_, String>(0)),
        action: row.get(1),
        session_id: row.get(2),
        idempotency_key: IdempotencyKey::from_stored(row.get::<_, String>(3)),
        phase,
        dispatches: u32::try_from(row.get::<_, i64>(5)).unwrap_or(u32::MAX),
        arguments: serde_json::from_str(&row.get::<_, String>(6)).unwrap_or_default(),
        created_at: row.get(7),
        // Filled by `with_lease` where the query selects them.
        owner: None,
        lease_until_ms: None,
    }
}
