//! The one-flight batch: closes, dispatch notes and their records chained on the head this
//! journal last committed, moved with a compare-and-set that rolls the batch back when
//! another process moved it first.

use std::collections::HashMap;

use deadpool_postgres::Client;
use futures_util::future::join_all;

use super::chain::{ChainEnd, Tail, chain};
use super::ops::Done;
use crate::error::PostgresError;
use crate::shared::Shared;
use crate::sql;
use sallyport_core::journal::batch::Write;

/// What a batch sent in one flight needs of [`apply_batch`](super::batch::apply_batch)'s reading of it.
pub(super) struct Batch<'a> {
    pub(super) ops: &'a [Write],
    pub(super) begin: &'a str,
    /// Attempts the batch closes → the highest request number noted for each.
    pub(super) closed_here: &'a HashMap<&'a str, u32>,
    pub(super) epochs: &'a HashMap<String, i64>,
    pub(super) at: &'a String,
}

/// A batch of closes, dispatch notes and their records in one flight, the records chained
/// on `head`, the head this journal last committed: `BEGIN`, the notes, the closes, the
/// head moved from `head` to the chain's new end, the records, the signed head, `COMMIT`.
/// The answers are read only at the end, so what the two-flight path learns before it
/// chains (that a close was fenced, that the head moved) must abort the transaction
/// instead: those two statements fail on purpose ([`sql::ABORTED_ON_PURPOSE`]), and the
/// pipelined `COMMIT` rolls back. `Ok(None)` then: nothing was written, and the caller
/// sends the batch again in two flights, which reads the head under its lock and reports a
/// fenced close as such. Locks are taken in the two-flight order (attempt rows, then the
/// head, then the records), so a batch of each kind never waits on the other in a cycle.
pub(super) async fn single_flight(
    shared: &Shared,
    client: &Client,
    batch: &Batch<'_>,
    (seq, hash): ChainEnd,
) -> Result<Option<Vec<Done>>, PostgresError> {
    let pg = |e: tokio_postgres::Error| shared.redactor.postgres(&e);
    let ops = batch.ops;
    let has_note = ops.iter().any(|op| {
        matches!(op, Write::Dispatch(attempt, _) if !batch.closed_here.contains_key(attempt.as_str()))
    });
    let note = if has_note {
        Some(
            client
                .prepare_cached(sql::NOTE_DISPATCH)
                .await
                .map_err(pg)?,
        )
    } else {
        None
    };
    let close = client
        .prepare_cached(sql::CLOSE_ATTEMPT)
        .await
        .map_err(pg)?;
    let close_fenced = client
        .prepare_cached(sql::CLOSE_ATTEMPT_OR_ABORT)
        .await
        .map_err(pg)?;
    let move_head = client
        .prepare_cached(sql::MOVE_HEAD_FROM)
        .await
        .map_err(pg)?;
    let appending: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| op.event().is_some())
        .map(|(i, _)| i)
        .collect();
    let (records, chain_end) = chain(&shared.shard, ops, &appending, seq, hash.clone())?;
    let tail = Tail::prepare(shared, client, &records, chain_end, batch.at).await?;

    let at = batch.at;
    let notes = ops.iter().filter_map(|op| {
        let Write::Dispatch(attempt, n) = op else {
            return None;
        };
        if batch.closed_here.contains_key(attempt.as_str()) {
            return None;
        }
        let (note, epoch) = (note.as_ref()?, batch.epochs.get(attempt.as_str()).copied());
        Some(async move {
            client
                .execute(note, &[&attempt.as_str(), &i64::from(*n), at, &epoch])
                .await
                .map(drop)
        })
    });
    let closes = ops.iter().filter_map(|op| {
        let Write::Append(event, _) = op else {
            return None;
        };
        let attempt = event.attempt_id.as_str();
        let epoch = batch.epochs.get(attempt).copied();
        let dispatches = batch
            .closed_here
            .get(attempt)
            .copied()
            .unwrap_or(event.dispatches);
        // Without an epoch the close is not fenced, and a missing row changes nothing.
        let statement = if epoch.is_some() {
            &close_fenced
        } else {
            &close
        };
        let (close, phase, status) = (statement, event.phase.as_str(), event.status.as_str());
        Some(async move {
            client
                .query(
                    close,
                    &[
                        &attempt,
                        &phase,
                        &status,
                        &i64::from(dispatches),
                        at,
                        &epoch,
                    ],
                )
                .await
                .map(drop)
        })
    });
    let moved = async {
        match &tail.chain_end {
            Some((end, end_hash)) => client
                .query(&move_head, &[&seq, &hash, end, end_hash, &shared.shard])
                .await
                .map(drop),
            None => Ok(()),
        }
    };
    let (began, notes, closes, moved, inserted, signed_row, committed) = futures_util::join!(
        client.batch_execute(batch.begin),
        join_all(notes),
        join_all(closes),
        moved,
        tail.insert_records(client, &records),
        tail.insert_signed(client),
        client.batch_execute("COMMIT"),
    );
    let mut failure: Option<PostgresError> = None;
    let mut on_purpose = false;
    let results = [began, moved, inserted, signed_row, committed]
        .into_iter()
        .chain(notes)
        .chain(closes);
    for result in results {
        if let Err(e) = result {
            let e = pg(e);
            on_purpose |= e.code() == Some(sql::ABORTED_ON_PURPOSE);
            failure.get_or_insert(e);
        }
    }
    if on_purpose {
        // The pipelined `COMMIT` ended the aborted transaction; make sure none is open.
        shared.head_moved();
        client.batch_execute("ROLLBACK").await.map_err(pg)?;
        return Ok(None);
    }
    if let Some(e) = failure {
        return Err(e);
    }
    if let Some((end, end_hash)) = tail.chain_end {
        shared.keep_head(end, end_hash);
    }
    let mut done: Vec<Done> = ops.iter().map(|_| Done::Written).collect();
    for (i, _, record) in records {
        done[i] = Done::Record(Box::new(record));
    }
    Ok(Some(done))
}
