//! The two-flight batch: `BEGIN`, the attempt rows, the dispatch notes, the closes and the
//! chain-head lock in one flight; the compare-and-sets one by one; then the records, the
//! head and `COMMIT` (or a batch that appends nothing, committed in the first flight).

use std::collections::HashMap;

use deadpool_postgres::Client;
use futures_util::future::join_all;
use tokio_postgres::types::ToSql;

use super::chain::{Tail, chain};
use super::ops::{Done, Op};
use super::single_flight::{Batch, single_flight};
use crate::approvals::ApprovalOp;
use crate::error::PostgresError;
use crate::shared::Shared;
use crate::sql;

/// The batch's operations that write an attempt row (intents and observe calls), with
/// their places in the batch, in the order of their idempotency keys.
fn in_key_order(ops: &[Op]) -> impl Iterator<Item = (usize, &Op)> {
    let mut rows: Vec<(usize, &Op, &str)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, op)| match op {
            Op::Intent(intent, _) | Op::Observe(intent, ..) => {
                Some((i, op, intent.idempotency_key.as_str()))
            }
            _ => None,
        })
        .collect();
    rows.sort_by(|a, b| a.2.cmp(b.2));
    rows.into_iter().map(|(i, op, _)| (i, op))
}

/// The batch's statements, sent in two flights, each without waiting for the answers of
/// the statements before it (a round trip costs two wake-ups and two context switches,
/// which on two cores is CPU the calls need): first `BEGIN`, the attempt rows, the dispatch
/// notes, the closes and the chain-head lock; then the records, the head and `COMMIT`. An
/// approval or a reconciler's close, each a compare-and-set that reads what the one before
/// it wrote, runs one at a time between the two, and the head is then locked after them.
/// A statement that fails aborts the transaction, so the `COMMIT` sent behind it rolls
/// back: the batch is written whole or not at all, as with one statement at a time. A
/// batch with no record to chain and nothing to read back sends its `COMMIT` in the first
/// flight, so a batch of intents costs one round trip (and its flush), not two.
pub(super) async fn apply_batch(
    shared: &Shared,
    client: &Client,
    ops: &[Op],
) -> Result<Vec<Done>, PostgresError> {
    let redact = &shared.redactor;
    let pg = |e: tokio_postgres::Error| redact.postgres(&e);
    let prepare = |sql: &'static str| async move { client.prepare_cached(sql).await };
    // A statement the batch needs, prepared (once per connection: cached after that).
    let prepare_if = |needed: bool, sql: &'static str| async move {
        if needed {
            client.prepare_cached(sql).await.map(Some)
        } else {
            Ok(None)
        }
    };
    let epochs = shared.epochs_snapshot(ops);
    let lease_ms = shared.lease_ms();
    let at = sallyport_core::clock::now();
    let mut done: Vec<Done> = ops.iter().map(|_| Done::Written).collect();
    let one_at_a_time = ops
        .iter()
        .any(|op| matches!(op, Op::Approval(_) | Op::Settle(..)));
    let may_append = ops.iter().any(|op| op.event().is_some());

    // A dispatch note for an attempt that the same batch closes says nothing the close does
    // not: the close takes the highest request number of both, and is fenced the same way.
    let mut closed_here: HashMap<&str, u32> = HashMap::new();
    for op in ops {
        if let Op::Append(event, _) = op {
            closed_here.insert(event.attempt_id.as_str(), event.dispatches);
        }
    }
    for op in ops {
        if let Op::Dispatch(attempt, n) = op
            && let Some(dispatches) = closed_here.get_mut(attempt.as_str())
        {
            *dispatches = (*dispatches).max(*n);
        }
    }

    // A batch nothing is sent on the strength of commits asynchronously: a server crash
    // may lose its last few milliseconds of records (never a durable intent: a synchronous
    // commit flushes everything before it). A process crash loses nothing.
    let begin = if ops.iter().any(Op::is_durable) {
        "BEGIN"
    } else {
        "BEGIN; SET LOCAL synchronous_commit TO off"
    };

    // Closes and their records, with the head this journal last wrote: one flight.
    let closes_only = ops
        .iter()
        .all(|op| matches!(op, Op::Append(..) | Op::Dispatch(..)));
    if may_append
        && closes_only
        && let Some(head) = shared.cached_head()
    {
        let batch = Batch {
            ops,
            begin,
            closed_here: &closed_here,
            epochs: &epochs,
            at: &at,
        };
        if let Some(done) = single_flight(shared, client, &batch, head).await? {
            return Ok(done);
        }
    }

    let has = |f: fn(&Op) -> bool| ops.iter().any(f);
    let insert_intent = prepare_if(has(|op| matches!(op, Op::Intent(..))), sql::INSERT_INTENT)
        .await
        .map_err(pg)?;
    let insert_closed = prepare_if(has(|op| matches!(op, Op::Observe(..))), sql::INSERT_CLOSED)
        .await
        .map_err(pg)?;
    let note = prepare_if(has(|op| matches!(op, Op::Dispatch(..))), sql::NOTE_DISPATCH)
        .await
        .map_err(pg)?;
    let close = prepare_if(has(|op| matches!(op, Op::Append(..))), sql::CLOSE_ATTEMPT)
        .await
        .map_err(pg)?;
    let lock_head = prepare_if(may_append, sql::LOCK_HEAD).await.map_err(pg)?;

    // Flight 1. Attempt rows go in idempotency-key order: the two intent writers' batches
    // may hold the same keys (a key reused by calls in flight at once), and each insert
    // waits on a key the other's open transaction holds. Taken in one order, the second
    // batch waits for the first to commit; taken in opposite orders, they would deadlock
    // until PostgreSQL aborted one (after `deadlock_timeout`) and refused its calls.
    let rows = in_key_order(ops).filter_map(|(i, op)| {
        let (statement, intent, event) = match op {
            Op::Intent(intent, _) => (insert_intent.as_ref()?, intent, None),
            Op::Observe(intent, event, _) => (insert_closed.as_ref()?, intent, Some(event)),
            _ => return None,
        };
        let (at, owner) = (&at, &shared.owner);
        Some(async move {
            let arguments = intent.arguments.to_string();
            let mut params: Vec<Box<dyn ToSql + Sync + Send>> = vec![
                Box::new(intent.attempt_id.as_str().to_owned()),
                Box::new(intent.action.clone()),
                Box::new(intent.session_id.clone()),
                Box::new(intent.idempotency_key.as_str().to_owned()),
                Box::new(intent.fingerprint.clone()),
                Box::new(intent.definition_hash.clone()),
                Box::new(intent.effect.as_str().to_owned()),
                Box::new(arguments),
            ];
            match event {
                None => {
                    params.push(Box::new(at.clone()));
                    params.push(Box::new(owner.clone()));
                    params.push(Box::new(lease_ms));
                }
                Some(event) => {
                    params.push(Box::new(event.phase.as_str().to_owned()));
                    params.push(Box::new(i64::from(event.dispatches)));
                    params.push(Box::new(event.status.as_str().to_owned()));
                    params.push(Box::new(at.clone()));
                    params.push(Box::new(owner.clone()));
                }
            }
            let refs: Vec<&(dyn ToSql + Sync)> = params
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            (i, client.query(statement, &refs).await)
        })
    });
    let notes = ops.iter().filter_map(|op| {
        let Op::Dispatch(attempt, n) = op else {
            return None;
        };
        if closed_here.contains_key(attempt.as_str()) {
            return None;
        }
        let (note, epoch, at) = (note.as_ref()?, epochs.get(attempt.as_str()).copied(), &at);
        Some(async move {
            client
                .execute(note, &[&attempt.as_str(), &i64::from(*n), at, &epoch])
                .await
        })
    });
    // Attempt closes, fenced by the epoch this journal holds.
    let closes = ops.iter().enumerate().filter_map(|(i, op)| {
        let Op::Append(event, _) = op else {
            return None;
        };
        let close = close.as_ref()?;
        let attempt = event.attempt_id.as_str();
        let epoch = epochs.get(attempt).copied();
        let dispatches = closed_here
            .get(attempt)
            .copied()
            .unwrap_or(event.dispatches);
        let at = &at;
        Some(async move {
            let result = client
                .query(
                    close,
                    &[
                        &attempt,
                        &event.phase.as_str(),
                        &event.status.as_str(),
                        &i64::from(dispatches),
                        at,
                        &epoch,
                    ],
                )
                .await;
            (i, epoch.is_some(), result)
        })
    });
    let head = async {
        match &lock_head {
            Some(lock) if !one_at_a_time => Some(client.query_one(lock, &[]).await),
            _ => None,
        }
    };
    // A batch that appends nothing and has no compare-and-set to read back (intents,
    // dispatch notes) needs no answer before its end: its `COMMIT` goes in the same flight.
    // Nothing in it can fail quietly: a taken key or a fenced close is a row not returned,
    // and an error aborts the transaction, so the `COMMIT` behind it rolls back.
    let commit_now = !may_append && !one_at_a_time;
    let early_commit = async {
        if commit_now {
            Some(client.batch_execute("COMMIT").await)
        } else {
            None
        }
    };
    // `join!` polls in order, and each statement is sent when first polled: the server
    // receives them in this order.
    let (began, rows, notes, closes, head, early_commit) = futures_util::join!(
        client.batch_execute(begin),
        join_all(rows),
        join_all(notes),
        join_all(closes),
        head,
        early_commit,
    );
    began.map_err(pg)?;
    for (i, result) in rows {
        if result.map_err(pg)?.is_empty() {
            done[i] = Done::Duplicate;
        }
    }
    for result in notes {
        result.map_err(pg)?;
    }
    for (i, fenced_if_missing, result) in closes {
        if result.map_err(pg)?.is_empty() && fenced_if_missing {
            done[i] = Done::Fenced;
        }
    }
    let mut head = head.transpose().map_err(pg)?;
    if let Some(committed) = early_commit {
        committed.map_err(pg)?;
        return Ok(done);
    }

    if one_at_a_time {
        // The reconciler's closes: one statement at a time, each a compare-and-set.
        let settle = prepare(sql::SETTLE_ATTEMPT).await.map_err(pg)?;
        for (i, op) in ops.iter().enumerate() {
            let Op::Settle(event, _) = op else {
                continue;
            };
            let rows = client
                .query(
                    &settle,
                    &[
                        &event.attempt_id.as_str(),
                        &event.phase.as_str(),
                        &event.status.as_str(),
                        &i64::from(event.dispatches),
                        &at,
                    ],
                )
                .await
                .map_err(pg)?;
            if rows.is_empty() {
                done[i] = Done::Fenced;
            }
        }
        // Approval compare-and-sets, one after another (each reads what the last wrote).
        // Rows are locked in approval-id order, so two processes' batches never wait on
        // each other in a cycle; changes to one approval keep the order they were made in.
        let mut changes: Vec<(usize, &ApprovalOp)> = ops
            .iter()
            .enumerate()
            .filter_map(|(i, op)| match op {
                Op::Approval(op) => Some((i, op.as_ref())),
                _ => None,
            })
            .collect();
        changes.sort_by(|a, b| a.1.approval_id().as_str().cmp(b.1.approval_id().as_str()));
        for (i, op) in changes {
            done[i] = crate::approvals::apply(shared, client, op, &epochs, lease_ms, &at)
                .await
                .map_err(|e| e.into_postgres(shared))?;
        }
        // The chain lock last, so that it is held for the inserts and the commit only.
        if let Some(lock) = &lock_head {
            head = Some(client.query_one(lock, &[]).await.map_err(pg)?);
        }
    }

    // The chain.
    let appending: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(i, op)| {
            op.event().is_some()
                && match &done[*i] {
                    Done::Written => true,
                    Done::Transition(_, appends) => *appends,
                    _ => false,
                }
        })
        .map(|(i, _)| i)
        .collect();
    let (records, chain_end) = match head.filter(|_| !appending.is_empty()) {
        Some(head) => chain(ops, &appending, head.get(0), head.get(1))?,
        None => (Vec::new(), None),
    };
    let tail = Tail::prepare(shared, client, &records, chain_end, &at).await?;
    let set_head = prepare_if(tail.chain_end.is_some(), sql::SET_HEAD)
        .await
        .map_err(pg)?;

    // Flight 2.
    let moved = async {
        match (&set_head, &tail.chain_end) {
            (Some(set), Some((seq, hash))) => Some(client.execute(set, &[seq, hash]).await),
            _ => None,
        }
    };
    let (inserted, moved, signed_row, committed) = futures_util::join!(
        tail.insert_records(client, &records),
        moved,
        tail.insert_signed(client),
        client.batch_execute("COMMIT"),
    );
    inserted.map_err(pg)?;
    moved.transpose().map_err(pg)?;
    signed_row.map_err(pg)?;
    committed.map_err(pg)?;
    if let Some((seq, hash)) = tail.chain_end {
        shared.keep_head(seq, hash);
    }
    for (i, _, record) in records {
        done[i] = match std::mem::replace(&mut done[i], Done::Written) {
            Done::Transition(t, _) => Done::TransitionRecord(t, Box::new(record)),
            _ => Done::Record(Box::new(record)),
        };
    }
    Ok(done)
}
