//! Retention ([`sallyport_core::journal::retention`]): pruning a sealed range.
//!
//! The anchors live in `sallyport_anchors` (migration 9), one row per pruned shard, read
//! with the chain in every snapshot (`reads.rs`). A prune is one read-write transaction that
//! first locks the shard's head row, as an append to the shard does, so no record of the
//! shard is appended meanwhile; it reads the anchors, the chain and the checkpoints, lets
//! [`plan_prune`] check the anchor against them, then deletes the shard's records up to the
//! anchor and the attempt rows only they closed, and stores the anchor. The head row keeps
//! its position and hash, so the next append follows the pruned records.

use sallyport_core::journal::JournalError;
use sallyport_core::journal::retention::{Anchor, plan_prune};

use crate::error::PostgresError;
use crate::reads::{chain_rows, stored_anchors, stored_checkpoints};
use crate::shared::Shared;
use crate::sql;

/// Prunes the records `anchor` seals; returns how many went.
pub(crate) async fn prune(shared: &Shared, anchor: &Anchor) -> Result<u64, JournalError> {
    let failed = |e: PostgresError| JournalError::Write(Box::new(e));
    let mut client = shared
        .pool
        .get()
        .await
        .map_err(|e| failed(shared.redactor.other(&e)))?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| failed(shared.redactor.postgres(&e)))?;
    let pg = |e: tokio_postgres::Error| failed(shared.redactor.postgres(&e));
    let locked = tx
        .query_opt(sql::LOCK_HEAD, &[&anchor.shard])
        .await
        .map_err(pg)?;
    if locked.is_none() {
        return Err(JournalError::PruneRefused {
            reason: format!("this journal has no shard `{}`", anchor.shard),
        });
    }
    let anchors = stored_anchors(shared, &tx).await.map_err(failed)?;
    let rows = chain_rows(shared, &tx).await.map_err(failed)?;
    let checkpoints = stored_checkpoints(shared, &tx).await.map_err(failed)?;
    let plan = plan_prune(&anchors, &rows, &checkpoints, anchor)?;
    let upto = i64::try_from(anchor.seq).unwrap_or(i64::MAX);
    let deleted = tx
        .execute(sql::PRUNE_RECORDS, &[&anchor.shard, &upto])
        .await
        .map_err(pg)?;
    if deleted != plan.records {
        return Err(JournalError::PruneRefused {
            reason: format!(
                "{deleted} records matched, {} expected: the journal changed meanwhile",
                plan.records
            ),
        });
    }
    tx.execute(sql::PRUNE_ATTEMPTS, &[&plan.attempts])
        .await
        .map_err(pg)?;
    let frontier =
        serde_json::to_string(&anchor.frontier).map_err(|e| JournalError::Write(Box::new(e)))?;
    tx.execute(
        sql::UPSERT_ANCHOR,
        &[&anchor.shard, &upto, &anchor.hash, &frontier],
    )
    .await
    .map_err(pg)?;
    tx.commit().await.map_err(pg)?;
    Ok(plan.records)
}
